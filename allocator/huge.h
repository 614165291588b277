/* huge.h — owns large blocks (above CLASS_MAX_SIZE, or aligned beyond a unit):
 * each is its own mapping, aligned to a chunk so that no other block starts in
 * its 4 MiB region, grown and shrunk in place or moved by mremap, never copied.
 * Its descriptor lives out of band, in slabs that are never unmapped, so a
 * reader that found it through the registry a moment before its block was
 * freed (a stale free, ebb_owns) reads a descriptor, never unmapped memory.
 * Layer: above registry, os. */
#ifndef EBB_HUGE_H
#define EBB_HUGE_H
#include "common.h"

struct arena;
typedef struct huge {
  char *user;               /* the block, which is also its mapping's start (read by other threads) */
  size_t map_size;          /* bytes mapped: the usable size */
  size_t map_align;         /* alignment of the mapping */
  struct arena *arena;      /* first-class arena that must free it, or NULL */
  struct huge *next, *prev; /* that arena's list; the free descriptors' stack */
} huge_t;

#define HUGE_TAG ((uintptr_t)1) /* registry values of large blocks carry this bit */

EBB_INLINE size_t huge_usable(const huge_t *h) { return h->map_size; }
huge_t *huge_new(size_t size, size_t align); /* NULL when out of memory */
void huge_delete(huge_t *h);
/* Resizes without copying; false (block unchanged) when the kernel refuses. */
bool huge_resize(huge_t *h, size_t size);
/* The descriptor slabs' lock, held across fork. */
void huge_lock_all(void);
void huge_unlock_all(void);

extern _Atomic size_t huge_mapped, huge_purged;
#endif
