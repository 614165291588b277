/* test_threads_churn.c — mimalloc-bench's mleak shape, with default settings:
 * round after round, a handful of threads each calloc 128 B, swap it into a
 * shared slot and free what they got out, then exit; the creator joins them.
 * glibc's pthread_create and pthread_join free memory (a new thread's DTV, the
 * stack cache beyond its limit) while holding the stack-cache lock, so an
 * allocator that starts its background thread from free deadlocks there
 * (CONVENTIONS.md habit 15). A hang ends in Criterion's timeout.
 * Variants: threads created by main, by another thread, and detached.
 * tests/integration/test_preload_churn.c runs the same shape through
 * LD_PRELOAD=libebb.so. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <time.h>

#include "stress_util.h"

#define TC_THREADS 10 /* per round */
#define TC_ROUNDS 500 /* release; stress_n scales it down for the debug build */
#define TC_SLOTS 16   /* shared exchange slots */
#define TC_BLOCK 128  /* bytes each thread callocs */
#define TC_TIMEOUT 25 /* seconds: a deadlock shows as Criterion's timeout */

static _Atomic(unsigned char *) tc_slots[TC_SLOTS];
static atomic_uint tc_finished; /* workers past their last allocator call */

/* The test is about the default configuration (EBB_BACKGROUND=auto): say so
 * when the environment changes the allocator's settings. */
static void tc_note_env(void) {
  extern char **environ;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "EBB_", 4) == 0) /* test knobs are EBBTEST_*, not settings */
      cr_log_warn("%s is set: this test is meant for ebb's default settings", *e);
}

/* A block in a slot is TC_BLOCK copies of its writer's mark. */
static void *tc_worker(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  unsigned char mark = (unsigned char)(id % 251 + 1);
  unsigned char *p = ebb_calloc(1, TC_BLOCK);
  STRESS_CHECK(p != NULL);
  for (size_t i = 0; i < TC_BLOCK; i++) STRESS_CHECK(p[i] == 0);
  memset(p, mark, TC_BLOCK);
  unsigned char *old = atomic_exchange(&tc_slots[id % TC_SLOTS], p);
  if (old) {
    for (size_t i = 1; i < TC_BLOCK; i++)
      if (old[i] != old[0]) stress_die("churn: block %p from a slot changed at byte %zu", (void *)old, i);
    ebb_free(old);
  }
  atomic_fetch_add(&tc_finished, 1);
  return NULL;
}

static void tc_drain_slots(void) {
  for (int i = 0; i < TC_SLOTS; i++) ebb_free(atomic_exchange(&tc_slots[i], NULL));
}

/* Rounds of create + join, run by whichever thread calls it. */
static void *tc_rounds_joined(void *arg) {
  size_t rounds = (size_t)(uintptr_t)arg;
  for (size_t r = 0; r < rounds; r++) {
    pthread_t t[TC_THREADS];
    for (int i = 0; i < TC_THREADS; i++)
      if (pthread_create(&t[i], NULL, tc_worker, (void *)(uintptr_t)(r * TC_THREADS + (size_t)i)) != 0)
        stress_die("churn: pthread_create failed in round %zu", r);
    for (int i = 0; i < TC_THREADS; i++)
      if (pthread_join(t[i], NULL) != 0) stress_die("churn: pthread_join failed in round %zu", r);
  }
  return NULL;
}

Test(threads_churn, mleak_rounds_from_main, .timeout = TC_TIMEOUT) {
  tc_note_env();
  size_t rounds = stress_n(TC_ROUNDS);
  atomic_store(&tc_finished, 0);
  tc_rounds_joined((void *)(uintptr_t)rounds);
  cr_assert_eq(atomic_load(&tc_finished), rounds * TC_THREADS);
  tc_drain_slots();
}

/* The creating and joining thread is not main (its arena and its glibc state
 * are a thread's, not the initial thread's). */
Test(threads_churn, mleak_rounds_from_a_thread, .timeout = TC_TIMEOUT) {
  tc_note_env();
  size_t rounds = stress_n(TC_ROUNDS);
  atomic_store(&tc_finished, 0);
  /* main allocates too, so the process has a live arena besides the spawner's */
  void *keep = ebb_malloc(TC_BLOCK);
  cr_assert_not_null(keep);
  pthread_t spawner;
  cr_assert_eq(pthread_create(&spawner, NULL, tc_rounds_joined, (void *)(uintptr_t)rounds), 0);
  cr_assert_eq(pthread_join(spawner, NULL), 0);
  cr_assert_eq(atomic_load(&tc_finished), rounds * TC_THREADS);
  ebb_free(keep);
  tc_drain_slots();
}

/* Detached threads: glibc frees their resources from the exiting thread itself
 * (and reuses their stacks in the next pthread_create). Main waits for a round's
 * workers through the counter, then briefly for their exits to complete. */
Test(threads_churn, mleak_rounds_detached, .timeout = TC_TIMEOUT) {
  tc_note_env();
  size_t rounds = stress_n(TC_ROUNDS);
  atomic_store(&tc_finished, 0);
  pthread_attr_t attr;
  cr_assert_eq(pthread_attr_init(&attr), 0);
  cr_assert_eq(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED), 0);
  for (size_t r = 0; r < rounds; r++) {
    for (int i = 0; i < TC_THREADS; i++) {
      pthread_t t;
      cr_assert_eq(pthread_create(&t, &attr, tc_worker, (void *)(uintptr_t)(r * TC_THREADS + (size_t)i)), 0,
                   "pthread_create failed in round %zu", r);
    }
    while (atomic_load(&tc_finished) < (r + 1) * TC_THREADS) sched_yield();
  }
  pthread_attr_destroy(&attr);
  struct timespec nap = {0, 20 * 1000 * 1000}; /* let the last exits finish */
  nanosleep(&nap, NULL);
  tc_drain_slots();
}

