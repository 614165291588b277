/* stress_util.h — what the stress tests share: work scaling, a seeded generator,
 * block sizes, address-keyed fill patterns, and a failure path that does not
 * allocate. Every .c file of tests/stress is linked into one Criterion binary, so
 * all of it is static inline (no clashes, no unused-function warnings).
 *
 * The stress tests call the allocator only by its ebb_* names: in the normal
 * build those are the very functions malloc, free, ... alias, and in the
 * ThreadSanitizer build (tests/sanitize.mk, -DEBB_NO_OVERRIDE) they are the only
 * way in, while Criterion and TSan's runtime keep glibc's malloc. */
#ifndef STRESS_UTIL_H
#define STRESS_UTIL_H

#ifdef EBB_STRESS_NO_CRITERION
/* ---------------------------------------------------------------- a stand-in for Criterion
 * Criterion cannot start under ThreadSanitizer: its sandbox (BoxFort) maps its
 * shared arena at a random address in a range TSan has reserved for itself
 * ("Could not initialize inheritable arena", Snaipe/Criterion#274). The TSan
 * build (tests/sanitize.mk) therefore force-includes this header first
 * (-include, -DEBB_STRESS_NO_CRITERION): defining Criterion's include guard
 * turns the tests' #include <criterion/criterion.h> into nothing, and the
 * macros below stand in for the part of Criterion they use. As under Criterion,
 * each test runs in a forked process (killed after its .timeout), --filter
 * takes a pattern on suite/name, and the run ends with Criterion's Synthesis line. */
#define CRITERION_H_
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h> /* criterion.h provides these two */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { /* the Test() parameters Criterion has */
  void (*init)(void), (*fini)(void);
  int signal, exit_code; /* how the test must end: 0 and 0 for a normal return */
  bool disabled;
  const char *description;
  unsigned timeout; /* seconds; 0: none */
} shim_opts_t;
typedef struct {
  const char *suite, *name;
  void (*fn)(void);
  shim_opts_t opts;
} shim_test_t;
/* one registry for the whole binary: weak definitions in every file are merged */
__attribute__((weak)) shim_test_t shim_tests[128];
__attribute__((weak)) int shim_ntests;

static inline void shim_register(const char *suite, const char *name, void (*fn)(void), shim_opts_t opts) {
  if (shim_ntests == (int)(sizeof shim_tests / sizeof shim_tests[0])) abort();
  shim_tests[shim_ntests++] = (shim_test_t){suite, name, fn, opts};
}
#define Test(suite, name, ...)                                                                               \
  static void shim_test_##suite##_##name(void);                                                              \
  __attribute__((constructor)) static void shim_reg_##suite##_##name(void) {                                 \
    shim_register(#suite, #name, shim_test_##suite##_##name, (shim_opts_t){__VA_ARGS__});                    \
  }                                                                                                          \
  static void shim_test_##suite##_##name(void)

__attribute__((format(printf, 5, 6))) static inline void shim_check(int ok, const char *file, int line,
                                                                    const char *expr, const char *fmt, ...) {
  if (ok) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[----] %s:%d: Assertion failed: %s:%s\n", file, line, expr, msg);
  exit(1);
}
/* " " __VA_ARGS__: the optional message is a format string literal, glued on */
#define SHIM_CHECK(ok, expr, ...) shim_check((ok), __FILE__, __LINE__, expr, " " __VA_ARGS__)
#define cr_assert(e, ...) SHIM_CHECK(!!(e), #e, __VA_ARGS__)
#define cr_assert_not(e, ...) SHIM_CHECK(!(e), "!(" #e ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) SHIM_CHECK((a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) SHIM_CHECK((a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) SHIM_CHECK((a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) SHIM_CHECK((a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) SHIM_CHECK((a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) SHIM_CHECK((a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_null(p, ...) SHIM_CHECK((p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) SHIM_CHECK((p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) SHIM_CHECK(strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) SHIM_CHECK(strcmp((a), (b)) != 0, #a " differs from " #b, __VA_ARGS__)
#define cr_log_info(...) (fprintf(stderr, "[----] " __VA_ARGS__), fputc('\n', stderr))
#define cr_log_warn(...) cr_log_info(__VA_ARGS__)
#define cr_log_error(...) cr_log_info(__VA_ARGS__)

