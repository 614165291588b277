/* as_limit.c — ebb under an address-space limit (RLIMIT_AS): memory a program
 * freed but ebb still holds (the large-block cache, an exited thread's arena)
 * must be taken back before a malloc reports ENOMEM. Found by a probe: with
 * `ulimit -v`, malloc(1000) failed while 248 MiB of freed 8 MiB blocks sat in
 * the large-block cache.
 *
 * Usage: as_limit large|thread|exact. exact: see exact() below. The others
 * limit the address space to what the process has now plus 320 MiB, then
 *   large:  mallocs 8 MiB blocks until one fails, frees them all, and mallocs
 *           20000 blocks of 1000 B;
 *   thread: a thread mallocs 1000 B blocks until one fails, frees them all and
 *           exits; then the main thread mallocs 40000 blocks of 1000 B, and a
 *           new first-class arena 40000 more.
 * Prints key=value fields; exits 0 when every one of the small mallocs after
 * the frees succeeded, 1 when one failed, 2 when the set-up went wrong. Run it
 * with EBB_BACKGROUND=0, so that nothing returns the memory behind its back. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ebb.h"

/* Found at run time: the program is linked against no allocator (LD_PRELOAD). */
static ebb_arena_t *(*arena_create)(void);
static void *(*arena_malloc)(ebb_arena_t *, size_t);

#define HEADROOM ((size_t)320 << 20)

static size_t vm_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb << 10;
}

/* Mallocs `size` blocks until one fails, linked through their first word;
 * frees them all. Returns how many there were. */
static size_t fill_and_free(size_t size) {
  void *head = NULL;
  size_t n = 0;
  for (void *p; (p = malloc(size)) != NULL; n++) {
    *(void **)p = head;
    head = p;
  }
  while (head) {
    void *next = *(void **)head;
    free(head);
    head = next;
  }
  return n;
}

/* n mallocs of 1000 B (through arena a, if any), kept live; the number that succeeded. */
static size_t small_mallocs(ebb_arena_t *a, size_t n) {
  size_t ok = 0;
  for (; ok < n; ok++) {
    void *p = a ? arena_malloc(a, 1000) : malloc(1000);
    if (!p) {
      printf("failed_at=%zu errno=%d ", ok, errno);
      break;
    }
    memset(p, 1, 1000);
  }
  return ok;
}

static void *filler(void *arg) {
  *(size_t *)arg = fill_and_free(1000);
  return NULL;
}

/* A new chunk (4 MiB) must fit in 4.5 MiB of headroom, a 16 MiB block in 17
 * MiB: aligned mappings over-mapped by their alignment every time, so they
 * needed 8 and 20 (os_map_aligned). */
static int exact(void) {
  ebb_arena_t *a = arena_create(); /* its first malloc takes a chunk of its own */
  if (!a) return 2;
  struct rlimit rl = {.rlim_cur = vm_size() + ((size_t)4608 << 10), .rlim_max = RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &rl) != 0) return perror("setrlimit"), 2;
  void *p = arena_malloc(a, 16);
  printf("chunk=%d ", p != NULL);
  rl.rlim_cur = vm_size() + ((size_t)17 << 20);
  if (setrlimit(RLIMIT_AS, &rl) != 0) return perror("setrlimit"), 2;
  void *big = malloc((size_t)16 << 20);
  printf("large=%d\n", big != NULL);
  return !p || !big;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  arena_create = (ebb_arena_t * (*)(void)) dlsym(RTLD_DEFAULT, "ebb_arena_create");
  arena_malloc = (void *(*)(ebb_arena_t *, size_t))dlsym(RTLD_DEFAULT, "ebb_arena_malloc");
  if (!arena_create || !arena_malloc) return printf("ebb=0\n"), 2;
  if (strcmp(argv[1], "exact") == 0) return exact();
  free(malloc(1)); /* the main thread's arena, before the limit */
  struct rlimit rl = {.rlim_cur = vm_size() + HEADROOM, .rlim_max = RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &rl) != 0) return perror("setrlimit"), 2;
  int failed = 0;
  if (strcmp(argv[1], "large") == 0) {
    size_t n = fill_and_free((size_t)8 << 20);
    printf("large_blocks=%zu ", n);
    if (n < 16) return 2;
    size_t ok = small_mallocs(NULL, 20000);
    printf("small_after=%zu\n", ok);
    failed = ok < 20000;
  } else if (strcmp(argv[1], "thread") == 0) {
    size_t n = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, filler, &n) != 0 || pthread_join(t, NULL) != 0) return 2;
    printf("thread_blocks=%zu ", n);
    if (n < 100000) return 2;
    size_t ok = small_mallocs(NULL, 40000);
    printf("main_after=%zu ", ok);
    ebb_arena_t *a = arena_create();
    size_t ok_arena = a ? small_mallocs(a, 40000) : 0;
    printf("arena=%d arena_after=%zu\n", a != NULL, ok_arena);
    failed = ok < 40000 || ok_arena < 40000;
  } else {
    return 2;
  }
  return failed;
}
