/* alloc.c — owns the ebb_* API: the malloc family's contracts (sizes, errno,
 * alignment, realloc), pointer validation on free, first-class arenas.
 * May call: arena, huge, registry, page. Must never: trust a pointer before the
 * registry and the page agree it is the start of a live block. */
#include "ebb.h"
#include "arena.h"
#include "huge.h"
#include "registry.h"
#include "thread.h"
#include <errno.h>
#include <string.h>

#define MAX_REQUEST ((size_t)PTRDIFF_MAX - CHUNK_SIZE)

static void *fail_nomem(void) {
  errno = ENOMEM;
  return NULL;
}

/* ------------------------------------------------------------ lookup */

typedef struct {
  chunk_t *chunk; /* NULL for a large block */
  page_t *page;
  huge_t *huge;
} owner_t;

EBB_INLINE huge_t *huge_of(void *h) {
  return ((uintptr_t)h & HUGE_TAG) ? (huge_t *)((char *)h - HUGE_TAG) : NULL;
}

/* Finds the block p starts, or dies with "invalid pointer" naming func. */
EBB_INLINE owner_t lookup(const void *p, const char *func) {
  void *h = registry_get(p);
  chunk_t *c = chunk_of(p);
  if (likely(h == c && h)) {
    page_t *pg = chunk_page_of(c, p);
    if (unlikely(relaxed_load(pg->cls) >= NCLASSES)) /* a block start of a page since emptied: freed already */
      ebb_fatal(func,
                relaxed_load(pg->cls) == PAGE_UNUSED && page_is_block(pg, p) ? "double free" : "invalid pointer",
                p);
    EBB_CHECK(page_is_block(pg, p), func, "invalid pointer", p);
    return (owner_t){c, pg, NULL};
  }
  huge_t *hg = huge_of(h);
  EBB_CHECK(hg && relaxed_load(hg->user) == p, func, "invalid pointer", p);
  return (owner_t){NULL, NULL, hg};
}

EBB_INLINE size_t usable_of(owner_t o) {
  return o.chunk ? relaxed_load(o.page->block_size) : huge_usable(o.huge);
}

EBB_INLINE bool block_parked(const page_t *pg, const void *p) {
  return (page_block_granules(pg, page_block_index(pg, p)) & relaxed_load(pg->purged)) != 0;
}

/* Dies if b, a valid block start, is already free: it lies in a purged granule,
 * or it carries the free cookie. The cookie (key ^ address, a random 64-bit
 * per-process key, cleared whenever a block is handed out) is trusted alone,
 * wherever the block sits — the owner's lists, another thread's remote-free
 * cache, a remote list — since user data matches it only by chance (2^-64). */
EBB_INLINE void check_not_free(owner_t o, block_t *b, const char *func) {
  if (unlikely(relaxed_load(o.page->purged) != 0) && block_parked(o.page, b)) ebb_fatal(func, "double free", b);
  if (unlikely(block_has_cookie(b))) ebb_fatal(func, "double free", b);
}

/* ------------------------------------------------------------ large blocks */

static void huge_link(arena_t *a, huge_t *h) {
  h->arena = a;
  if (!a) return;
  spin_lock(&a->lock);
  h->prev = NULL;
  h->next = a->huge;
  if (a->huge) a->huge->prev = h;
  a->huge = h;
  spin_unlock(&a->lock);
}

static void huge_unlink(huge_t *h) {
  arena_t *a = h->arena;
  if (!a) return;
  spin_lock(&a->lock);
  if (h->prev)
    h->prev->next = h->next;
  else
    a->huge = h->next;
  if (h->next) h->next->prev = h->prev;
  spin_unlock(&a->lock);
}

/* zero: the caller needs zeroes (calloc); a fresh mapping has them, what a
 * block reused from the cache brought is cleared (os_zero: its resident pages
 * written, the others dropped, so no fault), and the growth of a cached block
 * grown to fit is fresh. A memset of the whole reused part faulted in every
 * page the previous user had not written: 20 live callocs of 4 MB, 2 pages
 * of each used, kept 80 MB resident where glibc and jemalloc kept 4 (found by
 * a probe). */
