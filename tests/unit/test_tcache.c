/* The thread cache: other threads' blocks a thread frees are handed out again
 * by its next mallocs of the class (LIFO); a thread that frees many of them
 * (a server's) caches its own blocks too, one that does not sends them to
 * their pages; a class's cache holds at most its capacity, a full one sends
 * its older half home for another thread's block and lets the thread's own
 * blocks skip the cache; everything goes home on the thread's decay pass and
 * at its exit; blocks of first-class arenas, of purged pages and of big
 * classes are never cached; a class of 16-64 KiB holds one block; a thread
 * that is not a server's caches one block of its own a class, freed into a
 * full page; stats do not count cached blocks as live; a second free of a
 * cached block is still caught. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include "arena.h"
#include "ebb.h"
#include "fake_os.h"

static page_t *page_of(void *p) { return chunk_page_of(chunk_of(p), p); }
/* Every class's source slots name one list (malloc reads the slot of its
 * size, the slow paths the class's first). */
static void slots_agree(arena_t *a) {
  for (unsigned c = 0; c < NCLASSES; c++)
    for (unsigned i = 1; i < class_src_n[c]; i++)
      cr_assert_eq(a->src[class_src_lo[c] + i], a->src[class_src_lo[c]], "class %u slot %u", c, i);
}

