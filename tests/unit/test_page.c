/* Page internals: lazy carving, the free lists, remote-free collection, and
 * returning wholly free granules to the kernel while live blocks keep theirs. */
#include <criterion/criterion.h>
#include <string.h>
#include "chunk.h"
#include "fake_os.h"

static page_t *new_page_mode(size_t size, bool bump) {
  sizeclass_init();
  page_key = 0x1234567;
  unsigned cls = size_class(size);
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  page_t *pg = chunk_take_span(c, class_info[cls].units, 1, false);
  cr_assert_not_null(pg);
  page_init(pg, cls, (char *)c + ((size_t)(pg - c->pages) << UNIT_SHIFT), NULL, bump);
  return pg;
}
/* A thread arena's page: fresh blocks are carved into the free list. */
static page_t *new_page(size_t size) { return new_page_mode(size, false); }

/* The malloc fast path's order: the free list, else bump, else refill and retry. */
static void *pop(page_t *pg) {
  if (!pg->free) {
    void *f = page_bump(pg);
    if (f) return f;
    if (!page_refill(pg)) return NULL;
    if (!pg->free) return page_bump(pg);
  }
  block_t *b = pg->free;
  pg->free = b->next;
  b->cookie = 0;
  pg->used++;
  return b;
}

static void push(page_t *pg, void *p) {
  page_push_local(pg, p);
  pg->used--;
}

static void remote_push(page_t *pg, void *p) {
  block_t *b = p;
  uintptr_t x = atomic_load(&pg->xfree);
  b->next = XFREE_HEAD(x);
  b->cookie = page_cookie(b);
  atomic_store(&pg->xfree, XFREE_PUSHED(x, b, 1));
}

static void yields_every_block_once(page_t *pg) {
  static void *seen[UNIT_SIZE / 16];
  uint32_t n = 0;
  for (void *p; (p = pop(pg)) != NULL; n++) {
    cr_assert_eq((uintptr_t)p % 16, 0);
    cr_assert_eq(page_block_index(pg, p), n, "blocks come out in address order");
    seen[n] = p;
  }
  cr_assert_eq(n, pg->capacity);
  cr_assert_eq(pg->used, pg->capacity);
  for (uint32_t i = 0; i < n; i++) push(pg, seen[i]);
  cr_assert_eq(pg->used, 0);
  cr_assert(page_is_valid(pg));
}

Test(page, carving_is_lazy_and_yields_every_block_once) {
  page_t *pg = new_page(64);
  cr_assert(page_refill(pg));
  cr_assert_not_null(pg->free, "a thread arena's page carves fresh blocks into its list");
  cr_assert_eq(pg->carved_end, 64 * 64, "the first refill carves one OS page (64 blocks of 64 B)");
  cr_assert_leq(pg->bump_end, pg->carved_end, "and opens nothing to bump");
  yields_every_block_once(pg);
}

Test(page, bumping_is_lazy_and_yields_every_block_once) {
  page_t *pg = new_page_mode(64, true);
  cr_assert(page_refill(pg));
  cr_assert_null(pg->free, "fresh blocks are bumped, no list is built");
  cr_assert_eq(pg->carved_end, 0, "nothing handed out yet");
  cr_assert_leq(pg->bump_end, 4096, "the first refill opens about one OS page");
  yields_every_block_once(pg);
}

Test(page, interior_and_uncarved_pointers_are_not_blocks) {
  page_t *pg = new_page(48);
  char *p = pop(pg);
  cr_assert_eq(page_block_index(pg, p), 0);
  cr_assert_eq(page_block_index(pg, p + 1), UINT32_MAX);
  cr_assert_eq(page_block_index(pg, p + 16), UINT32_MAX);
  cr_assert_eq(page_block_index(pg, pg->start + 48 * (pg->capacity - 1)), UINT32_MAX, "not carved yet");
}

Test(page, remote_frees_are_collected_by_the_owner) {
  page_t *pg = new_page(128);
  void *a = pop(pg), *b = pop(pg), *c = pop(pg);
  remote_push(pg, a);
  remote_push(pg, c);
  cr_assert_eq(pg->used, 3);
  cr_assert(block_has_cookie(a), "a remotely freed block carries the free cookie");
  cr_assert_not(block_has_cookie(b));
  cr_assert_eq(page_collect(pg), 2);
  cr_assert_eq(pg->used, 1);
  cr_assert(block_has_cookie(c));
  cr_assert(page_is_valid(pg));
}

