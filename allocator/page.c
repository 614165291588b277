/* page.c — owns a page's free lists: carving fresh blocks, collecting remote
 * frees, returning wholly free granules to the kernel and parking the blocks in
 * them, and unparking them on demand.
 * May call: os_purge. Must never: take a lock, allocate, or be called by a
 * thread that does not own the page (remote threads only push onto xfree). */
#include "page.h"
#include "os.h"

uint64_t page_key;
__thread block_t *page_fresh __attribute__((tls_model("initial-exec")));

/* The fields other threads read without a lock (a stale free or ebb_owns may
 * look at any descriptor) are stored as relaxed atomics. */
void page_init(page_t *pg, unsigned cls, char *start, struct arena *owner, bool bump) {
  const class_info_t *ci = &class_info[cls];
  pg->free = NULL;
  relaxed_store(pg->used, 0);
  page_set_carved(pg, 0);
  relaxed_store(pg->blk_step, offset_block_limit(1, ci->magic, ci->size));
  pg->bump_end = 0;
  pg->bump = bump;
  relaxed_store(pg->magic, ci->magic);
  relaxed_store(pg->start, start);
  relaxed_store(pg->cls, (uint8_t)cls);
  pg->full = pg->remote_pending = 0;
  pg->owner = owner;
  page_set_slow(pg, false);
  relaxed_store(pg->units, (uint8_t)ci->units);
  relaxed_store(pg->head_back, 0);
  relaxed_store(pg->sub_shift, (uint8_t)ci->sub_shift);
  relaxed_store(pg->block_size, ci->size);
  pg->color = 0;
  pg->capacity = ci->count;
  relaxed_store(pg->purged, 0);
  page_set_cache(pg);
  pg->purge_used = UINT32_MAX;
  pg->settled = 0;
  pg->looked = 0;
  pg->empty_watch = 0;
  atomic_store_explicit(&pg->xfree, 0, memory_order_relaxed);
  pg->next = pg->prev = pg->remote_next = NULL;
}

EBB_INLINE block_t *block_at(const page_t *pg, uint32_t i) {
  return (block_t *)(pg->start + (size_t)i * pg->block_size);
}
EBB_INLINE block_t *block_next(block_t *b) {
  track_open(b, sizeof *b);
  block_t *n = b->next;
  track_close(b, sizeof *b);
  return n;
}

/* The heavy debug build's check of the count xfree carries. */
__attribute__((unused)) static bool xfree_count_is(block_t *head, uint32_t n) {
  uint32_t k = 0;
  for (block_t *b = head; b && k <= n; b = block_next(b)) k++;
  return k == n;
}

uint32_t page_collect(page_t *pg) {
  uintptr_t x = atomic_load_explicit(&pg->xfree, memory_order_relaxed);
  if (XFREE_HEAD(x) == NULL) return 0; /* XFREE_WATCH stays (the owner is still idle, or is back: harmless) */
  /* Only the owner sets XFREE_FULL, only a taker XFREE_WATCH (on an empty
   * list), and a remote push clears both, so a list with blocks carries
   * neither and exchanging with 0 loses nothing. */
  x = atomic_exchange_explicit(&pg->xfree, 0, memory_order_acquire);
  block_t *head = XFREE_HEAD(x);
  uint32_t n = XFREE_COUNT(x);
  ebb_assert_expensive(xfree_count_is(head, n));
  if (pg->free) { /* a decay pass or a taker: splice at the list's tail */
    block_t *last = head;
    for (block_t *nx; (nx = block_next(last)) != NULL;) last = nx;
    track_open(last, sizeof *last);
    last->next = pg->free;
    track_close(last, sizeof *last);
  }
  pg->free = head;
  ebb_assert(pg->used >= n);
  relaxed_store(pg->used, pg->used - n);
  return n;
}

/* Makes the next batch of fresh blocks available, about one OS page's worth
 * (up to 256 blocks bumped, 64 carved), so a page takes remote frees back
 * before more fresh memory and untouched memory stays untouched: opened to
 * page_bump, or carved into the free list in one pass, built backwards so
 * blocks come out in address order. */
