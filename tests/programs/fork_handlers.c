/* fork_handlers.c — run by tests/integration/test_preload_churn.c with
 * LD_PRELOAD="libebb.so pre_atfork.so" (tests/programs/pre_atfork.c): fork in a
 * program whose pthread_atfork handlers allocate, some registered before ebb's
 * (pre_atfork.so's constructor, "B") and some after (here, "A"). Prepare
 * handlers run in reverse order of registration, so B's allocate while ebb's
 * prepare holds its locks, and B's child handler runs before ebb's. Main forks
 * 200 times while other threads allocate ("threads"; "single": none); each
 * child allocates, frees and _exits; a child not done in 10 s is a failure.
 * Exit status: 0 and "OK" on success; 2 set-up, 7 the handlers were not
 * registered B-ebb-A (the arrangement could not be made: says so), 8 they ran in
 * another order, 9 a child failed or hung. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { PH_PREPARE, PH_PARENT, PH_CHILD, PH_N };
#define FORKS 200
#define BUSY 3
#define CHILD_WAIT 10

static const char *(*registrations)(void);
static void (*activate)(int);
static void (*record)(int);
static const char *(*ran)(int);
static void (*note)(int, char);

static void allocate(unsigned salt) {
  static const size_t sizes[] = {3000, 70000, (size_t)1 << 20, (size_t)5 << 20};
  static const int counts[] = {40, 6, 2, 1};
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

static atomic_int active;
static void a_prepare(void) {
  if (!atomic_load(&active)) return;
  note(PH_PREPARE, 'A');
  allocate(4);
}
static void a_parent(void) {
  if (!atomic_load(&active)) return;
  note(PH_PARENT, 'A');
  allocate(5);
}
static void a_child(void) {
  if (!atomic_load(&active)) return;
  alarm(CHILD_WAIT + 10);
  note(PH_CHILD, 'A');
  allocate(6);
}

static atomic_int stop;
static void *busy(void *arg) {
  unsigned x = (unsigned)(size_t)arg * 2654435761u + 1;
  void *held[64] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    x = x * 1103515245u + 12345u;
    unsigned i = (x >> 8) % 64;
    free(held[i]);
    size_t size = 1 + (x >> 16) % 1024;
    held[i] = malloc(size);
    if (!held[i]) abort();
    memset(held[i], 1, size < 64 ? size : 64);
  }
  for (int i = 0; i < 64; i++) free(held[i]);
  return NULL;
}

static int wait_child(pid_t pid) {
  struct timespec nap = {0, 1000 * 1000};
  for (int i = 0; i < CHILD_WAIT * 1000; i++) {
    int status;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got < 0 && errno != EINTR) return -2;
    nanosleep(&nap, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "threads") && strcmp(argv[1], "single"))) return 2;
  int nbusy = strcmp(argv[1], "threads") == 0 ? BUSY : 0;
  setvbuf(stdout, NULL, _IONBF, 0); /* what was printed survives a kill after a hang */
  registrations = (const char *(*)(void))dlsym(RTLD_DEFAULT, "pre_atfork_registrations");
  activate = (void (*)(int))dlsym(RTLD_DEFAULT, "pre_atfork_activate");
  record = (void (*)(int))dlsym(RTLD_DEFAULT, "pre_atfork_record");
  ran = (const char *(*)(int))dlsym(RTLD_DEFAULT, "pre_atfork_ran");
  note = (void (*)(int, char))dlsym(RTLD_DEFAULT, "pre_atfork_note");
  int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "ebb_owns");
  if (!registrations || !activate || !record || !ran || !note) {
    printf("pre_atfork.so is not loaded\n");
    return 2;
  }
  void *probe = malloc(100);
  if (!owns || !owns(probe)) {
    printf("NOT ON EBB\n");
    return 2;
  }
  free(probe);

  pthread_atfork(a_prepare, a_parent, a_child);
  const char *regs = registrations();
  if (strcmp(regs, "BEA") != 0) {
    printf("pthread_atfork registrations ran in the order \"%s\" (B: a library constructor before ebb's, "
           "E: ebb, A: main), not \"BEA\": a handler registered before ebb's could not be arranged\n",
           regs);
    return 7;
  }
  printf("registrations %s\n", regs);
  atomic_store(&active, 1);
  activate(1);

  pthread_t t[BUSY];
  for (int i = 0; i < nbusy; i++)
    if (pthread_create(&t[i], NULL, busy, (void *)(size_t)i)) return 2;
  for (int iter = 0; iter < FORKS; iter++) {
    if (iter == 0) record(1);
    void *p = malloc(100 + (size_t)iter);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (iter == 0 && (strcmp(ran(PH_PREPARE), "AEB") || strcmp(ran(PH_CHILD), "BEA"))) {
        printf("child handlers: prepare ran \"%s\", child \"%s\"\n", ran(PH_PREPARE), ran(PH_CHILD));
        fflush(stdout);
        _exit(8);
      }
      allocate(7 + (unsigned)iter);
      free(p);
      free(malloc(200));
      _exit(0);
    }
    if (iter == 0) {
      record(0);
      if (strcmp(ran(PH_PREPARE), "AEB") || strcmp(ran(PH_PARENT), "BEA")) {
        printf("handlers ran out of order: prepare \"%s\" (want AEB), parent \"%s\" (want BEA)\n",
               ran(PH_PREPARE), ran(PH_PARENT));
        return 8;
      }
    }
    free(p);
    int st = wait_child(pid);
    if (st == -1) {
      printf("fork %d: the child did not exit within %d s (deadlock after fork?)\n", iter, CHILD_WAIT);
      return 9;
    }
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("fork %d: the child ended with status 0x%x\n", iter, st);
      return WIFEXITED(st) && WEXITSTATUS(st) == 8 ? 8 : 9;
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < nbusy; i++) pthread_join(t[i], NULL);
  printf("OK %d forks\n", FORKS);
  return 0;
}
