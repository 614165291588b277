/* arena.c — owns arenas: their page queues and slow paths, abandonment and
 * adoption, locking across fork, and applying the decay policy.
 * May call: chunk, page, decay, huge, os (memory and clock only).
 * Must never: take a lock on the fast paths, touch another live thread's pages
 * (only its chunks' unit bitmaps, under its lock), or call into libc beyond os.c. */
#include "arena.h"
#include "huge.h"
#include "os.h"
#include "registry.h"

page_t page_empty;
arena_t arena_none = {.tc = {[0 ... NCLASSES - 1] = {.direct = &page_empty}}, .held_cls = NCLASSES,
                      .src = {[0 ... NSRC - 1] = &page_empty.fl}};
__thread arena_t *arena_tls __attribute__((tls_model("initial-exec"))) = &arena_none;
__thread owner_tls_t owner_tls __attribute__((tls_model("initial-exec"))) = {.free_key = (uintptr_t)&arena_none};

static _Atomic(arena_t *) arenas_all;    /* every arena ever made */
static atomic_size_t dirty_total;        /* sum of arenas' dirty bytes, for the cap */
static atomic_size_t mapped_total;       /* sum of arenas' mapped bytes */
static atomic_size_t peak_mapped, peak_active, peak_dirty; /* high-water marks, for ebb_stats */
static atomic_size_t peak_live;          /* highest bytes in live blocks seen when sampled */
static atomic_size_t active_total;       /* sum of arenas' active bytes, for a % cap */
static _Atomic uint64_t last_global;     /* when the global purge last ran */
static _Atomic uint64_t last_lend;       /* when a thread last looked for idle threads' memory (lend_idle_arenas) */
/* The peak of active bytes over at least the last RECENT_PEAK_DECAYS decay
 * times (at most three times that), for the auto cap (decay.h): the peak of
 * the window that began at recent_since, and of the window before it.
 * Several decay times, not one: a structure rebuilt while its teardown's pages
 * are still dirty reuses them for as long as the rebuild takes (bench/heap
 * 512M, 3 cycles: with one decay time, a rebuild that ran past the end of the
 * peak's window purged 50 MiB of its own teardown, 25 faults a MiB). The age
 * of dirty memory stays bounded by decay itself. */
#define RECENT_PEAK_DECAYS 4
static atomic_size_t recent_peak_cur, recent_peak_prev;
static _Atomic uint64_t recent_since;
static atomic_size_t pool_purged;        /* bytes purged from pooled chunks, cumulative */

/* ------------------------------------------------------------ page queues */

static void queue_remove(arena_t *a, page_t *pg) {
  pqueue_t *q = &a->queues[pg->cls];
  if (unlikely(a->scan_page == pg)) a->scan_page = pg->next; /* the pass resumes after it */
  if (pg->prev)
    pg->prev->next = pg->next;
  else
    q->first = pg->next;
  if (pg->next)
    pg->next->prev = pg->prev;
  else
    q->last = pg->prev;
  pg->next = pg->prev = NULL;
  if (a->tc[pg->cls].direct == pg) arena_set_direct(a, pg->cls, &page_empty);
}

static void queue_push_front(arena_t *a, page_t *pg) {
  pqueue_t *q = &a->queues[pg->cls];
  pg->prev = NULL;
  pg->next = q->first;
  if (q->first)
    q->first->prev = pg;
  else
    q->last = pg;
  q->first = pg;
}

static void queue_push_back(arena_t *a, page_t *pg) {
  pqueue_t *q = &a->queues[pg->cls];
  pg->next = NULL;
  pg->prev = q->last;
  if (q->last)
    q->last->next = pg;
  else
    q->first = pg;
  q->last = pg;
}

static void page_update_slow_flag(page_t *pg) { page_set_slow(pg, pg->full || pg->purged); }

/* A page off its queue (or never on one) marked full, its xfree flag already
 * set: frees take the slow path. */
static void page_flag_full(page_t *pg) {
  page_set_slow(pg, true);
  /* last, and a release: a thread that finds the page on remote_pages with
   * full set (arena_reclaim_locked) sees it off the queue and not direct,
   * and every used++ before it */
  __atomic_store_n(&pg->full, 1, __ATOMIC_RELEASE);
}

/* Takes a page off its queue when nothing in it is free. The flag goes into
 * xfree with one CAS, so the remote thread that next frees into the page
 * learns it must hand the page back (mimalloc's delayed-free idea). Returns
 * true if remote frees arrived instead and the page is usable after all. */
static bool page_mark_full(arena_t *a, page_t *pg) {
  if (pg->remote_pending) return page_refill(pg);
  uintptr_t expected = atomic_load_explicit(&pg->xfree, memory_order_relaxed) & XFREE_WATCH; /* empty: 0 or WATCH */
  if (!atomic_compare_exchange_strong_explicit(&pg->xfree, &expected, XFREE_FULL, memory_order_acq_rel,
                                               memory_order_relaxed))
    return page_refill(pg);
  queue_remove(a, pg);
  page_flag_full(pg);
  return false;
}

static void page_unmark_full(arena_t *a, page_t *pg) {
  uintptr_t expected = XFREE_FULL;
  if (!atomic_compare_exchange_strong_explicit(&pg->xfree, &expected, 0, memory_order_acq_rel,
                                               memory_order_relaxed))
    pg->remote_pending = 1; /* a remote free cleared the flag and pushed the page */
  pg->full = 0;
  page_update_slow_flag(pg);
  queue_push_back(a, pg);
}

static size_t page_retire_locked(arena_t *a, page_t *pg, uint64_t since);

/* The one-block page a thread's own free just emptied (a->one_spare): kept,
 * its block free on its list, for the next malloc of a one-block class, in
 * place of the last one kept (which goes back to its chunk). A thread that
 * allocated and freed one such block in turn (a 100 KB-2 MiB buffer a
 * request, realloc between 100 B and 100 KB) gave the span back to its chunk
 * and took it again every time, under the lock, with the chunk's bitmaps,
 * the clock and the peak and cap bookkeeping: about 1200 instructions and 100
 * ns a pair (callgrind and wall time, a loop of malloc/free of 262145 B),
 * where glibc took 15 ns and tcmalloc 3.5 at 64 KiB (a probe's table, in
 * docs/benchmarks.md). Only one page, only a thread arena's, none with
 * EBB_DECAY_MS=0; the owner's decay pass gives it back once it has sat there
 * for the decay time (one_spare_decay), and so do passes over an idle,
 * orphaned or abandoned arena (one_spare_give_back), each after taking it
 * with one exchange, as the owner's malloc does (one_spare_take), so that
 * exactly one of them has it. Caller holds a->lock; pg is empty and off every
 * list. */
static bool one_spare_keep(arena_t *a, page_t *pg) {
  if (opt.decay_ms == 0 || a != arena_tls) return false;
  page_t *old = shared_xchg(&a->one_spare, pg);
  if (old) page_retire_locked(a, old, 0);
  return true;
}

/* The kept page, if it is of class cls and its block holds size bytes or,
 * for an aligned block (step > 1), the page is not colored and starts at a
 * multiple of step units (page_new_one), for the caller (its owner) alone. */
static page_t *one_spare_take(arena_t *a, unsigned cls, unsigned step, size_t size) {
  page_t *pg = atomic_load_explicit(&a->one_spare, memory_order_relaxed);
  /* Relaxed loads: until the exchange below, another thread's pass may take
   * the page and give it back to its chunk (global_purge), rewriting cls as
   * this reads it (found by ThreadSanitizer in CI: xthread::random_exchange,
   * reproduced with EBB_DECAY_MS=1). What is read then is stale but only
   * decides whether to try; the exchange finds NULL and nothing is used. Only
   * the owner puts a page here, so an exchange that returns pg returns it
   * untouched since these loads. */
  if (!pg || relaxed_load(pg->cls) != cls) return NULL;
  if (step > 1 ? relaxed_load(pg->color) || ((uintptr_t)relaxed_load(pg->start) & ((size_t)step * UNIT_SIZE - 1)) != 0
               : relaxed_load(pg->block_size) < size)
    return NULL;
  return shared_xchg(&a->one_spare, NULL);
}

/* Gives the kept page back to its chunk: by its owner as any retired page,
 * by another thread (an idle, orphaned or abandoned arena's pass) dirty since
 * `since`, without the owner's clock and bookkeeping (as
 * arena_reclaim_queues_locked gives pages back). Caller holds a->lock. */
static void page_give_back_locked(arena_t *a, page_t *pg, uint64_t since);
static void one_spare_give_back_locked(arena_t *a, bool owner, uint64_t since) {
  page_t *pg = atomic_exchange_explicit(&a->one_spare, NULL, memory_order_acq_rel);
  a->one_spare_seen = NULL;
  if (!pg) return;
  if (owner)
    page_retire_locked(a, pg, 0);
  else
    page_give_back_locked(a, pg, since);
}

/* The decay pass's look at the kept page: the owner's gives it back once the
 * same page has sat there for the decay time (a page in steady use is then
 * taken anew once a decay time: a few hundred instructions); a forced pass
 * (trim) and a pass over another thread's arena give it back at once.
 * Caller holds a->lock. */
static void one_spare_decay_locked(arena_t *a, uint64_t now, bool force) {
  page_t *pg = atomic_load_explicit(&a->one_spare, memory_order_relaxed);
  if (!pg) {
    a->one_spare_seen = NULL;
  } else if (force || a != arena_tls) {
    one_spare_give_back_locked(a, a == arena_tls, force ? now : relaxed_load(a->now));
  } else if (pg != a->one_spare_seen) {
    a->one_spare_seen = pg;
    a->one_spare_seen_at = now;
  } else if (now - a->one_spare_seen_at >= (uint64_t)opt.decay_ms) {
    one_spare_give_back_locked(a, true, 0);
  }
}

/* A block of the owner's for a page that is full, purged or unused: under the
 * arena's lock, because a full page is the one kind of page of a live thread
 * another thread may take over (arena_reclaim_locked), and this is how the
 * owner writes to one. A full page goes back on its queue; a full page of one
 * block goes back to its chunk. */
void arena_return_slow(arena_t *a, page_t *pg, block_t *b) {
  spin_lock(&a->lock);
  bool one = false; /* a full page of one block, its flag taken back: the span goes back below */
  if (pg->full && page_is_one_block(pg)) {
    uintptr_t expected = XFREE_FULL;
    one = atomic_compare_exchange_strong_explicit(&pg->xfree, &expected, 0, memory_order_acq_rel,
                                                  memory_order_relaxed);
    /* Another thread's free put the page's only block on its remote list
     * after this free's checks found it live: the same block, freed twice at
     * once. Pushed here as well, it would be handed out twice (found by a
     * probe: two threads freeing one 300000 B block, 68 runs in 1000). */
    if (!one && XFREE_HEAD(expected)) {
      spin_unlock(&a->lock);
      ebb_fatal("free", "double free", b);
    }
  }
  page_push_local(pg, b);
  owner_add(pg->used, -1);
  if (one) {
    /* as arena_free_local_slow would send it, but without a trip onto the
     * queue and a second turn of the lock */
    pg->full = 0;
    if (!one_spare_keep(a, pg)) page_retire_locked(a, pg, 0);
    spin_unlock(&a->lock);
    if (unlikely(tick_due(a))) arena_tick(a);
    return;
  }
  if (pg->full) page_unmark_full(a, pg);
  spin_unlock(&a->lock);
  arena_free_local_slow(a, pg);
}

static void page_uncolor(page_t *pg);

/* Full pages that received remote frees come back to their queues. */
static void arena_drain_remote(arena_t *a) {
  if (!atomic_load_explicit(&a->remote_pages, memory_order_relaxed)) return;
  a->remote_seen = 0; /* what waits from now on is timed afresh (owner_reclaim_remote) */
  page_t *pg = atomic_exchange_explicit(&a->remote_pages, NULL, memory_order_acquire);
  while (pg) {
    page_t *next = pg->remote_next;
    pg->remote_pending = 0;
    if (pg->full) {
      pg->full = 0;
      if (pg->color) page_uncolor(pg); /* its block, freed by another thread, would serve any size */
      page_update_slow_flag(pg);
      queue_push_back(a, pg);
    }
    pg = next;
  }
}

/* ------------------------------------------------------------ spans */

static void dirty_add(arena_t *a, ptrdiff_t d) {
  plain_add(&a->dirty, (size_t)d);
  shared_add(&dirty_total, (size_t)d);
}

/* An arena's chunks are on two lists, a->chunks (those with a free unit) and
 * a->chunks_full, so a span or a purge never walks the full ones: with one
 * list, a growing 2 GB heap of 1 KiB blocks (500 chunks) walked every chunk
 * twice for each new page, 575 ns a malloc against glibc's 400 (the walk was
 * a third of the time). Caller holds a->lock. */
