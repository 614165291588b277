/* test_warm_threads.c — memory kept warm, under threads: large blocks handed
 * from the thread that allocated them to others that free them while everyone
 * allocates more (the cache of freed large blocks shared by all); a block
 * growing and shrinking by realloc, into and out of that cache, while other
 * threads take and give back cached extents; first-class arenas destroyed or
 * reset right after other threads freed their blocks (before the owner
 * collected those frees), then reused; threads starting and exiting while
 * arenas are destroyed, so their arenas take the pooled chunks. Every block's
 * contents are checked (stress_util.h patterns) before it is freed. Seeded;
 * the work is divided by EBBTEST_SCALE (stress_n). ebb_* names only. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "stress_util.h"

#define WT_MiB ((size_t)1 << 20)
#define WT_LARGE_MIN (2 * WT_MiB + 1) /* the smallest large block */

/* 2 MiB + 1 .. 2 MiB + span, at any byte: spans round to 64 KiB, so sizes differ. */
static size_t wt_large(rng_t *r, size_t span) { return WT_LARGE_MIN + (size_t)rng_below(r, span); }

static void wt_start(pthread_t *t, size_t n, void *(*fn)(void *)) {
  for (uintptr_t i = 0; i < n; i++) cr_assert_eq(pthread_create(&t[i], NULL, fn, (void *)i), 0);
}
static void wt_join(pthread_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) pthread_join(t[i], NULL);
}

/* ---------------------------------------------------------------- 1. hand-overs */

#define HO_THREADS 4
#define HO_SLOTS 12
#define HO_OWN 2

typedef struct {
  pthread_mutex_t lock;
  blk_t b;
} ho_slot_t;
static ho_slot_t ho_slots[HO_SLOTS];
static size_t ho_iters;

/* Each iteration: a new large block goes into a random shared slot, and the
 * block it displaces (allocated by any thread) is checked and freed here; and
 * one of the thread's own large blocks is replaced. */
static void *ho_worker(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(4100 + id);
  uint64_t tag = (uint64_t)(id + 1) << 40;
  blk_t own[HO_OWN] = {{0}};
  for (size_t i = 0; i < ho_iters; i++) {
    blk_t b = blk_new(wt_large(&r, 6 * WT_MiB), ++tag, "hand-over new");
    ho_slot_t *s = &ho_slots[rng_below(&r, HO_SLOTS)];
    pthread_mutex_lock(&s->lock);
    blk_t old = s->b;
    s->b = b;
    pthread_mutex_unlock(&s->lock);
    if (old.p) blk_free(&old, "hand-over free");
    blk_t *mine = &own[rng_below(&r, HO_OWN)];
    if (mine->p) blk_free(mine, "own large free");
    *mine = blk_new(wt_large(&r, 10 * WT_MiB), ++tag, "own large new");
    if (i % 16 == 0) { /* a small one now and then: ticks, so decay passes run too */
      blk_t sm = blk_new(stress_small_size(&r), ++tag, "small");
      blk_free(&sm, "small");
    }
  }
  for (int k = 0; k < HO_OWN; k++)
    if (own[k].p) blk_free(&own[k], "own large final");
  return NULL;
}

Test(warm_threads, large_blocks_freed_by_other_threads, .timeout = 120) {
  ho_iters = stress_n(300);
  for (int s = 0; s < HO_SLOTS; s++) {
    pthread_mutex_init(&ho_slots[s].lock, NULL);
    ho_slots[s].b.p = NULL;
  }
  pthread_t t[HO_THREADS];
  wt_start(t, HO_THREADS, ho_worker);
  wt_join(t, HO_THREADS);
  for (int s = 0; s < HO_SLOTS; s++)
    if (ho_slots[s].b.p) blk_free(&ho_slots[s].b, "hand-over final");
  struct ebb_stats st;
  ebb_stats(&st);
  cr_log_info("hand-overs: %zu iterations x %d threads; dirty %zu MiB, mapped %zu MiB at the end", ho_iters,
              HO_THREADS, st.dirty >> 20, st.mapped >> 20);
  size_t n = ebb_trim();
  ebb_stats(&st);
  cr_assert_eq(st.dirty, 0, "after ebb_trim (%zu bytes) dirty is %zu", n, st.dirty);
}

