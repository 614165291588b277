/* test_reclaim.c — pages of a live thread that other threads freed entirely,
 * taken over by another thread (arena_reclaim_locked: a forced purge such as
 * ebb_trim, or the background thread once the owner has been idle for the
 * decay time). Such a page is full and off its owner's queue; the owner's only
 * way back to it is freeing one of its own blocks into it (arena_return_slow,
 * under the arena lock the reclaim holds). Every block carries an
 * address-keyed pattern (stress_util.h), checked before it is freed. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "stress_util.h"

/* The owners start through ebb's pthread_create, as every thread of a program
 * linked with -Wl,--defsym=pthread_create=ebb_pthread_create (the release and debug builds here)
 * or run under libebb.so does: only such a thread shows a taker where its free
 * key is (docs/architecture.md). The sanitizer builds wrap nothing. */
static int owner_create(pthread_t *t, void *(*fn)(void *)) { return ebb_pthread_create(t, NULL, fn, NULL); }

/* ---------------------------------------------------------------- an idle owner */

#define IDLE_BLOCKS 65536 /* 16 MiB of 256-byte blocks */

static blk_t idle_blocks[IDLE_BLOCKS];
static pthread_barrier_t idle_built, idle_release;

static void *idle_owner(void *arg) {
  (void)arg;
  for (size_t i = 0; i < IDLE_BLOCKS; i++) idle_blocks[i] = blk_new(256, i + 1, "idle owner");
  pthread_barrier_wait(&idle_built);
  pthread_barrier_wait(&idle_release); /* blocked, as an idle pool thread is: no allocator call */
  return NULL;
}

/* Starts the owner and returns once its blocks are built (it then blocks). */
static pthread_t idle_owner_start(void) {
  cr_assert_eq(pthread_barrier_init(&idle_built, NULL, 2), 0);
  cr_assert_eq(pthread_barrier_init(&idle_release, NULL, 2), 0);
  pthread_t t;
  cr_assert_eq(owner_create(&t, idle_owner), 0);
  pthread_barrier_wait(&idle_built);
  return t;
}

static void idle_owner_stop(pthread_t t) {
  pthread_barrier_wait(&idle_release);
  cr_assert_eq(pthread_join(t, NULL), 0);
}

/* A thread allocates 16 MiB and blocks; another frees all of it. Only the
 * owner ever collected its pages' remote frees, so the 16 MiB stayed in use
 * (and counted in `allocated`) for as long as the owner lived. One ebb_trim
 * now takes those pages back, while the owner is still alive. */
Test(reclaim, an_idle_owners_remotely_freed_pages_are_taken_back, .timeout = 60) {
  pthread_t t = idle_owner_start();
  struct ebb_stats built, freed, trimmed;
  ebb_stats(&built);
  for (size_t i = 0; i < IDLE_BLOCKS; i++) blk_free(&idle_blocks[i], "freeing thread");
  ebb_stats(&freed);
  ebb_trim();
  ebb_stats(&trimmed);
  cr_log_info("idle owner: allocated %.1f MiB built, %.1f MiB after the remote frees, %.1f MiB after ebb_trim; "
              "active %.1f MiB built, %.1f after ebb_trim",
              built.allocated / 1048576.0, freed.allocated / 1048576.0, trimmed.allocated / 1048576.0,
              built.active / 1048576.0, trimmed.active / 1048576.0);
  cr_assert_geq(built.allocated, 16 * (size_t)1 << 20, "the owner's 16 MiB are not counted as allocated");
  cr_assert_leq(trimmed.allocated + 12 * ((size_t)1 << 20), built.allocated,
                "ebb_trim left %zu bytes allocated of %zu: the idle owner's freed pages were not taken back",
                trimmed.allocated, built.allocated);
  /* against what was built: with a short EBB_DECAY_MS a pass may take the
   * pages back between the frees and ebb_trim */
  cr_assert_leq(trimmed.active + 12 * ((size_t)1 << 20), built.active, "active %zu -> %zu bytes", built.active,
                trimmed.active);
  idle_owner_stop(t);
}

