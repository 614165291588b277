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
