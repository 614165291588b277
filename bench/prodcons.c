/* prodcons.c — the server pattern at its plainest: producer threads allocate
 * messages (16–1024 B, written), hand them through bounded single-producer
 * single-consumer rings to consumer threads, which read and free them. Every
 * free is of a block another thread allocated, and no block ever goes back to
 * the thread that made it except through the allocator.
 *
 * Options: --pairs N (producer/consumer pairs, default 1), --ms (run time, 300),
 * --min, --max (message sizes), --ring (slots per ring, 256), --seed.
 * Reports: mops_per_s (messages passed per microsecond, all pairs), rss_kb,
 * peak_rss_kb. */
#define _GNU_SOURCE
#include "common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_PAIRS 16

/* One ring per pair, in memory the allocator never sees; head and tail on their
 * own cache lines. */
struct ring {
  _Alignas(64) atomic_size_t head; /* next slot the producer fills */
  _Alignas(64) atomic_size_t tail; /* next slot the consumer empties */
  _Alignas(64) size_t cap;
  void **slot;
  uint64_t rng;  /* the producer's */
  long produced; /* messages the producer made */
  long consumed; /* messages the consumer freed */
  long bad;      /* messages lost (produced but not consumed) */
  unsigned sum;  /* of the consumer's reads, so they are not optimised away */
};

static struct ring rings[MAX_PAIRS];
static atomic_int stop;
static size_t min_size, max_size;

static void *producer(void *arg) {
  struct ring *r = arg;
  size_t head = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    if (head - atomic_load_explicit(&r->tail, memory_order_acquire) == r->cap) { /* full */
      sched_yield(); /* more threads than cores: let the consumer run */
      continue;
    }
    size_t n = bench_rand_range(&r->rng, min_size, max_size);
    unsigned char *m = malloc(n);
    m[0] = (unsigned char)n;
    m[n - 1] = (unsigned char)(n >> 8);
    r->slot[head % r->cap] = m;
    atomic_store_explicit(&r->head, ++head, memory_order_release);
    r->produced++;
  }
  return NULL;
}

/* Frees what is in the ring until the producer has stopped and the ring is empty. */
static void *consumer(void *arg) {
  struct ring *r = arg;
  size_t tail = 0;
  for (;;) {
    int done = atomic_load_explicit(&stop, memory_order_acquire) == 2; /* read before head: then head is final */
    size_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (tail == head) {
      if (done) break;
      sched_yield();
      continue;
    }
    unsigned char *m = r->slot[tail % r->cap];
    r->sum += m[0]; /* read it, as a consumer would */
    free(m);
    atomic_store_explicit(&r->tail, ++tail, memory_order_release);
    r->consumed++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  long pairs = bench_opt(argc, argv, "pairs", 1);
  long ms = bench_opt(argc, argv, "ms", 300);
  long lo = bench_opt(argc, argv, "min", 16);
  long hi = bench_opt(argc, argv, "max", 1024);
  long cap = bench_opt(argc, argv, "ring", 256);
  long seed = bench_opt(argc, argv, "seed", 1);
  if (pairs < 1 || pairs > MAX_PAIRS || ms < 1 || lo < 2 || hi < lo || cap < 1) {
    fprintf(stderr, "prodcons: need 1 <= pairs <= %d, ms >= 1, 2 <= min <= max, ring >= 1\n", MAX_PAIRS);
    return 2;
  }
  min_size = (size_t)lo;
  max_size = (size_t)hi;
  char casename[32];
  snprintf(casename, sizeof casename, "p%ld", pairs);
  bench_begin("prodcons", casename, argc, argv);

  pthread_t pt[MAX_PAIRS], ct[MAX_PAIRS];
  for (long i = 0; i < pairs; i++) {
    rings[i].cap = (size_t)cap;
    rings[i].slot = bench_map((size_t)cap * sizeof(void *));
    rings[i].rng = (uint64_t)(seed * MAX_PAIRS + i + 1) * 0x9E3779B97F4A7C15ULL + 1;
  }
  uint64_t t0 = bench_now_ns();
  for (long i = 0; i < pairs; i++) {
    pthread_create(&ct[i], NULL, consumer, &rings[i]);
    pthread_create(&pt[i], NULL, producer, &rings[i]);
  }
  bench_sleep_ms((double)ms);
  atomic_store(&stop, 1);
  for (long i = 0; i < pairs; i++) pthread_join(pt[i], NULL);
  atomic_store(&stop, 2);
  for (long i = 0; i < pairs; i++) pthread_join(ct[i], NULL);
  double elapsed_ms = bench_ms_since(t0);
  long consumed = 0, bad = 0;
  for (long i = 0; i < pairs; i++) {
    consumed += rings[i].consumed;
    if (rings[i].consumed != rings[i].produced) bad++;
    bench_unmap(rings[i].slot, (size_t)cap * sizeof(void *));
  }
  if (bad) {
    fprintf(stderr, "prodcons: %ld rings lost messages\n", bad);
    return 1;
  }
  printf("result mops_per_s=%.3f rss_kb=%ld peak_rss_kb=%ld\n", (double)consumed / elapsed_ms / 1e3,
         bench_rss_kb(), bench_peak_rss_kb());
  return 0;
}
