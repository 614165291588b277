/* static_late_key.c — run by tests/integration/test_static.c, linked with
 * build/libebb.a and -Wl,--defsym=pthread_create=ebb_pthread_create. A
 * constructor that runs before ebb's creates 40 pthread keys, so ebb's exit
 * key is past the first 32 and glibc allocates its second-level block (512 B)
 * in each thread's first pthread_setspecific of it, which ebb's thread start
 * routine makes before the program's code. Starts 2000 threads one after
 * another, half of which allocate nothing themselves, and checks ebb_stats:
 * what is allocated afterwards must not have grown by a block a thread (a
 * probe found 512 B a thread: the setspecific of the arena bound inside that
 * allocation ran inside the first and lost a block to it). Prints "OK ..."
 * or "FAIL ...". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ebb.h"

static pthread_key_t keys[40];

__attribute__((constructor(100))) static void keys_first(void) {
  for (int i = 0; i < 40; i++)
    if (pthread_key_create(&keys[i], NULL)) abort();
}

static void *quiet(void *arg) { return arg; }

static void *allocating(void *arg) {
  void *p = malloc(32);
  free(p);
  return arg;
}

int main(void) {
  enum { THREADS = 2000 };
  pthread_t t;
  void *r;
  if (pthread_create(&t, NULL, allocating, NULL) || pthread_join(t, &r)) return 2;
  struct ebb_stats before, after;
  ebb_stats(&before);
  for (long i = 0; i < THREADS; i++) {
    if (pthread_create(&t, NULL, i % 2 ? quiet : allocating, (void *)i) || pthread_join(t, &r)) return 2;
    if ((long)r != i) {
      printf("FAIL thread %ld returned %ld\n", i, (long)r);
      return 1;
    }
  }
  ebb_stats(&after);
  long grown = (long)after.allocated - (long)before.allocated;
  printf("%s allocated grew by %ld bytes over %d threads, arenas %llu -> %llu\n",
         grown < 64 * 1024 ? "OK" : "FAIL", grown, THREADS, (unsigned long long)before.arenas,
         (unsigned long long)after.arenas);
  return grown < 64 * 1024 ? 0 : 1;
}
