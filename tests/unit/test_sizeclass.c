/* Size classes: every size maps to a class that fits it, the waste bound holds,
 * the page geometry of every class is sound (its block count fits the count
 * a page's remote list carries), and the multiply-based division
 * agrees with real division. */
#include <criterion/criterion.h>
#include "page.h"
#include "sizeclass.h"

static void setup(void) { sizeclass_init(); }
TestSuite(sizeclass, .init = setup);

Test(sizeclass, every_size_fits_its_class_within_the_waste_bound) {
  for (size_t size = 0; size <= CLASS_MAX_SIZE; size++) {
    unsigned c = size_class(size);
    cr_assert_lt(c, NCLASSES, "size %zu", size);
    size_t cs = class_info[c].size;
    cr_assert_geq(cs, size, "size %zu class %u (%zu)", size, c, cs);
    size_t waste = cs - (size ? size : 1);
    /* 16-byte alignment forbids finer steps below 128 bytes; 4 classes a
     * doubling above 4 KiB (sizeclass.h) allow a quarter */
    if (size <= CLASS_FINE_MAX)
      cr_assert(waste <= 15 || waste * 8 <= size, "size %zu wastes %zu", size, waste);
    else
      cr_assert(waste * 4 <= size, "size %zu wastes %zu", size, waste);
    if (c > 0) cr_assert_lt(class_info[c - 1].size, size ? size : 1, "size %zu: a smaller class fits", size);
  }
}

Test(sizeclass, classes_are_increasing_aligned_and_end_at_the_maximum) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    cr_assert_eq(class_info[c].size % 16, 0);
    cr_assert_eq(class_info[c].size, class_size_of(c));
    if (c) cr_assert_gt(class_info[c].size, class_info[c - 1].size);
  }
  cr_assert_eq(class_info[NCLASSES - 1].size, CLASS_MAX_SIZE);
  cr_assert_eq(class_info[NCLASSES_FINE - 1].size, CLASS_FINE_MAX);
  for (unsigned c = NCLASSES_FINE; c < NCLASSES; c++) { /* 4 a doubling: 5/4, 6/4, 7/4, 8/4 of a power of two */
    unsigned i = (c - NCLASSES_FINE) % 4;
    size_t pow2 = class_info[c - i - 1].size;
    cr_assert_eq(pow2 & (pow2 - 1), 0, "class %u", c);
    cr_assert_eq(class_info[c].size, pow2 + (i + 1) * (pow2 / 4), "class %u", c);
  }
}

Test(sizeclass, page_geometry_wastes_at_most_an_eighth) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    const class_info_t *ci = &class_info[c];
    size_t span = ci->units * UNIT_SIZE;
    cr_assert(ci->units >= 1 && ci->units <= 32);
    cr_assert_geq(ci->count, 1);
    cr_assert_leq(ci->count, XFREE_COUNT_MAX, "class %u: %u blocks overflow the remote list's count", c, ci->count);
    cr_assert_leq((size_t)ci->count * ci->size, span);
    cr_assert_leq((span - (size_t)ci->count * ci->size) * 8, span, "class %u", c);
    cr_assert_leq(span >> ci->sub_shift, 64);
    cr_assert_geq(ci->sub_shift, 12);
  }
}

Test(sizeclass, multiply_division_matches_real_division) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    const class_info_t *ci = &class_info[c];
    uint32_t span = ci->units * (uint32_t)UNIT_SIZE;
    for (uint32_t off = 0; off < span; off++) { /* exhaustive over the whole span */
      cr_assert_eq((uint64_t)off * ci->magic < offset_block_limit(ci->count, ci->magic, ci->size),
                   off % ci->size == 0 && off / ci->size < ci->count, "class %u off %u", c, off);
      if (off % ci->size == 0) cr_assert_eq(offset_div(off, ci->magic), off / ci->size);
    }
  }
}

/* The one compare of page_is_block: off * magic < blocks * e exactly when off
 * is q * size with q < blocks, for every offset of the span and far past it
 * (a stale or wild offset below 2^32), for any number of blocks carved. */
Test(sizeclass, block_limit_is_exactly_multiple_and_below) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    const class_info_t *ci = &class_info[c];
    uint32_t span = ci->units * (uint32_t)UNIT_SIZE, d = ci->size;
    uint32_t e = (uint32_t)(ci->magic * d);
    cr_assert(e >= 1 && e <= d, "class %u: e %u", c, e);
    uint32_t carved[] = {0, 1, ci->count / 2 + 1, ci->count};
    for (unsigned k = 0; k < 4; k++) {
      uint32_t lim = offset_block_limit(carved[k], ci->magic, d);
      for (uint32_t off = 0; off < span; off += (k == 2 ? 1 : 7)) /* exhaustive for one count */
        cr_assert_eq((uint64_t)off * ci->magic < lim, off % d == 0 && off / d < carved[k], "class %u off %u", c, off);
      uint32_t x = 0x9e3779b9u * (c + 1);
      for (int i = 0; i < 20000; i++) { /* offsets past the span, up to 2^32 */
        x = x * 1664525u + 1013904223u;
        uint32_t off = i & 1 ? x : x - x % d;
        cr_assert_eq((uint64_t)off * ci->magic < lim, off % d == 0 && off / d < carved[k], "class %u off %u", c, off);
      }
    }
  }
}

/* Source slots: every size up to 1 KiB has the slot (size + 15) / 16, which
 * belongs to its class; each class's slots are consecutive, 1 to 4 of them,
 * and every slot belongs to exactly one class. */
Test(sizeclass, source_slots_cover_sizes_and_classes) {
  unsigned owner[NSRC];
  for (unsigned s = 0; s < NSRC; s++) owner[s] = NCLASSES;
  for (unsigned c = 0; c < NCLASSES; c++) {
    cr_assert(class_src_n[c] >= 1 && class_src_n[c] <= 4, "class %u has %u slots", c, class_src_n[c]);
    for (unsigned i = 0; i < class_src_n[c]; i++) {
      unsigned s = class_src_lo[c] + i;
      cr_assert_lt(s, NSRC);
      cr_assert_eq(owner[s], NCLASSES, "slot %u claimed twice", s);
      owner[s] = c;
      cr_assert_eq(src_class(s), c, "slot %u", s);
    }
  }
  for (unsigned s = 0; s < NSRC; s++) cr_assert_neq(owner[s], NCLASSES, "slot %u belongs to no class", s);
  for (size_t size = 0; size <= 1024; size++) cr_assert_eq(src_class((unsigned)(size + 15) >> 4), size_class(size), "size %zu", size);
  cr_assert_eq(class_info[NCLASSES_SMALL - 1].size, 1024);
}
