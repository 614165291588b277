/* test_sizes.c — sizes: every block 16-byte aligned with a usable size at least
 * the request (0..70000 and huge ones); the whole usable size writable without
 * touching neighbours; realloc across the small / medium / large boundaries
 * keeps contents; calloc zeroes memory that was used before. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(sizes, .timeout = 60);

Test(sizes, every_size_to_70000_aligned_and_usable) {
  for (size_t s = 0; s <= 70000; s++) {
    unsigned char *p = malloc(hide_size(s));
    cr_assert(p, "malloc(%zu) returned NULL", s);
    cr_assert(is_aligned(p, 16), "malloc(%zu) = %p: not 16-byte aligned", s, (void *)p);
    size_t u = malloc_usable_size(p);
    cr_assert_geq(u, s, "malloc_usable_size(malloc(%zu)) = %zu", s, u);
    p[0] = 1;
    p[u - 1] = 2; /* u >= 1: malloc(0) has a usable byte or more in every allocator worth the name */
    free(p);
  }
}

Test(sizes, huge_blocks) {
  static const size_t sizes[] = {(2 << 20) - 1, 2 << 20, (2 << 20) + 1, 4 << 20, 8 << 20,
                                 (8 << 20) + 1, 100 << 20, (100 << 20) + 12345};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    unsigned char *p = malloc(hide_size(sizes[i]));
    cr_assert(p, "malloc(%zu) returned NULL", sizes[i]);
    cr_assert(is_aligned(p, 16));
    cr_assert(ebb_owns(p));
    size_t u = malloc_usable_size(p);
    cr_assert_geq(u, sizes[i], "malloc_usable_size(malloc(%zu)) = %zu", sizes[i], u);
    for (size_t off = 0; off < u; off += 4096) p[off] = (unsigned char)off;
    p[u - 1] = 0x77;
    free(p);
  }
}

/* Sizes around every class boundary: 2^k + j * 2^(k-3) and one either side. */
static size_t boundary_sizes(size_t *out, size_t cap, size_t max) {
  size_t n = 0;
  for (size_t s = 0; s <= 300 && n < cap; s++) out[n++] = s;
  for (unsigned k = 8; k < 24; k++)
    for (size_t j = 0; j < 8; j++) {
      size_t base = ((size_t)1 << k) + j * ((size_t)1 << (k - 3));
      for (int d = -1; d <= 1 && n < cap; d++)
        if (base + (size_t)d <= max) out[n++] = base + (size_t)d;
    }
  return n;
}

/* Fill neighbours' whole usable sizes with distinct patterns, then check all. */
static void neighbours(void *(*alloc)(size_t), size_t max) {
  static size_t sizes[1000];
  size_t ns = boundary_sizes(sizes, ARRAY_LEN(sizes), max);
  enum { MAXN = 48 };
  for (size_t si = 0; si < ns; si++) {
    size_t s = sizes[si];
    size_t n = s ? 2 * MiB / s : MAXN;
    n = n < 6 ? 6 : n > MAXN ? MAXN : n;
    unsigned char *p[MAXN];
    size_t u[MAXN];
    for (size_t k = 0; k < n; k++) {
      p[k] = alloc(hide_size(s));
      cr_assert(p[k], "malloc(%zu) returned NULL", s);
      u[k] = malloc_usable_size(p[k]);
      cr_assert_geq(u[k], s);
      words_fill(p[k], u[k], (unsigned)(s * 64 + k));
    }
    for (size_t k = 0; k < n; k++) {
      size_t bad = words_check(p[k], u[k], (unsigned)(s * 64 + k));
      cr_assert_eq(bad, SIZE_MAX,
                   "size %zu: byte %zu of block %zu (%p, usable %zu) was overwritten by a neighbour", s,
                   bad, k, (void *)p[k], u[k]);
    }
    for (size_t k = 0; k < n; k++) free(p[k]);
  }
}
Test(sizes, usable_size_writable_without_corrupting_neighbours) { neighbours(malloc, 3 * MiB); }
Test(sizes, ebb_malloc_neighbours) { neighbours(ebb_malloc, 70000); }