static void *huge_alloc_z(arena_t *first_class, size_t size, size_t align, bool zero) {
  thread_process_init(); /* a program's first allocation may be large */
  size_t reused;
  uint64_t now = os_now_ms();
  huge_t *h = huge_new(size, align, opt.decay_ms != 0, now, &reused);
  if (!h) {
    arena_purge_all(true); /* cached memory may be what stands in the way */
    h = huge_new(size, align, opt.decay_ms != 0, now, &reused);
  }
  if (!h) return fail_nomem();
  huge_link(first_class, h);
  arena_note_peaks(now);
  if (reused < size) arena_cap_after_growth();
  track_malloc(h->user, huge_usable(h), !reused);
  if (zero && reused) {
    size_t clear = reused < size ? reused : size;
    track_open(h->user, size); /* zeroes from here on: the cleared part, and the growth (the kernel's) */
    os_zero(h->user, clear);
  }
  return h->user;
}

static void *huge_alloc(arena_t *first_class, size_t size, size_t align) {
  return huge_alloc_z(first_class, size, align, false);
}

/* A large free also runs the large-block cache's decay, so a program that only
 * churns large blocks still returns the ones it stopped reusing. */
static void huge_free(huge_t *h) {
  track_free(h->user);
  huge_unlink(h);
  uint64_t now = os_now_ms();
  huge_delete(h, opt.decay_ms != 0, now);
  if (now > (uint64_t)opt.decay_ms) huge_cache_decay(now - (uint64_t)opt.decay_ms, HUGE_FREE_DECAY_MAX);
  arena_enforce_cap();
  /* and counts as a slow-path event of the thread's arena, whose decay pass
   * then runs: a thread that went on to work only with large blocks kept
   * what it had freed of small ones (found by a probe: 200 MB of 100 B
   * blocks freed, then a 4 MiB malloc/free loop, single-threaded with no
   * background thread: 228 MB dirty for as long as the loop ran) */
  arena_t *a = arena_tls;
  if (a != &arena_none && tick_due(a)) arena_tick(a);
}

/* ------------------------------------------------------------ malloc / free */

/* Everything malloc_slow does not: a large size, an empty list (the page's
 * next block, or the class's page again after the thread cache ran dry,
 * before the arena's slow path), a thread with no arena yet. */
static EBB_NOINLINE void *malloc_slower(size_t size) {
  if (size > CLASS_MAX_SIZE) return size > MAX_REQUEST ? fail_nomem() : huge_alloc(NULL, size, MIN_ALIGN);
  arena_t *a = arena_tls;
  bool first = a == &arena_none;
  if (first && !(a = thread_arena())) return fail_nomem();
  /* The pop from the class's source failed (malloc_fast, malloc_slow): the
   * page's next block, or its list when the cache was the source, under busy
   * (it reads and moves the sources, which a taker of an idle owner's current
   * pages swaps: arena_take_sources); else the arena's slow path, which
   * enters itself. Before, the slow path came through arena_malloc, whose pop
   * failed again. */
  unsigned c = size_class(size);
  owner_enter(a);
  void *p = arena_pop_empty(a, c);
  owner_leave();
  if (!p) p = arena_malloc_slow(a, c, size);
  if (first) thread_arena_done(a);
  return p ? p : fail_nomem();
}

/* Everything the fast path does not. Its first job is a size from 1 KiB to
 * 2 MiB whose list has a block: the class by arithmetic (sizeclass.h), its
 * own source slot, one pop, with no frame (the rest is a tail call to
 * malloc_slower). Before, such a malloc went through the arena's general path
 * with its saved registers and calls: 50 instructions where this takes 22
 * (callgrind, a loop of malloc/free of 1025-4096 B). Taking the size alone
 * keeps the fast path from saving anything for it. */
static EBB_NOINLINE void *malloc_slow(size_t size) {
  if (likely(size - 1025 <= CLASS_MAX_SIZE - 1025)) { /* 1 KiB < size <= 2 MiB: unsigned, so 0 is out */
    arena_t *a = arena_tls;
    pop_window_open(a);
    void *p = arena_pop_src(a, SRC_SMALL + size_class_above_1k(size) - NCLASSES_SMALL);
    pop_window_close(a);
    if (likely(p != NULL)) return p;
  }
  return malloc_slower(size);
}

/* The fast path: a size up to 1 KiB, the first block of the list its size's
 * source slot names; NULL when the slow path must run (not a failure). A
 * thread without an arena yet has arena_none, whose lists are all empty. */