static uint32_t held(arena_t *a, unsigned cls) {
  return a->tc_cap[cls] > 1 ? a->tc_cap[cls] - a->tc[cls].fl.used : 0;
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

/* ---------------------------------------------------------------- a thread that frees its own blocks */

Test(tcache, own_blocks_go_to_their_page_when_the_thread_frees_few_of_others) {
  void *keep = ebb_malloc(64), *p = ebb_malloc(64);
  arena_t *a = arena_tls;
  unsigned c = size_class(64);
  cr_assert_not(a->tc_server);
  page_t *pg = page_of(p);
  uint32_t used = pg->used;
  ebb_free(p);
  cr_assert_eq(held(a, c), 0, "not cached");
  cr_assert_eq(pg->used, used - 1, "back on its page");
  cr_assert_eq(ebb_malloc(64), p);
  ebb_free(p);
  ebb_free(keep);
}

/* ---------------------------------------------------------------- other threads' blocks */

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
  /* drained: the cache's blocks first, then the malloc that finds it empty
   * moves the class back to its own page */
  void *b2 = ebb_malloc(64), *b1 = ebb_malloc(64), *b0 = ebb_malloc(64);
  cr_assert(b2 == blk[2] && b1 == blk[1] && b0 == blk[0]);
  cr_assert_eq(held(me, cls64), 0);
  cr_assert_eq(arena_src(me, cls64), &me->tc[cls64].fl, "an empty cache stays the source until a malloc finds it so");
  void *own = ebb_malloc(64);
  cr_assert(own && page_of(own)->owner == me, "the next block is the thread's own");
  cr_assert_eq(arena_src(me, cls64), &me->tc[cls64].direct->fl);
  ebb_free(own);
  ebb_free(b0); /* back into the cache: the main thread frees them later */
  ebb_free(b1);
  ebb_free(b2);
  cr_assert_eq(held(me, cls64), 3);
  cr_assert_eq(arena_src(me, cls64), &me->tc[cls64].fl);
  slots_agree(me);
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

/* ---------------------------------------------------------------- a server's thread */

enum { NFOREIGN = TC_SERVER_FREES + 8 };
static void *foreign[NFOREIGN];

static void (*server_body)(arena_t *a);

/* Frees the main thread's blocks (foreign), so it becomes a server's, then
 * runs server_body. */
static void *server_thread(void *arg) {
  (void)arg;
  cr_assert_eq(arena_free_key, (uintptr_t)&arena_none, "no arena yet: free's key is arena_none's");
  ebb_free(ebb_malloc(64)); /* an arena, and class 64's cache set up */
  cr_assert_eq(arena_free_key, (uintptr_t)arena_tls, "free's key is the arena, server bit clear");
  for (int i = 0; i < TC_SERVER_FREES - 1; i++) ebb_free(foreign[i]);
  cr_assert_not(arena_tls->tc_server);
  ebb_free(foreign[TC_SERVER_FREES - 1]);
  cr_assert(arena_tls->tc_server, "TC_SERVER_FREES of other threads' blocks make it a server's");
  cr_assert_eq(arena_free_key, (uintptr_t)arena_tls | 1, "free's key carries the server bit");
  server_body(arena_tls);
  return NULL;
}

/* Runs body in a new thread that has become a server's. */
static void in_server_thread(void (*body)(arena_t *a)) {
  for (int i = 0; i < NFOREIGN; i++) foreign[i] = ebb_malloc(32);
  server_body = body;
  pthread_t t;
  pthread_create(&t, NULL, server_thread, NULL);
  pthread_join(t, NULL);
}

static void server_caches_own(arena_t *a) {
  unsigned c = size_class(64);
  /* a class with four source slots (sizes 897..1024), through the cache and back */
  void *big[8];
  for (int i = 0; i < 8; i++) big[i] = ebb_malloc(900 + (size_t)i * 16);
  for (int i = 0; i < 8; i++) ebb_free(big[i]);
  cr_assert_eq(arena_src(a, size_class(1000)), &a->tc[size_class(1000)].fl, "own blocks cached");
  slots_agree(a);
  for (int i = 0; i < 8; i++) cr_assert_eq(ebb_malloc(1024 - (size_t)i * 16), big[7 - i], "any size of the class pops the cache");
  for (int i = 0; i < 8; i++) ebb_free(big[i]);
  slots_agree(a);
  void *keep = ebb_malloc(64), *p = ebb_malloc(64), *q = ebb_malloc(64);
  page_t *pg = page_of(p);
  uint32_t used = pg->used, before = held(a, c);
  ebb_free(p);
  ebb_free(q);
  cr_assert_eq(held(a, c), before + 2, "its own blocks go into its cache");
  cr_assert_eq(pg->used, used, "a cached block still counts on its page");
  cr_assert_eq(ebb_malloc(64), q, "last freed, first reused");
  cr_assert_eq(ebb_malloc(64), p);
  cr_assert_eq(pg->used, used, "a block from the cache was never off its page's count");
  ebb_free(p);
  ebb_free(q);
  ebb_free(keep);
  /* a decay pass sends the cache home and keeps the thread a server's (it
   * freed TC_SERVER_FREES of other threads' blocks since the last pass); the
   * next, with none freed since, makes it an ordinary one again */
  arena_purge_all(false);
  cr_assert_eq(held(a, c), 0);
  cr_assert(a->tc_server);
  cr_assert_eq(arena_free_key, (uintptr_t)a | 1);
  arena_purge_all(false);
  cr_assert_not(a->tc_server);
  cr_assert_eq(arena_free_key, (uintptr_t)a, "the server bit goes with tc_server");
  p = ebb_malloc(64);
  used = page_of(p)->used;
  ebb_free(p);
  cr_assert_eq(page_of(p)->used, used - 1, "an ordinary thread's own block goes to its page again");
}

Test(tcache, a_server_thread_caches_its_own_blocks_too) { in_server_thread(server_caches_own); }

static void full_class(arena_t *a) {
  unsigned c = size_class(256);
  enum { N = 400 };
  static void *p[N];
  ebb_free(ebb_malloc(256)); /* class 256's cache set up */
  uint32_t cap = a->tc_cap[c];
  cr_assert_eq(cap, TCACHE_BYTES / 256, "capacity: TCACHE_BYTES of blocks");
  cr_assert_lt(cap, (uint32_t)N);
  for (int i = 0; i < N; i++) p[i] = ebb_malloc(256);
  cr_assert_eq(held(a, c), 0, "the mallocs emptied the cache");
  uint32_t used0 = pages_used(p, N);
  for (uint32_t i = 0; i < cap - 1; i++) ebb_free(p[i]);
  cr_assert_eq(held(a, c), cap - 1, "fills to capacity - 1");
  cr_assert_eq(pages_used(p, N), used0, "cached blocks stay counted on their pages");
  for (uint32_t i = cap - 1; i < N; i++) ebb_free(p[i]);
  cr_assert_eq(held(a, c), cap - 1, "then the thread's own blocks go to their pages");
  cr_assert_eq(pages_used(p, N), used0 - (N - (cap - 1)));
  cr_assert_eq(ebb_malloc(256), p[cap - 2], "the cache still hands out its newest first");
}

Test(tcache, a_full_class_sends_own_blocks_to_their_pages) { in_server_thread(full_class); }

static uint32_t fg_cap, fg_flushed, fg_used0;
static void *fill_with_foreign(void *arg) {
  void **v = arg;
  unsigned c = size_class(256);
  ebb_free(ebb_malloc(256)); /* an arena, and the class's cache set up */
  arena_t *a = arena_tls;
  uint32_t cap = a->tc_cap[c];
  cr_assert_eq(held(a, c), 0, "an ordinary thread's own block went to its page");
  for (uint32_t i = 0; i < cap - 1; i++) ebb_free(v[i]);
  cr_assert_eq(held(a, c), cap - 1, "full");
  uint32_t used0 = pages_used(v, (int)cap);
  ebb_free(v[cap - 1]);
  uint32_t kept = cap / 2, flushed = cap - 1 - kept;
  cr_assert_eq(held(a, c), kept + 1, "another thread's block sent the older half home, then went in");
  cr_assert_eq(ebb_malloc(256), v[cap - 1], "the newest stayed and comes out first");
  fg_cap = cap;
  fg_flushed = flushed;
  fg_used0 = used0;
  return NULL;
}

Test(tcache, another_threads_block_in_a_full_cache_sends_the_older_half_home) {
  enum { N = 400 };
  static void *v[N];
  for (int i = 0; i < N; i++) v[i] = ebb_malloc(256);
  pthread_t t;
  pthread_create(&t, NULL, fill_with_foreign, v);
  pthread_join(t, NULL);
  /* the flushed blocks are on their pages' remote lists (and the rest, sent
   * home at the thread's exit); the owner collects them */
  uint32_t collected = 0;
  page_t *seen = NULL;
  for (uint32_t i = 0; i < fg_cap; i++)
    if (page_of(v[i]) != seen) collected += page_collect(seen = page_of(v[i]));
  cr_assert_geq(collected, fg_flushed, "the older half went to the remote lists");
  cr_assert_eq(pages_used(v, (int)fg_cap), fg_used0 - collected);
}

/* A flush sends each run of one page's blocks with one push (tcache_flush):
 * whatever the runs, every flushed block ends on its own page's remote list,
 * once, with its cookie (so a second free of it is still caught), and nothing
 * else does. The oldest blocks the thread cached (the half a flush sends)
 * alternate between two pages (runs of one) and then follow in address order
 * (long runs). */
enum { RN = 600 };
static void *rv[RN];
static int rorder[RN];

static void *free_in_runs(void *arg) {
  (void)arg;
  unsigned c = size_class(256);
  ebb_free(ebb_malloc(256)); /* an arena, and the class's cache set up */
  arena_t *a = arena_tls;
  uint32_t cap = a->tc_cap[c], kept = cap / 2, flushed = cap - 1 - kept;
  cr_assert_lt(cap, RN / 2);
  /* the order: flushed/2 blocks alternating between rv[0..] and rv[RN/2..],
   * then rv[flushed/2 ..] in address order, then the rest */
  int n = 0, half = (int)flushed / 2;
  for (int i = 0; i < half; i++) rorder[n++] = (i % 2) ? RN / 2 + i : i;
  for (int i = half; n < (int)cap; i++) rorder[n++] = i;
  for (uint32_t i = 0; i < cap; i++) ebb_free(rv[rorder[i]]); /* the last one flushes */
  cr_assert_eq(held(a, c), kept + 1);
  /* walk every page's remote list */
  page_t *pages[16];
  int np = 0;
  for (int i = 0; i < RN; i++) {
    page_t *pg = page_of(rv[i]);
    int k = 0;
    while (k < np && pages[k] != pg) k++;
    if (k == np) {
      cr_assert_lt(np, 16);
      pages[np++] = pg;
    }
  }
  static bool seen[RN];
  uint32_t total = 0;
  for (int k = 0; k < np; k++) {
    uintptr_t x = atomic_load(&pages[k]->xfree);
    uint32_t on_list = 0;
    for (block_t *b = XFREE_HEAD(x); b; b = b->next) {
      int idx = -1;
      for (uint32_t i = 0; i < flushed; i++)
        if (rv[rorder[i]] == b) idx = rorder[i];
      cr_assert_geq(idx, 0, "block %p on a remote list was not among the flushed", (void *)b);
      cr_assert_not(seen[idx], "block %p twice on the remote lists", (void *)b);
      seen[idx] = true;
      cr_assert_eq(page_of(b), pages[k], "block %p on another page's remote list", (void *)b);
      cr_assert(block_cookie_is(b, page_cookie(b)), "block %p lost its cookie", (void *)b);
      cr_assert_not(ebb_owns(b));
      total++;
      on_list++;
    }
    cr_assert_eq(XFREE_COUNT(x), on_list, "page %d: the remote list holds %u blocks, its count says %u", k, on_list,
                 XFREE_COUNT(x));
  }
  cr_assert_eq(total, flushed, "%u blocks on the remote lists, %u flushed", total, flushed);
  return NULL;
}

Test(tcache, a_flush_pushes_each_pages_run_once_and_loses_no_block) {
  for (int i = 0; i < RN; i++) rv[i] = ebb_malloc(256);
  cr_assert_neq(page_of(rv[0]), page_of(rv[RN / 2]), "the two ends share a page: no alternation to test");
  pthread_t t;
  pthread_create(&t, NULL, free_in_runs, NULL);
  pthread_join(t, NULL);
  for (int i = 0; i < RN; i++) page_collect(page_of(rv[i]));
  for (int i = 0; i < RN; i++) {
    void *p = ebb_malloc(256);
    cr_assert(p && ebb_owns(p));
  }
}

/* ---------------------------------------------------------------- never cached */

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
  for (unsigned c = 0; c <= NCLASSES; c++) cr_assert_eq(arena_none.tc[c].fl.used, 0);
}

