/* pre_atfork.c — a shared library, preloaded next to libebb.so by
 * tests/integration/test_preload_churn.c for tests/programs/fork_handlers.c.
 * Its constructor registers fork handlers ("B") that allocate, meant to come
 * before ebb's; the program registers its own ("A") after. To tell whether that
 * arrangement really happened, it interposes glibc's __register_atfork (every
 * pthread_atfork, ebb's included, ends there through the PLT), records who
 * registered in what order ('B' this library, 'E' libebb, 'A' anyone else), and
 * wraps ebb's handlers to record when they run. The program reads the records
 * through the pre_atfork_* functions (found with dlsym). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef void hook_fn(void);
typedef int register_fn(hook_fn *, hook_fn *, hook_fn *, void *);
enum { PH_PREPARE, PH_PARENT, PH_CHILD, PH_N };

#define MAX_REGS 16
#define WRAPS 4

static register_fn *real_register;
static char regs[MAX_REGS + 1];
static atomic_int nregs;
static hook_fn *wrapped[WRAPS][PH_N];
static atomic_int nwrapped;
static atomic_int recording, active;
static char ran[PH_N][32];
static atomic_int nran[PH_N];

static void note(int phase, char who) {
  if (!atomic_load(&recording)) return;
  int i = atomic_fetch_add(&nran[phase], 1);
  if (i < (int)sizeof ran[phase] - 1) ran[phase][i] = who;
}

#define WRAP(k)                                                                                              \
  static void w##k##_prepare(void) {                                                                         \
    note(PH_PREPARE, 'E');                                                                                   \
    wrapped[k][PH_PREPARE]();                                                                                \
  }                                                                                                          \
  static void w##k##_parent(void) {                                                                          \
    note(PH_PARENT, 'E');                                                                                    \
    wrapped[k][PH_PARENT]();                                                                                 \
  }                                                                                                          \
  static void w##k##_child(void) {                                                                           \
    note(PH_CHILD, 'E');                                                                                     \
    wrapped[k][PH_CHILD]();                                                                                  \
  }
WRAP(0)
WRAP(1)
WRAP(2)
WRAP(3)
static hook_fn *const wrappers[WRAPS][PH_N] = {
    {w0_prepare, w0_parent, w0_child},
    {w1_prepare, w1_parent, w1_child},
    {w2_prepare, w2_parent, w2_child},
    {w3_prepare, w3_parent, w3_child},
};

static void b_prepare(void);

/* Finds glibc's function behind this one. dlsym does not allocate when it succeeds. */
static register_fn *real(void) {
  if (!real_register) real_register = (register_fn *)dlsym(RTLD_NEXT, "__register_atfork");
  if (!real_register) {
    static const char msg[] = "pre_atfork: no __register_atfork behind this library\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    abort();
  }
  return real_register;
}

static char who_called(hook_fn *prepare, void *ret) {
  if (prepare == b_prepare) return 'B';
  Dl_info info;
  if (dladdr(ret, &info) && info.dli_fname && strstr(info.dli_fname, "libebb")) return 'E';
  return 'A';
}

__attribute__((visibility("default"))) int __register_atfork(hook_fn *prepare, hook_fn *parent,
                                                             hook_fn *child, void *dso) {
  char who = who_called(prepare, __builtin_return_address(0));
  int r = atomic_fetch_add(&nregs, 1);
  if (r < MAX_REGS) regs[r] = who;
  if (who == 'E') {
    int k = atomic_fetch_add(&nwrapped, 1);
    if (k < WRAPS) {
      wrapped[k][PH_PREPARE] = prepare;
      wrapped[k][PH_PARENT] = parent;
      wrapped[k][PH_CHILD] = child;
      if (prepare) prepare = wrappers[k][PH_PREPARE];
      if (parent) parent = wrappers[k][PH_PARENT];
      if (child) child = wrappers[k][PH_CHILD];
    }
  }
  return real()(prepare, parent, child, dso);
}

/* ---- the allocating handlers: fresh classes, more than a page of each, a
 * large block, and more than 64 small frees (a decay tick) */
static const size_t sizes[] = {3000, 70000, (size_t)1 << 20, (size_t)5 << 20};
static const int counts[] = {40, 6, 2, 1};

static void allocate(unsigned salt) {
  unsigned char *held[64];
  int n = 0;
  for (int s = 0; s < 4; s++)
    for (int i = 0; i < counts[s]; i++, n++) {
      held[n] = malloc(sizes[s]);
      if (!held[n]) abort();
      held[n][0] = (unsigned char)(salt + n);
      held[n][sizes[s] - 1] = (unsigned char)~(salt + n);
    }
  for (int i = 0; i < 96; i++) free(malloc(48 + (size_t)(i % 4) * 16));
  n = 0;
  for (int s = 0; s < 4; s++)
    for (int i = 0; i < counts[s]; i++, n++) {
      if (held[n][0] != (unsigned char)(salt + n) || held[n][sizes[s] - 1] != (unsigned char)~(salt + n))
        abort();
      free(held[n]);
    }
}

static void b_prepare(void) {
  if (!atomic_load(&active)) return;
  note(PH_PREPARE, 'B');
  allocate(1);
}
static void b_parent(void) {
  if (!atomic_load(&active)) return;
  note(PH_PARENT, 'B');
  allocate(2);
}
static void b_child(void) {
  if (!atomic_load(&active)) return;
  alarm(20); /* a child that deadlocks here dies by itself */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  note(PH_CHILD, 'B');
  allocate(3);
}

__attribute__((constructor)) static void pre_atfork_init(void) {
  real();
  __register_atfork(b_prepare, b_parent, b_child, NULL);
}

/* ---- for the program */
__attribute__((visibility("default"))) const char *pre_atfork_registrations(void) {
  regs[atomic_load(&nregs) < MAX_REGS ? atomic_load(&nregs) : MAX_REGS] = 0;
  return regs;
}
__attribute__((visibility("default"))) void pre_atfork_activate(int on) { atomic_store(&active, on); }
/* Starts (clearing the log) or stops recording which handlers run. */
__attribute__((visibility("default"))) void pre_atfork_record(int on) {
  if (on) {
    memset(ran, 0, sizeof ran);
    for (int i = 0; i < PH_N; i++) atomic_store(&nran[i], 0);
  }
  atomic_store(&recording, on);
}
__attribute__((visibility("default"))) const char *pre_atfork_ran(int phase) { return ran[phase]; }
__attribute__((visibility("default"))) void pre_atfork_note(int phase, char who) { note(phase, who); }
