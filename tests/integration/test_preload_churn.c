/* test_preload_churn.c — programs that know nothing of ebb, run with
 * LD_PRELOAD=build/libebb.so and ebb's default settings (no EBB_* variable):
 * thread churn in mimalloc-bench's mleak shape (threads created by main, by
 * another thread, and detached), which deadlocked when ebb started its
 * background thread from a free that glibc's pthread_create/pthread_join make
 * while holding the stack-cache lock; and fork with pthread_atfork handlers
 * that allocate, registered before and after ebb's (tests/programs/
 * fork_handlers.c, with tests/programs/pre_atfork.c preloaded as a library
 * whose constructor runs before libebb's). Each run is bounded by `timeout`:
 * a hang fails the test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#define PC_TIMEOUT 20      /* seconds a churn run may take before `timeout` kills it (a hang) */
#define PC_FORK_TIMEOUT 30 /* the same for a fork run (its children are given 10 s each) */

TestSuite(preload_churn, .timeout = 120);

static struct cmd_result pc_r; /* large: not on the stack */

/* The churn program. It checks that it really runs on ebb (ebb_owns, found with
 * dlsym, is 1 for a block it got from malloc) and prints OK. */
static const char pc_churn_src[] =
    "#define _GNU_SOURCE\n"
    "#include <dlfcn.h>\n"
    "#include <pthread.h>\n"
    "#include <sched.h>\n"
    "#include <stdatomic.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#define THREADS 10\n"
    "#define SLOTS 16\n"
    "static _Atomic(unsigned char *) slots[SLOTS];\n"
    "static atomic_uint finished;\n"
    "static int rounds;\n"
    "static void *worker(void *arg) {\n"
    "  size_t id = (size_t)arg;\n"
    "  unsigned char *p = calloc(1, 128);\n"
    "  if (!p) { fprintf(stderr, \"calloc failed\\n\"); exit(3); }\n"
    "  for (int i = 0; i < 128; i++) if (p[i]) { fprintf(stderr, \"calloc not zeroed\\n\"); exit(3); }\n"
    "  memset(p, (int)(id % 251 + 1), 128);\n"
    "  unsigned char *old = atomic_exchange(&slots[id % SLOTS], p);\n"
    "  if (old) {\n"
    "    for (int i = 1; i < 128; i++) if (old[i] != old[0]) { fprintf(stderr, \"block changed\\n\"); "
    "exit(3); }\n"
    "    free(old);\n"
    "  }\n"
    "  atomic_fetch_add(&finished, 1);\n"
    "  return NULL;\n"
    "}\n"
    "static void *joined_rounds(void *arg) {\n"
    "  for (int r = 0; r < rounds; r++) {\n"
    "    pthread_t t[THREADS];\n"
    "    for (int i = 0; i < THREADS; i++)\n"
    "      if (pthread_create(&t[i], NULL, worker, (void *)(size_t)(r * THREADS + i))) exit(4);\n"
    "    for (int i = 0; i < THREADS; i++)\n"
    "      if (pthread_join(t[i], NULL)) exit(4);\n"
    "  }\n"
    "  return arg;\n"
    "}\n"
    "static void detached_rounds(void) {\n"
    "  pthread_attr_t attr;\n"
    "  pthread_attr_init(&attr);\n"
    "  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);\n"
    "  for (int r = 0; r < rounds; r++) {\n"
    "    for (int i = 0; i < THREADS; i++) {\n"
    "      pthread_t t;\n"
    "      if (pthread_create(&t, &attr, worker, (void *)(size_t)(r * THREADS + i))) exit(4);\n"
    "    }\n"
    "    while (atomic_load(&finished) < (unsigned)(r + 1) * THREADS) sched_yield();\n"
    "  }\n"
    "  pthread_attr_destroy(&attr);\n"
    "}\n"
    "int main(int argc, char **argv) {\n"
    "  if (argc != 3) return 2;\n"
    "  rounds = atoi(argv[2]);\n"
    "  int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, \"ebb_owns\");\n"
    "  void *probe = malloc(100);\n"
    "  if (!owns || !owns(probe)) { printf(\"NOT ON EBB\\n\"); return 5; }\n"
    "  free(probe);\n"
    "  if (strcmp(argv[1], \"main\") == 0) joined_rounds(NULL);\n"
    "  else if (strcmp(argv[1], \"thread\") == 0) {\n"
    "    pthread_t t;\n"
    "    if (pthread_create(&t, NULL, joined_rounds, NULL) || pthread_join(t, NULL)) return 4;\n"
    "  } else if (strcmp(argv[1], \"detached\") == 0) detached_rounds();\n"
    "  else return 2;\n"
    "  if (atomic_load(&finished) != (unsigned)rounds * THREADS) { printf(\"lost workers\\n\"); return 6; }\n"
    "  for (int i = 0; i < SLOTS; i++) free(atomic_exchange(&slots[i], NULL));\n"
    "  printf(\"OK %u\\n\", atomic_load(&finished));\n"
    "  return 0;\n"
    "}\n";

