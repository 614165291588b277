/* The address registry: what is registered is found from any address in its
 * region, nothing else is, and lookups of wild addresses never fault. */
#include <criterion/criterion.h>
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
