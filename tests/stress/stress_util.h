/* stress_util.h — what the stress tests share: work scaling, a seeded generator,
 * block sizes, address-keyed fill patterns, and a failure path that does not
 * allocate. Every .c file of tests/stress is linked into one Criterion binary, so
 * all of it is static inline (no clashes, no unused-function warnings). */
#ifndef STRESS_UTIL_H
#define STRESS_UTIL_H

#include <ebb.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* EBB_STRESS_SCALE=n divides the work by n: the debug build (assertions and
 * validators on) runs with 4 so that it stays within its time budget. */
static inline size_t stress_scale(void) {
  const char *s = getenv("EBB_STRESS_SCALE");
  long v = s ? strtol(s, NULL, 10) : 1;
  return v >= 1 ? (size_t)v : 1;
}
static inline size_t stress_n(size_t n) {
  size_t v = n / stress_scale();
  return v ? v : 1;
}

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
  if (malloc_usable_size(b->p) < b->size)
    stress_die("%s: block %p usable size %zu < %zu", where, b->p, malloc_usable_size(b->p), b->size);
  if (!ebb_owns(b->p)) stress_die("%s: ebb_owns(%p) is 0 for a live block", where, b->p);
}

/* A new pattern-filled block; tag must be unique across the test. */
static inline blk_t blk_new(size_t size, uint64_t tag, const char *where) {
  blk_t b = {malloc(size), size, tag};
  if (!b.p) stress_die("%s: malloc(%zu) returned NULL", where, size);
  blk_check_meta(&b, where);
  blk_fill(&b);
  return b;
}

static inline void blk_free(blk_t *b, const char *where) {
  blk_check(b, where);
  free(b->p);
  b->p = NULL;
}

/* Reallocates, checks that the kept prefix came along, and refills for the new
 * address. */
static inline void blk_realloc(blk_t *b, size_t size, const char *where) {
  blk_check(b, where);
  uintptr_t old = (uintptr_t)b->p; /* only printed once realloc has run */
  uint64_t oldkey = pat_key(b->p, b->tag);
  size_t oldsize = b->size, keep = size < oldsize ? size : oldsize;
  void *q = realloc(b->p, size);
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

#endif