static void chunk_list_remove(chunk_t **head, chunk_t *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    *head = c->next;
  if (c->next) c->next->prev = c->prev;
}

static void chunk_list_push(chunk_t **head, chunk_t *c) {
  c->prev = NULL;
  c->next = *head;
  if (*head) (*head)->prev = c;
  *head = c;
}

/* The heavy debug build's check of that split. */
__attribute__((unused)) static bool chunk_lists_valid(const arena_t *a) {
  for (const chunk_t *c = a->chunks; c; c = c->next)
    if (!c->free_count || (c->next && c->next->prev != c)) return false;
  for (const chunk_t *c = a->chunks_full; c; c = c->next)
    if (c->free_count || (c->next && c->next->prev != c)) return false;
  return true;
}

static void chunk_list_move(chunk_t **from, chunk_t **to, chunk_t *c) {
  chunk_list_remove(from, c);
  chunk_list_push(to, c);
}

/* After a span was taken from c (its dirty units were dirty_before): the
 * resident units it took stop counting as dirty, and a chunk with no free unit
 * left goes to the full list. */
static void span_taken(arena_t *a, chunk_t *c, uint64_t dirty_before) {
  dirty_add(a, -(ptrdiff_t)((size_t)popcount64(dirty_before & ~c->dirty_units) * UNIT_SIZE));
  if (!c->free_count) chunk_list_move(&a->chunks, &a->chunks_full, c);
}

/* The span of units at pg in c if all of them are free, taken and accounted
 * (span_taken); NULL otherwise. */
static page_t *take_span_at_locked(arena_t *a, chunk_t *c, page_t *pg, unsigned units) {
  uint64_t dirty_before = c->dirty_units;
  page_t *got = chunk_take_span_at(c, pg, units);
  if (got) span_taken(a, c, dirty_before);
  return got;
}

static void note_max(atomic_size_t *peak, size_t v) {
  size_t old = atomic_load_explicit(peak, memory_order_relaxed);
  while (v > old && !atomic_compare_exchange_weak_explicit(peak, &old, v, memory_order_relaxed, memory_order_relaxed))
    ;
}

/* Active bytes at `now` (a clock reading, maybe a stale one, or 0: none)
 * into the recent peak. A window ends on the first note a window's length after
 * it began, so with late notes the peak is kept longer, never shorter; and the
 * auto cap's room is bounded by age anyway, since decay purges whatever has
 * been dirty for the decay time. Racing notes may lose a maximum to a window
 * change: the cap is then a little tighter for a while, never looser. */
static void note_recent_peak(size_t active, uint64_t now) {
  uint64_t since = atomic_load_explicit(&recent_since, memory_order_relaxed);
  uint64_t len = opt.decay_ms ? (uint64_t)opt.decay_ms * RECENT_PEAK_DECAYS : 1;
  if (!since && now) { /* the first window starts at the first note with a time */
    atomic_compare_exchange_strong_explicit(&recent_since, &since, now, memory_order_relaxed,
                                            memory_order_relaxed);
  } else if (now >= since + len &&
             atomic_compare_exchange_strong_explicit(&recent_since, &since, now, memory_order_relaxed,
                                                     memory_order_relaxed)) {
    size_t prev = atomic_exchange_explicit(&recent_peak_cur, active, memory_order_relaxed);
    atomic_store_explicit(&recent_peak_prev, now - since < 2 * len ? prev : 0, memory_order_relaxed);
  }
  note_max(&recent_peak_cur, active);
}

static size_t recent_peak(void) {
  size_t cur = atomic_load_explicit(&recent_peak_cur, memory_order_relaxed);
  size_t prev = atomic_load_explicit(&recent_peak_prev, memory_order_relaxed);
  return cur > prev ? cur : prev;
}

/* Called on the slow paths that grow mapped, active or dirty memory, with
 * the time if known (0: none). */
void arena_note_peaks(uint64_t now) {
  size_t huge = huge_in_use_bytes(), cached = huge_dirty_bytes();
  note_max(&peak_mapped, atomic_load_explicit(&mapped_total, memory_order_relaxed) + chunk_pool_warm_bytes() +
                             huge_active_bytes() + huge_cache_bytes());
  size_t active = atomic_load_explicit(&active_total, memory_order_relaxed) + huge;
  note_max(&peak_active, active);
  note_recent_peak(active, now);
  note_max(&peak_dirty, atomic_load_explicit(&dirty_total, memory_order_relaxed) + chunk_pool_dirty() + cached);
}

void arena_peaks(size_t *mapped, size_t *active, size_t *dirty, size_t *live) {
  arena_note_peaks(0);
  *mapped = atomic_load_explicit(&peak_mapped, memory_order_relaxed);
  *active = atomic_load_explicit(&peak_active, memory_order_relaxed);
  *dirty = atomic_load_explicit(&peak_dirty, memory_order_relaxed);
  *live = atomic_load_explicit(&peak_live, memory_order_relaxed);
}

void arena_note_live_peak(size_t live) { note_max(&peak_live, live); }

/* Every byte the cap counts: arenas' free units, pooled chunks, cached large blocks. */
static size_t dirty_all(void) {
  return atomic_load_explicit(&dirty_total, memory_order_relaxed) + chunk_pool_dirty() + huge_dirty_bytes();
}

static size_t dirty_limit(void) {
  return decay_dirty_limit(opt.dirty_max,
                           atomic_load_explicit(&active_total, memory_order_relaxed) + huge_in_use_bytes(),
                           recent_peak());
}

/* Memory kept outside any arena goes first when the cap is exceeded: pooled
 * chunks (oldest first), then cached large blocks (oldest first). Returns
 * what is still over the cap. */
static size_t cap_excess_outside_arenas(void) {
  size_t all = dirty_all(), limit = dirty_limit();
  if (all <= limit) return 0;
  size_t excess = all - limit, got = chunk_pool_decay(UINT64_MAX, excess);
  atomic_fetch_add_explicit(&pool_purged, got, memory_order_relaxed);
  if (got < excess) got += huge_cache_trim(excess - got);
  return got < excess ? excess - got : 0;
}

static size_t purge_oldest_locked(arena_t *a, size_t need);

/* Purges up to `excess` bytes of a's oldest dirty units unless its lock is
 * taken; returns what is left to purge. */
static size_t cap_purge_arena(arena_t *a, size_t excess) {
  if (!atomic_load_explicit(&a->dirty, memory_order_relaxed) || !spin_trylock(&a->lock)) return excess;
  size_t got = purge_oldest_locked(a, excess);
  spin_unlock(&a->lock);
  return got < excess ? excess - got : 0;
}

/* What is over the cap after the memory outside arenas went comes out of the
 * arenas: this thread's first, then the others' (each under its lock, skipping
 * one that is busy), oldest first within each, and an eighth of the cap more
 * so that a thread mapping afresh page after page purges in batches. With a
 * fixed cap a free alone takes dirty memory over it (arena_page_retire); the
 * auto cap also shrinks as active memory grows, so a thread that builds afresh
 * while another's teardown sits dirty purges the other's. */
void arena_enforce_cap(void) {
  if (opt.decay_ms == 0) {
    atomic_fetch_add_explicit(&pool_purged, chunk_pool_decay(UINT64_MAX, SIZE_MAX), memory_order_relaxed);
    huge_cache_decay(UINT64_MAX, SIZE_MAX);
    return;
  }
  size_t excess = cap_excess_outside_arenas();
  if (!excess) return;
  excess += decay_cap_batch(opt.dirty_max, dirty_limit());
  arena_t *self = arena_tls != &arena_none ? arena_tls : NULL;
  if (self) excess = cap_purge_arena(self, excess);
  for (arena_t *a = atomic_load_explicit(&arenas_all, memory_order_acquire); a && excess; a = a->all_next)
    if (a != self) excess = cap_purge_arena(a, excess);
}

size_t arena_dirty_limit(void) { return dirty_limit(); }

void arena_cap_after_growth(void) {
  if (opt.decay_ms) arena_enforce_cap(); /* under the cap: two sums and a compare */
}

/* A class gets back the very span it gave up last, if still free: a request
 * loop then carves the same, still resident, memory every cycle. */
static page_t *take_last_span_locked(arena_t *a, unsigned cls, unsigned units, unsigned step) {
  page_t *pg = a->last_span[cls];
  /* an aligned span (step > 1) takes it only where it is aligned; else it stays for the class's mallocs */
  if (!pg || (step > 1 && (unsigned)(pg - chunk_of(pg)->pages) & (step - 1))) return NULL;
  a->last_span[cls] = NULL;
  chunk_t *c = chunk_of(pg);
  /* since retired (registry cleared) or reused by another arena, whose
   * chunk_new may be writing c->arena right now: relaxed */
  if (registry_get(c) != c || relaxed_load(c->arena) != a) return NULL;
  return take_span_at_locked(a, c, pg, units);
}

/* Best fit across chunks too, resident units first: the chunk whose shortest
 * run that holds the span is the shortest of all the arena's (chunk_take_span
 * says why best fit; across chunks too, the peak RSS of prover scratch went
 * from 84684 to 82632 KiB, 2063 -> 2007 faults a round, and gs's from 38452
 * to 37536 KiB), found by the arena's span index (chunk.h) without reading
 * any other chunk. An aligned span (step > 1) asks the index for the chunks
 * whose runs may hold it (span_index_aligned_best). It walked the chunk list
 * until session 38, no further than 256 chunks (found by a probe: 16,000
 * live aligned_alloc(1 MiB, 100) blocks, three a chunk, 183 us a malloc,
 * with no bound) and 32 that fit: past 256 chunks, the free runs of the
 * others went unseen: bench/loop --slots 4096 --min 65536 --max 337920
 * --aligned 100 (4096 live blocks of 64-330 KiB aligned at 128-512 KiB)
 * mapped 3.73 GB at 1928 ns a pair; with the index 1.69 GB at 164 ns. */
static page_t *take_aligned_span_locked(arena_t *a, unsigned units, unsigned step, int warm) {
  unsigned at = 0, len = 0;
  chunk_t *c = span_index_aligned_best(a->spans, units, step, warm, &at, &len);
  return c ? take_span_at_locked(a, c, &c->pages[at], units) : NULL;
}

static bool lend_idle_arenas(arena_t *self);

/* step: the span's first unit at a multiple of it (1: anywhere; aligned blocks, arena_malloc_aligned) */
static page_t *take_span_locked(arena_t *a, unsigned cls, unsigned units, unsigned step) {
  ebb_assert_expensive(chunk_lists_valid(a));
  page_t *last = take_last_span_locked(a, cls, units, step);
  if (last) return last;
  for (int warm = 1; warm >= 0; warm--) {
    /* No resident units here fit: a warm pooled chunk (another arena's empty
     * one, or a destroyed arena's) before units of this arena's that decay
     * returned to the kernel, which fault in again. Threads taking turns at a
     * structure with idle time between (bench/turns idle100) each used their
     * own purged units while the previous job's memory sat in the pool, still
     * resident, until decay purged it too. */
    if (!warm && (chunk_pool_warm_bytes() != 0 || (lend_idle_arenas(a) && chunk_pool_warm_bytes() != 0))) break;
    if (step > 1) {
      page_t *pg = take_aligned_span_locked(a, units, step, warm);
      if (pg) return pg;
      continue;
    }
    unsigned len = 0, at = 0;
    chunk_t *best = span_index_best(a->spans, units, warm, &len);
    if (unlikely(a->spans->waiting != NULL)) best = span_index_waiting_best(a->spans, units, warm, best, &len);
    if (!best) continue;
    ebb_assert(len == chunk_fit_len(best, units, warm));
    unsigned got = chunk_fit(best, units, 1, warm, &at); /* the index gave the chunk, its runs give the place */
    ebb_assert(got == len);
    (void)got;
    page_t *pg = take_span_at_locked(a, best, &best->pages[at], units);
    ebb_assert(pg);
    return pg;
  }
  chunk_t *c = chunk_new(a, atomic_load_explicit(&a->state, memory_order_relaxed) == ARENA_FIRST_CLASS, a->now);
  if (!c) return NULL;
  span_index_join(a->spans, c);
  dirty_add(a, (ptrdiff_t)((size_t)popcount64(c->dirty_units) * UNIT_SIZE)); /* a warm pooled chunk */
  chunk_list_push(&a->chunks, c);
  plain_add(&a->mapped, CHUNK_SIZE);
  shared_add(&mapped_total, CHUNK_SIZE);
  uint64_t dirty_before = c->dirty_units; /* a warm pooled chunk: its resident units first */
  page_t *pg = chunk_take_span(c, units, step, true);
  if (!pg) pg = chunk_take_span(c, units, step, false);
  if (pg) span_taken(a, c, dirty_before);
  return pg;
}