EBB_INLINE void *malloc_fast(size_t size) {
  if (unlikely(size > 1024)) return NULL;
  arena_t *a = arena_tls;
  pop_window_open(a);
  void *p = arena_pop_src(a, (unsigned)(size + 15) >> 4);
  window_stretch(); /* the heavy debug build's only */
  pop_window_close(a);
  return p;
}

/* malloc itself; public.c inlines it into operator new too (a call from one
 * exported name to another goes through the PLT in libebb.so). */
EBB_INLINE void *malloc_inline(size_t size) {
  void *p = malloc_fast(size);
  return likely(p != NULL) ? p : malloc_slow(size);
}

EBB_EXPORT EBB_HOT_ENTRY void *ebb_malloc(size_t size) { return malloc_inline(size); }

/* Every check, in order: the slow path of free, and realloc's free. */
static void free_block_in(void *p, const char *func);
static EBB_NOINLINE void free_block(void *p, const char *func) {
  owner_enter(arena_tls); /* it may reach the thread's own pages */
  free_block_in(p, func);
  owner_leave();
}

static void free_block_in(void *p, const char *func) {
  owner_t o = lookup(p, func);
  if (unlikely(!o.chunk)) {
    huge_free(o.huge);
    return;
  }
  arena_t *a = arena_tls;
  check_not_free(o, p, func);
  /* The thread's own block goes home here, never into its cache: this is the
   * free of a block of a full page (which this takes off the full list) or
   * one the fast path declined; cached, it would keep its page full and
   * every free of the page's blocks on this slow path (instance churn +20 %). */
  if (likely(relaxed_load(o.chunk->arena) == a))
    arena_free_local(a, o.page, p);
  else if (!arena_free_cached(a, o.page, p))
    arena_free_remote(relaxed_load(o.chunk->arena), o.page, p);
}

/* Another arena's checked block (its page neither purged nor unused) that the
 * fast path did not cache: into this thread's cache, else onto its page's
 * remote list. Without this a thread with no arena, a consumer that only
 * frees, paid free_block's second lookup on every free (xmalloc-test -w 2:
 * 78 -> 70 M frees a second). */
static EBB_NOINLINE void free_foreign(arena_t *a, chunk_t *c, page_t *pg, block_t *b) {
  owner_enter(arena_tls); /* a full cache sends the thread's own blocks home too */
  if (!arena_free_cached(a, pg, b)) arena_free_remote(relaxed_load(c->arena), pg, b);
  owner_leave();
}

/* The thread's own checked block (free_fast's tests passed) of a page that is
 * full, purged or unused, when its class's slot did not take it: a purged
 * page's block may be parked, an unused page's is no block, so both take
 * free_block_in's checks and names; a full page's goes home without
 * free_block's second lookup (callgrind, bench/loop: 4097-8192 B 160 -> 156
 * instructions a pair, 65536-229376 1076 -> 1049, 229377-2097152 2860 -> 2764). */
static EBB_NOINLINE void free_own_slow(arena_t *a, page_t *pg, block_t *b) {
  owner_enter(arena_tls);
  if (relaxed_load(pg->purged) != 0 || relaxed_load(pg->cls) >= NCLASSES)
    free_block_in(b, "free");
  else
    arena_free_local(a, pg, b);
  owner_leave();
}

/* What free_fast does with a checked block (not free; cookie is
 * page_cookie(b)) that is not its own page's push: the thread's own block (a
 * page that is full, purged or unused) goes to free_own_slow, another arena's
 * block whose page is neither purged nor unused to free_foreign, anything else
 * (another arena's purged or unused page) to free_block, which checks
 * everything again and names any misuse. key: the thread's free key, read
 * inside free's window, which this ends: after the push into the thread
 * cache (arena_cache_own_full), which a taker of an idle owner's cache must
 * not meet half done (arena_take_sources; found by ThreadSanitizer in
 * test_reclaim, a free that had read the key before the taker swapped it). */