/* Not under ThreadSanitizer (the build without Criterion): TSan's runtime
 * itself crashes (SEGV in __tsan::TraceSwitchPart) when instrumented code runs
 * in a key destructor round after its own thread finalisation. */
#ifndef EBB_STRESS_NO_CRITERION
/* A thread-key destructor that allocates in every one of glibc's destructor
 * rounds and sets its key again (asking for another round), as TLS-heavy
 * libraries may: the allocation of the last round came after ebb's own exit
 * handler had run, and bound an arena that nothing would ever abandon (a probe
 * found 1000 such threads leaving 1000 arenas, 4 GiB mapped). Such a call now
 * borrows an arena for itself; the arenas stay a handful. */
static pthread_key_t late_key;

static void late_dtor(void *v) {
  void *p = ebb_malloc(100);
  if (!p) stress_die("late_dtor: ebb_malloc failed");
  memset(p, 0x5a, 100);
  ebb_free(v);
  pthread_setspecific(late_key, p); /* glibc stops after 4 rounds: the last one stays (100 B a thread) */
}

static void *late_worker(void *arg) {
  (void)arg;
  pthread_setspecific(late_key, ebb_malloc(100));
  return NULL;
}

Test(threads_churn, allocating_key_destructors_bind_no_arena_for_good, .timeout = TC_TIMEOUT) {
  cr_assert_eq(pthread_key_create(&late_key, late_dtor), 0);
  struct ebb_stats before, after;
  ebb_stats(&before);
  size_t threads = stress_n(200);
  for (size_t i = 0; i < threads; i++) {
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, late_worker, NULL), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
  }
  ebb_stats(&after);
  cr_log_info("key destructors: %zu threads, arenas %llu -> %llu", threads, (unsigned long long)before.arenas,
              (unsigned long long)after.arenas);
  cr_assert_leq(after.arenas, before.arenas + 4, "%zu exited threads left %llu arenas (%llu before)", threads,
                (unsigned long long)after.arenas, (unsigned long long)before.arenas);
}

/* A thread whose first allocation comes in glibc's last round of key
 * destructors: its key asks for another round three times and allocates only
 * in the fourth, after which glibc runs none. The arena it bound was never
 * abandoned, and the thread that next took back an idle owner's pages
 * (ebb_trim here) swapped a key in the dead thread's thread-local storage:
 * SIGSEGV once its stack was unmapped (found by a probe; here the stacks are
 * the test's own, unmapped after the join). A thread started through ebb's
 * pthread_create now has its exit key set before its code runs. */
static pthread_key_t last_round_key;
static void last_round_dtor(void *v) {
  uintptr_t round = (uintptr_t)v;
  if (round < 4) {
    pthread_setspecific(last_round_key, (void *)(round + 1));
    return;
  }
  void *p = ebb_malloc(48);
  if (!p) stress_die("last_round_dtor: ebb_malloc failed");
  memset(p, 0x3c, 48);
  ebb_free(p);
}

static void *last_round_worker(void *arg) {
  (void)arg;
  pthread_setspecific(last_round_key, (void *)(uintptr_t)1);
  return NULL;
}

/* libc's own pthread_create: past ebb's under -Wl,--wrap (the release and
 * debug stress builds), pthread_create itself where nothing wraps it */
extern int __real_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)
    __attribute__((weak));
static int libc_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  return __real_pthread_create ? __real_pthread_create(t, attr, fn, arg) : pthread_create(t, attr, fn, arg);
}
static int ebb_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  return ebb_pthread_create(t, attr, fn, arg);
}

/* threads started by `create` on stacks of the test's own, unmapped after each join, then ebb_trim */
static void last_round_threads(int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
                               size_t threads) {
  for (size_t i = 0; i < threads; i++) {
    size_t size = 256 * 1024;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stack, MAP_FAILED);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, size);
    pthread_t t;
    cr_assert_eq(create(&t, &attr, last_round_worker, NULL), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    pthread_attr_destroy(&attr);
    munmap(stack, size);
  }
  ebb_trim(); /* takes back every idle owner's pages: reads no freed thread-local storage */
}

Test(threads_churn, a_first_allocation_in_the_last_key_destructor_round_leaves_no_owned_arena, .timeout = TC_TIMEOUT) {
  cr_assert_eq(pthread_key_create(&last_round_key, last_round_dtor), 0);
  struct ebb_stats before, after;
  ebb_stats(&before);
  size_t threads = stress_n(64);
  last_round_threads(ebb_create, threads);
  ebb_stats(&after);
  cr_log_info("last-round allocations: %zu threads, arenas %llu -> %llu", threads,
              (unsigned long long)before.arenas, (unsigned long long)after.arenas);
  cr_assert_leq(after.arenas, before.arenas + 4, "%zu exited threads left %llu arenas (%llu before)", threads,
                (unsigned long long)after.arenas, (unsigned long long)before.arenas);
  /* libc's own pthread_create, past ebb's: such a thread keeps its arena
   * (docs/architecture.md), but no other thread reads its freed storage */
  last_round_threads(libc_create, stress_n(16));
}
#endif
