/* test_fork_handlers.c — fork in a program whose own pthread_atfork handlers
 * allocate, some registered before ebb's and some after. Prepare handlers run
 * in reverse order of registration, parent and child handlers in order, so a
 * handler registered before ebb's allocates while ebb's prepare holds every
 * arena lock (and, in the child, before ebb's child handler has reset them).
 * Each handler allocates and frees sizes this process has not used on that
 * thread before (3000 B, 70000 B, 1 MiB, 5 MiB: new pages must be carved) and
 * more than 64 small blocks (a decay pass), while other threads allocate in a
 * loop; main forks again and again, each child allocates, frees and _exits, and
 * the parent waits for it with a time limit (a hang is a failure).
 *
 * Arranging "before ebb": the handlers B are registered from a constructor of
 * priority 101 (the earliest a program may use), the handlers A from the test.
 * This file defines pthread_atfork itself (a static link takes it instead of
 * libc_nonshared.a's, and it forwards to glibc's __register_atfork exactly as
 * that one does), so it sees every registration made from this executable,
 * ebb's included: it records their order and wraps ebb's handlers to record
 * when they run. The tests check that the registrations went B, ebb, A and,
 * during their first fork, that the prepare handlers then ran A, ebb, B and
 * the parent and child handlers B, ebb, A; they fail saying so when ebb
 * registered first (no handler can be placed before ebb's in this build) or was
 * not seen registering at all. tests/integration/test_preload_churn.c runs
 * the same shape through LD_PRELOAD (tests/programs/fork_handlers.c and
 * pre_atfork.c). Only the ebb_* names are called (the TSan build does not
 * override malloc). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "stress_util.h"

#define FH_FORKS 200      /* forks per test (release) */
#define FH_BUSY 3         /* threads allocating while main forks */
#define FH_CHILD_WAIT 10  /* seconds before a child counts as hung */
#define FH_SMALL_FREES 96 /* small frees in each handler: more than one decay tick (64) */

typedef void hook_fn(void);
enum { PH_PREPARE, PH_PARENT, PH_CHILD, PH_N };

/* ---------------------------------------------------------------- registration log */

#define FH_MAX_REGS 16
#define FH_WRAPS 4 /* foreign (ebb's) registrations that get recording wrappers */

/* Who registered, in order: 'B' and 'A' this file, 'E' anyone else after B
 * (ebb), 'P' anyone else before B (a sanitizer runtime; or ebb, if it came
 * first: the check below then says that "before ebb" could not be arranged). */
static char fh_regs[FH_MAX_REGS + 1];
static atomic_int fh_nregs;
static hook_fn *fh_wrapped[FH_WRAPS][PH_N];
static atomic_int fh_nwrapped;

/* What ran during the recorded fork, per phase, in order ('B', 'E', 'A'). In
 * the child, its copy of the log holds the prepare phase and its own. */
static atomic_int fh_recording;
static char fh_ran[PH_N][32];
static atomic_int fh_nran[PH_N];

static void fh_note(int phase, char who) {
  if (!atomic_load_explicit(&fh_recording, memory_order_relaxed)) return;
  int i = atomic_fetch_add(&fh_nran[phase], 1);
  if (i < (int)sizeof fh_ran[phase] - 1) fh_ran[phase][i] = who;
}

#define FH_WRAP(k)                                                                                           \
  static void fh_w##k##_prepare(void) {                                                                      \
    fh_note(PH_PREPARE, 'E');                                                                                \
    fh_wrapped[k][PH_PREPARE]();                                                                             \
  }                                                                                                          \
  static void fh_w##k##_parent(void) {                                                                       \
    fh_note(PH_PARENT, 'E');                                                                                 \
    fh_wrapped[k][PH_PARENT]();                                                                              \
  }                                                                                                          \
  static void fh_w##k##_child(void) {                                                                        \
    fh_note(PH_CHILD, 'E');                                                                                  \
    fh_wrapped[k][PH_CHILD]();                                                                               \
  }
FH_WRAP(0)
FH_WRAP(1)
FH_WRAP(2)
FH_WRAP(3)
static hook_fn *const fh_wrappers[FH_WRAPS][PH_N] = {
    {fh_w0_prepare, fh_w0_parent, fh_w0_child},
    {fh_w1_prepare, fh_w1_parent, fh_w1_child},
    {fh_w2_prepare, fh_w2_parent, fh_w2_child},
    {fh_w3_prepare, fh_w3_parent, fh_w3_child},
};

static void fh_b_prepare(void);
static void fh_b_parent(void);
static void fh_b_child(void);
static void fh_a_prepare(void);
static void fh_a_parent(void);
static void fh_a_child(void);