/* Blocks of many sizes come and go (fixed seed); every block keeps its pattern. */
Test(sizes, mixed_churn_keeps_contents) {
  enum { LIVE = 3000, OPS = 30000 };
  static unsigned char *p[LIVE];
  static size_t sz[LIVE];
  static unsigned seed[LIVE];
  unsigned rnd = 42;
  for (int op = 0; op < OPS; op++) {
    rnd = rnd * 1103515245u + 12345u;
    int i = (int)((rnd >> 8) % LIVE);
    if (p[i]) {
      size_t bad = words_check(p[i], sz[i], seed[i]);
      cr_assert_eq(bad, SIZE_MAX, "op %d: block %p of %zu bytes corrupt at %zu", op, (void *)p[i],
                   sz[i], bad);
      free(p[i]);
      p[i] = NULL;
      continue;
    }
    rnd = rnd * 1103515245u + 12345u;
    unsigned r = rnd >> 4;
    sz[i] = r % 16 == 0 ? r % 300000 : r % 4 == 0 ? r % 8000 : r % 256;
    p[i] = malloc(sz[i]);
    cr_assert(p[i] && is_aligned(p[i], 16));
    seed[i] = (unsigned)op;
    words_fill(p[i], sz[i], seed[i]);
  }
  for (int i = 0; i < LIVE; i++)
    if (p[i]) {
      cr_assert_eq(words_check(p[i], sz[i], seed[i]), SIZE_MAX, "block %d corrupt at the end", i);
      free(p[i]);
    }
}

/* 16 -> 1000 -> 100 KB -> 3 MB -> 64 MB and back down, contents kept, with
 * live neighbours so that growing in place is not always possible. */
static void realloc_ladder(void *(*re)(void *, size_t), const char *name) {
  static const size_t ladder[] = {16,      1000,    100000,   3 << 20, 64 << 20, 3 << 20,
                                  100000,  1000,    16,       1,       2 << 20,  (2 << 20) + 1,
                                  65536,   65537,   40 << 20, 17,      0x1234,   0};
  void *blockers[8];
  size_t size = 8;
  unsigned char *p = re(NULL, size);
  words_fill(p, size, 1);
  for (size_t i = 0; i < ARRAY_LEN(ladder); i++) {
    blockers[i % 8] = malloc(ladder[i] / 2 + 1); /* something right after p, maybe */
    size_t keep = size < ladder[i] ? size : ladder[i];
    unsigned char *q = re(p, hide_size(ladder[i]));
    if (ladder[i] == 0) { /* realloc(p, 0) frees */
      cr_assert_null(q, "%s(p, 0) returned %p", name, (void *)q);
      break;
    }
    cr_assert(q, "%s(%zu -> %zu) returned NULL", name, size, ladder[i]);
    cr_assert(is_aligned(q, 16));
    cr_assert_geq(malloc_usable_size(q), ladder[i]);
    size_t bad = words_check(q, keep, 1 + (unsigned)i);
    cr_assert_eq(bad, SIZE_MAX, "%s %zu -> %zu: byte %zu of %zu kept bytes lost", name, size, ladder[i],
                 bad, keep);
    words_fill(q, ladder[i], 2 + (unsigned)i);
    p = q;
    size = ladder[i];
    if (i % 8 == 7)
      for (int k = 0; k < 8; k++) free(blockers[k]);
  }
  for (size_t k = 0; k < (ARRAY_LEN(ladder) - 1) % 8 + 1; k++) free(blockers[k]);
}
Test(sizes, realloc_across_boundaries) { realloc_ladder(realloc, "realloc"); }
Test(sizes, ebb_realloc_across_boundaries) { realloc_ladder(ebb_realloc, "ebb_realloc"); }

