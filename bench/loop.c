/* loop.c — the single-thread fast path: replace blocks in a window of 256 slots,
 * sizes from a fixed mixed table (8–512 B, mostly small), so nearly every malloc and
 * free is served from a thread cache or a free list. The classic microbenchmark
 * (mimalloc-bench's "alloc-test"/glibc's bench-malloc-simple do similar loops).
 *
 * Reports: ns_per_pair (one malloc + one free), rss_kb; vsz_kb with --aligned.
 * run.sh also runs this under valgrind --tool=callgrind with two iteration counts
 * and takes (Ir(N2) - Ir(N1)) / (N2 - N1) as instructions per pair: start-up, the
 * allocator's initialisation and the final frees cancel out, and the count is
 * the same on a busy machine. The loop's own bookkeeping (a few instructions) is in it
 * for every allocator alike. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#define SLOTS 256      /* the default window */
#define MAX_SLOTS 4096
#define SIZES 4096

static size_t sizes[SIZES];
static void *slots[MAX_SLOTS];

/* 3 in 4 blocks are 8–128 B, the rest 129–512 B: the shape of typical C/C++ heaps.
 * With --slots N, N slots instead of 256 (--slots 1: one block freed and
 * allocated again in turn, a scratch buffer's pattern). With --batch 1, all
 * the slots are filled, then all freed in the order they were filled, round
 * after round (a phase of N blocks built and torn down).
 * With --min and --max, uniform in [min, max] instead (e.g. 1025–4096: sizes a
 * page holds only 16–64 of, whose lists run empty and full far more often). */
static void make_sizes(uint64_t *rng, long min, long max) {
  for (size_t i = 0; i < SIZES; i++)
    if (min > 0)
      sizes[i] = bench_rand_range(rng, (size_t)min, (size_t)max);
    else
      sizes[i] = bench_rand(rng) % 4 ? bench_rand_range(rng, 8, 128) : bench_rand_range(rng, 129, 512);
}

/* With --aligned P, P % of the blocks (the first fill's and each
 * replacement's, drawn at random) come from posix_memalign at 128, 256 or
 * 512 KiB instead of malloc, and the result line adds vsz_kb, the address
 * space mapped before the last frees: how well the allocator finds room for
 * aligned blocks among the others (ebb's searched only its newest 256 chunks
 * until session 38, and mapped more and more). */
static long aligned_pct;
static uint64_t aligned_rng = 0x9E3779B97F4A7C15ULL;

static void *alloc_one(size_t size) {
  void *p = NULL;
  if (aligned_pct && (long)(bench_rand(&aligned_rng) % 100) < aligned_pct) {
    if (posix_memalign(&p, (size_t)131072 << (bench_rand(&aligned_rng) % 3), size) != 0) p = NULL;
  } else {
    p = malloc(size);
  }
  if (!p) {
    perror("loop: allocation");
    exit(1);
  }
  return p;
}

/* Pair i: slot k's block freed, a new one of the i-th size in its place. */
static inline __attribute__((always_inline)) void replace(long i, size_t k) {
  free(slots[k]);
  char *p = malloc(sizes[(size_t)i % SIZES]);
  p[0] = (char)i;
  slots[k] = p;
}

int main(int argc, char **argv) {
  long iters = bench_opt(argc, argv, "iters", 5000000);
  uint64_t rng = (uint64_t)bench_opt(argc, argv, "seed", 1) * 0x9E3779B97F4A7C15ULL + 1;
  /* one bench_opt a line, its default a number: run.sh reads them for its labels */
  long min = bench_opt(argc, argv, "min", 0);
  long max = bench_opt(argc, argv, "max", 0);
  long nslots = bench_opt(argc, argv, "slots", 256);
  long batch = bench_opt(argc, argv, "batch", 0);
  aligned_pct = bench_opt(argc, argv, "aligned", 0);
  _Static_assert(SLOTS == 256, "the --slots default above");
  if (iters < 1 || min < 0 || (min > 0 && max < min) || nslots < 1 || nslots > MAX_SLOTS || aligned_pct < 0 ||
      aligned_pct > 100 || (aligned_pct && batch)) {
    fprintf(stderr, "loop: need iters >= 1, slots in 1..%d, max >= min when min is given, aligned in 0..100 "
                    "(not with batch)\n", MAX_SLOTS);
    return 2;
  }
  bench_begin("loop", min > 0 ? "sized" : "small", argc, argv);
  make_sizes(&rng, min, max);
  if (batch) { /* every slot filled, then every block freed in the order it came, iters pairs in all */
    uint64_t t0 = bench_now_ns();
    long done = 0;
    for (size_t round = 0; done < iters; round++) {
      for (size_t k = 0; k < (size_t)nslots; k++) {
        char *p = malloc(sizes[(round * (size_t)nslots + k) % SIZES]);
        p[0] = (char)k;
        slots[k] = p;
      }
      for (size_t k = 0; k < (size_t)nslots; k++) free(slots[k]);
      done += nslots;
    }
    printf("result ns_per_pair=%.2f rss_kb=%ld\n", (double)(bench_now_ns() - t0) / (double)done, bench_rss_kb());
    return 0;
  }
  if (aligned_pct) { /* its own loop: the default one stays as tight as it was */
    for (size_t k = 0; k < (size_t)nslots; k++) slots[k] = alloc_one(sizes[k]);
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < iters; i++) {
      size_t k = ((size_t)i * 97) % (size_t)nslots;
      free(slots[k]);
      char *p = alloc_one(sizes[(size_t)i % SIZES]);
      p[0] = (char)i;
      slots[k] = p;
    }
    double ns = (double)(bench_now_ns() - t0) / (double)iters;
    long vsz = bench_vsz_kb();
    for (size_t k = 0; k < (size_t)nslots; k++) free(slots[k]);
    printf("result ns_per_pair=%.2f rss_kb=%ld vsz_kb=%ld\n", ns, bench_rss_kb(), vsz);
    return 0;
  }
  for (size_t k = 0; k < (size_t)nslots; k++) slots[k] = malloc(sizes[k]);
  uint64_t t0 = bench_now_ns();
  /* A stride that is odd relative to the window frees in an order that is not
   * LIFO. The standard window keeps a constant divisor (a mask), as before
   * --slots existed: a division on every pair cost every allocator ~1.4 ns. */
  if (nslots == SLOTS)
    for (long i = 0; i < iters; i++) replace(i, ((size_t)i * 97) % SLOTS);
  else
    for (long i = 0; i < iters; i++) replace(i, ((size_t)i * 97) % (size_t)nslots);
  double ns = (double)(bench_now_ns() - t0) / (double)iters;
  for (size_t k = 0; k < (size_t)nslots; k++) free(slots[k]);
  printf("result ns_per_pair=%.2f rss_kb=%ld\n", ns, bench_rss_kb());
  return 0;
}
