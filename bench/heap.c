/* heap.c — heap growth: the pattern of a long-running service that builds a big
 * in-memory structure (an index, a parse tree, a cache) of hundreds of MiB out of
 * small blocks and later tears it down. Each cycle mallocs blocks of a uniform
 * random --min..--max bytes (seeded) until the requested sizes add up to --mib MiB,
 * writing the first and last byte of each (like larson: touch, do not fill) and
 * keeping the pointers in a table of bench_map() memory; then it frees them all in
 * allocation order. The build grows the heap by hundreds of MiB in small steps, so
 * how the allocator gets fresh memory from the kernel (how many pages it faults in,
 * and how much each block costs beyond its size) decides the build's time and the
 * peak; whether the teardown's memory is given back decides the RSS after it, and
 * whether a second build finds it still mapped.
 *
 * The pointer table has room for the worst case (--mib MiB / --min blocks) but only
 * its used part is written: before each build a dry run of the random sizes counts
 * the blocks and writes their entries, so the table's own page faults fall outside
 * the measured build. The table is unmapped before rss_kb is read.
 *
 * Cases (run.sh): --mib 1024 --cycles 3 (quick: 256, smoke: 8 and 1 cycle), so
 * that the median cycle is a rebuild.
 * Reports: ns_per_malloc (build time / blocks, including the two byte writes per
 * block and the page faults they cause; median over cycles, with 2 cycles the mean
 * of the two), ns_per_free (teardown time / blocks, median over cycles),
 * faults_per_mb (minor faults during all the build phases per MiB requested in
 * them: 256 when every 4 KiB page is fresh, plus the allocator's overhead; a third
 * of that with 3 cycles when the rebuilds reuse the first build's pages),
 * peak_rss_kb (ru_maxrss: includes the pointer table, 8 B a block, ~16 MiB at
 * 1 GiB with the default sizes), rss_kb after the last teardown. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_CYCLES 1000

static double malloc_ns[MAX_CYCLES], free_ns[MAX_CYCLES];

int main(int argc, char **argv) {
  long mib = bench_opt(argc, argv, "mib", 1024);
  long min_size = bench_opt(argc, argv, "min", 16);
  long max_size = bench_opt(argc, argv, "max", 1024);
  long cycles = bench_opt(argc, argv, "cycles", 2);
  long seed = bench_opt(argc, argv, "seed", 1);
  if (mib < 1 || min_size < 1 || max_size < min_size || cycles < 1 || cycles > MAX_CYCLES) {
    fprintf(stderr, "heap: need mib >= 1, 1 <= min <= max, 1 <= cycles <= %d\n", MAX_CYCLES);
    return 2;
  }
  char casename[32];
  if (mib % 1024 == 0) snprintf(casename, sizeof casename, "%ldG", mib / 1024);
  else snprintf(casename, sizeof casename, "%ldM", mib);
  bench_begin("heap", casename, argc, argv);

  size_t target = (size_t)mib << 20;
  /* Every block but the last is added while the sum is under target, and each is at least min. */
  size_t cap = target / (size_t)min_size + 1;
  char **ptr = bench_map(cap * sizeof *ptr);
  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
  long build_faults = 0;
  double requested = 0;

  for (long c = 0; c < cycles; c++) {
    /* Dry run: the same sizes as the build below, to count its blocks and fault in their entries. */
    uint64_t dry = rng;
    size_t n, sum = 0;
    for (n = 0; sum < target; n++) {
      sum += bench_rand_range(&dry, (size_t)min_size, (size_t)max_size);
      ptr[n] = NULL;
    }
    requested += (double)sum;

    long flt0 = bench_minflt();
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < n; i++) {
      size_t size = bench_rand_range(&rng, (size_t)min_size, (size_t)max_size);
      volatile char *p = malloc(size);
      if (!p) {
        perror("heap: malloc");
        return 1;
      }
      p[0] = p[size - 1] = (char)(c + 1);
      ptr[i] = (char *)p;
    }
    uint64_t t1 = bench_now_ns();
    build_faults += bench_minflt() - flt0;
    for (size_t i = 0; i < n; i++) free(ptr[i]);
    uint64_t t2 = bench_now_ns();
    malloc_ns[c] = (double)(t1 - t0) / (double)n;
    free_ns[c] = (double)(t2 - t1) / (double)n;
  }
  bench_unmap(ptr, cap * sizeof *ptr);

  printf("result ns_per_malloc=%.1f ns_per_free=%.1f faults_per_mb=%.1f peak_rss_kb=%ld rss_kb=%ld\n",
         bench_median(malloc_ns, (size_t)cycles), bench_median(free_ns, (size_t)cycles),
         (double)build_faults / (requested / (1 << 20)), bench_peak_rss_kb(), bench_rss_kb());
  return 0;
}
