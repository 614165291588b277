/* test_arena.c — first-class arenas: ebb_arena_create / malloc / calloc /
 * realloc / destroy; destroying returns the arena's memory (mapped and
 * resident); free() of an arena block works, from any thread. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(arena, .timeout = 60);

Test(arena, create_malloc_calloc_destroy) {
  struct ebb_stats s0, s1, s2;
  ebb_stats(&s0);
  ebb_arena_t *a = ebb_arena_create();
  cr_assert(a, "ebb_arena_create returned NULL");
  ebb_stats(&s1);
  /* >= and <=: another thread of the process may get its own arena meanwhile */
  cr_assert_geq(s1.arenas, s0.arenas + 1, "arenas %llu -> %llu after ebb_arena_create",
               (unsigned long long)s0.arenas, (unsigned long long)s1.arenas);
  static const size_t sizes[] = {0, 1, 16, 100, 1000, 5000, 65536, 100000, 1 << 20, 3 << 20};
  void *p[ARRAY_LEN(sizes)];
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    p[i] = ebb_arena_malloc(a, hide_size(sizes[i]));
    cr_assert(p[i] && is_aligned(p[i], 16), "ebb_arena_malloc(%zu) = %p", sizes[i], p[i]);
    cr_assert(ebb_owns(p[i]));
    cr_assert_geq(malloc_usable_size(p[i]), sizes[i]);
    words_fill(p[i], sizes[i], (unsigned)i);
  }
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    cr_assert_eq(words_check(p[i], sizes[i], (unsigned)i), SIZE_MAX, "arena block %zu corrupt", i);
    for (size_t j = 0; j < i; j++) cr_assert_neq(p[i], p[j]);
  }
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    unsigned char *z = ebb_arena_calloc(a, hide_size(sizes[i]), 1);
    cr_assert(z, "ebb_arena_calloc(%zu, 1) returned NULL", sizes[i]);
    cr_assert_eq(first_nonzero(z, sizes[i]), SIZE_MAX, "ebb_arena_calloc(%zu, 1) not zeroed", sizes[i]);
  }
  ebb_arena_destroy(a);
  ebb_stats(&s2);
  cr_assert_leq(s2.arenas + 1, s1.arenas, "arenas %llu after destroy, %llu before",
                (unsigned long long)s2.arenas, (unsigned long long)s1.arenas);
}

Test(arena, bad_sizes) {
  ebb_arena_t *a = ebb_arena_create();
  cr_assert(a);
  errno = 0;
  void *p = ebb_arena_malloc(a, hide_size(SIZE_MAX));
  int e = errno;
  cr_assert_null(p);
  cr_assert_eq(e, ENOMEM, "ebb_arena_malloc(SIZE_MAX): errno %d", e);
  errno = 0;
  p = ebb_arena_calloc(a, hide_size(SIZE_MAX / 2 + 1), 2);
  e = errno;
  cr_assert_null(p, "ebb_arena_calloc overflow returned %p", p);
  cr_assert_eq(e, ENOMEM, "ebb_arena_calloc overflow: errno %d", e);
  unsigned char *q = ebb_arena_malloc(a, 100);
  pattern_fill(q, 100, 5);
  errno = 0;
  p = ebb_arena_realloc(a, q, hide_size(SIZE_MAX));
  e = errno;
  cr_assert_null(p);
  cr_assert_eq(e, ENOMEM);
  cr_assert(ebb_owns(q) && pattern_check(q, 100, 5) == SIZE_MAX, "failed ebb_arena_realloc hurt the block");
  ebb_arena_destroy(a);
}

Test(arena, realloc_keeps_contents) {
  ebb_arena_t *a = ebb_arena_create();
  unsigned char *p = ebb_arena_realloc(a, NULL, 16); /* NULL: like ebb_arena_malloc */
  cr_assert(p && ebb_owns(p), "ebb_arena_realloc(a, NULL, 16) = %p", (void *)p);
  size_t size = 16;
  words_fill(p, size, 0);
  static const size_t ladder[] = {1000, 100000, 3 << 20, 64 << 20, 3 << 20, 100000, 1000, 16, 5};
  for (size_t i = 0; i < ARRAY_LEN(ladder); i++) {
    size_t keep = size < ladder[i] ? size : ladder[i];
    unsigned char *q = ebb_arena_realloc(a, p, ladder[i]);
    cr_assert(q && is_aligned(q, 16), "ebb_arena_realloc(%zu -> %zu) = %p", size, ladder[i], (void *)q);
    cr_assert(ebb_owns(q));
    size_t bad = words_check(q, keep, (unsigned)i);
    cr_assert_eq(bad, SIZE_MAX, "ebb_arena_realloc %zu -> %zu lost byte %zu", size, ladder[i], bad);
    words_fill(q, ladder[i], (unsigned)i + 1);
    p = q;
    size = ladder[i];
  }
  ebb_arena_destroy(a);
}

