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

/* A thread cache slot: one class's blocks this thread freed (see arena_t.tc).
 * fl.free is the LIFO; fl.used the room: blocks it may still take + 1, that
 * is capacity - held (0: never cached, or not set up), so a malloc's pop
 * (used + 1) gives room back as it counts a page's blocks out. */
typedef struct {
  freelist_t fl;
  page_t *direct; /* the class's current page (page_empty while it has none) */
  uint64_t pad;   /* 32 bytes */
} tcache_t;
_Static_assert(sizeof(tcache_t) == TC_SLOT, "page_t.tc_off counts in slots of TC_SLOT bytes");

struct huge;

typedef struct arena {
  /* What malloc pops from, per class: the cache slot's list while it holds
   * blocks (and until the next malloc finds it empty), else the current
   * page's; the malloc that finds the cache empty (or the free into an empty
   * one) moves it. Indexed by source slot (sizeclass.h: by size up to 1 KiB,
   * a class's slots always equal; read with arena_src, written with
   * arena_set_src). First, so malloc indexes it with no offset. */
  freelist_t *src[NSRC];
  /* 1 inside its owner's pop window (pop_window_open, below). Here, not in
   * owner_tls: the pop has the arena in a register, where owner_tls's offset
   * is one more load in libebb.so (69.2 instead of 68.2 instructions a pair
   * on bench/loop). arena_none's is written by every thread's first malloc
   * and read by no taker. */
  uint32_t popping;
  /* What ebb_arena_* ask of a handle (alloc.c), on the struct's first page:
   * a handle to one page of other memory is then read inside that page. */
  atomic_int state;               /* enum arena_state */
  uint8_t tc_server;              /* the thread frees many other threads' blocks: its own go into the cache too (in arena_free_key) */
  uintptr_t check;                /* its address ^ page_key */
  /* The thread cache: blocks this thread freed, its own and other threads'
   * alike, one list per class, which malloc takes first (LIFO: the block just
   * freed is the next one handed out, still in cache), with no atomic
   * operation either way. Blocks in it still count as handed out on their
   * pages (a pop touches no page). A class's list holds at most tc_cap
   * blocks (TCACHE_BYTES of them, at most TCACHE_BLOCKS). tc[TC_NONE], the
   * slot of pages whose blocks are never cached, stays empty with room 0, as
   * do arena_none's. */
  tcache_t tc[NCLASSES + 1] __attribute__((aligned(32))); /* each slot in one cache line */
  uint32_t tc_foreign;            /* other threads' blocks it freed since its last decay pass */
  int32_t tick;                   /* slow-path events until the next clock read */
  uint32_t scan_cls;              /* where the bounded purge pass resumes: this class, */
  page_t *scan_page;              /* at this page of its queue (NULL: its first); queue_remove moves it on */
  uint64_t now;                   /* coarse clock (ms), refreshed on ticks (written relaxed: other threads read it to tell an idle owner) */
  uint64_t last_decay;            /* when this arena last ran its decay pass */
  uint32_t tc_cap[NCLASSES + 1];  /* the most blocks a class's cache holds (0: not set up; 1: never cached) */
  pqueue_t queues[NCLASSES];      /* pages with (possibly) free blocks, per class */
  page_t *last_span[NCLASSES];    /* where each class's last retired page was: taken again first */
  _Atomic(page_t *) remote_pages; /* full pages that got a remote free */
  /* Whether the owner's last decay pass found remote_pages non-empty, and
   * since when it has found it so without a drain (arena.c,
   * owner_reclaim_remote). */
  uint8_t remote_seen;
  uint64_t remote_since;
  /* The one-block page (page_is_one_block) its owner freed last, kept, its
   * block free on its list, for the class's next malloc (arena.c,
   * one_spare_keep); taken by whoever exchanges it out first. */
  _Atomic(page_t *) one_spare;
  page_t *one_spare_seen;         /* what the owner's last decay pass found there, and when */
  /* A class whose current page of several units emptied and stays its page
   * until the arena's next span or next emptied page (arena.c, page_hold);
   * NCLASSES for none. What decides it: the class that took the arena's last
   * span, how many spans in a row it took each right after its own page went
   * back, and the class whose page went back last. The owner's, like the
   * queues. */
  uint32_t held_cls;
  uint32_t bounce_cls, bounce_n, retired_cls;
  uint64_t one_spare_seen_at;
  spinlock_t lock;                /* chunks' bitmaps, chunk list, huge list */
  chunk_t *chunks;                /* chunks with a free unit (the only ones a span or a purge looks at) */
  chunk_t *chunks_full;           /* chunks with none */
  struct huge *huge;              /* first-class arenas: large blocks to free on destroy */
  struct arena *all_next;         /* the global list (never unlinked) */
  _Atomic size_t mapped;          /* bytes of chunks mapped */
  _Atomic size_t active;          /* bytes of spans in pages */
  _Atomic size_t dirty;           /* bytes of free units still resident */
  _Atomic size_t purged;          /* bytes returned to the kernel, cumulative */
  /* The handshake that lets another thread take back an idle owner's queue
   * pages (arena_reclaim_queues_locked): the owner's owner_tls, set while
   * the arena is OWNED (under the lock, which the taker holds), and whether
   * a taker is at work. */
  struct owner_tls *owner;
  uint8_t reclaiming;
  uint64_t reclaimed_at; /* the owner's clock (a->now) when a taker last went over its queues (written under the lock, read without by lend_idle_arenas) */
  /* What a pass last saw of the owner's clock and event count, and when
   * (owner_idle_for); under the lock. */
  uint64_t seen_now, seen_at;
  int32_t seen_tick;
  uint64_t reclaim_pass; /* the taker's clock then (ms) */
  /* Frees for an idle owner since a taker went over its queues, which only
   * a taker collects: set by the first remote free into a page the taker
   * watched (XFREE_WATCH, push_remote_run), cleared as the taker starts. */
  _Atomic uint8_t xfree_news;
  /* Which of its chunks has a free run of what length (chunk.h); under the
   * lock. In the arena's mapping, after the arena (arena_new): arena_none,
   * which has no chunks, has none, and its initialised data stays small (a
   * first version embedded it: 25 KiB more .data, 16 KiB more RSS in every
   * process). */
  span_index_t *spans;
} arena_t;

