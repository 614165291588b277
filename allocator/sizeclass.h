/* sizeclass.h — owns the mapping from request sizes to size classes, and each
 * class's page geometry. Pure: no state beyond a table filled once at init.
 * Classes: multiples of 16 up to 128 (the 16-byte alignment allows no finer
 * step), then 8 classes per power of two up to 4 KiB (mimalloc's spacing), so
 * the waste there is at most max(15 bytes, 12.5%) of the request, then 4 per
 * power of two up to 2 MiB (jemalloc's spacing), at most 25%.
 *   Why coarser above 4 KiB: a program's blocks of 4 KiB-2 MiB are few, so
 * with 8 classes per doubling each class held a few of them on a page of its
 * own, and a request rarely drew the classes the one before it had drawn.
 * bench/churn (24 blocks of 4-64 KiB a request, 33 classes then, 17 now):
 * 72.0 -> 70.0 us a request at gap 0, RSS 7.2 -> 5.9 MiB, and at gap 20 0.86
 * -> 0.23 faults a request, since fewer pages sit idle long enough to be
 * purged (the Intel Xeon VM, builds interleaved; docs/benchmarks.md, "Coarser
 * classes above 4 KiB"). */
#ifndef EBB_SIZECLASS_H
#define EBB_SIZECLASS_H
#include "common.h"

#define CLASS_MAX_SHIFT 21 /* 2 MiB: the largest block served from a chunk */
#define CLASS_MAX_SIZE ((size_t)1 << CLASS_MAX_SHIFT)
#define CLASS_FINE_SHIFT 12 /* 8 classes a doubling up to 4 KiB, 4 above */
#define CLASS_FINE_MAX ((size_t)1 << CLASS_FINE_SHIFT)
#define NCLASSES_FINE (8 + (CLASS_FINE_SHIFT - 7) * 8)                     /* 48: up to CLASS_FINE_MAX */
#define NCLASSES (NCLASSES_FINE + (CLASS_MAX_SHIFT - CLASS_FINE_SHIFT) * 4) /* 84 */

typedef struct {
  uint32_t size;      /* block size */
  uint32_t units;     /* units per page (span length) */
  uint32_t count;     /* blocks per page */
  uint32_t sub_shift; /* log2 of the purge granule inside a page (>= 12, <= 64 granules) */
  uint64_t magic;     /* floor(2^64 / size) + 1: division, divisibility and block tests by multiply */
} class_info_t;

extern class_info_t class_info[NCLASSES];
extern uint8_t class_small[1024 / 16 + 1]; /* class of sizes up to 1 KiB, by (size + 15) / 16 */
void sizeclass_init(void);
/* A class whose page is one block over several units (every class from 192
 * KiB, and 112 and 128 KiB, and so those of blocks aligned beyond a unit): its
 * pages skip the queues (arena.c, page_new_one). The 40-64 KiB classes (one
 * block to a single unit) were one-block classes too for a day (2026-12-07):
 * bench/loop's batch of 16 blocks of 64 KiB went from 80 to 65 ns a pair, but
 * mimalloc-bench's mstress (2 threads, 25 generations of threads, 1 % of its
 * blocks 50 KiB) peaked at 13.4 MB instead of 12.1 (medians of 10; equal with
 * one generation, +1.6 MB with 5) and mapped a chunk more, which took ebb's
 * RSS geomean there over glibc's (1.007). */
EBB_INLINE bool class_is_one_block(unsigned cls) {
  return class_info[cls].count == 1 && class_info[cls].units > 1;
}

/* Source slots: what an arena's src[] is indexed by (arena.h). A size up to
 * 1 KiB has its own slot, (size + 15) / 16, so malloc's fast path indexes
 * src[] with the size itself, with no class table load on its way to the
 * list head (as mimalloc's pages_free_direct); a class above 256 B owns 2 or
 * 4 such slots, always equal. Each class above 1 KiB has one slot after
 * them. class_src_lo/class_src_n: a class's first slot and how many. */
#define SRC_SMALL (1024 / 16 + 1)
#define NCLASSES_SMALL 32 /* classes up to 1 KiB */
#define NSRC (SRC_SMALL + NCLASSES - NCLASSES_SMALL)
extern uint8_t class_src_lo[NCLASSES], class_src_n[NCLASSES];
/* The class whose slot s is. */
EBB_INLINE unsigned src_class(unsigned s) { return s < SRC_SMALL ? class_small[s] : s - SRC_SMALL + NCLASSES_SMALL; }

/* 1024 < size <= CLASS_MAX_SIZE: the class by arithmetic, no table (the
 * arithmetic holds from 129 B: sizeclass.c fills class_small with it). k is
 * the power of two below size - 1: 8 classes a doubling below
 * CLASS_FINE_SHIFT, 4 from there. */
EBB_INLINE unsigned size_class_above_1k(size_t size) {
  unsigned k = 63u - (unsigned)__builtin_clzl(size - 1);
  if (k < CLASS_FINE_SHIFT) return 8 + (k - 7) * 8 + (unsigned)(((size - 1) >> (k - 3)) & 7);
  return NCLASSES_FINE + (k - CLASS_FINE_SHIFT) * 4 + (unsigned)(((size - 1) >> (k - 2)) & 3);
}

/* size <= CLASS_MAX_SIZE */
EBB_INLINE unsigned size_class(size_t size) {
  if (likely(size <= 1024)) return class_small[(size + 15) >> 4];
  return size_class_above_1k(size);
}

/* The size of class c, computed (class_info holds the same value). */
EBB_INLINE size_t class_size_of(unsigned c) {
  if (c < 8) return (size_t)(c + 1) * 16;
  if (c < NCLASSES_FINE) {
    unsigned k = 7 + (c - 8) / 8, j = (c - 8) % 8;
    return ((size_t)1 << k) + (size_t)(j + 1) * ((size_t)1 << (k - 3));
  }
  unsigned k = CLASS_FINE_SHIFT + (c - NCLASSES_FINE) / 4, j = (c - NCLASSES_FINE) % 4;
  return ((size_t)1 << k) + (size_t)(j + 1) * ((size_t)1 << (k - 2));
}

/* Division of an in-page offset (< 2^32) by a class size d, and the test "a
 * multiple of d below a block count", each with one multiply (Lemire, Kaser &
 * Kurz, "Faster remainder by direct computation"). magic is M = floor(2^64 / d) + 1 (one more than Lemire's
 * UINT64_MAX / d + 1 when d is a power of two), so that M * d = 2^64 + e with
 * 1 <= e <= d: then off * M (mod 2^64) is q * e for off = q * d, and at least
 * M > 2^32 for any other off below 2^32 (d <= 2^21 keeps it from wrapping).
 * One compare with carved * e therefore asks both "a multiple of d" and
 * "below carved blocks" (offset_block_limit, page_is_block). */
/* The limit off * magic is compared with for "off = q * d with q < blocks"
 * (blocks 1: e itself, what each block adds). */
EBB_INLINE uint32_t offset_block_limit(uint32_t blocks, uint64_t magic, uint32_t d) {
  return blocks * (uint32_t)(magic * d);
}
EBB_INLINE uint32_t offset_div(uint32_t off, uint64_t magic) {
  return (uint32_t)(((unsigned __int128)magic * off) >> 64);
}
#endif
