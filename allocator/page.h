/* page.h — owns a page: a span of 1..32 units inside a chunk that serves one
 * size class, with its free lists. Blocks carry no header; a free block holds
 * its free-list link and a cookie (key ^ address) that marks it free, so a double
 * free is caught with one compare (glibc's tcache key, made per process).
 * Only the owning arena's thread touches `free`; other threads push onto `xfree`
 * with one compare-and-swap (free-list sharding as in mimalloc).
 * Layer: above sizeclass, track, os. */
#ifndef EBB_PAGE_H
#define EBB_PAGE_H
#include "common.h"
#include "sizeclass.h"
#include "track.h"

typedef struct block {
  struct block *next; /* free-list link */
  uint64_t cookie;    /* page_cookie(b) while free, 0 once handed out */
} block_t;

/* xfree, a page's remote-free stack in one word: the head block's address
 * (below 2^47, as the chunk map assumes), the count of blocks on the stack in
 * the top 16 bits (a page holds at most XFREE_COUNT_MAX blocks: test_sizeclass),
 * and in bit 0 XFREE_FULL, in bit 1 XFREE_WATCH. A push adds XFREE_ONE and
 * sets the address with its one CAS, so the owner knows how many blocks it
 * collects without walking them: each is a line another core wrote, and the
 * walk was a quarter of a producer's time (bench/prodcons). */
#define XFREE_FULL ((uintptr_t)1) /* in xfree: the page is off its queue (full) */
/* in an empty xfree: a taker went over this page of an idle owner (its
 * arena's queues), and the next remote free tells the arena (xfree_news) */
#define XFREE_WATCH ((uintptr_t)2)
#define XFREE_COUNT_SHIFT 48
#define XFREE_ONE ((uintptr_t)1 << XFREE_COUNT_SHIFT)
#define XFREE_COUNT_MAX 0xffffu
#define XFREE_HEAD(x) ((block_t *)((x) & (XFREE_ONE - 1) & ~(XFREE_FULL | XFREE_WATCH)))
#define XFREE_COUNT(x) ((uint32_t)((x) >> XFREE_COUNT_SHIFT))
/* The word after pushing n blocks, head first, onto the stack `old` (the
 * count grows by n, the flags clear). */
#define XFREE_PUSHED(old, head, n) (((old) & ~(XFREE_ONE - 1)) + (uintptr_t)(n) * XFREE_ONE + (uintptr_t)(head))

enum { PAGE_UNUSED = 0xff, PAGE_TAIL = 0xfe }; /* values of page.cls besides real classes */
_Static_assert(NCLASSES < PAGE_TAIL, "a class fits page.cls below the two markers");

/* Three cache lines, by who writes them (and a fourth of padding): what every
 * free() reads and only slow paths change; what the owner's fast paths write;
 * what other threads write.
 * A remote free then shares the first line read-only and never touches the
 * owner's hot line. */
/* What the malloc fast path pops from: a page's list, or a thread cache
 * slot's (arena.h), whose `used` counts the room left instead. */
typedef struct {
  block_t *free;
  uint32_t used;
} freelist_t;