/* The calling thread's arena; arena_none (never NULL) until it has one, so the
 * malloc fast path needs no test: every class of arena_none is empty. */
extern __thread arena_t *arena_tls __attribute__((tls_model("initial-exec")));
extern arena_t arena_none;

/* What free() compares a page's fast_owner with: the thread's arena, with bit
 * 0 set while the thread is a server's (tc_server), so that one compare both
 * finds "my page, nothing special" and keeps a server's thread off the page
 * push, with no test of its own on the common thread's path. */
typedef struct owner_tls {
  uintptr_t free_key; /* that key; written atomically, since another thread swaps it (below) */
  uint32_t busy;      /* nesting depth of calls that may touch the thread's own pages (below) */
  uint32_t freeing;   /* 1 inside free's page-push window (free_window_open, below) */
} owner_tls_t;
extern __thread owner_tls_t owner_tls __attribute__((tls_model("initial-exec")));
#define arena_free_key (owner_tls.free_key)
/* Called whenever arena_tls or its tc_server changes. */
EBB_INLINE void arena_sync_free_key(void) {
  __atomic_store_n(&arena_free_key, (uintptr_t)arena_tls | arena_tls->tc_server, __ATOMIC_RELEASE);
}

/* The owner's side of the handshake with a thread that takes back its queue
 * pages while it is idle (arena_reclaim_queues_locked, which says why this is
 * enough). Every call that may touch the thread's own pages other than
 * through the malloc fast path (which pops only from the current page and
 * the thread cache, inside its pop window, below) raises busy first, and the calls that are
 * not free's page push (free_fast) then wait while a taker is at work.
 * Plain adds in the release build (the taker's fence orders them); atomic
 * ones in the TSan build, where the release of the last decrement is what
 * the taker's acquire pairs with. */
