/* vecgrow.c — a vector grown by realloc: from 1 KiB to 64 MiB by 1.5x steps, the new
 * part written each time (as a vector's push_back would, element by element; here
 * with one memset per step), then freed; repeated. The first cycle maps everything
 * fresh. From the second on, an allocator that keeps the freed 64 MiB (and the
 * smaller steps) resident and reuses it faults almost nothing; one that returns it
 * at free, or purges it under decay between cycles, faults every page again
 * (64 MiB = 16384 pages of 4 KiB).
 *
 * Like growth (which reports the median ms per cycle after a warm-up cycle), but
 * measured for the fault target: the first cycle is reported on its own and the
 * steady state is every cycle after it, back to back.
 *
 * Reports: us_per_cycle (mean over cycles 2..N), faults_per_cycle (cycles 2..N),
 * first_faults and first_us (cycle 1), rss_kb after the last free, peak_rss_kb. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

static void run_cycle(size_t start, size_t max, unsigned char fill) {
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
  return;
oom:
  perror("vecgrow: realloc");
  exit(1);
}

int main(int argc, char **argv) {
  long cycles = bench_opt(argc, argv, "cycles", 8);
  long start_kb = bench_opt(argc, argv, "start-kb", 1);
  long max_mb = bench_opt(argc, argv, "max-mb", 64);
  if (cycles < 1 || start_kb < 1 || max_mb < 1 || (size_t)start_kb > (size_t)max_mb << 10) {
    fprintf(stderr, "vecgrow: need cycles >= 1 (measured, after the first), 1 <= start-kb <= max-mb * 1024\n");
    return 2;
  }
  bench_begin("vecgrow", "realloc", argc, argv);
  size_t start = (size_t)start_kb << 10, max = (size_t)max_mb << 20;

  long f0 = bench_minflt();
  uint64_t t0 = bench_now_ns();
  run_cycle(start, max, 0);
  double first_us = (double)(bench_now_ns() - t0) / 1e3;
  long first_faults = bench_minflt() - f0;

  f0 = bench_minflt();
  t0 = bench_now_ns();
  for (long c = 0; c < cycles; c++) run_cycle(start, max, (unsigned char)(c + 1));
  double us = (double)(bench_now_ns() - t0) / 1e3;
  long faults = bench_minflt() - f0;
  printf("result us_per_cycle=%.1f faults_per_cycle=%.1f first_faults=%ld first_us=%.1f rss_kb=%ld peak_rss_kb=%ld\n",
         us / (double)cycles, (double)faults / (double)cycles, first_faults, first_us, bench_rss_kb(),
         bench_peak_rss_kb());
  return 0;
}