/* A block that must move goes into the arena ebb_arena_realloc names (and a
 * plain realloc's into no arena), large blocks moved by mremap as well as
 * small ones copied: destroying its old arena leaves it live, resetting its
 * new one frees it (found by a probe: a 3 MiB block of a grown to 64 MiB by
 * ebb_arena_realloc(b, ...) stayed a's, so ebb_arena_destroy(a) freed it). */
Test(arena, realloc_moves_blocks_into_the_arena_named) {
  static const size_t from[] = {5000, 3u << 20};
  for (size_t i = 0; i < ARRAY_LEN(from); i++) {
    ebb_arena_t *a = ebb_arena_create(), *b = ebb_arena_create();
    cr_assert(a && b);
    void *pin = ebb_arena_malloc(a, 8u << 20); /* blocks around p, so that it cannot grow in place */
    char *p = ebb_arena_malloc(a, from[i]);
    void *pin2 = ebb_arena_malloc(a, 8u << 20);
    memset(p, 0x5a, from[i]);
    char *q = ebb_arena_realloc(b, p, 64u << 20);
    cr_assert_not_null(q);
    if (q == p) { /* grew in place after all: it stays a's, as a small block that fits does */
      cr_log_warn("%zu -> 64 MiB grew in place: nothing to check", from[i]);
    } else {
      ebb_arena_destroy(a);
      cr_assert(ebb_owns(q), "%zu -> 64 MiB moved into b, then a destroyed: the block is gone", from[i]);
      cr_assert_eq(q[from[i] - 1], 0x5a);
      ebb_arena_reset(b);
      cr_assert_not(ebb_owns(q), "%zu -> 64 MiB moved into b, then b reset: the block is still live", from[i]);
      a = NULL;
    }
    (void)pin, (void)pin2;
    if (a) ebb_arena_destroy(a);
    ebb_arena_destroy(b);

    ebb_arena_t *c = ebb_arena_create();
    void *m1 = ebb_arena_malloc(c, 8u << 20);
    char *r = ebb_arena_malloc(c, from[i]);
    void *m2 = ebb_arena_malloc(c, 8u << 20);
    char *s = realloc(r, 64u << 20); /* plain realloc: a moved block leaves the arena */
    cr_assert_not_null(s);
    if (s != r) {
      ebb_arena_destroy(c);
      cr_assert(ebb_owns(s), "%zu -> 64 MiB moved by plain realloc, then its old arena destroyed: gone", from[i]);
      free(s);
    } else {
      (void)m1, (void)m2;
      ebb_arena_destroy(c);
    }
  }
}

/* 64 MiB of blocks of mixed sizes, all touched; destroy must give it all back. */
Test(arena, destroy_keeps_memory_warm_until_trim) {
  ebb_trim();
  struct ebb_stats s0, s1, s2, s3;
  ebb_stats(&s0);
  ebb_arena_t *a = ebb_arena_create();
  size_t total = 0, target = 64 * MiB, n = 0;
  static const size_t sizes[] = {48, 64, 700, 4000, 16384, 100000, 1 << 20, 3 << 20};
  while (total < target) {
    size_t s = sizes[n++ % ARRAY_LEN(sizes)];
    void *p = ebb_arena_malloc(a, s);
    cr_assert(p, "ebb_arena_malloc(%zu) failed after %zu bytes", s, total);
    memset(p, 0x3c, s);
    total += s;
  }
  ebb_stats(&s1);
  size_t rss1 = rss_bytes();
  cr_assert_geq(s1.mapped, s0.mapped + target / 2, "mapped %zu -> %zu with 64 MiB in an arena", s0.mapped,
                s1.mapped);
  ebb_arena_destroy(a);
  ebb_stats(&s2);
  /* Destroyed, its memory is dirty: resident, counted, and reused first. */
  cr_assert_geq(s2.dirty, s1.dirty + target - 4 * MiB, "dirty %zu -> %zu after destroying a 64 MiB arena",
                s1.dirty, s2.dirty);
  cr_assert_lt(s2.active + target / 2, s1.active, "active %zu -> %zu", s1.active, s2.active);
  cr_assert_geq(ebb_trim(), target - 4 * MiB, "ebb_trim() returned less than the destroyed arena held");
  ebb_stats(&s3);
  size_t rss3 = rss_bytes();
  cr_assert_geq(rss1, rss3 + target - MiB, "destroy + ebb_trim: RSS %zu MiB -> %zu MiB", rss1 / MiB, rss3 / MiB);
  cr_assert_leq(s3.dirty, s0.dirty, "dirty %zu after the trim (%zu before the arena)", s3.dirty, s0.dirty);
}

