/* arena.h — owns an arena: the pages of every size class, the chunks they come
 * from, and the decay of freed memory. Each thread allocates from its own
 * arena with no lock and no atomic instruction on the fast paths below; the
 * arena's lock guards only its chunks' unit bitmaps (taken on page refills,
 * page retirement and purges). A thread's arena is abandoned when it exits and
 * adopted whole by the next new thread; until then any thread's activity (or
 * the background thread) purges it. Thread binding, fork and the background
 * thread itself live in thread.c.
 * Layer: above chunk, page, decay, options, os. */
#ifndef EBB_ARENA_H
#define EBB_ARENA_H
#include "chunk.h"
#include "decay.h"
#include "options.h"

typedef struct {
  page_t *first, *last;
} pqueue_t;

enum arena_state {
  ARENA_FREE,        /* unused, may be handed to anyone */
  ARENA_OWNED,       /* a live thread's */
  ARENA_ABANDONED,   /* its thread exited; adoptable, purged by anyone */
  ARENA_PURGING,     /* abandoned, being purged by some thread right now */
  ARENA_FIRST_CLASS, /* created by ebb_arena_create */
  ARENA_ORPHANED,    /* in a fork child: its thread did not survive the fork */
};

struct huge;
typedef struct arena {
  page_t *fast[NCLASSES + 1];     /* what malloc pops from, per class: tc[c] while it holds blocks, else direct[c] */
  page_t *direct[NCLASSES];       /* the class's current page */
  int32_t tick;                   /* local frees until the next clock read */
  uint32_t scan_cls;              /* where the bounded purge pass resumes */
  uint64_t now;                   /* coarse clock (ms), refreshed on ticks */
  uint64_t last_decay;            /* when this arena last ran its decay pass */
  pqueue_t queues[NCLASSES];      /* pages with (possibly) free blocks, per class */
  page_t *last_span[NCLASSES];    /* where each class's last retired page was: taken again first */
  _Atomic(page_t *) remote_pages; /* full pages that got a remote free */
  spinlock_t lock;                /* chunks' bitmaps, chunk list, huge list */
  chunk_t *chunks;                /* chunk list */
  struct huge *huge;              /* first-class arenas: large blocks to free on destroy */
  atomic_int state;               /* enum arena_state */
  struct arena *all_next;         /* the global list (never unlinked) */
  _Atomic size_t mapped;          /* bytes of chunks mapped */
  _Atomic size_t active;          /* bytes of spans in pages */
  _Atomic size_t dirty;           /* bytes of free units still resident */
  _Atomic size_t purged;          /* bytes returned to the kernel, cumulative */
  /* The thread cache: blocks this thread freed, its own and other threads'
   * alike, one list per class, handed out first (LIFO, so the block just
   * freed is the next one malloc returns, still in cache). Each is a page
   * descriptor used for its free list, block_size, capacity (the most it
   * holds) and used, which here counts the room left (capacity - blocks
   * held), so malloc's pop (used + 1) gives room back with no extra work and
   * a free needs room > 1; 0 for a class never set up, and always for
   * tc[TC_NONE], the slot of pages whose blocks are never cached. Blocks in
   * it still count as handed out on their pages. fast[c] points here while
   * it holds blocks. */
  page_t tc[NCLASSES + 1];
} arena_t;

/* The calling thread's arena; arena_none (never NULL) until it has one, so the
 * malloc fast path needs no test: every class of arena_none is empty. */
extern __thread arena_t *arena_tls __attribute__((tls_model("initial-exec")));
extern arena_t arena_none;
/* direct[c] = pg, and fast[c] too unless the thread cache has blocks. */
EBB_INLINE void arena_set_direct(arena_t *a, unsigned c, page_t *pg) {
  a->direct[c] = pg;
  if (a->fast[c] != &a->tc[c]) a->fast[c] = pg;
}
extern page_t page_empty; /* direct[] points here while a class has no page */

#define TICK_FREES 64              /* slow-path events (refills, retirements, cache flushes) between clock reads */
#define TCACHE_BYTES 16384         /* per class, the most a thread cache holds (in blocks: at most TCACHE_BLOCKS) */
#define TCACHE_BLOCKS 256
#define GLOBAL_CHECK_MS 4          /* the global purge runs at most this often */
#define PASS_PAGES 256             /* pages one bounded purge pass examines on a thread's own time */
#define BACKGROUND_PASS_PAGES 4096 /* the same for the background thread, off the request path */

arena_t *arena_new(int state); /* NULL when out of memory */
/* Takes an arena in state `from` (ABANDONED: adopted whole, pages and all). */
arena_t *arena_claim(int from, int to);
/* Its thread exited: cached blocks go home, the arena becomes adoptable. */
void arena_abandon(arena_t *a);
void arena_destroy(arena_t *a);
void arena_reset_blocks(arena_t *a); /* ebb_arena_reset */
/* Applies EBB_DIRTY_MAX (and EBB_DECAY_MS=0) to memory kept outside arenas. */
void arena_enforce_cap(void);
/* fork: every arena lock (and the chunk pool's) is taken before and released
 * after; in the child, other threads' arenas are orphaned. */
