/* The spare page (arena.c, page_kept_spare), over the fake OS: a page that
 * empties while it is not its class's current page stays on its queue when no
 * other page of the class is empty, so a class whose live blocks swing around
 * a page's capacity stops giving a page back and carving it afresh on every
 * swing; a second emptied page still goes back at once, the thread's decay
 * pass gives the spare back, and EBB_DECAY_MS=0 keeps none.
 * Only one-unit pages of at most 64 blocks keep a spare. ebb_* names, no override.
 * Blocks of 4 KiB: 16 to a one-unit page. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "arena.h"
#include "chunk.h"
#include "ebb.h"
#include "fake_os.h"

#define BLOCK 4096
#define PER_PAGE (UNIT_SIZE / BLOCK)

static void setup(void) {
  fake_reset();
  opt.decay_ms = 1000000;
  opt.dirty_max = (int64_t)1 << 40;
  opt.background = 0;
}
TestSuite(spare, .init = setup);

static size_t active(void) {
  struct ebb_stats s;
  ebb_stats(&s);
  return s.active;
}

static page_t *page_of(void *p) { return chunk_page_of(chunk_of(p), p); }

/* The class of `size` caches none of the thread's own blocks
 * (arena_cache_own_full; test_tcache.c): every free here goes to its page. */
static void no_cache(size_t size) {
  unsigned c = size_class(size);
  arena_tls->tc_cap[c] = 1;
  relaxed_store(arena_tls->tc[c].fl.used, 0);
}

/* n blocks of BLOCK into v, each page's blocks together */
static void fill(void **v, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    v[i] = ebb_malloc(BLOCK);
    cr_assert_not_null(v[i]);
  }
  no_cache(BLOCK);
}

/* Pages A (full) and B (current, one block): A's blocks all freed. */
static void two_pages_first_emptied(void **v, page_t **a, page_t **b) {
  fill(v, PER_PAGE + 1);
  *a = page_of(v[0]);
  *b = page_of(v[PER_PAGE]);
  cr_assert_neq(*a, *b, "%u blocks of %u B took one page", PER_PAGE + 1, BLOCK);
  for (unsigned i = 0; i < PER_PAGE; i++)
    cr_assert_eq(page_of(v[i]), *a, "block %u is not on the first page", i);
  for (unsigned i = 0; i < PER_PAGE; i++) ebb_free(v[i]);
}

Test(spare, an_emptied_page_stays_while_it_is_the_only_empty_one_and_is_used_again) {
  sizeclass_init();
  void *v[3 * PER_PAGE];
  page_t *a, *b;
  size_t before = active();
  two_pages_first_emptied(v, &a, &b);
  cr_assert_eq(a->cls, size_class(BLOCK), "the emptied page went back to its chunk");
  cr_assert_eq(a->used, 0);
  cr_assert_eq(active() - before, 2 * UNIT_SIZE, "the spare no longer counts as active");
  size_t inits = fake_maps;
  /* the current page fills, then the next malloc takes the spare: its free list as it was */
  fill(v, 2 * PER_PAGE - 1);
  unsigned on_a = 0;
  for (unsigned i = 0; i < 2 * PER_PAGE - 1; i++) on_a += page_of(v[i]) == a;
  cr_assert_eq(on_a, PER_PAGE, "the spare served %u of the next blocks, not all %u of its own", on_a,
               PER_PAGE);
  cr_assert_eq(fake_maps, inits, "a new chunk was mapped");
  for (unsigned i = 0; i < 2 * PER_PAGE - 1; i++) ebb_free(v[i]);
  ebb_trim();
}

Test(spare, a_second_emptied_page_goes_back_at_once) {
  sizeclass_init();
  void *v[2 * PER_PAGE + 1];
  size_t before = active();
  fill(v, 2 * PER_PAGE + 1); /* pages A, B full, C current */
  page_t *a = page_of(v[0]), *b = page_of(v[PER_PAGE]);
  cr_assert_neq(a, b);
  for (unsigned i = 0; i < PER_PAGE; i++) ebb_free(v[i]);
  cr_assert_eq(active() - before, 3 * UNIT_SIZE, "A, the first emptied page, stays as the spare");
  for (unsigned i = PER_PAGE; i < 2 * PER_PAGE; i++) ebb_free(v[i]);
  cr_assert_eq(active() - before, 2 * UNIT_SIZE, "B went back although A is empty already");
  cr_assert_eq(a->cls, size_class(BLOCK), "A, the spare, went back instead of B");
  ebb_free(v[2 * PER_PAGE]);
  ebb_trim();
}