/* calloc must zero memory that was handed out and dirtied before. */
static void calloc_reuse(void *(*cal)(size_t, size_t), const char *name) {
  static const size_t sizes[] = {1,    16,    48,     100,     1000,    4096,   16384,
                                 40000, 65536, 100000, 1 << 20, 2 << 20, 5 << 20};
  enum { K = 24 };
  for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
    size_t s = sizes[si];
    unsigned char *p[K];
    for (int round = 0; round < 4; round++) {
      for (int k = 0; k < K; k++) {
        p[k] = malloc(s);
        memset(p[k], 0xAA, malloc_usable_size(p[k]));
      }
      for (int k = 0; k < K; k++) free(p[k]);
    }
    for (int k = 0; k < K; k++) {
      /* alternate the split of n * size */
      p[k] = k % 2 ? cal(1, hide_size(s)) : (s % 4 == 0 ? cal(4, hide_size(s / 4)) : cal(hide_size(s), 1));
      cr_assert(p[k], "%s of %zu bytes returned NULL", name, s);
      size_t at = first_nonzero(p[k], s);
      cr_assert_eq(at, SIZE_MAX, "%s(%zu bytes) #%d = %p: byte %zu is %#x (reused memory not zeroed)",
                   name, s, k, (void *)p[k], at, at == SIZE_MAX ? 0 : p[k][at]);
      memset(p[k], 0xAA, malloc_usable_size(p[k]));
    }
    for (int k = 0; k < K; k++) free(p[k]);
  }
}
Test(sizes, calloc_zeroes_reused_memory) { calloc_reuse(calloc, "calloc"); }
Test(sizes, ebb_calloc_zeroes_reused_memory) { calloc_reuse(ebb_calloc, "ebb_calloc"); }

/* A block shrunk by realloc and grown back must not expose stale bytes to calloc. */
Test(sizes, calloc_after_realloc_shrink) {
  for (int r = 0; r < 50; r++) {
    unsigned char *p = malloc(4000);
    memset(p, 0xAA, 4000);
    p = realloc(p, 100);
    free(p);
    unsigned char *q = calloc(1, 4000);
    cr_assert_eq(first_nonzero(q, 4000), SIZE_MAX, "calloc after a realloc shrink: stale bytes");
    free(q);
  }
}

/* A buffer grown by realloc in small steps (a string or log appended to) is
 * copied once per size class it passes, not again and again inside a class:
 * the classes up to 512 KiB are 8 multiples of 16 to 128 B, 8 a doubling to
 * 4 KiB (40) and 4 a doubling to 512 KiB (28), 76 in all, so no more moves
 * than that. A block moved within its class (the one-block pages' colors:
 * each new block gave up a different part of the class to its color) moved
 * 175 times on the way to 256 KiB. Its bytes survive every move. */
static void grow_in_steps(void *(*re)(void *, size_t), const char *name) {
  unsigned char *b = NULL;
  size_t n = 0;
  unsigned moves = 0, seed = 1;
  while (n < (512u << 10)) {
    seed = seed * 1103515245u + 12345u;
    size_t d = 1 + (seed >> 16) % 64;
    unsigned char *q = re(b, n + d);
    cr_assert(q, "%s(%p, %zu) returned NULL", name, (void *)b, n + d);
    if (b && q != b) moves++;
    b = q;
    for (size_t i = 0; i < d; i++) b[n + i] = (unsigned char)(n + i);
    n += d;
  }
  for (size_t i = 0; i < n; i++) cr_assert_eq(b[i], (unsigned char)i, "%s: byte %zu lost in a move", name, i);
  cr_assert_leq(moves, 76, "%s moved a buffer grown to 512 KiB %u times: more than once a class", name, moves);
  free(b);
}
Test(sizes, a_buffer_grown_in_small_steps_moves_once_a_class) { grow_in_steps(realloc, "realloc"); }
Test(sizes, ebb_realloc_grows_a_buffer_moving_it_once_a_class) { grow_in_steps(ebb_realloc, "ebb_realloc"); }
