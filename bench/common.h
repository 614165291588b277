/* common.h — what every bench program shares: clocks, memory and fault counters,
 * which allocator served the process, options, a seeded RNG and the output format.
 *
 * The programs link only libc and pthread: the allocator under test is chosen by
 * LD_PRELOAD alone, so one binary runs unchanged under every allocator. Bookkeeping
 * that is not part of a workload (pointer tables, sample buffers) lives in static
 * arrays or in bench_map() memory, never in the allocator under test.
 *
 * Output: "# cmd: ..." with the exact command line, then "bench=... served=...",
 * then "result k=v ..." lines (scalar metrics) and optionally "series t_ms=.. rss_kb=.."
 * lines (RSS over time). run.sh parses exactly these prefixes. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic time. */
uint64_t bench_now_ns(void);
double bench_ms_since(uint64_t start_ns);
void bench_sleep_ms(double ms);

/* Memory and faults of this process, read without allocating. */
long bench_rss_kb(void);      /* resident set, from /proc/self/statm */
long bench_vsz_kb(void);      /* address space mapped (VmSize), from /proc/self/statm */
long bench_heap_rss_kb(void); /* Rss of the [heap] (brk) mapping, 0 if absent */
long bench_peak_rss_kb(void); /* ru_maxrss */
long bench_minflt(void);      /* minor page faults so far, RUSAGE_SELF */

/* "ebb", "jemalloc", "mimalloc", "tcmalloc" if that library is mapped, else "glibc". */
const char *bench_served_by(void);

/* Prints the command line and the identity line; call first, after option parsing. */
void bench_begin(const char *bench, const char *casename, int argc, char **argv);

/* "--name value" from argv, or def. Exits with a message on a malformed value. */
long bench_opt(int argc, char **argv, const char *name, long def);

/* Memory for bookkeeping, straight from the kernel so the allocator never sees it. */
void *bench_map(size_t bytes);
void bench_unmap(void *p, size_t bytes);

/* Seeded xorshift64*: the same seed gives the same allocation pattern everywhere. */
uint64_t bench_rand(uint64_t *state);
size_t bench_rand_range(uint64_t *state, size_t lo, size_t hi); /* uniform in [lo, hi] */
size_t bench_rand_log(uint64_t *state, size_t lo, size_t hi);   /* log-uniform in [lo, hi] */

/* Median of v[0..n) (sorts v in place); 0 when n == 0. */
double bench_median(double *v, size_t n);

/* Writes every byte of a block, so the pages are really faulted in as an application would. */
void bench_touch(void *p, size_t n, unsigned char seed);

/* A timeline of RSS samples kept in a static buffer and printed as "series" lines. */
struct bench_series {
  uint64_t t0_ns; /* time zero of the timeline */
  size_t n;       /* samples taken */
  size_t cap;     /* capacity of t_ms / rss_kb */
  double *t_ms;   /* sample times, ms since t0 */
  long *rss_kb;   /* RSS at each sample */
};
void bench_series_init(struct bench_series *s, size_t cap);
void bench_series_sample(struct bench_series *s);
void bench_series_print(const struct bench_series *s);
void bench_series_free(struct bench_series *s);

#endif
