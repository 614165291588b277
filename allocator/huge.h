/* huge.h — owns large blocks (above CLASS_MAX_SIZE, or aligned beyond a unit)
 * and the cache of freed ones. A large block starts on a chunk boundary, so no
 * other block starts in its 4 MiB region and the registry finds it; it owns a
 * span of address space from there (its usable size plus at most the rest of a
 * region). Blocks grow in place (into adjacent cached space, or by mremap) or
 * are moved by mremap, never copied.
 * Freed blocks stay resident as dirty memory in a small cache (jemalloc's
 * retained extents, mimalloc's purge delay): a later large request of a similar
 * size reuses one without a mapping and without page faults, a smaller one
 * splits a bigger one on a region boundary, and a growing block takes the
 * cached space right after it. Decay (EBB_DECAY_MS) and the cap (EBB_DIRTY_MAX)
 * unmap them; with EBB_DECAY_MS=0 nothing is kept.
 * A block that took a cached extent bigger than it needs keeps the resident
 * part past its size (its slack) until the decay purges it, as mimalloc keeps
 * a span's unused slices until its purge delay: purged at once, a later and
 * larger request that took the extent faulted it all in again.
 * Descriptors live out of band, in slabs that are never unmapped, so a reader
 * that found one through the registry a moment before its block was freed (a
 * stale free, ebb_owns) never reads unmapped memory.
 * Layer: above registry, os. One lock, for large blocks only. */
#ifndef EBB_HUGE_H
#define EBB_HUGE_H
#include "common.h"

struct arena;
typedef struct huge {
  char *user;               /* the block: the start of its span (read by other threads) */
  size_t size;              /* usable bytes (page multiple) */
  size_t span;              /* address space it owns from user (>= size, page multiple) */
  size_t align;             /* alignment it was asked for (>= CHUNK_SIZE) */
  uintptr_t map_id;         /* the mmap its span came from: spans of one mapping may merge */
  struct arena *arena;      /* first-class arena that must free it, or NULL */
  struct huge *next, *prev; /* that arena's list; the free descriptors' stack */
  /* Slack: the span's last `slack` bytes, past the block's size, resident and
   * waiting for the decay, which purges them (0: none is listed). Written
   * under the lock; read without it by the block's owner only (huge_resize). */
  _Atomic size_t slack;
  uint64_t slack_since;       /* when they were listed (coarse ms) */
  struct huge *snext, *sprev; /* the list of blocks with slack, oldest first */
} huge_t;

#define HUGE_TAG ((uintptr_t)1) /* registry values of large blocks carry this bit */
#define HUGE_CACHE_MAX 1024     /* cached extents kept at most (the oldest goes) */

EBB_INLINE size_t huge_usable(const huge_t *h) { return relaxed_load(h->size); }
/* A block of at least size bytes aligned to align, registered; NULL when out
 * of memory. *reused: how many of its first bytes came from the cache and may
 * hold old data (0: a fresh mapping, all zeroes). A cached extent's slack stays
 * resident, dirty since now (keep), or is purged at once. */
huge_t *huge_new(size_t size, size_t align, bool keep, uint64_t now, size_t *reused);
/* Unregisters h; with keep its span stays resident in the cache, dirty since
 * now, else it is unmapped. */
void huge_delete(huge_t *h, bool keep, uint64_t now);
/* Resizes without copying; false (block unchanged) when the kernel refuses. A
 * tail given up goes to the cache (keep) or back to the kernel. */
bool huge_resize(huge_t *h, size_t size, bool keep, uint64_t now);
/* Unmaps cached extents freed at or before cutoff (UINT64_MAX: all), and
 * purges the slack of live blocks listed by then, until max bytes are done
 * (at least one extent; what is left stays due for the next call). Bytes. */
size_t huge_cache_decay(uint64_t cutoff, size_t max);
/* What a large free's own decay does at most: the rest waits for the next
 * large free or decay pass. Unbounded, the free after 800 cached blocks of
 * 3 MB came due unmapped all of them, 200 ms in one free (found by a probe). */
#define HUGE_FREE_DECAY_MAX ((size_t)32 << 20)
/* Unmaps cached extents, then purges live blocks' slack, oldest first, until
 * at least need bytes went. Bytes. */
size_t huge_cache_trim(size_t need);
/* Waits, at most ms, until no thread is unmapping extents taken out of the
 * cache; false if some still were. */
bool huge_wait_unmaps(uint64_t ms);
size_t huge_cache_bytes(void);  /* cached: mapped, resident, dirty */
size_t huge_active_bytes(void); /* spans of live blocks: mapped */
size_t huge_in_use_bytes(void); /* sizes of live blocks: active and allocated */
size_t huge_blocks(void);       /* live blocks (mallinfo2's hblks) */
#ifdef EBB_FAKE_OS
bool huge_lock_held(void); /* unit tests: whether the cache's lock is taken */
#endif
size_t huge_slack_bytes(void);  /* live blocks' resident slack: dirty */
/* Dirty as the statistics and the cap count it: cached extents and slack.
 * Mapped is huge_active_bytes() + huge_cache_bytes(); the part of a span past
 * its size is dirty while listed as slack, else neither active nor dirty (it
 * was purged, or never written). */
EBB_INLINE size_t huge_dirty_bytes(void) { return huge_cache_bytes() + huge_slack_bytes(); }
/* The lock of descriptors and cache, held across fork. */
void huge_lock_all(void);
void huge_unlock_all(void);

extern _Atomic size_t huge_purged; /* bytes unmapped, cumulative */
#endif
