/* os.h — the one interface to the kernel. Every mmap, munmap, madvise, mremap,
 * clock read, page-size query, environment read and raw write goes through here
 * (tests/unit/fake_os.c provides the same functions over a fake clock).
 * All functions preserve errno and never allocate. */
#ifndef EBB_OS_H
#define EBB_OS_H
#include "common.h"

/* size > 0 and a multiple of OS_PAGE. Returns NULL when the kernel refuses. */
void *os_map(size_t size);
/* As os_map, and the result is aligned to align (a power of two >= OS_PAGE). */
void *os_map_aligned(size_t size, size_t align);
/* p and size page aligned, p was returned by os_map* (or lies inside such a map). */
void os_unmap(void *p, size_t size);
/* Returns the pages to the kernel; later reads see zeroes (MADV_DONTNEED) or
 * either old data or zeroes (MADV_FREE, when use_free). p, size page aligned.
 * True only when the range now reads as zeroes: MADV_DONTNEED succeeded. The
 * kernel refuses it on locked pages (mlock, mlockall: EINVAL), and a seccomp
 * filter may refuse madvise outright; the old bytes then stay, and whoever
 * counts on zeroes (calloc, chunk.c's zero_units) must not. */
bool os_purge(void *p, size_t size, bool use_free);
/* Zeroes [p, p+size), p page-aligned, touching only pages that are resident:
 * mincore tells which; the others are dropped with MADV_DONTNEED (they then
 * read as zeroes, a swapped-out page's content included) instead of being
 * faulted in to be written. Where either call fails, memset. For calloc of a
 * reused block, whose previous user may have written few of its pages. */
void os_zero(void *p, size_t size);
/* Grows or shrinks the mapping [p, p+old) to new bytes without moving it.
 * Returns false (mapping unchanged) when the address range after it is taken. */
bool os_resize_inplace(void *p, size_t old_size, size_t new_size);
/* Moves the mapping [p, p+old) onto dst, a fresh mapping of new bytes (from
 * os_map_aligned), resized, without copying (mremap). Returns dst, or NULL on
 * failure: the mapping at p unchanged, dst given back. The caller maps dst
 * first so that it can prepare what the new address needs (its registry leaf)
 * while a refusal still leaves the block where it was. */
void *os_move_into(void *p, size_t old_size, size_t new_size, void *dst);

uint64_t os_now_ms(void);                /* monotonic milliseconds */
size_t os_page_size(void);               /* the kernel's page size */
/* A symbol of a library loaded after start-up, by name (dlsym), or NULL: for
 * a failed operator new only (public.c). */
void *os_cxx_symbol(const char *name);
/* The C++ runtime's own definition of name (libstdc++'s, else libc++'s), when
 * that library is loaded, never another library's that replaces it (ebb's, or
 * another allocator's); NULL otherwise. For a failed nothrow operator new only
 * (public.c). */
void *os_cxx_runtime_symbol(const char *name);
const char *os_getenv(const char *name); /* raw environ walk; no allocation */
void os_write(int fd, const char *s, size_t n);
/* A close-on-exec duplicate of fd, numbered high (999 or the highest that
 * the descriptor limit allows below it, else >= 3) to stay out of the
 * program's way; fd itself if that fails. */
int os_dup_fd(int fd);
/* What open file fd is (device and inode); false if fd is not open. */
bool os_fd_identity(int fd, uint64_t id[2]);
__attribute__((noreturn)) void os_abort(void);
void os_yield(void);             /* sched_yield: a spin lock's back-off */
void os_sleep_ms(uint64_t ms);   /* nanosleep; only the background thread sleeps */
/* Yields while busy() says so, at most about ms; false if it still did. */
bool os_wait_while(bool (*busy)(void), uint64_t ms);
/* Whether the calling thread is the process's last live one (/proc/self/stat;
 * true if unreadable, so that the background thread ends). Background thread only,
 * and only once the first thread is gone or unknown (thread.c: main_thread_state). */
bool os_only_thread_left(void);
/* A full memory barrier on every thread of the process (membarrier's private
 * expedited command: running threads get an interrupt, others are past a
 * context switch), registered on first use. False when the kernel has no
 * such command or refuses it (then nothing was fenced). arena.c's handshake
 * with an idle owner (arena_reclaim_queues_locked) rests on it. */
bool os_fence_threads(void);

/* Threads. libc may hold internal locks while it calls malloc or free (glibc's
 * stack-cache lock in pthread_create and pthread_join, ld.so's locks, fork's
 * atfork lock), so none of these may be called from a malloc/free/realloc path:
 * only from ebb's constructor, the pthread_create wrapper below, or the
 * background thread. See docs/architecture.md, "Threads, fork". */
/* Finds libc's own pthread_create behind ebb's wrapper; false if there is none
 * (a fully static link without -Wl,-u,__pthread_create_2_1). */
bool os_thread_init(void);
/* Runs before(&fn, &arg) in every thread that calls pthread_create, before
 * the thread is created (ebb's pthread_create wrapper lives here, with the
 * call to libc's); it may replace the start routine and its argument, and
 * failed(arg) then runs if libc's pthread_create fails. */
void os_on_thread_create(void (*before)(void *(**fn)(void *), void **arg), void (*failed)(void *arg));
/* A robust mutex the process's first thread holds from here on (called in
 * that thread: the constructor, a fork child's first thread), which the
 * kernel marks when the thread ends, however it ends: os_main_alive then
 * says so without opening a file. */
void os_main_alive_mark(void);
/* 1 while the thread that called os_main_alive_mark lives, 0 once it ended,
 * -1 if not known (never marked). Background thread only. */
int os_main_alive(void);
/* Whether the calling thread is the process's first (its id is the pid):
 * its thread-local storage is never freed, even after it calls pthread_exit. */
bool os_is_main_thread(void);
/* Starts a detached thread running fn(NULL) on a small stack. */
bool os_thread_start(void *(*fn)(void *));
/* One pthread key whose destructor runs at every thread's exit with the value set. */
bool os_exit_key_create(void (*dtor)(void *));
bool os_exit_key_set(void *value); /* may call malloc (glibc's second-level key block); false if not set */
/* Runs before() ahead of every _Fork the program calls (ebb's _Fork wrapper,
 * libebb.so only; fork runs the atfork handlers instead) and after(child)
 * once it returned, in the parent and in the child. Constructor only. */
void os_on_raw_fork(void (*before)(void), void (*after)(bool child));
/* pthread_atfork: takes glibc's atfork lock and may allocate. Constructor only. */
void os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
uint64_t os_random_seed(void); /* per-process entropy (AT_RANDOM) */
/* The i-th "NAME=value" string of the environment (raw environ), NULL after
 * the last; i counts up from 0 and stops at the first NULL. No allocation.
 * How options find EBB_* variables that are no setting. */
const char *os_environ_at(size_t i);
/* Resident bytes of the whole process as the kernel counts them (the second
 * field of /proc/self/statm, read with open/read/close into a stack buffer);
 * 0 when it cannot be read. */
size_t os_resident_bytes(void);
int os_getpid(void);

/* System-call counters, for ebb_stats. */
typedef struct {
  atomic_uint_fast64_t mmap_calls, munmap_calls, madvise_calls;
} os_counters_t;
extern os_counters_t os_counters;
#endif