static EBB_NOINLINE void free_other(uintptr_t key, void *p, page_t *pg) {
  arena_t *a = (arena_t *)(key & ~(uintptr_t)1);
  chunk_t *c = chunk_of(p); /* computed here, off the fast path */
  if (relaxed_load(c->arena) == a) {
    bool cached = arena_cache_own_full(a, pg, p, page_cookie(p));
    free_window_close();
    if (!cached) free_own_slow(a, pg, p); /* a tail call */
    return;
  }
  free_window_close();
  if (relaxed_load(pg->purged) == 0 && relaxed_load(pg->cls) < NCLASSES)
    free_foreign(a, c, pg, p); /* a tail call */
  else
    free_block(p, "free");
}

/* free_server's cases off its own path, each a tail call from it: the slot
 * was empty (the class's mallocs take from the cache again, and a slow-path
 * event is counted), or full. */
static EBB_NOINLINE void free_server_was_empty(arena_t *a, size_t off) {
  arena_set_src(a, TC_OF(off), &((tcache_t *)((char *)a->tc + off))->fl);
  if (unlikely(tick_due(a))) arena_tick(a);
}

static EBB_NOINLINE void free_server_full(uintptr_t key, void *p, page_t *pg, uint64_t cookie) {
  arena_t *a = (arena_t *)(key - 1);
  if (relaxed_load(pg->fast_owner) == a) {
    arena_page_push(a, pg, (block_t *)p, cookie);
    free_window_close();
    return;
  }
  free_other(key, p, pg); /* ends the window */
}

/* A server's thread's free (key has bit 0 set): into the thread cache while
 * the slot of pg->tc_off has room, whoever's block it is, else as any other
 * thread's. Inlined into free_fast for the push into a slot with room, its
 * ends out of line (free_server_was_empty, free_server_full), so the fast path
 * keeps only tail calls and saves no register: a server's free costs about 49
 * instructions, 58 as a call of its own (callgrind on bench/larson t1: 123 ->
 * 113 a malloc/free pair, the benchmark's own included). It ends free's
 * window itself.
 *   A thread caches its own blocks only while it also frees many other
 * threads' blocks: one that frees mostly its own gains nothing from caching
 * them and lost up to 20 % (instance churn, per-request malloc/free: a burst
 * of frees went into the cache and out again, per-class limits made the
 * choice of cache or page follow each block's class, which mispredicts, and
 * mallocs took blocks in an order that cached worse). A server's thread,
 * whose frees are its own and other threads' at random, caches both, so no
 * branch asks whose block it is (larson t2: 71 -> 100 Mops/s).
 *   A free into an empty slot counts as a slow-path event, so a thread whose
 * blocks all go round through its cache still reads the clock and runs its
 * decay. arena_none's slots have room 0: it is never written (and its key
 * never has bit 0 set). */
EBB_INLINE void free_server(uintptr_t key, void *p, page_t *pg, uint64_t cookie) {
  arena_t *a = (arena_t *)(key - 1);
  block_t *b = p;
  size_t off = relaxed_load(pg->tc_off);
  tcache_t *tc = (tcache_t *)((char *)a->tc + off);
  uint32_t room = relaxed_load(tc->fl.used);
  if (unlikely(room <= 1)) {
    free_server_full(key, p, pg, cookie); /* a tail call */
    return;
  }
  /* The window ends before the push, not after it: the cache is the thread's
   * alone and no taker touches a server's (arena_reclaim_queues_locked), so
   * only the key's read needed the window.
   * Its store then leaves ahead of the block's, which wait for the line of a
   * block another core wrote last (larson, 21 interleaved runs each on the
   * Intel Xeon VM: t1 90.1 -> 94.2 Mops/s, t2 45.1 -> 45.8; no instruction more). */
  free_window_close();
  track_free(b);
  bool was_empty = tc->fl.free == NULL;
  freelist_push(&tc->fl, b, cookie);
  relaxed_store(tc->fl.used, room - 1);
  if (unlikely(was_empty)) free_server_was_empty(a, off); /* a tail call */
}

/* The fast path: a live block of the thread's own page, when it may take the
 * fast path (pg->fast_owner equals the thread's free key, never true in a
 * server's thread), onto the page's list; a server's thread's block into its
 * cache (free_server); the rest to free_other. The page push happens between
 * free_window_open and free_window_close, the key read after the first: the
 * handshake with a thread that takes back an idle owner's pages
 * (arena_reclaim_queues_locked; arena.h says why a flag and not busy). */
