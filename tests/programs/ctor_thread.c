/* ctor_thread.c — run by tests/integration/test_bgthread.c and test_static.c:
 * a thread started from a constructor that runs before ebb's (a library's,
 * under LD_PRELOAD: ld.so runs the program's own libraries' constructors
 * before a preloaded libebb.so's; or the program's own of priority 101 in a
 * static link). The worker mallocs 100 MiB of 1 KiB blocks, frees them all and
 * blocks for good, so only ebb's background thread can give that memory back.
 * Built with -DCTOR_LIB it is the library (the constructor alone); otherwise
 * the program, which (linked with that library, or with -DCTOR_HERE for its
 * own constructor) waits until the worker is done, then up to 3 s for its RSS
 * to fall below 40 MiB (allocating nothing meanwhile), and prints "threads=N rss_mib=M" (N counted while the
 * worker lives: 3 with ebb's background thread). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(CTOR_LIB) || defined(CTOR_HERE)
#define BLOCKS (100 * 1024)
atomic_int ctor_worker_done;
static void *worker(void *arg) {
  (void)arg;
  char **b = malloc(BLOCKS * sizeof *b);
  if (!b) abort();
  for (int i = 0; i < BLOCKS; i++)
    if (!(b[i] = malloc(1024))) abort();
    else memset(b[i], 1, 1024);
  for (int i = 0; i < BLOCKS; i++) free(b[i]);
  free(b);
  atomic_store(&ctor_worker_done, 1);
  for (;;) pause();
  return NULL;
}
__attribute__((constructor(101))) static void start_worker(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) abort();
}
#endif

#ifndef CTOR_LIB
extern atomic_int ctor_worker_done;

static int threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Read without stdio: the program must not allocate while it waits (its own
 * allocations would run ebb's decay, which could return the worker's memory
 * without the background thread). */
static double rss_mib(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strchr(buf, ' ');
  if (!p) return -1;
  return (double)strtol(p + 1, NULL, 10) * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

int main(void) {
  while (!atomic_load(&ctor_worker_done)) usleep(1000);
  double rss = rss_mib();
  for (int ms = 0; ms < 3000 && rss >= 40; ms += 10) {
    usleep(10000);
    rss = rss_mib();
  }
  printf("threads=%d rss_mib=%.1f\n", threads(), rss);
  return 0;
}
#endif