#ifdef EBB_TSAN
#define owner_busy_add(n) __atomic_fetch_add(&owner_tls.busy, (uint32_t)(n), __ATOMIC_ACQ_REL)
#else
#define owner_busy_add(n) (owner_tls.busy += (uint32_t)(n))
#endif
EBB_INLINE void owner_busy_inc(void) {
  owner_busy_add(1);
  __asm__ volatile("" ::: "memory");
}
EBB_INLINE void owner_busy_dec(void) {
  __asm__ volatile("" ::: "memory");
  owner_busy_add(-1);
}
/* free's fast path marks its window (from before it reads the free key to
 * after its page push) with plain stores of 1 and 0 to a flag of its own,
 * not with busy's add and subtract: back-to-back frees chained each add on
 * the previous free's subtract through store forwarding, two dependent
 * read-modify-writes a free that mimalloc's free does not have (perf on
 * mimalloc-bench's glibc-simple put a quarter of free's samples on them).
 * The window never nests: nothing inside it calls free (a signal handler
 * that frees during a free is outside what malloc allows). The taker
 * requires both busy and freeing to read 0. */
#ifdef EBB_TSAN
#define free_window_set(v) __atomic_store_n(&owner_tls.freeing, (uint32_t)(v), __ATOMIC_SEQ_CST)
#else
#define free_window_set(v) (*(volatile uint32_t *)&owner_tls.freeing = (uint32_t)(v))
#endif
EBB_INLINE void free_window_open(void) {
  free_window_set(1);
  __asm__ volatile("" ::: "memory");
}
EBB_INLINE void free_window_close(void) {
  __asm__ volatile("" ::: "memory");
  free_window_set(0);
}
/* malloc's pops (malloc_fast, malloc_slow: arena_pop_src, outside busy)
 * mark their window the same way in a->popping, from before they read the
 * class's source list to after the pop: a taker swaps the sources of an idle
 * owner for an empty list, fences, and takes the current pages and the
 * thread cache only if this reads 0 (arena_take_sources). */
#ifdef EBB_TSAN
#define pop_window_set(a, v) __atomic_store_n(&(a)->popping, (uint32_t)(v), __ATOMIC_SEQ_CST)
#else
#define pop_window_set(a, v) (*(volatile uint32_t *)&(a)->popping = (uint32_t)(v))
#endif
EBB_INLINE void pop_window_open(arena_t *a) {
  pop_window_set(a, 1);
  __asm__ volatile("" ::: "memory");
}
EBB_INLINE void pop_window_close(arena_t *a) {
  __asm__ volatile("" ::: "memory");
  pop_window_set(a, 0);
}
/* The heavy debug build stretches one window in 64 (free's or malloc's) by
 * about a microsecond, as a preemption inside it would, so that the stress
 * tests (test_reclaim's race of the owner's own mallocs and frees with forced
 * reclaims) can see a taker that does not wait for it: the window is
 * otherwise a few instructions, and a taker's membarrier outlasts it. Nothing
 * in the release build. */
EBB_INLINE void window_stretch(void) {
  if (EBB_DEBUG < 2) return;
  static __thread unsigned n;
  if (++n % 64 != 0) return;
  for (int i = 0; i < 4000; i++) __asm__ volatile("" ::: "memory");
}
void arena_wait_reclaim(arena_t *a); /* until the taker of a's pages is done */
/* a: the calling thread's arena (arena_none's never has a taker). */
EBB_INLINE void owner_enter(arena_t *a) {
  owner_busy_inc();
  if (unlikely(__atomic_load_n(&a->reclaiming, __ATOMIC_ACQUIRE))) arena_wait_reclaim(a);
}
EBB_INLINE void owner_leave(void) { owner_busy_dec(); }
/* What class c's mallocs pop from, and setting it (every slot of the class). */
EBB_INLINE freelist_t *arena_src(const arena_t *a, unsigned c) { return relaxed_load(a->src[class_src_lo[c]]); }
EBB_INLINE void arena_set_src(arena_t *a, unsigned c, freelist_t *fl) {
  unsigned s = class_src_lo[c], n = class_src_n[c];
  ebb_assert(n >= 1 && n <= 4);
  for (unsigned i = 0; i < n; i++) relaxed_store(a->src[s + i], fl);
}
/* tc[c].direct = pg, and src too unless the thread cache is the source. */
EBB_INLINE void arena_set_direct(arena_t *a, unsigned c, page_t *pg) {
  a->tc[c].direct = pg;
  if (arena_src(a, c) != &a->tc[c].fl) arena_set_src(a, c, &pg->fl);
}
extern page_t page_empty; /* tc[c].direct points here while a class has no page */