/* A new page of cls, its span at a multiple of step units, on no queue; one:
 * a page of one block (page_new_one), which is also where the class takes
 * its next span first (last_span: a block freed by ebb_arena_reset, or a
 * block that is freed before the class's next malloc, is in the same place). */
static void page_hold_end(arena_t *a);

static page_t *page_new_unqueued(arena_t *a, unsigned cls, unsigned step, bool one) {
  unsigned units = class_info[cls].units;
  if (a->held_cls != NCLASSES && a->held_cls != cls) page_hold_end(a); /* its span may be what this takes */
  a->bounce_n = cls == a->bounce_cls && cls == a->retired_cls ? a->bounce_n + 1 : 0; /* page_hold */
  a->bounce_cls = cls;
  a->retired_cls = NCLASSES;
  spin_lock(&a->lock);
  page_t *pg = take_span_locked(a, cls, units, step);
  if (pg && one) a->last_span[cls] = pg;
  if (pg) {
    plain_add(&a->active, units * UNIT_SIZE);
    shared_add(&active_total, units * UNIT_SIZE);
    arena_note_peaks(a->now);
  }
  spin_unlock(&a->lock);
  if (!pg) return NULL;
  arena_cap_after_growth();
  chunk_t *c = chunk_of(pg);
  page_init(pg, cls, (char *)c + ((size_t)(pg - c->pages) << UNIT_SHIFT), a,
            atomic_load_explicit(&a->state, memory_order_relaxed) == ARENA_FIRST_CLASS);
  pg->touched = a->now;
  return pg;
}

static page_t *arena_page_new(arena_t *a, unsigned cls, unsigned step) {
  page_t *pg = page_new_unqueued(a, cls, step, false);
  if (pg) queue_push_front(a, pg);
  return pg;
}

/* A new one-block page's block starts a multiple of 64 bytes into its span,
 * up to 4032, one of 64 such offsets picked by a hash of the span's address
 * (so that a span taken again, as a request's context block after
 * ebb_arena_reset, is the same place), no further than the request leaves of
 * the class's size unused; an aligned block never moves: its page's color, as
 * jemalloc's cache-oblivious large blocks have (there at random). Every such
 * block started on a unit boundary, so a program that writes a few large
 * buffers in step (the same offset in each, as an image's planes or one byte
 * per 4 KiB page) found all of their lines competing for the same few cache
 * sets: bench/bigbuf, four buffers of 1.5 MiB, one byte written a page, took
 * 4.7 us an operation against glibc's 2.5, whose blocks start wherever their
 * headers left them (jemalloc 2.8, mimalloc 4.7, tcmalloc 5.4, the last two
 * page-aligned too). The block's usable size is the class's less the color;
 * the page's stride stays the class's (page_is_block's magic). A colored page
 * never enters a thread cache (page_set_cache) and is uncolored before a
 * queue can hand its block to any request of the class (arena_drain_remote);
 * the kept page (one_spare_take) serves only a request it holds. */
#define COLOR_STEP 64
#define COLORS 64
static void page_color(page_t *pg, size_t size) {
  uint32_t slack = pg->block_size - (uint32_t)size;
  uint32_t hash = (uint32_t)((uintptr_t)pg->start >> UNIT_SHIFT) * 0x9E3779B1u; /* Fibonacci hashing */
  uint32_t c = (hash >> 26) * COLOR_STEP; /* 0 .. (COLORS - 1) steps */
  _Static_assert(COLORS == 64, "the hash's top 6 bits");
  if (c > slack) c = slack - slack % COLOR_STEP;
  if (!c) return;
  relaxed_store(pg->start, pg->start + c);
  relaxed_store(pg->block_size, pg->block_size - c);
  pg->color = (uint16_t)c;
  page_set_cache(pg);
}

/* A colored page back to its class's geometry, once its one block is free
 * (taken back from the remote list here): the next block is carved at the
 * span's start. */
static void page_uncolor(page_t *pg) {
  page_collect(pg);
  ebb_assert(pg->used == 0 && pg->color && !pg->next && !pg->prev);
  page_init(pg, pg->cls, pg->start - pg->color, pg->owner, pg->bump); /* off every list: nothing else to keep */
  pg->fresh_zero = 0; /* the block was written: what is carved again is no longer the kernel's zeroes */
}

/* The block of a new page of one block (page_is_one_block), its span at a
 * multiple of step units: the page is full from the start, on no queue and
 * never its class's current page, and the block's free by its owner gives the
 * span straight back (arena_return_slow). The general path pushed the page
 * onto its queue, made it the class's page, and took it off both again at the
 * class's next malloc, and the free put it back on the queue to take it off
 * once more (callgrind, bench/loop --min 65537 --max 524288: 1678 -> 1491
 * instructions a malloc/free pair; 524289-2097152 B: 3320 -> 3079). A page
 * that other threads freed into comes back onto its queue as any full page
 * does (arena_drain_remote), and is used from there. */
static void *page_new_one(arena_t *a, unsigned cls, unsigned step, size_t size) {
  page_t *pg = one_spare_take(a, cls, step, size); /* its block on its list (page_refill: true at once) */
  if (pg) {
    ebb_assert(pg->used == 0 && !pg->full && pg->owner == a);
    pg->touched = a->now;
  } else if (!(pg = page_new_unqueued(a, cls, step, true))) {
    return NULL;
  } else if (step == 1) {
    page_color(pg, size);
  }
  ebb_assert(page_is_one_block(pg));
  void *b = page_refill(pg) ? page_pop(pg) : NULL;
  ebb_assert(b != NULL);
  /* as page_mark_full, before any other thread can know the page */
  atomic_store_explicit(&pg->xfree, XFREE_FULL, memory_order_relaxed);
  page_flag_full(pg);
  return b;
}

/* An empty page goes back to its chunk, dirty since `since` (now, or for a page
 * found idle by a decay pass, when it was last allocated from); the cap on dirty
 * memory is enforced right here, so a burst of frees cannot pile up until the timer. */
/* A page off every list goes back to its chunk, dirty since `since`; the
 * class takes the same span first next time. Caller holds a->lock. */
static void page_give_back_locked(arena_t *a, page_t *pg, uint64_t since) {
  size_t span = page_span(pg);
  a->last_span[pg->cls] = pg;
  chunk_t *c = chunk_of(pg);
  if (!c->free_count) chunk_list_move(&a->chunks_full, &a->chunks, c); /* its first free unit */
  chunk_give_span(c, pg, since);
  plain_add(&a->active, -span);
  shared_add(&active_total, -span);
  dirty_add(a, (ptrdiff_t)span);
}

/* An empty page off every list back to its chunk. Caller holds a->lock.
 * Returns the bytes purged on the way (EBB_DECAY_MS=0, or over the cap), so
 * that a pass (ebb_trim's) counts them (found by a probe: at EBB_DECAY_MS=0,
 * ebb_trim() said 61,440 bytes where 20 MB went back). */
static size_t page_retire_locked(arena_t *a, page_t *pg, uint64_t since) {
  ebb_assert(pg->used == 0 && !pg->remote_pending && !pg->full);
  uint64_t now = os_now_ms();
  relaxed_store(a->now, now);
  page_give_back_locked(a, pg, since ? since : now);
  arena_note_peaks(now);
  if (opt.decay_ms == 0) {
    return purge_oldest_locked(a, SIZE_MAX);
  } else {
    /* An eighth of the cap below it, not just below it (decay_cap_batch): a
     * teardown far beyond the cap then purges in batches, each one scan of the
     * chunks and a few long madvise calls, instead of one of each per page
     * (bench/heap 1G: the scans were 12 % of the run; free 120 -> 43 ns). */
    size_t excess = cap_excess_outside_arenas(); /* 0 when under the cap */
    return excess ? purge_oldest_locked(a, excess + decay_cap_batch(opt.dirty_max, dirty_limit())) : 0;
  }
}

static size_t arena_page_retire(arena_t *a, page_t *pg, uint64_t since) {
  queue_remove(a, pg);
  spin_lock(&a->lock);
  size_t bytes = page_retire_locked(a, pg, since);
  spin_unlock(&a->lock);
  return bytes;
}

/* ------------------------------------------------------------ malloc / free slow paths */

static bool page_usable(arena_t *a, page_t *pg) { return page_refill(pg) || page_mark_full(a, pg); }

static void tcache_setup(arena_t *a, unsigned cls);

void *arena_pop_empty(arena_t *a, unsigned c) {
  page_t *pg = a->tc[c].direct;
  if (arena_src(a, c) == &pg->fl) return page_bump(pg);
  arena_set_src(a, c, &pg->fl); /* the thread cache ran dry: the class's page again */
  return arena_pop(a, c);
}

static void *arena_malloc_refill(arena_t *a, unsigned cls, size_t size);

/* The kernel refused a chunk: what ebb itself holds goes back first (the
 * large-block cache, every arena's dirty units, the empty chunks of abandoned
 * arenas, which chunk_new then takes from the pool), as for a large block
 * (huge_alloc_z), and the class is tried once more. Found by a probe: under
 * an address-space limit, malloc(1000) failed with ENOMEM while 248 MiB of
 * freed 8 MiB blocks sat in the large-block cache, or an exited thread's
 * arena held 235 MiB of freed small blocks (ebb_trim first: every call
 * succeeded). Not under owner_enter: the purge enters itself. */
static EBB_NOINLINE void *arena_malloc_after_purge(arena_t *a, unsigned cls, size_t size) {
  arena_purge_all(true);
  /* A first-class arena's caller is its one user (api.md): its pages, and the
   * blocks plain free() left on them, which no purge may touch, are this
   * call's to take in and give back, as for an abandoned arena (found by a
   * probe: 40 MB of an arena's blocks freed with free(), then
   * ebb_arena_malloc(a, 5000) under an address-space limit: ENOMEM at once). */
  if (atomic_load_explicit(&a->state, memory_order_relaxed) == ARENA_FIRST_CLASS)
    arena_decay(a, os_now_ms(), true, true, PASS_PAGES);
  owner_enter(arena_tls);
  void *p = arena_malloc_refill(a, cls, size);
  owner_leave();
  return p;
}

/* Under owner_enter: it takes pages off the thread's queues. */
void *arena_malloc_slow(arena_t *a, unsigned cls, size_t size) {
  owner_enter(arena_tls);
  void *p = arena_malloc_refill(a, cls, size);
  owner_leave();
  return likely(p != NULL) ? p : arena_malloc_after_purge(a, cls, size);
}

static void *arena_malloc_refill(arena_t *a, unsigned cls, size_t size) {
  if (unlikely(tick_due(a))) arena_tick(a);
  if (unlikely(a->tc_cap[cls] == 0) && a == arena_tls) tcache_setup(a, cls); /* not a first-class arena */
  page_t *pg = a->tc[cls].direct;
  if (pg == &page_empty || !page_refill(pg)) {
    arena_drain_remote(a);
    if (pg != &page_empty && !pg->full) page_mark_full(a, pg);
    page_t *next;
    for (pg = a->queues[cls].first; pg; pg = next) {
      next = pg->next; /* page_usable may take pg off the queue */
      if (page_usable(a, pg)) break;
    }
    if (!pg && class_is_one_block(cls)) return page_new_one(a, cls, 1, size);
    if (!pg && !(pg = arena_page_new(a, cls, 1))) return NULL;
    if (!page_refill(pg)) return NULL;
    ebb_assert_expensive(page_is_valid(pg));
    arena_set_direct(a, cls, pg);
    pg->touched = a->now;
  }
  return arena_malloc(a, size);
}

/* A block of class cls at a multiple of align (a power of two, UNIT_SIZE <
 * align <= MAX_CHUNK_ALIGN; the class's size a multiple of align, so that a page
 * of it is one block, at its start): a page of its own, placed at a multiple of
 * align in a chunk, and off its queue at once (full). Its free gives the span
 * back like any other multi-unit page's. Before, each such block had a mapping
 * of its own (huge.c): found by a probe, 65,530 live aligned_alloc(128 KiB,
 * 100) blocks reached vm.max_map_count, and then pthread_create failed.
 * jemalloc's extents serve large alignments from its address space the same
 * way. */
static void *arena_malloc_aligned_in(arena_t *a, unsigned cls, size_t align) {
  owner_enter(arena_tls);
  if (unlikely(tick_due(a))) arena_tick(a);
  void *b = page_new_one(a, cls, (unsigned)(align >> UNIT_SHIFT), 0);
  ebb_assert((uintptr_t)b % align == 0);
  owner_leave();
  return b;
}

void *arena_malloc_aligned(arena_t *a, unsigned cls, size_t align) {
  void *p = arena_malloc_aligned_in(a, cls, align);
  if (likely(p != NULL)) return p;
  arena_purge_all(true); /* as arena_malloc_after_purge */
  return arena_malloc_aligned_in(a, cls, align);
}

