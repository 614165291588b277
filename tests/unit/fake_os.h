/* fake_os.h — the unit tests' stand-in for allocator/os.c: real memory, but a
 * settable clock, a fake environment, captured stderr, and a record of every
 * map, unmap and purge (habit 4: a test seam for the OS layer). */
#ifndef FAKE_OS_H
#define FAKE_OS_H
#include <stddef.h>
#include <stdint.h>

extern uint64_t fake_now;                          /* what os_now_ms returns */
extern size_t fake_maps, fake_unmaps, fake_purges; /* call counts */
extern size_t fake_zeroes;                         /* os_zero calls */
extern size_t fake_purged_bytes;                   /* bytes passed to os_purge */
extern const char *fake_env[16];                   /* "NAME=value" strings seen by os_getenv */
extern char fake_stderr[4096];                     /* what was written to fd 2 */
extern size_t fake_stderr_len;
/* Failure injection: while fake_fail_maps > 0, os_map (hence os_map_aligned)
 * fails and decrements it; fake_fail_resizes does the same for
 * os_resize_inplace and os_move_into, fake_fail_leaves for os_map of a
 * registry leaf. While fake_far_maps > 0, os_map_aligned maps (and
 * decrements it) at the start of a 512 GiB window of the address space that no
 * registry leaf covers yet, so that registering there needs a new leaf. fake_refused counts refused calls,
 * fake_resizes / fake_moves the calls not refused. fake_reset clears them all. */
extern int fake_fail_maps, fake_fail_resizes, fake_fail_leaves, fake_far_maps;
/* While fake_fail_purges > 0, os_purge leaves the bytes (as the kernel does on
 * locked pages) and returns false. */
extern int fake_fail_purges;
extern size_t fake_refused, fake_resizes, fake_moves;
/* Called by os_unmap before it unmaps, when set (fake_reset leaves it). */
extern void (*fake_on_unmap)(void *p, size_t size);
void fake_reset(void);
/* Whether [p, p+n) was purged since the last fake_reset. */
int fake_was_purged(const void *p, size_t n);
#endif
