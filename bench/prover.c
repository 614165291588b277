/* prover.c — prover scratch: a worker pool that, per round (one proof), allocates a
 * large mixed scratch set, keeps a small result, frees the rest and waits for the
 * next job. T threads each allocate ~32 MiB of blocks from 64 B to 1 MiB (log-uniform:
 * as many of each power of two, so most bytes are in the large ones), write them,
 * keep one small long-lived block per round, free the rest, then all idle 20 ms or
 * 500 ms. The question is what RSS sits at between rounds, i.e. while idle.
 *
 * Reports: floor_kb (median over rounds of RSS at the end of the idle period),
 * floor_last_kb, peak_kb (ru_maxrss), rounds_per_s (rounds per second of work,
 * idle excluded), faults_per_round, plus the series (RSS sampled every 5 ms). */
#define _GNU_SOURCE
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64
#define MAX_ROUNDS 10000
#define MAX_SCRATCH 65536

struct worker {
  uint64_t rng;                 /* this thread's seed */
  void *scratch[MAX_SCRATCH];   /* this round's blocks */
  void *kept[MAX_ROUNDS];       /* one per round, freed at exit */
  size_t nkept;                 /* rounds done */
};

static long rounds, scratch_bytes;
static pthread_barrier_t round_start, round_end;
static struct worker workers[MAX_THREADS];
static double floor_kb[MAX_ROUNDS];
static atomic_int sampling = 1;
static atomic_int finished;

static void one_round(struct worker *w) {
  size_t n = 0, total = 0;
  while (total < (size_t)scratch_bytes && n < MAX_SCRATCH) {
    size_t size = bench_rand_log(&w->rng, 64, 1 << 20);
    w->scratch[n] = malloc(size);
    bench_touch(w->scratch[n++], size, (unsigned char)total);
    total += size;
    if (n == 64) { /* the result: allocated mid-round, so it lands among the scratch */
      w->kept[w->nkept] = malloc(96);
      bench_touch(w->kept[w->nkept++], 96, 7);
    }
  }
  for (size_t i = 0; i < n; i++) free(w->scratch[i]);
}

/* Workers stay alive (blocked, as an idle pool is) until the last floor is measured:
 * a thread exit would flush its caches and blur the last measurement. */
static void *worker_main(void *arg) {
  for (;;) {
    pthread_barrier_wait(&round_start);
    if (atomic_load(&finished)) return NULL;
    one_round(arg);
    pthread_barrier_wait(&round_end);
  }
}

static void *sampler_main(void *arg) {
  struct bench_series *s = arg;
  while (atomic_load(&sampling)) {
    bench_series_sample(s);
    bench_sleep_ms(5);
  }
  return NULL;
}

int main(int argc, char **argv) {
  long threads = bench_opt(argc, argv, "threads", 2);
  rounds = bench_opt(argc, argv, "rounds", 10);
  scratch_bytes = bench_opt(argc, argv, "mib", 32) << 20;
  long idle_ms = bench_opt(argc, argv, "idle-ms", 20);
  long seed = bench_opt(argc, argv, "seed", 1);
  if (threads < 1 || threads > MAX_THREADS || rounds < 1 || rounds > MAX_ROUNDS || scratch_bytes < 1 || idle_ms < 0) {
    fprintf(stderr, "prover: need 1 <= threads <= %d, 1 <= rounds <= %d, mib >= 1, idle-ms >= 0\n", MAX_THREADS,
            MAX_ROUNDS);
    return 2;
  }
  char casename[32];
  snprintf(casename, sizeof casename, "idle%ld", idle_ms);
  bench_begin("prover", casename, argc, argv);

  pthread_barrier_init(&round_start, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&round_end, NULL, (unsigned)threads + 1);
  pthread_t t[MAX_THREADS], sampler;
  for (long i = 0; i < threads; i++) {
    workers[i].rng = (uint64_t)(seed * MAX_THREADS + i) * 0x9E3779B97F4A7C15ULL + 1;
    pthread_create(&t[i], NULL, worker_main, &workers[i]);
  }
  struct bench_series s;
  bench_series_init(&s, (size_t)(rounds * (idle_ms + 200) / 5) + 100);
  pthread_create(&sampler, NULL, sampler_main, &s);

  double work_ms = 0;
  long flt0 = bench_minflt();
  for (long r = 0; r < rounds; r++) {
    uint64_t t0 = bench_now_ns();
    pthread_barrier_wait(&round_start);
    pthread_barrier_wait(&round_end);
    work_ms += bench_ms_since(t0);
    bench_sleep_ms((double)idle_ms);
    floor_kb[r] = (double)bench_rss_kb(); /* the floor: just before the next job arrives */
  }
  long faults = bench_minflt() - flt0;
  long last_kb = (long)floor_kb[rounds - 1];
  atomic_store(&sampling, 0);
  pthread_join(sampler, NULL);
  atomic_store(&finished, 1);
  pthread_barrier_wait(&round_start);
  for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);

  printf("result floor_kb=%.0f floor_last_kb=%ld peak_kb=%ld rounds_per_s=%.2f faults_per_round=%.0f\n",
         bench_median(floor_kb, (size_t)rounds), last_kb, bench_peak_rss_kb(), (double)rounds * 1000.0 / work_ms,
         (double)faults / (double)rounds);
  bench_series_print(&s);
  for (long i = 0; i < threads; i++)
    for (size_t k = 0; k < workers[i].nkept; k++) free(workers[i].kept[k]);
  bench_series_free(&s);
  return 0;
}
