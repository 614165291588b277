/* track.h — tells Valgrind's memcheck about ebb's blocks, as mimalloc's track.h does.
 * Built with -DEBB_VALGRIND=1 these are client requests (a few no-op instructions
 * when not under Valgrind); otherwise they compile to nothing.
 * The allocator reads and writes free blocks (free-list links, the free cookie), so
 * it marks those words accessible around each access; a live block's cookie
 * word (maybe uninitialised user data) is read into a copy marked defined, so
 * the user's bytes keep their state. Blocks are registered at their usable
 * size, which is what malloc_usable_size promises may be written. */
#ifndef EBB_TRACK_H
#define EBB_TRACK_H
#ifndef EBB_VALGRIND
#define EBB_VALGRIND 0
#endif
#if EBB_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define track_malloc(p, size, zero) VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zero)
#define track_free(p) VALGRIND_FREELIKE_BLOCK(p, 0)
#define track_open(p, n) VALGRIND_MAKE_MEM_DEFINED(p, n)
#define track_close(p, n) VALGRIND_MAKE_MEM_NOACCESS(p, n)
#define track_quiet_begin() VALGRIND_DISABLE_ERROR_REPORTING
#define track_quiet_end() VALGRIND_ENABLE_ERROR_REPORTING
#else
#define track_malloc(p, size, zero) ((void)0)
#define track_free(p) ((void)0)
#define track_open(p, n) ((void)0)
#define track_close(p, n) ((void)0)
#define track_quiet_begin() ((void)0)
#define track_quiet_end() ((void)0)
#endif
#endif