static void *free_big(void *arg) {
  ebb_free(ebb_malloc(64));
  size_t big = TCACHE_BYTES + TCACHE_BYTES / 2; /* above what a class's cache holds */
  unsigned c = size_class(big);
  ebb_free(arg);
  cr_assert_eq(arena_tls->tc[c].fl.used, 0);
  cr_assert_eq(arena_tls->tc_cap[c], 1, "marked never cached");
  return NULL;
}

Test(tcache, big_classes_are_never_cached) {
  size_t big = TCACHE_BYTES + TCACHE_BYTES / 2;
  void *keep = ebb_malloc(big), *p = ebb_malloc(big);
  page_t *pg = page_of(p);
  uint32_t used = pg->used;
  pthread_t t;
  pthread_create(&t, NULL, free_big, p);
  pthread_join(t, NULL);
  cr_assert_eq(page_collect(pg), 1, "another thread's free went straight to the page's remote list");
  cr_assert_eq(pg->used, used - 1);
  ebb_free(keep);
}

/* ---------------------------------------------------------------- classes of 16-64 KiB: one block */

#define MEDIUM 40000 /* class 40 KiB: 3 blocks a page of 2 units */

static void *medium_second;
static void *free_two_medium(void *arg) {
  void **v = arg;
  ebb_free(ebb_malloc(64));
  unsigned c = size_class(MEDIUM);
  ebb_free(v[0]);
  arena_t *a = arena_tls;
  cr_assert_eq(a->tc_cap[c], 2, "a class that fits 64 KiB once holds one block");
  cr_assert_eq(held(a, c), 1, "another thread's block is cached");
  ebb_free(v[1]);
  cr_assert_eq(held(a, c), 1, "the next one sends the first home");
  cr_assert_eq(page_collect(page_of(v[0])), 1);
  medium_second = ebb_malloc(MEDIUM);
  return NULL;
}

