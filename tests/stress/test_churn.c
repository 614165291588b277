/* test_churn.c — thread churn: 1000 short-lived threads in rounds, each leaving
 * blocks behind when it exits (to be freed by the next round's threads and by
 * the main thread), so arenas are abandoned with live blocks and must be
 * adopted or reclaimed. Memory must not grow with the number of threads ever
 * created, only with the number alive at once. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "stress_util.h"

#define CH_ROUNDS 10
#define CH_THREADS 100 /* per round */
#define CH_BATCH 10    /* alive at once */
#define CH_LOCAL 64    /* blocks a thread holds while it runs */
#define CH_LEAVE 8     /* blocks it leaves behind when it exits */

/* left[round % 2][thread]: what the threads of a round left behind. Thread k of
 * round r frees the first half of what thread k of round r-1 left (a remote free
 * into an arena whose thread is gone); main frees the second half. */
static blk_t ch_left[2][CH_THREADS][CH_LEAVE];
static size_t ch_ops;

typedef struct {
  int round, index;
} ch_arg_t;

static uint64_t ch_tag(const ch_arg_t *a, size_t i) {
  return ((uint64_t)a->round << 48) | ((uint64_t)a->index << 32) | (i + 1);
}

/* A slot may be empty: a short run does not fill every local slot. */
static void ch_free(blk_t *b, const char *where) {
  if (b->p) blk_free(b, where);
}

static void *ch_thread(void *arg) {
  ch_arg_t *a = arg;
  rng_t r = rng_seed(5000 + (uint64_t)a->round * CH_THREADS + (uint64_t)a->index);
  blk_t local[CH_LOCAL] = {{0}};
  if (a->round > 0)
    for (int i = 0; i < CH_LEAVE / 2; i++)
      ch_free(&ch_left[(a->round - 1) % 2][a->index][i], "churn inherited");
  for (size_t i = 0; i < ch_ops; i++) {
    blk_t *b = &local[rng_below(&r, CH_LOCAL)];
    if (b->p) blk_free(b, "churn local");
    *b = blk_new(rng_below(&r, 16) ? stress_small_size(&r) : stress_size(&r), ch_tag(a, i), "churn local");
  }
  for (int i = 0; i < CH_LOCAL; i++) {
    if (i < CH_LEAVE)
      ch_left[a->round % 2][a->index][i] = local[i]; /* empty slots too */
    else
      ch_free(&local[i], "churn exit");
  }
  return NULL;
}

static void ch_round(int round) {
  ch_arg_t args[CH_THREADS];
  pthread_t t[CH_THREADS];
  for (int first = 0; first < CH_THREADS; first += CH_BATCH) {
    for (int i = first; i < first + CH_BATCH; i++) {
      args[i] = (ch_arg_t){round, i};
      cr_assert_eq(pthread_create(&t[i], NULL, ch_thread, &args[i]), 0);
    }
    for (int i = first; i < first + CH_BATCH; i++) pthread_join(t[i], NULL);
  }
  if (round > 0)
    for (int k = 0; k < CH_THREADS; k++)
      for (int i = CH_LEAVE / 2; i < CH_LEAVE; i++) ch_free(&ch_left[(round - 1) % 2][k][i], "churn main");
}

Test(churn, short_lived_threads, .timeout = 120) {
  struct ebb_stats st[CH_ROUNDS];
  ch_ops = stress_n(2000);
  for (int round = 0; round < CH_ROUNDS; round++) {
    ch_round(round);
    ebb_stats(&st[round]);
  }
  for (int k = 0; k < CH_THREADS; k++)
    for (int i = 0; i < CH_LEAVE; i++) ch_free(&ch_left[(CH_ROUNDS - 1) % 2][k][i], "churn end");
  /* Round 2 has seen the steady state (live blocks of two rounds, CH_BATCH + 1
   * threads); eight more rounds of 100 threads must not add much to it. The
   * slack is four chunks for arenas still in the middle of being reclaimed. */
  size_t m2 = st[1].mapped, m10 = st[CH_ROUNDS - 1].mapped;
  cr_log_info("mapped after round 2: %zu, after round %d: %zu; arenas %llu, %llu", m2, CH_ROUNDS, m10,
              (unsigned long long)st[1].arenas, (unsigned long long)st[CH_ROUNDS - 1].arenas);
  cr_assert_leq(m10, 2 * m2 + ((size_t)16 << 20),
                "mapped grew with thread churn: %zu after round 2, %zu after round %d", m2, m10, CH_ROUNDS);
  cr_assert_leq(st[CH_ROUNDS - 1].arenas, 2 * st[1].arenas + CH_BATCH,
                "arenas grew with thread churn: %llu after round 2, %llu after round %d",
                (unsigned long long)st[1].arenas, (unsigned long long)st[CH_ROUNDS - 1].arenas, CH_ROUNDS);
}

/* Threads that exit right after allocating one block which the main thread
 * frees: the cheapest way to abandon many arenas, each with one live block. */
static void *ch_one_block(void *arg) {
  blk_t *b = arg;
  *b = blk_new(b->size, b->tag, "one block");
  return NULL;
}

Test(churn, abandon_one_block_each, .timeout = 120) {
  enum { N = 400 };
  static blk_t blocks[N];
  rng_t r = rng_seed(5999);
  size_t before = stress_mapped();
  for (int i = 0; i < N; i++) {
    pthread_t t;
    blocks[i] = (blk_t){NULL, stress_size(&r), (uint64_t)i + 1};
    cr_assert_eq(pthread_create(&t, NULL, ch_one_block, &blocks[i]), 0);
    pthread_join(t, NULL);
    if (i % 2) blk_free(&blocks[i - 1], "one block main");
  }
  for (int i = 1; i < N; i += 2) blk_free(&blocks[i], "one block main");
  size_t after = stress_mapped();
  cr_assert_leq(after, before + ((size_t)64 << 20), "mapped grew from %zu to %zu over %d one-block threads",
                before, after, N);
}
