/* test_align.c — aligned allocation: every power of two from 1 to 1 MiB times a
 * range of sizes, through posix_memalign, aligned_alloc, memalign and their ebb_
 * names; the result must be aligned, writable over its whole size without
 * touching its neighbours, big enough, ebb's, and free cleanly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(align, .timeout = 60);

static const size_t sweep_sizes[] = {0,    1,     15,     16,        17,        100,       4095,
                                     4096, 4097,  65536,  100000,    1 << 20,   (1 << 20) + 1, 3 << 20};
#define LIVE 3 /* blocks alive at once per (alignment, size), to catch overlaps */

typedef void *aligned_fn(size_t alignment, size_t size);

static void *via_posix_memalign(size_t al, size_t size) {
  void *p = NULL;
  int rc = posix_memalign(&p, al < sizeof(void *) ? sizeof(void *) : al, size);
  cr_assert_eq(rc, 0, "posix_memalign(%zu, %zu) returned %d", al, size, rc);
  return p;
}
static void *via_ebb_posix_memalign(size_t al, size_t size) {
  void *p = NULL;
  int rc = ebb_posix_memalign(&p, al < sizeof(void *) ? sizeof(void *) : al, size);
  cr_assert_eq(rc, 0, "ebb_posix_memalign(%zu, %zu) returned %d", al, size, rc);
  return p;
}

static void sweep(aligned_fn *fn, const char *name) {
  for (size_t al = 1; al <= 1 * MiB; al *= 2) {
    for (size_t si = 0; si < ARRAY_LEN(sweep_sizes); si++) {
      size_t size = sweep_sizes[si];
      unsigned char *p[LIVE];
      for (int k = 0; k < LIVE; k++) {
        p[k] = fn(hide_size(al), hide_size(size));
        cr_assert(p[k] != NULL, "%s(%zu, %zu) returned NULL (errno %d)", name, al, size, errno);
        cr_assert(is_aligned(p[k], al), "%s(%zu, %zu) = %p: misaligned", name, al, size, (void *)p[k]);
        cr_assert(is_aligned(p[k], 16), "%s(%zu, %zu) = %p: not 16-byte aligned", name, al, size,
                  (void *)p[k]);
        cr_assert(ebb_owns(p[k]), "%s(%zu, %zu) = %p: not owned by ebb", name, al, size, (void *)p[k]);
        size_t u = malloc_usable_size(p[k]);
        cr_assert_geq(u, size, "%s(%zu, %zu): usable size %zu", name, al, size, u);
        words_fill(p[k], size, (unsigned)(al + size + (size_t)k));
      }
      for (int k = 0; k < LIVE; k++) {
        size_t bad = words_check(p[k], size, (unsigned)(al + size + (size_t)k));
        cr_assert_eq(bad, SIZE_MAX, "%s(%zu, %zu): byte %zu of block %d overwritten", name, al, size,
                     bad, k);
      }
      for (int k = 0; k < LIVE; k++) {
        free(p[k]);
        cr_assert_not(OWNS_FREED(p[k]), "%s block %p still owned after free", name, (void *)p[k]);
      }
    }
  }
}

Test(align, posix_memalign_sweep) { sweep(via_posix_memalign, "posix_memalign"); }
Test(align, aligned_alloc_sweep) { sweep(aligned_alloc, "aligned_alloc"); }
Test(align, memalign_sweep) { sweep(memalign, "memalign"); }
Test(align, ebb_posix_memalign_sweep) { sweep(via_ebb_posix_memalign, "ebb_posix_memalign"); }
Test(align, ebb_aligned_alloc_sweep) { sweep(ebb_aligned_alloc, "ebb_aligned_alloc"); }
Test(align, ebb_memalign_sweep) { sweep(ebb_memalign, "ebb_memalign"); }

/* Alignments beyond the 1 MiB of the sweep: as large as ebb's chunks and more. */
Test(align, very_large_alignments) {
  for (size_t al = 2 * MiB; al <= 64 * MiB; al *= 2) {
    static const size_t sizes[] = {1, 100, 65536, 3 << 20};
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
      void *p = aligned_alloc(hide_size(al), hide_size(sizes[i]));
      cr_assert(p && is_aligned(p, al), "aligned_alloc(%zu, %zu) = %p", al, sizes[i], p);
      cr_assert(ebb_owns(p));
      cr_assert_geq(malloc_usable_size(p), sizes[i]);
      memset(p, 0x5c, sizes[i]);
      free(p);
    }
  }
}

static int maps_lines(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  cr_assert_not_null(f);
  int n = 0;
  for (int ch; (ch = fgetc(f)) != EOF;) n += ch == '\n';
  fclose(f);
  return n;
}

