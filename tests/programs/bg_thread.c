/* bg_thread.c — ebb's background thread must stay out of the program's way
 * (found by a probe): it must not keep a process alive whose main() called
 * pthread_exit, and must not take a signal the program blocked to wait for it.
 *
 * Usage: bg_thread exit|exit-nofile|exit-alone|exit-raw|sigwait|fds|rawfork|sigfork|trim
 *   trim:        8 threads each malloc 3000 blocks of 1-300 KB (64 bytes of
 *                each written) and free them, 20 times, and exit; then one
 *                malloc_trim must leave nothing dirty and nothing pooled
 *                (ebb_stats, looked up at run time). With the background
 *                thread running, a pass of its own could send an exited
 *                thread's empty chunks to the pool, resident, after the trim
 *                had purged the pool: 450-540 MiB dirty after it in 2 runs of
 *                3 (found by a probe);
 *   exit:        a worker mallocs and prints, main() calls pthread_exit: the
 *                process must end with status 0 once the worker has (POSIX),
 *                its output flushed;
 *   exit-nofile: the same, the worker lowering RLIMIT_NOFILE to 3 before it
 *                ends: the background thread can open no file (/proc among
 *                them) and must end all the same (it ran on for good, and the
 *                process with it; found by a probe);
 *   exit-raw:    as exit, but main's thread ends with the raw exit system
 *                call, which runs no destructor (ebb sees no exit of it): the
 *                process must end all the same (it hung; found by a probe);
 *   exit-alone:  main() calls pthread_exit at once (with EBB_BACKGROUND=1 the
 *                background thread is then the only thread left);
 *   sigwait:     a helper thread with every signal blocked starts first (so the
 *                background thread starts, with EBB_BACKGROUND=auto), then
 *                main blocks SIGUSR1, sends it to the process and sigwaits:
 *                it must arrive there, not kill the process;
 *   fds:         a helper thread sleeps (so the background thread runs, with
 *                EBB_BACKGROUND=auto) while main closes descriptor 0 and
 *                opens /dev/null again, 3 s long: POSIX gives it the lowest
 *                free number, 0, every time. The background thread took that
 *                number for its own open of /proc/self/stat now and then
 *                (about once in 20,000 tries; found by a probe);
 *   rawfork:     a thread is created and joined (so the background thread
 *                runs, with EBB_BACKGROUND=auto), then main frees 20,000
 *                blocks (the background thread's next passes have work) and
 *                makes 20 children with _Fork (no atfork handler runs), each
 *                allocating through the slow paths, 15 times: no child may
 *                hang (one whose malloc waits on a lock the background thread
 *                held at the _Fork; 13 of 600 did; found by a probe);
 *   sigfork:     a SIGALRM every 20 ms calls _Fork from its handler (the
 *                child exits at once) while main mallocs and frees 5 MiB
 *                blocks and two threads spin (load), 4 s long: main must
 *                make progress in every half
 *                second (a handler that interrupted main holding the
 *                large-block lock waited 100 ms for the background thread,
 *                which waited on that lock, and the next signal came: main
 *                never ran again; found by a probe).
 * Prints what happened; exits 0 on success. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <errno.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "ebb.h"

static void *worker(void *arg) {
  (void)arg;
  char *p = malloc(100);
  snprintf(p, 100, "worker done");
  usleep(50 * 1000); /* main is gone by now */
  puts(p);
  free(p);
  return NULL;
}

static void *worker_nofile(void *arg) {
  worker(arg);
  struct rlimit r = {3, 3};
  fflush(stdout);
  setrlimit(RLIMIT_NOFILE, &r);
  return NULL;
}

static void *quiet_helper(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  free(malloc(64));
  pause(); /* never woken: every signal is blocked */
  return NULL;
}

static void *sleeper(void *arg) {
  (void)arg;
  free(malloc(64));
  pause();
  return NULL;
}

extern pid_t _Fork(void); /* glibc 2.34 */
static void *nothing(void *arg) { return arg; }

static int raw_forks(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0) return 2;
  static void *p[20000];
  int hung = 0, failed = 0, n = 0;
  for (int round = 0; round < 15; round++) {
    for (int j = 0; j < 20000; j++) p[j] = malloc(16 + (size_t)(j * 7919) % 8000);
    for (int j = 0; j < 20000; j++) free(p[j]);
    for (int k = 0; k < 20; k++, n++) {
      pid_t c = _Fork();
      if (c < 0) return 2;
      if (c == 0) {
        for (int j = 0; j < 3000; j++) p[j] = malloc(16 + (size_t)(j * 131) % 30000);
        for (int j = 0; j < 3000; j++) free(p[j]);
        free(malloc(3 << 20));
        _exit(0);
      }
      int st = 0, q;
      for (q = 0; q < 200 && waitpid(c, &st, WNOHANG) != c; q++) usleep(5000);
      if (q == 200) { /* 1 s: hung */
        hung++;
        kill(c, SIGKILL);
        waitpid(c, &st, 0);
      } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        failed++;
      }
    }
  }
  printf("children %d, hung %d, failed %d\n", n, hung, failed);
  fflush(stdout);
  return hung || failed;
}