Test(spare, the_decay_pass_gives_the_spare_back) {
  sizeclass_init();
  void *v[PER_PAGE + 1];
  page_t *a, *b;
  size_t before = active();
  two_pages_first_emptied(v, &a, &b);
  cr_assert_eq(active() - before, 2 * UNIT_SIZE);
  fake_now += 1;
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_eq(active() - before, UNIT_SIZE, "the thread's decay pass left the empty spare in place");
  cr_assert_neq(a->cls, size_class(BLOCK));
  ebb_free(v[PER_PAGE]);
  ebb_trim();
}

Test(spare, none_when_memory_is_to_go_back_at_once) {
  sizeclass_init();
  opt.decay_ms = 0;
  void *v[PER_PAGE + 1];
  page_t *a, *b;
  size_t before = active();
  two_pages_first_emptied(v, &a, &b);
  cr_assert_eq(active() - before, UNIT_SIZE, "EBB_DECAY_MS=0 kept an emptied page");
  ebb_free(v[PER_PAGE]);
  ebb_trim();
}

/* Pages of many blocks (512 B: 128 to a unit) rarely swing empty and full, and
 * a spare of theirs only cost RSS: they go back at once, as before. */
Test(spare, none_for_pages_of_many_small_blocks) {
  sizeclass_init();
  enum { SMALL = 512, N = UNIT_SIZE / SMALL };
  cr_assert_gt(N, 64);
  static void *v[N + 1];
  size_t before = active();
  for (unsigned i = 0; i <= N; i++) cr_assert_not_null(v[i] = ebb_malloc(SMALL));
  no_cache(SMALL);
  page_t *a = page_of(v[0]);
  cr_assert_neq(a, page_of(v[N]));
  for (unsigned i = 0; i < N; i++) ebb_free(v[i]);
  cr_assert_eq(active() - before, UNIT_SIZE, "an emptied page of %u blocks stayed", N);
  ebb_free(v[N]);
  ebb_trim();
}

/* Spans of several units (classes above 8 KiB) keep no spare: instance churn,
 * one block of each of ~30 such classes a request, faulted 0.11-0.22 pages a
 * request with them kept instead of 0.03. */
Test(spare, none_for_spans_of_several_units) {
  sizeclass_init();
  enum { BIG = 40960 };
  const class_info_t *ci = &class_info[size_class(BIG)];
  cr_assert_gt(ci->units, 1);
  static void *v[64];
  unsigned n = ci->count;
  cr_assert_lt(n, 64);
  size_t before = active();
  for (unsigned i = 0; i <= n; i++) cr_assert_not_null(v[i] = ebb_malloc(BIG));
  no_cache(BIG);
  page_t *a = page_of(v[0]);
  cr_assert_neq(a, page_of(v[n]));
  for (unsigned i = 0; i < n; i++) ebb_free(v[i]);
  cr_assert_eq(active() - before, (size_t)ci->units * UNIT_SIZE, "an emptied span of %u units stayed",
               ci->units);
  ebb_free(v[n]);
  ebb_trim();
}

/* ---------------------------------------------- of two pages, the lower one */

/* A request that spills from one page into a second and then frees all it
 * holds, in any order, leaves the lower of the two as its class's page (the
 * other goes back to its chunk): the next request's blocks are the ones this
 * request wrote. Before, the overflow page stayed the class's page: the next
 * request took its few recent blocks, then blocks untouched since the request
 * before, while the full page's went unused (bench/churn: 279 of ~820 KiB a
 * request was memory the request before had not touched). */
enum { BURST_SIZE = 512, BURST_PER_PAGE = UNIT_SIZE / BURST_SIZE, BURST = BURST_PER_PAGE + BURST_PER_PAGE / 4 };

static int cmp_ptr(const void *x, const void *y) {
  uintptr_t a = (uintptr_t) * (void *const *)x, b = (uintptr_t) * (void *const *)y;
  return (a > b) - (a < b);
}

/* One request: BURST blocks, each written, freed in a shuffled order; their
 * addresses, sorted, into seen. Returns the class's page afterwards. */