extern int __register_atfork(hook_fn *prepare, hook_fn *parent, hook_fn *child, void *dso_handle);
extern void *__dso_handle __attribute__((weak, visibility("hidden")));

/* A sanitizer runtime linked into the program registers its own handlers from
 * its initialisation, before it can run instrumented code. */
#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define FH_UNINSTRUMENTED __attribute__((disable_sanitizer_instrumentation))
#endif
#endif
#ifndef FH_UNINSTRUMENTED
#define FH_UNINSTRUMENTED __attribute__((no_sanitize("address", "thread", "undefined")))
#endif

/* glibc's own pthread_atfork (libc_nonshared.a) is this one line with the
 * caller's DSO handle; the executable's handle is ours too. */
FH_UNINSTRUMENTED int pthread_atfork(hook_fn *prepare, hook_fn *parent, hook_fn *child) {
  hook_fn *fn[PH_N] = {prepare, parent, child};
  int r = atomic_fetch_add(&fh_nregs, 1);
  char who = prepare == fh_b_prepare ? 'B' : prepare == fh_a_prepare ? 'A' : 'E';
  if (who == 'E') {
    who = 'P';
    for (int i = 0; i < r && i < FH_MAX_REGS; i++)
      if (fh_regs[i] == 'B') who = 'E';
  }
  if (r < FH_MAX_REGS) fh_regs[r] = who;
  if (who == 'E') {
    int k = atomic_fetch_add(&fh_nwrapped, 1);
    for (int ph = 0; ph < PH_N && k < FH_WRAPS; ph++) {
      fh_wrapped[k][ph] = fn[ph];
      if (fn[ph]) fn[ph] = fh_wrappers[k][ph];
    }
  }
  return __register_atfork(fn[0], fn[1], fn[2], &__dso_handle ? __dso_handle : NULL);
}

/* ---------------------------------------------------------------- allocating handlers */

/* Fresh classes (for this thread's arena) and more than a page of each, a large
 * block, and a run of small frees. Every block is written and checked. */
static const size_t fh_sizes[] = {3000, 70000, (size_t)1 << 20, (size_t)5 << 20};
static const int fh_counts[] = {40, 6, 2, 1};

static void fh_allocate(uint64_t salt) {
  void *held[64];
  int n = 0;
  for (size_t s = 0; s < sizeof fh_sizes / sizeof fh_sizes[0]; s++)
    for (int i = 0; i < fh_counts[s]; i++) {
      unsigned char *p = ebb_malloc(fh_sizes[s]);
      if (!p) stress_die("fork handler: ebb_malloc(%zu) returned NULL", fh_sizes[s]);
      if (!ebb_owns(p)) stress_die("fork handler: ebb_owns(%p) is 0 for a live block", (void *)p);
      p[0] = (unsigned char)(salt + (uint64_t)n);
      p[fh_sizes[s] - 1] = (unsigned char)~(salt + (uint64_t)n);
      held[n++] = p;
    }
  for (int i = 0; i < FH_SMALL_FREES; i++) {
    void *p = ebb_malloc(48 + (size_t)(i % 4) * 16);
    if (!p) stress_die("fork handler: small ebb_malloc returned NULL");
    ebb_free(p);
  }
  int k = 0;
  for (size_t s = 0; s < sizeof fh_sizes / sizeof fh_sizes[0]; s++)
    for (int i = 0; i < fh_counts[s]; i++, k++) {
      unsigned char *p = held[k];
      if (p[0] != (unsigned char)(salt + (uint64_t)k) ||
          p[fh_sizes[s] - 1] != (unsigned char)~(salt + (uint64_t)k))
        stress_die("fork handler: block %p (%zu B) changed", (void *)p, fh_sizes[s]);
      ebb_free(p);
    }
}

/* The handlers are registered in every process of the stress binary (B from a
 * constructor), but do their work only while a test of this file runs. */
static atomic_int fh_active;

/* First thing in a child: a child that deadlocks must not outlive the test (an
 * orphan holding Criterion's pipe would stall the whole run). */