EBB_INLINE void free_fast(void *p) {
  /* No prefetchw of the block (8f4c2a4 had one, from larson t2 69 -> 73
   * Mops/s in one window on an AMD EPYC VM): on the Intel Xeon VM, builds
   * interleaved, without it larson t2 is 2.5-5 % faster (medians of 9 and 7),
   * bench/prodcons 6 %, glibc-thread and glibc-simple the same. */
  if (likely(registry_in_chunk(p))) { /* never for NULL */
    page_t *pg = chunk_unit_page(chunk_of(p), p);
    block_t *b = p;
    uint64_t cookie = page_cookie(b); /* loaded once: the stores below might alias page_key */
    /* a span's later unit says "no block" (chunk_unit_page): its head is
     * asked, off the path of one-unit pages */
    if (unlikely(!page_is_block(pg, p))) pg = (page_t *)((char *)pg - fast_load(pg->head_back));
    if (likely(page_is_block(pg, p) && !block_cookie_is(b, cookie))) {
      free_window_open();
      uintptr_t key = __atomic_load_n(&arena_free_key, __ATOMIC_ACQUIRE);
      if (likely(fast_load(pg->fast_owner) == (arena_t *)key)) {
        window_stretch(); /* the heavy debug build's only */
        if (arena_page_push_emptied(pg, b, cookie))
          arena_free_local_slow_leave((arena_t *)key, pg); /* a tail call; ends the window */
        else
          free_window_close();
        return;
      }
      if (key & 1) {
        free_server(key, p, pg, cookie); /* a tail call; ends the window */
        return;
      }
      free_other(key, p, pg); /* ends the window */
      return;
    }
  }
  if (p) free_block(p, "free");
}

/* Each with the fast path inlined: a call from one exported name to another
 * goes through the PLT (an indirect jump) in libebb.so, and C++'s sized
 * delete, which every modern compiler emits, is ebb_free_sized. */
EBB_EXPORT EBB_HOT_ENTRY void ebb_free(void *p) { free_fast(p); }

EBB_EXPORT EBB_HOT_ENTRY void ebb_free_sized(void *p, size_t size) {
  (void)size;
  free_fast(p);
}

EBB_EXPORT EBB_HOT_ENTRY void ebb_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  (void)size;
  free_fast(p);
}

/* A freed block is named as free() names it: its cookie, or its purged
 * granule. Before, only a block whose page had gone back was caught, so the
 * answer for a freed block of a one-block page changed from "double free" to
 * its size once the thread kept that page (one_spare_keep). */
EBB_EXPORT size_t ebb_malloc_usable_size(const void *p) {
  if (!p) return 0;
  owner_t o = lookup(p, "malloc_usable_size");
  if (o.chunk) check_not_free(o, (block_t *)p, "malloc_usable_size");
  return usable_of(o);
}

EBB_EXPORT int ebb_owns(const void *p) {
  void *h = p ? registry_get(p) : NULL;
  if (!h) return 0;
  chunk_t *c = chunk_of(p);
  if (h != c) return huge_of(h) && relaxed_load(huge_of(h)->user) == p;
  page_t *pg = chunk_page_of(c, p);
  if (relaxed_load(pg->cls) >= NCLASSES || !page_is_block(pg, p) || block_parked(pg, p)) return 0;
  return !block_has_cookie((const block_t *)p);
}

static void *alloc_in(arena_t *a, size_t size, bool first_class) {
  if (!first_class) return malloc_inline(size); /* not ebb_malloc: that call would go through the PLT */
  if (size > CLASS_MAX_SIZE) return size > MAX_REQUEST ? fail_nomem() : huge_alloc(a, size, MIN_ALIGN);
  void *p = arena_malloc(a, size);
  return p ? p : fail_nomem();
}

/* From this size on a reused block's pages are zeroed by os_zero: a system
 * call costs about what a memset of 16 KiB does. */
#define CALLOC_ZERO_MIN ((size_t)256 * 1024)

