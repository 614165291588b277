/* huge.c — owns large blocks and their descriptors (huge.h).
 * May call: os_map, os_map_aligned, os_unmap, os_resize_inplace, os_move_aligned,
 * registry. Must never: copy a block's contents (mremap moves pages), or leave
 * a registry entry naming an address range it no longer owns. */
#include "huge.h"
#include "os.h"
#include "registry.h"

_Atomic size_t huge_mapped, huge_purged;

#define DESC_SLAB ((size_t)64 << 10)
static spinlock_t desc_lock;
static huge_t *desc_free; /* recycled descriptors, linked by next */

void huge_lock_all(void) { spin_lock(&desc_lock); }
void huge_unlock_all(void) { spin_unlock(&desc_lock); }

static huge_t *desc_new(void) {
  spin_lock(&desc_lock);
  if (!desc_free) {
    huge_t *slab = os_map(DESC_SLAB);
    for (size_t i = 0; slab && i < DESC_SLAB / sizeof(huge_t); i++) {
      slab[i].next = desc_free;
      desc_free = &slab[i];
    }
  }
  huge_t *h = desc_free;
  if (h) desc_free = h->next;
  spin_unlock(&desc_lock);
  return h;
}

static void desc_delete(huge_t *h) {
  spin_lock(&desc_lock);
  h->next = desc_free;
  desc_free = h;
  spin_unlock(&desc_lock);
}

static bool map_bytes(size_t size, size_t *out) {
  if (size > ((size_t)1 << 46)) return false;
  *out = align_up(size, OS_PAGE);
  return true;
}

static void *tagged(huge_t *h) { return (char *)h + HUGE_TAG; }

huge_t *huge_new(size_t size, size_t align) {
  size_t map_align = align > CHUNK_SIZE ? align : CHUNK_SIZE;
  size_t len;
  if (!map_bytes(size ? size : 1, &len)) return NULL;
  huge_t *h = desc_new();
  if (!h) return NULL;
  char *base = os_map_aligned(len, map_align);
  if (!base) {
    desc_delete(h);
    return NULL;
  }
  relaxed_store(h->user, base);
  h->map_size = len;
  h->map_align = map_align;
  h->arena = NULL;
  h->next = h->prev = NULL;
  if (!registry_set(base, tagged(h))) {
    os_unmap(base, len);
    desc_delete(h);
    return NULL;
  }
  atomic_fetch_add_explicit(&huge_mapped, len, memory_order_relaxed);
  return h;
}

void huge_delete(huge_t *h) {
  size_t len = h->map_size;
  registry_clear(h->user); /* before the range can be mapped again by anyone */
  atomic_fetch_sub_explicit(&huge_mapped, len, memory_order_relaxed);
  atomic_fetch_add_explicit(&huge_purged, len, memory_order_relaxed);
  os_unmap(h->user, len);
  desc_delete(h);
}

/* A move clears the old address's registry entry before mremap releases the
 * range: once released, another thread may map a block there and register it
 * at once, and a late clear would erase that block's entry. */
static bool move(huge_t *h, size_t len) {
  char *old = h->user;
  registry_clear(old);
  char *moved = os_move_aligned(old, h->map_size, len, h->map_align);
  if (!moved) {
    registry_set(old, tagged(h)); /* its leaf exists: cannot fail */
    return false;
  }
  relaxed_store(h->user, moved);
  if (!registry_set(moved, tagged(h))) ebb_fatal("realloc", "registry out of memory", moved);
  return true;
}

bool huge_resize(huge_t *h, size_t size) {
  size_t len, old = h->map_size;
  if (!map_bytes(size, &len)) return false;
  if (len == old) return true;
  if (len < old)
    os_unmap(h->user + len, old - len);
  else if (!os_resize_inplace(h->user, old, len) && !move(h, len))
    return false;
  h->map_size = len;
  if (len > old)
    atomic_fetch_add_explicit(&huge_mapped, len - old, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(&huge_mapped, old - len, memory_order_relaxed);
  return true;
}
