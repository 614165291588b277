/* reqarena.c — per-request arenas: the pattern of a WebAssembly runtime that gives
 * each request (instance) its own heap and throws it away whole. A request is one
 * 450 KiB context block and 3000 blocks of 16–512 B (log-uniform, seeded, new
 * sizes every request), every byte written, then everything released:
 *
 *   --arena 0  malloc      malloc every block, free every block (in allocation order)
 *   --arena 1  arena-destroy  create an arena, allocate the request from it, destroy it
 *   --arena 2  arena-reset    one arena for the whole run; allocate, then reset it
 *
 * The arena API is looked up at run time (dlsym(RTLD_DEFAULT, ...)), so the same
 * binary runs under every allocator:
 *   ebb       ebb_arena_create / ebb_arena_malloc / ebb_arena_destroy / ebb_arena_reset
 *   mimalloc  mi_heap_new / mi_heap_malloc / mi_heap_destroy; mimalloc has no reset,
 *             so arena-reset is destroy + new, and the result line says
 *             reset_emulated=1
 *   jemalloc  mallctl("arenas.create"), mallocx(size, MALLOCX_ARENA(i) |
 *             MALLOCX_TCACHE_NONE), mallctl("arena.<i>.reset" / "arena.<i>.destroy")
 * Under an allocator without one (glibc, tcmalloc), or without the reset entry point,
 * the arena cases print "note: skipped ..." and no result, and exit 0.
 *
 * Reports, over --requests requests after --warmup unmeasured ones: us_per_req
 * (mean: allocation, writes and release; the size planning is outside the timing),
 * faults_per_req (all faults of the measured phase), rss_kb, peak_rss_kb. */
#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 20000

/* jemalloc's flag encodings (jemalloc_macros.h, 5.x): 0 in the arena bits means
 * "automatic arena", in the tcache bits "automatic tcache"; both are biased. */
#define JE_MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)
#define JE_MALLOCX_TCACHE_NONE (((-1) + 2) << 8)

enum mode { MODE_MALLOC, MODE_DESTROY, MODE_RESET };
static const char *const mode_names[] = {"malloc", "arena-destroy", "arena-reset"};

static void *blocks[MAX_BLOCKS];
static size_t sizes[MAX_BLOCKS];

/* ------------------------------------------------------------ arena back-ends */

static struct {
  const char *api; /* "ebb", "mimalloc", "jemalloc" or NULL */
  int reset_emulated;
  /* ebb and mimalloc: */
  void *(*create)(void);
  void *(*amalloc)(void *, size_t);
  void (*destroy)(void *);
  void (*reset)(void *);
  /* jemalloc: */
  int (*mallctl)(const char *, void *, size_t *, void *, size_t);
  void *(*mallocx)(size_t, int);
} api;

static void *sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

/* Finds the arena API of the allocator in the process; returns a reason when there is none. */
static const char *find_api(enum mode m) {
  if ((api.create = (void *(*)(void))sym("ebb_arena_create"))) {
    api.api = "ebb";
    api.amalloc = (void *(*)(void *, size_t))sym("ebb_arena_malloc");
    api.destroy = (void (*)(void *))sym("ebb_arena_destroy");
    api.reset = (void (*)(void *))sym("ebb_arena_reset");
    if (!api.amalloc || !api.destroy) return "ebb_arena_malloc or ebb_arena_destroy not found";
    if (m == MODE_RESET && !api.reset) return "ebb_arena_reset not found (not in this build of libebb.so)";
    return NULL;
  }
  if ((api.create = (void *(*)(void))sym("mi_heap_new"))) {
    api.api = "mimalloc";
    api.amalloc = (void *(*)(void *, size_t))sym("mi_heap_malloc");
    api.destroy = (void (*)(void *))sym("mi_heap_destroy");
    api.reset_emulated = 1;
    if (!api.amalloc || !api.destroy) return "mi_heap_malloc or mi_heap_destroy not found";
    return NULL;
  }
  api.mallctl = (int (*)(const char *, void *, size_t *, void *, size_t))sym("mallctl");
  api.mallocx = (void *(*)(size_t, int))sym("mallocx");
  if (api.mallctl && api.mallocx) {
    api.api = "jemalloc";
    return NULL;
  }
  return "the allocator has no arena API (none of ebb_arena_create, mi_heap_new, mallctl)";
}

/* An arena handle: a pointer for ebb and mimalloc, an arena index for jemalloc. */
struct arena {
  void *p;
  unsigned ind;
};

static void je_ctl(const char *what, unsigned ind) {
  char name[64];
  snprintf(name, sizeof name, "arena.%u.%s", ind, what);
  int err = api.mallctl(name, NULL, NULL, NULL, 0);
  if (err) {
    fprintf(stderr, "reqarena: mallctl(\"%s\") failed: %s\n", name, strerror(err));
    exit(1);
  }
}

