/* larson.c — a server simulation after Larson & Krishnan, "Memory allocation for
 * long-running server applications" (ISMM 1998), in the form mimalloc-bench runs it
 * (bench/larson). Here the slots are shared by all threads: each thread repeatedly
 * picks a random slot, allocates a block of 16–1024 B, writes its head, swaps it into
 * the slot and frees what was there. With T threads, (T-1)/T of the frees are of
 * blocks another thread allocated, the pattern of request objects handed between
 * threads in a server.
 *
 * With --pairs N, each thread does N pairs (rounded up to 64) and stops, whatever
 * --ms says: a fixed amount of work, for run.sh's count of cache misses under
 * cachegrind, whose slowdown would otherwise decide how many pairs a run does.
 *
 * Reports: mops_per_s (million malloc/free pairs per second, all threads),
 * rss_kb at the end, peak_rss_kb; pairs (all threads) with --pairs. */
#define _GNU_SOURCE
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64

/* A cache line each: the rng is written on every pair, and workers sharing a
 * line would time that line's transfers, not the allocator. */
struct worker {
  pthread_t thread; /* the thread */
  uint64_t rng;     /* its seed */
  long ops;         /* pairs it did */
} __attribute__((aligned(64)));

static _Atomic(void *) *slots;
static size_t nslots;
static long min_size, max_size;
static atomic_int stop;
static long pairs_each; /* --pairs: each thread's pairs, 0 for a run of --ms */

static void *block_new(uint64_t *rng) {
  size_t size = bench_rand_range(rng, (size_t)min_size, (size_t)max_size);
  char *p = malloc(size);
  p[0] = p[size - 1] = 1; /* like larson: touch, do not fill */
  return p;
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  long ops = 0;
  while (pairs_each ? ops < pairs_each : !atomic_load_explicit(&stop, memory_order_relaxed)) {
    for (int i = 0; i < 64; i++) { /* check the clock flag once per 64 pairs */
      void *fresh = block_new(&w->rng);
      size_t k = bench_rand(&w->rng) % nslots;
      free(atomic_exchange_explicit(&slots[k], fresh, memory_order_acq_rel));
    }
    ops += 64;
  }
  w->ops = ops;
  return NULL;
}

int main(int argc, char **argv) {
  long threads = bench_opt(argc, argv, "threads", 2);
  long per_thread = bench_opt(argc, argv, "slots", 1000);
  long ms = bench_opt(argc, argv, "ms", 500);
  min_size = bench_opt(argc, argv, "min", 16);
  max_size = bench_opt(argc, argv, "max", 1024);
  long seed = bench_opt(argc, argv, "seed", 1);
  pairs_each = bench_opt(argc, argv, "pairs", 0);
  if (threads < 1 || threads > MAX_THREADS || per_thread < 1 || ms < 1 || min_size < 1 || max_size < min_size ||
      pairs_each < 0) {
    fprintf(stderr, "larson: need 1 <= threads <= %d, slots >= 1, ms >= 1, 1 <= min <= max, pairs >= 0\n",
            MAX_THREADS);
    return 2;
  }
  char casename[32];
  snprintf(casename, sizeof casename, "t%ld", threads);
  bench_begin("larson", casename, argc, argv);

  nslots = (size_t)(threads * per_thread);
  slots = bench_map(nslots * sizeof *slots);
  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t k = 0; k < nslots; k++) atomic_store(&slots[k], block_new(&rng));

  static struct worker w[MAX_THREADS];
  uint64_t t0 = bench_now_ns();
  for (long i = 0; i < threads; i++) {
    w[i].rng = (uint64_t)(seed * MAX_THREADS + i + 1) * 0x9E3779B97F4A7C15ULL + 1;
    pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
  }
  if (!pairs_each) {
    bench_sleep_ms((double)ms);
    atomic_store(&stop, 1);
  }
  long ops = 0;
  for (long i = 0; i < threads; i++) {
    pthread_join(w[i].thread, NULL);
    ops += w[i].ops;
  }
  double elapsed_ms = bench_ms_since(t0);
  long rss = bench_rss_kb();
  for (size_t k = 0; k < nslots; k++) free(atomic_load(&slots[k]));
  bench_unmap((void *)slots, nslots * sizeof *slots);
  printf("result mops_per_s=%.3f rss_kb=%ld peak_rss_kb=%ld", (double)ops / elapsed_ms / 1e3, rss, bench_peak_rss_kb());
  if (pairs_each) printf(" pairs=%ld", ops);
  printf("\n");
  return 0;
}
