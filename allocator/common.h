/* common.h — constants, types and check macros shared by every layer.
 * Owns: the geometry (chunk ⊃ unit ⊃ OS page; page = a span of units serving one
 * size class), the three tiers of checks, and the fatal path's declaration.
 * Includes only libc headers; never allocates. */
#ifndef EBB_COMMON_H
#define EBB_COMMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef EBB_DEBUG
#define EBB_DEBUG 0 /* 0: release, 1: assertions, 2: + expensive validators */
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define EBB_NOINLINE __attribute__((noinline))
#define EBB_COLD __attribute__((cold, noinline))
#define EBB_INLINE static inline __attribute__((always_inline))
#define EBB_EXPORT __attribute__((visibility("default")))
/* The entry points every allocation goes through start on a cache line: where
 * they started otherwise followed from the size of unrelated code before them,
 * and one such move (malloc 16 bytes past a line's start, code added to
 * arena.c) made bench/loop 6.3 ns a pair instead of 5.2-5.3 on the Intel Xeon
 * VM (7 interleaved runs each), with the very same instructions. */
#define EBB_HOT_ENTRY __attribute__((aligned(64)))

/* Geometry. A chunk is 4 MiB aligned to its size; it is cut into 64 units of
 * 64 KiB; unit 0 holds the chunk header, units 1..63 are handed out as pages
 * (spans of 1..32 units). Any pointer's chunk is found by masking. */
#define CHUNK_SHIFT 22
#define CHUNK_SIZE ((size_t)1 << CHUNK_SHIFT)
#define UNIT_SHIFT 16
#define UNIT_SIZE ((size_t)1 << UNIT_SHIFT)
#define CHUNK_UNITS (CHUNK_SIZE / UNIT_SIZE)
#define MIN_ALIGN 16
#define OS_PAGE 4096                 /* granularity of purging; checked against the real page size at init */
#define MAX_CHUNK_ALIGN (CHUNK_SIZE / 4) /* larger alignments get their own mapping (arena_malloc_aligned) */

#define align_up(x, a) (((x) + ((a)-1)) & ~((uintptr_t)(a)-1))
#define align_down(x, a) ((x) & ~((uintptr_t)(a)-1))

/* Fields that one thread writes while others may read them without a lock (a
 * page's geometry, read by other threads' frees and by ebb_owns; counters read
 * by ebb_stats) are accessed as relaxed atomics: the same plain moves on
 * x86-64, and free of data races by the C11 memory model. */
#define relaxed_load(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define relaxed_store(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

#if defined(__SANITIZE_THREAD__)
#define EBB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EBB_TSAN 1
#endif
#endif

/* Adds n to a counter only its owner thread writes while others read it with
 * relaxed_load (a page's `used`, a cache slot's room: ebb_stats sums them).
 * A relaxed load and store cannot become one read-modify-write instruction
 * (three on the malloc and free fast paths, where one plain add is one), so
 * the release build adds plainly, as mimalloc does its page->used: on the
 * machines ebb supports an aligned 32-bit add is never seen half done. The
 * ThreadSanitizer build keeps the atomic form, so the race it would report is
 * only this benign one, and it checks everything else. Evaluates to the new
 * value. */
#ifdef EBB_TSAN
#define owner_add(x, n) (relaxed_store(x, (x) + (n)), (x))
#else
#define owner_add(x, n) ((x) += (n))
#endif

/* A relaxed_load on the free fast path. GCC never folds an atomic load into
 * the instruction that uses it (a compare, a subtract, a multiply with a
 * memory operand), so each costs a move of its own: six on free's path. The
 * release build reads those fields plainly, as it adds with owner_add, for
 * the same reason (an aligned load is never seen half done); the
 * ThreadSanitizer build keeps the atomic form. Only for a value read once. */
#ifdef EBB_TSAN
#define fast_load(x) relaxed_load(x)
#else
#define fast_load(x) (x)
#endif

/* Fatal path: writes "ebb: <func>: <msg> 0x<ptr>" to fd 2 and aborts. Never
 * allocates (formats into a stack buffer). */
__attribute__((noreturn, cold)) void ebb_fatal(const char *func, const char *msg, const void *p);

/* Checks. EBB_CHECK is always on and cheap; ebb_assert runs in debug builds;
 * ebb_assert_expensive runs full validators in the heavy debug build. Written
 * as ordinary ifs so debug code always compiles. */
#define EBB_CHECK(e, func, msg, p)                                                                           \
  do {                                                                                                       \
    if (unlikely(!(e))) ebb_fatal(func, msg, p);                                                             \
  } while (0)