/* Whether an emptied one-unit page of at most SPARE_MAX_BLOCKS blocks (classes
 * of 1-8 KiB) that is not its class's current page stays on its queue as the
 * class's spare: while no other page among the queue's first SPARE_SCAN is
 * empty (the current one included). A class whose live blocks swing around a
 * page's capacity gave a page back on every swing and carved it afresh on the
 * next, a batch of one or two blocks a refill (bench/loop --min 1025 --max
 * 4096: 168 -> 121 instructions a pair). mimalloc keeps an emptied page a while
 * for the same reason (its retire expiration). The thread's next decay pass
 * gives a spare back (decay_page), a taker does when the thread idles, and
 * EBB_DECAY_MS=0, which asks for memory back at once, keeps none.
 *   Pages of more blocks rarely swing empty and full, and keeping them cost
 * RSS (mimalloc-bench glibc-thread, 16 B-1 KiB blocks: 2240 -> 2370 KB);
 * spans of several units cost faults (instance churn, when its blocks above 8
 * KiB fell into ~30 classes: 0.11-0.22 a request instead of 0.03). */
#define SPARE_SCAN 8
#define SPARE_MAX_BLOCKS 64
static bool page_kept_spare(arena_t *a, page_t *pg) {
  if (opt.decay_ms == 0 || pg->capacity > SPARE_MAX_BLOCKS || pg->units > 1) return false;
  unsigned n = 0;
  for (page_t *q = a->queues[pg->cls].first; q; q = q->next)
    if ((q != pg && q->used == 0) || ++n == SPARE_SCAN) return false;
  /* in use until now: the pass that gives it back dates its units from here,
   * not from when it last became the current page (they would be purged at
   * once, and fault in again: instance churn 0.03 -> 0.2 faults a request) */
  pg->touched = a->now;
  return true;
}

static void tcache_flush(arena_t *a, unsigned cls, uint32_t keep);

/* Whether the class's cache slot holds one block, the thread's own, of a page
 * below pg: the block a free into a full page left there
 * (arena_cache_own_full), which keeps that page from ever emptying. */
EBB_INLINE bool cache_holds_one_below(arena_t *a, page_t *pg) {
  tcache_t *tc = (tcache_t *)((char *)a->tc + relaxed_load(pg->tc_off));
  block_t *b = tc->fl.free;
  return b && (uintptr_t)b < (uintptr_t)pg->start && block_next(b) == NULL &&
         relaxed_load(chunk_of(b)->arena) == a;
}

/* pg, empty, becomes its class's current page in place of d (also empty, or
 * still in use and left on the queue). */
static void page_take_over(arena_t *a, page_t *pg, page_t *d) {
  arena_set_direct(a, pg->cls, pg);
  pg->touched = a->now;
  pg->empties++;
  if (d->used == 0 && !d->remote_pending && !page_kept_spare(a, d)) arena_page_retire(a, d, 0);
}

/* A loop that mallocs and frees one block of a class whose pages span several
 * units (a 64 KiB buffer and its header: 65537 B, in blocks of 80 KiB, 3 to
 * a 4-unit page) gave the span back at every free and took it again at the
 * next malloc, through the chunk's bitmaps and the lock: ~1200 instructions
 * and 100 ns a pair, where tcmalloc takes 3.5 and glibc 16 (a probe's
 * finding). Keeping every such emptied current
 * page until its decay pass instead (as one-unit pages are kept) cost
 * instance churn at 20 ms gaps 1.25 faults a request instead of 0.24 (each
 * class's page pinned its span between requests, and the next request's
 * other pages took fresh units); keeping only the one that emptied last,
 * until the arena's next span, still doubled them (0.70 against 0.24,
 * medians of 10). So only a class that bounces holds its page: once the
 * arena's last HOLD_BOUNCES spans were all the class's, each taken right
 * after its own page went back, its current page stays its page when it
 * empties (a->held_cls), until the arena takes a span for another class or
 * another of its pages empties; then it goes back (page_hold_end) unless it
 * is in use again. A request that draws its blocks from many classes never
 * gets there. glibc adapts its mmap threshold to a freed size, and mimalloc
 * keeps an emptied page for a few retirements, for the same loop.
 * EBB_DECAY_MS=0 holds none; a decay pass, ebb_trim and the passes over idle
 * and exited threads' arenas retire a held page as any empty current page. */
#define HOLD_BOUNCES 4
static bool page_hold(arena_t *a, page_t *pg) {
  if (opt.decay_ms == 0 || a->bounce_cls != pg->cls || a->bounce_n < HOLD_BOUNCES) return false;
  a->held_cls = pg->cls;
  pg->empties++; /* as any kept current page's (decay_page) */
  return true;
}

/* An emptied page going back from the free path, noted for page_hold. */
static void page_retire_noting(arena_t *a, page_t *pg) {
  a->retired_cls = pg->cls;
  arena_page_retire(a, pg, 0);
}

/* The held page goes back unless it is in use again (its class's mallocs pop
 * from it with no event here). Not while the caller works on a page of the
 * held class: that may be the held page. */
static void page_hold_end(arena_t *a) {
  unsigned c = a->held_cls;
  a->held_cls = NCLASSES;
  page_t *pg = a->tc[c].direct;
  if (pg != &page_empty && pg->units > 1 && pg->used == 0 && !pg->remote_pending && !pg->full)
    arena_page_retire(a, pg, 0);
}

/* An empty page goes back to its chunk at once unless it is its class's
 * current page or its spare (page_kept_spare) or held (page_hold); a current
 * page spanning several units goes back too, so an idle thread pins at most one single-unit page per
 * class once its decay pass has run (other threads can purge free units, never
 * a live thread's pages). Reusing the still-resident units costs a lock, not a
 * page fault.
 *   Of two one-unit pages of a class, the lower one is the class's page once
 * it is empty: it takes over from the current page when it empties below it,
 * and when the current page empties while the cache slot holds one block of a
 * page below it, that block goes home first. A request that spills from one
 * page into a second and then frees everything (instance churn) took the
 * overflow page as the class's page for the next request: it handed out the
 * few blocks the request had used, then blocks untouched since the request
 * before, while the full page's blocks, all just written, went unused until
 * the overflow page ran dry. bench/churn --gap-ms 0 --reuse 1 counted 268 KiB a
 * request of the ~820 KiB of 16-512 B blocks that the request before had not
 * touched (now 35; tcmalloc's LIFO lists 34), and the request took 6 % longer. jemalloc keeps
 * its current slab the lowest non-full one (arena_bin_lower_slab) for the
 * same reason; switching on every free into a full page, as it does, cost
 * bench/loop --min 4097 --max 8192 20 % more instructions here. */
/* What becomes of pg, just emptied (no block in use, none pending from other
 * threads); true when the class's cache slot must be flushed after (its one
 * block keeps a page below pg from emptying). The most common event first:
 * the class's current one-unit page, no page held, stays the class's page (a
 * loop that mallocs and frees a temporary block empties it at every free; a
 * 16 B pair took 106 instructions with the tests below run first, 94 now). */
static EBB_NOINLINE bool page_emptied_else(arena_t *a, page_t *pg);
EBB_INLINE bool page_emptied(arena_t *a, page_t *pg) {
  if (likely(a->tc[pg->cls].direct == pg && pg->units == 1 && a->held_cls == NCLASSES)) {
    pg->empties++; /* kept as the class's page: its decay pass tells use from disuse by this (decay_page) */
    return cache_holds_one_below(a, pg);
  }
  return page_emptied_else(a, pg);
}

/* page_emptied's other cases, out of line so the common one needs no frame. */
static EBB_NOINLINE bool page_emptied_else(arena_t *a, page_t *pg) {
  if (a->held_cls != NCLASSES && a->tc[a->held_cls].direct != pg) page_hold_end(a); /* first: it may be d */
  page_t *d = a->tc[pg->cls].direct;
  if (d != pg && d != &page_empty && pg->units == 1 && (uintptr_t)pg < (uintptr_t)d)
    page_take_over(a, pg, d);
  else if (d == pg && pg->units > 1 && page_hold(a, pg))
    ;
  else if (d != pg ? !page_kept_spare(a, pg) : pg->units > 1)
    page_retire_noting(a, pg);
  else {
    pg->empties++;
    return d == pg && cache_holds_one_below(a, pg);
  }
  return false;
}

EBB_INLINE void free_local_slow(arena_t *a, page_t *pg) {
  ebb_assert(!pg->full); /* a full page's frees take arena_return_slow, which unmarks it under the lock */
  bool flush = pg->used == 0 && !pg->remote_pending && page_emptied(a, pg);
  /* last: a decay pass may retire pg (found by UBSan: pg->cls read as
   * PAGE_UNUSED), and so may the flush (the block's page takes over) */
  if (unlikely(flush)) tcache_flush(a, TC_OF(relaxed_load(pg->tc_off)), 0);
  if (unlikely(tick_due(a))) arena_tick(a);
}

void arena_free_local_slow(arena_t *a, page_t *pg) { free_local_slow(a, pg); }

/* free's own emptied-page path, so it inlines free_local_slow (a call and a
 * frame more cost the temporary-block loop above 16 instructions a pair). */
EBB_NOINLINE void arena_free_local_slow_leave(arena_t *a, page_t *pg) {
  free_local_slow(a, pg);
  free_window_close();
}

/* Pushes the pages first..last (linked by remote_next) onto a's remote_pages. */
static void remote_pages_push(arena_t *a, page_t *first, page_t *last) {
  page_t *head = atomic_load_explicit(&a->remote_pages, memory_order_relaxed);
  do last->remote_next = head;
  while (!atomic_compare_exchange_weak_explicit(&a->remote_pages, &head, first, memory_order_release,
                                                memory_order_relaxed));
}

/* The push's rare ends, out of line: a full page back to its owner, news for
 * a taker (a page it watched, XFREE_WATCH). */
static EBB_NOINLINE void push_remote_flags(arena_t *owner, page_t *pg, uintptr_t old) {
  if (old & XFREE_FULL) remote_pages_push(owner, pg, pg); /* we cleared the flag: hand the page back to its owner */
  if (old & XFREE_WATCH) atomic_store_explicit(&owner->xfree_news, 1, memory_order_release); /* we cleared it too */
}

/* Pushes first..last, n blocks already linked and each carrying its cookie
 * (one block, or a run of one page's blocks from a thread cache), onto pg's
 * remote list with one compare-and-swap. */
