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
struct span_index;
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
  /* Its place in its arena's span index (below): the index (NULL while in no
   * arena's), its slot there (SPAN_NO_SLOT: none, while it has no free unit or
   * waits for a slot), whether it waits (on the index's waiting list, linked
   * by ix_next, ix_prev), and the lengths of its runs, [0] of free units, [1]
   * of free resident ones (kept for every chunk in an index). */
  struct span_index *ix;
  uint32_t ix_slot, ix_waiting;
  uint64_t ix_lens[2];
  struct chunk *ix_next, *ix_prev;
  uint64_t dirty_since[CHUNK_UNITS]; /* coarse ms when a dirty unit became free */
  page_t pages[CHUNK_UNITS] __attribute__((aligned(64))); /* descriptor of every unit (0: unused) */
} chunk_t;
_Static_assert(sizeof(chunk_t) <= UNIT_SIZE, "the header fits unit 0");

#define CHUNK_ALL_FREE (~(uint64_t)1) /* unit 0 is the header */

/* An arena's span index: which of its chunks has a maximal run of free units
 * of exactly L units, for each L, so that the search for a span of n units
 * finds the best fit over all of them (the chunk with the shortest run that
 * holds n) with a shift and three counts of trailing zeros, wherever the
 * chunk is, and without reading any chunk's header. Bins by free-run length,
 * as jemalloc's extent heaps and mimalloc's span queues are indexed by size,
 * here over a bitmap of chunk slots so that an update writes no other
 * chunk's header. The walk over the arena's chunks it replaced read each
 * header in turn, a cache and TLB miss a chunk: 5000 live blocks of
 * 64-224 KiB replaced at random (180 chunks) spent 40 % of their time there.
 * [0] indexes free units, [1] free resident (dirty) ones. Only a chunk with a
 * free unit holds a slot. Past SPAN_SLOTS such chunks (16 GiB) the others
 * wait on a list, newest first, whose newest SPAN_WAITING_SCAN the search
 * walks too (span_index_waiting_best), and the oldest of them takes the next
 * slot that comes free, so that the slots and the walk see different chunks.
 * (A first version let full chunks keep their 1024 slots and the others wait
 * for a change of their own: past 4 GiB every new page mapped a chunk of its
 * own, found by a probe. The next, with 1024 slots and the newest waiting
 * chunk promoted, saw no more than 1280 chunks: 30,000 live blocks of
 * 100-450 KB replaced at random, 8.25 GiB, mapped 16 GiB and took 4.2 us a
 * pair, found by another; with every chunk slotted, 8.6 GiB and 0.5 us.)
 * Caller holds the arena's lock. */
#define SPAN_SLOTS 4096 /* 16 GiB of chunks with a free unit */
#define SPAN_WORDS (SPAN_SLOTS / 64)
#define SPAN_NO_SLOT UINT32_MAX
#define SPAN_STEPS 4          /* aligned spans' steps: 2, 4, 8, 16 units (128 KiB to 1 MiB) */
#define SPAN_SPANS_A_STEP 16  /* their lengths: 1 to 16 steps (at most 32 units, the largest class) */
_Static_assert(SPAN_SLOTS <= 65536, "span_index_t.aligned_from holds a slot in 16 bits");
typedef struct span_index {
  uint64_t lens[2];               /* bit L: some chunk has a run of exactly L */
  uint64_t words[2][CHUNK_UNITS]; /* bit w: group w's bin [.][L] is not empty */
  uint64_t full_words;            /* bit w: every slot of group w is taken */
  uint32_t nwaiting;              /* chunks with a free unit and no slot (none while a slot is free) */
  /* the slot an aligned span's search starts from (span_index_aligned_best),
   * for each kind, step (2 << k units) and length (step * (m + 1) units) */
  uint16_t aligned_from[2][SPAN_STEPS][SPAN_SPANS_A_STEP];
  struct chunk *waiting, *waiting_old; /* those chunks, newest first, and the oldest */
  /* 64 slots each, with their bins (bit i of bins[warm][L]: slot i's chunk
   * has a run of exactly L units): a zeroed index is an empty one, and an
   * arena of up to 64 chunks touches the first group only */
  struct span_group {
    uint64_t used;               /* bit i: slot i is taken */
    struct chunk *slot[64];
    uint64_t bins[2][CHUNK_UNITS];
  } group[SPAN_WORDS];
} span_index_t;
_Static_assert(SPAN_WORDS <= 64, "words and full_words are 64 bits");

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
/* c joins (leaves) ix: its runs are indexed from now on (no longer). A chunk
 * leaves its index by itself when it is retired or pooled. */
void span_index_join(span_index_t *ix, chunk_t *c);
void span_index_leave(chunk_t *c);
/* Brings c's entry in its index up to date after its bitmaps were written
 * directly (chunk.c's own changes do this themselves). */
void chunk_reindex(chunk_t *c);
/* From a set of run lengths (bit L: a run of exactly L units), the shortest
 * that holds n units, 0 if none. */
EBB_INLINE unsigned lens_fit(uint64_t lens, unsigned n) {
  uint64_t longer = lens >> n;
  return longer ? n + (unsigned)__builtin_ctzll(longer) : 0;
}
/* The length of c's shortest run that holds n units (of resident ones if
 * warm), 0 if none, from what its index holds. */
EBB_INLINE unsigned chunk_fit_indexed(const chunk_t *c, unsigned n, bool warm) { return lens_fit(c->ix_lens[warm], n); }
/* The chunk of ix whose shortest run of (resident if warm, else any) free
 * units that holds n is the shortest of all, NULL if none; *len: that run's
 * length. Ties go to the lowest slot. */
EBB_INLINE chunk_t *span_index_best(const span_index_t *ix, unsigned n, bool warm, unsigned *len) {
  unsigned l = lens_fit(ix->lens[warm], n);
  if (!l) return NULL;
  const struct span_group *g = &ix->group[__builtin_ctzll(ix->words[warm][l])];
  *len = l;
  return g->slot[__builtin_ctzll(g->bins[warm][l])];
}
/* best, or a waiting chunk (ix's newest SPAN_WAITING_SCAN of them) whose
 * shortest run that holds n is shorter than *len (best's), *len then its;
 * best itself when it is an exact fit. */
#define SPAN_WAITING_SCAN 256
chunk_t *span_index_waiting_best(const span_index_t *ix, unsigned n, bool warm, chunk_t *best, unsigned *len);
/* The chunk of ix, or of its newest waiting ones, with the shortest run of
 * (resident if warm, else any) free units that holds n units at a multiple
 * of step (chunk_fit's answer for it in *len, the first unit in *at), NULL if
 * none was found: chunks whose runs may hold them are tried a bounded number
 * a call (SPAN_ALIGNED_PROBES), each call going on where the last of the same
 * shape ended, runs that surely do at once. */
#define SPAN_ALIGNED_PROBES 64
chunk_t *span_index_aligned_best(span_index_t *ix, unsigned n, unsigned step, bool warm, unsigned *at, unsigned *len);
/* Where chunk_take_span would place n units: the length of the free run it
 * would cut (n: an exact fit), 0 if none fits; *at: the first unit. */
unsigned chunk_fit(const chunk_t *c, unsigned n, unsigned step, bool warm_only, unsigned *at);
/* What chunk_fit(c, n, 1, warm_only, ...) returns, the length of the
 * shortest free run that holds n units (resident units only if warm_only),
 * 0 if none, from the set of its runs' lengths (what the span index holds
 * for c): a shift and a count of trailing zeros. */
unsigned chunk_fit_len(const chunk_t *c, unsigned n, bool warm_only);
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
