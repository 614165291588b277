/* test_pattern.c — random malloc/calloc/aligned/realloc/free sequences over a
 * table of live blocks, every block filled with its address-keyed pattern and
 * checked before each realloc and free (and all of them at the end), so a block
 * handed out twice, an overlap or a bad copy is caught where it happens. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "stress_util.h"

#define PT_LIVE 2048 /* blocks a thread holds at once */
#define PT_THREADS 4

/* Allocates by one of the entry points, checking what that entry point promises
 * beyond blk_new's checks (zeroed memory, alignment). */
static blk_t pt_alloc(rng_t *r, uint64_t tag) {
  size_t size = stress_size(r);
  blk_t b = {NULL, size, tag};
  switch (rng_below(r, 8)) {
  case 0: {
    size_t n = 1 + (size_t)rng_below(r, 8), each = (size + n - 1) / n;
    unsigned char *p = ebb_calloc(n, each);
    STRESS_CHECK(p != NULL);
    for (size_t i = 0; i < n * each; i += (i < 4096 ? 1 : 509))
      if (p[i]) stress_die("calloc(%zu, %zu) = %p: byte %zu is %d", n, each, (void *)p, i, p[i]);
    b.p = p;
    break;
  }
  case 1: {
    size_t align = (size_t)16 << rng_below(r, 13); /* 16 B .. 64 KiB */
    STRESS_CHECK(ebb_posix_memalign(&b.p, align, size) == 0);
    if ((uintptr_t)b.p & (align - 1)) stress_die("posix_memalign(%zu) gave %p", align, b.p);
    break;
  }
  case 2: {
    size_t align = (size_t)8 << rng_below(r, 10);
    b.p = ebb_aligned_alloc(align, (size + align - 1) & ~(align - 1));
    STRESS_CHECK(b.p != NULL);
    if ((uintptr_t)b.p & (align - 1)) stress_die("aligned_alloc(%zu) gave %p", align, b.p);
    break;
  }
  default:
    b.p = ebb_malloc(size);
    STRESS_CHECK(b.p != NULL);
  }
  blk_check_meta(&b, "pattern alloc");
  blk_fill(&b);
  return b;
}

/* One thread's run: ops random operations on its own table, then everything is
 * checked and freed. Half the slots start empty, so the table size drifts. */
static void pt_run(uint64_t seed, size_t ops) {
  static __thread blk_t live[PT_LIVE];
  rng_t r = rng_seed(seed);
  uint64_t tag = seed << 40;
  for (size_t i = 0; i < ops; i++) {
    blk_t *b = &live[rng_below(&r, PT_LIVE)];
    uint64_t op = rng_below(&r, 10);
    if (!b->p)
      *b = pt_alloc(&r, ++tag);
    else if (op < 3)
      blk_realloc(b, stress_size(&r), "pattern realloc");
    else if (op < 4)
      blk_check(b, "pattern recheck");
    else
      blk_free(b, "pattern free");
  }
  for (size_t i = 0; i < PT_LIVE; i++)
    if (live[i].p) blk_free(&live[i], "pattern end");
}

Test(pattern, one_thread, .timeout = 120) { pt_run(11, stress_n(300000)); }

static size_t pt_thread_ops;
static void *pt_thread(void *arg) {
  pt_run(20 + (uintptr_t)arg, pt_thread_ops);
  return NULL;
}

Test(pattern, threads, .timeout = 120) {
  pthread_t t[PT_THREADS];
  pt_thread_ops = stress_n(150000);
  for (uintptr_t i = 0; i < PT_THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, pt_thread, (void *)i), 0);
  for (int i = 0; i < PT_THREADS; i++) pthread_join(t[i], NULL);
}

/* realloc growing and shrinking one block through every size range in small
 * steps: in-place growth, moves between classes and into and out of huge blocks. */
Test(pattern, realloc_ladder, .timeout = 120) {
  rng_t r = rng_seed(30);
  blk_t b = blk_new(1, 1, "ladder");
  size_t rounds = stress_n(8);
  for (size_t round = 0; round < rounds; round++) {
    while (b.size < ((size_t)5 << 20))
      blk_realloc(&b, b.size + 1 + b.size / (4 + rng_below(&r, 8)), "ladder up");
    while (b.size > 1) blk_realloc(&b, b.size - 1 - b.size / (4 + rng_below(&r, 8)), "ladder down");
  }
  blk_free(&b, "ladder");
}