EBB_INLINE void push_remote_run(arena_t *owner, page_t *pg, block_t *first, block_t *last, uint32_t n) {
  uintptr_t old = atomic_load_explicit(&pg->xfree, memory_order_relaxed);
  do {
    track_open(last, sizeof *last);
    last->next = XFREE_HEAD(old);
    track_close(last, sizeof *last);
  } while (!atomic_compare_exchange_weak_explicit(&pg->xfree, &old, XFREE_PUSHED(old, first, n), memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (unlikely(old & (XFREE_FULL | XFREE_WATCH))) push_remote_flags(owner, pg, old);
}

/* Marks b free and pushes it alone (b is already free to memcheck). */
static void push_remote(arena_t *owner, page_t *pg, block_t *b) {
  track_open(b, sizeof *b);
  relaxed_store(b->cookie, page_cookie(b));
  track_close(b, sizeof *b);
  push_remote_run(owner, pg, b, b, 1);
}

void arena_free_remote(arena_t *owner, page_t *pg, block_t *b) {
  track_free(b);
  push_remote(owner, pg, b);
  arena_t *mine = arena_tls;
  if (mine != &arena_none && unlikely(tick_due(mine))) arena_tick(mine);
}

/* Blocks held in a's thread cache of class c, read from any thread (a stale
 * answer at worst: the owner moves it without a lock). */
static uint32_t tcache_held(arena_t *a, unsigned c) {
  uint32_t cap = relaxed_load(a->tc_cap[c]), room = relaxed_load(a->tc[c].fl.used);
  return cap > 1 && room <= cap ? cap - room : 0;
}

/* Pushes the run of pg's blocks that starts at b (a thread cache's list, each
 * block carrying its cookie) onto pg's remote list with one compare-and-swap;
 * returns the block after the run. */
static block_t *push_remote_from(arena_t *owner, page_t *pg, block_t *b) {
  block_t *last = b, *next = block_next(b);
  uint32_t n = 1;
  while (next && chunk_page_of(chunk_of(next), next) == pg) {
    last = next;
    next = block_next(next);
    n++;
  }
  push_remote_run(owner, pg, b, last, n);
  return next;
}

/* Sends all but the newest `keep` blocks of class cls's thread cache home:
 * this arena's to their pages' lists (the local free's bookkeeping, slow cases
 * included), other arenas' onto their pages' remote lists, one CAS for each
 * run of blocks of one page (a consumer frees a producer's blocks in the order
 * they were made, so its cache holds long runs of one page: snmalloc batches
 * its remote frees by destination in the same spirit).
 * The cache's state is whole before any block goes home: a local free's slow
 * path may run a decay pass, which flushes the cache again. */
static void tcache_flush(arena_t *a, unsigned cls, uint32_t keep) {
  tcache_t *tc = &a->tc[cls];
  uint32_t held = tcache_held(a, cls), kept = 0;
  block_t *b = tc->fl.free, *last = NULL;
  for (; kept < keep && b; kept++) {
    last = b;
    b = block_next(b);
  }
  if (!b) return;
  ebb_assert(held > kept);
  if (last) {
    track_open(last, sizeof *last);
    last->next = NULL;
    track_close(last, sizeof *last);
  } else {
    tc->fl.free = NULL;
    arena_set_src(a, cls, &tc->direct->fl);
  }
  relaxed_store(tc->fl.used, a->tc_cap[cls] - kept);
  while (b) {
    block_t *next = block_next(b);
    chunk_t *c = chunk_of(b);
    page_t *pg = chunk_page_of(c, b);
    arena_t *owner = relaxed_load(c->arena);
    if (owner == a) {
      arena_return_local(a, pg, b);
      b = next;
    } else {
      b = push_remote_from(owner, pg, b);
    }
  }
}

static void tcache_flush_all(arena_t *a) {
  for (unsigned c = 0; c < NCLASSES; c++)
    if (a->tc[c].fl.free) tcache_flush(a, c, 0);
}

/* Sizes class cls's thread cache; its first malloc of the class (or free of
 * another thread's block of it) does this. A new arena's memory is zeroes.
 * A class whose blocks fit TCACHE_BYTES fewer than TCACHE_MIN_BLOCKS times
 * holds one block (capacity 2: 16-64 KiB, arena_cache_own_full), a class
 * above TCACHE_BYTES none (capacity 1, room 0: the free fast path sends its
 * blocks to their pages). */
static void tcache_setup(arena_t *a, unsigned cls) {
  uint32_t size = class_info[cls].size, cap = TCACHE_BYTES / size;
  if (cap > TCACHE_BLOCKS) cap = TCACHE_BLOCKS;
  if (cap < TCACHE_MIN_BLOCKS) cap = size <= TCACHE_BYTES ? 2 : 1;
  relaxed_store(a->tc[cls].fl.used, cap > 1 ? cap : 0); /* stats read these from other threads */
  relaxed_store(a->tc_cap[cls], cap);
}

/* Other threads' blocks a thread frees go into its own cache, and its next
 * mallocs of the class take them back, with no atomic operation (jemalloc's
 * tcache, tcmalloc's thread cache); the fast path (free_server) caches a
 * server's own blocks too. This is the path of other threads' blocks the fast
 * path did not take: in a thread that is not a server's, in a full class, or
 * in a class not set up yet. A class's cache holds at most tc_cap blocks;
 * another thread's block finding it full makes room by sending the older half
 * home (a thread that only frees other threads' blocks, a consumer, returns
 * them half a cacheful at a time). Counting these frees decides whether the
 * thread is a server's (TC_SERVER_FREES between decay passes). All of the
 * cache goes home on the thread's decay pass and at its exit. */
bool arena_free_cached(arena_t *a, page_t *pg, block_t *b) {
  unsigned t = TC_OF(relaxed_load(pg->tc_off));
  if (a == &arena_none || t == TC_NONE) return false;
  tcache_t *tc = &a->tc[t];
  if (unlikely(a->tc_cap[t] == 0)) tcache_setup(a, t); /* another thread's block, of a class this one never allocated */
  if (unlikely(++a->tc_foreign == TC_SERVER_FREES)) { /* its own blocks go into the cache too */
    a->tc_server = 1;
    arena_sync_free_key();
  }
  uint32_t cap = a->tc_cap[t];
  if (cap == 1) return false;
  if (relaxed_load(tc->fl.used) <= 1) {
    tcache_flush(a, t, cap > 2 ? cap / 2 : 0); /* a slot of one block sends it home */
    if (unlikely(tick_due(a))) arena_tick(a); /* a slow-path event; a plain push is not */
  }
  tcache_push(a, t, tc, b, page_cookie(b));
  return true;
}

/* ------------------------------------------------------------ decay */

/* Purges at least `need` bytes of this arena's dirty units, oldest first
 * (UINT64_MAX: all of them). Returns the bytes purged. */
static size_t purge_oldest_locked(arena_t *a, size_t need) {
  size_t bytes = 0;
  while (bytes < need) {
    uint64_t oldest = 0;
    for (chunk_t *c = a->chunks; c; c = c->next) {
      uint64_t o = chunk_oldest_dirty(c);
      if (o && (!oldest || o < oldest)) oldest = o;
    }
    if (!oldest) break;
    for (chunk_t *c = a->chunks; c && bytes < need; c = c->next)
      bytes += chunk_purge(c, oldest, need - bytes, opt.purge);
  }
  dirty_add(a, -(ptrdiff_t)bytes);
  plain_add(&a->purged, bytes);
  return bytes;
}

/* Purges decayed free units, and gives empty chunks beyond a reserve of one
 * (none for an abandoned arena) to the pool, where any arena's next chunk
 * takes them: purged ones as address space, resident ones warm, each unit
 * still dirty since it became free (the pool's decay purges the chunk when
 * its oldest is due, the next arena's each unit on its own time). Kept
 * here until purged, a thread's empty chunks served no other thread: threads
 * that take turns at building and tearing down a structure each mapped
 * afresh, and the dirty cap purged the idle one's copy, oldest first, just
 * before its next turn (found by a probe: 2 threads taking turns at 400 MB of
 * small blocks, 41,000 faults a turn; mimalloc 140). purge false: only the
 * empty chunks go (lend_idle_arenas, which is no decay pass). Caller holds
 * a->lock. */
static size_t arena_decay_units_locked(arena_t *a, uint64_t now, bool force, bool keep_reserve, bool purge) {
  uint64_t cutoff = force ? UINT64_MAX : (now >= (uint64_t)opt.decay_ms ? now - (uint64_t)opt.decay_ms : 0);
  size_t bytes = 0;
  bool reserve_kept = !keep_reserve;
  for (chunk_t *c = a->chunks, *next; c; c = next) {
    next = c->next;
    if (purge) bytes += chunk_purge(c, cutoff, SIZE_MAX, opt.purge);
    if (c->free_units != CHUNK_ALL_FREE) continue;
    if (!reserve_kept) {
      reserve_kept = true;
      continue;
    }
    chunk_list_remove(&a->chunks, c);
    dirty_add(a, -(ptrdiff_t)((size_t)popcount64(c->dirty_units) * UNIT_SIZE));
    chunk_pool_put(c, c->dirty_units, now); /* retires it if nothing is resident */
    plain_add(&a->mapped, -CHUNK_SIZE);
    shared_add(&mapped_total, -CHUNK_SIZE);
  }
  dirty_add(a, -(ptrdiff_t)bytes);
  plain_add(&a->purged, bytes);
  return bytes;
}

/* Purges pg's wholly free granules and notes its count as settled (no purge
 * again until it moves). Returns the bytes purged. */
static size_t page_purge_settled(arena_t *a, page_t *pg) {
  pg->purge_used = pg->used;
  pg->settled = 1;
  size_t bytes = page_purge_free(pg, opt.purge);
  /* not under a->lock, where other threads' passes add to it (found by a
   * probe, from the code): one atomic add, so neither update is lost */
  atomic_fetch_add_explicit(&a->purged, bytes, memory_order_relaxed);
  return bytes;
}

/* Whether the class's current page of a thread that is at work has sat empty
 * for the decay time: seen empty by a pass at least that long ago and not
 * used since. Its mallocs pop from it without a trace, but a malloc leaves it
 * in use (used > 0 at the next look), and the free that empties it again
 * counts in pg->empties (arena_free_local_slow), as does a remote free
 * collected here (collected). Without this, each class a working thread had
 * once used kept its page and what was written of it resident for as long as
 * the thread lived (a burst over 256 sizes, then work in one: 1.1 MiB). */
static bool direct_page_disused(page_t *pg, uint64_t now, bool collected) {
  if (pg->used || pg->remote_pending || collected) {
    pg->empty_watch = 0;
    return false;
  }
  if (!pg->empty_watch || pg->empties != pg->empty_seen) {
    pg->empty_watch = 1;
    pg->empty_seen = pg->empties;
    pg->empty_since = now;
    return false;
  }
  return decay_expired(pg->empty_since, now, (uint64_t)opt.decay_ms);
}

/* One page's share of the pass: hand empty pages back, purge the free
 * granules of pages nobody has allocated from for the decay time. */
static size_t decay_page(arena_t *a, page_t *pg, uint64_t now, bool force, bool owner_idle) {
  bool collected = page_collect(pg) != 0;
  ebb_assert_expensive(pg->cls < NCLASSES && !pg->full && page_is_valid(pg)); /* bounded: the pass is */
  bool is_direct = a->tc[pg->cls].direct == pg;
  if (is_direct && !owner_idle && !force) {
    /* in use: its free granules are left to the idle-owner pass, as before */
    return direct_page_disused(pg, now, collected) ? arena_page_retire(a, pg, pg->empty_since) : 0;
  }
  bool idle =
      force || (decay_page_idle(pg->touched, now, (uint64_t)opt.decay_ms) && (!is_direct || owner_idle));
  if (pg->used == 0 && !pg->remote_pending && (!is_direct || idle)) {
    return arena_page_retire(a, pg, idle && !force ? pg->touched : 0);
  }
  if (!idle) return 0;
  if (!force) { /* look at most once per interval; purge only a page whose count held still */
    if (now - pg->looked < decay_look_interval((uint64_t)opt.decay_ms)) return 0;
    pg->looked = now;
    if (pg->used != pg->purge_used) {
      pg->purge_used = pg->used;
      pg->settled = 0;
      return 0;
    }
    if (pg->settled) return 0;
  }
  return page_purge_settled(a, pg);
}

static size_t arena_reclaim_locked(arena_t *a, uint64_t since);

/* The owner's own pass over its remote_pages: once the stack has been
 * non-empty for the decay time, with no malloc of the owner's draining it
 * meanwhile (a thread that needs pages, a server's, drains it often and never
 * gets here), what a taker would do for an idle owner
 * (arena_reclaim_locked): pages other threads freed entirely go back to
 * their chunk, dirty from now, and the wholly free granules of the rest are
 * purged; they stay on the stack, looked at again after another decay time.
 * Without this a thread at work whose current pages kept room, and which so
 * never drained the stack, kept what other threads freed of its full pages
 * resident for as long as it worked (found by an independent probe: a
 * producer handed 200 MB of 1000 B blocks to a consumer, then ran a
 * malloc/free loop of 64 B: 204 MB of RSS until it exited, whatever
 * EBB_DECAY_MS). */
static void owner_reclaim_remote(arena_t *a, uint64_t now) {
  if (!atomic_load_explicit(&a->remote_pages, memory_order_relaxed)) {
    a->remote_seen = 0;
    return;
  }
  if (!a->remote_seen) {
    a->remote_seen = 1;
    a->remote_since = now;
    return;
  }
  if (!decay_expired(a->remote_since, now, (uint64_t)opt.decay_ms)) return;
  spin_lock(&a->lock);
  arena_reclaim_locked(a, now);
  spin_unlock(&a->lock);
  a->remote_since = now;
}

size_t arena_decay(arena_t *a, uint64_t now, bool exclusive, bool force, unsigned pages) {
  size_t bytes = 0;
  if (exclusive) {
    if (a == arena_tls) {
      tcache_flush_all(a);
      a->tc_server = a->tc_foreign >= TC_SERVER_FREES; /* see free_server */
      a->tc_foreign = 0;
      arena_sync_free_key();
    }
    /* A live thread's own pass leaves its full pages that other threads freed
     * into on remote_pages: its mallocs drain them when they need a page, and
     * if it goes idle first, another thread takes them over there
     * (arena_reclaim_locked), which it cannot do once they are back on a queue.
     * Pages that wait there for the decay time, the owner at work but never
     * needing a page, it takes back itself (owner_reclaim_remote). */
    if (a != arena_tls || force)
      arena_drain_remote(a);
    else
      owner_reclaim_remote(a, now);
    bool owner_idle = atomic_load_explicit(&a->state, memory_order_relaxed) != ARENA_OWNED || a != arena_tls;
    unsigned budget = force ? UINT32_MAX : pages;
    /* A bounded pass resumes where the last one stopped, within a class too:
     * restarting at the class's first page, a class with more pages than a
     * pass looks at kept the free granules of all the others resident for
     * good (found by a probe: 1 block kept in 585 of 200 MB of 100 B blocks,
     * the owner at work in other sizes: 228 MB, where 33 MB is the floor; an
     * exited thread's arena stopped at 4096 pages, 244 MB). */
    page_t *resume = a->scan_page;
    a->scan_page = NULL;
    for (unsigned k = 0; k < NCLASSES && budget; k++) {
      unsigned cls = (a->scan_cls + k) % NCLASSES;
      page_t *pg = k == 0 && resume ? resume : a->queues[cls].first, *next;
      for (; pg && budget; pg = next, budget--) {
        next = pg->next;
        bytes += decay_page(a, pg, now, force, owner_idle);
      }
      if (!budget) {
        a->scan_cls = pg ? cls : (cls + 1) % NCLASSES;
        a->scan_page = pg; /* the first page not looked at; queue_remove keeps it current */
      }
    }
  }
  spin_lock(&a->lock);
  if (exclusive) one_spare_decay_locked(a, now, force);
  int st = atomic_load_explicit(&a->state, memory_order_relaxed);
  bytes += arena_decay_units_locked(a, now, force, st == ARENA_OWNED || st == ARENA_FIRST_CLASS, true);
  spin_unlock(&a->lock);
  a->last_decay = now;
  return bytes;
}

/* Takes over the pages of a live thread (state OWNED) that other threads have
 * freed entirely while the thread itself made no call (found by an
 * independent probe: a producer that handed 50 MiB to a consumer and then
 * blocked kept it resident for good, since only a page's owner collects its
 * remote frees). Only pages off the owner's reach qualify: full ones (off
 * their queue, never a class's current page) that a remote free handed back
 * on remote_pages. The owner reaches such a page again only through
 * remote_pages, which this empties first, or by freeing a block of its own
 * into it (arena_return_slow, under the lock this holds); and it holds no
 * block of a page whose every block is on the remote list. The test: the
 * count in the remote list's word, read once, is `used`; one compare-and-swap
 * of that word then takes the list (a push since is a
 * double free, which its freer has already reported). Such a page goes back to
 * its chunk, dirty since `since`. A page with live blocks left gets its remote
 * frees collected and its wholly free granules purged, as a decay pass would
 * (page_purge_free; the same exclusive access the purge of an abandoned arena
 * has), and goes back on remote_pages for the owner, as does any other. Caller
 * holds a->lock. Returns the bytes purged. */
static size_t arena_reclaim_locked(arena_t *a, uint64_t since) {
  page_t *pg = atomic_exchange_explicit(&a->remote_pages, NULL, memory_order_acquire);
  page_t *keep = NULL, *keep_last = NULL;
  size_t purged = 0;
  while (pg) {
    page_t *next = pg->remote_next;
    bool taken = false;
    /* full, read with acquire, means off the queue and not current (page_mark_full);
     * only arena_return_slow clears it for a page on remote_pages, under the lock */
    if (__atomic_load_n(&pg->full, __ATOMIC_ACQUIRE) && pg->cls < NCLASSES) {
      uintptr_t head = atomic_load_explicit(&pg->xfree, memory_order_acquire);
      uint32_t used = relaxed_load(pg->used), n = XFREE_COUNT(head);
      if (!n || n > used) {
        /* nothing to take (n > used: a double free in flight, which its freer reports) */
      } else if (n < used) { /* blocks still live: take the freed ones in, purge the granules they leave whole */
        page_collect(pg);
        purged += page_purge_settled(a, pg);
      } else if (atomic_compare_exchange_strong_explicit(&pg->xfree, &head, 0, memory_order_acq_rel,
                                                         memory_order_relaxed)) {
        relaxed_store(pg->used, 0);
        pg->free = NULL;
        pg->remote_pending = 0;
        relaxed_store(pg->full, 0);
        page_give_back_locked(a, pg, since);
        taken = true;
      }
    }
    if (!taken) { /* back to the owner, in the same order */
      pg->remote_next = NULL;
      if (keep_last)
        keep_last->remote_next = pg;
      else
        keep = pg;
      keep_last = pg;
    }
    pg = next;
  }
  if (keep) remote_pages_push(a, keep, keep_last);
  return purged;
}

/* The second step of the handshake below, for the current pages and the
 * thread cache, which malloc's fast path pops from with no busy of its own:
 * every source slot of a (what malloc pops from) becomes an empty list, every
 * thread is fenced again, and the owner's pop window (pop_window_open) is
 * read (a->popping). 0: any pop of the owner's from here on reads an empty list and goes
 * to its slow path, which raises busy and waits while `reclaiming` is set
 * (malloc_slower), so the taker has the lists to itself until
 * arena_give_sources. 1: the sources go back as they were (no one else wrote
 * them meanwhile: the owner's other paths are held off by the first step),
 * and only the queue pages are taken. Caller holds a->lock, and the first
 * step found busy and freeing 0. */
static bool arena_take_sources(arena_t *a) {
  freelist_t *saved[NSRC];
  for (unsigned s = 0; s < NSRC; s++) {
    saved[s] = relaxed_load(a->src[s]);
    relaxed_store(a->src[s], &page_empty.fl);
  }
  if (os_fence_threads() && __atomic_load_n(&a->popping, __ATOMIC_ACQUIRE) == 0) return true;
  for (unsigned s = 0; s < NSRC; s++) __atomic_store_n(&a->src[s], saved[s], __ATOMIC_RELEASE);
  return false;
}

/* Each class's source again once the taker is done: the cache's list if it
 * holds blocks, else the current page's (page_empty's where the class has
 * none now); release, so a pop that reads it sees the lists as left. */
static void arena_give_sources(arena_t *a) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    freelist_t *fl = a->tc[c].fl.free ? &a->tc[c].fl : &a->tc[c].direct->fl;
    for (unsigned s = class_src_lo[c], e = s + class_src_n[c]; s < e; s++)
      __atomic_store_n(&a->src[s], fl, __ATOMIC_RELEASE);
  }
}

