/* growth.c — large growth: a buffer grows by 1.5x with realloc from 1 KiB to 64 MiB,
 * each new part written as it grows (a vector or a log being appended to), then
 * freed. Whether realloc can grow in place or remap (mremap) instead of copying, and
 * whether the freed 64 MiB is kept or returned, decide time and faults per cycle.
 *
 * Reports: ms_per_cycle (median), faults_per_cycle (after the warm-up: an
 * allocator that keeps the freed 64 MiB resident and grows into it faults
 * almost nothing, one that returns it faults every page again, 16384 of 4 KiB),
 * first_faults (the first warm-up cycle, everything fresh), rss_kb after the
 * last free, peak_rss_kb. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_CYCLES 10000

static double cycle_ms[MAX_CYCLES];

static double run_cycle(size_t start, size_t max, unsigned char fill) {
  uint64_t t = bench_now_ns();
  size_t size = start;
  char *p = malloc(size);
  if (!p) goto oom;
  bench_touch(p, size, fill);
  while (size < max) {
    size_t next = size + size / 2 < max ? size + size / 2 : max;
    char *q = realloc(p, next);
    if (!q) goto oom;
    p = q;
    bench_touch(p + size, next - size, fill);
    size = next;
  }
  free(p);
  return (double)(bench_now_ns() - t) / 1e6;
oom:
  perror("growth: realloc");
  exit(1);
}

int main(int argc, char **argv) {
  long cycles = bench_opt(argc, argv, "cycles", 10);
  long warmup = bench_opt(argc, argv, "warmup", 1);
  long start_kb = bench_opt(argc, argv, "start-kb", 1);
  long max_mb = bench_opt(argc, argv, "max-mb", 64);
  if (cycles < 1 || cycles > MAX_CYCLES || start_kb < 1 || max_mb < 1) {
    fprintf(stderr, "growth: need 1 <= cycles <= %d, start-kb >= 1, max-mb >= 1\n", MAX_CYCLES);
    return 2;
  }
  bench_begin("growth", "realloc", argc, argv);
  size_t start = (size_t)start_kb << 10, max = (size_t)max_mb << 20;
  /* The first cycle maps everything fresh: reported apart, as first_faults. */
  long flt0 = bench_minflt(), first_faults = -1;
  for (long c = 0; c < warmup; c++) {
    run_cycle(start, max, (unsigned char)c);
    if (c == 0) first_faults = bench_minflt() - flt0;
  }
  flt0 = bench_minflt();
  for (long c = 0; c < cycles; c++) cycle_ms[c] = run_cycle(start, max, (unsigned char)c);
  long faults = bench_minflt() - flt0;
  printf("result ms_per_cycle=%.3f faults_per_cycle=%.1f", bench_median(cycle_ms, (size_t)cycles),
         (double)faults / (double)cycles);
  if (first_faults >= 0) printf(" first_faults=%ld", first_faults);
  printf(" rss_kb=%ld peak_rss_kb=%ld\n", bench_rss_kb(), bench_peak_rss_kb());
  return 0;
}
