/* fuzz_model.h — the shadow model of test_fuzz.c: what the fuzzer knows of every
 * live block (address, requested and usable size, promised alignment, pattern
 * seed, first-class arena), the pattern and zero checks, and the overlap check
 * over a sorted snapshot. The model lives in static arrays, never in ebb's
 * memory, so a corrupt heap cannot corrupt the model that is meant to catch it;
 * nothing here allocates (the sort is a heapsort, as glibc's qsort may malloc). */
#ifndef FUZZ_MODEL_H
#define FUZZ_MODEL_H

#include "stress_util.h"

#define FZ_SMALL_MAX ((size_t)2 << 20)    /* ebb's CLASS_MAX_SIZE: larger blocks are own mappings */
#define FZ_CHUNK_ALIGN ((size_t)64 << 10) /* larger alignments are own mappings too (docs/api.md) */

/* What produced a block (its last allocation or reallocation), for messages. */
enum {
  FZ_MALLOC,
  FZ_CALLOC,
  FZ_REALLOC_NULL,
  FZ_REALLOCARRAY_NULL,
  FZ_ALIGNED_ALLOC,
  FZ_POSIX_MEMALIGN,
  FZ_MEMALIGN,
  FZ_VALLOC,
  FZ_PVALLOC,
  FZ_ARENA_MALLOC,
  FZ_ARENA_CALLOC,
  FZ_ARENA_REALLOC_NULL,
  FZ_ARENA_ALIGNED_ALLOC,
  FZ_REALLOC,
  FZ_REALLOCARRAY,
  FZ_ARENA_REALLOC,
  FZ_NHOW
};
static const char *const fz_how_name[FZ_NHOW] = {"ebb_malloc",
                                                 "ebb_calloc",
                                                 "ebb_realloc(NULL)",
                                                 "ebb_reallocarray(NULL)",
                                                 "ebb_aligned_alloc",
                                                 "ebb_posix_memalign",
                                                 "ebb_memalign",
                                                 "ebb_valloc",
                                                 "ebb_pvalloc",
                                                 "ebb_arena_malloc",
                                                 "ebb_arena_calloc",
                                                 "ebb_arena_realloc(NULL)",
                                                 "ebb_arena_aligned_alloc",
                                                 "ebb_realloc",
                                                 "ebb_reallocarray",
                                                 "ebb_arena_realloc"};

typedef struct {
  unsigned char *p; /* NULL: the slot is empty */
  size_t size;      /* bytes requested (pvalloc: rounded up to pages) */
  size_t usable;    /* ebb_malloc_usable_size when it was (re)allocated; must not change */
  size_t align;     /* alignment promised (16 at least) */
  uint64_t seed;    /* keys the fill pattern; unique per allocation, kept by realloc */
  int32_t arena;    /* index of the first-class arena record it belongs to, or -1 */
  uint32_t gen;     /* that record's generation when the block joined it */
  uint16_t origin;  /* thread that allocated it */
  uint16_t how;     /* FZ_* of its last (re)allocation */
} fz_blk_t;

/* Large blocks (own mappings) by the documented rule; realloc resizes them in
 * place or by mremap and so keeps their arena, where a small block that must
 * move is copied into the arena realloc was asked for. */
static inline int fz_is_large(size_t size, size_t align) {
  return size > FZ_SMALL_MAX || align > FZ_CHUNK_ALIGN;
}

/* Pattern positions, as pat_walk's but sparser far out: every byte of the
 * first 64 KiB, 8 bytes of every 4 KiB page up to 1 MiB, of every 64 KiB
 * beyond (large blocks are whole mappings: a lost or misplaced page run still
 * shows, without a page fault for every page of a 64 MiB block), and the last
 * 8 bytes. Visits the positions of a block of `size` bytes below `len`. */
