/* registry.c — owns the address → header radix tree (registry.h).
 * May call: os_map/os_unmap for leaves. Leaves are never freed (64 KiB each,
 * covering 32 GiB of address space); the root and the empty leaf are static
 * data (96 KiB). */
#include "registry.h"
#include "os.h"

reg_leaf_t reg_empty_leaf = {.slot = {[0 ...(1u << REG_L2_BITS) - 1] = REG_NONE}};
_Atomic(reg_leaf_t *) reg_root[1u << REG_L1_BITS] = {[0 ...(1u << REG_L1_BITS) - 1] = &reg_empty_leaf};

static reg_leaf_t *leaf_for(uintptr_t r) {
  _Atomic(reg_leaf_t *) *root = &reg_root[r >> REG_L2_BITS];
  reg_leaf_t *leaf = atomic_load_explicit(root, memory_order_acquire);
  if (leaf != &reg_empty_leaf) return leaf;
  reg_leaf_t *fresh = os_map(sizeof(reg_leaf_t));
  if (!fresh) return NULL;
  for (unsigned i = 0; i < (1u << REG_L2_BITS); i++) atomic_init(&fresh->slot[i], REG_NONE);
  if (atomic_compare_exchange_strong(root, &leaf, fresh)) return fresh;
  os_unmap(fresh, sizeof(reg_leaf_t)); /* another thread installed one first */
  return leaf;
}

bool registry_set(const void *p, void *hdr) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  if (r >> (REG_L1_BITS + REG_L2_BITS)) return false;
  reg_leaf_t *leaf = leaf_for(r);
  if (!leaf) return false;
  atomic_store_explicit(&leaf->slot[r & ((1u << REG_L2_BITS) - 1)], hdr, memory_order_release);
  return true;
}

void registry_clear(const void *p) {
  uintptr_t r = (uintptr_t)p >> CHUNK_SHIFT;
  reg_leaf_t *leaf = atomic_load_explicit(&reg_root[r >> REG_L2_BITS], memory_order_acquire);
  if (leaf != &reg_empty_leaf)
    atomic_store_explicit(&leaf->slot[r & ((1u << REG_L2_BITS) - 1)], REG_NONE, memory_order_release);
}