static void page_open_batch(page_t *pg, uint32_t carved) {
  uint32_t batch = OS_PAGE / pg->block_size;
  if (batch < 1) batch = 1;
  if (batch > (pg->bump ? 256u : 64u)) batch = pg->bump ? 256u : 64u;
  uint32_t end = carved + batch;
  if (end > pg->capacity) end = pg->capacity;
  if (pg->bump) {
    pg->bump_end = end * pg->block_size;
    return;
  }
  size_t size = pg->block_size;
  char *lo = pg->start + (size_t)carved * size;
  block_t *head = pg->free;
  for (char *p = pg->start + (size_t)end * size; p > lo;) {
    p -= size;
    block_t *b = (block_t *)p;
    track_open(b, sizeof *b);
    b->next = head;
    relaxed_store(b->cookie, page_cookie(b));
    track_close(b, sizeof *b);
    head = b;
  }
  pg->free = head;
  page_fresh = pg->fresh_zero ? head : NULL;
  page_set_carved(pg, end * pg->block_size);
}

/* Takes back the lowest purged granule: its blocks that overlap no other purged
 * granule go on the free list (touching them faults the memory back in). */
static void page_unpark_one(page_t *pg) {
  /* Memory that was purged is in use again: the page is no longer "purged at
   * this count" (a later pass that found the count back where it was purged
   * skipped the page for good; found by a probe: 31.6 MB idle after a first
   * grow-and-shrink, 70 MB after each later one) */
  pg->settled = 0;
  unsigned s = (unsigned)__builtin_ctzll(pg->purged);
  relaxed_store(pg->purged, pg->purged & (pg->purged - 1));
  size_t lo = (size_t)s << pg->sub_shift, hi = lo + ((size_t)1 << pg->sub_shift);
  uint32_t first = (uint32_t)(lo / pg->block_size), last = (uint32_t)((hi - 1) / pg->block_size);
  uint32_t carved = page_carved(pg);
  if (last >= carved) last = carved - 1;
  for (uint32_t i = last + 1; i-- > first;)
    if (!(page_block_granules(pg, i) & pg->purged)) page_push_local(pg, block_at(pg, i));
  if (!pg->purged && !pg->full) page_set_slow(pg, false);
  page_set_cache(pg);
}

bool page_refill(page_t *pg) {
  if (pg->free || pg->carved_end < pg->bump_end || page_collect(pg)) return true;
  uint32_t carved = page_carved(pg);
  while (pg->purged && carved) {
    page_unpark_one(pg);
    if (pg->free) return true;
  }
  relaxed_store(pg->purged, 0); /* granules past the carved blocks need no unparking */
  page_set_cache(pg);
  if (carved < pg->capacity) {
    pg->settled = 0; /* blocks carved afresh: as above */
    page_open_batch(pg, carved);
    return true;
  }
  return false;
}

#define MAX_BLOCKS (UNIT_SIZE / MIN_ALIGN)

static void mark_free(page_t *pg, uint64_t *bits) {
  for (block_t *b = pg->free; b; b = block_next(b)) {
    uint32_t i = (uint32_t)(((char *)b - pg->start) / pg->block_size);
    bits[i / 64] |= (uint64_t)1 << (i % 64);
  }
}

/* Granules overlapped by a block that is handed out (or pending remote free). */
static uint64_t busy_granules(page_t *pg, const uint64_t *bits, uint32_t carved) {
  uint64_t busy = 0;
  for (uint32_t i = 0; i < carved; i++)
    if (!(bits[i / 64] >> (i % 64) & 1)) busy |= page_block_granules(pg, i);
  return busy;
}

static size_t purge_runs(page_t *pg, uint64_t m, bool use_free) {
  size_t bytes = 0;
  while (m) {
    unsigned a = (unsigned)__builtin_ctzll(m);
    uint64_t rest = m >> a;
    unsigned len = ~rest ? (unsigned)__builtin_ctzll(~rest) : 64 - a;
    size_t off = (size_t)a << pg->sub_shift, n = (size_t)len << pg->sub_shift;
    os_purge(pg->start + off, n, use_free);
    bytes += n;
    m &= len + a >= 64 ? 0 : ~(uint64_t)0 << (a + len);
  }
  return bytes;
}

