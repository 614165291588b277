/* registry.c — owns the address → header radix tree (registry.h).
 * May call: os_map/os_unmap for leaves. Leaves are never freed (1 MiB of
 * address space each, covering 512 GiB, resident only where slots are in use);
 * the root is 2 KiB of static data, the empty leaf 1 MiB of .bss never written. */
#include "registry.h"
#include "os.h"

reg_leaf_t reg_empty_leaf; /* zeroes: every slot empty */
_Atomic uint8_t reg_chunk_map[REG_MAP_ENTRIES]; /* zeroes: no chunk anywhere */
_Atomic(reg_leaf_t *) reg_root[1u << REG_L1_BITS] = {[0 ...(1u << REG_L1_BITS) - 1] = &reg_empty_leaf};

static reg_leaf_t *leaf_for(uintptr_t r) {
  _Atomic(reg_leaf_t *) *root = &reg_root[r >> REG_L2_BITS];
  reg_leaf_t *leaf = atomic_load_explicit(root, memory_order_acquire);
  if (leaf != &reg_empty_leaf) return leaf;
  reg_leaf_t *fresh = os_map(sizeof(reg_leaf_t)); /* zeroes from the kernel: every slot empty */
  if (!fresh) return NULL;
  if (atomic_compare_exchange_strong(root, &leaf, fresh)) return fresh;
  os_unmap(fresh, sizeof(reg_leaf_t)); /* another thread installed one first */
  return leaf;
}

static uintptr_t encode(void *hdr) {
  uintptr_t v = (uintptr_t)hdr;
  ebb_assert(v && (v & 3) != 3);
  return (v & (CHUNK_SIZE - 1)) == 0 ? v + (CHUNK_SIZE - 1) : v;
}

bool registry_set(const void *p, void *hdr) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  if (r >> (REG_L1_BITS + REG_L2_BITS)) return false;
  reg_leaf_t *leaf = leaf_for(r);
  if (!leaf) return false;
  atomic_store_explicit(&leaf->slot[r & ((1u << REG_L2_BITS) - 1)], encode(hdr), memory_order_release);
  /* the map says "chunk" only for a chunk's own region, after its slot does */
  uint8_t is_chunk = (uintptr_t)hdr == ((uintptr_t)p & ~(uintptr_t)(CHUNK_SIZE - 1));
  if (atomic_load_explicit(&reg_chunk_map[r], memory_order_relaxed) != is_chunk)
    atomic_store_explicit(&reg_chunk_map[r], is_chunk, memory_order_release);
  return true;
}

bool registry_reserve(const void *p) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  return !(r >> (REG_L1_BITS + REG_L2_BITS)) && leaf_for(r) != NULL;
}

void registry_clear(const void *p) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  if (r >> (REG_L1_BITS + REG_L2_BITS)) return;
  if (atomic_load_explicit(&reg_chunk_map[r], memory_order_relaxed)) /* before the slot */
    atomic_store_explicit(&reg_chunk_map[r], 0, memory_order_release);
  reg_leaf_t *leaf = atomic_load_explicit(&reg_root[r >> REG_L2_BITS], memory_order_acquire);
  if (leaf != &reg_empty_leaf)
    atomic_store_explicit(&leaf->slot[r & ((1u << REG_L2_BITS) - 1)], 0, memory_order_release);
}
