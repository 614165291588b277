/* huge.c — owns large blocks (huge.h).
 * May call: os_map_aligned, os_unmap, os_resize_inplace, os_move_aligned, registry.
 * Must never: copy a block's contents (mremap moves pages). */
#include "huge.h"
#include "chunk.h"
#include "os.h"
#include "registry.h"

_Atomic size_t huge_mapped, huge_purged;

static size_t map_bytes(size_t offset, size_t size, size_t *out) {
  size_t n = offset + size;
  if (n < size || n > ((size_t)1 << 46)) return 0;
  *out = align_up(n, OS_PAGE);
  return *out;
}

huge_t *huge_new(size_t size, size_t align) {
  size_t offset = align > HUGE_HEADER ? align : HUGE_HEADER;
  size_t map_align = align > CHUNK_SIZE ? align : CHUNK_SIZE;
  size_t len;
  if (!map_bytes(offset, size, &len)) return NULL;
  char *base = os_map_aligned(len, map_align);
  if (!base) return NULL;
  huge_t *h = (huge_t *)base;
  *h = (huge_t){
      .kind = HDR_HUGE, .user = base + offset, .offset = offset, .map_size = len, .map_align = map_align};
  if (!registry_set(h->user, (char *)h + HUGE_TAG)) {
    os_unmap(base, len);
    return NULL;
  }
  atomic_fetch_add_explicit(&huge_mapped, len, memory_order_relaxed);
  return h;
}

void huge_delete(huge_t *h) {
  size_t len = h->map_size;
  registry_clear(h->user);
  atomic_fetch_sub_explicit(&huge_mapped, len, memory_order_relaxed);
  atomic_fetch_add_explicit(&huge_purged, len, memory_order_relaxed);
  os_unmap(h, len);
}

huge_t *huge_resize(huge_t *h, size_t size) {
  size_t len, old = h->map_size;
  if (!map_bytes(h->offset, size, &len)) return NULL;
  if (len == old) return h;
  if (len < old || os_resize_inplace(h, old, len)) {
    if (len < old) os_unmap((char *)h + len, old - len);
    h->map_size = len;
  } else {
    char *user = h->user;
    huge_t *moved = os_move_aligned(h, old, len, h->map_align);
    if (!moved) return NULL;
    registry_clear(user);
    moved->user = (char *)moved + moved->offset;
    moved->map_size = len;
    if (!registry_set(moved->user, (char *)moved + HUGE_TAG))
      ebb_fatal("realloc", "registry out of memory", moved);
    h = moved;
  }
  if (len > old)
    atomic_fetch_add_explicit(&huge_mapped, len - old, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(&huge_mapped, old - len, memory_order_relaxed);
  return h;
}