#define TICK_FREES 64              /* slow-path events (refills, retirements, cache flushes) between clock reads */
#define TCACHE_BYTES 65536         /* per class, the most a thread cache holds (in blocks: at most TCACHE_BLOCKS) */
#define TCACHE_BLOCKS 1024
#define TCACHE_MIN_BLOCKS 4        /* a class whose blocks fit fewer times than this in it caches one block (none above TCACHE_BYTES) */
#define TC_SERVER_FREES 256        /* other threads' blocks freed between decay passes that make a thread cache its own */
#define GLOBAL_CHECK_MS 4          /* the global purge runs at most this often */
#define PASS_PAGES 256             /* pages one bounded purge pass examines on a thread's own time */
#define BACKGROUND_PASS_PAGES 4096 /* the same for the background thread, off the request path */

arena_t *arena_new(int state); /* NULL when out of memory */
/* Takes an arena in state `from` (ABANDONED: adopted whole, pages and all). */
arena_t *arena_claim(int from, int to);
/* Its thread exited: cached blocks go home, the arena becomes adoptable. */
void arena_abandon(arena_t *a);
/* Its thread is leaving: from here on no other thread reads or swaps the
 * thread's owner_tls for it (arena_reclaim_queues_locked). */
void arena_forget_owner(arena_t *a);
void arena_destroy(arena_t *a);
void arena_reset_blocks(arena_t *a); /* ebb_arena_reset */
/* Applies EBB_DIRTY_MAX (and EBB_DECAY_MS=0): memory kept outside arenas
 * goes first, then arenas' (this thread's first). No arena lock held. */
void arena_enforce_cap(void);
/* After active memory grew (a new page, a large block): the auto cap
 * shrinks with it (decay.h), so dirty memory beyond it is purged. Cheap when
 * under the cap. No arena lock held. */
void arena_cap_after_growth(void);
/* The dirty bytes the cap allows right now (pooled chunks and cached large
 * blocks included): EBB_DIRTY_MAX, or for auto its room plus the fall from the
 * recent peak. For EBB_STATS. */
size_t arena_dirty_limit(void);
/* fork: every arena lock (and the chunk pool's) is taken before and released
 * after; in the child, other threads' arenas are orphaned. */
void arena_lock_all(void);
void arena_unlock_all(void);
void arena_fork_child(void);
/* The background thread's pass over every arena. */
void arena_purge_background(uint64_t now);
void *arena_malloc_slow(arena_t *a, unsigned cls, size_t size);
/* A block of class cls (a size that is a multiple of the unit and of align)
 * at a multiple of align, UNIT_SIZE < align <= MAX_CHUNK_ALIGN; NULL when the
 * kernel refuses memory. */
void *arena_malloc_aligned(arena_t *a, unsigned cls, size_t align);
void arena_free_local_slow(arena_t *a, page_t *pg);
void arena_free_remote(arena_t *owner, page_t *pg, block_t *b);
/* A free by thread arena a of another arena's checked block b of pg into a's
 * thread cache, setting the class's cache up first, or sending the older half
 * of a full one home; false (nothing done) when b may not be cached: no arena,
 * pg's tc_off is TC_NONE's, or its blocks are too big for the cache. */
bool arena_free_cached(arena_t *a, page_t *pg, block_t *b);
void arena_tick(arena_t *a);
/* A slow-path event of the owner's: true when its clock is due (then
 * arena_tick). Relaxed (plain on x86): passes read the count to tell an owner
 * at work from an idle one (owner_idle_for). */