/* Blocks 0 and 700 of a 64-byte page stay live: only their granules stay. */
Test(page, purge_returns_free_granules_and_keeps_live_ones) {
  fake_reset();
  page_t *pg = new_page(64);
  static void *blk[UNIT_SIZE / 64];
  for (uint32_t i = 0; i < pg->capacity; i++) blk[i] = pop(pg);
  memset(blk[0], 0xAB, 64);
  memset(blk[700], 0xCD, 64);
  for (uint32_t i = 0; i < pg->capacity; i++)
    if (i != 0 && i != 700) push(pg, blk[i]);
  size_t bytes = page_purge_free(pg, false);
  cr_assert_eq(bytes, 14 * 4096);
  cr_assert_eq(fake_purged_bytes, 14 * 4096);
  cr_assert(fake_was_purged(pg->start + 4096, 4096));
  cr_assert_not(fake_was_purged(pg->start, 4096));
  cr_assert_not(fake_was_purged((char *)blk[700], 64));
  cr_assert_eq(((unsigned char *)blk[0])[63], 0xAB, "live data survives");
  cr_assert_eq(((unsigned char *)blk[700])[0], 0xCD);
  cr_assert(page_is_valid(pg));
  cr_assert(page_block_granules(pg, 100) & pg->purged, "block 100 is parked in a purged granule");
  /* everything except the two live blocks comes back, each exactly once */
  static unsigned char got[UNIT_SIZE / 64];
  uint32_t n = 0;
  for (void *p; (p = pop(pg)) != NULL; n++) {
    uint32_t i = page_block_index(pg, p);
    cr_assert(i != 0 && i != 700 && !got[i], "block %u handed out twice or while live", i);
    got[i] = 1;
  }
  cr_assert_eq(n, pg->capacity - 2);
  cr_assert_eq(pg->purged, 0);
}

/* 48-byte blocks straddle 4 KiB granules: a live block pins both of its granules. */
Test(page, straddling_live_block_pins_both_granules) {
  page_t *pg = new_page(48);
  static void *blk[UNIT_SIZE / 48];
  for (uint32_t i = 0; i < pg->capacity; i++) blk[i] = pop(pg);
  uint32_t live = 4096 / 48; /* block 85 spans offsets 4080..4127 */
  memset(blk[live], 0x5A, 48);
  for (uint32_t i = 0; i < pg->capacity; i++)
    if (i != live) push(pg, blk[i]);
  page_purge_free(pg, false);
  for (int k = 0; k < 48; k++) cr_assert_eq(((unsigned char *)blk[live])[k], 0x5A);
  cr_assert_eq(pg->purged & 3, 0);
  cr_assert(page_is_valid(pg));
}

/* ebb_owns on a stale pointer can race the page's reuse and ask for block
 * UINT32_MAX (page_block_index's "no block"): no granule, no shift past 63. */
Test(page, a_block_index_past_the_page_overlaps_no_granule) {
  page_t *pg = new_page(48);
  cr_assert_eq(page_block_granules(pg, UINT32_MAX), 0);
  cr_assert_eq(page_block_granules(pg, 0), 1);
}

Test(page, purge_without_free_granules_does_nothing) {
  fake_reset();
  page_t *pg = new_page(4096);
  for (uint32_t i = 0; i < pg->capacity; i++) pop(pg);
  cr_assert_eq(page_purge_free(pg, false), 0);
  cr_assert_eq(fake_purges, 0);
}

/* A bumped block may hold an old free cookie (a reset arena, a reused page):
 * bumping clears it, so freeing the block is not taken for a double free. */
Test(page, bumped_block_loses_a_stale_cookie) {
  page_t *pg = new_page_mode(32, true);
  cr_assert(page_refill(pg));
  block_t *next = (block_t *)pg->start;
  next->cookie = page_cookie(next); /* what a block freed before a reset still holds */
  cr_assert(block_has_cookie(next));
  void *p = pop(pg);
  cr_assert_eq(p, (void *)next);
  cr_assert_not(block_has_cookie(p), "a live block must not read as free");
  cr_assert_eq(page_block_index(pg, p), 0);
  cr_assert_eq(page_block_index(pg, (char *)p + 32), UINT32_MAX, "the block past the bump pointer is no block yet");
}

/* Purging free granules closes the bump range: a fresh block bumped inside a
 * purged granule would later be unparked onto the free list while live. */
Test(page, purge_closes_the_bump_range_until_refill) {
  fake_reset();
  page_t *pg = new_page_mode(64, true);
  void *a = pop(pg);
  cr_assert_gt(pg->bump_end, pg->carved_end, "a batch is open");
  page_purge_free(pg, false);
  cr_assert_eq(pg->bump_end, pg->carved_end, "purging closed the batch");
  cr_assert(page_is_valid(pg));
  static unsigned char got[UNIT_SIZE / 64];
  uint32_t n = 0;
  for (void *p; (p = pop(pg)) != NULL; n++) {
    uint32_t i = page_block_index(pg, p);
    cr_assert(p != a && !got[i], "block %u handed out twice or while live", i);
    got[i] = 1;
  }
  cr_assert_eq(n, pg->capacity - 1);
  cr_assert(page_is_valid(pg));
}

/* ---------------------------------------------------------------- memory that reads as zeroes */