/* A taker's flush of an idle owner's whole thread cache: every block, the
 * owner's own too, onto its page's remote list, a run of one page's blocks at
 * a time, as another thread's free would send it (the owner's local free path
 * takes the arena's lock, which the taker holds). The taker then collects
 * the queue pages' lists, and the full pages come back on remote_pages. */
static void tcache_send_home(arena_t *a) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    tcache_t *tc = &a->tc[c];
    block_t *b = tc->fl.free;
    if (!b) continue;
    tc->fl.free = NULL;
    relaxed_store(tc->fl.used, a->tc_cap[c]);
    while (b) b = push_remote_from(relaxed_load(chunk_of(b)->arena), chunk_page_of(chunk_of(b), b), b);
  }
}

/* Takes back the free memory of an idle owner's queue pages (found measuring
 * rptest's pauses, then bench/floor's case alive-own: a thread that frees most
 * of what it built itself and then blocks kept all of it resident, 167.7 MiB
 * of 296, since only the owner touches a queue page's free list). Caller
 * holds a->lock; a is OWNED, its thread has not ticked for the decay time (or
 * a trim asks), and the caller is another thread.
 *   The handshake, an asymmetric Dekker fence (as userspace RCU and folly's
 * hazard pointers use membarrier). The owner reaches a queue page other than
 * a class's current page in two ways: free's page push, after it set its
 * freeing flag and then read its free key (free_fast), and calls that
 * raise busy and wait while `reclaiming` is set (owner_enter). The taker swaps
 * the owner's free key for arena_none's, sets `reclaiming`, and fences every
 * thread (os_fence_threads). After the fence, an owner whose store of the
 * flag or raise of busy came before the fence point shows it to the taker,
 * which then leaves everything as it was; any later call of the owner's reads
 * the swapped key (so free's push declines and the block goes onto its page's
 * remote list, which is made for concurrent pushes) or sees `reclaiming` and
 * waits for the lock this holds. So with busy and freeing 0 after the fence
 * the taker has the queue pages to itself until it restores the key and
 * clears `reclaiming`. The malloc fast path pops only from the current page
 * and the thread cache, which only the second step (arena_take_sources, its
 * own fence with malloc's pop window) lets this take. Without the fence (an old kernel, a seccomp
 * filter) nothing is taken.
 *   On each queue page but the current ones: remote frees are collected; a
 * page with no live block goes back to its chunk, dirty since `since`; one
 * with live blocks has its wholly free granules purged, as the owner's decay
 * pass would (page_purge_free), once while its count holds still; a page that
 * stays is left with XFREE_WATCH, so the next remote free into it asks for
 * another pass (a->xfree_news, global_purge). At most `pages` pages are
 * worked on; `now` is the taker's clock. Returns the bytes purged. */
