/* big_tls.c — a program with TLS_BYTES of static thread-local data (built with
 * -DTLS_BYTES=N) that starts one worker thread: ebb's background thread
 * (EBB_BACKGROUND=auto starts it at the first pthread_create) must run as any
 * thread of the program does. glibc carves static TLS out of each thread's
 * stack, and the background thread's 64 KiB stack crashed the process at ~58 KB
 * of TLS and could not be created at all above ~60 KB (found by a probe).
 * Prints "threads=N" (3: main, worker, ebb's) and exits 0. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static __thread char scratch[TLS_BYTES];
static atomic_int release;

static int threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void *worker(void *arg) {
  (void)arg;
  memset(scratch, 1, sizeof scratch);
  while (!atomic_load(&release)) usleep(1000);
  return NULL;
}

int main(void) {
  memset(scratch, 2, sizeof scratch);
  free(malloc(100));
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return printf("pthread_create failed\n"), 2;
  usleep(300 * 1000); /* the background thread's first passes (and sleeps) */
  int n = threads();
  atomic_store(&release, 1);
  pthread_join(t, NULL);
  printf("threads=%d\n", n);
  return 0;
}