static void fh_child_guard(void) {
  alarm(FH_CHILD_WAIT + 5);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

/* Set by the test of a new arena made in a handler (below). */
static atomic_int fh_new_arena;

static void fh_b_prepare(void) {
  if (!atomic_load(&fh_active)) return;
  fh_note(PH_PREPARE, 'B');
  fh_allocate(1);
  if (atomic_load(&fh_new_arena)) { /* kept: a destroyed arena would be reused, not made anew */
    ebb_arena_t *a = ebb_arena_create();
    if (!a || !ebb_arena_malloc(a, 5000)) stress_die("fork handler: ebb_arena_create or its malloc failed");
  }
}
static void fh_b_parent(void) {
  if (!atomic_load(&fh_active)) return;
  fh_note(PH_PARENT, 'B');
  fh_allocate(2);
}
static void fh_b_child(void) {
  if (!atomic_load(&fh_active)) return;
  fh_child_guard();
  fh_note(PH_CHILD, 'B');
  fh_allocate(3);
}
static void fh_a_prepare(void) {
  if (!atomic_load(&fh_active)) return;
  fh_note(PH_PREPARE, 'A');
  fh_allocate(4);
}
static void fh_a_parent(void) {
  if (!atomic_load(&fh_active)) return;
  fh_note(PH_PARENT, 'A');
  fh_allocate(5);
}
static void fh_a_child(void) {
  if (!atomic_load(&fh_active)) return;
  fh_child_guard();
  fh_note(PH_CHILD, 'A');
  fh_allocate(6);
}

/* Before any other constructor of the program may run: ebb's, if it is of the
 * same priority, comes later (libebb.a follows the test objects on the link
 * line). Registration itself does not allocate (glibc keeps the first handlers
 * in static storage). */
__attribute__((constructor(101))) static void fh_register_before(void) {
  pthread_atfork(fh_b_prepare, fh_b_parent, fh_b_child);
}

static void fh_register_after(void) {
  static int done;
  if (!done) pthread_atfork(fh_a_prepare, fh_a_parent, fh_a_child);
  done = 1;
}

/* The registrations in order, and the order the recorded handlers (B, E, A:
 * not P, whose handlers are not wrapped) must run in. */
static void fh_expected(char all[32], char prepare[32], char forward[32]) {
  int n = atomic_load(&fh_nregs), k = 0;
  cr_assert_leq(n, FH_MAX_REGS, "more pthread_atfork registrations than this test records");
  cr_assert_leq(atomic_load(&fh_nwrapped), FH_WRAPS, "more registrations by ebb than this test wraps");
  for (int i = 0; i < n; i++) {
    all[i] = fh_regs[i];
    if (fh_regs[i] != 'P') forward[k++] = fh_regs[i];
  }
  all[n] = forward[k] = 0;
  for (int i = 0; i < k; i++) prepare[k - 1 - i] = forward[i];
  prepare[k] = 0;
}

/* The arrangement this test exists for, or an explicit failure. */
static void fh_check_registration(void) {
  char all[32], prepare[32], forward[32];
  fh_expected(all, prepare, forward);
  cr_assert(strchr(all, 'B') && strchr(all, 'A'), "this file's own registrations are missing: \"%s\"", all);
  cr_assert(strchr(all, 'E') != NULL,
            "pthread_atfork registrations: \"%s\" (P: before this file's constructor(101), B: that "
            "constructor, A: the test): none came from ebb after B, so ebb registered before the earliest "
            "program constructor (or not through pthread_atfork) and a handler registered before ebb's "
            "cannot be arranged in this build",
            all);
  cr_assert(strrchr(all, 'E') < strchr(all, 'A'), "ebb registered after the test's own handlers: \"%s\"",
            all);
  cr_log_info("pthread_atfork registrations, in order: %s (B before ebb, E ebb, A after ebb)", all);
}

/* ---------------------------------------------------------------- busy threads, child */

static atomic_int fh_stop;

static void *fh_busy(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(41000 + id);
  void *held[64] = {0};
  while (!atomic_load_explicit(&fh_stop, memory_order_relaxed)) {
    int i = (int)rng_below(&r, 64);
    ebb_free(held[i]);
    size_t size = stress_small_size(&r);
    held[i] = ebb_malloc(size);
    if (!held[i]) stress_die("fork busy: ebb_malloc(%zu) returned NULL", size);
    memset(held[i], (int)id, size < 64 ? size : 64);
  }
  for (int i = 0; i < 64; i++) ebb_free(held[i]);
  return NULL;
}

/* Exit codes: 0 fine, 10 + phase when a handler order was wrong. */
static void fh_child(int iter, void *from_parent, int recorded, const char *prepare, const char *forward) {
  if (recorded) {
    if (strcmp(fh_ran[PH_PREPARE], prepare) != 0) _exit(10 + PH_PREPARE);
    if (strcmp(fh_ran[PH_CHILD], forward) != 0) _exit(10 + PH_CHILD);
  }
  fh_allocate(7 + (uint64_t)iter);
  ebb_free(from_parent);
  void *p = ebb_malloc(200);
  if (!p) _exit(3);
  ebb_free(p);
  _exit(0);
}

/* The child's wait status, or -1 when it had to be killed after FH_CHILD_WAIT s. */
static int fh_wait(pid_t pid) { return stress_wait_child(pid, FH_CHILD_WAIT); }

static void fh_run(int busy, int forks) {
  fh_register_after();
  fh_check_registration();
  char all[32], prepare[32], forward[32];
  fh_expected(all, prepare, forward);

  pthread_t t[FH_BUSY];
  atomic_store(&fh_active, 1);
  atomic_store(&fh_stop, 0);
  for (int i = 0; i < busy; i++) cr_assert_eq(pthread_create(&t[i], NULL, fh_busy, (void *)(uintptr_t)i), 0);
  for (int iter = 0; iter < forks; iter++) {
    int record = iter == 0;
    if (record) {
      memset(fh_ran, 0, sizeof fh_ran);
      for (int ph = 0; ph < PH_N; ph++) atomic_store(&fh_nran[ph], 0);
      atomic_store(&fh_recording, 1);
    }
    void *p = ebb_malloc(100 + (size_t)iter); /* the child frees it */
    cr_assert_not_null(p);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork failed");
    if (pid == 0) fh_child(iter, p, record, prepare, forward);
    atomic_store(&fh_recording, 0);
    ebb_free(p);
    if (record) {
      cr_assert_str_eq(fh_ran[PH_PREPARE], prepare, "prepare handlers ran as \"%s\"; registered as \"%s\"",
                       fh_ran[PH_PREPARE], forward);
      cr_assert_str_eq(fh_ran[PH_PARENT], forward, "parent handlers ran as \"%s\"; registered as \"%s\"",
                       fh_ran[PH_PARENT], forward);
    }
    int status = fh_wait(pid);
    cr_assert_neq(status, -1, "fork %d: the child did not exit within %d s (deadlock in a child handler?)",
                  iter, FH_CHILD_WAIT);
    cr_assert(WIFEXITED(status), "fork %d: the child was killed by signal %d", iter,
              WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    cr_assert_eq(WEXITSTATUS(status), 0, "fork %d: the child exited with %d%s", iter, WEXITSTATUS(status),
                 WEXITSTATUS(status) >= 10 ? " (its handlers ran out of order)" : "");
  }
  atomic_store(&fh_stop, 1);
  for (int i = 0; i < busy; i++) pthread_join(t[i], NULL);
  atomic_store(&fh_active, 0);
}

/* Hangs (Criterion's timeout) if a prepare or parent handler deadlocks. */
Test(fork_handlers, allocating_handlers_before_and_after_ebbs_threads, .timeout = 30) {
  fh_run(FH_BUSY, (int)stress_n(FH_FORKS));
}

Test(fork_handlers, allocating_handlers_before_and_after_ebbs_single_thread, .timeout = 30) {
  fh_run(0, (int)stress_n(FH_FORKS));
}

/* An arena made in a fork handler registered before ebb's (a first-class
 * one, and the arena of a thread whose first allocation is there) is made
 * while ebb's prepare holds every arena lock, and must be held like them: the
 * debug build asserts, as the fork ends, that every lock it releases is held.
 * Each fork comes from a new thread that has not allocated, while other
 * threads allocate. */
static void *fh_fresh_fork(void *arg) {
  (void)arg;
  pid_t pid = fork(); /* this thread's first allocation: in the handlers */
  if (pid == 0) fh_child(1, NULL, 0, "", "");
  return (void *)(intptr_t)(pid < 0 ? -1 : fh_wait(pid));
}

Test(fork_handlers, arenas_made_in_a_handler, .timeout = 30) {
  fh_register_after();
  fh_check_registration();
  pthread_t t[FH_BUSY];
  atomic_store(&fh_active, 1);
  atomic_store(&fh_new_arena, 1);
  atomic_store(&fh_stop, 0);
  for (int i = 0; i < FH_BUSY; i++) cr_assert_eq(pthread_create(&t[i], NULL, fh_busy, (void *)(uintptr_t)i), 0);
  for (int iter = 0; iter < 20; iter++) {
    pthread_t f;
    void *rv;
    cr_assert_eq(pthread_create(&f, NULL, fh_fresh_fork, NULL), 0);
    cr_assert_eq(pthread_join(f, &rv), 0);
    int status = (int)(intptr_t)rv;
    cr_assert_neq(status, -1, "fork %d: fork failed, or the child did not exit within %d s", iter, FH_CHILD_WAIT);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: the child ended with status %#x", iter,
              status);
  }
  atomic_store(&fh_stop, 1);
  for (int i = 0; i < FH_BUSY; i++) pthread_join(t[i], NULL);
  atomic_store(&fh_new_arena, 0);
  atomic_store(&fh_active, 0);
}