typedef struct page {
  /* line 0: read by every free; written on slow paths, and by page_bump while the page is fresh */
  uint64_t magic;         /* class magic, for offset → index; 0 when the unit serves no class */
  char *start;            /* first byte of the span (its first block's: the span's plus color) */
  uint64_t blk_limit;     /* carved blocks times the class's e: page_is_block's one compare (sizeclass.h); 64-bit so the compare takes it as a memory operand */
  uint32_t carved_end;    /* bump pointer: blocks below it were handed out at least once, offsets at or past it are no block */
  uint32_t block_size;    /* class size (a colored one-block page's block: that less color) */
  uint32_t capacity;      /* blocks that fit */
  uint8_t cls;            /* size class, PAGE_UNUSED, or PAGE_TAIL (a later unit of a span) */
  uint8_t units;          /* span length in units (head only) */
  uint8_t sub_shift;      /* log2 of the purge granule */
  uint8_t bump;           /* fresh blocks are bumped (first-class arenas), else carved into the list */
  uint32_t blk_step;      /* the class's e = magic * block_size mod 2^64: what a bumped block adds to blk_limit */
  uint16_t head_back;     /* bytes back to the span's head descriptor (0 unless PAGE_TAIL) */
  uint16_t tc_off;        /* the thread-cache slot a free of its blocks may use, as a byte offset: TC_OFF(cls or TC_NONE) */
  uint64_t purged;        /* granules returned to the kernel; their free blocks are parked */
  struct arena *fast_owner; /* the owner while its frees may take the fast path, else NULL (never a thread's arena) */
  /* line 1: the owner's */
  union {
    struct {
      block_t *free;       /* owner's free list: the malloc fast path pops here */
      uint32_t used;       /* blocks handed out and not yet freed back to this list */
      uint32_t purge_used; /* `used` when a decay pass last looked at it (UINT32_MAX: never) */
    };
    freelist_t fl; /* the same two fields as malloc sees them (arena.h) */
  };
  struct page *next, *prev; /* class queue */
  uint64_t touched;         /* coarse ms when it last became the allocation page */
  uint64_t looked;          /* coarse ms of that look */
  uint8_t slow_free;        /* nonzero when a local free must take the slow path (full, purged, unused) */
  uint8_t full;             /* off the class queue because nothing was free */
  uint8_t remote_pending;   /* sits on the arena's remote_pages stack */
  uint8_t settled;          /* its free granules were purged and `used` has not moved since */
  uint32_t bump_end;       /* malloc may bump carved_end up to here (0 or carved_end: no bumping) */
  struct arena *owner;      /* the arena whose pages these are */
  /* line 2: other threads' */
  _Atomic(uintptr_t) xfree; /* remote frees (a stack): head, count, XFREE_FULL (above) */
  struct page *remote_next; /* arena remote_pages stack */
  uint64_t pad2[6];
  /* line 3: read when fresh blocks are carved, and by the owner's decay passes */
  uint64_t empty_since; /* when a decay pass saw the class's current page empty (empty_watch set), */
  uint32_t empty_seen;  /* with `empties` at this count */
  uint32_t empties;     /* times the owner's frees emptied it while it stayed the class's current page */
  uint8_t empty_watch;
  uint8_t fresh_zero; /* the span read as zeroes when taken (chunk_take_span sets it, page_init keeps it):
                         nothing at or past carved_end has been written since */
  uint16_t color;     /* a one-block page's block starts this far into the span (page_color): 0 otherwise */
  uint8_t pad3[44];   /* a fourth line, so a descriptor is found with a shift (256 bytes) */
} page_t;
_Static_assert(sizeof(page_t) == 256, "four cache lines");
_Static_assert(offsetof(page_t, fl.free) == offsetof(page_t, free) && offsetof(page_t, fl.used) == offsetof(page_t, used),
               "fl aliases free and used");
_Static_assert(offsetof(page_t, free) == 64 && offsetof(page_t, xfree) == 128, "line layout");

extern uint64_t page_key; /* per-process random key for cookies */

EBB_INLINE uint64_t page_cookie(const block_t *b) { return page_key ^ (uint64_t)(uintptr_t)b; }
/* Whether b carries the free cookie. b may be a live block whose bytes are
 * uninitialised, or a freed one: memcheck stays quiet for the read, is told the
 * copy we compare is defined, and the block's bytes keep their state. */
EBB_INLINE bool block_cookie_is(const block_t *b, uint64_t cookie) {
  track_quiet_begin();
  uint64_t c = fast_load(b->cookie);
  track_quiet_end();
  track_open(&c, sizeof c);
  return c == cookie;
}
EBB_INLINE bool block_has_cookie(const block_t *b) { return block_cookie_is(b, page_cookie(b)); }

EBB_INLINE size_t page_span(const page_t *pg) { return (size_t)pg->units * UNIT_SIZE; }

