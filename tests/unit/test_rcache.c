/* The remote cache: blocks one thread frees of another thread's arena are
 * handed out again by the freeing thread, go back to their page when it exits,
 * are never kept for first-class arenas, and a second free is still caught. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include "arena.h"
#include "ebb.h"

static void *blk[8];
static void *reused;
static unsigned cls64;

static void *free_four_and_reuse(void *arg) {
  (void)arg;
  ebb_free(ebb_malloc(1000)); /* a thread that never allocated has no arena, hence no cache */
  for (int i = 0; i < 4; i++) ebb_free(blk[i]);
  arena_t *me = arena_tls;
  cr_assert_not_null(me);
  cr_assert_eq(me->rcount[cls64], 4, "the freeing thread keeps the foreign blocks");
  reused = ebb_malloc(64);
  return NULL;
}

Test(rcache, foreign_blocks_are_reused_then_returned_at_exit) {
  for (int i = 0; i < 8; i++) blk[i] = ebb_malloc(64);
  cls64 = size_class(64);
  page_t *pg = chunk_page_of(chunk_of(blk[0]), blk[0]);
  pthread_t t;
  pthread_create(&t, NULL, free_four_and_reuse, NULL);
  pthread_join(t, NULL);
  int hit = 0;
  for (int i = 0; i < 4; i++) hit |= reused == blk[i];
  cr_assert(hit, "the thread's next malloc of the class took a cached block");
  uint32_t used = pg->used;
  cr_assert_eq(page_collect(pg), 3, "the three unused blocks went back to their page at thread exit");
  cr_assert_eq(pg->used, used - 3);
  cr_assert(ebb_owns(reused));
  ebb_free(reused);
}

static ebb_arena_t *fc;
static void *fc_block;
static void *free_first_class_block(void *arg) {
  (void)arg;
  ebb_malloc(1); /* give this thread an arena */
  ebb_free(fc_block);
  cr_assert_eq(arena_tls->rcount[size_class(64)], 0, "first-class arena blocks are never kept");
  return NULL;
}

Test(rcache, first_class_blocks_go_straight_back) {
  fc = ebb_arena_create();
  fc_block = ebb_arena_malloc(fc, 64);
  pthread_t t;
  pthread_create(&t, NULL, free_first_class_block, NULL);
  pthread_join(t, NULL);
  ebb_arena_destroy(fc);
}

static void *double_free_in_cache(void *arg) {
  ebb_free(ebb_malloc(1000));
  ebb_free(arg);
  ebb_free(arg); /* still in this thread's cache: the cookie gives it away */
  return NULL;
}

Test(rcache, double_free_of_a_cached_block_aborts, .signal = SIGABRT) {
  void *p = ebb_malloc(64);
  ebb_malloc(64); /* keeps the page from emptying */
  pthread_t t;
  pthread_create(&t, NULL, double_free_in_cache, p);
  pthread_join(t, NULL);
}
