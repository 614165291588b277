/* floor.c — RSS floor: how far memory falls back once a burst is over.
 * Two threads each build half of --mib MiB (default 256) of small objects
 * (16–256 B); one object in --keep-every (default 512) stays alive, so live blocks
 * sit above (and among) freed ones and no allocator can just shrink a heap top. Each
 * thread then frees the other thread's objects (cross-thread frees), and both threads
 * exit. The main thread samples RSS every --interval-ms (default 100 ms) for --ms
 * (default 15000 ms) from the moment everything is built (t = 0, the peak: the frees
 * and the thread exits happen in the first few hundred ms), either idle
 * (--activity 0) or with light allocation activity (--activity 1: 16 small
 * malloc/free pairs every 10 ms), since some allocators only return memory when they
 * are called. With --stay 1 (case "alive") the builders do not exit after their
 * frees: they block, alive, until the measurement ends, as an idle worker pool
 * does, so what they allocated can only come back if the allocator takes back a
 * live, idle thread's memory. With --own 1 as well (case "alive-own") each
 * builder frees its own objects instead of the other's, as a worker that tears
 * down its own request data and then waits does. run.sh's labels read these
 * defaults from the bench_opt calls below.
 *
 * Reports: peak_kb (t = 0), exit_kb and exit_ms (RSS and time once both threads
 * are joined), end_kb (last sample), min_kb, live_kb (bytes still allocated: the
 * ideal floor), fall_ms (first sample below half of peak_kb, -1 if never), and the
 * series. */
#define _GNU_SOURCE
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct builder {
  uint64_t rng;         /* this thread's seed */
  size_t bytes;         /* how much to build */
  void **objs;          /* built objects, bench_map memory */
  size_t n;             /* objects built */
  size_t live_bytes;    /* bytes of the objects kept alive */
  struct builder *peer; /* whose objects this thread frees */
};

static long keep_every, stay, own;
static pthread_barrier_t built, measured, released;
static atomic_int builders_done; /* builders that finished their frees */

static size_t capacity_for(size_t bytes) { return bytes / 16 + 1; }

static void *builder_main(void *arg) {
  struct builder *b = arg;
  size_t total = 0;
  while (total < b->bytes) {
    size_t size = bench_rand_range(&b->rng, 16, 256);
    b->objs[b->n] = malloc(size);
    bench_touch(b->objs[b->n], size, (unsigned char)b->n);
    if (b->n % (size_t)keep_every == 0) b->live_bytes += size; /* this one outlives the burst */
    b->n++;
    total += size;
  }
  pthread_barrier_wait(&built);    /* the main thread records the peak */
  pthread_barrier_wait(&measured); /* and both halves exist before anyone frees */
  struct builder *p = own ? b : b->peer;
  for (size_t i = 0; i < p->n; i++)
    if (i % (size_t)keep_every != 0) free(p->objs[i]);
  atomic_fetch_add(&builders_done, 1);
  if (stay) pthread_barrier_wait(&released); /* alive and idle until the end */
  return NULL;
}

/* Between two samples: idle, or a handful of small pairs every 10 ms. */
static void between_samples(double ms, int activity, uint64_t *rng) {
  if (!activity) {
    bench_sleep_ms(ms);
    return;
  }
  for (double slept = 0; slept < ms; slept += 10) {
    void *p[16];
    for (int i = 0; i < 16; i++) {
      size_t size = bench_rand_range(rng, 16, 1024);
      p[i] = malloc(size);
      bench_touch(p[i], size, 1);
    }
    for (int i = 0; i < 16; i++) free(p[i]);
    bench_sleep_ms(ms - slept < 10 ? ms - slept : 10);
  }
}

/* What the timeline showed. */
struct outcome {
  long peak_kb; /* RSS with everything built, at t = 0 */
  long exit_kb; /* RSS right after both threads were joined */
  long exit_ms; /* when that was */
  long min_kb;  /* lowest sample */
  long fall_ms; /* first sample under half the peak, -1 if none */
};

/* Joins the builders once both have finished freeing (with --stay, notes the
 * moment and leaves them blocked); 1 when done. */