static size_t arena_reclaim_queues_locked(arena_t *a, uint64_t now, uint64_t since, unsigned pages) {
  owner_tls_t *ot = a->owner;
  if (!ot) return 0; /* lent for one call, or its thread is leaving */
  uintptr_t *keyp = &ot->free_key;
  uintptr_t key = __atomic_exchange_n(keyp, (uintptr_t)&arena_none, __ATOMIC_ACQ_REL);
  __atomic_store_n(&a->reclaiming, 1, __ATOMIC_RELAXED);
  size_t purged = 0;
  bool done = false;
  if (os_fence_threads() && __atomic_load_n(&ot->busy, __ATOMIC_ACQUIRE) == 0 &&
      __atomic_load_n(&ot->freeing, __ATOMIC_ACQUIRE) == 0) {
    atomic_store_explicit(&a->xfree_news, 0, memory_order_relaxed); /* each page below is watched again */
    a->reclaim_pass = now;
    /* a server's thread pushes into its cache after its window (free_server):
     * its cache and current pages stay, as before */
    bool whole = !a->tc_server && arena_take_sources(a);
    if (whole) tcache_send_home(a);
    unsigned budget = pages;
    for (unsigned c = 0; c < NCLASSES && budget; c++)
      for (page_t *pg = a->queues[c].first, *next; pg && budget; pg = next) {
        next = pg->next;
        bool direct = a->tc[c].direct == pg;
        if (direct && !whole) continue;
        uint32_t got = page_collect(pg);
        if (pg->used == 0 && !pg->remote_pending) {
          queue_remove(a, pg); /* a current page: the class has none now */
          page_give_back_locked(a, pg, since);
          if (direct && a->held_cls == c) a->held_cls = NCLASSES;
          budget--;
          continue;
        }
        if (direct) continue; /* in use: its granules are its owner's decay pass's */
        if (got || !pg->settled || pg->purge_used != pg->used) {
          purged += page_purge_settled(a, pg);
          budget--;
        }
        /* the next remote free into it is news (push_remote_run); one that
         * came in since the collect above is news already */
        uintptr_t empty = 0;
        if (!atomic_compare_exchange_strong_explicit(&pg->xfree, &empty, XFREE_WATCH, memory_order_acq_rel,
                                                     memory_order_relaxed) &&
            XFREE_HEAD(empty) != NULL)
          atomic_store_explicit(&a->xfree_news, 1, memory_order_relaxed);
        ebb_assert_expensive(page_is_valid(pg));
      }
    done = budget > 0;
    if (whole) {
      /* the cache's blocks of full pages went onto those pages' remote
       * lists, and the pages onto remote_pages */
      if (atomic_load_explicit(&a->remote_pages, memory_order_relaxed)) purged += arena_reclaim_locked(a, since);
      arena_give_sources(a);
    }
  }
  uintptr_t swapped = (uintptr_t)&arena_none;
  __atomic_compare_exchange_n(keyp, &swapped, key, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
  __atomic_store_n(&a->reclaiming, 0, __ATOMIC_RELEASE);
  if (done) relaxed_store(a->reclaimed_at, relaxed_load(a->now));
  return purged;
}

/* An exited thread's arena (claimed: PURGING) for lend_idle_arenas: its empty
 * pages, current ones too, back to their chunks, dirty since the thread's last
 * tick, and its empty chunks to the pool, nothing purged. Its decay pass
 * (global_purge) keeps an empty current page until the decay time, and the
 * chunk it sits in with it; a thread that lent its own memory away before
 * this one exited faulted afresh in the meantime. Once per abandoned spell
 * (its clock stays where its thread left it). Returns whether a chunk went.
 * The caller holds another arena's lock, so this one is only tried. */
static bool arena_lend_abandoned(arena_t *a) {
  uint64_t since = relaxed_load(a->now);
  if (!spin_trylock(&a->lock)) return false; /* the caller holds its own arena's lock */
  if (relaxed_load(a->reclaimed_at) == since) { /* lent since it was abandoned: its decay pass does the rest */
    spin_unlock(&a->lock);
    return false;
  }
  relaxed_store(a->reclaimed_at, since);
  arena_drain_remote(a);
  for (unsigned c = 0; c < NCLASSES; c++)
    for (page_t *pg = a->queues[c].first, *next; pg; pg = next) {
      next = pg->next;
      page_collect(pg);
      if (pg->used == 0 && !pg->remote_pending) {
        if (a->held_cls == c && a->tc[c].direct == pg) a->held_cls = NCLASSES;
        queue_remove(a, pg);
        page_give_back_locked(a, pg, since);
      }
    }
  one_spare_give_back_locked(a, false, since);
  size_t mapped = atomic_load_explicit(&a->mapped, memory_order_relaxed);
  arena_decay_units_locked(a, os_now_ms(), false, false, false);
  bool went = atomic_load_explicit(&a->mapped, memory_order_relaxed) != mapped;
  spin_unlock(&a->lock);
  return went;
}

/* Whether a live thread has been idle for ms: its clock (a->now, moved by
 * its ticks and page retirements) is that old, and neither it nor its count
 * of slow-path events has moved since a pass saw them at least ms/2 ago; notes
 * what it reads for the next pass. The clock alone moves only every 64
 * events: a thread that wakes every 100 ms to make a few blocks and free them
 * (a page emptied at each wake, so a few events) looked idle for the decay
 * time at most passes, and once passes took current pages and caches, lost
 * them at each (found by a probe: 100 such threads, 4.7 times the faults of
 * the commit before). Its fast paths leave no trace: an owner that only pops
 * and pushes there may still count as idle. Caller holds a->lock. */
static bool owner_idle_for(arena_t *a, uint64_t now, uint64_t ms) {
  uint64_t clock = relaxed_load(a->now);
  int32_t events = relaxed_load(a->tick);
  if (clock != a->seen_now || events != a->seen_tick) {
    a->seen_now = clock;
    a->seen_tick = events;
    a->seen_at = now;
    return false;
  }
  return decay_expired(clock, now, ms) && now - a->seen_at >= ms / 2;
}

/* Only an arena with at least this much freed memory resident lends: a
 * thread whose few live-and-freed blocks sit on its current pages keeps
 * them. Found by a probe: 100 threads waking every 100 ms to build and free
 * 200 blocks of 16 B-8 KiB, each wake taking every idle thread's current
 * pages, which their next wake carved again from other chunks, at other 4 KiB
 * pages: 49,385 faults against 28,462, RSS 264 against 172 MB, 6,586
 * membarriers against 2. */
#define LEND_MIN_DIRTY (2 * (size_t)CHUNK_SIZE)

/* Before a thread faults memory in (its own purged units, or a new chunk):
 * the memory of threads idle for a quarter of the decay time (62 ms by
 * default) goes to the pool, still resident, for this one to take warm: their
 * queue pages, current pages and thread caches (arena_reclaim_queues_locked),
 * kept page and empty chunks, as the idle pass at the decay time would take
 * them. A pool of threads that take turns at jobs, each idle longer than the
 * decay time between its own turns, faulted every job's memory in afresh
 * while the last job's thread sat on its copy, pinned by one empty current
 * page and one cached block a class (bench/turns idle100: 7788 faults a job,
 * tcmalloc 214, whose freed blocks go to lists all threads share). At most
 * once per GLOBAL_CHECK_MS over all threads, and an arena once per idle
 * spell; never the caller's own (self: whose lock it holds) nor its thread's.
 * Exited threads' arenas the same, at once (arena_lend_abandoned). Returns
 * whether it took anything. */
static bool lend_idle_arenas(arena_t *self) {
  /* at EBB_DECAY_MS=0 freed memory goes back at once, and under a cap with
   * no room for a chunk what is lent would be purged at once too */
  arena_t *first = atomic_load_explicit(&arenas_all, memory_order_acquire);
  if (opt.decay_ms == 0 || (first == self && !first->all_next)) return false; /* no other thread's arena */
  uint64_t now = os_now_ms(), last = atomic_load_explicit(&last_lend, memory_order_relaxed);
  if (now - last < GLOBAL_CHECK_MS ||
      !atomic_compare_exchange_strong_explicit(&last_lend, &last, now, memory_order_relaxed, memory_order_relaxed) ||
      dirty_all() + CHUNK_SIZE > dirty_limit())
    return false;
  uint64_t idle_ms = decay_look_interval((uint64_t)opt.decay_ms);
  bool took = false;
  for (arena_t *a = first; a; a = a->all_next) {
    if (a == self || a == arena_tls || atomic_load_explicit(&a->dirty, memory_order_relaxed) < LEND_MIN_DIRTY)
      continue;
    int st = atomic_load_explicit(&a->state, memory_order_relaxed);
    if (st == ARENA_ABANDONED) {
      if (relaxed_load(a->reclaimed_at) != relaxed_load(a->now) &&
          atomic_compare_exchange_strong(&a->state, &st, ARENA_PURGING)) {
        took |= arena_lend_abandoned(a);
        atomic_store(&a->state, ARENA_ABANDONED);
      }
      continue;
    }
    if (st != ARENA_OWNED) continue;
    uint64_t active = relaxed_load(a->now);
    if (!decay_expired(active, now, idle_ms) || relaxed_load(a->reclaimed_at) == active || !spin_trylock(&a->lock))
      continue; /* at work, taken already this spell, or busy */
    if (atomic_load_explicit(&a->state, memory_order_relaxed) == ARENA_OWNED && a->reclaimed_at != active &&
        owner_idle_for(a, now, idle_ms)) {
      arena_reclaim_queues_locked(a, now, active, BACKGROUND_PASS_PAGES);
      one_spare_give_back_locked(a, false, active);
      arena_decay_units_locked(a, now, false, false, false); /* its reserve chunk too */
      took = true;
    }
    spin_unlock(&a->lock);
  }
  /* the current pages given back are dirty now: the cap holds (fixed or
   * auto), as for any free (found by a probe: EBB_DIRTY_MAX=0 peaked at a
   * chunk of dirty memory) */
  if (took) cap_excess_outside_arenas();
  return took;
}

/* Purges every arena: abandoned ones wholly (their pages too), live ones
 * in their free units, and a live thread idle for the decay time (or any, on
 * a forced purge) loses the pages other threads freed entirely
 * (arena_reclaim_locked). */
static size_t global_purge(uint64_t now, arena_t *self, bool force, unsigned pages) {
  uint64_t cutoff = force ? UINT64_MAX : (now >= (uint64_t)opt.decay_ms ? now - (uint64_t)opt.decay_ms : 0);
  size_t pooled = chunk_pool_decay(cutoff, SIZE_MAX);
  atomic_fetch_add_explicit(&pool_purged, pooled, memory_order_relaxed);
  size_t bytes = pooled + huge_cache_decay(cutoff, SIZE_MAX);
  for (arena_t *a = atomic_load_explicit(&arenas_all, memory_order_acquire); a; a = a->all_next) {
    if (a == self) continue;
    int st = ARENA_ABANDONED;
    bool mine = atomic_compare_exchange_strong(&a->state, &st, ARENA_PURGING);
    /* A forced purge (ebb_trim, a malloc the kernel refused) promises all of
     * it now: it waits out another thread's pass over the arena (the
     * background thread's) and purges it itself. Found by a probe: after 3
     * threads' 300 MiB of frees and a malloc_trim, ebb_stats still showed
     * 223 MiB active in about one run in five. */
    while (!mine && force && st == ARENA_PURGING) {
      os_yield();
      st = ARENA_ABANDONED;
      mine = atomic_compare_exchange_strong(&a->state, &st, ARENA_PURGING);
    }
    if (mine) {
      bytes += arena_decay(a, now, true, force, pages);
      atomic_store(&a->state, ARENA_ABANDONED);
    } else if (st == ARENA_OWNED || st == ARENA_FIRST_CLASS || st == ARENA_ORPHANED) {
      if (!force && !spin_trylock(&a->lock)) continue;
      if (force) spin_lock(&a->lock);
      uint64_t active = relaxed_load(a->now); /* the owner's last tick or page retired */
      /* decay_expired: the owner's clock may be ahead of `now`, read before
       * this pass began, and the difference must not wrap (found by a probe,
       * from the code: a working owner looked idle for a moment) */
      bool idle = force || (st == ARENA_OWNED && owner_idle_for(a, now, (uint64_t)opt.decay_ms));
      if (st == ARENA_OWNED && idle && atomic_load_explicit(&a->remote_pages, memory_order_relaxed))
        bytes += arena_reclaim_locked(a, force ? now : active); /* idle since then: decayed already */
      /* its queue pages once per idle spell (a->reclaimed_at: the tick it
       * followed), again while other threads' frees still reach them (not
       * more often than a page is looked at: each pass is a fence with the
       * owner), or on every trim; never the caller's own. Without the second
       * a thread that went idle with pages partly free kept what others freed
       * into them after the first pass (found by an independent probe: 124 of
       * 165 MiB, until the owner ran again). */
      bool news = atomic_load_explicit(&a->xfree_news, memory_order_relaxed) &&
                  now - a->reclaim_pass >= decay_look_interval((uint64_t)opt.decay_ms);
      if (st == ARENA_OWNED && idle && a != arena_tls && (force || a->reclaimed_at != active || news))
        bytes += arena_reclaim_queues_locked(a, now, force ? now : active, force ? UINT32_MAX : pages);
      if ((st == ARENA_OWNED && idle && a != arena_tls) || st == ARENA_ORPHANED)
        one_spare_give_back_locked(a, false, force ? now : active); /* the owner's kept page (one_spare_keep) */
      bytes += arena_decay_units_locked(a, now, force, true, true);
      spin_unlock(&a->lock);
    }
  }
  if (force) {
    /* A pass that is not forced (the background thread's) may have held an
     * arena when this one began, and sent its empty chunks to the pool, still
     * resident, after this one purged the pool above (found by a probe:
     * 450-540 MiB left in the pool after ebb_trim, in 2 runs of 3, with
     * EBB_BACKGROUND=1). The loop waited for it to let go of that arena, so
     * what it pooled is there now. (A first version waited for every pass
     * that was not forced to end: with threads at work, whose ticks start such
     * passes all the time, a trim waited its full bound, 200 ms, found by a
     * stress test.) */
    size_t late = chunk_pool_decay(UINT64_MAX, SIZE_MAX);
    atomic_fetch_add_explicit(&pool_purged, late, memory_order_relaxed);
    bytes += late;
  }
  return bytes;
}

void arena_tick(arena_t *a) {
  owner_enter(arena_tls);
  relaxed_store(a->tick, TICK_FREES);
  uint64_t now = os_now_ms();
  relaxed_store(a->now, now);
  if (now - a->last_decay >= decay_look_interval((uint64_t)opt.decay_ms) / 2)
    arena_decay(a, now, true, false, PASS_PAGES);
  uint64_t last = atomic_load_explicit(&last_global, memory_order_relaxed);
  if (now - last >= GLOBAL_CHECK_MS &&
      atomic_compare_exchange_strong_explicit(&last_global, &last, now, memory_order_relaxed,
                                              memory_order_relaxed))
    global_purge(now, a, false, PASS_PAGES);
  owner_leave();
}

size_t arena_purge_all(bool force) {
  uint64_t now = os_now_ms();
  arena_t *self = arena_tls == &arena_none ? NULL : arena_tls;
  owner_enter(arena_tls);
  size_t bytes = self ? arena_decay(self, now, true, force, PASS_PAGES) : 0;
  bytes += global_purge(now, self, force, PASS_PAGES);
  owner_leave();
  /* a forced purge promises all of it now: extents another thread took out
   * of the large-block cache are gone too before this returns */
  if (force) huge_wait_unmaps(1000);
  return bytes;
}

void arena_wait_reclaim(arena_t *a) {
  while (__atomic_load_n(&a->reclaiming, __ATOMIC_ACQUIRE)) {
    spin_lock(&a->lock); /* the taker holds it until it is done */
    spin_unlock(&a->lock);
  }
}

/* Live bytes are a sum over every page descriptor (under each arena's lock):
 * too dear for a slow path, cheap for the background thread's passes. */
void arena_sample_live_peak(void) {
  size_t mapped = 0, active = 0, dirty = 0, purged = 0, live = 0;
  uint64_t arenas = 0;
  arena_stats_sum(&mapped, &active, &dirty, &purged, &live, &arenas);
  arena_note_live_peak(live + huge_in_use_bytes());
}

/* The background pass's sample, only when it may find a new peak: live bytes
 * never exceed active ones, so none while active memory is at most the peak
 * of live bytes; and while active memory has not grown since the last
 * sample, once a second. The walk holds each arena's lock for the length of
 * its chunk lists, which on a big heap is long (1 GiB of small blocks: 16000
 * descriptors) for a figure that rarely moves. Background thread only. */
static void background_sample_live_peak(uint64_t now) {
  static uint64_t last_ms;
  static size_t last_active;
  size_t active = atomic_load_explicit(&active_total, memory_order_relaxed) + huge_in_use_bytes();
  if (active <= atomic_load_explicit(&peak_live, memory_order_relaxed)) return;
  if (active <= last_active && now - last_ms < 1000) return;
  last_ms = now, last_active = active;
  arena_sample_live_peak();
}

void arena_purge_background(uint64_t now) {
  atomic_store_explicit(&last_global, now, memory_order_relaxed);
  global_purge(now, NULL, false, BACKGROUND_PASS_PAGES);
  background_sample_live_peak(now);
}

/* ------------------------------------------------------------ arenas and threads */

static void arena_reset(arena_t *a) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    a->tc[c].direct = &page_empty;
    arena_set_src(a, c, &page_empty.fl);
    a->queues[c].first = a->queues[c].last = NULL;
    a->last_span[c] = NULL;
    /* the thread cache: left untouched here (a new arena's memory is zeroes; a
     * destroyed one is first-class and never caches), each class's is set up
     * on first use */
    ebb_assert(a->tc[c].fl.free == NULL);
  }
  a->held_cls = NCLASSES;
  a->scan_page = NULL;
  relaxed_store(a->tick, TICK_FREES);
  a->tc_server = 0;
  a->tc_foreign = 0;
  if (a == arena_tls) arena_sync_free_key();
  relaxed_store(a->now, os_now_ms());
  a->last_decay = a->now;
}

