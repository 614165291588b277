/* Size classes: every size maps to a class that fits it, the waste bound holds,
 * the page geometry of every class is sound, and the multiply-based division
 * agrees with real division. */
#include <criterion/criterion.h>
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
    /* 16-byte alignment forbids finer steps below 128 bytes */
    cr_assert(waste <= 15 || waste * 8 <= size, "size %zu wastes %zu", size, waste);
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
}

Test(sizeclass, page_geometry_wastes_at_most_an_eighth) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    const class_info_t *ci = &class_info[c];
    size_t span = ci->units * UNIT_SIZE;
    cr_assert(ci->units >= 1 && ci->units <= 32);
    cr_assert_geq(ci->count, 1);
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
      cr_assert_eq(offset_is_multiple(off, ci->magic), off % ci->size == 0, "class %u off %u", c, off);
      if (off % ci->size == 0) cr_assert_eq(offset_div(off, ci->magic), off / ci->size);
    }
  }
}