/* The same with one block in 512 left live (not freed by anyone): the pages
 * stay the owner's, but ebb_trim collects their remote frees and returns the
 * granules they leave wholly free, as a decay pass of the owner's would have. */
Test(reclaim, an_idle_owners_partly_freed_pages_are_purged, .timeout = 60) {
  pthread_t t = idle_owner_start();
  struct ebb_stats built, trimmed;
  ebb_stats(&built);
  for (size_t i = 0; i < IDLE_BLOCKS; i++)
    if (i % 512 != 0) blk_free(&idle_blocks[i], "freeing thread");
  ebb_trim();
  ebb_stats(&trimmed);
  /* counted from before the frees: with a short EBB_DECAY_MS a pass may do
   * part of this between the frees and ebb_trim */
  size_t purged = trimmed.purged - built.purged;
  cr_log_info("idle owner, 1 in 512 live: purged %.1f MiB by ebb_trim's end, allocated %.1f -> %.1f MiB",
              purged / 1048576.0, built.allocated / 1048576.0, trimmed.allocated / 1048576.0);
  cr_assert_geq(purged, 12 * ((size_t)1 << 20), "only %zu bytes of ~16 MiB freed were purged", purged);
  cr_assert_leq(trimmed.allocated + 12 * ((size_t)1 << 20), built.allocated,
                "allocated %zu -> %zu bytes: the remote frees were not collected", built.allocated, trimmed.allocated);
  for (size_t i = 0; i < IDLE_BLOCKS; i += 512) blk_free(&idle_blocks[i], "the live ones, at the end");
  idle_owner_stop(t);
}

/* ---------------------------------------------------------------- an owner that freed its own */

static pthread_barrier_t self_freed, self_release;

/* Builds 16 MiB, frees all but one block in 64 itself (so every page keeps
 * live blocks and none goes back whole), blocks; once released, checks what it
 * kept and allocates and frees again on the same pages. */
static void *self_owner(void *arg) {
  (void)arg;
  for (size_t i = 0; i < IDLE_BLOCKS; i++) idle_blocks[i] = blk_new(256, i + 1, "self owner");
  for (size_t i = 0; i < IDLE_BLOCKS; i++)
    if (i % 64 != 0) blk_free(&idle_blocks[i], "self owner's own");
  pthread_barrier_wait(&self_freed);
  pthread_barrier_wait(&self_release); /* blocked: no allocator call */
  for (size_t i = 0; i < IDLE_BLOCKS; i += 64) blk_check(&idle_blocks[i], "kept across the reclaim");
  for (size_t i = 0; i < IDLE_BLOCKS; i++)
    if (i % 64 != 0) idle_blocks[i] = blk_new(256, IDLE_BLOCKS + i, "after the reclaim");
  for (size_t i = 0; i < IDLE_BLOCKS; i++) blk_free(&idle_blocks[i], "after the reclaim");
  return NULL;
}

/* Only the owner touches the free lists of its pages that still have free
 * blocks (its queue pages), so a thread that freed most of what it built
 * itself and then blocked kept all of it resident (bench/floor alive-own:
 * 167.7 MiB of 296). Another thread now takes those pages over while the
 * owner is idle (arena_reclaim_queues_locked, after a fence with the owner's
 * free path); ebb_trim does it at once. The owner then finds what it kept
 * intact and its pages usable. */
Test(reclaim, an_idle_owners_own_frees_are_taken_back, .timeout = 60) {
  cr_assert_eq(pthread_barrier_init(&self_freed, NULL, 2), 0);
  cr_assert_eq(pthread_barrier_init(&self_release, NULL, 2), 0);
  /* counted from before the owner starts: with a short EBB_DECAY_MS its own
   * passes purge part of it while it frees */
  struct ebb_stats before, trimmed;
  ebb_stats(&before);
  pthread_t t;
  cr_assert_eq(owner_create(&t, self_owner), 0);
  pthread_barrier_wait(&self_freed);
  ebb_trim();
  ebb_stats(&trimmed);
  size_t purged = trimmed.purged - before.purged;
  cr_log_info("owner freed its own, 1 in 64 live: purged %.1f MiB by ebb_trim's end", purged / 1048576.0);
  cr_assert_geq(purged, 8 * ((size_t)1 << 20), "only %zu bytes of the ~16 MiB the owner freed were purged", purged);
  pthread_barrier_wait(&self_release);
  cr_assert_eq(pthread_join(t, NULL), 0);
}

