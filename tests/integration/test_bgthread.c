/* test_bgthread.c — ebb's background thread stays out of the program's way:
 * a process whose main() called pthread_exit ends when its last own thread
 * does, and a signal the program blocked to wait for reaches it. Each case
 * runs tests/programs/bg_thread.c, compiled here at run time, in a fresh
 * process under build/libebb.so with the background thread started at the
 * second thread (auto) or at start-up (1), under a deadline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"

TestSuite(bgthread, .timeout = 60);

static struct cmd_result bg_out; /* large: not on the stack */

/* Runs bg_thread <mode> with the settings <env> (e.g. "EBB_BACKGROUND=1"),
 * killed after 10 s. */
static void bg_case_env(const char *mode, const char *env, const char *expect) {
  int st = compile_program(&bg_out, NULL, "bg_thread.c", "bg_thread", "-O1 -Wall -Wextra -Werror -pthread",
                           "-pthread");
  cr_assert_eq(st, 0, "compiling bg_thread.c: %s\n%s%s", describe_status(st), bg_out.out, bg_out.err);
  st =
      run_cmd(&bg_out,
              "timeout -s KILL 10 env -i %s LD_PRELOAD='%s/build/libebb.so' '%s/bg_thread' %s", env,
              repo_root(), tmp_dir(), mode);
  cr_log_info("bg_thread %s (%s): %s", mode, env, describe_status(st));
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bg_thread %s with %s: %s (137: hung)\n%s%s", mode, env,
            describe_status(st), bg_out.out, bg_out.err);
  cr_assert(strstr(bg_out.out, expect), "bg_thread %s: expected \"%s\" on stdout\n%s", mode, expect,
            bg_out.out);
}

static void bg_case(const char *mode, const char *bg, const char *expect) {
  char env[64];
  snprintf(env, sizeof env, "EBB_BACKGROUND=%s", bg);
  bg_case_env(mode, env, expect);
}

/* POSIX: the process exits with status 0 when its last thread ends, as if
 * that thread called exit(0) (which flushes stdout). It hung for good. */
Test(bgthread, main_pthread_exit_ends_with_the_last_thread) { bg_case("exit", "auto", "worker done"); }
Test(bgthread, main_pthread_exit_ends_with_the_last_thread_bg_from_start) {
  bg_case("exit", "1", "worker done");
}
/* A first thread that ends with the raw exit system call runs no destructor,
 * so ebb's exit key never sees it go; the robust mutex it holds does, and the
 * process ends with its last thread (it never did; found by a probe). The
 * bound is the 10 s deadline. */
Test(bgthread, main_raw_exit_ends_with_the_last_thread) { bg_case("exit-raw", "auto", "worker done"); }
Test(bgthread, main_raw_exit_ends_with_the_last_thread_bg_from_start) { bg_case("exit-raw", "1", "worker done"); }
Test(bgthread, main_pthread_exit_alone_ends_at_once) { bg_case("exit-alone", "1", "main gone"); }
/* Where /proc/self/stat cannot be read (no descriptor left, /proc masked) the
 * background thread cannot tell whether it is the last thread: it ends, and
 * the process with it (it ran on, and the process hung; found by a probe). */
Test(bgthread, main_pthread_exit_ends_where_proc_cannot_be_read) { bg_case("exit-nofile", "auto", "worker done"); }
Test(bgthread, main_pthread_exit_ends_where_proc_cannot_be_read_bg_from_start) {
  bg_case("exit-nofile", "1", "worker done");
}

/* While the program's first thread is alive the background thread opens no
 * file: its open of /proc/self/stat (every 10 ms under EBB_DECAY_MS=40) took
 * descriptor 0 between a close(0) and open() of the program's, 7 to 55 times
 * in 700,000 tries in 1.5 s; read every 2 s, 12 times in 4 M (found by
 * probes). The loop runs 3 s, past such a 2 s read. */
Test(bgthread, a_programs_open_gets_the_lowest_free_descriptor) {
  bg_case_env("fds", "EBB_BACKGROUND=auto EBB_DECAY_MS=40", "another number than 0: 0\n");
}
Test(bgthread, a_programs_open_gets_the_lowest_free_descriptor_bg_from_start) {
  bg_case_env("fds", "EBB_BACKGROUND=1 EBB_DECAY_MS=40", "another number than 0: 0\n");
}

/* A child made by _Fork runs no atfork handler: ebb's _Fork holds the
 * background thread off its locks around it, so no child's malloc waits on a
 * lock held for good (13 of 600 children hung; found by a probe). */