static volatile sig_atomic_t forked_in_handler;
static void fork_on_alarm(int sig) {
  (void)sig;
  int e = errno;
  pid_t c = _Fork();
  if (c == 0) _exit(0);
  if (c > 0) forked_in_handler++;
  errno = e;
}

static volatile int spinning = 1;
static void *spin(void *arg) {
  while (spinning) {
  }
  return arg;
}

static double now_s(void);
static int signal_forks(void) {
  /* two threads that only spin, on 2 cores: main and the background thread
   * wait their turns, as on a loaded machine (where the stall showed) */
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, spin, NULL) != 0) return 2;
  signal(SIGCHLD, SIG_IGN); /* the children are reaped by the kernel */
  signal(SIGALRM, fork_on_alarm);
  struct itimerval it = {{0, 20000}, {0, 20000}};
  setitimer(ITIMER_REAL, &it, NULL);
  int stalled = 0;
  double next = now_s() + 0.5;
  unsigned long last = 0, n = 0;
  for (int window = 0; window < 8;) {
    free(malloc(5 << 20));
    n++;
    if (now_s() >= next) { /* only main's own loop notices the time: a stalled main never gets here */
      stalled += n - last < 10;
      last = n;
      window++;
      next += 0.5;
    }
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  spinning = 0;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("windows 8, stalled %d, forks %d\n", stalled, (int)forked_in_handler);
  fflush(stdout);
  return stalled != 0;
}

static void *churner(void *arg) {
  enum { N = 3000 };
  static __thread void *p[N];
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int r = 0; r < 20; r++) {
    for (int i = 0; i < N; i++) {
      seed = seed * 1103515245u + 12345u;
      p[i] = malloc(1000 + (seed >> 8) % 300000);
      if (!p[i]) return NULL;
      memset(p[i], 1, 64);
    }
    for (int i = 0; i < N; i++) free(p[i]);
  }
  return arg;
}

static int trim_after_threads(void) {
  void (*stats)(struct ebb_stats *) = (void (*)(struct ebb_stats *))dlsym(RTLD_DEFAULT, "ebb_stats");
  if (!stats) return 2;
  pthread_t t[8];
  for (uintptr_t i = 0; i < 8; i++)
    if (pthread_create(&t[i], NULL, churner, (void *)(i + 1)) != 0) return 2;
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  malloc_trim(0);
  struct ebb_stats s;
  stats(&s); /* 0.1's fields, dirty and mapped among them */
  printf("after one trim: dirty %zu KiB, mapped %zu KiB\n", s.dirty >> 10, s.mapped >> 10);
  fflush(stdout);
  return s.dirty == 0 && s.mapped <= (size_t)16 << 20 ? 0 : 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  setvbuf(stdout, NULL, _IOFBF, 4096); /* only exit(0) flushes it */
  free(malloc(32));
  if (strcmp(argv[1], "exit") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    pthread_exit(NULL);
  }
  if (strcmp(argv[1], "exit-nofile") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker_nofile, NULL) != 0) return 2;
    pthread_exit(NULL);
  }
  if (strcmp(argv[1], "exit-raw") == 0) {
    setvbuf(stdout, NULL, _IONBF, 0); /* no exit(0) runs: glibc counts main as alive */
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    syscall(SYS_exit, 0);
  }
  if (strcmp(argv[1], "exit-alone") == 0) {
    printf("main gone\n");
    pthread_exit(NULL);
  }
  if (strcmp(argv[1], "sigwait") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, quiet_helper, NULL) != 0) return 2;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    usleep(50 * 1000);
    kill(getpid(), SIGUSR1); /* to the process: any thread not blocking it may take it */
    int sig = 0;
    if (sigwait(&usr1, &sig) != 0 || sig != SIGUSR1) return 1;
    printf("sigwait got %d\n", sig);
    fflush(stdout);
    _exit(0); /* the helper sleeps on */
  }
  if (strcmp(argv[1], "rawfork") == 0) return raw_forks();
  if (strcmp(argv[1], "trim") == 0) return trim_after_threads();
  if (strcmp(argv[1], "sigfork") == 0) return signal_forks();
  if (strcmp(argv[1], "fds") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, sleeper, NULL) != 0) return 2;
    long tries = 0, wrong = 0;
    double end = now_s() + 3.0;
    while (now_s() < end) {
      for (int i = 0; i < 1000; i++, tries++) {
        close(0);
        int fd = open("/dev/null", O_RDONLY);
        if (fd != 0) {
          wrong++;
          if (fd > 0) close(fd);
        }
      }
    }
    printf("opens %ld, another number than 0: %ld\n", tries, wrong);
    fflush(stdout);
    _exit(wrong ? 1 : 0); /* the helper sleeps on */
  }
  return 2;
}