/* Arenas come and go without leaking what they mapped. */
Test(arena, create_destroy_churn) {
  ebb_arena_t *a = ebb_arena_create();
  ebb_arena_destroy(a); /* the first one may set things up for good */
  struct ebb_stats s0, s1;
  ebb_stats(&s0);
  for (int r = 0; r < 200; r++) {
    a = ebb_arena_create();
    cr_assert(a, "ebb_arena_create failed at round %d", r);
    for (int i = 0; i < 50; i++) memset(ebb_arena_malloc(a, (size_t)(i * 97 % 5000) + 1), 1, 1);
    memset(ebb_arena_malloc(a, 3 << 20), 1, 3 << 20);
    ebb_arena_destroy(a);
  }
  ebb_stats(&s1);
  cr_assert_leq(s1.mapped, s0.mapped + 8 * MiB, "mapped grew from %zu to %zu over 200 arenas", s0.mapped,
                s1.mapped);
  cr_assert_leq(s1.arenas, s0.arenas + 1, "arenas %llu -> %llu over 200 create/destroy",
                (unsigned long long)s0.arenas, (unsigned long long)s1.arenas);
}

struct frees {
  void **p;
  size_t n;
};
static void *free_all(void *arg) {
  struct frees *f = arg;
  for (size_t i = 0; i < f->n; i++) free(f->p[i]);
  return NULL;
}

/* Plain free() of arena blocks, on this thread and on another one, then more
 * use of the arena, then destroy. */
Test(arena, free_from_this_and_other_threads) {
  enum { N = 4000 };
  static void *p[N];
  ebb_arena_t *a = ebb_arena_create();
  for (int i = 0; i < N; i++) {
    size_t s = i % 100 == 0 ? 200000 : (size_t)(i % 37) * 40 + 8;
    p[i] = ebb_arena_malloc(a, s);
    cr_assert(p[i]);
    memset(p[i], 7, s);
  }
  for (int i = 0; i < N; i += 4) free(p[i]); /* this thread */
  struct frees other = {p + N / 2, N / 2};
  /* the other thread frees the second half, skipping what this one freed */
  static void *half[N / 2];
  size_t nh = 0;
  for (int i = N / 2; i < N; i++)
    if (i % 4) half[nh++] = p[i];
  other.p = half;
  other.n = nh;
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, free_all, &other), 0);
  cr_assert_eq(pthread_join(t, NULL), 0);
  for (int i = 0; i < N; i++)
    if (i % 4 == 0 || i >= N / 2)
      cr_assert_not(OWNS_FREED(p[i]), "arena block %d (%p) still owned after free()", i, p[i]);
    else
      cr_assert(ebb_owns(p[i]));
  /* the arena stays usable, and reuses what was freed */
  for (int i = 0; i < N; i++) {
    void *q = ebb_arena_malloc(a, 100);
    cr_assert(q && ebb_owns(q));
    memset(q, 9, 100);
  }
  for (int i = 1; i < N / 2; i++)
    if (i % 4) cr_assert(((unsigned char *)p[i])[0] == 7, "live arena block %d overwritten", i);
  ebb_arena_destroy(a);
}

/* An arena may move between threads as long as calls are serialised. */
static void *use_arena(void *arg) {
  ebb_arena_t *a = arg;
  for (int i = 0; i < 1000; i++) {
    char *p = ebb_arena_malloc(a, 64);
    if (!p) return (void *)1;
    memset(p, 1, 64);
    if (i % 2) free(p);
  }
  return NULL;
}
Test(arena, used_by_another_thread) {
  ebb_arena_t *a = ebb_arena_create();
  void *rc;
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, use_arena, a), 0);
  pthread_join(t, &rc);
  cr_assert_null(rc);
  cr_assert_null(use_arena(a));
  ebb_arena_destroy(a);
}

Test(arena, destroy_empty_and_many_live) {
  ebb_arena_destroy(ebb_arena_create());
  ebb_arena_t *as[16];
  for (int i = 0; i < 16; i++) {
    as[i] = ebb_arena_create();
    cr_assert(as[i]);
    for (int j = 0; j < i; j++) cr_assert_neq(as[i], as[j]);
    memset(ebb_arena_malloc(as[i], 1000), i, 1000);
  }
  for (int i = 15; i >= 0; i--) ebb_arena_destroy(as[i]);
}
