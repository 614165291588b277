/* common.c — clocks, /proc readers, option parsing and output shared by the bench
 * programs. Everything here avoids the allocator under test: /proc files are read
 * with read(2) into stack buffers and bookkeeping memory comes from mmap. */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double bench_ms_since(uint64_t start_ns) { return (double)(bench_now_ns() - start_ns) / 1e6; }

void bench_sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(fmod(ms, 1000) * 1e6)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Reads a small /proc file whole; returns the length, or -1. */
static ssize_t read_small_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  ssize_t got;
  while (len + 1 < cap && (got = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)got;
  close(fd);
  buf[len] = 0;
  return (ssize_t)len;
}

long bench_rss_kb(void) {
  char buf[256];
  long size = 0, resident = 0;
  if (read_small_file("/proc/self/statm", buf, sizeof buf) < 0) return -1;
  if (sscanf(buf, "%ld %ld", &size, &resident) != 2) return -1;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

long bench_vsz_kb(void) {
  char buf[256];
  long size = 0;
  if (read_small_file("/proc/self/statm", buf, sizeof buf) < 0) return -1;
  if (sscanf(buf, "%ld", &size) != 1) return -1;
  return size * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Scans a file in chunks, calling fn on each chunk with the tail of the previous one
 * kept in front, so a line cut between two reads is still seen whole by fn. */
#define SCAN_CHUNK 8192
#define SCAN_KEEP 512
typedef int (*scan_fn)(const char *text, void *ctx); /* returns 1 to stop */
static void scan_file(const char *path, scan_fn fn, void *ctx) {
  char buf[SCAN_CHUNK + SCAN_KEEP + 1];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t kept = 0;
  ssize_t got;
  while ((got = read(fd, buf + kept, SCAN_CHUNK)) > 0) {
    size_t len = kept + (size_t)got;
    buf[len] = 0;
    if (fn(buf, ctx)) break;
    kept = len < SCAN_KEEP ? len : SCAN_KEEP;
    memmove(buf, buf + len - kept, kept);
  }
  close(fd);
}

/* The "Rss:" line that follows the [heap] header in smaps. The chunk overlap can
 * show the same header twice; the first complete match wins. */
static int heap_rss_scan(const char *text, void *ctx) {
  const char *h = strstr(text, "[heap]\n");
  if (!h) return 0;
  const char *r = strstr(h, "\nRss:");
  if (!r) return 0; /* the Rss line is in the next chunk: SCAN_KEEP carries the header */
  *(long *)ctx = strtol(r + 5, NULL, 10);
  return 1;
}

long bench_heap_rss_kb(void) {
  long kb = 0;
  scan_file("/proc/self/smaps", heap_rss_scan, &kb);
  return kb;
}

long bench_peak_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

long bench_minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static const char *const served_names[] = {"libebb", "libjemalloc", "libmimalloc", "libtcmalloc"};
static int served_scan(const char *text, void *ctx) {
  for (size_t i = 0; i < sizeof served_names / sizeof *served_names; i++)
    if (strstr(text, served_names[i])) {
      *(const char **)ctx = served_names[i] + 3; /* drop "lib" */
      return 1;
    }
  return 0;
}

const char *bench_served_by(void) {
  const char *name = "glibc";
  scan_file("/proc/self/maps", served_scan, &name);
  return name;
}

/* Which argv entries bench_opt consumed, so bench_begin can reject typos. */
#define MAX_ARGS 64
static unsigned char consumed[MAX_ARGS];

long bench_opt(int argc, char **argv, const char *name, long def) {
  for (int i = 1; i + 1 < argc && i + 1 < MAX_ARGS; i++) {
    if (strncmp(argv[i], "--", 2) != 0 || strcmp(argv[i] + 2, name) != 0) continue;
    char *end;
    errno = 0;
    long v = strtol(argv[i + 1], &end, 10);
    if (errno || *end || end == argv[i + 1]) {
      fprintf(stderr, "%s: --%s wants an integer, got '%s'\n", argv[0], name, argv[i + 1]);
      exit(2);
    }
    consumed[i] = consumed[i + 1] = 1;
    return v;
  }
  return def;
}

static void reject_unknown_args(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (i >= MAX_ARGS || !consumed[i]) {
      fprintf(stderr, "%s: unknown argument '%s' (options are --name integer)\n", argv[0], argv[i]);
      exit(2);
    }
}

/* The environment that selects and tunes the allocator is part of the command. */
static const char *const env_names[] = {"LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF",
                                        "MIMALLOC_PURGE_DELAY", "TCMALLOC_RELEASE_RATE",
                                        "EBB_BACKGROUND"};

void bench_begin(const char *bench, const char *casename, int argc, char **argv) {
  reject_unknown_args(argc, argv);
  printf("# cmd:");
  for (size_t i = 0; i < sizeof env_names / sizeof *env_names; i++) {
    const char *v = getenv(env_names[i]);
    if (v) printf(" %s=%s", env_names[i], v);
  }
  for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
  printf("\nbench=%s case=%s served=%s\n", bench, casename, bench_served_by());
  fflush(stdout);
}

void *bench_map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("bench_map");
    exit(1);
  }
  return p;
}

void bench_unmap(void *p, size_t bytes) { munmap(p, bytes); }

uint64_t bench_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

size_t bench_rand_range(uint64_t *state, size_t lo, size_t hi) {
  return lo + (size_t)(bench_rand(state) % (hi - lo + 1));
}

/* Equal counts per power of two, the usual shape of scratch buffers. */
size_t bench_rand_log(uint64_t *state, size_t lo, size_t hi) {
  double u = (double)(bench_rand(state) >> 11) / (double)(1ULL << 53);
  size_t v = (size_t)exp(log((double)lo) + u * (log((double)hi) - log((double)lo)));
  return v < lo ? lo : v > hi ? hi : v;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Out of line on purpose: the compiler cannot drop a write it cannot see before a free. */
void bench_touch(void *p, size_t n, unsigned char seed) { memset(p, seed, n); }

void bench_series_init(struct bench_series *s, size_t cap) {
  s->t0_ns = bench_now_ns();
  s->n = 0;
  s->cap = cap;
  s->t_ms = bench_map(cap * sizeof *s->t_ms);
  s->rss_kb = bench_map(cap * sizeof *s->rss_kb);
}

void bench_series_sample(struct bench_series *s) {
  if (s->n == s->cap) return;
  s->t_ms[s->n] = bench_ms_since(s->t0_ns);
  s->rss_kb[s->n] = bench_rss_kb();
  s->n++;
}

void bench_series_print(const struct bench_series *s) {
  for (size_t i = 0; i < s->n; i++) printf("series t_ms=%.1f rss_kb=%ld\n", s->t_ms[i], s->rss_kb[i]);
}

void bench_series_free(struct bench_series *s) {
  bench_unmap(s->t_ms, s->cap * sizeof *s->t_ms);
  bench_unmap(s->rss_kb, s->cap * sizeof *s->rss_kb);
}