/* Blocks [0, carved) have been handed out at least once (slow paths only: a divide). */
EBB_INLINE uint32_t page_carved(const page_t *pg) { return pg->carved_end / pg->block_size; }

/* A fresh block by bumping carved_end, when the free list is empty: no list is
 * built and the block's memory is not read, only its cookie word cleared (an
 * old cookie left by a reset or a retired page must not read as "free").
 * page_refill opens the range a batch at a time, so remote frees and parked
 * blocks are taken before fresh memory (mimalloc extends its free list in
 * batches for the same reason; bumping avoids writing the list at all).
 * Only pages with `bump` set open such ranges (first-class arenas: a request
 * that resets or destroys its arena writes each block once, and the next
 * request carves nothing). Thread arenas carve a batch into the list instead:
 * that burst of writes, one line a block, made instance churn 15 % faster than
 * bumping did (bench churn gap0 49 vs 57 us), while per-request arenas reset
 * 10 % faster with bumping (reqarena 34 vs 37 us). */
EBB_INLINE void *page_bump(page_t *pg) {
  uint32_t end = pg->carved_end;
  if (end >= pg->bump_end) return NULL;
  block_t *b = (block_t *)(pg->start + end);
  relaxed_store(pg->carved_end, end + pg->block_size);
  relaxed_store(pg->blk_limit, pg->blk_limit + pg->blk_step);
  track_open(b, sizeof *b);
  relaxed_store(b->cookie, 0);
  owner_add(pg->used, 1);
  track_malloc(b, pg->block_size, false);
  return b;
}

/* The first block of the page's list, else a fresh one bumped; NULL if neither. */
EBB_INLINE void *page_pop(page_t *pg) {
  block_t *b = pg->free;
  if (unlikely(b == NULL)) return page_bump(pg);
  track_open(b, sizeof *b);
  pg->free = b->next;
  relaxed_store(b->cookie, 0);
  owner_add(pg->used, 1);
  track_malloc(b, pg->block_size, false);
  return b;
}

/* A local free may take the fast path (push, count) only while the page is
 * neither full, purged nor unused: one field that every free compares with the
 * freeing thread's arena says both "mine" and "nothing special" (mimalloc
 * folds its thread id and page flags into one test the same way). */
EBB_INLINE void page_set_slow(page_t *pg, bool slow) {
  relaxed_store(pg->slow_free, (uint8_t)slow); /* read by the owner while another thread purges a full page of it */
  relaxed_store(pg->fast_owner, slow ? NULL : pg->owner);
}

/* A free may put a block of pg in the freeing thread's cache (arena.h) only
 * while the page serves a class, belongs to a thread arena (bump pages are
 * first-class arenas', which may be destroyed with the block still cached) and
 * has no purged granule (a free there must first rule out a parked block):
 * tc_off then names the class's slot, else TC_NONE's, a slot that never takes
 * a block. It is kept as a byte offset into the slots, so the free fast path
 * adds it to the arena with no shift.
 * Called wherever cls, bump or purged change. */
#define TC_NONE NCLASSES
#define TC_SLOT 32 /* sizeof(tcache_t) */
#define TC_OFF(t) ((uint16_t)((t) * TC_SLOT))
#define TC_OF(off) ((unsigned)((off) / TC_SLOT))
EBB_INLINE void page_set_cache(page_t *pg) {
  bool ok = relaxed_load(pg->cls) < NCLASSES && !pg->bump && relaxed_load(pg->purged) == 0 && !pg->color;
  relaxed_store(pg->tc_off, TC_OFF(ok ? relaxed_load(pg->cls) : TC_NONE));
}

/* Whether p is the start of a block of pg ever handed out: one multiply and
 * one compare (sizeclass.h), and false for any descriptor that serves no class
 * (blk_limit 0). */
EBB_INLINE bool page_is_block(const page_t *pg, const void *p) {
  uint32_t off = (uint32_t)((const char *)p - fast_load(pg->start));
  return (uint64_t)off * fast_load(pg->magic) < fast_load(pg->blk_limit);
}

