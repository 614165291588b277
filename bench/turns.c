/* turns.c — threads taking turns: a pool of T worker threads where each job goes
 * to the next thread in turn (round robin), and a job builds a structure of
 * small blocks (16–1016 B, every byte written), then frees all of it; between
 * jobs the pool idles. Only one thread works at a time, so the live set never
 * exceeds one structure, but each thread's own freed memory waits T - 1 jobs
 * before that thread needs it again: what a thread freed serves the next job
 * only if the allocator lends it to whichever thread runs next (found by a
 * probe of ebb: its threads kept their empty chunks to themselves until decay
 * or the dirty cap returned them, so every job faulted its structure in again).
 *
 * Cases (run.sh): 4 threads, 64 MiB a job, 12 jobs, 100 ms idle after each.
 * Reports: faults_per_job and us_per_job (medians over the jobs after the first
 * T, the warm-up), peak_rss_kb (ru_maxrss),
 * rss_kb at the end (after the last job's frees and its idle time). */
#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 64
#define MAX_JOBS 10000

static long threads, jobs, mib, idle_ms;
static long turn;                /* the job being done; thread turn % threads does it */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static double job_faults[MAX_JOBS], job_us[MAX_JOBS];
static void **table;             /* the job's blocks (bench_map memory, written before the job) */
static size_t table_cap;

static void do_job(long job, uint64_t *rng) {
  size_t n = 0, total = 0, target = (size_t)mib << 20;
  long f0 = bench_minflt();
  uint64_t t0 = bench_now_ns();
  while (total < target && n < table_cap) {
    size_t size = bench_rand_range(rng, 16, 1016);
    char *p = malloc(size);
    if (!p) {
      perror("turns: malloc");
      exit(1);
    }
    memset(p, (int)(job & 0xff), size);
    table[n++] = p;
    total += size;
  }
  for (size_t i = 0; i < n; i++) free(table[i]);
  job_us[job] = (double)(bench_now_ns() - t0) / 1000.0;
  job_faults[job] = (double)(bench_minflt() - f0);
}

static void *worker(void *arg) {
  long id = (long)(intptr_t)arg;
  uint64_t rng = (uint64_t)(id + 1) * 0x9E3779B97F4A7C15ULL;
  for (;;) {
    pthread_mutex_lock(&lock);
    while (turn < jobs && turn % threads != id) pthread_cond_wait(&changed, &lock);
    long job = turn;
    pthread_mutex_unlock(&lock);
    if (job >= jobs) return NULL;
    do_job(job, &rng);
    bench_sleep_ms((double)idle_ms);
    pthread_mutex_lock(&lock);
    turn++;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
  }
}

int main(int argc, char **argv) {
  threads = bench_opt(argc, argv, "threads", 4);
  jobs = bench_opt(argc, argv, "jobs", 12);
  mib = bench_opt(argc, argv, "mib", 64);
  idle_ms = bench_opt(argc, argv, "idle-ms", 100);
  if (threads < 1 || threads > MAX_THREADS || jobs <= threads || jobs > MAX_JOBS || mib < 1 || idle_ms < 0) {
    fprintf(stderr, "turns: need 1 <= threads <= %d, threads < jobs <= %d, mib >= 1, idle-ms >= 0\n",
            MAX_THREADS, MAX_JOBS);
    return 2;
  }
  char casename[32];
  snprintf(casename, sizeof casename, "t%ld", threads);
  bench_begin("turns", casename, argc, argv);
  table_cap = ((size_t)mib << 20) / 16 + 1;
  table = bench_map(table_cap * sizeof *table);
  memset(table, 0, table_cap * sizeof *table); /* its own faults before any job */
  pthread_t t[MAX_THREADS];
  for (long i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
      perror("turns: pthread_create");
      return 1;
    }
  for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
  bench_unmap(table, table_cap * sizeof *table);
  /* the first T jobs are the warm-up: left out */
  printf("result faults_per_job=%.0f us_per_job=%.0f peak_rss_kb=%ld rss_kb=%ld\n",
         bench_median(job_faults + threads, (size_t)(jobs - threads)),
         bench_median(job_us + threads, (size_t)(jobs - threads)), bench_peak_rss_kb(), bench_rss_kb());
  return 0;
}
