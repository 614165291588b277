/* test_xthread.c — blocks freed by threads other than the one that allocated
 * them: a producer/consumer queue and a random exchange through shared slots.
 * Every block carries an address-keyed pattern (stress_util.h) checked before
 * it is freed or reallocated; seeds are fixed per thread. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include "stress_util.h"

/* ---------------------------------------------------------------- producer/consumer */

#define PC_PRODUCERS 4
#define PC_CONSUMERS 4
#define PC_STASH 64

static blkq_t pcq = BLKQ_INIT; /* stress_util.h */

static size_t pc_per_producer;
static atomic_size_t pc_consumed;

/* Producers also allocate and free locally between pushes, so their arenas see
 * local frees interleaved with the remote ones the consumers send back. */
static void *pc_producer(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(1000 + id);
  for (size_t i = 0; i < pc_per_producer; i++) {
    blkq_push(&pcq, blk_new(stress_size(&r), (id << 40) | (2 * i + 1), "producer"));
    if (rng_below(&r, 4) == 0) {
      blk_t local = blk_new(stress_small_size(&r), (id << 40) | (2 * i + 2), "producer local");
      blk_free(&local, "producer local");
    }
  }
  return NULL;
}

/* Consumers free what they receive, some at once, some after keeping it a while,
 * and reallocate one in eight first (a realloc of a block from another thread). */
static void *pc_consumer(void *arg) {
  rng_t r = rng_seed(2000 + (uintptr_t)arg);
  blk_t stash[PC_STASH] = {{0}};
  for (;;) {
    blk_t b = blkq_pop(&pcq);
    if (!b.p) break;
    atomic_fetch_add(&pc_consumed, 1);
    if (rng_below(&r, 8) == 0) blk_realloc(&b, stress_size(&r), "consumer realloc");
    blk_t *slot = &stash[rng_below(&r, PC_STASH)];
    if (slot->p) blk_free(slot, "consumer stash");
    *slot = b;
  }
  for (size_t i = 0; i < PC_STASH; i++)
    if (stash[i].p) blk_free(&stash[i], "consumer drain");
  return NULL;
}

Test(xthread, producer_consumer, .timeout = 120) {
  pthread_t prod[PC_PRODUCERS], cons[PC_CONSUMERS];
  pc_per_producer = stress_n(40000);
  for (uintptr_t i = 0; i < PC_CONSUMERS; i++)
    cr_assert_eq(pthread_create(&cons[i], NULL, pc_consumer, (void *)i), 0);
  for (uintptr_t i = 0; i < PC_PRODUCERS; i++)
    cr_assert_eq(pthread_create(&prod[i], NULL, pc_producer, (void *)i), 0);
  for (int i = 0; i < PC_PRODUCERS; i++) pthread_join(prod[i], NULL);
  for (int i = 0; i < PC_CONSUMERS; i++) blkq_push(&pcq, (blk_t){0});
  for (int i = 0; i < PC_CONSUMERS; i++) pthread_join(cons[i], NULL);
  cr_assert_eq(atomic_load(&pc_consumed), PC_PRODUCERS * pc_per_producer);
}

/* ---------------------------------------------------------------- random exchange */

#define XC_THREADS 8
#define XC_SLOTS 256
#define XC_HDR 16

/* Blocks travel alone through the slots, so their particulars ride in a 16-byte
 * header (tag, size); the pattern covers the rest. The out-of-band check is the
 * owner's: just before publishing, it verifies the header still holds the tag it
 * wrote, which fails if the allocator also handed the block to someone else. */
static _Atomic(uintptr_t) xc_slots[XC_SLOTS];
static size_t xc_ops;

static blk_t xc_body(void *p) {
  uint64_t hdr[2];
  memcpy(hdr, p, sizeof hdr);
  return (blk_t){(char *)p + XC_HDR, (size_t)hdr[1] - XC_HDR, hdr[0]};
}

static void *xc_new(rng_t *r, uint64_t tag) {
  size_t size = XC_HDR + stress_size(r);
  void *p = ebb_malloc(size);
  STRESS_CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
  uint64_t hdr[2] = {tag, size};
  memcpy(p, hdr, sizeof hdr);
  blk_t body = xc_body(p);
  blk_fill(&body);
  return p;
}

/* Checks a block taken from a slot and frees it (one in four after a realloc,
 * which must keep header and pattern). */
static void xc_retire(rng_t *r, void *p) {
  blk_t body = xc_body(p);
  blk_check(&body, "exchange received");
  STRESS_CHECK(ebb_owns(p));
  if (rng_below(r, 4) == 0) {
    size_t size = body.size + XC_HDR;
    size_t nsize = size / 2 > XC_HDR ? size / 2 : size + 100;
    char *q = ebb_realloc(p, nsize);
    STRESS_CHECK(q != NULL);
    uint64_t hdr[2];
    memcpy(hdr, q, sizeof hdr);
    STRESS_CHECK(hdr[0] == body.tag && hdr[1] == size);
    p = q;
  }
  ebb_free(p);
}

static void *xc_thread(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(3000 + id);
  for (size_t i = 0; i < xc_ops; i++) {
    uint64_t tag = (id << 40) | (i + 1);
    void *p = xc_new(&r, tag);
    void *tmp = ebb_malloc(stress_small_size(&r)); /* a window for a block handed out twice */
    ebb_free(tmp);
    blk_t body = xc_body(p);
    STRESS_CHECK(body.tag == tag);
    blk_check(&body, "exchange own");
    uintptr_t old = atomic_exchange(&xc_slots[rng_below(&r, XC_SLOTS)], (uintptr_t)p);
    if (old) xc_retire(&r, (void *)old);
  }
  return NULL;
}

Test(xthread, random_exchange, .timeout = 120) {
  pthread_t t[XC_THREADS];
  rng_t r = rng_seed(3999);
  xc_ops = stress_n(30000);
  for (uintptr_t i = 0; i < XC_THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, xc_thread, (void *)i), 0);
  for (int i = 0; i < XC_THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < XC_SLOTS; i++) {
    uintptr_t p = atomic_exchange(&xc_slots[i], 0);
    if (p) xc_retire(&r, (void *)p);
  }
}