static page_t *burst(void **seen, uint64_t *rng, bool cache) {
  static void *v[BURST];
  static unsigned order[BURST];
  for (unsigned i = 0; i < BURST; i++) {
    cr_assert_not_null(v[i] = ebb_malloc(BURST_SIZE));
    memset(v[i], (int)i, BURST_SIZE);
    order[i] = i;
  }
  if (!cache) no_cache(BURST_SIZE);
  for (unsigned i = BURST - 1; i > 0; i--) {
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    unsigned j = (unsigned)((*rng >> 33) % (i + 1)), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (unsigned i = 0; i < BURST; i++) ebb_free(v[order[i]]);
  memcpy(seen, v, sizeof v);
  qsort(seen, BURST, sizeof *seen, cmp_ptr);
  return arena_tls->tc[size_class(BURST_SIZE)].direct;
}

static void bursts_reuse_their_blocks(bool cache) {
  sizeclass_init();
  static void *prev[BURST], *cur[BURST];
  uint64_t rng = 42;
  size_t before = active();
  burst(prev, &rng, cache);
  for (unsigned round = 1; round < 12; round++) {
    page_t *pg = burst(cur, &rng, cache);
    cr_assert_eq(pg->used, 0);
    cr_assert_eq(active() - before, UNIT_SIZE, "request %u: %zu units of the class stayed", round,
                 (active() - before) / UNIT_SIZE);
    cr_assert_geq((uintptr_t)cur[0], (uintptr_t)pg->start, "request %u: the class's page is not the lower one", round);
    if (round >= 3) /* a cached block can keep the first request's overflow page for one more */
      for (unsigned i = 0; i < BURST; i++)
        cr_assert_eq(cur[i], prev[i], "request %u handed out blocks the one before did not (the %u-th of %u)",
                     round, i, BURST);
    memcpy(prev, cur, sizeof cur);
  }
  ebb_trim();
}

Test(spare, repeated_requests_over_two_pages_reuse_the_same_blocks) { bursts_reuse_their_blocks(true); }

Test(spare, repeated_requests_over_two_pages_reuse_the_same_blocks_without_the_cache) {
  bursts_reuse_their_blocks(false);
}

/* ---------------------------------------------- the kept page of one block */

/* A thread's free of a block of a one-block page (300000 B: its class's page
 * is that one block over 5 units) keeps the page as the thread's one spare
 * (arena.c, one_spare_keep) for the next block of that class: no trip through
 * the chunk's bitmaps and the lock. It counts as active while kept. */
#define ONE 300000

static size_t one_span(void) { return (size_t)class_info[size_class(ONE)].units * UNIT_SIZE; }

Test(spare, a_one_block_page_is_kept_for_the_next_block_of_its_class) {
  sizeclass_init();
  cr_assert(class_is_one_block(size_class(ONE)));
  size_t before = active();
  void *p = ebb_malloc(ONE);
  cr_assert_not_null(p);
  page_t *pg = page_of(p);
  ebb_free(p);
  cr_assert_eq(atomic_load(&arena_tls->one_spare), pg, "the emptied page was not kept");
  cr_assert_eq(active() - before, one_span(), "the kept page does not count as active");
  size_t maps = fake_maps;
  for (int i = 0; i < 100; i++) {
    void *q = ebb_malloc(ONE);
    cr_assert_eq(q, p, "round %d: the kept page's block was not handed out again", i);
    memset(q, i, ONE);
    ebb_free(q);
  }
  cr_assert_eq(fake_maps, maps);
  /* another class of one-block pages takes its own page; its free keeps that
   * one, and the page kept before goes back */
  void *r = ebb_malloc(2 * ONE);
  cr_assert_not_null(r);
  cr_assert_neq(page_of(r), pg);
  ebb_free(r);
  cr_assert_eq(atomic_load(&arena_tls->one_spare), page_of(r));
  cr_assert_neq(pg->cls, size_class(ONE), "the page kept before did not go back to its chunk");
  ebb_trim();
  cr_assert_null(atomic_load(&arena_tls->one_spare), "ebb_trim left the kept page");
  cr_assert_eq(active(), before);
}

/* The thread's decay pass gives it back once the same page has sat there for
 * the decay time (the first pass only notes it); EBB_DECAY_MS=0 keeps none. */
Test(spare, the_decay_pass_gives_the_kept_one_block_page_back) {
  sizeclass_init();
  opt.decay_ms = 1000;
  size_t before = active();
  void *p = ebb_malloc(ONE);
  page_t *pg = page_of(p);
  ebb_free(p);
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_eq(atomic_load(&arena_tls->one_spare), pg, "the first pass gave it back");
  fake_now += 999;
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_eq(atomic_load(&arena_tls->one_spare), pg, "given back before the decay time");
  fake_now += 1;
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_null(atomic_load(&arena_tls->one_spare), "kept past the decay time");
  cr_assert_eq(active(), before);
  ebb_trim();
}

Test(spare, no_kept_one_block_page_when_memory_is_to_go_back_at_once) {
  sizeclass_init();
  opt.decay_ms = 0;
  size_t before = active();
  void *p = ebb_malloc(ONE);
  ebb_free(p);
  cr_assert_null(atomic_load(&arena_tls->one_spare));
  cr_assert_eq(active(), before);
}

/* A thread that exits, or idles, with a kept page: another thread's pass over
 * its arena gives the page back (no owner will take it). */
static void *keep_one_and_exit(void *arg) {
  void *p = ebb_malloc(ONE);
  *(arena_t **)arg = arena_tls;
  ebb_free(p);
  return NULL;
}

Test(spare, an_exited_threads_kept_page_goes_back) {
  sizeclass_init();
  opt.decay_ms = 1000;
  size_t before = active();
  arena_t *gone = NULL;
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, keep_one_and_exit, &gone), 0);
  pthread_join(t, NULL);
  cr_assert_not_null(gone);
  cr_assert_not_null(atomic_load(&gone->one_spare), "the thread kept no page");
  arena_purge_all(false);
  cr_assert_null(atomic_load(&gone->one_spare), "a pass over the exited thread's arena left its page");
  cr_assert_eq(active(), before);
}