/* Sets the bump pointer: blocks below end (a multiple of the block size) were
 * handed out at least once. Keeps blk_limit with it (end 0 needs no division:
 * an unused unit's block_size may be 0). */
EBB_INLINE void page_set_carved(page_t *pg, uint32_t end) {
  relaxed_store(pg->carved_end, end);
  relaxed_store(pg->blk_limit, end ? (end / pg->block_size) * pg->blk_step : 0);
}

/* Block index of p in pg, or UINT32_MAX if p is not the start of a block ever
 * handed out. Safe on any p inside the span. */
EBB_INLINE uint32_t page_block_index(const page_t *pg, const void *p) {
  if (!page_is_block(pg, p)) return UINT32_MAX;
  return offset_div((uint32_t)((const char *)p - relaxed_load(pg->start)), relaxed_load(pg->magic));
}

/* Mask of the granules that block i overlaps. */
EBB_INLINE uint64_t page_block_granules(const page_t *pg, uint32_t i) {
  /* relaxed: ebb_owns and other threads' frees call this on pages they do not own */
  uint32_t size = relaxed_load(pg->block_size);
  unsigned shift = relaxed_load(pg->sub_shift);
  size_t lo = (size_t)i * size, hi = lo + size - 1;
  size_t a = lo >> shift, b = hi >> shift;
  /* past the page's 64 granules: a stale pointer read while another thread
   * reuses the page (ebb_owns; page_block_index said UINT32_MAX) */
  if (a >= 64) return 0;
  uint64_t upto_b = b >= 63 ? ~(uint64_t)0 : ((uint64_t)1 << (b + 1)) - 1;
  return upto_b & ~(((uint64_t)1 << a) - 1);
}

/* Pushes b, marked free with cookie (page_cookie(b)), onto a page's or a
 * cache slot's list. */
EBB_INLINE void freelist_push(freelist_t *fl, block_t *b, uint64_t cookie) {
  track_open(b, sizeof *b);
  b->next = fl->free;
  relaxed_store(b->cookie, cookie);
  track_close(b, sizeof *b);
  fl->free = b;
}
EBB_INLINE void page_push_cookie(page_t *pg, block_t *b, uint64_t cookie) { freelist_push(&pg->fl, b, cookie); }
EBB_INLINE void page_push_local(page_t *pg, block_t *b) { page_push_cookie(pg, b, page_cookie(b)); }

/* bump: hand out fresh blocks by bumping carved_end (page_bump) instead of
 * carving them into the free list in batches. */
void page_init(page_t *pg, unsigned cls, char *start, struct arena *owner, bool bump);
/* The page of a class_is_one_block class. */
EBB_INLINE bool page_is_one_block(const page_t *pg) { return pg->capacity == 1 && pg->units > 1; }
/* Moves remote frees into the owner's list. Returns how many. */
uint32_t page_collect(page_t *pg);
/* Makes free blocks available (collect, unpark, carve). False if the page is full. */
bool page_refill(page_t *pg);
/* The first block of the calling thread's latest carve when that carve was of
 * memory that reads as zeroes (fresh_zero), else NULL: written by every carve
 * into a free list. A block carved during an allocation and handed out by it
 * equals this: calloc clears it (zeroes past its first 16 bytes) by its link
 * and cookie alone, and the kernel's zero pages stay untouched until the
 * program writes them (glibc's calloc skips fresh heap top the same way,
 * mimalloc's pages keep a free_is_zero flag). */
extern __thread block_t *page_fresh __attribute__((tls_model("initial-exec")));
/* Returns the page's wholly free granules to the kernel; bytes purged. */
size_t page_purge_free(page_t *pg, bool use_free);
#if EBB_VALGRIND
void page_track_free_live(page_t *pg); /* memcheck: pg's live blocks are freed (a first-class arena's reset, destroy) */
#endif
/* Expensive validator for debug builds. Owner only. */
bool page_is_valid(page_t *pg);
#endif