static void *calloc_in(arena_t *a, size_t n, size_t size, bool first_class) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) return fail_nomem();
  if (total > CLASS_MAX_SIZE)
    return total > MAX_REQUEST ? fail_nomem() : huge_alloc_z(first_class ? a : NULL, total, MIN_ALIGN, true);
  page_fresh = NULL; /* so only a block carved by this allocation can match */
  void *p = alloc_in(a, total, first_class);
  if (!p) return p;
  if (p == page_fresh && total > sizeof(block_t)) {
    track_open(p, total);
    memset(p, 0, sizeof(block_t)); /* its link and cookie: the rest was never written */
  } else if (total >= CALLOC_ZERO_MIN) {
    /* the whole pages inside the block as a large block's (huge_alloc_z) */
    char *from = (char *)align_up((uintptr_t)p, OS_PAGE), *to = (char *)((uintptr_t)((char *)p + total) & ~(uintptr_t)(OS_PAGE - 1));
    memset(p, 0, (size_t)(from - (char *)p));
    track_open(from, (size_t)(to - from)); /* zeroes from here on */
    os_zero(from, (size_t)(to - from));
    memset(to, 0, (size_t)((char *)p + total - to));
  } else {
    memset(p, 0, total);
  }
  return p;
}

EBB_EXPORT void *ebb_calloc(size_t n, size_t size) { return calloc_in(NULL, n, size, false); }

/* Large blocks are resized by the kernel; small ones stay put while the new
 * size still fits and wastes no more than half the block. */
static void *realloc_in(arena_t *a, void *p, size_t size, bool first_class) {
  if (!p) return alloc_in(a, size, first_class);
  owner_t o = lookup(p, "realloc");
  if (o.chunk) check_not_free(o, p, "realloc");
  if (size == 0) {
    free_block(p, "realloc");
    return NULL;
  }
  size_t old = usable_of(o);
  /* Also a block of its own mapping no larger than a class's (aligned beyond
   * 1 MiB): it moved to a class block on every realloc, and lost its
   * alignment (found by a probe: realloc(p, malloc_usable_size(p)) of
   * aligned_alloc(2 MiB, 1 MiB) copied 1 MiB). */
  if ((o.chunk || old <= CLASS_MAX_SIZE) && size <= old && size >= old / 2) return p;
  uint64_t now;
  /* memcheck forgets the block before the kernel moves its pages: after the
   * mremap another thread may map the old range and register a block there,
   * which a late track_free(p) would unregister (found by a probe: false
   * "invalid write" reports in the valgrind build, threads resizing large
   * blocks). A refused resize registers it again, its bytes all defined. */
  bool resizable = !o.chunk && size > CLASS_MAX_SIZE && size <= MAX_REQUEST;
  if (resizable) track_free(p);
  bool resized = resizable && huge_resize(o.huge, size, opt.decay_ms != 0, now = os_now_ms());
  /* A growth the kernel refused (an address-space limit): what ebb holds
   * itself goes back first and the resize is tried once more, as for any
   * allocation (huge_alloc_z). Without this only the copy's fresh mapping was
   * tried again after the purge, old and new size at once, and failed where
   * growing in place now fit (found by a probe: realloc(40 MiB -> 56 MiB)
   * under RLIMIT_AS with a 40 MiB block in the large-block cache gave NULL,
   * and the same call again succeeded in place). */
  if (resizable && !resized && size > old && arena_purge_all(true))
    resized = huge_resize(o.huge, size, opt.decay_ms != 0, now = os_now_ms());
  if (resized) {
    huge_t *h = o.huge;
    arena_t *to = first_class ? a : NULL;
    if (h->user != p && h->arena != to) { /* moved: into the arena asked for, as a small block's copy goes */
      huge_unlink(h); /* found by a probe: ebb_arena_realloc(b, p, 64 MiB) of a's block moved it but left */
      huge_link(to, h); /* it a's, so ebb_arena_destroy(a) freed it and ebb_arena_reset(b) did not */
    }
    track_malloc(h->user, huge_usable(h), false);
    track_open(h->user, old < size ? old : size); /* the kept bytes moved with the pages */
    if (size > old) { /* grown (in place or moved by the kernel): a peak, and the auto cap shrinks */
      arena_note_peaks(now);
      arena_cap_after_growth();
    } else if (size < old) { /* its tail is dirty now (slack, or cached regions): the cap applies at once */
      arena_enforce_cap();
    }
    return h->user;
  }
  if (resizable) {
    track_malloc(p, old, false);
    track_open(p, old);
  }
  /* A block that grows is asked for at its class's whole size: a one-block
   * page's block is colored (arena.c, page_color) and gives up to 4 KiB of
   * its class's size to the color, no more than the request leaves unused,
   * so a buffer grown in small steps (realloc(p, n + len), a string or a log
   * being appended to) outgrew its block every few dozen bytes and moved
   * into another block of the same class with another color: growing one
   * buffer to 256 KiB by 1-64 bytes a call moved it 175 times and copied 18
   * MiB (mimalloc 43 times, 1.3 MiB; a probe's finding, 56 ns a call against
   * mimalloc's 29 with 256 such buffers). Uncolored, it moves once a class. */
  size_t want = size > old && size <= CLASS_MAX_SIZE ? class_size_of(size_class(size)) : size;
  void *q = alloc_in(first_class ? a : NULL, want, first_class);
  if (!q) return NULL;
  memcpy(q, p, old < size ? old : size);
  free_block(p, "realloc");
  return q;
}

