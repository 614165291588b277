/* common.h's primitives. Locks and shared counters while the process has one thread (common.h,
 * process_single_threaded): they are then read and written with plain
 * instructions, and must stay exact for the threads made later: a lock taken
 * by the only thread still excludes a thread made while it is held, counts
 * added alone and then by many threads at once lose nothing, and the process
 * counts as single-threaded only until its first pthread_create; exchanges
 * (the thread's kept one-block page) neither lose nor duplicate a value.
 * Criterion's worker processes have a thread of their own (and glibc never
 * counts a fork's child of such a process as single-threaded again), so each
 * case runs in a fresh process: this binary executed again with
 * EBB_LOCKS_CASE set, which runs the case from a constructor, before
 * Criterion's main starts any thread, and exits with 0 or the number of the
 * check that failed (named on stderr). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"

extern char **environ;

/* A check in the child: on failure, says which and exits with its number. */
#define check(n, e, what)                                                                                    \
  do {                                                                                                       \
    if (!(e)) {                                                                                              \
      fprintf(stderr, "locks child: check %d failed: %s\n", n, what);                                        \
      _exit(n);                                                                                              \
    }                                                                                                        \
  } while (0)

static spinlock_t lock;
static atomic_int stage; /* the helper thread's progress, below */
static bool got_while_held, got_after;

static void wait_stage(int s) {
  while (atomic_load(&stage) < s) sched_yield();
}

static void *contender(void *arg) {
  (void)arg;
  got_while_held = spin_trylock(&lock);
  atomic_store(&stage, 1);
  wait_stage(2);
  spin_lock(&lock); /* waits for the main thread's unlock */
  got_after = true;
  spin_unlock(&lock);
  return NULL;
}

static void lock_case(void) {
  check(1, process_single_threaded(), "a fresh process has one thread (else the plain path is not tested)");
  spin_lock(&lock);
  check(2, !spin_trylock(&lock), "held: a second take fails, as a locked exchange's would");
  pthread_t t;
  check(3, pthread_create(&t, NULL, contender, NULL) == 0, "pthread_create");
  check(4, !process_single_threaded(), "glibc clears its flag in pthread_create");
  wait_stage(1);
  check(5, !got_while_held, "the lock word the only thread wrote plainly says held to the new thread");
  atomic_store(&stage, 2);
  spin_unlock(&lock);
  pthread_join(t, NULL);
  check(6, got_after, "the unlock lets it in");
  check(7, !process_single_threaded(), "the process never counts as single-threaded again");
  check(8, spin_trylock(&lock), "free again after the thread's unlock");
  spin_unlock(&lock);
}

#define ADDS 2000000
static atomic_size_t counter;

static void *adder(void *arg) {
  size_t d = (size_t)(uintptr_t)arg;
  for (int i = 0; i < ADDS; i++) shared_add(&counter, d);
  return NULL;
}

static void count_case(void) {
  check(1, process_single_threaded(), "a fresh process has one thread");
  for (int i = 0; i < 1000; i++) shared_add(&counter, 3);
  shared_add(&counter, (size_t)-1000); /* a subtraction, as a span given back */
  check(2, atomic_load(&counter) == 2000, "adds alone");
  pthread_t t[2];
  check(3, pthread_create(&t[0], NULL, adder, (void *)(uintptr_t)1) == 0, "pthread_create");
  check(3, pthread_create(&t[1], NULL, adder, (void *)(uintptr_t)1) == 0, "pthread_create");
  adder((void *)(uintptr_t)-1); /* and this thread takes away as many at once */
  pthread_join(t[0], NULL);
  pthread_join(t[1], NULL);
  check(4, atomic_load(&counter) == 2000 + (size_t)ADDS, "three threads adding at once lost no add");
}

/* Tokens 1..4: one in the word, one in each of three threads, swapped in and
 * out; exact exchanges never duplicate or lose one. */
static _Atomic(uintptr_t) word;
static uintptr_t held_after[3];

static void *swapper(void *arg) {
  uintptr_t i = (uintptr_t)arg, mine = i + 2;
  for (int k = 0; k < ADDS; k++) mine = shared_xchg(&word, mine);
  held_after[i] = mine;
  return NULL;
}

static void xchg_case(void) {
  check(1, process_single_threaded(), "a fresh process has one thread");
  atomic_store(&word, 1);
  uintptr_t t0 = 7;
  t0 = shared_xchg(&word, t0);
  check(2, t0 == 1 && atomic_load(&word) == 7, "an exchange alone");
  t0 = shared_xchg(&word, t0);
  check(2, t0 == 7 && atomic_load(&word) == 1, "and back");
  pthread_t t[2];
  check(3, pthread_create(&t[0], NULL, swapper, (void *)(uintptr_t)0) == 0, "pthread_create");
  check(3, pthread_create(&t[1], NULL, swapper, (void *)(uintptr_t)1) == 0, "pthread_create");
  swapper((void *)(uintptr_t)2);
  pthread_join(t[0], NULL);
  pthread_join(t[1], NULL);
  unsigned seen = 1u << atomic_load(&word);
  for (int i = 0; i < 3; i++) seen |= 1u << held_after[i];
  check(4, seen == 0x1e, "three threads exchanging at once kept every token exactly once");
}

__attribute__((constructor)) static void locks_child(void) {
  const char *c = getenv("EBB_LOCKS_CASE");
  if (!c) return;
  if (!strcmp(c, "lock")) lock_case();
  else if (!strcmp(c, "count")) count_case();
  else if (!strcmp(c, "xchg")) xchg_case();
  else check(99, false, "no such case");
  _exit(0);
}

/* Runs one case in a fresh process; its exit status (0: passed). */
static int run_case(const char *name) {
  char var[64];
  snprintf(var, sizeof var, "EBB_LOCKS_CASE=%s", name);
  char *argv[] = {"unit", NULL}, *envp[] = {var, NULL};
  pid_t pid;
  cr_assert_eq(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, envp), 0);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "the case's process was killed (signal %d)", WTERMSIG(st));
  return WEXITSTATUS(st);
}

Test(locks, a_lock_the_only_thread_took_excludes_the_threads_made_while_it_is_held) {
  cr_assert_eq(run_case("lock"), 0, "see the failed check on stderr");
}

Test(locks, shared_counts_added_alone_and_then_by_threads_at_once_lose_nothing) {
  cr_assert_eq(run_case("count"), 0, "see the failed check on stderr");
}

Test(locks, exchanges_alone_and_then_by_threads_at_once_keep_every_value_once) {
  cr_assert_eq(run_case("xchg"), 0, "see the failed check on stderr");
}

/* popcount64 against a bit-by-bit count, on every single bit, all-ones, and
 * a stream of mixed words. */
static unsigned slow_count(uint64_t x) {
  unsigned n = 0;
  for (; x; x >>= 1) n += (unsigned)(x & 1);
  return n;
}

Test(bits, popcount64_counts_every_bit) {
  cr_assert_eq(popcount64(0), 0);
  cr_assert_eq(popcount64(~(uint64_t)0), 64);
  for (int i = 0; i < 64; i++) cr_assert_eq(popcount64((uint64_t)1 << i), 1, "bit %d", i);
  uint64_t x = 0x9E3779B97F4A7C15u;
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    uint64_t w = i & 1 ? x : x & (x >> 3); /* sparse and dense words */
    cr_assert_eq(popcount64(w), slow_count(w), "%#llx", (unsigned long long)w);
  }
}
