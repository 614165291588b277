/* as_limit.c — ebb under an address-space limit (RLIMIT_AS): memory a program
 * freed but ebb still holds (the large-block cache, an exited thread's arena)
 * must be taken back before a malloc reports ENOMEM. Found by a probe: with
 * `ulimit -v`, malloc(1000) failed while 248 MiB of freed 8 MiB blocks sat in
 * the large-block cache.
 *
 * Usage: as_limit large|thread|exact|realloc|arena_freed|bgstack. exact,
 * realloc, arena_freed and bgstack: see exact(), grow_in_place(),
 * arena_freed() and bgstack() below. The others
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
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
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

/* n mallocs of `size` B (through arena a, if any), kept live; the number that succeeded. */
static size_t small_mallocs_of(ebb_arena_t *a, size_t n, size_t size) {
  size_t ok = 0;
  for (; ok < n; ok++) {
    void *p = a ? arena_malloc(a, size) : malloc(size);
    if (!p) {
      printf("failed_at=%zu errno=%d ", ok, errno);
      break;
    }
    memset(p, 1, size);
  }
  return ok;
}

static size_t small_mallocs(ebb_arena_t *a, size_t n) { return small_mallocs_of(a, n, 1000); }

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

/* A 40 MiB block with free address space right after it grows by 16 MiB
 * under a limit that leaves room for the growth but not for a freed 40 MiB
 * block the large-block cache holds as well: the realloc must give the cache
 * back and grow in place, not fail (found by a probe: the failed growth purged
 * the cache but only a fresh mapping of the new size, with the old block still
 * mapped, was tried again; the same realloc called again then succeeded).
 * The room after the block: an 80 MiB block mapped before it (the kernel maps
 * top-down, so above it), freed and trimmed, then the cached block, which the
 * kernel puts at the top of that hole. Exits 2 if the layout is not so. */
static int grow_in_place(void) {
  const size_t S = (size_t)40 << 20, C = (size_t)40 << 20, G = (size_t)16 << 20;
  free(malloc(64)); /* the main thread's arena, before anything is measured */
  char *h = malloc((size_t)80 << 20);
  char *x = malloc(S);
  if (!h || !x) return 2;
  memset(x, 0x5a, S);
  free(h);
  malloc_trim(0); /* unmapped now: a hole above x */
  char *y = malloc(C);
  if (!y) return 2;
  memset(y, 1, 4096);
  free(y); /* into the large-block cache, still mapped */
  int room = y >= x + S + G || y + C <= x;
  printf("x=%p y=%p room_after_x=%d ", (void *)x, (void *)y, room);
  if (!room) return printf("\n"), 2;
  struct rlimit rl = {.rlim_cur = vm_size() - C + G + ((size_t)8 << 20), .rlim_max = RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &rl) != 0) return perror("setrlimit"), 2;
  errno = 0;
  char *q = realloc(x, S + G);
  printf("grown=%d errno=%d in_place=%d ", q != NULL, errno, q == x);
  if (!q) return printf("\n"), 1;
  size_t bad = 0;
  for (size_t o = 0; o < S; o += 4096) bad += q[o] != 0x5a;
  printf("bytes_changed=%zu\n", bad);
  return bad != 0;
}

/* 40,000 blocks of 1000 B from a first-class arena, freed with plain free(),
 * then, under a limit of 64 KiB more address space, 4,000 blocks of 5000 B
 * from the same arena: the freed blocks' pages must serve them (they failed
 * at the first). */
static int arena_freed(void) {
  ebb_arena_t *a = arena_create();
  if (!a) return 2;
  static void *ps[40000];
  for (int i = 0; i < 40000; i++) {
    ps[i] = arena_malloc(a, 1000);
    if (!ps[i]) return 2;
    memset(ps[i], 3, 1000);
  }
  for (int i = 0; i < 40000; i++) free(ps[i]);
  struct rlimit rl = {.rlim_cur = vm_size() + ((size_t)64 << 10), .rlim_max = RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &rl) != 0) return perror("setrlimit"), 2;
  size_t ok = small_mallocs_of(a, 4000, 5000);
  printf("arena_after=%zu\n", ok);
  return ok < 4000;
}

static void *small_thread(void *arg) {
  free(malloc(100));
  return arg;
}

static int threads_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

/* Run with EBB_BACKGROUND=auto: under a limit of 7 MiB more address space
 * than the process has, the program starts a thread with a 64 KiB stack;
 * ebb's background thread must start too (its default 8 MiB stack did not
 * fit, and it silently never ran: found by a probe). After the join the
 * process has 2 threads with it, 1 without. */
static int bgstack(void) {
  free(malloc(64));
  struct rlimit rl = {.rlim_cur = vm_size() + ((size_t)7 << 20), .rlim_max = RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &rl) != 0) return perror("setrlimit"), 2;
  pthread_attr_t attr;
  pthread_t t;
  void *ret = NULL;
  if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, (size_t)64 << 10) != 0) return 2;
  static int token;
  if (pthread_create(&t, &attr, small_thread, &token) != 0 || pthread_join(t, &ret) != 0 || ret != &token) return 2;
  int n = threads_now();
  printf("threads_after_join=%d\n", n);
  return n != 2;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  arena_create = (ebb_arena_t * (*)(void)) dlsym(RTLD_DEFAULT, "ebb_arena_create");
  arena_malloc = (void *(*)(ebb_arena_t *, size_t))dlsym(RTLD_DEFAULT, "ebb_arena_malloc");
  if (!arena_create || !arena_malloc) return printf("ebb=0\n"), 2;
  if (strcmp(argv[1], "exact") == 0) return exact();
  if (strcmp(argv[1], "realloc") == 0) return grow_in_place();
  if (strcmp(argv[1], "arena_freed") == 0) return arena_freed();
  if (strcmp(argv[1], "bgstack") == 0) return bgstack();
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