EBB_INLINE bool tick_due(arena_t *a) {
  int32_t t = relaxed_load(a->tick) - 1;
  relaxed_store(a->tick, t);
  return t < 0;
}
/* Purges what has decayed everywhere (force: everything). Returns bytes. */
size_t arena_purge_all(bool force);
void arena_stats_sum(size_t *mapped, size_t *active, size_t *dirty, size_t *purged, size_t *allocated,
                     uint64_t *count);
bool arena_is_valid(arena_t *a);
/* High-water marks of mapped, active and dirty bytes (all memory, not one
 * arena's), recorded by arena_note_peaks (with the time, or 0 when none is at
 * hand: the auto cap's recent peak then keeps its window), and of live bytes
 * (sampled). */
void arena_note_peaks(uint64_t now);
void arena_peaks(size_t *mapped, size_t *active, size_t *dirty, size_t *live);
/* The peak of bytes in live blocks is sampled: by every ebb_stats call (note)
 * and by the background thread's passes (sample: a sum over every arena). */
void arena_note_live_peak(size_t live);
void arena_sample_live_peak(void);
/* Per size class, over every arena: pages, live blocks (handed out, or
 * freed by another thread and not yet collected), their bytes (a colored
 * one-block page's block is its class's size less the color), bytes of their
 * spans. */
typedef struct {
  uint64_t pages, blocks, live_bytes, span_bytes;
} class_stat_t;
void arena_class_stats(class_stat_t out[NCLASSES]);
/* Decay pass over one arena at time now; exclusive: the caller owns its pages. */
size_t arena_decay(arena_t *a, uint64_t now, bool exclusive, bool force, unsigned pages);

/* Pops the first free block of class c's current page, or NULL (first-class
 * arenas: they have no cache). */
EBB_INLINE void *arena_pop_page(arena_t *a, unsigned c) { return page_pop(a->tc[c].direct); }

/* Source slot s's list was empty: the page's next block (bumped), or, when
 * the thread cache was the source, its page's first after moving the source
 * back to the page; NULL when there is none either. */
void *arena_pop_empty(arena_t *a, unsigned c);

/* Pops the first block of source slot s's list: the thread cache's newest
 * while it holds blocks, else the current page's first; NULL when that list
 * is empty (the caller then runs arena_pop_empty). */
EBB_INLINE void *arena_pop_src(arena_t *a, unsigned s) {
  /* acquire: a taker's last stores to the lists come before the sources it
   * puts back (arena_take_sources); a plain load on x86 */
  freelist_t *fl = __atomic_load_n(&a->src[s], __ATOMIC_ACQUIRE);
  block_t *b = fl->free;
  if (unlikely(b == NULL)) return NULL;
  track_open(b, sizeof *b);
  fl->free = b->next;
  relaxed_store(b->cookie, 0);
  owner_add(fl->used, 1);
  track_malloc(b, class_info[src_class(s)].size, false);
  return b;
}

/* The same, and when the list is empty, the page's next block (bumped) or,
 * when the thread cache was the source, its page's first; NULL when there is
 * none either (past what the page can bump). The pop that finds the cache
 * empty moves the source to the page, off the path of every other pop. */
EBB_INLINE void *arena_pop_slot(arena_t *a, unsigned s) {
  void *b = arena_pop_src(a, s);
  return likely(b != NULL) ? b : arena_pop_empty(a, src_class(s));
}

EBB_INLINE void *arena_pop(arena_t *a, unsigned c) { return arena_pop_slot(a, class_src_lo[c]); }

EBB_INLINE void *arena_malloc(arena_t *a, size_t size) {
  unsigned c = size_class(size);
  void *b = arena_pop(a, c);
  return likely(b != NULL) ? b : arena_malloc_slow(a, c, size);
}

/* A free by the owner, on the fast path (the page is neither full, purged
 * nor unused), of b onto its page's list; true when that emptied the page
 * (the caller then runs arena_free_local_slow). */