Test(tcache, a_medium_class_caches_one_block_of_another_thread) {
  void *v[2] = {ebb_malloc(MEDIUM), ebb_malloc(MEDIUM)};
  pthread_t t;
  pthread_create(&t, NULL, free_two_medium, v);
  pthread_join(t, NULL);
  cr_assert_eq(medium_second, v[1], "the cached block is handed out first");
  ebb_free(medium_second);
}

/* Fills a fresh page of `size` (v[0..count)) and starts the next, so the
 * first is full; returns the first page. */
static page_t *full_page_of(size_t size, void **v, void **next) {
  unsigned c = size_class(size), n = class_info[c].count;
  cr_assert(n >= 3 && n <= 128);
  for (unsigned i = 0; i < n; i++) v[i] = ebb_malloc(size);
  page_t *pg = page_of(v[0]);
  for (unsigned i = 1; i < n; i++) cr_assert_eq(page_of(v[i]), pg);
  *next = ebb_malloc(size);
  cr_assert_neq(page_of(*next), pg);
  cr_assert(pg->full, "the malloc that found it exhausted took it off its queue");
  return pg;
}
static page_t *full_medium_page(void **v, void **next) { return full_page_of(MEDIUM, v, next); }

/* The thread's own block freed into a full page waits in its class's slot
 * while that is empty, and the class's next malloc takes it: a class of a
 * few blocks a page (MEDIUM) and one of 64 (1 KiB). */