/* ---------------------------------------------- a bouncing class's page */

/* A loop that mallocs and frees one block of a class whose pages span several
 * units gave the span back at every free and took it again at the next
 * malloc. Once the arena's last few spans were all that class's, each taken
 * right after its own page went back, the class holds its emptied page
 * (arena.c, page_hold) until the arena takes a span for another class or
 * another of its pages empties. A request that draws from many classes never
 * holds one (instance churn paid twice the faults at 20 ms gaps when every
 * such page, or just the last one emptied, was kept). 65537 B: blocks of 80 KiB,
 * 3 to a 4-unit page; 40000 B: blocks of 40 KiB, 3 to 2 units. */
enum { BOUNCE = 65537, OTHER = 40000 };

static size_t span_of(size_t size) { return (size_t)class_info[size_class(size)].units * UNIT_SIZE; }

static void bounce_classes_ok(void) {
  sizeclass_init();
  for (int i = 0; i < 2; i++) {
    const class_info_t *ci = &class_info[size_class(i ? OTHER : BOUNCE)];
    cr_assert_gt(ci->units, 1);
    cr_assert_gt(ci->count, 1);
  }
  cr_assert_neq(size_class(BOUNCE), size_class(OTHER));
}

/* malloc/free of size n times; the page the last block came from */
static page_t *bounce(size_t size, int n) {
  page_t *pg = NULL;
  for (int i = 0; i < n; i++) {
    void *p = ebb_malloc(size);
    cr_assert_not_null(p);
    memset(p, i, size);
    pg = page_of(p);
    ebb_free(p);
  }
  return pg;
}

Test(spare, a_class_that_bounces_holds_its_emptied_page) {
  bounce_classes_ok();
  size_t before = active();
  page_t *pg = bounce(BOUNCE, 1);
  cr_assert_eq(active(), before, "the first emptied page was held");
  pg = bounce(BOUNCE, 10);
  cr_assert_eq(arena_tls->held_cls, size_class(BOUNCE), "the bouncing class holds no page");
  cr_assert_eq(arena_tls->tc[size_class(BOUNCE)].direct, pg);
  cr_assert_eq(active() - before, span_of(BOUNCE), "the held page does not count as active");
  size_t maps = fake_maps;
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(bounce(BOUNCE, 1), pg, "round %d: the held page's block was not handed out again", i);
  cr_assert_eq(fake_maps, maps);
  cr_assert_eq(active() - before, span_of(BOUNCE));
  /* another class's span: the held page goes back first */
  void *q = ebb_malloc(OTHER);
  cr_assert_not_null(q);
  cr_assert_eq(arena_tls->held_cls, NCLASSES);
  cr_assert_neq(pg->cls, size_class(BOUNCE), "the held page did not go back to its chunk");
  cr_assert_eq(active() - before, span_of(OTHER));
  ebb_free(q);
  cr_assert_eq(active(), before, "one bounce of another class held its page");
  ebb_trim();
}