EBB_INLINE bool arena_page_push_emptied(page_t *pg, block_t *b, uint64_t cookie) {
  ebb_assert(pg->used > 0 && pg->cls < NCLASSES && !relaxed_load(pg->slow_free));
  track_free(b);
  page_push_cookie(pg, b, cookie);
  return unlikely(owner_add(pg->used, -1) == 0);
}
EBB_INLINE void arena_page_push(arena_t *a, page_t *pg, block_t *b, uint64_t cookie) {
  if (arena_page_push_emptied(pg, b, cookie)) arena_free_local_slow(a, pg);
}

/* arena_free_local_slow, then free_window_close: the end of free's page push
 * when the page emptied. */
void arena_free_local_slow_leave(arena_t *a, page_t *pg);

/* The same for a page that is full, purged or unused (arena.c). */
void arena_return_slow(arena_t *a, page_t *pg, block_t *b);

/* b, free to the program now, onto class t's cache slot tc (&a->tc[t]), which
 * has room; the class's mallocs take from the slot next. */
EBB_INLINE void tcache_push(arena_t *a, unsigned t, tcache_t *tc, block_t *b, uint64_t cookie) {
  track_free(b);
  freelist_push(&tc->fl, b, cookie);
  relaxed_store(tc->fl.used, relaxed_load(tc->fl.used) - 1);
  arena_set_src(a, t, &tc->fl);
}

/* A free by the owner of its own checked block b (cookie: page_cookie(b)) of
 * a full page pg into its class's thread-cache slot while that slot is empty;
 * false (nothing done) when it is not, or pg is not full. The thread's own
 * blocks skip the cache (arena_free_cached) except here. A page of 512 B-64
 * KiB blocks holds 2-128 of them, so a thread that keeps many of one size
 * live and replaces one at a time found the page full at nearly every malloc
 * (marked full, the next page taken off the queue) and unmarked it at nearly
 * every free (the arena's lock, back onto the queue): callgrind, bench/loop
 * with one size, 512 B 475 instructions a pair, 1024 B 621, 2048-16384 B
 * 590, tcmalloc 88 with its thread cache. The block waits in the slot
 * instead, its page stays full, and the class's next malloc takes it back.
 * Only into an empty slot and only from a full page, so a teardown sends at
 * most one block a class the slow way, and an idle thread holds at most one
 * block a class more than before. No owner_enter: the slot is the thread's
 * alone, and a block in it counts as handed out on its page whatever a taker
 * does to the page meanwhile (full is read as a hint). A free into the slot
 * is a slow-path event (it may be all a thread does). Classes of 16-64 KiB,
 * cached before not at all, hold this one block (tcache_setup). */
EBB_INLINE bool arena_cache_own_full(arena_t *a, page_t *pg, block_t *b, uint64_t cookie) {
  size_t off = relaxed_load(pg->tc_off);
  tcache_t *tc = (tcache_t *)((char *)a->tc + off);
  if (tc->fl.free != NULL || relaxed_load(tc->fl.used) <= 1 || !relaxed_load(pg->full)) return false;
  tcache_push(a, TC_OF(off), tc, b, cookie);
  if (unlikely(tick_due(a))) arena_tick(a);
  return true;
}

/* A block of the owner's, already free to memcheck, back on its page's list. */
EBB_INLINE void arena_return_local(arena_t *a, page_t *pg, block_t *b) {
  ebb_assert(relaxed_load(pg->used) > 0 && pg->cls < NCLASSES);
  if (unlikely(relaxed_load(pg->slow_free))) { /* full pages: another thread may be purging it (arena_reclaim_locked) */
    arena_return_slow(a, pg, b);
    return;
  }
  page_push_local(pg, b);
  if (unlikely(owner_add(pg->used, -1) == 0)) arena_free_local_slow(a, pg);
}

/* Any free by the owner (the slow path's). */
EBB_INLINE void arena_free_local(arena_t *a, page_t *pg, block_t *b) {
  track_free(b);
  arena_return_local(a, pg, b);
}
#endif