/* ---------------------------------------------------------------- 2. realloc growth races */

#define RG_OTHERS 3
#define RG_MAX (48 * WT_MiB)
static atomic_int rg_done;
static size_t rg_rounds;

/* Others: large blocks of 2–14 MiB, a few live at a time, freed in random
 * order: they fill the cache and take from it (perhaps the extent right
 * after the growing block) while it grows. */
static void *rg_other(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(5200 + id);
  uint64_t tag = (uint64_t)(id + 1) << 40;
  blk_t live[3] = {{0}};
  for (size_t i = 0; i < stress_n(20000) && !atomic_load_explicit(&rg_done, memory_order_relaxed); i++) {
    blk_t *b = &live[rng_below(&r, 3)];
    if (b->p) blk_free(b, "realloc race: other's free");
    *b = blk_new(wt_large(&r, 8 * WT_MiB), ++tag, "realloc race: other's malloc");
    if (rng_below(&r, 4) == 0) blk_realloc(b, wt_large(&r, 8 * WT_MiB), "realloc race: other's realloc");
  }
  for (int k = 0; k < 3; k++)
    if (live[k].p) blk_free(&live[k], "realloc race: other's final");
  return NULL;
}

/* The grower: from 2 MiB to 48 MiB by about 1.5x, now and then shrinking to a
 * third (its tail regions go to the cache), then freed; contents checked at
 * every step (blk_realloc). */
static void rg_grow(void) {
  rng_t r = rng_seed(5100);
  uint64_t tag = 0;
  for (size_t round = 0; round < rg_rounds; round++) {
    blk_t b = blk_new(wt_large(&r, WT_MiB), ++tag, "grower new");
    while (b.size < RG_MAX) {
      size_t next = b.size + b.size / 2 + (size_t)rng_below(&r, 100000);
      if (rng_below(&r, 5) == 0 && b.size / 3 > WT_LARGE_MIN) next = b.size / 3;
      blk_realloc(&b, next < RG_MAX ? next : RG_MAX, "grower realloc");
    }
    blk_free(&b, "grower free");
  }
}

Test(warm_threads, realloc_growth_races_other_threads_large_blocks, .timeout = 120) {
  rg_rounds = stress_n(16);
  atomic_store(&rg_done, 0);
  pthread_t t[RG_OTHERS];
  wt_start(t, RG_OTHERS, rg_other);
  rg_grow();
  atomic_store(&rg_done, 1);
  wt_join(t, RG_OTHERS);
}

/* ---------------------------------------------------------------- 3. destroy/reset after remote frees */

#define DR_WORKERS 2
#define DR_BLOCKS 600
static blk_t dr_blocks[DR_BLOCKS];
static pthread_barrier_t dr_go, dr_freed;
static atomic_int dr_stop;

/* Worker w frees the blocks i with i % 3 == w + 1, then reports (barrier). Worker
 * 1 has an arena of its own, worker 0 never allocates (no arena): both kinds of
 * remote free. */
static void *dr_worker(void *arg) {
  uintptr_t w = (uintptr_t)arg;
  blk_t mine = {NULL, 0, 0};
  if (w == 1) mine = blk_new(100, 77, "worker's own block");
  for (;;) {
    pthread_barrier_wait(&dr_go);
    if (atomic_load(&dr_stop)) break;
    for (size_t i = w + 1; i < DR_BLOCKS; i += 3)
      if (dr_blocks[i].p) blk_free(&dr_blocks[i], "remote free before destroy");
    pthread_barrier_wait(&dr_freed);
  }
  if (mine.p) blk_free(&mine, "worker's own block");
  return NULL;
}