size_t page_purge_free(page_t *pg, bool use_free) {
  uint32_t carved = page_carved(pg);
  if (pg->block_size > (1u << pg->sub_shift) * 64 || carved > MAX_BLOCKS || pg->color) return 0;
  uint64_t bits[MAX_BLOCKS / 64] = {0};
  mark_free(pg, bits);
  unsigned ngran = (unsigned)(page_span(pg) >> pg->sub_shift);
  uint64_t all = ngran >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << ngran) - 1;
  uint64_t cand = all & ~busy_granules(pg, bits, carved) & ~pg->purged;
  if (!cand) return 0;
  /* no bumping into purged granules: unparking them would hand out live blocks */
  pg->bump_end = pg->carved_end;
  size_t bytes = purge_runs(pg, cand, use_free);
  relaxed_store(pg->purged, pg->purged | cand);
  page_set_slow(pg, true);
  page_set_cache(pg);
  pg->free = NULL; /* rebuild, leaving out (parking) blocks in purged granules */
  for (uint32_t i = carved; i-- > 0;)
    if ((bits[i / 64] >> (i % 64) & 1) && !(page_block_granules(pg, i) & pg->purged))
      page_push_local(pg, block_at(pg, i));
  return bytes;
}

#if EBB_VALGRIND
/* Tells memcheck that every block of pg still handed out is freed: carved,
 * and neither on the page's list, on its remote list (its freeing thread
 * told memcheck already) nor parked in a purged granule. For a first-class
 * arena's reset and destroy, which free every block at once (found by a
 * probe: memcheck then saw two live blocks at one address and aborted its
 * leak check, and use after destroy went unreported). */
void page_track_free_live(page_t *pg) {
  uint64_t bits[MAX_BLOCKS / 64] = {0};
  mark_free(pg, bits);
  for (block_t *b = XFREE_HEAD(atomic_load_explicit(&pg->xfree, memory_order_acquire)); b; b = block_next(b)) {
    uint32_t i = (uint32_t)(((char *)b - pg->start) / pg->block_size);
    bits[i / 64] |= (uint64_t)1 << (i % 64);
  }
  uint64_t purged = relaxed_load(pg->purged);
  for (uint32_t i = 0, n = page_carved(pg); i < n; i++)
    if (!(bits[i / 64] >> (i % 64) & 1) && !(page_block_granules(pg, i) & purged)) track_free(block_at(pg, i));
}
#endif

bool page_is_valid(page_t *pg) {
  uint32_t carved = page_carved(pg);
  if (carved > pg->capacity || pg->used > carved || pg->carved_end % pg->block_size ||
      (pg->bump_end > pg->carved_end && (pg->bump_end > pg->capacity * pg->block_size || pg->purged)))
    return false;
  /* page_is_block's limit moves with the bump pointer */
  uint32_t stride = pg->block_size + pg->color; /* the class's size, magic's divisor */
  if (stride != class_info[pg->cls].size || pg->blk_limit != offset_block_limit(carved, pg->magic, stride) ||
      pg->blk_step != offset_block_limit(1, pg->magic, stride))
    return false;
  uint32_t nfree = 0, parked = 0;
  for (block_t *b = pg->free; b; b = block_next(b), nfree++) {
    uint32_t i = page_block_index(pg, b);
    if (i == UINT32_MAX || (page_block_granules(pg, i) & pg->purged)) return false;
    track_open(b, sizeof *b);
    bool ok = relaxed_load(b->cookie) == page_cookie(b);
    track_close(b, sizeof *b);
    if (!ok || nfree > carved) return false;
  }
  for (uint32_t i = 0; i < carved; i++)
    if (page_block_granules(pg, i) & pg->purged) parked++;
  return nfree + parked + pg->used == carved;
}
