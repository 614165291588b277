/* bigbuf.c — big-buffer churn: the pattern of a map-tile builder that keeps a few
 * large scratch buffers in flight. 4 slots each hold a buffer; each operation picks
 * a slot (seeded random), frees its buffer and mallocs a new one of the base size
 * plus a random 0–24 KiB, then writes one byte in every 4 KiB page of it (offset 0,
 * every 4096 bytes after, and the last byte), so every page of the new buffer is
 * faulted in exactly as a full write would, without the memset's own time hiding
 * the allocator's. Whether the allocator keeps freed multi-MiB blocks mapped and
 * resident for the next request decides everything here: a block served from
 * fresh pages costs one fault per 4 KiB (base 8 MiB: ~2050 faults, ms per op).
 *
 * Cases (run.sh): --size-kb 1536, 3072, 8192, 20480 (1.5, 3, 8, 20 MiB).
 * Reports, over --ops operations after --warmup unmeasured ones: us_per_op (mean:
 * total time / ops, so periodic costs such as a decay purge count), faults_per_op,
 * rss_kb after the last op, peak_rss_kb. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SLOTS 4

static char *slot[SLOTS];

/* One byte per page and the last byte; volatile so no store can be dropped before the free. */
static void touch_pages(char *p, size_t n, size_t page, unsigned char v) {
  volatile char *q = p;
  for (size_t off = 0; off < n; off += page) q[off] = (char)v;
  q[n - 1] = (char)v;
}

static void one_op(uint64_t *rng, size_t base, size_t extra, size_t page, unsigned char v) {
  size_t i = (size_t)(bench_rand(rng) % SLOTS);
  size_t n = base + bench_rand_range(rng, 0, extra);
  free(slot[i]);
  slot[i] = malloc(n);
  if (!slot[i]) {
    perror("bigbuf: malloc");
    exit(1);
  }
  touch_pages(slot[i], n, page, v);
}

int main(int argc, char **argv) {
  long size_kb = bench_opt(argc, argv, "size-kb", 3072);
  long extra_kb = bench_opt(argc, argv, "extra-kb", 24);
  long ops = bench_opt(argc, argv, "ops", 1000);
  long warmup = bench_opt(argc, argv, "warmup", 40);
  long seed = bench_opt(argc, argv, "seed", 1);
  if (size_kb < 1 || extra_kb < 0 || ops < 1 || warmup < 0) {
    fprintf(stderr, "bigbuf: need size-kb >= 1, extra-kb >= 0, ops >= 1, warmup >= 0\n");
    return 2;
  }
  char casename[32];
  if (size_kb % 1024 == 0) snprintf(casename, sizeof casename, "%ldM", size_kb / 1024);
  else if (size_kb % 512 == 0) snprintf(casename, sizeof casename, "%.1fM", (double)size_kb / 1024);
  else snprintf(casename, sizeof casename, "%ldK", size_kb);
  bench_begin("bigbuf", casename, argc, argv);

  size_t base = (size_t)size_kb << 10, extra = (size_t)extra_kb << 10;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
  /* Fill the slots, then the warm-up: every slot replaced a few times. */
  for (long c = 0; c < warmup; c++) one_op(&rng, base, extra, page, (unsigned char)c);
  long flt0 = bench_minflt();
  uint64_t t0 = bench_now_ns();
  for (long c = 0; c < ops; c++) one_op(&rng, base, extra, page, (unsigned char)c);
  double us = (double)(bench_now_ns() - t0) / 1e3;
  long faults = bench_minflt() - flt0;
  printf("result us_per_op=%.2f faults_per_op=%.2f rss_kb=%ld peak_rss_kb=%ld\n", us / (double)ops,
         (double)faults / (double)ops, bench_rss_kb(), bench_peak_rss_kb());
  for (int i = 0; i < SLOTS; i++) free(slot[i]);
  return 0;
}
