/* sizeclass.c — fills the class table (sizeclass.h). Pure arithmetic. */
#include "sizeclass.h"

class_info_t class_info[NCLASSES];
uint8_t class_small[1024 / 16 + 1];
uint8_t class_src_lo[NCLASSES], class_src_n[NCLASSES];

/* The arithmetic behind class_small: multiples of 16 up to 128, then the
 * same as above 1 KiB. */
static unsigned size_class_computed(size_t size) {
  if (size <= 128) return size ? (unsigned)((size - 1) >> 4) : 0;
  return size_class_above_1k(size);
}

/* The fewest units (1..32) whose span wastes at most 1/8 of itself on the tail
 * that no whole block fits into. */
static unsigned units_for(size_t size) {
  for (unsigned n = 1; n <= 32; n++) {
    size_t span = n * UNIT_SIZE;
    if (span >= size && (span % size) * 8 <= span) return n;
  }
  return 32;
}

void sizeclass_init(void) {
  for (size_t i = 0; i <= 1024 / 16; i++) class_small[i] = (uint8_t)size_class_computed(i * 16);
  _Static_assert(NSRC <= 256, "slots fit a byte");
  for (unsigned c = 0; c < NCLASSES_SMALL; c++) class_src_n[c] = 0;
  for (unsigned s = SRC_SMALL; s-- > 0;) { /* downwards: lo ends at a class's first slot */
    class_src_lo[class_small[s]] = (uint8_t)s;
    class_src_n[class_small[s]]++;
  }
  for (unsigned c = NCLASSES_SMALL; c < NCLASSES; c++) {
    class_src_lo[c] = (uint8_t)(SRC_SMALL + c - NCLASSES_SMALL);
    class_src_n[c] = 1;
  }
  for (unsigned c = 0; c < NCLASSES; c++) {
    size_t size = class_size_of(c);
    unsigned units = units_for(size);
    size_t span = units * UNIT_SIZE;
    unsigned shift = 12;
    while ((span >> shift) > 64) shift++;
    class_info[c] = (class_info_t){.size = (uint32_t)size,
                                   .units = units,
                                   .count = (uint32_t)(span / size),
                                   .sub_shift = shift,
                                   .magic = UINT64_MAX / size + 1 + ((size & (size - 1)) == 0)};
  }
}