static int join_if_done(pthread_t t[2], const struct bench_series *s, struct outcome *o) {
  if (atomic_load(&builders_done) < 2) return 0;
  if (!stay)
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  o->exit_kb = bench_rss_kb();
  o->exit_ms = (long)bench_ms_since(s->t0_ns);
  return 1;
}

/* Samples every interval from t = 0 (the peak, just before the frees start) for ms,
 * and at least until the builder threads are gone. */
static void watch(struct bench_series *s, pthread_t t[2], long ms, long interval_ms, int activity,
                  struct outcome *o) {
  uint64_t rng = 1;
  int joined = 0;
  o->min_kb = o->peak_kb;
  o->fall_ms = -1;
  for (long at = 0;; at += interval_ms) {
    bench_series_sample(s);
    long kb = s->rss_kb[s->n - 1];
    if (kb < o->min_kb) o->min_kb = kb;
    if (o->fall_ms < 0 && kb < o->peak_kb / 2) o->fall_ms = (long)s->t_ms[s->n - 1];
    if (!joined) joined = join_if_done(t, s, o);
    if (at >= ms && joined) break;
    /* Aim at the next multiple of the interval, so samples do not drift. */
    double wait = (double)(at + interval_ms) - bench_ms_since(s->t0_ns);
    between_samples(wait > 0 ? wait : 0, activity, &rng);
  }
}

int main(int argc, char **argv) {
  long mib = bench_opt(argc, argv, "mib", 256);
  long ms = bench_opt(argc, argv, "ms", 15000);
  long interval_ms = bench_opt(argc, argv, "interval-ms", 100);
  long activity = bench_opt(argc, argv, "activity", 0);
  keep_every = bench_opt(argc, argv, "keep-every", 512);
  stay = bench_opt(argc, argv, "stay", 0);
  own = bench_opt(argc, argv, "own", 0);
  long seed = bench_opt(argc, argv, "seed", 1);
  if (mib < 1 || ms < 0 || interval_ms < 1 || keep_every < 1) {
    fprintf(stderr, "floor: need mib >= 1, ms >= 0, interval-ms >= 1, keep-every >= 1\n");
    return 2;
  }
  bench_begin("floor", stay ? (own ? "alive-own" : "alive") : activity ? "active" : "idle", argc, argv);

  struct builder b[2];
  size_t half = (size_t)mib << 19;
  for (int i = 0; i < 2; i++)
    b[i] = (struct builder){.rng = (uint64_t)(seed * 2 + i) * 0x9E3779B97F4A7C15ULL + 1, .bytes = half,
                            .objs = bench_map(capacity_for(half) * sizeof(void *)), .peer = &b[1 - i]};
  pthread_barrier_init(&built, NULL, 3);
  pthread_barrier_init(&measured, NULL, 3);
  pthread_barrier_init(&released, NULL, 3);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, builder_main, &b[i]);
  pthread_barrier_wait(&built);
  struct outcome o = {.peak_kb = bench_rss_kb()};
  struct bench_series s;
  bench_series_init(&s, (size_t)(ms / interval_ms) + 1000); /* room for a slow free phase */
  pthread_barrier_wait(&measured);
  watch(&s, t, ms, interval_ms, (int)activity, &o);
  if (stay) {
    pthread_barrier_wait(&released);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  }

  size_t live_bytes = b[0].live_bytes + b[1].live_bytes;
  printf("result peak_kb=%ld exit_kb=%ld exit_ms=%ld end_kb=%ld min_kb=%ld live_kb=%zu fall_ms=%ld\n",
         o.peak_kb, o.exit_kb, o.exit_ms, s.rss_kb[s.n - 1], o.min_kb, live_bytes / 1024, o.fall_ms);
  bench_series_print(&s);
  for (int i = 0; i < 2; i++) {
    for (size_t k = 0; k < b[i].n; k += (size_t)keep_every) free(b[i].objs[k]);
    bench_unmap(b[i].objs, capacity_for(half) * sizeof(void *));
  }
  bench_series_free(&s);
  return 0;
}