/* Two classes taking turns (as a request's blocks do): neither holds. */
Test(spare, classes_taking_turns_hold_nothing) {
  bounce_classes_ok();
  size_t before = active();
  for (int i = 0; i < 100; i++) {
    bounce(BOUNCE, 1);
    cr_assert_eq(active(), before, "round %d: %zu B stayed after the first class", i, active() - before);
    bounce(OTHER, 1);
    cr_assert_eq(active(), before, "round %d: %zu B stayed after the second class", i, active() - before);
    cr_assert_eq(arena_tls->held_cls, NCLASSES);
  }
}

/* Another page of the arena emptying ends the hold too; so do ebb_trim and
 * the thread's decay pass (after the decay time, as for any empty current
 * page); EBB_DECAY_MS=0 holds none. */
Test(spare, another_emptied_page_ends_the_hold) {
  bounce_classes_ok();
  void *keep = ebb_malloc(OTHER); /* a page of the other class, in use */
  cr_assert_not_null(keep);
  size_t before = active();
  page_t *pg = bounce(BOUNCE, 10);
  cr_assert_eq(arena_tls->held_cls, size_class(BOUNCE));
  ebb_free(keep); /* its page empties */
  cr_assert_eq(arena_tls->held_cls, NCLASSES);
  cr_assert_neq(pg->cls, size_class(BOUNCE), "the held page stayed after another page emptied");
  cr_assert_eq(active(), before - span_of(OTHER));
}

/* The same for a one-unit page, the class's current one, whose only block is
 * freed (free's shortest emptied-page path, arena_free_local_slow_leave). */
Test(spare, an_emptied_one_unit_page_ends_the_hold_too) {
  bounce_classes_ok();
  void *keep = ebb_malloc(100); /* the only block of its class's current one-unit page */
  cr_assert_not_null(keep);
  page_t *small = page_of(keep);
  cr_assert_eq(small->units, 1);
  cr_assert_eq(arena_tls->tc[small->cls].direct, small);
  size_t before = active();
  page_t *pg = bounce(BOUNCE, 10);
  cr_assert_eq(arena_tls->held_cls, size_class(BOUNCE));
  ebb_free(keep);
  cr_assert_eq(arena_tls->held_cls, NCLASSES, "the hold outlived another page's emptying");
  cr_assert_neq(pg->cls, size_class(BOUNCE), "the held page stayed after another page emptied");
  cr_assert_eq(active(), before, "the emptied one-unit page stays its class's page");
  cr_assert_eq(arena_tls->tc[small->cls].direct, small);
}

Test(spare, ebb_trim_gives_the_held_page_back) {
  bounce_classes_ok();
  size_t before = active();
  page_t *pg = bounce(BOUNCE, 10);
  cr_assert_eq(arena_tls->held_cls, size_class(BOUNCE));
  ebb_trim();
  cr_assert_neq(pg->cls, size_class(BOUNCE));
  cr_assert_eq(active(), before);
}

Test(spare, the_decay_pass_gives_the_held_page_back) {
  bounce_classes_ok();
  opt.decay_ms = 1000;
  size_t before = active();
  page_t *pg = bounce(BOUNCE, 10);
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_eq(pg->cls, size_class(BOUNCE), "the first pass gave it back");
  fake_now += 999;
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_eq(pg->cls, size_class(BOUNCE), "given back before the decay time");
  fake_now += 1;
  arena_decay(arena_tls, fake_now, true, false, PASS_PAGES);
  cr_assert_neq(pg->cls, size_class(BOUNCE), "held past the decay time");
  cr_assert_eq(active(), before);
  ebb_trim();
}

Test(spare, no_held_page_when_memory_is_to_go_back_at_once) {
  bounce_classes_ok();
  opt.decay_ms = 0;
  size_t before = active();
  bounce(BOUNCE, 20);
  cr_assert_eq(arena_tls->held_cls, NCLASSES);
  cr_assert_eq(active(), before);
}
