/* clash.c — a program that defines, for itself, names the allocator uses
 * internally (opt, page_init, spin_lock, chunk_new, arena_tls, os_map) and
 * pthread_create (which libebb.a leaves to the program: it has only ebb_pthread_create), then
 * links statically with build/libebb.a. The archive must export only public
 * names, so this links (no "multiple definition") and ebb is still the
 * program's malloc. Prints OK. Built and run by tests/integration/test_symbols.c. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ebb.h"

int opt;
int arena_tls;
static int calls;
void page_init(void) { calls += 1; }
void spin_lock(void) { calls += 2; }
void chunk_new(void) { calls += 4; }
void os_map(void) { calls += 8; }
/* This program creates no threads: its own pthread_create only says so. */
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  (void)t, (void)attr, (void)fn, (void)arg;
  calls += 16;
  return ENOSYS;
}

/* Through a volatile table, so the compiler keeps and calls every definition. */
static void (*volatile fns[])(void) = {page_init, spin_lock, chunk_new, os_map};

int main(void) {
  for (unsigned i = 0; i < sizeof fns / sizeof fns[0]; i++) fns[i]();
  pthread_t t;
  int (*volatile create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) = pthread_create;
  if (create(&t, NULL, NULL, NULL) != ENOSYS) return printf("ebb's pthread_create was called\n"), 1;
  opt = 7;
  arena_tls = 11;
  if (calls != 31 || *(volatile int *)&opt != 7 || *(volatile int *)&arena_tls != 11) {
    printf("the program's own definitions were not used (calls=%d opt=%d arena_tls=%d)\n", calls, opt,
           arena_tls);
    return 1;
  }
  void *blocks[64];
  for (int i = 0; i < 64; i++) {
    blocks[i] = malloc((size_t)(i + 1) * 48);
    if (!blocks[i]) return printf("malloc failed\n"), 1;
  }
  for (int i = 0; i < 64; i += 2) free(blocks[i]);
  void *p = malloc(100);
  if (ebb_owns(p) != 1) {
    printf("malloc(100) did not come from ebb (ebb_owns = %d)\n", ebb_owns(p));
    return 1;
  }
  free(p);
  for (int i = 1; i < 64; i += 2) free(blocks[i]);
  printf("OK\n");
  return 0;
}
