/* The thread cache: every block a thread frees, its own or another thread's,
 * is handed out again by that thread's next malloc of the class (LIFO); the
 * cache holds at most its capacity, sends half home when full, everything on
 * the thread's decay pass and at its exit; blocks of first-class arenas and of
 * purged pages are never cached; stats do not count cached blocks as live;
 * a second free of a cached block is still caught. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include "arena.h"
#include "ebb.h"

static page_t *page_of(void *p) { return chunk_page_of(chunk_of(p), p); }
static uint32_t held(arena_t *a, unsigned cls) { return a->tc[cls].capacity - a->tc[cls].used; }

static void *blk[8];
static void *reused;
static unsigned cls64;

static void *free_four_and_reuse(void *arg) {
  (void)arg;
  ebb_free(ebb_malloc(1000)); /* a thread that never allocated has no arena, hence no cache */
  for (int i = 0; i < 4; i++) ebb_free(blk[i]);
  arena_t *me = arena_tls;
  cr_assert_neq(me, &arena_none);
  cr_assert_eq(held(me, cls64), 4, "the freeing thread keeps the other thread's blocks");
  reused = ebb_malloc(64);
  cr_assert_eq(reused, blk[3], "and hands out the last one it freed first");
  cr_assert_eq(held(me, cls64), 3);
  return NULL;
}

Test(tcache, foreign_blocks_are_reused_then_returned_at_exit) {
  for (int i = 0; i < 8; i++) blk[i] = ebb_malloc(64);
  cls64 = size_class(64);
  page_t *pg = page_of(blk[0]);
  pthread_t t;
  pthread_create(&t, NULL, free_four_and_reuse, NULL);
  pthread_join(t, NULL);
  uint32_t used = pg->used;
  cr_assert_eq(page_collect(pg), 3, "the three unused blocks went back to their page at thread exit");
  cr_assert_eq(pg->used, used - 3);
  cr_assert(ebb_owns(reused));
  ebb_free(reused);
}

Test(tcache, own_blocks_are_cached_lifo_and_stay_counted_on_their_page) {
  void *keep = ebb_malloc(64); /* keeps the page from emptying */
  void *p = ebb_malloc(64), *q = ebb_malloc(64);
  arena_t *a = arena_tls;
  unsigned c = size_class(64);
  page_t *pg = page_of(p);
  uint32_t used = pg->used;
  uint32_t before = held(a, c);
  ebb_free(p);
  ebb_free(q);
  cr_assert_eq(held(a, c), before + 2);
  cr_assert_eq(pg->used, used, "a cached block still counts on its page");
  cr_assert_eq(a->fast[c], &a->tc[c], "malloc pops from the cache first");
  cr_assert_eq(ebb_malloc(64), q, "last freed, first reused");
  cr_assert_eq(ebb_malloc(64), p);
  cr_assert_eq(pg->used, used, "a block from the cache was never off its page's count");
  cr_assert_eq(held(a, c), before);
  ebb_free(p);
  ebb_free(q);
  ebb_free(keep);
}

/* Sum of `used` over the distinct pages of blocks v[0..n). */
static uint32_t pages_used(void **v, int n) {
  page_t *seen[64];
  int ns = 0;
  uint32_t sum = 0;
  for (int i = 0; i < n; i++) {
    page_t *pg = page_of(v[i]);
    int k = 0;
    while (k < ns && seen[k] != pg) k++;
    if (k < ns) continue;
    cr_assert_lt(ns, 64);
    seen[ns++] = pg;
    sum += pg->used;
  }
  return sum;
}

Test(tcache, a_full_cache_sends_its_older_half_home) {
  unsigned c = size_class(256);
  enum { N = 200 };
  static void *p[N];
  ebb_free(ebb_malloc(256)); /* sets the class's cache up */
  arena_t *a = arena_tls;
  uint32_t cap = a->tc[c].capacity;
  cr_assert_eq(cap, TCACHE_BYTES / 256, "capacity: TCACHE_BYTES of blocks");
  cr_assert_lt(cap, (uint32_t)N);
  for (int i = 0; i < N; i++) p[i] = ebb_malloc(256);
  cr_assert_eq(held(a, c), 0, "the mallocs emptied the cache");
  uint32_t used0 = pages_used(p, N);
  for (uint32_t i = 0; i < cap - 1; i++) ebb_free(p[i]);
  cr_assert_eq(held(a, c), cap - 1, "fills to capacity - 1");
  cr_assert_eq(pages_used(p, N), used0, "cached blocks stay counted on their pages");
  ebb_free(p[cap - 1]);
  uint32_t kept = cap / 2, flushed = cap - 1 - kept;
  cr_assert_eq(held(a, c), kept + 1, "then keeps the newest half and takes the new block");
  cr_assert_eq(pages_used(p, N), used0 - flushed, "the older half went back to its pages");
  /* the newest blocks stayed: the next mallocs return them, newest first */
  cr_assert_eq(ebb_malloc(256), p[cap - 1]);
  cr_assert_eq(ebb_malloc(256), p[cap - 2]);
  cr_assert(block_has_cookie(p[0]), "a flushed block still reads as free");
}

