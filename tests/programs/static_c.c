/* static_c.c — run by tests/integration/test_static.c after linking with
 * build/libebb.a (and once more with -static): proves that ebb, not libc,
 * serves malloc and friends, including libc's own internal allocations.
 * Prints "FAIL ..." for each broken expectation and "OK" at the end;
 * the exit status is the number of failures. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ebb.h"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL line %d: %s\n", __LINE__, #cond);                                               \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void *thread_main(void *arg) {
  char *p = malloc(1000);
  if (p) memset(p, 1, 1000);
  CHECK(ebb_owns(p));
  free(arg); /* a block from the main thread */
  return p;
}

int main(void) {
  void *p = malloc(100), *q = calloc(10, 10), *r = realloc(NULL, 5000), *a = aligned_alloc(4096, 100);
  void *m = NULL;
  if (p) memset(p, 0, 100);
  if (r) memset(r, 0, 5000);
  if (a) memset(a, 0, 100);
  CHECK(posix_memalign(&m, 64, 100) == 0);
  CHECK(ebb_owns(p) && ebb_owns(q) && ebb_owns(r) && ebb_owns(a) && ebb_owns(m));
  CHECK(malloc_usable_size(p) >= 100);
  void *big = malloc(10 << 20);
  CHECK(ebb_owns(big));
  /* libc's internal allocations go to ebb too, so they can be freed with it */
  char *s = strdup("static linking");
  CHECK(ebb_owns(s));
  free(s);
  char *line = NULL;
  size_t cap = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  if (f) {
    CHECK(getline(&line, &cap, f) > 0);
    CHECK(ebb_owns(line));
    free(line);
    fclose(f);
  }
  pthread_t t;
  void *tp = NULL;
  CHECK(pthread_create(&t, NULL, thread_main, q) == 0);
  CHECK(pthread_join(t, &tp) == 0);
  CHECK(ebb_owns(tp));
  free(tp);
  /* fork: the child keeps using ebb */
  pid_t child = fork();
  if (child == 0) {
    void *c = malloc(300);
    _exit(ebb_owns(c) ? 0 : 1);
  }
  int status = -1;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  struct ebb_stats st;
  ebb_stats(&st);
  CHECK(st.mapped > 0);
  CHECK(st.mapped >= (10 << 20));
  free(p);
  free(r);
  free(a);
  free(m);
  free(big);
  printf("%s mapped=%zu\n", failures ? "FAILED" : "OK", st.mapped);
  return failures;
}
