/* sizeclass.h — owns the mapping from request sizes to size classes, and each
 * class's page geometry. Pure: no state beyond a table filled once at init.
 * Classes: multiples of 16 up to 128 (the 16-byte alignment allows no finer
 * step), then 8 classes per power of two (jemalloc's spacing) up to 2 MiB, so
 * the waste is at most max(15 bytes, 12.5%) of the request. */
#ifndef EBB_SIZECLASS_H
#define EBB_SIZECLASS_H
#include "common.h"

#define NCLASSES 120
#define CLASS_MAX_SIZE ((size_t)2 << 20) /* largest block served from a chunk */

typedef struct {
  uint32_t size;      /* block size */
  uint32_t units;     /* units per page (span length) */
  uint32_t count;     /* blocks per page */
  uint32_t sub_shift; /* log2 of the purge granule inside a page (>= 12, <= 64 granules) */
  uint64_t magic;     /* UINT64_MAX / size + 1: divisibility test and division by multiply */
} class_info_t;

extern class_info_t class_info[NCLASSES];
extern uint8_t class_small[1024 / 16 + 1]; /* class of sizes up to 1 KiB, by (size + 15) / 16 */
void sizeclass_init(void);

/* size <= CLASS_MAX_SIZE */
EBB_INLINE unsigned size_class(size_t size) {
  if (likely(size <= 1024)) return class_small[(size + 15) >> 4];
  unsigned k = 63u - (unsigned)__builtin_clzl(size - 1);
  return 8 + (k - 7) * 8 + (unsigned)(((size - 1) >> (k - 3)) & 7);
}

/* The size of class c, computed (class_info holds the same value). */
EBB_INLINE size_t class_size_of(unsigned c) {
  if (c < 8) return (size_t)(c + 1) * 16;
  unsigned k = 7 + (c - 8) / 8, j = (c - 8) % 8;
  return ((size_t)1 << k) + (size_t)(j + 1) * ((size_t)1 << (k - 3));
}

/* Division and divisibility of an in-page offset (< 2^32) by a class size, with
 * one multiply (Lemire, Kaser & Kurz, "Faster remainder by direct computation"). */
EBB_INLINE bool offset_is_multiple(uint32_t off, uint64_t magic) { return (uint64_t)off * magic < magic; }
EBB_INLINE uint32_t offset_div(uint32_t off, uint64_t magic) {
  return (uint32_t)(((unsigned __int128)magic * off) >> 64);
}
#endif