/* ---------------------------------------------------------------- an owner that freed everything */

static pthread_barrier_t empty_freed, empty_release;

/* Builds 16 MiB of 16-1016 B blocks (every small class's pages filled),
 * frees all of it itself in the order it built them, blocks; once released,
 * builds and frees again on whatever it has left. */
static void *empty_owner(void *arg) {
  (void)arg;
  rng_t r = rng_seed(7100);
  for (size_t i = 0; i < IDLE_BLOCKS; i++) idle_blocks[i] = blk_new(16 + rng_below(&r, 1001), i + 1, "empty owner");
  for (size_t i = 0; i < IDLE_BLOCKS; i++) blk_free(&idle_blocks[i], "empty owner's own");
  pthread_barrier_wait(&empty_freed);
  pthread_barrier_wait(&empty_release); /* blocked: no allocator call */
  for (size_t i = 0; i < IDLE_BLOCKS; i++) idle_blocks[i] = blk_new(16 + rng_below(&r, 1001), i + 1, "after the trim");
  for (size_t i = 0; i < IDLE_BLOCKS; i++) blk_free(&idle_blocks[i], "after the trim");
  return NULL;
}

/* A thread that frees everything it built itself keeps, as long as it runs,
 * each class's current page (empty, for its next malloc) and the page of the
 * block its thread cache kept: about 2-4 MiB of pages, which also pin the
 * chunks they sit in. Once it idles, another thread takes those too
 * (arena_take_sources: a second fence, with malloc's pop window); ebb_trim
 * does it at once. Before, they stayed the idle thread's for as long as it
 * lived (bench/turns idle100: the next job's thread faulted its memory in
 * afresh). The owner then allocates again from an arena with no pages. */
Test(reclaim, an_idle_owners_current_pages_and_cache_go_back, .timeout = 60) {
  cr_assert_eq(pthread_barrier_init(&empty_freed, NULL, 2), 0);
  cr_assert_eq(pthread_barrier_init(&empty_release, NULL, 2), 0);
  /* the process's other pages (Criterion's, on ebb here) are counted from before */
  struct ebb_stats before, freed, trimmed;
  ebb_stats(&before);
  pthread_t t;
  cr_assert_eq(owner_create(&t, empty_owner), 0);
  pthread_barrier_wait(&empty_freed);
  ebb_stats(&freed);
  ebb_trim();
  ebb_stats(&trimmed);
  cr_log_info("owner freed everything: active %.0f KiB before it, %.0f KiB after, %.0f KiB after ebb_trim",
              before.active / 1024.0, freed.active / 1024.0, trimmed.active / 1024.0);
  cr_assert_leq(trimmed.active, before.active + ((size_t)256 << 10),
                "%zu bytes of pages more than before the owner started stayed after ebb_trim",
                trimmed.active - before.active);
  pthread_barrier_wait(&empty_release);
  cr_assert_eq(pthread_join(t, NULL), 0);
}

/* ---------------------------------------------------------------- an owner at work */

#define RC_ROUNDS 40 /* release; stress_n scales it down for the debug build */
#define RC_BLOCKS 4096
#define RC_KEEP 64

static blkq_t rcq = BLKQ_INIT; /* stress_util.h */

static atomic_int rc_stop;
static atomic_size_t rc_trims;
static blk_t rc_mine[RC_BLOCKS];

static size_t rc_size(rng_t *r) {
  static const size_t sizes[] = {16, 48, 64, 256, 1000, 4000, 20000};
  return sizes[rng_below(r, sizeof sizes / sizeof sizes[0])];
}

/* Rounds of blocks, most handed to the consumer, the rest freed here in a
 * random order (into pages that filled up meanwhile: arena_return_slow), and
 * a few kept across rounds and checked every round. */