static struct arena arena_create(void) {
  struct arena a = {0};
  if (api.mallctl) {
    size_t len = sizeof a.ind;
    int err = api.mallctl("arenas.create", &a.ind, &len, NULL, 0);
    if (err) {
      fprintf(stderr, "reqarena: mallctl(\"arenas.create\") failed: %s\n", strerror(err));
      exit(1);
    }
    return a;
  }
  if (!(a.p = api.create())) {
    fprintf(stderr, "reqarena: %s arena create failed\n", api.api);
    exit(1);
  }
  return a;
}

static void *arena_malloc(struct arena *a, size_t n) {
  return api.mallctl ? api.mallocx(n, JE_MALLOCX_ARENA(a->ind) | JE_MALLOCX_TCACHE_NONE) : api.amalloc(a->p, n);
}

static void arena_destroy(struct arena *a) {
  if (api.mallctl) je_ctl("destroy", a->ind);
  else api.destroy(a->p);
}

static void arena_reset(struct arena *a) {
  if (api.mallctl) je_ctl("reset", a->ind);
  else if (api.reset) api.reset(a->p);
  else { /* mimalloc: no reset, destroy the heap and take a new one */
    api.destroy(a->p);
    *a = arena_create();
  }
}

/* ------------------------------------------------------------ the request */

static size_t plan(uint64_t *rng, long ctx_kb, long small) {
  size_t n = 0;
  sizes[n++] = (size_t)ctx_kb << 10;
  for (long i = 0; i < small; i++) sizes[n++] = bench_rand_log(rng, 16, 512);
  return n;
}

static void oom(void) {
  perror("reqarena: allocation failed");
  exit(1);
}

/* One request; returns its duration in microseconds. */
static double request(enum mode m, struct arena *shared, size_t n, unsigned char fill) {
  uint64_t t = bench_now_ns();
  if (m == MODE_MALLOC) {
    for (size_t i = 0; i < n; i++) {
      if (!(blocks[i] = malloc(sizes[i]))) oom();
      bench_touch(blocks[i], sizes[i], fill);
    }
    for (size_t i = 0; i < n; i++) free(blocks[i]);
  } else {
    struct arena own, *a = shared;
    if (m == MODE_DESTROY) {
      own = arena_create();
      a = &own;
    }
    for (size_t i = 0; i < n; i++) {
      if (!(blocks[i] = arena_malloc(a, sizes[i]))) oom();
      bench_touch(blocks[i], sizes[i], fill);
    }
    if (m == MODE_DESTROY) arena_destroy(a);
    else arena_reset(a);
  }
  return (double)(bench_now_ns() - t) / 1e3;
}

int main(int argc, char **argv) {
  long mode = bench_opt(argc, argv, "arena", 0);
  long requests = bench_opt(argc, argv, "requests", 200);
  long warmup = bench_opt(argc, argv, "warmup", 300);
  long ctx_kb = bench_opt(argc, argv, "ctx-kb", 450);
  long small = bench_opt(argc, argv, "small", 3000);
  long seed = bench_opt(argc, argv, "seed", 1);
  if (mode < 0 || mode > 2 || requests < 1 || warmup < 0 || ctx_kb < 1 || small < 0 || small + 1 > MAX_BLOCKS) {
    fprintf(stderr, "reqarena: need --arena 0|1|2, requests >= 1, warmup >= 0, ctx-kb >= 1, 0 <= small < %d\n",
            MAX_BLOCKS);
    return 2;
  }
  enum mode m = (enum mode)mode;
  bench_begin("reqarena", mode_names[m], argc, argv);
  struct arena shared = {0};
  if (m != MODE_MALLOC) {
    const char *why = find_api(m);
    if (why) {
      printf("note: skipped %s: %s\n", mode_names[m], why);
      return 0;
    }
    printf("note: arena api %s%s\n", api.api, m == MODE_RESET && api.reset_emulated ? ", reset = destroy + new" : "");
    fflush(stdout);
    if (m == MODE_RESET) shared = arena_create();
  }

  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
  for (long c = 0; c < warmup; c++) request(m, &shared, plan(&rng, ctx_kb, small), (unsigned char)c);
  double us = 0;
  long flt0 = bench_minflt();
  for (long c = 0; c < requests; c++) {
    size_t n = plan(&rng, ctx_kb, small); /* sizes drawn outside the timing */
    us += request(m, &shared, n, (unsigned char)c);
  }
  long faults = bench_minflt() - flt0;
  printf("result us_per_req=%.2f faults_per_req=%.2f rss_kb=%ld peak_rss_kb=%ld", us / (double)requests,
         (double)faults / (double)requests, bench_rss_kb(), bench_peak_rss_kb());
  if (m == MODE_RESET && api.reset_emulated) printf(" reset_emulated=1");
  printf("\n");
  if (m == MODE_RESET) arena_destroy(&shared);
  return 0;
}