static blk_t dr_new(ebb_arena_t *a, rng_t *r, size_t i, uint64_t tag) {
  size_t size = i % 97 == 5 ? wt_large(r, 4 * WT_MiB) : stress_size(r); /* 6 large ones a round */
  blk_t b = {ebb_arena_malloc(a, size), size, tag};
  if (!b.p) stress_die("ebb_arena_malloc(%zu) returned NULL", size);
  blk_check_meta(&b, "arena block");
  blk_fill(&b);
  return b;
}

/* Rounds: the owner fills an arena, the workers free two thirds of its blocks
 * and finish, the owner checks its third and destroys (or resets) the arena at
 * once. The next round's arena is built from the same, still resident, memory
 * (pooled chunks, cached large blocks, or the reset arena's own). */
static void dr_run(bool reset, uint64_t seed) {
  size_t rounds = stress_n(150);
  rng_t r = rng_seed(seed);
  uint64_t tag = 0;
  atomic_store(&dr_stop, 0);
  pthread_barrier_init(&dr_go, NULL, DR_WORKERS + 1);
  pthread_barrier_init(&dr_freed, NULL, DR_WORKERS + 1);
  pthread_t t[DR_WORKERS];
  wt_start(t, DR_WORKERS, dr_worker);
  ebb_arena_t *a = reset ? ebb_arena_create() : NULL;
  for (size_t round = 0; round < rounds; round++) {
    if (!reset) a = ebb_arena_create();
    STRESS_CHECK(a != NULL);
    for (size_t i = 0; i < DR_BLOCKS; i++) dr_blocks[i] = dr_new(a, &r, i, ++tag);
    pthread_barrier_wait(&dr_go);
    pthread_barrier_wait(&dr_freed); /* the remote frees are done, not yet collected */
    for (size_t i = 0; i < DR_BLOCKS; i += 3) blk_check(&dr_blocks[i], "owner's block before destroy");
    if (reset)
      ebb_arena_reset(a);
    else
      ebb_arena_destroy(a);
  }
  atomic_store(&dr_stop, 1);
  pthread_barrier_wait(&dr_go);
  wt_join(t, DR_WORKERS);
  /* the arena reused (a fresh one takes the last destroyed one's memory):
   * blocks freed in any order, from this thread, checked */
  if (!reset) a = ebb_arena_create();
  STRESS_CHECK(a != NULL);
  for (size_t i = 0; i < DR_BLOCKS; i++) dr_blocks[i] = dr_new(a, &r, i, ++tag);
  for (size_t i = 0; i < DR_BLOCKS; i++) blk_check(&dr_blocks[i], "reused arena");
  for (size_t i = 0; i < DR_BLOCKS; i += 2) blk_free(&dr_blocks[i], "reused arena free");
  for (size_t i = 0; i < DR_BLOCKS / 2; i++) {
    blk_t b = dr_new(a, &r, i, ++tag);
    blk_check(&b, "reused arena, second generation");
    ebb_free(b.p);
  }
  for (size_t i = 1; i < DR_BLOCKS; i += 2) blk_check(&dr_blocks[i], "reused arena, survivors");
  ebb_arena_destroy(a);
  pthread_barrier_destroy(&dr_go);
  pthread_barrier_destroy(&dr_freed);
}

Test(warm_threads, arena_destroy_right_after_remote_frees, .timeout = 120) { dr_run(false, 6100); }
Test(warm_threads, arena_reset_right_after_remote_frees, .timeout = 120) { dr_run(true, 6200); }

/* ---------------------------------------------------------------- 4. threads take pooled chunks */

#define TP_MAX_WAVE 24
#define TP_BLOCKS 400
static atomic_int tp_stop;
static atomic_size_t tp_destroyed;
static pthread_mutex_t tp_lock = PTHREAD_MUTEX_INITIALIZER;
static blk_t tp_kept[TP_MAX_WAVE * TP_BLOCKS];
static size_t tp_nkept;
static atomic_uint_fast64_t tp_tag;
static pthread_barrier_t tp_all_bound; /* a wave's threads hold their arenas at once */

/* A short-lived thread: its first allocation binds it to an arena (an
 * abandoned one, adopted; or a destroyed arena's, or a new one, whose chunks
 * come from the pool of destroyed arenas' warm chunks); it fills blocks,
 * checks and frees most, and leaves a quarter to the main thread. */
