/* registry.h — owns the map from address to ebb's metadata: for every 4 MiB
 * region that holds a chunk or the start of a large block, a pointer to its
 * header (a two-level radix tree, as jemalloc's rtree, with leaves mapped on
 * demand). Lets free() reject any pointer ebb never handed out without ever
 * reading memory that is not ours. Lookups are two loads, no lock; free()'s
 * fast path asks the chunk map below instead (one load). */
#ifndef EBB_REGISTRY_H
#define EBB_REGISTRY_H
#include "common.h"

#define REG_ADDR_BITS 47
#define REG_L2_BITS 17
#define REG_L1_BITS (REG_ADDR_BITS - CHUNK_SHIFT - REG_L2_BITS)

typedef struct {
  _Atomic(uintptr_t) slot[1u << REG_L2_BITS];
} reg_leaf_t;
/* Slot encoding. An empty slot is 0, so the static empty leaf is zero-filled
 * .bss and a fresh leaf needs no initialising (only the pages of slots in use
 * become resident, and the library carries no 64 KiB table and no thousands of
 * relocations). A chunk c is stored as the address of its last byte,
 * c + CHUNK_SIZE - 1, which is any p inside it with one OR, and which (odd,
 * past 4 MiB) never equals an empty slot, not even for NULL. Any other
 * header (a large block's, tagged odd, or any 4-aligned pointer) is stored as
 * is: its low bits are never all ones.
 * Root entries with no leaf point at the empty leaf, so a lookup needs no test
 * for a missing leaf; with 17-bit leaves the root has 256 entries. */
extern _Atomic(reg_leaf_t *) reg_root[1u << REG_L1_BITS];
extern reg_leaf_t reg_empty_leaf;

/* The chunk map: one byte per 4 MiB region of the 47-bit user space, 1 while
 * the region is a chunk (its registered header is the region's own base), so
 * free()'s fast path asks "is p in a chunk of ours" with one load and no
 * pointer chase (a flat map as mimalloc's segment map; 32 MiB of .bss,
 * resident only where chunks are, about one page per 16 GiB of address space
 * in use). registry_set/registry_clear keep it equal to the tree: it is set
 * after the chunk's slot and cleared before it. */
#define REG_MAP_ENTRIES ((size_t)1 << (REG_ADDR_BITS - CHUNK_SHIFT))
extern _Atomic uint8_t reg_chunk_map[REG_MAP_ENTRIES];

/* Whether p lies in a chunk of ours: one compare rules out addresses past the
 * user space (NULL reads an entry that is never set), one load answers. */
EBB_INLINE bool registry_in_chunk(const void *p) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
#ifdef EBB_TSAN
  return likely(r < REG_MAP_ENTRIES) && atomic_load_explicit(&reg_chunk_map[r], memory_order_acquire) == 1;
#else
  /* A plain read, which GCC folds into the compare (an atomic load it never
   * does: a move more on free's path). On x86-64 and AArch64 every load is
   * single-copy atomic for a byte; the order the acquire gave is the
   * caller's: whoever frees p got it, directly or through other threads,
   * from a malloc after the map said so. */
  return likely(r < REG_MAP_ENTRIES) && *(const uint8_t *)&reg_chunk_map[r] == 1;
#endif
}

/* The raw slot for p's region. Never faults. An address beyond the 47-bit
 * user space aliases a lower region (the index is masked, not range-checked):
 * callers only trust a header that names p's own chunk, or a large block
 * whose user pointer is p. */
EBB_INLINE uintptr_t registry_raw(const void *p) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  reg_leaf_t *leaf =
      atomic_load_explicit(&reg_root[(r >> REG_L2_BITS) & ((1u << REG_L1_BITS) - 1)], memory_order_acquire);
  return atomic_load_explicit(&leaf->slot[r & ((1u << REG_L2_BITS) - 1)], memory_order_acquire);
}
/* The header registered for p's region, or NULL. */
EBB_INLINE void *registry_get(const void *p) {
  uintptr_t v = registry_raw(p);
  if ((v & (CHUNK_SIZE - 1)) == CHUNK_SIZE - 1) return (void *)(v - (CHUNK_SIZE - 1));
  return (void *)v;
}
/* Registers hdr for region(p); false when out of memory or address range. */
bool registry_set(const void *p, void *hdr);
/* Makes sure a later registry_set(p, ...) cannot fail (maps the leaf for p's
 * region if it has none); false when out of memory or address range. */
bool registry_reserve(const void *p);
void registry_clear(const void *p);
#endif
