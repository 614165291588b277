/* registry.h — owns the map from address to ebb's metadata: for every 4 MiB
 * region that holds a chunk or the start of a large block, a pointer to its
 * header (a two-level radix tree, as jemalloc's rtree, with leaves mapped on
 * demand). Lets free() reject any pointer ebb never handed out without ever
 * reading memory that is not ours. Lookups are two loads, no lock. */
#ifndef EBB_REGISTRY_H
#define EBB_REGISTRY_H
#include "common.h"

#define REG_ADDR_BITS 47
#define REG_L2_BITS 13
#define REG_L1_BITS (REG_ADDR_BITS - CHUNK_SHIFT - REG_L2_BITS)

typedef struct {
  _Atomic(void *) slot[1u << REG_L2_BITS];
} reg_leaf_t;
/* An empty slot holds REG_NONE, never NULL: a chunk's address is even and a
 * large block's value odd past 1, so one compare of a slot with p's chunk
 * address tells "a chunk of ours" even for p in the first region (address 0).
 * Root entries with no leaf point at a static leaf of REG_NONE slots, so a
 * lookup needs no test for a missing leaf. */
#define REG_NONE ((void *)1)
extern _Atomic(reg_leaf_t *) reg_root[1u << REG_L1_BITS];
extern reg_leaf_t reg_empty_leaf;

/* The header registered for p's region, or NULL. Never faults. An address
 * beyond the 47-bit user space aliases a lower region (the index is masked, not
 * range-checked, to save the fast path a branch): callers only trust a header
 * that names p's own chunk, or a large block whose user pointer is p. */
EBB_INLINE void *registry_raw(const void *p) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  reg_leaf_t *leaf =
      atomic_load_explicit(&reg_root[(r >> REG_L2_BITS) & ((1u << REG_L1_BITS) - 1)], memory_order_acquire);
  return atomic_load_explicit(&leaf->slot[r & ((1u << REG_L2_BITS) - 1)], memory_order_acquire);
}
/* The same, NULL when nothing is registered. */
EBB_INLINE void *registry_get(const void *p) {
  void *h = registry_raw(p);
  return h == REG_NONE ? NULL : h;
}
/* Registers hdr for region(p); false when out of memory or address range. */
bool registry_set(const void *p, void *hdr);
void registry_clear(const void *p);
#endif
