/* churn.c — instance churn: the allocation pattern of a WebAssembly runtime serving
 * one request per instance. Per cycle: one context block (~450 KB, the instance
 * state), ~3000 small objects (16–512 B) and ~24 medium ones (4–64 KiB), every byte
 * written, then all freed in random order; then a gap (0, 2 or 20 ms) before the
 * next request. The gap is what decides whether an allocator that returns pages on a
 * timer faults them back in on every request.
 *
 * Reports: us_per_cycle (median over cycles, gap excluded), faults_per_cycle (minor
 * faults over the measured cycles, gaps included, per cycle), rss_kb and heap_rss_kb
 * after the last cycle and its gap, peak_rss_kb.
 * With --reuse 1, also how much of each request's memory the request before had not
 * touched: new_kb_per_cycle (every block) and small_new_kb_per_cycle (the 16-512 B
 * ones), in 64-byte lines, averaged over the measured cycles. An allocator that hands
 * a request back the blocks the last one wrote keeps them in cache; one that hands
 * out memory written longer ago pays its misses. The bookkeeping (a hash set of lines)
 * slows the cycles down: time a run without it. */
#include "common.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_BLOCKS 20000
#define MAX_CYCLES 100000

struct churn_opts {
  long cycles, warmup, gap_ms, ctx_kb, small, medium, seed, reuse;
};

/* --reuse: the cycle that last touched each 64-byte line (open addressing) */
#define LINE_SLOTS ((size_t)1 << 22)
static uintptr_t *line_addr;
static long *line_cycle;
static long new_lines, new_small_lines;

static void note_lines(const void *p, size_t n, long cycle, bool small) {
  for (uintptr_t l = (uintptr_t)p >> 6, end = ((uintptr_t)p + n - 1) >> 6; l <= end; l++) {
    size_t h = (size_t)((l * 0x9E3779B97F4A7C15ULL) >> 42) & (LINE_SLOTS - 1);
    while (line_addr[h] && line_addr[h] != l) h = (h + 1) & (LINE_SLOTS - 1);
    if (!line_addr[h]) line_addr[h] = l;
    if (line_cycle[h] == cycle) continue;
    if (line_cycle[h] != cycle - 1) {
      new_lines++;
      new_small_lines += small;
    }
    line_cycle[h] = cycle;
  }
}

static void *blocks[MAX_BLOCKS];
static size_t sizes[MAX_BLOCKS];
static size_t order[MAX_BLOCKS];
static double cycle_us[MAX_CYCLES];

/* Sizes for one request: the context first, the medium blocks spread among the small. */
static size_t plan_cycle(const struct churn_opts *o, uint64_t *rng) {
  size_t n = 0;
  sizes[n++] = (size_t)o->ctx_kb * 1024;
  long every = o->medium ? o->small / o->medium + 1 : 0;
  for (long i = 0, m = 0; i < o->small; i++) {
    sizes[n++] = bench_rand_range(rng, 16, 512);
    if (every && i % every == every - 1 && m++ < o->medium) sizes[n++] = bench_rand_range(rng, 4096, 65536);
  }
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = n - 1; i > 0; i--) { /* Fisher–Yates: the free order */
    size_t j = bench_rand(rng) % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  return n;
}

/* One request; returns its duration in microseconds. cycle: its number for
 * --reuse's bookkeeping (from 1), 0 for none. */
static double run_cycle(size_t n, unsigned char fill, long cycle) {
  uint64_t t = bench_now_ns();
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(sizes[i]);
    bench_touch(blocks[i], sizes[i], fill);
    if (cycle) note_lines(blocks[i], sizes[i], cycle, i > 0 && sizes[i] <= 512);
  }
  for (size_t i = 0; i < n; i++) free(blocks[order[i]]);
  return (double)(bench_now_ns() - t) / 1e3;
}

static struct churn_opts parse(int argc, char **argv) {
  struct churn_opts o = {
      .cycles = bench_opt(argc, argv, "cycles", 200),
      .warmup = bench_opt(argc, argv, "warmup", 300),
      .gap_ms = bench_opt(argc, argv, "gap-ms", 0),
      .ctx_kb = bench_opt(argc, argv, "ctx-kb", 450),
      .small = bench_opt(argc, argv, "small", 3000),
      .medium = bench_opt(argc, argv, "medium", 24),
      .seed = bench_opt(argc, argv, "seed", 1),
      .reuse = bench_opt(argc, argv, "reuse", 0),
  };
  if (o.cycles < 1 || o.cycles > MAX_CYCLES || o.small + o.medium + 1 > MAX_BLOCKS || o.small < 1) {
    fprintf(stderr, "churn: need 1 <= cycles <= %d, 1 <= small, small + medium < %d\n", MAX_CYCLES, MAX_BLOCKS);
    exit(2);
  }
  return o;
}

int main(int argc, char **argv) {
  struct churn_opts o = parse(argc, argv);
  char casename[32];
  snprintf(casename, sizeof casename, "gap%ld", o.gap_ms);
  bench_begin("churn", casename, argc, argv);
  uint64_t rng = (uint64_t)o.seed * 0x9E3779B97F4A7C15ULL + 1;
  /* Warm-up cycles, back to back and not measured: the steady state is what a
   * long-lived runtime sees. glibc's heap takes ~20 requests to reach its size; the
   * per-size-class allocators (ebb, mimalloc) take a few hundred, because each
   * request draws a different mix of sizes and a class's page is touched deeper
   * only when a request first needs more of that class (measured: ebb 0.46 faults
   * per cycle after 100 warm-up cycles, 0.07 after 400, 0.01 after 1600). */
  if (o.reuse) {
    line_addr = bench_map(LINE_SLOTS * sizeof *line_addr);
    line_cycle = bench_map(LINE_SLOTS * sizeof *line_cycle);
  }
  for (long c = 0; c < o.warmup; c++) run_cycle(plan_cycle(&o, &rng), (unsigned char)c, 0);
  long flt0 = bench_minflt();
  for (long c = 0; c < o.cycles; c++) {
    size_t n = plan_cycle(&o, &rng); /* planning (RNG, shuffle) stays outside the timing */
    /* --reuse counts from the second measured cycle: the first has no cycle before it on record */
    if (o.reuse && c == 1) new_lines = new_small_lines = 0;
    cycle_us[c] = run_cycle(n, (unsigned char)c, o.reuse ? c + 1 : 0);
    bench_sleep_ms((double)o.gap_ms);
  }
  long faults = bench_minflt() - flt0;
  printf("result us_per_cycle=%.2f faults_per_cycle=%.2f rss_kb=%ld heap_rss_kb=%ld peak_rss_kb=%ld\n",
         bench_median(cycle_us, (size_t)o.cycles), (double)faults / (double)o.cycles, bench_rss_kb(),
         bench_heap_rss_kb(), bench_peak_rss_kb());
  if (o.reuse && o.cycles > 1)
    printf("result new_kb_per_cycle=%.1f small_new_kb_per_cycle=%.1f\n", (double)new_lines / 16.0 / (double)(o.cycles - 1),
           (double)new_small_lines / 16.0 / (double)(o.cycles - 1));
  return 0;
}