static void own_block_of_a_full_page_waits(size_t size) {
  static void *v[128];
  void *next;
  page_t *pg = full_page_of(size, v, &next);
  arena_t *a = arena_tls;
  unsigned c = size_class(size), n = class_info[c].count;
  cr_assert_not(a->tc_server);
  ebb_free(v[1]);
  cr_assert_eq(held(a, c), 1, "cached");
  cr_assert(pg->full, "its page stays full");
  cr_assert_eq(pg->used, n);
  ebb_free(v[2]);
  cr_assert_eq(held(a, c), 1, "the slot holds one: the next goes to its page");
  cr_assert_not(pg->full);
  cr_assert_eq(pg->used, n - 1);
  void *again = ebb_malloc(size);
  cr_assert_eq(again, v[1], "the next malloc takes the cached block");
  cr_assert_eq(held(a, c), 0);
  ebb_free(next); /* a page that is not full: not cached */
  cr_assert_eq(held(a, c), 0);
  slots_agree(a);
  for (unsigned i = 0; i < n; i++)
    if (i != 2) ebb_free(v[i]);
}

Test(tcache, the_own_block_of_a_full_medium_page_waits_in_the_cache) { own_block_of_a_full_page_waits(MEDIUM); }
Test(tcache, the_own_block_of_a_full_page_of_1k_blocks_waits_in_the_cache) { own_block_of_a_full_page_waits(1024); }

Test(tcache, the_decay_pass_sends_a_cached_medium_block_home) {
  void *v[8], *next;
  page_t *pg = full_medium_page(v, &next);
  arena_t *a = arena_tls;
  unsigned c = size_class(MEDIUM), n = class_info[c].count;
  ebb_free(v[0]);
  cr_assert_eq(held(a, c), 1);
  fake_now += 1;
  arena_decay(a, fake_now, true, false, PASS_PAGES);
  cr_assert_eq(held(a, c), 0, "the thread's pass empties its cache");
  cr_assert_not(pg->full);
  cr_assert_eq(pg->used, n - 1);
  for (unsigned i = 1; i < n; i++) ebb_free(v[i]);
  ebb_free(next);
}

Test(tcache, double_free_of_a_cached_medium_block_aborts, .signal = SIGABRT) {
  void *v[8], *next;
  full_medium_page(v, &next);
  ebb_free(v[0]);
  cr_assert_eq(held(arena_tls, size_class(MEDIUM)), 1);
  ebb_free(v[0]);
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

/* ---------------------------------------------------------------- stats, misuse */

static size_t st_before, st_after;
static void *stats_thread(void *arg) {
  ebb_free(ebb_malloc(64));
  struct ebb_stats s;
  ebb_stats(&s);
  st_before = s.allocated;
  ebb_free(arg);
  cr_assert_eq(held(arena_tls, size_class(64)), 1);
  ebb_stats(&s);
  st_after = s.allocated;
  return NULL;
}

Test(tcache, stats_do_not_count_cached_blocks_as_live) {
  void *p = ebb_malloc(64);
  ebb_malloc(64);
  pthread_t t;
  pthread_create(&t, NULL, stats_thread, p);
  pthread_join(t, NULL);
  cr_assert_eq(st_after, st_before - 64, "a cached block is free to the stats (%zu, %zu)", st_before, st_after);
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

static void double_free_own(arena_t *a) {
  void *p = ebb_malloc(64);
  ebb_malloc(64);
  ebb_free(p);
  cr_assert_gt(held(a, size_class(64)), 0);
  ebb_free(p);
}

Test(tcache, double_free_of_a_cached_own_block_aborts, .signal = SIGABRT) { in_server_thread(double_free_own); }