static const char *pc_lib(void) {
  static char lib[4096];
  snprintf(lib, sizeof lib, "%s/build/libebb.so", repo_root());
  cr_assert_eq(access(lib, R_OK), 0, "no %s: build it first (make all)", lib);
  return lib;
}

/* Writes the churn program's source into build/tests/tmp and compiles it (once
 * per test process; a unique name per process, as tests may run in parallel). */
static const char *pc_churn_prog(void) {
  static char prog[4096];
  if (prog[0]) return prog;
  char src[4096];
  snprintf(src, sizeof src, "%s/preload_churn.%d.c", tmp_dir(), (int)getpid());
  snprintf(prog, sizeof prog, "%s/preload_churn.%d", tmp_dir(), (int)getpid());
  FILE *f = fopen(src, "w");
  cr_assert_not_null(f, "cannot write %s", src);
  cr_assert_eq(fputs(pc_churn_src, f) >= 0 && fclose(f) == 0, 1);
  const char *cc = getenv("CC");
  int st = run_cmd(&pc_r, "%s -O1 -pthread '%s' -o '%s' -ldl", cc && *cc ? cc : "cc", src, prog);
  cr_assert_eq(st, 0, "compiling the churn program: %s\n%s%s", describe_status(st), pc_r.out, pc_r.err);
  unlink(src);
  return prog;
}

/* Runs the program preloaded with libebb.so in an otherwise empty environment
 * (so no EBB_* setting leaks in), killed after PC_TIMEOUT seconds. */
static void pc_run_churn(const char *mode, int rounds) {
  const char *prog = pc_churn_prog();
  int st = run_cmd(&pc_r, "timeout -s KILL %d env -i LD_PRELOAD='%s' '%s' %s %d", PC_TIMEOUT, pc_lib(), prog,
                   mode, rounds);
  unlink(prog);
  cr_assert(!(WIFEXITED(st) && WEXITSTATUS(st) == 137),
            "%s: still running after %d s: deadlock (thread start from free?); stdout:\n%s\nstderr:\n%s",
            mode, PC_TIMEOUT, pc_r.out, pc_r.err);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s; stdout:\n%s\nstderr:\n%s", mode,
            describe_status(st), pc_r.out, pc_r.err);
  cr_assert(strncmp(pc_r.out, "OK", 2) == 0, "%s printed:\n%s", mode, pc_r.out);
}

Test(preload_churn, mleak_threads_from_main) { pc_run_churn("main", 500); }
Test(preload_churn, mleak_threads_from_a_thread) { pc_run_churn("thread", 500); }
Test(preload_churn, mleak_detached_threads) { pc_run_churn("detached", 500); }

/* ---------------------------------------------------------------- fork handlers */

/* fork_handlers with pre_atfork.so preloaded after libebb.so: ld.so then runs
 * pre_atfork.so's constructor first, so its handlers are registered before
 * ebb's (the program checks that, and says so when it is not the case). */
static void pc_run_fork(const char *mode) {
  int st = compile_program(&pc_r, NULL, "pre_atfork.c", "pre_atfork.so", "-O1 -fPIC -shared", "-ldl");
  cr_assert_eq(st, 0, "compiling pre_atfork.c: %s\n%s%s", describe_status(st), pc_r.out, pc_r.err);
  st = compile_program(&pc_r, NULL, "fork_handlers.c", "fork_handlers", "-O1 -pthread", "-ldl");
  cr_assert_eq(st, 0, "compiling fork_handlers.c: %s\n%s%s", describe_status(st), pc_r.out, pc_r.err);
  st = run_cmd(&pc_r, "timeout -s KILL %d env -i LD_PRELOAD='%s %s/pre_atfork.so' '%s/fork_handlers' %s",
               PC_FORK_TIMEOUT, pc_lib(), tmp_dir(), tmp_dir(), mode);
  cr_assert(
      !(WIFEXITED(st) && WEXITSTATUS(st) == 137),
      "%s: still running after %d s: deadlock in a fork handler that allocates?; stdout:\n%s\nstderr:\n%s",
      mode, PC_FORK_TIMEOUT, pc_r.out, pc_r.err);
  cr_assert(!(WIFEXITED(st) && WEXITSTATUS(st) == 7),
            "%s: a handler registered before ebb's could not be arranged with the shared library:\n%s", mode,
            pc_r.out);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s; stdout:\n%s\nstderr:\n%s", mode,
            describe_status(st), pc_r.out, pc_r.err);
  cr_assert(strstr(pc_r.out, "registrations BEA\n") && strstr(pc_r.out, "OK 200 forks"), "%s printed:\n%s",
            mode, pc_r.out);
}

Test(preload_churn, fork_with_allocating_handlers_threads) { pc_run_fork("threads"); }
Test(preload_churn, fork_with_allocating_handlers_single_thread) { pc_run_fork("single"); }