/* Small blocks aligned beyond 64 KiB share chunks, as other blocks do (found by
 * a probe: each had a mapping of its own, 65,530 live ones reached the kernel's
 * vm.max_map_count, and then pthread_create failed). */
Test(align, small_blocks_at_large_alignments_share_mappings) {
  enum { N = 4000 };
  static void *p[N];
  for (size_t al = 128 * KiB; al <= 1 * MiB; al *= 8) {
    int before = maps_lines();
    for (int i = 0; i < N; i++) {
      p[i] = aligned_alloc(hide_size(al), hide_size(100));
      cr_assert(p[i] && is_aligned(p[i], al), "aligned_alloc(%zu, 100) = %p", al, p[i]);
      memset(p[i], 0x3c, 100);
    }
    int grown = maps_lines() - before;
    cr_assert_lt(grown, N / 2, "%d blocks aligned to %zu took %d mappings", N, al, grown);
    for (int i = 0; i < N; i++) free(p[i]);
  }
}

/* Many aligned blocks of mixed alignments and sizes alive together. */
Test(align, mixed_live_blocks) {
  enum { N = 1500 };
  static unsigned char *p[N];
  static size_t sz[N];
  unsigned rnd = 12345;
  for (int i = 0; i < N; i++) {
    rnd = rnd * 1103515245u + 12345u;
    size_t al = (size_t)1 << ((rnd >> 16) % 19); /* 1 .. 256 KiB */
    rnd = rnd * 1103515245u + 12345u;
    sz[i] = ((rnd >> 8) % 4 == 0) ? (rnd >> 12) % 70000 : (rnd >> 12) % 600;
    if (al >= 8 && i % 2) {
      cr_assert_eq(posix_memalign((void **)&p[i], al, sz[i]), 0);
    } else {
      p[i] = memalign(al, sz[i]);
    }
    cr_assert(p[i] && is_aligned(p[i], al) && is_aligned(p[i], 16), "block %d (%zu, %zu) = %p", i, al,
              sz[i], (void *)p[i]);
    words_fill(p[i], sz[i], (unsigned)i);
  }
  for (int i = 0; i < N; i++) {
    size_t bad = words_check(p[i], sz[i], (unsigned)i);
    cr_assert_eq(bad, SIZE_MAX, "block %d (%zu bytes): byte %zu overwritten", i, sz[i], bad);
  }
  for (int i = 0; i < N; i += 2) free(p[i]);
  for (int i = 1; i < N; i += 2) {
    cr_assert_eq(words_check(p[i], sz[i], (unsigned)i), SIZE_MAX);
    free(p[i]);
  }
}

/* realloc of an aligned block keeps its contents (the new block need only be
 * 16-byte aligned). */
Test(align, realloc_aligned_block) {
  for (size_t al = 32; al <= 1 * MiB; al *= 8) {
    unsigned char *p = aligned_alloc(al, 1000);
    cr_assert(p && is_aligned(p, al));
    pattern_fill(p, 1000, 4);
    p = realloc(p, 200000);
    cr_assert(p && is_aligned(p, 16));
    cr_assert_eq(pattern_check(p, 1000, 4), SIZE_MAX, "realloc of a %zu-aligned block lost data", al);
    p = realloc(p, 10);
    cr_assert_eq(pattern_check(p, 10, 4), SIZE_MAX);
    free(p);
  }
}

/* A block stays where it is while a realloc's new size fits and is at least
 * half its usable size (docs/api.md), whatever its alignment: a block aligned
 * beyond 1 MiB has a mapping of its own, and moved into a class block (a copy,
 * and its alignment lost) on every such realloc (found by a probe). */
Test(align, realloc_that_fits_stays_in_place) {
  for (size_t al = 64 * KiB; al <= 64 * MiB; al *= 4) {
    unsigned char *p = aligned_alloc(al, 1 * MiB);
    cr_assert(p && is_aligned(p, al), "aligned_alloc(%zu, 1 MiB)", al);
    size_t usable = malloc_usable_size(p);
    pattern_fill(p, usable, 7);
    cr_assert_eq(realloc(p, usable), p, "realloc(p, its usable size %zu) of a %zu-aligned block moved it", usable, al);
    cr_assert_eq(realloc(p, usable / 2 + 1), p, "realloc to just over half of %zu of a %zu-aligned block moved it",
                 usable, al);
    cr_assert_eq(pattern_check(p, usable / 2 + 1, 7), SIZE_MAX, "a %zu-aligned block's bytes changed in place", al);
    free(p);
  }
}