static inline double shim_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((weak)) int main(int argc, char **argv) {
  const char *filter = "*";
  int tested = 0, passed = 0, failed = 0, crashed = 0;
  for (int i = 1; i < argc; i++) /* other options (--jobs=1, ...) are accepted and ignored */
    if (!strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
    else if (!strncmp(argv[i], "--filter=", 9))
      filter = argv[i] + 9;
  for (int i = 1; i < shim_ntests; i++) /* by name, as Criterion orders them */
    for (int j = i; j > 0; j--) {
      shim_test_t *a = &shim_tests[j - 1], *b = &shim_tests[j];
      int c = strcmp(a->suite, b->suite);
      if (c < 0 || (c == 0 && strcmp(a->name, b->name) <= 0)) break;
      shim_test_t t = *a;
      *a = *b;
      *b = t;
    }
  for (int i = 0; i < shim_ntests; i++) {
    shim_test_t *t = &shim_tests[i];
    char full[256];
    snprintf(full, sizeof full, "%s/%s", t->suite, t->name);
    if (fnmatch(filter, full, 0) != 0 || t->opts.disabled) continue;
    fflush(NULL);
    double start = shim_now();
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
      alarm(t->opts.timeout);
      if (t->opts.init) t->opts.init();
      t->fn();
      if (t->opts.fini) t->opts.fini();
      exit(0); /* not _exit: the sanitizer's report count sets the exit code at exit */
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
    }
    tested++;
    double secs = shim_now() - start;
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0, code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (sig == t->opts.signal && (sig || code == t->opts.exit_code)) {
      passed++;
      fprintf(stderr, "[PASS] %s::%s: (%.2fs)\n", t->suite, t->name, secs);
    } else if (!sig) {
      failed++;
      fprintf(stderr, "[FAIL] %s::%s: exit status %d (%.2fs)\n", t->suite, t->name, code, secs);
    } else {
      crashed++;
      fprintf(stderr, "[FAIL] %s::%s: CRASH! signal %d%s (%.2fs)\n", t->suite, t->name, sig,
              sig == SIGALRM ? " (timed out)" : "", secs);
    }
  }
  fprintf(stderr, "[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: %d \n", tested, passed,
          failed + crashed, crashed);
  return failed + crashed || tested == 0;
}
#endif

#include <ebb.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* EBBTEST_SCALE=n divides the work by n: the debug build (assertions and
 * validators on) runs with 4 so that it stays within its time budget. */
static inline size_t stress_scale(void) {
  const char *s = getenv("EBBTEST_SCALE");
  long v = s ? strtol(s, NULL, 10) : 1;
  return v >= 1 ? (size_t)v : 1;
}
static inline size_t stress_n(size_t n) {
  size_t v = n / stress_scale();
  return v ? v : 1;
}

/* STRESS_TSAN: built with ThreadSanitizer (clang's or gcc's), which runs a
 * test 10-30 times slower; a test whose work is sized for the release build
 * divides it by STRESS_TSAN_DIV there, to stay well inside its timeout. */
#if defined(__SANITIZE_THREAD__)
#define STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRESS_TSAN 1
#endif
#endif
#ifdef STRESS_TSAN
#define STRESS_TSAN_DIV 8
#else
#define STRESS_TSAN_DIV 1
#endif

/* Failures in worker threads cannot use Criterion's assertions (they longjmp
 * within the calling thread), and the heap may be corrupt: format on the stack,
 * write to fd 2, abort. Criterion reports the test as crashed. */
__attribute__((noreturn, format(printf, 1, 2))) static inline void stress_die(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  ssize_t w = write(2, buf, (size_t)n);
  (void)w;
  abort();
}
/* A forked child's wait status, or -1 when it was still running after `seconds`
 * and had to be killed (a deadlock in the child would otherwise hang the run),
 * -2 when waitpid failed. */