EBB_EXPORT void *ebb_realloc(void *p, size_t size) { return realloc_in(NULL, p, size, false); }

EBB_EXPORT void *ebb_reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) return fail_nomem();
  return ebb_realloc(p, total);
}

/* ------------------------------------------------------------ aligned */

/* Blocks of a class whose size is a multiple of align start at multiples of
 * align (pages start on unit boundaries), so such a class serves the request.
 * Beyond a unit, up to MAX_CHUNK_ALIGN (1 MiB), the class's page (one block)
 * is placed at a multiple of align (arena_malloc_aligned). Larger alignments, or blocks
 * past the largest class, are large blocks (chunk-aligned mappings). */
static void *aligned_alloc_in(arena_t *first_class, size_t align, size_t size) {
  if (align <= MIN_ALIGN) return alloc_in(first_class, size, first_class != NULL);
  if (size > MAX_REQUEST) return fail_nomem();
  if (align <= MAX_CHUNK_ALIGN && size <= CLASS_MAX_SIZE) {
    /* The smallest class of at least the size whose blocks are multiples of
     * align: none below align is, so the search starts there, and align is a
     * power of two, so a mask tests it. It started at the size's class and
     * divided at each step: posix_memalign(4096, 100) walked 41 classes, 725
     * instructions a call, 129 ns a pair in a loop (a probe; tcmalloc 11). Above
     * a unit the block is also its page's only one (size < align: align). */
    unsigned c = size_class(size > align ? size : align);
    while (class_size_of(c) & (align - 1)) c++; /* CLASS_MAX_SIZE is a multiple of every such align */
    /* every block of c lies at a multiple of its size from its unit-aligned
     * page: malloc's own paths (the thread cache, the class's page) serve it */
    if (!first_class && align <= UNIT_SIZE) return malloc_inline(class_size_of(c));
    arena_t *a = first_class ? first_class : thread_arena();
    if (!a) return fail_nomem();
    void *p = align <= UNIT_SIZE ? arena_malloc(a, class_size_of(c)) : arena_malloc_aligned(a, c, align);
    if (!first_class) thread_arena_done(a);
    return p ? p : fail_nomem();
  }
  return huge_alloc(first_class, size, align);
}

static void *aligned_alloc_core(size_t align, size_t size) { return aligned_alloc_in(NULL, align, size); }

static bool pow2(size_t x) { return x && !(x & (x - 1)); }

/* An alignment every block has anyway is a malloc, with its fast path
 * inlined here (rptest asks memalign for 8 or 16 in two of three small
 * allocations; before, that cost two calls through the PLT and two more). */