static int rc_naps; /* the owner sleeps between a round's steps, so trims find it idle and it wakes mid-trim */

static void rc_nap(rng_t *r) {
  if (!rc_naps) return;
  struct timespec nap = {0, (long)(100 + rng_below(r, 900)) * 1000};
  nanosleep(&nap, NULL);
}

static void *rc_owner(void *arg) {
  (void)arg;
  rng_t r = rng_seed(77);
  blk_t keep[RC_KEEP] = {{0}};
  uint64_t tag = 1;
  size_t rounds = stress_n(RC_ROUNDS);
  for (size_t round = 0; round < rounds; round++) {
    size_t n = 0;
    for (size_t i = 0; i < RC_BLOCKS; i++) {
      blk_t b = blk_new(rc_size(&r), tag++, "owner");
      if (rng_below(&r, 4) == 0)
        rc_mine[n++] = b;
      else
        blkq_push(&rcq, b);
    }
    for (size_t i = n; i > 1; i--) { /* shuffle, then free */
      size_t j = (size_t)rng_below(&r, i);
      blk_t x = rc_mine[i - 1];
      rc_mine[i - 1] = rc_mine[j];
      rc_mine[j] = x;
    }
    rc_nap(&r);
    for (size_t i = 0; i < n; i++) {
      blk_free(&rc_mine[i], "owner's own");
      if (i == n / 2) rc_nap(&r); /* half its own freed: pages with free blocks, then idle */
    }
    rc_nap(&r);
    for (size_t k = 0; k < RC_KEEP; k++) {
      if (keep[k].p) blk_check(&keep[k], "owner's kept");
      if (!keep[k].p || rng_below(&r, 3) == 0) {
        if (keep[k].p) blk_free(&keep[k], "owner's kept");
        keep[k] = blk_new(rc_size(&r), tag++, "owner's kept");
      }
    }
  }
  for (size_t k = 0; k < RC_KEEP; k++) blk_free(&keep[k], "owner's kept at the end");
  blkq_push(&rcq, (blk_t){0});
  return NULL;
}

static void *rc_consumer(void *arg) {
  (void)arg;
  for (;;) {
    blk_t b = blkq_pop(&rcq);
    if (!b.p) return NULL;
    blk_free(&b, "consumer");
  }
}

static void *rc_trimmer(void *arg) {
  (void)arg;
  struct timespec nap = {0, 200 * 1000};
  while (!atomic_load(&rc_stop)) {
    ebb_trim();
    atomic_fetch_add(&rc_trims, 1);
    nanosleep(&nap, NULL);
  }
  return NULL;
}

/* The owner never stops allocating and freeing while a third thread forces a
 * reclaim every 0.2 ms: pages taken over must be exactly the ones nothing
 * live is in, and the owner must go on finding its own pages intact. */
static void rc_run(int naps) {
  rc_naps = naps;
  atomic_store(&rc_trims, 0);
  atomic_store(&rc_stop, 0);
  struct ebb_stats before, after;
  ebb_stats(&before);
  pthread_t owner, consumer, trimmer;
  cr_assert_eq(pthread_create(&trimmer, NULL, rc_trimmer, NULL), 0);
  cr_assert_eq(pthread_create(&consumer, NULL, rc_consumer, NULL), 0);
  cr_assert_eq(owner_create(&owner, rc_owner), 0);
  cr_assert_eq(pthread_join(owner, NULL), 0);
  cr_assert_eq(pthread_join(consumer, NULL), 0);
  atomic_store(&rc_stop, 1);
  cr_assert_eq(pthread_join(trimmer, NULL), 0);
  ebb_stats(&after);
  cr_log_info("reclaim under load%s: %zu forced purges, %.1f MiB purged", naps ? ", owner napping" : "",
              atomic_load(&rc_trims), (after.purged - before.purged) / 1048576.0);
  cr_assert_gt(atomic_load(&rc_trims), 10);
  cr_assert_gt(after.purged, before.purged, "the trims never purged anything: the test exercised nothing");
}

Test(reclaim, forced_reclaims_while_the_owner_works_lose_nothing, .timeout = 120) { rc_run(0); }