Test(bgthread, a_raw_fork_child_never_waits_on_the_background_threads_lock) {
  bg_case_env("rawfork", "EBB_BACKGROUND=auto EBB_DECAY_MS=1", "hung 0, failed 0");
}
Test(bgthread, a_raw_fork_child_never_waits_on_the_background_threads_lock_bg_from_start) {
  bg_case_env("rawfork", "EBB_BACKGROUND=1 EBB_DECAY_MS=1", "hung 0, failed 0");
}

/* A _Fork from a signal handler that interrupted a holder of ebb's lock does
 * not wait for the background thread, which may be waiting on that lock: main
 * stopped for good while each handler waited out its bound (found by a probe;
 * with the 10 s deadline, a stall also shows as 137). */
Test(bgthread, a_raw_fork_from_a_signal_handler_never_stalls_the_program) {
  bg_case_env("sigfork", "EBB_BACKGROUND=auto EBB_DECAY_MS=1", "stalled 0,");
}

/* The background thread blocks every signal: a blocked SIGUSR1 sent to the
 * process killed it (the background thread took it with the default action). */
/* One malloc_trim after threads exited returns everything at once, however
 * the background thread's own passes fall (bg_thread.c, trim): five times,
 * since the race it had was lost about two times in three. */
Test(bgthread, one_trim_after_threads_exit_leaves_nothing_dirty) {
  for (int i = 0; i < 5; i++) bg_case("trim", "1", "after one trim: dirty 0 KiB");
}

Test(bgthread, a_blocked_signal_reaches_sigwait) { bg_case("sigwait", "auto", "sigwait got 10"); }
Test(bgthread, a_blocked_signal_reaches_sigwait_bg_from_start) { bg_case("sigwait", "1", "sigwait got 10"); }

/* A program with a large static TLS: glibc takes it out of every thread's
 * stack, ebb's too, whose 64 KiB stack crashed such a program (~58 KB) or could
 * not be created (more); the thread now has the default stack size. */
static void big_tls_case(unsigned bytes) {
  char def[64], out[32]; /* one binary per size: tests run in parallel */
  snprintf(def, sizeof def, "-O1 -Wall -Wextra -Werror -pthread -DTLS_BYTES=%u", bytes);
  snprintf(out, sizeof out, "big_tls_%u", bytes);
  int st = compile_program(&bg_out, NULL, "big_tls.c", out, def, "-pthread");
  cr_assert_eq(st, 0, "compiling big_tls.c: %s\n%s%s", describe_status(st), bg_out.out, bg_out.err);
  st = run_cmd(&bg_out, "timeout -s KILL 10 env -i LD_PRELOAD='%s/build/libebb.so' '%s/%s'", repo_root(),
               tmp_dir(), out);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "big_tls with %u bytes of TLS: %s\n%s%s", bytes,
            describe_status(st), bg_out.out, bg_out.err);
  cr_assert(strstr(bg_out.out, "threads=3"), "big_tls with %u bytes of TLS: ebb's background thread is not running "
            "(main, the worker and it make 3)\n%s", bytes, bg_out.out);
}

Test(bgthread, a_program_with_58_kb_of_tls) { big_tls_case(58000); }
Test(bgthread, a_program_with_1_mb_of_tls) { big_tls_case(1 << 20); }

/* A thread that a library's constructor started before ebb's constructor ran
 * (ld.so runs the program's own libraries' constructors before a preloaded
 * libebb.so's) never passed through ebb's pthread_create, so under
 * EBB_BACKGROUND=auto no background thread started, and the 100 MiB that
 * thread freed before blocking for good stayed resident (found by a probe:
 * 199 MB after 3 s). ebb's constructor now starts it when the process has a
 * second thread already. */
Test(bgthread, a_thread_from_a_librarys_constructor_gets_the_background_thread) {
  char after[1024];
  int st = compile_program(&bg_out, NULL, "ctor_thread.c", "libctor_thread.so",
                           "-O1 -Wall -Wextra -Werror -shared -fPIC -DCTOR_LIB -pthread", "-pthread");
  cr_assert_eq(st, 0, "compiling the library: %s\n%s%s", describe_status(st), bg_out.out, bg_out.err);
  snprintf(after, sizeof after, "-Wl,--no-as-needed -L'%s' -lctor_thread -Wl,-rpath,'%s' -pthread", tmp_dir(),
           tmp_dir());
  st = compile_program(&bg_out, NULL, "ctor_thread.c", "ctor_thread", "-O1 -Wall -Wextra -Werror -pthread", after);
  cr_assert_eq(st, 0, "compiling the program: %s\n%s%s", describe_status(st), bg_out.out, bg_out.err);
  st = run_cmd(&bg_out, "timeout -s KILL 20 env -i LD_PRELOAD='%s/build/libebb.so' '%s/ctor_thread'", repo_root(),
               tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ctor_thread: %s\n%s%s", describe_status(st), bg_out.out,
            bg_out.err);
  expect_ctor_thread_got_the_background_thread(bg_out.out);
}