#define FZ_SPARSE_FROM ((size_t)1 << 20)
#define FZ_SPARSE_STRIDE ((size_t)64 << 10)
static inline size_t fz_walk(void *block, size_t len, size_t size, uint64_t key, int check) {
  unsigned char *p = block;
  size_t r = pat_range(p, 0, len < PAT_DENSE ? len : PAT_DENSE, key, check);
  if (r != PAT_OK || size <= PAT_DENSE) return r;
  for (size_t off = PAT_DENSE; off < len; off += off < FZ_SPARSE_FROM ? PAT_STRIDE : FZ_SPARSE_STRIDE)
    if ((r = pat_range(p, off, off + 8 < len ? off + 8 : len, key, check)) != PAT_OK) return r;
  if (len == size) r = pat_range(p, size - 8, size, key, check);
  return r;
}

/* Bytes covered by the pattern: the whole usable size for blocks up to 64 KiB
 * (so even the slack is checked: it must not belong to another block), the
 * sparse positions of fz_walk over the requested size beyond. */
static inline size_t fz_plen(const fz_blk_t *b) { return b->usable <= PAT_DENSE ? b->usable : b->size; }
static inline uint64_t fz_key(const fz_blk_t *b) { return mix64(b->seed); }
static inline void fz_fill(const fz_blk_t *b) { fz_walk(b->p, fz_plen(b), fz_plen(b), fz_key(b), 0); }
static inline size_t fz_pattern_bad(const fz_blk_t *b) {
  return fz_walk(b->p, fz_plen(b), fz_plen(b), fz_key(b), 1);
}

/* First non-zero offset among the positions fz_walk visits, or PAT_OK. */
static inline size_t fz_zero_bad(const unsigned char *p, size_t size) {
  size_t dense = size < PAT_DENSE ? size : PAT_DENSE;
  for (size_t i = 0; i < dense; i++)
    if (p[i]) return i;
  for (size_t off = PAT_DENSE; off < size; off += off < FZ_SPARSE_FROM ? PAT_STRIDE : FZ_SPARSE_STRIDE)
    for (size_t i = off; i < off + 8 && i < size; i++)
      if (p[i]) return i;
  for (size_t i = size > 8 ? size - 8 : 0; i < size; i++)
    if (p[i]) return i;
  return PAT_OK;
}

static inline int fz_desc(char *buf, size_t n, const fz_blk_t *b) {
  return snprintf(buf, n,
                  "block %p (size %zu, usable %zu, align %zu, seed %#llx, from thread %u by %s, arena %d)",
                  (void *)b->p, b->size, b->usable, b->align, (unsigned long long)b->seed, b->origin,
                  b->how < FZ_NHOW ? fz_how_name[b->how] : "?", b->arena);
}

/* ---------------------------------------------------------------- overlap check */

typedef struct {
  uintptr_t lo, hi; /* [p, p + usable) */
  const fz_blk_t *b;
} fz_span_t;

static inline void fz_sift(fz_span_t *a, size_t i, size_t n) {
  for (;;) {
    size_t m = i, l = 2 * i + 1, r = l + 1;
    if (l < n && a[l].lo > a[m].lo) m = l;
    if (r < n && a[r].lo > a[m].lo) m = r;
    if (m == i) return;
    fz_span_t t = a[i];
    a[i] = a[m];
    a[m] = t;
    i = m;
  }
}

static inline void fz_sort(fz_span_t *a, size_t n) {
  for (size_t i = n / 2; i-- > 0;) fz_sift(a, i, n);
  for (size_t end = n; end-- > 1;) {
    fz_span_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    fz_sift(a, 0, end);
  }
}

/* Sorts the spans and returns the index i of the first pair (i, i + 1) that
 * overlaps, or -1. */
static inline long fz_first_overlap(fz_span_t *a, size_t n) {
  fz_sort(a, n);
  for (size_t i = 0; i + 1 < n; i++)
    if (a[i].hi > a[i + 1].lo) return (long)i;
  return -1;
}

#endif