static void *tp_thread(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(7300 + id);
  blk_t b[TP_BLOCKS];
  for (size_t i = 0; i < TP_BLOCKS; i++) {
    size_t size = i == 7 ? wt_large(&r, 3 * WT_MiB) : stress_size(&r);
    b[i] = blk_new(size, atomic_fetch_add(&tp_tag, 1) + 1, "pooled-chunk thread");
    if (i == 0) pthread_barrier_wait(&tp_all_bound);
  }
  for (size_t i = 0; i < TP_BLOCKS; i++)
    if (i % 4) blk_free(&b[i], "pooled-chunk thread free");
  pthread_mutex_lock(&tp_lock);
  for (size_t i = 0; i < TP_BLOCKS; i += 4) tp_kept[tp_nkept++] = b[i];
  pthread_mutex_unlock(&tp_lock);
  return NULL;
}

/* Creates three arenas, fills them (small, medium, a large block each), checks
 * and destroys them, over and over: their chunks go to the pool, resident. */
static void *tp_destroyer(void *arg) {
  (void)arg;
  rng_t r = rng_seed(7200);
  uint64_t tag = (uint64_t)1 << 50;
  for (size_t round = 0; round < stress_n(2000) && !atomic_load(&tp_stop); round++) {
    ebb_arena_t *a[3];
    static blk_t b[3][64];
    for (int k = 0; k < 3; k++) {
      a[k] = ebb_arena_create();
      STRESS_CHECK(a[k] != NULL);
      for (size_t i = 0; i < 64; i++) {
        size_t size = i == 0 ? wt_large(&r, 2 * WT_MiB) : stress_size(&r);
        b[k][i] = (blk_t){ebb_arena_malloc(a[k], size), size, ++tag};
        STRESS_CHECK(b[k][i].p != NULL);
        blk_fill(&b[k][i]);
      }
    }
    for (int k = 0; k < 3; k++) {
      for (size_t i = 0; i < 64; i++) blk_check(&b[k][i], "destroyer's arena");
      ebb_arena_destroy(a[k]);
    }
    atomic_fetch_add(&tp_destroyed, 1);
  }
  return NULL;
}

/* Waves of 1, 2, 3, ... threads: each wave has one thread more than there are
 * abandoned arenas to adopt, so one thread a wave starts from a destroyed
 * arena or a new one, and takes its chunks from the pool. */
Test(warm_threads, new_threads_take_chunks_of_destroyed_arenas, .timeout = 120) {
  atomic_store(&tp_stop, 0);
  atomic_store(&tp_destroyed, 0);
  pthread_t d;
  cr_assert_eq(pthread_create(&d, NULL, tp_destroyer, NULL), 0);
  while (atomic_load(&tp_destroyed) == 0) sched_yield();
  size_t waves = stress_n(TP_MAX_WAVE), threads = 0;
  for (size_t w = 1; w <= waves; w++) {
    pthread_t t[TP_MAX_WAVE];
    pthread_barrier_init(&tp_all_bound, NULL, (unsigned)w);
    for (uintptr_t i = 0; i < w; i++)
      cr_assert_eq(pthread_create(&t[i], NULL, tp_thread, (void *)(threads + i)), 0);
    wt_join(t, w);
    pthread_barrier_destroy(&tp_all_bound);
    threads += w;
    /* the wave's survivors: checked, freed from here into abandoned arenas */
    for (size_t i = 0; i < tp_nkept; i++) blk_free(&tp_kept[i], "left by an exited thread");
    tp_nkept = 0;
  }
  atomic_store(&tp_stop, 1);
  pthread_join(d, NULL);
  struct ebb_stats st;
  ebb_stats(&st);
  cr_log_info("pooled chunks: %zu threads in %zu waves while %zu x 3 arenas were destroyed; %llu arenas",
              threads, waves, atomic_load(&tp_destroyed), (unsigned long long)st.arenas);
}
