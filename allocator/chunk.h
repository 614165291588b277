/* chunk.h — owns a chunk: 4 MiB aligned to its size, header in unit 0 (the page
 * descriptors of every unit), units 1..63 handed out as spans. Tracks which
 * units are free and which free units are still resident ("dirty") and since
 * when. Callers hold the owning arena's lock for everything but lookups.
 * A chunk no arena needs any more is never unmapped: it goes to a pool for the
 * next chunk_new, so a reader that found it through the registry a moment
 * before (a stale free, ebb_owns) never reads unmapped memory. The pool keeps
 * the chunks of destroyed arenas warm (resident, dirty) until decay purges them,
 * and hands out the most recently pooled first: a create/work/destroy loop
 * then reuses the same resident memory with no page faults.
 * Layer: above page, registry, os. */
#ifndef EBB_CHUNK_H
#define EBB_CHUNK_H
#include "page.h"

enum { HDR_CHUNK = 0x43484b31u }; /* first word of every chunk */

struct arena;
typedef struct chunk {
  uint32_t kind;        /* HDR_CHUNK */
  uint32_t first_class; /* owned by a first-class arena (which may be destroyed at any time) */
  struct arena *arena;  /* owner; set when the chunk is taken (read by every free) */
  uint64_t pad1[6];     /* keeps the line every free reads apart from the bitmaps */
  uint32_t free_count;  /* free units */
  uint32_t pad2;
  struct chunk *next, *prev;         /* the arena's chunk list; the pool's stack */
  uint64_t free_units;               /* bit i: unit i belongs to no page */
  uint64_t dirty_units;              /* bit i: unit i is free and may be resident */
  uint64_t zero_units;               /* bit i: unit i is free and reads as zeroes (never written since it was
                                        mapped or purged with MADV_DONTNEED): what calloc need not clear */
  /* The span search's index (chunk_fit_len): bit L of lens_all (lens_warm) is
   * set when the chunk has a maximal run of exactly L free (free and dirty)
   * units; each valid while idx_all (idx_warm) equals the units it was built
   * from, rebuilt by the first search that needs it after they change. */
  uint64_t idx_all, idx_warm, lens_all, lens_warm;
  uint64_t dirty_since[CHUNK_UNITS]; /* coarse ms when a dirty unit became free */
  page_t pages[CHUNK_UNITS] __attribute__((aligned(64))); /* descriptor of every unit (0: unused) */
} chunk_t;
_Static_assert(sizeof(chunk_t) <= UNIT_SIZE, "the header fits unit 0");

#define CHUNK_ALL_FREE (~(uint64_t)1) /* unit 0 is the header */

EBB_INLINE chunk_t *chunk_of(const void *p) { return (chunk_t *)align_down((uintptr_t)p, CHUNK_SIZE); }
/* The descriptor of p's own unit, &c->pages[unit of p], with one shift and
 * one mask (descriptors are 256 bytes). For a later unit of a span (PAGE_TAIL)
 * it is not the page: its blk_limit of 0 says "no block" to page_is_block, so
 * free's fast path, which reads it without following head_back (one dependent
 * load and two instructions fewer), resolves the head only then (only classes
 * above 8 KiB have spans of more than one unit), and asks it again. */
EBB_INLINE page_t *chunk_unit_page(chunk_t *c, const void *p) {
  size_t off = ((uintptr_t)p >> (UNIT_SHIFT - 8)) & ((CHUNK_UNITS - 1) << 8);
  return (page_t *)((char *)c + offsetof(chunk_t, pages) + off);
}

/* The page that contains p (p inside the chunk, not in unit 0). A free unit
 * that was part of a span still points at that span's head, whose geometry
 * stays until it is taken again, so a double free there is still named. */
EBB_INLINE page_t *chunk_page_of(chunk_t *c, const void *p) {
  page_t *pg = chunk_unit_page(c, p);
  return (page_t *)((char *)pg - fast_load(pg->head_back));
}

/* A chunk for arena a, registered: from the pool (warm first; its resident
 * free units are in dirty_units, dirty since now) or freshly mapped; NULL when
 * the kernel refuses. */