/* Held by fork_prepare with every arena's lock, so the forking thread, whose
 * lock calls are no-ops until the fork ends, holds every arena that exists
 * meanwhile. (Without it a new arena's owner still stops at the chunk pool's
 * lock before its chunk list grows, so this closes a gap in the invariant,
 * not a known race; it was added while chasing a TSan report on a->chunks in
 * fork_handlers that has not recurred since and is not explained.) */
static spinlock_t arenas_new_lock;

arena_t *arena_new(int state) {
  size_t index_at = align_up(sizeof(arena_t), 64), size = align_up(index_at + sizeof(span_index_t), OS_PAGE);
  arena_t *a = os_map(size);
  if (!a) { /* the large-block cache may hold the address space (arena_malloc_after_purge) */
    arena_purge_all(true);
    a = os_map(size);
  }
  if (!a) return NULL;
  a->spans = (span_index_t *)((char *)a + index_at); /* zeroes: empty */
  arena_reset(a);
  a->check = (uintptr_t)a ^ page_key;
  atomic_store(&a->state, state);
  /* Made by the forking thread between fork_prepare and the fork's end (a
   * fork handler registered before ebb's, the thread's first allocation): it
   * is held like every other arena, so no other thread (the background
   * thread's pass) takes its lock in that window, and the parent's and
   * child's unlock of every arena releases a lock this thread holds (found by
   * a probe, from the code). Its own lock calls are no-ops meanwhile. */
  if (spin_fork_holder) atomic_store_explicit(&a->lock.held, 1, memory_order_relaxed);
  spin_lock(&arenas_new_lock);
  arena_t *head = atomic_load(&arenas_all);
  do a->all_next = head;
  while (!atomic_compare_exchange_weak(&arenas_all, &head, a));
  spin_unlock(&arenas_new_lock);
  return a;
}

arena_t *arena_claim(int from, int to) {
  for (arena_t *a = atomic_load_explicit(&arenas_all, memory_order_acquire); a; a = a->all_next) {
    int st = from;
    if (atomic_load_explicit(&a->state, memory_order_relaxed) == from &&
        atomic_compare_exchange_strong(&a->state, &st, to)) {
      relaxed_store(a->tick, TICK_FREES);
      relaxed_store(a->now, os_now_ms());
      return a;
    }
  }
  return NULL;
}

void arena_forget_owner(arena_t *a) {
  if (!a->owner) return;
  spin_lock(&a->lock);
  a->owner = NULL;
  spin_unlock(&a->lock);
}

void arena_abandon(arena_t *a) {
  arena_forget_owner(a);
  tcache_flush_all(a);
  arena_drain_remote(a);
  atomic_store_explicit(&a->state, ARENA_ABANDONED, memory_order_release);
}

void arena_lock_all(void) {
  spin_lock(&arenas_new_lock);
  for (arena_t *a = atomic_load(&arenas_all); a; a = a->all_next) spin_lock(&a->lock);
  chunk_pool_lock();
  huge_lock_all();
}

void arena_unlock_all(void) {
  huge_unlock_all();
  chunk_pool_unlock();
  for (arena_t *a = atomic_load(&arenas_all); a; a = a->all_next) {
    ebb_assert(atomic_load_explicit(&a->lock.held, memory_order_relaxed)); /* taken by arena_lock_all or arena_new */
    spin_unlock(&a->lock);
  }
  spin_unlock(&arenas_new_lock);
}

/* In the child only the forking thread survives: other threads' arenas may be
 * mid-update, so they are never adopted, only purged at the unit level. */
void arena_fork_child(void) {
  arena_unlock_all();
  for (arena_t *a = atomic_load(&arenas_all); a; a = a->all_next) {
    int st = atomic_load(&a->state);
    if (a != arena_tls && (st == ARENA_OWNED || st == ARENA_PURGING)) {
      atomic_store(&a->state, ARENA_ORPHANED);
      a->owner = NULL; /* their threads' owner_tls did not survive either */
    }
  }
}

/* Large blocks of a first-class arena go to the cache (or back, with no decay). */
static void free_huge_locked(arena_t *a, uint64_t now) {
  for (huge_t *h = a->huge, *next; h; h = next) {
    next = h->next;
    track_free(h->user);
    huge_delete(h, opt.decay_ms != 0, now);
  }
  a->huge = NULL;
}

/* memcheck (the valgrind build): every block of a's pages is freed at once. */
static void track_free_all_locked(arena_t *a) {
#if EBB_VALGRIND
  for (int full = 0; full < 2; full++)
    for (chunk_t *c = full ? a->chunks_full : a->chunks; c; c = c->next)
      for (unsigned i = 1; i < CHUNK_UNITS; i++)
        if (relaxed_load(c->pages[i].cls) < NCLASSES) page_track_free_live(&c->pages[i]);
#else
  (void)a;
#endif
}

/* The arena's chunks go to the pool still resident (warm for the next arena or
 * thread that needs a chunk), its large blocks to the cache; decay returns both. */
void arena_destroy(arena_t *a) {
  spin_lock(&a->lock);
  track_free_all_locked(a);
  uint64_t now = os_now_ms();
  for (int full = 0; full < 2; full++)
    for (chunk_t *c = full ? a->chunks_full : a->chunks, *next; c; c = next) {
      next = c->next;
      if (opt.decay_ms == 0)
        chunk_retire(c);
      else
        chunk_pool_put(c, chunk_resident(c), now);
    }
  a->chunks = a->chunks_full = NULL;
  free_huge_locked(a, now);
  size_t active = atomic_load(&a->active), dirty = atomic_load(&a->dirty);
  atomic_fetch_sub(&active_total, active);
  atomic_fetch_sub(&mapped_total, atomic_load(&a->mapped));
  dirty_add(a, -(ptrdiff_t)dirty);
  atomic_store(&a->mapped, 0);
  atomic_store(&a->active, 0);
  atomic_store(&a->remote_pages, NULL);
  arena_reset(a);
  spin_unlock(&a->lock);
  atomic_store(&a->state, ARENA_FREE);
  arena_enforce_cap();
}

/* ebb_arena_reset: every block freed, every unit of every chunk free again and
 * dirty where it may be resident; the chunks stay, and each class remembers
 * its last span, so the next request carves the same resident memory. */
void arena_reset_blocks(arena_t *a) {
  spin_lock(&a->lock);
  track_free_all_locked(a);
  uint64_t now = os_now_ms();
  size_t resident = 0, dirty_before = atomic_load(&a->dirty);
  while (a->chunks_full) /* every unit is about to be free */
    chunk_list_move(&a->chunks_full, &a->chunks, a->chunks_full);
  for (chunk_t *c = a->chunks; c; c = c->next) {
    uint64_t r = chunk_resident(c);
    chunk_reset(c, r, now);
    resident += (size_t)popcount64(r) * UNIT_SIZE;
  }
  free_huge_locked(a, now);
  atomic_fetch_sub(&active_total, atomic_load(&a->active));
  atomic_store(&a->active, 0);
  dirty_add(a, (ptrdiff_t)resident - (ptrdiff_t)dirty_before);
  atomic_store(&a->remote_pages, NULL);
  for (unsigned c = 0; c < NCLASSES; c++) {
    /* each class takes back the span it was allocating from, so the next
     * request writes the same (cached) lines, not another class's */
    page_t *cur = a->tc[c].direct != &page_empty ? a->tc[c].direct : a->queues[c].first;
    if (cur) a->last_span[c] = cur;
    a->tc[c].direct = &page_empty;
    arena_set_src(a, c, &page_empty.fl);
    a->queues[c].first = a->queues[c].last = NULL;
  }
  a->scan_page = NULL;
  if (opt.decay_ms == 0) purge_oldest_locked(a, SIZE_MAX);
  spin_unlock(&a->lock);
  arena_enforce_cap();
}

void arena_stats_sum(size_t *mapped, size_t *active, size_t *dirty, size_t *purged, size_t *allocated,
                     uint64_t *count) {
  *mapped += chunk_pool_warm_bytes(); /* purged pooled chunks are address space only */
  *dirty += chunk_pool_dirty();
  *purged += atomic_load_explicit(&pool_purged, memory_order_relaxed);
  size_t cached = 0;
  for (arena_t *a = atomic_load(&arenas_all); a; a = a->all_next) {
    *mapped += atomic_load_explicit(&a->mapped, memory_order_relaxed);
    *active += atomic_load_explicit(&a->active, memory_order_relaxed);
    *dirty += atomic_load_explicit(&a->dirty, memory_order_relaxed);
    *purged += atomic_load_explicit(&a->purged, memory_order_relaxed);
    if (atomic_load_explicit(&a->state, memory_order_relaxed) != ARENA_FREE) (*count)++;
    spin_lock(&a->lock); /* chunks cannot vanish while we read their descriptors */
    for (int full = 0; full < 2; full++)
      for (chunk_t *c = full ? a->chunks_full : a->chunks; c; c = c->next)
        for (unsigned i = 1; i < CHUNK_UNITS; i++)
          if (relaxed_load(c->pages[i].cls) < NCLASSES)
            *allocated += (size_t)relaxed_load(c->pages[i].used) * relaxed_load(c->pages[i].block_size);
    spin_unlock(&a->lock);
    /* blocks in thread caches count on their pages (maybe another arena's), but are free */
    for (unsigned k = 0; k < NCLASSES; k++) cached += (size_t)tcache_held(a, k) * class_info[k].size;
  }
  *allocated = *allocated > cached ? *allocated - cached : 0;
}

void arena_class_stats(class_stat_t out[NCLASSES]) {
  uint64_t held[NCLASSES] = {0};
  for (arena_t *a = atomic_load(&arenas_all); a; a = a->all_next) {
    spin_lock(&a->lock); /* the chunk list holds still while we read its descriptors */
    for (int full = 0; full < 2; full++)
      for (chunk_t *c = full ? a->chunks_full : a->chunks; c; c = c->next)
        for (unsigned i = 1; i < CHUNK_UNITS; i++) {
          unsigned cls = relaxed_load(c->pages[i].cls);
          if (cls >= NCLASSES) continue;
          out[cls].pages++;
          uint32_t used = relaxed_load(c->pages[i].used);
          out[cls].blocks += used;
          out[cls].live_bytes += (uint64_t)used * relaxed_load(c->pages[i].block_size);
          out[cls].span_bytes += (uint64_t)relaxed_load(c->pages[i].units) * UNIT_SIZE;
        }
    spin_unlock(&a->lock);
    for (unsigned k = 0; k < NCLASSES; k++) held[k] += tcache_held(a, k); /* cached blocks are free */
  }
  for (unsigned k = 0; k < NCLASSES; k++) {
    uint64_t held_bytes = held[k] * class_info[k].size;
    out[k].blocks = out[k].blocks > held[k] ? out[k].blocks - held[k] : 0;
    out[k].live_bytes = out[k].live_bytes > held_bytes ? out[k].live_bytes - held_bytes : 0;
  }
}

bool arena_is_valid(arena_t *a) {
  for (unsigned c = 0; c < NCLASSES; c++) {
    for (page_t *pg = a->queues[c].first; pg; pg = pg->next)
      if (pg->cls != c || pg->full || !page_is_valid(pg)) return false;
    if (a->tc[c].direct != &page_empty && a->tc[c].direct->cls != c) return false;
  }
  return true;
}