void arena_lock_all(void);
void arena_unlock_all(void);
void arena_fork_child(void);
/* The background thread's pass over every arena. */
void arena_purge_background(uint64_t now);
void *arena_malloc_slow(arena_t *a, unsigned cls, size_t size);
void arena_free_local_slow(arena_t *a, page_t *pg);
void arena_free_remote(arena_t *owner, page_t *pg, block_t *b);
/* A free by thread arena a of a checked block b of pg into a's thread cache,
 * setting the class's cache up or flushing half of it first; false (nothing
 * done) when b may not be cached: no arena, pg's tc_off is TC_NONE's, or its
 * blocks are too big for the cache. */
bool arena_free_cached(arena_t *a, page_t *pg, block_t *b);
void arena_tick(arena_t *a);
/* Purges what has decayed everywhere (force: everything). Returns bytes. */
size_t arena_purge_all(bool force);
void arena_stats_sum(size_t *mapped, size_t *active, size_t *dirty, size_t *purged, size_t *allocated,
                     uint64_t *count);
bool arena_is_valid(arena_t *a);
/* High-water marks of mapped, active and dirty bytes (all memory, not one
 * arena's), recorded by arena_note_peaks, and of live bytes (sampled). */
void arena_note_peaks(void);
void arena_peaks(size_t *mapped, size_t *active, size_t *dirty, size_t *live);
/* The peak of bytes in live blocks is sampled: by every ebb_stats call (note)
 * and by the background thread's passes (sample: a sum over every arena). */
void arena_note_live_peak(size_t live);
void arena_sample_live_peak(void);
/* Per size class, over every arena: pages, live blocks (handed out, or
 * freed by another thread and not yet collected), bytes of their spans. */
typedef struct {
  uint64_t pages, blocks, span_bytes;
} class_stat_t;
void arena_class_stats(class_stat_t out[NCLASSES]);
/* Decay pass over one arena at time now; exclusive: the caller owns its pages. */
size_t arena_decay(arena_t *a, uint64_t now, bool exclusive, bool force, unsigned pages);

/* Pops the first free block of fast[c]: the thread cache while it holds
 * blocks, else the class's current page; NULL when that is empty too. */
EBB_INLINE void *arena_pop(arena_t *a, unsigned c) {
  page_t *pg = a->fast[c];
  block_t *b = pg->free;
  if (unlikely(b == NULL)) return page_bump(pg);
  track_open(b, sizeof *b);
  block_t *next = b->next;
  pg->free = next;
  /* The list ran dry: the next malloc of the class pops from the class's page
   * (a no-op unless this was the thread cache). */
  if (unlikely(next == NULL)) a->fast[c] = a->direct[c];
  relaxed_store(b->cookie, 0);
  relaxed_store(pg->used, pg->used + 1);
  track_malloc(b, pg->block_size, false);
  /* ... and that is a slow-path event, counted once b is wholly handed out (a
   * decay pass may look at its page): a thread whose frees all go into its
   * cache and come back out still reads the clock and runs its decay. */
  if (unlikely(next == NULL) && unlikely(--a->tick < 0)) arena_tick(a);
  return b;
}

EBB_INLINE void *arena_malloc(arena_t *a, size_t size) {
  unsigned c = size_class(size);
  void *b = arena_pop(a, c);
  return likely(b != NULL) ? b : arena_malloc_slow(a, c, size);
}

/* A free by the owner of a page that may take the fast path (pg->fast_owner
 * == a); cookie is page_cookie(b). */
EBB_INLINE void arena_free_fast(arena_t *a, page_t *pg, block_t *b, uint64_t cookie) {
  ebb_assert(pg->used > 0 && pg->cls < NCLASSES && !pg->slow_free);
  track_free(b);
  page_push_cookie(pg, b, cookie);
  uint32_t used = pg->used - 1;
  relaxed_store(pg->used, used);
  if (unlikely(used == 0)) arena_free_local_slow(a, pg);
}

/* The free fast path's push into the thread cache: true if b (checked, not
 * free; cookie is page_cookie(b)) went in. It needs room > 1 in the slot of
 * pg->tc_off; arena_none's slots and tc[TC_NONE] have 0, so neither is ever
 * written. No test of whose block it is: see arena_free_cached. */
EBB_INLINE bool arena_cache_push(arena_t *a, page_t *pg, block_t *b, uint64_t cookie) {
  size_t off = relaxed_load(pg->tc_off);
  page_t *tc = (page_t *)((char *)a->tc + off);
  uint32_t room = relaxed_load(tc->used);
  if (unlikely(room <= 1)) return false;
  track_free(b);
  block_t *head = tc->free;
  track_open(b, sizeof *b);
  b->next = head;
  relaxed_store(b->cookie, cookie);
  track_close(b, sizeof *b);
  tc->free = b;
  relaxed_store(tc->used, room - 1);
  /* while the cache holds blocks fast[] points at it already: only the first
   * block switches it (a store every time cost 0.3 ns a pair in bench/loop) */
  if (unlikely(head == NULL)) a->fast[TC_OF(off)] = tc;
  return true;
}

/* Any free by the owner (the slow path's). */
EBB_INLINE void arena_free_local(arena_t *a, page_t *pg, block_t *b) {
  ebb_assert(pg->used > 0 && pg->cls < NCLASSES);
  track_free(b);
  page_push_local(pg, b);
  uint32_t used = pg->used - 1;
  relaxed_store(pg->used, used);
  if (unlikely(used == 0 || pg->slow_free)) arena_free_local_slow(a, pg);
}
#endif