static inline int stress_wait_child(pid_t pid, int seconds) {
  struct timespec nap = {0, 1000 * 1000};
  for (int i = 0; i < seconds * 1000; i++) {
    int status;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got < 0 && errno != EINTR) return -2;
    nanosleep(&nap, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

#define STRESS_CHECK(e)                                                                                      \
  do {                                                                                                       \
    if (!(e)) stress_die("%s:%d: check failed: %s", __FILE__, __LINE__, #e);                                 \
  } while (0)

/* splitmix64: every test seeds its own generators with fixed values, so a
 * failing run repeats the same sequence of sizes and operations per thread. */
typedef struct {
  uint64_t s;
} rng_t;
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static inline rng_t rng_seed(uint64_t seed) { return (rng_t){mix64(seed + 0x9e3779b97f4a7c15ull)}; }
static inline uint64_t rng_next(rng_t *r) { return mix64(r->s += 0x9e3779b97f4a7c15ull); }
static inline uint64_t rng_below(rng_t *r, uint64_t n) { return rng_next(r) % n; }

/* Block sizes: log-uniform from 16 B to 64 KiB (so every small size class and
 * the large-page classes are hit about equally), a few tiny ones (1..15 B),
 * and 1 in 512 a huge one of 1..4 MiB. */
static inline size_t stress_size(rng_t *r) {
  uint64_t x = rng_next(r);
  if ((x & 511) == 0) return ((size_t)1 << 20) + (size_t)rng_below(r, 3u << 20);
  if ((x & 63) == 1) return 1 + (size_t)rng_below(r, 15);
  unsigned bits = 4 + (unsigned)rng_below(r, 13); /* 2^4 .. 2^16 */
  size_t lo = (size_t)1 << bits;
  return lo + (size_t)rng_below(r, lo);
}
static inline size_t stress_small_size(rng_t *r) { return 1 + (size_t)rng_below(r, 1024); }

/* ---------------------------------------------------------------- fill patterns
 * A block's bytes are a function of (its address, a tag unique to this
 * allocation). The tag lives outside the block, with its owner: if the
 * allocator hands the same memory to two owners, or lets blocks overlap, the
 * later fill overwrites the earlier one and the earlier owner's check fails.
 * Blocks up to 64 KiB are covered whole; beyond that the first 64 KiB, 8 bytes
 * of every 4 KiB page and the last 8 bytes (overlap and lost copies are still
 * caught, without spending the run on memory bandwidth). */
#define PAT_DENSE ((size_t)64 << 10)
#define PAT_STRIDE ((size_t)4096)
#define PAT_OK SIZE_MAX

typedef struct {
  void *p;      /* the block */
  size_t size;  /* bytes requested */
  uint64_t tag; /* unique per allocation; keys the pattern */
} blk_t;

static inline uint64_t pat_key(const void *p, uint64_t tag) { return mix64((uintptr_t)p ^ mix64(tag)); }
static inline uint64_t pat_word(uint64_t key, size_t word) {
  return mix64(key + word * 0x9e3779b97f4a7c15ull);
}

/* Fills or checks bytes [from, to) of the pattern keyed by key; returns the first
 * offset that differs, or PAT_OK. */
static inline size_t pat_range(unsigned char *p, size_t from, size_t to, uint64_t key, int check) {
  for (size_t off = from & ~(size_t)7; off < to; off += 8) {
    uint64_t w = pat_word(key, off / 8);
    size_t lo = off < from ? from - off : 0, hi = to - off < 8 ? to - off : 8;
    if (lo == 0 && hi == 8) {
      uint64_t have;
      if (!check)
        memcpy(p + off, &w, 8);
      else if (memcpy(&have, p + off, 8), have != w)
        return off;
      continue;
    }
    for (size_t b = lo; b < hi; b++) {
      unsigned char want = (unsigned char)(w >> (8 * b));
      if (!check)
        p[off + b] = want;
      else if (p[off + b] != want)
        return off + b;
    }
  }
  return PAT_OK;
}

/* Visits the pattern positions of a block of `size` bytes that lie below `len`
 * (len < size when checking what realloc kept of a block it shrank). */
static inline size_t pat_walk(void *block, size_t len, size_t size, uint64_t key, int check) {
  unsigned char *p = block;
  size_t r = pat_range(p, 0, len < PAT_DENSE ? len : PAT_DENSE, key, check);
  if (r != PAT_OK || size <= PAT_DENSE) return r;
  for (size_t off = PAT_DENSE; off < len; off += PAT_STRIDE)
    if ((r = pat_range(p, off, off + 8 < len ? off + 8 : len, key, check)) != PAT_OK) return r;
  if (len == size) r = pat_range(p, size - 8, size, key, check);
  return r;
}

static inline void blk_fill(const blk_t *b) { pat_walk(b->p, b->size, b->size, pat_key(b->p, b->tag), 0); }

/* Aborts with the block's particulars when its pattern is not intact. */
static inline void blk_check(const blk_t *b, const char *where) {
  size_t off = pat_walk(b->p, b->size, b->size, pat_key(b->p, b->tag), 1);
  if (off != PAT_OK)
    stress_die("%s: block %p (size %zu, tag %llu) corrupt at offset %zu", where, b->p, b->size,
               (unsigned long long)b->tag, off);
}

/* Checks what the allocator promises of any block: alignment, usable size, ownership. */
static inline void blk_check_meta(const blk_t *b, const char *where) {
  if (((uintptr_t)b->p & 15) != 0) stress_die("%s: block %p misaligned", where, b->p);
  if (ebb_malloc_usable_size(b->p) < b->size)
    stress_die("%s: block %p usable size %zu < %zu", where, b->p, ebb_malloc_usable_size(b->p), b->size);
  if (!ebb_owns(b->p)) stress_die("%s: ebb_owns(%p) is 0 for a live block", where, b->p);
}

/* A new pattern-filled block; tag must be unique across the test. */
static inline blk_t blk_new(size_t size, uint64_t tag, const char *where) {
  blk_t b = {ebb_malloc(size), size, tag};
  if (!b.p) stress_die("%s: malloc(%zu) returned NULL", where, size);
  blk_check_meta(&b, where);
  blk_fill(&b);
  return b;
}

static inline void blk_free(blk_t *b, const char *where) {
  blk_check(b, where);
  ebb_free(b->p);
  b->p = NULL;
}

/* Reallocates, checks that the kept prefix came along, and refills for the new
 * address. */
static inline void blk_realloc(blk_t *b, size_t size, const char *where) {
  blk_check(b, where);
  uintptr_t old = (uintptr_t)b->p; /* only printed once realloc has run */
  uint64_t oldkey = pat_key(b->p, b->tag);
  size_t oldsize = b->size, keep = size < oldsize ? size : oldsize;
  void *q = ebb_realloc(b->p, size);
  if (!q) stress_die("%s: realloc(%#lx, %zu) returned NULL", where, (unsigned long)old, size);
  size_t off = pat_walk(q, keep, oldsize, oldkey, 1);
  if (off != PAT_OK)
    stress_die("%s: realloc %#lx (%zu) -> %p (%zu) lost contents at offset %zu", where, (unsigned long)old,
               oldsize, q, size, off);
  b->p = q;
  b->size = size;
  blk_check_meta(b, where);
  blk_fill(b);
}

static inline size_t stress_mapped(void) {
  struct ebb_stats st;
  ebb_stats(&st);
  return st.mapped;
}

/* ---------------------------------------------------------------- a queue of blocks */

/* A bounded queue behind one mutex, for handing blocks to another thread:
 * simple enough to be obviously right, so a failure points at the allocator.
 * A blk_t with p == NULL tells a consumer to stop. */
#define BLKQ_CAP 512
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  blk_t ring[BLKQ_CAP];
  size_t head, count;
} blkq_t;
#define BLKQ_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0}}, 0, 0}

static inline void blkq_push(blkq_t *q, blk_t b) {
  pthread_mutex_lock(&q->lock);
  while (q->count == BLKQ_CAP) pthread_cond_wait(&q->not_full, &q->lock);
  q->ring[(q->head + q->count++) % BLKQ_CAP] = b;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->lock);
}

static inline blk_t blkq_pop(blkq_t *q) {
  pthread_mutex_lock(&q->lock);
  while (q->count == 0) pthread_cond_wait(&q->not_empty, &q->lock);
  blk_t b = q->ring[q->head];
  q->head = (q->head + 1) % BLKQ_CAP;
  q->count--;
  pthread_cond_signal(&q->not_full);
  pthread_mutex_unlock(&q->lock);
  return b;
}


#endif