chunk_t *chunk_new(struct arena *a, bool first_class, uint64_t now);
/* Unregisters c, returns all its memory to the kernel and keeps it in the pool. */
void chunk_retire(chunk_t *c);
/* Unregisters c, every unit free, and keeps it in the pool with the units in
 * `resident` still resident: warm for the next chunk_new. Those that were
 * dirty already keep their time, the others are dirty since now; the pool's
 * decay purges the chunk once its oldest is due. */
void chunk_pool_put(chunk_t *c, uint64_t resident, uint64_t now);
/* Resets every unit of c to free (the chunk stays registered and its arena's);
 * the units in `resident` are dirty: those that were dirty already keep their
 * time, the others (in a page until now) are dirty since now. For
 * ebb_arena_reset. */
void chunk_reset(chunk_t *c, uint64_t resident, uint64_t now);
/* Units of c that may be resident: free dirty ones and every unit in a page. */
EBB_INLINE uint64_t chunk_resident(const chunk_t *c) { return c->dirty_units | (~c->free_units & CHUNK_ALL_FREE); }
/* Purges pooled warm chunks pooled at or before cutoff, oldest first, until at
 * least max_bytes went. Bytes purged. */
size_t chunk_pool_decay(uint64_t cutoff, size_t max_bytes);
size_t chunk_pool_dirty(void);      /* resident bytes of pooled chunks */
size_t chunk_pool_warm_bytes(void); /* bytes of pooled chunks that may hold resident memory */
/* A span of n free units, its first at a multiple of step (a power of two;
 * 1: anywhere), only resident ones if warm_only, so reuse costs no page
 * faults; NULL if none fits. Sets the descriptors of its tail units and
 * the head's fresh_zero (whether every unit read as zeroes); the caller
 * initialises the rest of the head (page_init). */
page_t *chunk_take_span(chunk_t *c, unsigned n, unsigned step, bool warm_only);
/* Where chunk_take_span would place n units: the length of the free run it
 * would cut (n: an exact fit), 0 if none fits; *at: the first unit. */
unsigned chunk_fit(const chunk_t *c, unsigned n, unsigned step, bool warm_only, unsigned *at);
uint64_t chunk_index_runs(uint64_t units, uint64_t *idx, uint64_t *lens);
/* What chunk_fit(c, n, 1, warm_only, ...) returns, the length of the
 * shortest free run that holds n units (resident units only if warm_only),
 * 0 if none, from the run-length index: a shift and a count of trailing zeros
 * instead of a walk over the chunk's runs, for each chunk the span search
 * looks at. */
EBB_INLINE unsigned chunk_fit_len(chunk_t *c, unsigned n, bool warm_only) {
  uint64_t units = warm_only ? c->free_units & c->dirty_units : c->free_units, lens;
  if (warm_only)
    lens = units == c->idx_warm ? c->lens_warm : chunk_index_runs(units, &c->idx_warm, &c->lens_warm);
  else
    lens = units == c->idx_all ? c->lens_all : chunk_index_runs(units, &c->idx_all, &c->lens_all);
  uint64_t longer = lens >> n; /* runs of n units or more */
  return longer ? n + (unsigned)__builtin_ctzll(longer) : 0;
}
/* The span of n units at pg if they are all free (NULL otherwise), taken as
 * chunk_take_span does. */
page_t *chunk_take_span_at(chunk_t *c, page_t *pg, unsigned n);
/* Gives the span of pg back, dirty since now. */
void chunk_give_span(chunk_t *c, page_t *pg, uint64_t now);
/* Purges dirty free units that became dirty at or before cutoff, lowest address
 * first, stopping once at least max_bytes went; bytes purged. */
size_t chunk_purge(chunk_t *c, uint64_t cutoff, size_t max_bytes, bool use_free);
/* Oldest dirty time among its units, 0 if none. */
uint64_t chunk_oldest_dirty(const chunk_t *c);
/* Bytes of chunks in the pool (mapped, in no arena). */
size_t chunk_pool_bytes(void);
/* The pool's lock, held across fork (thread.c). */
void chunk_pool_lock(void);
void chunk_pool_unlock(void);
#endif
