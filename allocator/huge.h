/* huge.h — owns large blocks (above CLASS_MAX_SIZE, or aligned beyond a unit):
 * each is its own mapping, aligned to a chunk so the registry can find its
 * header, grown and shrunk in place or moved by mremap, never copied.
 * Layer: above registry, os. */
#ifndef EBB_HUGE_H
#define EBB_HUGE_H
#include "common.h"

struct arena;
typedef struct huge {
  uint32_t kind; /* HDR_HUGE */
  uint32_t pad;
  struct arena *arena;      /* first-class arena that must free it, or NULL */
  struct huge *next, *prev; /* that arena's list */
  char *user;               /* the pointer handed out */
  size_t offset;            /* user - mapping start */
  size_t map_size;          /* bytes mapped */
  size_t map_align;         /* alignment of the mapping */
} huge_t;

#define HUGE_HEADER 64
#define HUGE_TAG ((uintptr_t)1) /* registry values of large blocks carry this bit */

EBB_INLINE size_t huge_usable(const huge_t *h) { return h->map_size - h->offset; }
huge_t *huge_new(size_t size, size_t align); /* NULL when out of memory */
void huge_delete(huge_t *h);
/* Resizes without copying; returns the (possibly moved) header or NULL (unchanged). */
huge_t *huge_resize(huge_t *h, size_t size);

extern _Atomic size_t huge_mapped, huge_purged;
#endif