static ebb_arena_t *fc;
static void *fc_block;
static void *free_first_class_block(void *arg) {
  (void)arg;
  ebb_malloc(1); /* give this thread an arena */
  unsigned c = size_class(64);
  uint32_t before = held(arena_tls, c);
  ebb_free(fc_block);
  cr_assert_eq(held(arena_tls, c), before, "first-class arena blocks are never kept");
  return NULL;
}

Test(tcache, first_class_blocks_go_straight_back) {
  fc = ebb_arena_create();
  fc_block = ebb_arena_malloc(fc, 64);
  cr_assert_eq(page_of(fc_block)->tc_off, TC_OFF(TC_NONE));
  pthread_t t;
  pthread_create(&t, NULL, free_first_class_block, NULL);
  pthread_join(t, NULL);
  ebb_arena_destroy(fc);
}

Test(tcache, a_thread_without_an_arena_caches_nothing) {
  /* arena_none's slots have no room: the fast path never writes it */
  for (unsigned c = 0; c <= NCLASSES; c++) cr_assert_eq(arena_none.tc[c].used, 0);
}

Test(tcache, big_classes_are_never_cached) {
  size_t big = TCACHE_BYTES / 2; /* a cache of 2 blocks: below the minimum of 4 */
  void *keep = ebb_malloc(big), *p = ebb_malloc(big);
  unsigned c = size_class(big);
  ebb_free(p);
  cr_assert_eq(arena_tls->tc[c].used, 0);
  cr_assert_eq(arena_tls->tc[c].capacity, 1, "marked never cached");
  cr_assert_eq(ebb_malloc(big), p, "the block went back to its page");
  ebb_free(p);
  ebb_free(keep);
}

Test(tcache, stats_do_not_count_cached_blocks_as_live) {
  struct ebb_stats s0, s1;
  ebb_free(ebb_malloc(64)); /* set up the class's cache and the arena */
  ebb_stats(&s0);
  void *p = ebb_malloc(64);
  ebb_free(p);
  cr_assert_gt(held(arena_tls, size_class(64)), 0);
  ebb_stats(&s1);
  cr_assert_eq(s1.allocated, s0.allocated, "a cached block is free to the stats");
}

Test(tcache, the_decay_pass_sends_the_cache_home) {
  void *keep = ebb_malloc(64), *p = ebb_malloc(64);
  page_t *pg = page_of(p);
  uint32_t used = pg->used;
  ebb_free(p);
  cr_assert_eq(pg->used, used);
  arena_purge_all(false);
  cr_assert_eq(held(arena_tls, size_class(64)), 0);
  cr_assert_eq(pg->used, used - 1, "the block is back on its page");
  ebb_free(keep);
}

Test(tcache, a_purged_page_is_not_cached_until_unparked) {
  page_t pg;
  memset(&pg, 0, sizeof pg);
  page_init(&pg, size_class(64), (char *)0x10000, NULL, false);
  cr_assert_eq(pg.tc_off, TC_OFF(size_class(64)));
  relaxed_store(pg.purged, 1);
  page_set_cache(&pg);
  cr_assert_eq(pg.tc_off, TC_OFF(TC_NONE), "a free there must rule out a parked block first");
  relaxed_store(pg.purged, 0);
  page_set_cache(&pg);
  cr_assert_eq(pg.tc_off, TC_OFF(size_class(64)));
  page_init(&pg, size_class(64), (char *)0x10000, NULL, true);
  cr_assert_eq(pg.tc_off, TC_OFF(TC_NONE), "bump pages are first-class arenas'");
}

static void *double_free_in_cache(void *arg) {
  ebb_free(ebb_malloc(1000));
  ebb_free(arg);
  ebb_free(arg); /* still in this thread's cache: the cookie gives it away */
  return NULL;
}

Test(tcache, double_free_of_a_cached_foreign_block_aborts, .signal = SIGABRT) {
  void *p = ebb_malloc(64);
  ebb_malloc(64); /* keeps the page from emptying */
  pthread_t t;
  pthread_create(&t, NULL, double_free_in_cache, p);
  pthread_join(t, NULL);
}

Test(tcache, double_free_of_a_cached_own_block_aborts, .signal = SIGABRT) {
  void *p = ebb_malloc(64);
  ebb_malloc(64);
  ebb_free(p);
  ebb_free(p);
}
