/* test_arenas.c — first-class arenas under threads: each thread creates an
 * arena, other threads free some of its blocks with plain free() while the owner
 * keeps allocating, then the owner destroys it with blocks still live. Destroy
 * must return the memory, and the arena count must come back down. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "stress_util.h"

#define AR_THREADS 4
#define AR_BLOCKS 1500 /* per thread per round */
#define AR_EXTRA 500   /* allocated while the neighbour frees */

static blk_t ar_new(ebb_arena_t *a, rng_t *r, uint64_t tag) {
  size_t size = stress_size(r);
  blk_t b = {NULL, size, tag};
  if (rng_below(r, 4) == 0) {
    unsigned char *p = ebb_arena_calloc(a, 1, size);
    STRESS_CHECK(p != NULL);
    for (size_t i = 0; i < size; i += (i < 4096 ? 1 : 509))
      if (p[i]) stress_die("ebb_arena_calloc(%zu) = %p: byte %zu is %d", size, (void *)p, i, p[i]);
    b.p = p;
  } else {
    b.p = ebb_arena_malloc(a, size);
    STRESS_CHECK(b.p != NULL);
  }
  blk_check_meta(&b, "arena alloc");
  blk_fill(&b);
  return b;
}

/* ebb_arena_realloc counterpart of blk_realloc: the kept prefix must survive. */
static void ar_realloc(ebb_arena_t *a, blk_t *b, size_t size) {
  blk_check(b, "arena realloc");
  uintptr_t old = (uintptr_t)b->p; /* only printed once realloc has run */
  uint64_t oldkey = pat_key(b->p, b->tag);
  size_t keep = size < b->size ? size : b->size;
  void *q = ebb_arena_realloc(a, b->p, size);
  STRESS_CHECK(q != NULL);
  size_t off = pat_walk(q, keep, b->size, oldkey, 1);
  if (off != PAT_OK)
    stress_die("ebb_arena_realloc %#lx (%zu) -> %p (%zu) lost offset %zu", (unsigned long)old, b->size, q,
               size, off);
  b->p = q;
  b->size = size;
  blk_check_meta(b, "arena realloc");
  blk_fill(b);
}

/* ---------------------------------------------------------------- threads share blocks */

static pthread_barrier_t ar_barrier;
static size_t ar_rounds;
/* outbox[t]: blocks of thread t's arena that thread t+1 frees with free() */
static blk_t ar_outbox[AR_THREADS][AR_BLOCKS];

static void ar_round(uintptr_t id, size_t round, blk_t *own) {
  rng_t r = rng_seed(9000 + id * 1000 + round);
  uint64_t tag = (id << 48) | ((uint64_t)round << 32);
  ebb_arena_t *a = ebb_arena_create();
  STRESS_CHECK(a != NULL);
  size_t nown = 0, nout = 0;
  for (size_t i = 0; i < AR_BLOCKS; i++) {
    blk_t b = ar_new(a, &r, ++tag);
    if (i % 3 == 0)
      ar_outbox[id][nout++] = b;
    else
      own[nown++] = b;
  }
  for (size_t i = nout; i < AR_BLOCKS; i++) ar_outbox[id][i].p = NULL;
  pthread_barrier_wait(&ar_barrier);
  /* the neighbour's arena is live and in use by its owner while we free into it */
  blk_t *in = ar_outbox[(id + AR_THREADS - 1) % AR_THREADS];
  for (size_t i = 0; i < AR_BLOCKS; i++) {
    if (in[i].p) blk_free(&in[i], "arena remote free");
    if (i < AR_EXTRA) own[nown++] = ar_new(a, &r, ++tag);
    blk_t *mine = &own[rng_below(&r, nown)];
    if (!mine->p) continue;
    if (rng_below(&r, 4) == 0)
      blk_free(mine, "arena own free");
    else if (rng_below(&r, 4) == 0)
      ar_realloc(a, mine, stress_size(&r));
  }
  pthread_barrier_wait(&ar_barrier);
  for (size_t i = 0; i < nown; i++)
    if (own[i].p) blk_check(&own[i], "arena before destroy");
  ebb_arena_destroy(a); /* with most of its blocks still live */
}

static void *ar_thread(void *arg) {
  static __thread blk_t own[AR_BLOCKS + AR_EXTRA];
  for (size_t round = 0; round < ar_rounds; round++) ar_round((uintptr_t)arg, round, own);
  return NULL;
}