#define ebb_assert(e)                                                                                        \
  do {                                                                                                       \
    if (EBB_DEBUG >= 1 && !(e)) ebb_fatal(__func__, "assertion failed: " #e, NULL);                          \
  } while (0)
#define ebb_assert_expensive(e)                                                                              \
  do {                                                                                                       \
    if (EBB_DEBUG >= 2 && !(e)) ebb_fatal(__func__, "validation failed: " #e, NULL);                         \
  } while (0)

/* Bits set in x, inline: without -mpopcnt (the x86-64 baseline Debian
 * builds for) __builtin_popcountll is a call into libgcc's byte-table loop,
 * 2-3 % of a 64 KiB malloc/free batch (bench/loop, perf). */
EBB_INLINE unsigned popcount64(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555u;
  x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
  return (unsigned)((x * 0x0101010101010101u) >> 56);
}

/* Whether the process has had only one thread so far: glibc's own flag
 * (__libc_single_threaded, 2.32 and later), which it clears in pthread_create
 * before the second thread exists and never sets again, and which its own
 * malloc reads to skip its atomic instructions the same way. A libc without
 * it (musl) leaves the weak reference null: always "more than one". While it
 * holds, no other thread can see any of ebb's memory, so a lock or a shared
 * counter needs no locked instruction: the same word is read and written
 * plainly, and stays exact for the threads that come later (pthread_create
 * orders everything before it). A thread made with a raw clone(), behind
 * libc's back, breaks this as it breaks glibc's malloc. The 64 KiB batch of
 * bench/loop (--slots 16 --batch 1) paid ~20 % of its time on such
 * instructions, a 3 MiB malloc/free pair ~15 %, a 256 KiB one (the kept
 * one-block page's two exchanges) ~30 %. The page's remote-free word (xfree)
 * keeps its compare-and-swap: plain, it measured no faster. */
extern char __libc_single_threaded __attribute__((weak));
EBB_INLINE bool process_single_threaded(void) {
  return &__libc_single_threaded != NULL && relaxed_load(__libc_single_threaded);
}
/* The other answer of the same flag, where a libc without it says "not
 * known" (false): the process has created a thread besides its first. */
EBB_INLINE bool process_threads_started(void) {
  return &__libc_single_threaded != NULL && !relaxed_load(__libc_single_threaded);
}

/* Adds d to a counter that only one writer changes at a time (its owner, or
 * whoever holds its lock): a plain load and store, no locked instruction;
 * other threads may read it (relaxed). */
EBB_INLINE void plain_add(atomic_size_t *v, size_t d) {
  atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + d, memory_order_relaxed);
}

/* Adds d to a counter that every thread may add to (relaxed). */
EBB_INLINE void shared_add(atomic_size_t *v, size_t d) {
  if (process_single_threaded())
    plain_add(v, d);
  else
    atomic_fetch_add_explicit(v, d, memory_order_relaxed);
}

/* An exchange (acq_rel) of an atomic word other threads may also exchange. */
#define shared_xchg(v, x)                                                                                    \
  (process_single_threaded() ? ({                                                                            \
    __typeof__(atomic_load_explicit(v, memory_order_relaxed)) old_ = atomic_load_explicit(v, memory_order_relaxed); \
    atomic_store_explicit(v, x, memory_order_relaxed);                                                       \
    old_;                                                                                                    \
  })                                                                                                         \
                             : atomic_exchange_explicit(v, x, memory_order_acq_rel))

/* A tiny test-and-test-and-set lock: never allocates, used only on slow paths;
 * while the process has one thread, taken and released with plain stores.
 * While a thread forks it holds every lock (thread.c's fork_prepare) and
 * spin_fork_holder is set: its own lock calls in between (from other fork
 * handlers that allocate) then succeed without touching any lock. */
typedef struct {
  atomic_int held;
} spinlock_t;
extern __thread int spin_fork_holder __attribute__((tls_model("initial-exec")));
/* How many of ebb's locks this thread holds, or is about to take or has
 * just let go (a lock taken by one thread and let go by another only skews
 * it): a _Fork from a signal handler that interrupted a lock's holder must not
 * wait for a thread that waits on it (thread.c, raw_fork_before). Counted
 * before the lock is taken and after it is let go, with compiler barriers
 * between (a signal landing between the exchange and the count found the
 * lock held and the count 0; found under load). */
extern __thread int spin_held __attribute__((tls_model("initial-exec")));
EBB_INLINE bool spin_trylock(spinlock_t *l) {
  if (unlikely(spin_fork_holder)) return true;
  if (atomic_load_explicit(&l->held, memory_order_relaxed)) return false; /* held: by this thread, if it is the only one */
  spin_held++;
  atomic_signal_fence(memory_order_seq_cst);
  if (process_single_threaded()) {
    atomic_store_explicit(&l->held, 1, memory_order_relaxed);
    return true;
  }
  if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) return true;
  atomic_signal_fence(memory_order_seq_cst);
  spin_held--;
  return false;
}
void spin_lock_wait(spinlock_t *l); /* yields until the lock is free, then takes it */
EBB_INLINE void spin_lock(spinlock_t *l) {
  if (unlikely(!spin_trylock(l))) spin_lock_wait(l);
}
EBB_INLINE void spin_unlock(spinlock_t *l) {
  if (unlikely(spin_fork_holder)) return;
  atomic_store_explicit(&l->held, 0, memory_order_release);
  atomic_signal_fence(memory_order_seq_cst);
  spin_held--;
}

#endif
