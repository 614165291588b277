/* sizeclass.c — fills the class table (sizeclass.h). Pure arithmetic. */
#include "sizeclass.h"

class_info_t class_info[NCLASSES];

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
                                   .magic = UINT64_MAX / size + 1};
  }
}