EBB_INLINE void *aligned_alloc_inline(size_t alignment, size_t size) {
  if (likely(alignment <= MIN_ALIGN && pow2(alignment))) return malloc_inline(size);
  if (!pow2(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_alloc_core(alignment, size);
}

EBB_EXPORT int ebb_posix_memalign(void **out, size_t alignment, size_t size) {
  if (!pow2(alignment) || alignment % sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = aligned_alloc_inline(alignment, size); /* alignment is a power of two here */
  if (!p) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

EBB_EXPORT void *ebb_aligned_alloc(size_t alignment, size_t size) { return aligned_alloc_inline(alignment, size); }

EBB_EXPORT void *ebb_memalign(size_t alignment, size_t size) {
  return alignment == 0 ? malloc_inline(size) : aligned_alloc_inline(alignment, size);
}

EBB_EXPORT void *ebb_valloc(size_t size) { return aligned_alloc_core(OS_PAGE, size); }

EBB_EXPORT void *ebb_pvalloc(size_t size) {
  if (size > MAX_REQUEST) return fail_nomem();
  return aligned_alloc_core(OS_PAGE, size ? align_up(size, OS_PAGE) : OS_PAGE);
}

/* ------------------------------------------------------------ first-class arenas */

EBB_EXPORT ebb_arena_t *ebb_arena_create(void) {
  thread_process_init();
  arena_t *a = arena_claim(ARENA_FREE, ARENA_FIRST_CLASS);
  if (!a) a = arena_new(ARENA_FIRST_CLASS);
  if (!a) errno = ENOMEM;
  return (ebb_arena_t *)a;
}

/* A handle that ebb_arena_create returned and nobody destroyed, or death
 * with "invalid arena": an arena's struct is a page-aligned mapping of its
 * own, never unmapped, whose `check` is its address ^ page_key, and a live
 * first-class arena's state says so. Before, a second ebb_arena_destroy of
 * the same handle went ahead (found by a probe), on an arena that a new
 * thread may have taken in between, whose chunks it then pooled while the
 * thread used them. A handle to memory that is no arena matches by chance
 * only (2^-64); one destroyed and then returned again by ebb_arena_create
 * is that new arena (as a stale pointer to a reused block is that block). */
EBB_INLINE bool arena_is_live_first_class(const arena_t *a) {
  return relaxed_load(a->check) == ((uintptr_t)a ^ page_key) &&
         atomic_load_explicit(&a->state, memory_order_relaxed) == ARENA_FIRST_CLASS;
}
static arena_t *arena_arg(ebb_arena_t *h, const char *func) {
  arena_t *a = (arena_t *)h;
  EBB_CHECK(a && ((uintptr_t)a & (OS_PAGE - 1)) == 0 && arena_is_live_first_class(a), func, "invalid arena", h);
  return a;
}

/* The same pop as ebb_malloc's fast path, from the arena's own pages, once
 * the handle passes arena_arg's tests, the alignment first: it keeps the
 * reads inside the handle's page (found by a probe: a handle 16 bytes before
 * an unmapped page faulted here where the other calls named it). Without them a handle to other memory went
 * straight to the pop: a zeroed block faulted, and memory whose words pointed
 * into itself was "allocated" and written (found by a probe); and a stale
 * handle to an arena that a new thread had taken popped from that thread's
 * pages. A handle to unmapped memory still faults, as in arena_arg. */
EBB_EXPORT void *ebb_arena_malloc(ebb_arena_t *h, size_t size) {
  arena_t *a = (arena_t *)h;
  if (likely(size <= 1024 && a && ((uintptr_t)a & (OS_PAGE - 1)) == 0 && arena_is_live_first_class(a))) {
    void *p = arena_pop_page(a, class_small[(size + 15) >> 4]); /* first-class: no cache; NULL, a failed ebb_arena_create's, is named below */
    if (likely(p != NULL)) return p;
  }
  return alloc_in(arena_arg(h, "ebb_arena_malloc"), size, true);
}

EBB_EXPORT void *ebb_arena_calloc(ebb_arena_t *a, size_t n, size_t size) {
  return calloc_in(arena_arg(a, "ebb_arena_calloc"), n, size, true);
}

EBB_EXPORT void *ebb_arena_realloc(ebb_arena_t *a, void *p, size_t size) {
  return realloc_in(arena_arg(a, "ebb_arena_realloc"), p, size, true);
}

EBB_EXPORT void *ebb_arena_aligned_alloc(ebb_arena_t *a, size_t alignment, size_t size) {
  arena_t *fc = arena_arg(a, "ebb_arena_aligned_alloc");
  if (!pow2(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_alloc_in(fc, alignment, size);
}

EBB_EXPORT void ebb_arena_reset(ebb_arena_t *a) {
  if (a) arena_reset_blocks(arena_arg(a, "ebb_arena_reset"));
}

EBB_EXPORT void ebb_arena_destroy(ebb_arena_t *a) {
  if (a) arena_destroy(arena_arg(a, "ebb_arena_destroy"));
}

EBB_EXPORT size_t ebb_trim(void) {
  thread_process_init(); /* the options decide how memory is returned */
  return arena_purge_all(true);
}