/* The same with the owner sleeping between steps, half of its own blocks of
 * a round freed: each trim may find it idle and take its queue pages
 * (arena_reclaim_queues_locked), and it wakes in the middle of such a take,
 * its frees going to the remote lists and its other calls waiting. */
Test(reclaim, forced_reclaims_of_a_napping_owners_queue_pages_lose_nothing, .timeout = 120) { rc_run(1); }

/* ---------------------------------------------------------------- free's window */

/* Owners free their own blocks, one after another, into pages that are on
 * their queues (neither full nor the current page), while another thread
 * forces reclaims of those queue pages as fast as it can. free's page push
 * runs in a window (free_window_open/close, arena.h) that a taker must see
 * and stay out of. The window is a few instructions, and the taker's
 * membarrier outlasts it unless the owner is preempted inside it, so there
 * are more threads than this machine's 2 cores: three owners and the taker. */
#define FW_OWNERS 3
#define FW_BLOCKS 16384 /* per owner, 1 MiB of 64-byte blocks: 16 pages of the class */
static blk_t fw_blocks[FW_OWNERS][FW_BLOCKS];
static atomic_int fw_stop;
static atomic_size_t fw_trims;

static void *fw_owner(void *arg) {
  size_t o = (size_t)(uintptr_t)arg;
  blk_t *bl = fw_blocks[o];
  rng_t r = rng_seed(91 + o);
  uint64_t tag = 1;
  for (size_t i = 0; i < FW_BLOCKS; i++) bl[i] = blk_new(64, tag++, "window owner");
  /* under ThreadSanitizer 2000 rounds took 83-94 s of the 120 s timeout in CI,
   * and timed out on a busier machine (a soak run alongside other work) */
  size_t rounds = stress_n(2000 / STRESS_TSAN_DIV);
  for (size_t round = 0; round < rounds; round++) {
    /* all but one in 128 freed, in the order they were made: the pages keep
     * a live block and stay queued, and granules left wholly free are what a
     * taker purges while the owner goes on pushing into the same pages */
    size_t keep = (size_t)rng_below(&r, 128);
    for (size_t i = 0; i < FW_BLOCKS; i++)
      if (i % 128 != keep) blk_free(&bl[i], "window owner");
    for (size_t i = 0; i < FW_BLOCKS; i++) {
      if (bl[i].p)
        blk_check(&bl[i], "window owner's live");
      else
        bl[i] = blk_new(64, tag++, "window owner");
    }
  }
  for (size_t i = 0; i < FW_BLOCKS; i++) blk_free(&bl[i], "window owner at the end");
  return NULL;
}

static void *fw_trimmer(void *arg) {
  (void)arg;
  while (!atomic_load(&fw_stop)) {
    ebb_trim();
    atomic_fetch_add(&fw_trims, 1);
  }
  return NULL;
}

Test(reclaim, forced_reclaims_racing_the_owners_own_frees_lose_nothing, .timeout = 120) {
  atomic_store(&fw_stop, 0);
  atomic_store(&fw_trims, 0);
  struct ebb_stats before, after;
  ebb_stats(&before);
  pthread_t owner[FW_OWNERS], trimmer;
  cr_assert_eq(pthread_create(&trimmer, NULL, fw_trimmer, NULL), 0);
  for (size_t o = 0; o < FW_OWNERS; o++)
    cr_assert_eq(ebb_pthread_create(&owner[o], NULL, fw_owner, (void *)(uintptr_t)o), 0);
  for (size_t o = 0; o < FW_OWNERS; o++) cr_assert_eq(pthread_join(owner[o], NULL), 0);
  atomic_store(&fw_stop, 1);
  cr_assert_eq(pthread_join(trimmer, NULL), 0);
  ebb_stats(&after);
  cr_log_info("free's window: %zu forced purges during the owners' rounds, %.1f MiB purged",
              atomic_load(&fw_trims), (after.purged - before.purged) / 1048576.0);
  cr_assert_gt(atomic_load(&fw_trims), 10);
  cr_assert_gt(after.purged, before.purged, "the trims never purged anything: the test exercised nothing");
}