Test(arenas, threads_free_each_others_blocks, .timeout = 120) {
  pthread_t t[AR_THREADS];
  struct ebb_stats before, after;
  ar_rounds = stress_n(12);
  ebb_trim();
  ebb_stats(&before);
  cr_assert_eq(pthread_barrier_init(&ar_barrier, NULL, AR_THREADS), 0);
  for (uintptr_t i = 0; i < AR_THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, ar_thread, (void *)i), 0);
  for (int i = 0; i < AR_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&ar_barrier);
  ebb_stats(&after);
  /* the worker threads' own arenas may outlive them (abandoned); the first-class
   * ones must not */
  cr_assert_leq(after.arenas, before.arenas + AR_THREADS, "arenas: %llu before, %llu after",
                (unsigned long long)before.arenas, (unsigned long long)after.arenas);
}

/* ---------------------------------------------------------------- one thread, many arenas */

Test(arenas, many_interleaved_then_destroyed, .timeout = 120) {
  enum { N = 32, LIVE = 4096 };
  static ebb_arena_t *arena[N];
  static blk_t live[LIVE];
  static int owner[LIVE];
  rng_t r = rng_seed(9500);
  size_t ops = stress_n(60000);
  struct ebb_stats before, after;
  ebb_trim();
  ebb_stats(&before);
  for (int i = 0; i < N; i++) cr_assert_not_null(arena[i] = ebb_arena_create());
  for (size_t i = 0; i < ops; i++) {
    size_t k = rng_below(&r, LIVE);
    if (live[k].p && rng_below(&r, 2))
      blk_free(&live[k], "interleaved free");
    else if (live[k].p)
      ar_realloc(arena[owner[k]], &live[k], stress_size(&r));
    else
      live[k] = ar_new(arena[owner[k] = (int)rng_below(&r, N)], &r, i + 1);
  }
  for (int i = 0; i < N; i++) { /* destroy in a scrambled order */
    int victim = (i * 13) % N;
    for (size_t k = 0; k < LIVE; k++)
      if (live[k].p && owner[k] == victim) {
        blk_check(&live[k], "interleaved before destroy");
        live[k].p = NULL;
      }
    ebb_arena_destroy(arena[victim]);
  }
  /* Destroyed arenas' memory stays warm (dirty) until decay or a trim returns it. */
  ebb_trim();
  ebb_stats(&after);
  cr_assert_eq(after.arenas, before.arenas, "arenas: %llu before, %llu after destroying all",
               (unsigned long long)before.arenas, (unsigned long long)after.arenas);
  cr_assert_leq(after.mapped, before.mapped + ((size_t)8 << 20),
                "mapped: %zu before, %zu after destroying all and ebb_trim", before.mapped, after.mapped);
  cr_assert_eq(after.dirty, 0, "dirty %zu after ebb_trim", after.dirty);
}

/* ---------------------------------------------------------------- one arena, passed between threads */

static struct {
  pthread_mutex_t lock;
  ebb_arena_t *arena;
  blk_t live[1024];
} ar_shared = {PTHREAD_MUTEX_INITIALIZER, NULL, {{0}}};
static size_t ar_shared_ops;

/* The arena is used by one thread at a time (the lock), as the API requires;
 * blocks are freed with free() by whichever thread finds them. */
static void *ar_shared_thread(void *arg) {
  rng_t r = rng_seed(9700 + (uintptr_t)arg);
  for (size_t i = 0; i < ar_shared_ops; i++) {
    pthread_mutex_lock(&ar_shared.lock);
    blk_t *b = &ar_shared.live[rng_below(&r, 1024)];
    if (b->p)
      blk_free(b, "shared arena free");
    else
      *b = ar_new(ar_shared.arena, &r, ((uint64_t)(uintptr_t)arg << 40) | (i + 1));
    pthread_mutex_unlock(&ar_shared.lock);
  }
  return NULL;
}

Test(arenas, one_arena_passed_between_threads, .timeout = 120) {
  pthread_t t[AR_THREADS];
  ar_shared.arena = ebb_arena_create();
  cr_assert_not_null(ar_shared.arena);
  ar_shared_ops = stress_n(40000);
  for (uintptr_t i = 0; i < AR_THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, ar_shared_thread, (void *)i), 0);
  for (int i = 0; i < AR_THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 1024; i++)
    if (ar_shared.live[i].p) blk_check(&ar_shared.live[i], "shared arena end");
  ebb_arena_destroy(ar_shared.arena);
}
