/* The address registry: what is registered is found from any address in its
 * region, nothing else is, and lookups of wild addresses never fault. */
#include <criterion/criterion.h>
#include "ebb.h"
#include "registry.h"

Test(registry, set_get_clear) {
  static int hdr;
  char *base = (char *)((uintptr_t)0x7f1234000000 & ~(CHUNK_SIZE - 1));
  cr_assert_null(registry_get(base));
  cr_assert(registry_set(base + 100, &hdr));
  cr_assert_eq(registry_get(base), &hdr);
  cr_assert_eq(registry_get(base + CHUNK_SIZE - 1), &hdr);
  cr_assert_null(registry_get(base + CHUNK_SIZE));
  cr_assert_null(registry_get(base - 1));
  registry_clear(base);
  cr_assert_null(registry_get(base + 5));
}

Test(registry, wild_addresses_are_not_ours) {
  const void *wild[] = {
      NULL, (void *)1, (void *)0xffff800000000000ull, (void *)UINTPTR_MAX, (void *)((uintptr_t)1 << 47),
      &wild};
  for (size_t i = 0; i < sizeof wild / sizeof *wild; i++) cr_assert_null(registry_get(wild[i]));
  cr_assert_not(registry_set((void *)((uintptr_t)1 << 47), wild));
}

/* The index is masked, so an address past the 47-bit user space may find the
 * header of the region it aliases; what the allocator decides must not change. */
Test(registry, aliased_addresses_are_still_not_ours) {
  void *p = ebb_malloc(100);
  void *h = registry_get(p);
  cr_assert_not_null(h);
  void *alias = (void *)((uintptr_t)p | ((uintptr_t)1 << 47));
  void *big = ebb_malloc(8 << 20);
  void *big_alias = (void *)((uintptr_t)big | ((uintptr_t)1 << 47));
  cr_assert(ebb_owns(p) && ebb_owns(big));
  cr_assert_not(ebb_owns(alias), "a wild address aliasing a chunk is not a block");
  cr_assert_not(ebb_owns(big_alias), "a wild address aliasing a large block is not a block");
  ebb_free(big);
  ebb_free(p);
}

/* A chunk's slot holds the key free() computes from any address inside it
 * (its last byte's address); an empty slot is 0, which no key equals, NULL's
 * included. */
static uintptr_t chunk_key(const void *p) { return (uintptr_t)p | (CHUNK_SIZE - 1); }

Test(registry, chunk_keys_and_empty_slots) {
  char *base = (char *)((uintptr_t)0x7e5600000000 & ~(CHUNK_SIZE - 1));
  cr_assert_eq(registry_raw(base), 0, "an unregistered region reads 0");
  cr_assert_neq(registry_raw(NULL), chunk_key(NULL), "NULL never matches");
  cr_assert(registry_set(base, base));
  cr_assert_eq(registry_raw(base + 12345), chunk_key(base + 12345));
  cr_assert_eq(registry_raw(base + CHUNK_SIZE - 1), chunk_key(base));
  cr_assert_eq(registry_get(base + 7), base, "decoded back to the chunk");
  cr_assert_neq(registry_raw(base + CHUNK_SIZE), chunk_key(base + CHUNK_SIZE), "the next region is not");
  registry_clear(base);
  cr_assert_eq(registry_raw(base), 0);
}

/* The empty leaf is never written: it is .bss, and a lookup anywhere in an
 * unused 512 GiB reads zeroes there. */
Test(registry, empty_leaf_stays_zero) {
  for (size_t i = 0; i < sizeof reg_empty_leaf.slot / sizeof reg_empty_leaf.slot[0]; i += 4093)
    cr_assert_eq(atomic_load(&reg_empty_leaf.slot[i]), 0);
  cr_assert_eq(registry_raw((void *)((uintptr_t)0x100000000000ull)), 0);
}

/* The chunk map (free()'s one-load test): true anywhere in a registered
 * chunk's own region and nowhere else, not for a large block's region, not for
 * wild addresses past the user space (no aliasing: the index is range-checked),
 * and false again before the region's slot is cleared. */
Test(registry, chunk_map_follows_chunks_only) {
  char *base = (char *)((uintptr_t)0x7d4500000000 & ~(CHUNK_SIZE - 1));
  static long large_hdr[4];
  cr_assert_not(registry_in_chunk(base));
  cr_assert(registry_set(base, base));
  cr_assert(registry_in_chunk(base) && registry_in_chunk(base + CHUNK_SIZE - 1) && registry_in_chunk(base + 4321));
  cr_assert_not(registry_in_chunk(base + CHUNK_SIZE), "the next region is not a chunk");
  cr_assert_not(registry_in_chunk(base - 1), "nor the one before");
  cr_assert_not(registry_in_chunk((void *)((uintptr_t)base | ((uintptr_t)1 << 47))), "an alias past 47 bits");
  cr_assert_not(registry_in_chunk((void *)((uintptr_t)base | ((uintptr_t)1 << 63))));
  cr_assert(registry_set(base, (char *)large_hdr + 1), "the region now starts a large block");
  cr_assert_not(registry_in_chunk(base + 8), "a large block's region is not a chunk");
  cr_assert(registry_set(base, base));
  cr_assert(registry_set(base + CHUNK_SIZE, base), "a header that is not the region's own base");
  cr_assert_not(registry_in_chunk(base + CHUNK_SIZE));
  registry_clear(base + CHUNK_SIZE);
  registry_clear(base);
  cr_assert_not(registry_in_chunk(base + 8));
  cr_assert_null(registry_get(base + 8));
  cr_assert_not(registry_in_chunk(NULL));
  cr_assert_not(registry_in_chunk((void *)UINTPTR_MAX));
}

/* Real chunks: a small block's address is in one, a large block's is not. */
Test(registry, chunk_map_agrees_with_the_allocator) {
  void *p = ebb_malloc(64), *big = ebb_malloc(8 << 20);
  cr_assert(registry_in_chunk(p));
  cr_assert_not(registry_in_chunk(big));
  cr_assert_eq(registry_get(p), (void *)((uintptr_t)p & ~(CHUNK_SIZE - 1)));
  ebb_free(big);
  ebb_free(p);
}
