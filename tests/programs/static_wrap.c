/* static_wrap.c — run by tests/integration/test_static.c, linked with
 * build/libebb.a with and without the flags that make pthread_create ebb's
 * (-Wl,--defsym=pthread_create=ebb_pthread_create, or --wrap). Creates one thread
 * and, while it is alive, counts the process's threads: 3 when ebb's wrapper
 * started its background thread (EBB_BACKGROUND=auto), 2 when the archive's
 * wrapper is not linked in and libc's pthread_create ran alone. Prints
 * "OK threads=N" when N is argv[1], else "FAIL threads=N". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb.h"

static atomic_int release;

static void *wait_main(void *arg) {
  (void)arg;
  while (!atomic_load(&release)) sched_yield();
  return NULL;
}

static int threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  int want = argc > 1 ? atoi(argv[1]) : -1;
  void *p = malloc(100);
  if (!ebb_owns(p)) return printf("FAIL not on ebb\n"), 1;
  free(p);
  pthread_t t;
  if (pthread_create(&t, NULL, wait_main, NULL) != 0) return printf("FAIL pthread_create\n"), 1;
  int n = threads();
  atomic_store(&release, 1);
  pthread_join(t, NULL);
  printf("%s threads=%d\n", n == want ? "OK" : "FAIL", n);
  return n == want ? 0 : 1;
}