/* What calloc relies on: a span taken from units never written since they
 * were mapped (or purged with MADV_DONTNEED) is fresh_zero, and a carve on it
 * names its first block in page_fresh; a span that was in use before, or was
 * purged with MADV_FREE (which may keep the old bytes), is not, and a carve on
 * it leaves page_fresh NULL. */
Test(page, only_units_never_written_since_mapped_or_dontneed_purged_read_as_zero) {
  sizeclass_init();
  page_key = 0x1234567;
  unsigned cls = size_class(100000), units = class_info[cls].units;
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  cr_assert_eq(c->zero_units, CHUNK_ALL_FREE, "a fresh mapping reads as zeroes");

  page_t *pg = chunk_take_span(c, units, 1, false);
  cr_assert_not_null(pg);
  cr_assert(pg->fresh_zero);
  page_init(pg, cls, (char *)c + ((size_t)(pg - c->pages) << UNIT_SHIFT), NULL, false);
  cr_assert(pg->fresh_zero, "page_init keeps what the take found");
  page_fresh = (block_t *)1;
  cr_assert(page_refill(pg));
  cr_assert_eq(page_fresh, pg->free, "the carve names its first block");
  memset(pg->free, 0x5a, class_info[cls].size); /* the program writes it */

  chunk_give_span(c, pg, 0);
  cr_assert_eq(chunk_take_span_at(c, pg, units), pg);
  cr_assert_not(pg->fresh_zero, "a span given back after use holds old bytes");
  page_init(pg, cls, pg->start, NULL, false);
  page_fresh = (block_t *)1;
  cr_assert(page_refill(pg));
  cr_assert_null(page_fresh, "a carve of used memory names nothing");

  chunk_give_span(c, pg, 0);
  chunk_purge(c, UINT64_MAX, SIZE_MAX, true); /* MADV_FREE */
  cr_assert_eq(chunk_take_span_at(c, pg, units), pg);
  cr_assert_not(pg->fresh_zero, "MADV_FREE may keep the old bytes");

  chunk_give_span(c, pg, 0);
  chunk_purge(c, UINT64_MAX, SIZE_MAX, false); /* MADV_DONTNEED */
  cr_assert_eq(chunk_take_span_at(c, pg, units), pg);
  cr_assert(pg->fresh_zero, "MADV_DONTNEED reads back zeroes");

  page_t *other = chunk_take_span(c, 1, 1, false);
  cr_assert(other->fresh_zero, "units no span ever took still read as zeroes");
  chunk_give_span(c, other, 0);
  chunk_give_span(c, pg, 0);
  chunk_retire(c);
  cr_assert_eq(c->zero_units, CHUNK_ALL_FREE, "a retired chunk was purged whole with MADV_DONTNEED");
}

/* A purge the kernel refuses (locked pages under mlockall: MADV_DONTNEED fails
 * with EINVAL and the old bytes stay) makes nothing read as zeroes, neither a
 * chunk's units nor a whole retired chunk; a purge that goes through still
 * does (found by a probe: calloc returned the old bytes after ebb_trim in a
 * process that had called mlockall). */
Test(page, a_refused_purge_leaves_nothing_reading_as_zero) {
  sizeclass_init();
  page_key = 0x1234567;
  fake_reset();
  unsigned cls = size_class(100000), units = class_info[cls].units;
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  page_t *pg = chunk_take_span(c, units, 1, false);
  cr_assert_not_null(pg);
  page_init(pg, cls, (char *)c + ((size_t)(pg - c->pages) << UNIT_SHIFT), NULL, false);
  cr_assert(page_refill(pg));
  memset(pg->free, 0x5a, class_info[cls].size); /* the program writes it */

  chunk_give_span(c, pg, 0);
  fake_fail_purges = 1;
  size_t bytes = chunk_purge(c, UINT64_MAX, SIZE_MAX, false);
  cr_assert_eq(fake_fail_purges, 0, "the purge was tried (and refused)");
  cr_assert_gt(bytes, 0);
  cr_assert_eq(c->dirty_units & ((((uint64_t)1 << units) - 1) << (pg - c->pages)), 0,
               "a refused run leaves the dirty set: no pass retries it forever");
  cr_assert_eq(chunk_take_span_at(c, pg, units), pg);
  cr_assert_not(pg->fresh_zero, "the kernel refused the purge: the old bytes are still there");
  cr_assert_eq(((unsigned char *)pg->start)[100], 0x5a);

  chunk_give_span(c, pg, 0);
  chunk_purge(c, UINT64_MAX, SIZE_MAX, false);
  cr_assert_eq(chunk_take_span_at(c, pg, units), pg);
  cr_assert(pg->fresh_zero, "a purge that went through reads back zeroes");
  memset(pg->start, 0x5a, 4096);
  chunk_give_span(c, pg, 0);

  fake_fail_purges = 1;
  chunk_retire(c);
  cr_assert_eq(c->zero_units, 0, "a retired chunk whose purge was refused has no unit reading as zeroes");
}
