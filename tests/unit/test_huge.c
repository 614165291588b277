/* Large blocks and their cache, over the fake OS and its clock: a freed block
 * stays resident and is reused without a mapping; the fit rules (taken whole
 * up to 25% larger, split on a 4 MiB boundary, or taken with its tail purged,
 * the largest smaller one grown, in place or moved); decay and the cap unmapping cached
 * blocks oldest first, ebb_trim; realloc growing into cached space and
 * shrinking into it; the kernel refusing mappings (fake_fail_maps,
 * fake_fail_resizes); first-class arenas leaving their memory warm (destroy,
 * reset); and a seeded mix of all of it leaving nothing behind. ebb_* names,
 * no override; each test is its own process, and the set-up trims, so the
 * cache starts empty. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include "arena.h"
#include "huge.h"
#include "registry.h"
#include "ebb.h"
#include "fake_os.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define DECAY 500

static struct ebb_stats stats(void) {
  struct ebb_stats s;
  ebb_stats(&s);
  return s;
}

static void activity(int n) { /* enough local frees for several clock reads (decay passes) */
  for (int i = 0; i < n; i++) ebb_free(ebb_malloc(32));
}

/* Whether the page at p is mapped (mincore fails with ENOMEM on a hole). */
static int mapped_at(const void *p) {
  unsigned char v;
  return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) == 0;
}

static void fill(void *p, size_t n, unsigned seed) {
  uint64_t *w = p;
  for (size_t i = 0; i < n / 8; i++) w[i] = (i * 0x9E3779B97F4A7C15u) ^ seed;
}
/* Offset of the first byte of [p, p + n) that is not c, or SIZE_MAX. */
static size_t check_byte(const char *p, size_t n, unsigned char c) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] != c) return i;
  return SIZE_MAX;
}
/* Offset of the first word that differs, or SIZE_MAX. */
static size_t check(const void *p, size_t n, unsigned seed) {
  const uint64_t *w = p;
  for (size_t i = 0; i < n / 8; i++)
    if (w[i] != ((i * 0x9E3779B97F4A7C15u) ^ seed)) return i * 8;
  return SIZE_MAX;
}

/* Registry leaves mapped so far (each one an os_map of its own, on demand). */
static size_t leaves(void) {
  size_t n = 0;
  for (size_t i = 0; i < sizeof reg_root / sizeof reg_root[0]; i++) n += atomic_load(&reg_root[i]) != &reg_empty_leaf; /* an empty entry names the shared empty leaf */
  return n;
}

/* A large block of n bytes, every page written (so it is resident); the fake's
 * counters start after it, so they show what the test's own steps cost. */
static char *big(size_t n) {
  char *p = ebb_malloc(n);
  cr_assert_not_null(p, "malloc(%zu)", n);
  memset(p, 0x5a, n);
  fake_reset();
  return p;
}

static void setup(void) {
  opt.decay_ms = DECAY;
  opt.dirty_max = (int64_t)1 << 40;
  opt.background = 0;
  activity(200);                 /* this thread's arena and its 32-byte page */
  ebb_free(ebb_malloc(3 * MiB)); /* the descriptor slab and the registry leaf */
  ebb_trim();
  fake_reset();
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(stats().dirty, 0, "the test starts with nothing dirty");
}
TestSuite(huge, .init = setup);

/* ---------------------------------------------------------------- reuse */

Test(huge, a_freed_block_stays_resident_and_is_reused_whole) {
  char *p = big(8 * MiB);
  struct ebb_stats s0 = stats();
  ebb_free(p);
  struct ebb_stats s1 = stats();
  cr_assert_eq(s1.dirty, s0.dirty + 8 * MiB, "the cached block counts as dirty");
  cr_assert_eq(s1.mapped, s0.mapped, "and stays mapped");
  cr_assert_eq(s1.active, s0.active - 8 * MiB);
  cr_assert_eq(fake_unmaps + fake_purges, 0, "nothing goes back to the kernel on free");

  char *q = ebb_malloc(8 * MiB);
  cr_assert_eq(q, p, "the same size takes the cached block");
  cr_assert_eq(fake_maps, 0, "without a mapping");
  cr_assert_eq(fake_unmaps + fake_purges + fake_resizes, 0);
  cr_assert_eq((unsigned char)q[8 * MiB - 1], 0x5a, "its pages are still the resident ones");
  cr_assert_eq(stats().dirty, s0.dirty);
  cr_assert_eq(stats().active, s0.active);

  ebb_free(q);
  char *r = ebb_malloc(8 * MiB - 700 * KiB); /* a little smaller: within 25% */
  cr_assert_eq(r, p, "a slightly smaller request takes it too");
  cr_assert_eq(fake_maps + fake_purges, 0, "whole, nothing purged");
  cr_assert_eq(huge_cache_bytes(), 0);
  ebb_free(r);
}

Test(huge, spans_are_rounded_to_64k_so_nearby_sizes_share_a_block) {
  char *p = big(6 * MiB + 1000); /* span 6 MiB + 64 KiB */
  ebb_free(p);
  cr_assert_eq(huge_cache_bytes(), 6 * MiB + 64 * KiB);
  char *q = ebb_malloc(6 * MiB + 40 * KiB);
  cr_assert_eq(q, p, "a slightly larger size within the rounded span takes the block");
  cr_assert_eq(fake_maps + fake_resizes, 0);
  cr_assert_geq(ebb_malloc_usable_size(q), 6 * MiB + 40 * KiB);
  ebb_free(q);
}

Test(huge, calloc_clears_a_reused_block) {
  char *p = big(8 * MiB);
  ebb_free(p);
  char *q = ebb_calloc(1, 8 * MiB - 4096);
  cr_assert_eq(q, p, "calloc reuses the cached block");
  cr_assert_eq(fake_maps, 0);
  for (size_t i = 0; i < 8 * MiB - 4096; i += 8)
    cr_assert_eq(*(uint64_t *)(q + i), 0, "byte %zu of a reused calloc block is not zero", i);
  ebb_free(q);
}

/* A cached block too small grows in place when the range after it is free:
 * the address stays, only the growth is new. The range after it is made a
 * hole first (a shrink gives the tail to the cache, trim unmaps it), so mremap
 * can extend it. */
Test(huge, a_cached_block_too_small_is_grown_in_place) {
  char *p = big(12 * MiB);
  cr_assert_eq(ebb_realloc(p, 7 * MiB + 512 * KiB), p);
  cr_assert_eq(huge_cache_bytes(), 4 * MiB, "the shrink cached [8 MiB, 12 MiB)");
  ebb_trim();
  cr_assert_not(mapped_at(p + 8 * MiB), "trim unmapped the cached tail: a hole after the block");
  ebb_free(p);
  fake_reset();
  size_t active = huge_active_bytes();
  char *q = ebb_malloc(8 * MiB + 512 * KiB);
  cr_assert_eq(q, p, "the cached block was grown in place");
  cr_assert_eq(fake_maps + fake_moves, 0, "no mapping, no move");
  cr_assert_eq(fake_resizes, 1, "one mremap in place");
  cr_assert_eq((unsigned char)q[100], 0x5a, "its first pages are the resident ones");
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(huge_active_bytes(), active + 8 * MiB + 512 * KiB);
  memset(q, 1, 8 * MiB + 512 * KiB);
  ebb_free(q);
}

/* Maps a page right after [p, p + n), so that mremap cannot grow it in place. */
static void *block_after(char *p, size_t n) {
  void *w = mmap(p + n, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  cr_assert(w == p + n, "mapped a page at the block's end");
  return w;
}

/* Well below the need, with no room after it: the cached block is moved to a
 * fresh range of the full size (its pages move, nothing is copied) and grown
 * there, rather than left cached beside a fresh mapping (which kept both
 * resident: malloc-large's peak RSS was 12 % above glibc's). */
Test(huge, a_cached_block_well_below_the_need_is_moved_and_grown) {
  char *p = big(6 * MiB);
  void *wall = block_after(p, 6 * MiB);
  ebb_free(p);
  size_t active = huge_active_bytes();
  char *q = ebb_malloc(20 * MiB);
  cr_assert_neq(q, p, "moved");
  cr_assert_eq(fake_moves, 1, "by one mremap");
  cr_assert_eq(huge_cache_bytes(), 0, "nothing stays cached");
  cr_assert_eq(huge_active_bytes(), active + 20 * MiB);
  cr_assert_not(mapped_at(p), "the old range is gone: its pages moved");
  cr_assert_eq(check_byte(q, 6 * MiB, 0x5a), SIZE_MAX, "the first 6 MiB are the cached block's pages");
  cr_assert_eq(check_byte(q + 6 * MiB, 14 * MiB, 0), SIZE_MAX, "the growth is fresh");
  memset(q, 1, 20 * MiB);
  ebb_free(q);
  munmap(wall, 4096);
}

/* The largest smaller block is the one grown: the most resident pages reused. */
Test(huge, the_largest_smaller_cached_block_is_the_one_grown) {
  char *a = big(5 * MiB), *b = big(9 * MiB);
  void *wa = block_after(a, 5 * MiB), *wb = block_after(b, 9 * MiB);
  ebb_free(a);
  ebb_free(b);
  fake_reset();
  char *q = ebb_malloc(16 * MiB);
  cr_assert_eq(fake_moves, 1);
  cr_assert_eq(huge_cache_bytes(), 5 * MiB, "the 5 MiB block stays cached");
  cr_assert_not(mapped_at(b), "the 9 MiB block moved");
  cr_assert(mapped_at(a));
  ebb_free(q);
  munmap(wa, 4096);
  munmap(wb, 4096);
}

/* calloc over a grown block: the reused start is cleared, the growth is the
 * kernel's zeroes; every byte reads 0. */
Test(huge, calloc_over_a_moved_and_grown_block_is_all_zero) {
  char *p = big(6 * MiB);
  void *wall = block_after(p, 6 * MiB);
  ebb_free(p);
  char *q = ebb_calloc(1, 15 * MiB);
  cr_assert_eq(fake_moves, 1, "the cached block was grown");
  cr_assert_eq(check_byte(q, 15 * MiB, 0), SIZE_MAX, "every byte is zero");
  ebb_free(q);
  munmap(wall, 4096);
}

/* When the kernel refuses the move, the block stays cached and a fresh
 * mapping serves the request. */
Test(huge, a_refused_move_leaves_the_block_cached) {
  char *p = big(6 * MiB);
  void *wall = block_after(p, 6 * MiB);
  ebb_free(p);
  fake_fail_resizes = 2; /* the in-place growth and the move */
  char *q = ebb_malloc(12 * MiB);
  cr_assert_not_null(q);
  cr_assert_neq(q, p);
  cr_assert_eq(fake_refused, 2);
  cr_assert_eq(huge_cache_bytes(), 6 * MiB, "the refused block went back to the cache");
  cr_assert(mapped_at(p));
  memset(q, 2, 12 * MiB);
  ebb_free(q);
  munmap(wall, 4096);
}

/* ---------------------------------------------------------------- the fit bound */

Test(huge, up_to_a_quarter_larger_is_taken_whole) {
  char *p = big(10 * MiB);
  ebb_free(p);
  size_t active = huge_active_bytes();
  char *q = ebb_malloc(8 * MiB); /* 10 = 8 * 1.25 */
  cr_assert_eq(q, p);
  cr_assert_eq(fake_maps + fake_purges, 0, "taken whole, nothing purged");
  cr_assert_eq(huge_active_bytes(), active + 10 * MiB, "the block owns the whole 10 MiB");
  cr_assert_eq(huge_cache_bytes(), 0);
  ebb_free(q);
}

Test(huge, just_over_a_quarter_larger_is_not_taken_as_is) {
  char *p = big(10 * MiB + 64 * KiB);
  ebb_free(p);
  char *q = ebb_malloc(8 * MiB); /* 10 MiB + 64 KiB > 8 * 1.25; < 8 + 4: no split */
  cr_assert_eq(q, p);
  cr_assert_eq(fake_maps + fake_purges, 0);
  cr_assert_eq(huge_slack_bytes(), 2 * MiB + 64 * KiB, "the unused tail is the block's slack");
  cr_assert_eq(huge_active_bytes() - huge_in_use_bytes(), 2 * MiB + 64 * KiB, "not in use");
}

Test(huge, a_block_a_region_bigger_is_split_and_the_rest_stays_cached) {
  char *p = big(16 * MiB);
  ebb_free(p);
  size_t active = huge_active_bytes();
  char *q = ebb_malloc(5 * MiB); /* region 8 MiB; 16 >= 8 + 4 */
  cr_assert_eq(q, p, "the block starts where the cached one did");
  cr_assert_eq(fake_maps + fake_purges + fake_unmaps, 0);
  cr_assert_eq(huge_active_bytes(), active + 8 * MiB, "it takes its own 4 MiB regions only");
  cr_assert_eq(huge_cache_bytes(), 8 * MiB, "the rest stays cached");
  cr_assert_eq(huge_slack_bytes(), 3 * MiB, "its own region's last 3 MiB are resident slack");
  cr_assert_eq(stats().dirty, 11 * MiB);
  char *r = ebb_malloc(8 * MiB);
  cr_assert_eq(r, p + 8 * MiB, "the rest is a block of its own, right after");
  cr_assert_eq(fake_maps, 0);
  cr_assert_eq((unsigned char)r[0], 0x5a, "still resident");
  cr_assert_eq(huge_cache_bytes(), 0);
  ebb_free(q);
  ebb_free(r);
  cr_assert_eq(huge_cache_bytes(), 16 * MiB, "the two halves merge again");
  cr_assert_eq(ebb_malloc(15 * MiB), p, "and serve a request for nearly all of it");
}

Test(huge, split_exactly_at_one_region_more) {
  char *p = big(12 * MiB);
  ebb_free(p);
  char *q = ebb_malloc(7 * MiB); /* region 8 MiB; 12 = 8 + 4: split */
  cr_assert_eq(q, p);
  cr_assert_eq(huge_cache_bytes(), 4 * MiB);
  cr_assert_eq(fake_purges, 0);
  cr_assert_eq(ebb_malloc(4 * MiB), p + 8 * MiB);
  cr_assert_eq(fake_maps, 0);
}

/* Its tail stays resident until the decay: purged at once, a later and larger
 * request that took the block faulted it in again (4 blocks of 2-8 MiB at
 * random a cycle paid 480 faults a cycle). */
Test(huge, a_somewhat_bigger_block_is_taken_whole_and_its_tail_waits_for_the_decay) {
  char *p = big(11 * MiB);
  ebb_free(p);
  size_t active = huge_active_bytes();
  struct ebb_stats s0 = stats();
  uint64_t t0 = fake_now;
  char *q = ebb_malloc(7 * MiB); /* 11 > 7 * 1.25, 11 < 8 + 4: no split */
  cr_assert_eq(q, p);
  cr_assert_eq(fake_maps + fake_purges, 0, "nothing purged at the malloc");
  cr_assert_eq(huge_cache_bytes(), 0, "taken whole");
  cr_assert_eq(huge_active_bytes(), active + 11 * MiB);
  struct ebb_stats s1 = stats();
  cr_assert_eq(s1.dirty, s0.dirty - 7 * MiB, "the 4 MiB tail still counts as dirty");
  cr_assert_eq(s1.active, s0.active + 7 * MiB, "and not as active");
  cr_assert_eq(s1.mapped, s0.mapped);
  fill(q, 7 * MiB, 11);
  fake_now = t0 + DECAY - 4;
  activity(200);
  cr_assert_eq(fake_purges, 0, "nothing before its time");
  fake_now = t0 + DECAY;
  activity(200);
  cr_assert(fake_was_purged(p + 7 * MiB, 4 * MiB), "the unused 4 MiB tail was purged at the decay");
  cr_assert_not(fake_was_purged(p, 64 * KiB), "the block itself was not");
  cr_assert_eq(fake_purged_bytes, 4 * MiB, "only the tail");
  cr_assert_eq(check(q, 7 * MiB, 11), SIZE_MAX);
  cr_assert_eq(huge_slack_bytes(), 0);
  cr_assert_eq(stats().dirty, s1.dirty - 4 * MiB);
  ebb_free(q);
  cr_assert_eq(huge_cache_bytes(), 7 * MiB, "the block is cached again, without the tail that went back");
  cr_assert_not(mapped_at(p + 7 * MiB));
}

/* The free of a block with slack caches its span whole and resident: a
 * larger request then takes it without touching the kernel. */
Test(huge, a_blocks_slack_comes_back_whole_with_it) {
  char *p = big(11 * MiB);
  ebb_free(p);
  char *q = ebb_malloc(7 * MiB);
  cr_assert_eq(q, p);
  ebb_free(q);
  cr_assert_eq(huge_slack_bytes(), 0);
  cr_assert_eq(huge_cache_bytes(), 11 * MiB);
  char *r = ebb_malloc(11 * MiB);
  cr_assert_eq(r, p);
  cr_assert_eq(fake_maps + fake_purges + fake_resizes + fake_moves, 0);
  cr_assert_eq((unsigned char)r[11 * MiB - 1], 0x5a, "its last page is still the resident one");
  ebb_free(r);
}

/* A realloc that grows the block into its listed slack takes it off the
 * list: the decay must not purge what the program now owns. */
Test(huge, realloc_into_the_slack_is_never_purged_by_the_decay) {
  char *p = big(11 * MiB);
  ebb_free(p);
  uint64_t t0 = fake_now;
  char *q = ebb_malloc(7 * MiB);
  cr_assert_eq(q, p);
  fake_now = t0 + DECAY / 2;
  char *r = ebb_realloc(q, 9 * MiB + 100);
  cr_assert_eq(r, p, "grown within its span");
  cr_assert_eq(fake_maps + fake_resizes + fake_moves, 0);
  fill(r, 9 * MiB, 5);
  cr_assert_eq(huge_slack_bytes(), 11 * MiB - align_up(9 * MiB + 100, UNIT_SIZE), "the rest is slack again");
  fake_now = t0 + DECAY;
  activity(200);
  cr_assert_eq(fake_purges, 0, "re-listed at the realloc: not due yet");
  fake_now = t0 + DECAY / 2 + DECAY;
  activity(200);
  cr_assert_eq(fake_purges, 1);
  cr_assert_eq(check(r, 9 * MiB, 5), SIZE_MAX, "the grown block is intact");
  cr_assert_not(fake_was_purged(r + 9 * MiB, 100), "its last bytes too");
  cr_assert(fake_was_purged(r + 11 * MiB - 64 * KiB, 64 * KiB));
  ebb_free(r);
}

/* A block moved by realloc leaves its old range: no slack of it stays listed
 * (the decay would purge a range the kernel may have given someone else). */
Test(huge, a_moved_block_leaves_no_slack_listed) {
  char *p = big(11 * MiB);
  char *other = big(4 * MiB); /* not after p: p's mapping cannot grow in place there, maybe */
  ebb_free(p);
  uint64_t t0 = fake_now;
  char *q = ebb_malloc(7 * MiB);
  cr_assert_eq(q, p);
  cr_assert_gt(huge_slack_bytes(), 0);
  char *r = ebb_realloc(q, 40 * MiB);
  cr_assert_not_null(r);
  cr_assert_eq(huge_slack_bytes(), 0, "grown to its exact size: no slack");
  fake_reset();
  fake_now = t0 + 10 * DECAY;
  activity(200);
  cr_assert_eq(fake_purges, 0, "nothing of the old range is purged");
  ebb_free(r);
  ebb_free(other);
}

/* ebb_trim and the cap reach live blocks' slack too, after the cache. */
Test(huge, trim_and_the_cap_purge_live_blocks_slack) {
  char *p = big(11 * MiB), *p2 = big(11 * MiB);
  ebb_free(p);
  ebb_free(p2);
  char *q = ebb_malloc(7 * MiB), *q2 = ebb_malloc(7 * MiB);
  cr_assert(q && q2);
  cr_assert_eq(huge_slack_bytes(), 8 * MiB);
  opt.dirty_max = 5 * MiB;
  char *r = ebb_malloc(9 * MiB); /* fresh: over the cap with 8 MiB of slack */
  cr_assert_not_null(r);
  ebb_free(ebb_malloc(32 * KiB)); /* a slow-path event or two */
  arena_enforce_cap();
  cr_assert_leq(huge_slack_bytes(), 4 * MiB, "the cap took the oldest slack");
  cr_assert(fake_was_purged(q + 7 * MiB, 4 * MiB), "the oldest first");
  opt.dirty_max = (int64_t)1 << 40;
  ebb_trim();
  cr_assert_eq(huge_slack_bytes(), 0);
  cr_assert(fake_was_purged(q2 + 7 * MiB, 4 * MiB));
  cr_assert_eq(stats().dirty, 0);
  ebb_free(q);
  ebb_free(q2);
  ebb_free(r);
}

Test(huge, the_smallest_fitting_block_is_chosen) {
  char *a = big(16 * MiB), *b = big(9 * MiB), *c = big(8 * MiB + 64 * KiB);
  ebb_free(a);
  ebb_free(b);
  ebb_free(c);
  cr_assert_eq(ebb_malloc(8 * MiB), c, "of three that fit, the least waste");
  cr_assert_eq(ebb_malloc(8 * MiB), b);
  cr_assert_eq(ebb_malloc(8 * MiB), a, "then a split of the biggest");
  cr_assert_eq(fake_maps, 0);
  cr_assert_eq(huge_cache_bytes(), 8 * MiB);
}

/* ---------------------------------------------------------------- decay, cap, trim */

Test(huge, cached_blocks_are_unmapped_as_each_one_decays) {
  char *a = big(4 * MiB), *b = big(6 * MiB), *c = big(10 * MiB);
  uint64_t t0 = fake_now;
  ebb_free(a);
  fake_now = t0 + 200;
  ebb_free(b);
  fake_now = t0 + 400;
  ebb_free(c);
  cr_assert_eq(huge_cache_bytes(), 20 * MiB);
  struct {
    uint64_t at;
    size_t cached, unmaps;
  } steps[] = {
      {t0 + DECAY - 4, 20 * MiB, 0},   /* nothing before its time */
      {t0 + DECAY, 16 * MiB, 1},       /* a (4 MiB) */
      {t0 + DECAY + 196, 16 * MiB, 1}, /* b not yet */
      {t0 + DECAY + 200, 10 * MiB, 2}, /* b (6 MiB) */
      {t0 + DECAY + 396, 10 * MiB, 2}, /* c not yet */
      {t0 + DECAY + 400, 0, 3},        /* c */
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    fake_now = steps[i].at;
    activity(200); /* ticks: a decay pass (the global one runs at most every 4 ms) */
    cr_assert_eq(huge_cache_bytes(), steps[i].cached, "at t0+%llu: cached %zu, want %zu",
                 (unsigned long long)(steps[i].at - t0), huge_cache_bytes(), steps[i].cached);
    cr_assert_eq(fake_unmaps, steps[i].unmaps, "at t0+%llu: %zu unmaps, want %zu",
                 (unsigned long long)(steps[i].at - t0), fake_unmaps, steps[i].unmaps);
  }
  cr_assert_not(mapped_at(a));
  cr_assert_not(mapped_at(b + 6 * MiB - 1));
  cr_assert_not(mapped_at(c + 5 * MiB));
  cr_assert_eq(stats().dirty, 0);
}

/* The decay pass every large free runs skips the cache's lock while nothing
 * can be due (huge.c, oldest_since): that bound must never hide a due extent,
 * whatever order extents come and go in, an extent cached "to decay at the
 * next pass" (time 0) after a pass included. huge_delete and huge_cache_decay
 * with explicit times; active bytes go down and up with each block. */
Test(huge, a_decay_never_skips_a_cached_extent_that_is_due) {
  size_t got, active0 = huge_active_bytes();
  huge_t *a = huge_new(8 * MiB, 0, true, 0, &got), *b = huge_new(12 * MiB, 0, true, 0, &got), *c = huge_new(16 * MiB, 0, true, 0, &got);
  cr_assert(a && b && c);
  cr_assert_eq(huge_active_bytes(), active0 + 36 * MiB);
  huge_delete(a, true, 1000);
  huge_delete(b, true, 2000);
  cr_assert_eq(huge_active_bytes(), active0 + 16 * MiB);
  cr_assert_eq(huge_cache_decay(999, SIZE_MAX), 0, "nothing freed at or before 999");
  cr_assert_eq(huge_cache_decay(1000, SIZE_MAX), 8 * MiB, "a, freed at 1000");
  cr_assert_eq(huge_cache_decay(1999, SIZE_MAX), 0);
  huge_delete(c, true, 1500); /* older than what is cached: the bound goes down with it */
  cr_assert_eq(huge_cache_decay(1600, SIZE_MAX), 16 * MiB, "c, freed at 1500");
  cr_assert_eq(huge_cache_decay(2000, SIZE_MAX), 12 * MiB, "b, freed at 2000");
  cr_assert_eq(huge_cache_decay(UINT64_MAX - 1, SIZE_MAX), 0, "the cache is empty");
  huge_t *d = huge_new(4 * MiB, 0, true, 0, &got);
  cr_assert_not_null(d);
  huge_delete(d, true, 0); /* as a refused growth or registration caches a block: due at the next pass */
  cr_assert_eq(huge_cache_decay(0, SIZE_MAX), 4 * MiB);
  cr_assert_eq(huge_active_bytes(), active0);
  cr_assert_eq(huge_cache_bytes(), 0);
}

/* A program whose only activity is large blocks (a big-buffer loop) still
 * returns the large blocks it no longer uses on the decay clock. */
Test(huge, large_block_activity_alone_drives_decay) {
  char *a = big(8 * MiB), *b = big(12 * MiB);
  uint64_t t0 = fake_now;
  ebb_free(a);
  ebb_free(b);
  for (int i = 0; i < 200; i++) { /* 1 s of 30 MiB buffers, one every 5 ms: no small block at all */
    fake_now += 5;
    char *p = ebb_malloc(30 * MiB);
    cr_assert_not_null(p);
    p[0] = 1;
    ebb_free(p);
  }
  cr_assert_geq(fake_now, t0 + 2 * DECAY);
  cr_assert_not(mapped_at(a), "the 8 MiB block freed %llu ms ago is still cached (cache %zu MiB)",
                (unsigned long long)(fake_now - t0), huge_cache_bytes() / MiB);
  cr_assert_not(mapped_at(b));
}

Test(huge, a_decay_pass_alone_returns_decayed_blocks) {
  char *a = big(4 * MiB), *b = big(6 * MiB);
  uint64_t t0 = fake_now;
  ebb_free(a);
  fake_now = t0 + 100;
  ebb_free(b);
  fake_now = t0 + DECAY + 50;
  size_t n = arena_purge_all(false);
  cr_assert_geq(n, 4 * MiB);
  cr_assert_eq(huge_cache_bytes(), 6 * MiB);
  cr_assert(mapped_at(b) && !mapped_at(a));
}

Test(huge, with_decay_0_nothing_is_kept) {
  opt.decay_ms = 0;
  char *p = big(8 * MiB);
  size_t mapped = stats().mapped;
  ebb_free(p);
  cr_assert_eq(fake_unmaps, 1);
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(stats().dirty, 0);
  cr_assert_eq(stats().mapped, mapped - 8 * MiB);
  cr_assert_not(mapped_at(p));
}

Test(huge, beyond_the_cap_the_oldest_cached_block_goes_first) {
  opt.dirty_max = 12 * MiB;
  char *a = big(4 * MiB), *b = big(6 * MiB), *c = big(5 * MiB), *d = big(3 * MiB);
  uint64_t t0 = fake_now;
  ebb_free(a);
  fake_now = t0 + 10;
  ebb_free(b);
  cr_assert_eq(fake_unmaps, 0, "10 MiB: under the cap");
  fake_now = t0 + 20;
  ebb_free(c); /* 15 MiB: 3 over */
  cr_assert_eq(fake_unmaps, 1, "the free that crossed the cap unmapped one block");
  cr_assert_not(mapped_at(a), "the oldest");
  cr_assert(mapped_at(b) && mapped_at(c));
  cr_assert_eq(huge_cache_bytes(), 11 * MiB);
  cr_assert_leq(stats().dirty, 12 * MiB);
  fake_now = t0 + 30;
  ebb_free(d); /* 14 MiB: 2 over */
  cr_assert_eq(fake_unmaps, 2);
  cr_assert_not(mapped_at(b), "then the next oldest");
  cr_assert(mapped_at(c) && mapped_at(d));
  cr_assert_eq(huge_cache_bytes(), 8 * MiB);
  cr_assert_eq(ebb_malloc(5 * MiB), c, "what stays is still reused");
}

/* 1024: a program that frees 200 blocks of 3 MB together and builds them
 * again found 64 cached (the bound was 64), so mapped and faulted in the other
 * 136 every time (a probe: 2.0 M faults over 20 rounds where mimalloc took
 * 152 k, the first round's). The bound only keeps the cache's scans short:
 * bytes are bounded by the decay and EBB_DIRTY_MAX. */
Test(huge, the_cache_keeps_at_most_1024_extents) {
  cr_assert_eq(HUGE_CACHE_MAX, 1024);
  opt.decay_ms = 1000000; /* a clock tick per free, and none of them decays */
  static char *p[HUGE_CACHE_MAX + 6];
  size_t n = sizeof p / sizeof p[0];
  for (size_t i = 0; i < n; i++) p[i] = ebb_malloc(3 * MiB);
  for (size_t i = 0; i < n; i++) {
    fake_now++;
    ebb_free(p[i]);
  }
  cr_assert_eq(fake_unmaps, 6);
  cr_assert_eq(huge_cache_bytes(), HUGE_CACHE_MAX * 3 * MiB);
  for (size_t i = 0; i < 6; i++) cr_assert_not(mapped_at(p[i]), "block %zu, among the oldest, went", i);
  for (size_t i = 6; i < n; i++) cr_assert(mapped_at(p[i]));
}

/* The decay and ebb_trim unmap cached extents with the lock let go, 16 at a
 * time: a munmap of resident MiBs takes a while, and a pass over 800 extents
 * of 3 MB held another thread's large malloc for 200 ms (found by a probe). */
static size_t unmaps_locked, unmaps_seen;
static void note_unmap(void *p, size_t size) {
  (void)p;
  (void)size;
  unmaps_seen++;
  unmaps_locked += huge_lock_held();
}

static void unmap_all_cached(bool decay) {
  static char *p[40];
  for (size_t i = 0; i < 40; i++) p[i] = ebb_malloc(3 * MiB);
  for (size_t i = 0; i < 40; i++) ebb_free(p[i]);
  cr_assert_eq(huge_cache_bytes(), 40 * 3 * MiB);
  unmaps_locked = unmaps_seen = 0;
  fake_on_unmap = note_unmap;
  if (decay)
    huge_cache_decay(UINT64_MAX, SIZE_MAX);
  else
    ebb_trim();
  fake_on_unmap = NULL;
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_geq(unmaps_seen, 40);
  cr_assert_eq(unmaps_locked, 0, "%zu of %zu unmaps with the lock held", unmaps_locked, unmaps_seen);
}
Test(huge, the_decay_unmaps_with_the_lock_let_go) { unmap_all_cached(true); }
Test(huge, trim_unmaps_with_the_lock_let_go) { unmap_all_cached(false); }

/* A large free's own decay unmaps at most HUGE_FREE_DECAY_MAX (32 MiB, at
 * least an extent) of what is due; the rest stays due for the next one: the
 * free after 800 blocks of 3 MB came due unmapped them all, 200 ms in one
 * call (found by a probe). */
Test(huge, a_large_frees_decay_unmaps_32_mib_at_most) {
  static char *p[40];
  for (size_t i = 0; i < 40; i++) p[i] = ebb_malloc(3 * MiB);
  char *last = ebb_malloc(5 * MiB);
  for (size_t i = 0; i < 40; i++) ebb_free(p[i]);
  cr_assert_eq(huge_cache_bytes(), 40 * 3 * MiB);
  fake_now += DECAY + 1;
  fake_reset();
  ebb_free(last); /* cached, not due; the 40 are */
  cr_assert_eq(fake_unmaps, 11, "32 MiB is 11 extents of 3 MiB");
  cr_assert_eq(huge_cache_bytes(), 29 * 3 * MiB + 5 * MiB);
  cr_assert_eq(huge_cache_decay(fake_now - DECAY, SIZE_MAX), 29 * 3 * MiB, "the rest is still due");
}

/* calloc of a cached extent clears it through os_zero (which writes only the
 * resident pages; a memset of the whole block faulted in what its previous
 * user never wrote), and only the part that came from the cache: a fresh
 * mapping, and a cached block's growth, are the kernel's zeroes. */
Test(huge, calloc_clears_a_reused_block_with_os_zero_and_a_fresh_one_not_at_all) {
  char *p = big(8 * MiB);
  ebb_free(p);
  fake_reset();
  char *q = ebb_calloc(1, 8 * MiB);
  cr_assert_eq(q, p, "the cached extent is reused");
  cr_assert_eq(fake_zeroes, 1);
  for (size_t i = 0; i < 8 * MiB; i += 4096) cr_assert_eq(q[i], 0, "byte %zu", i);
  ebb_free(q);
  ebb_trim();
  fake_reset();
  char *r = ebb_calloc(1, 8 * MiB);
  cr_assert_not_null(r);
  cr_assert_eq(fake_zeroes, 0, "a fresh mapping needs no clearing");
  ebb_free(r);
}

Test(huge, trim_returns_every_cached_block_and_its_bytes) {
  char *a = big(4 * MiB), *b = big(6 * MiB), *c = big(10 * MiB);
  struct ebb_stats s0 = stats();
  ebb_free(a);
  ebb_free(b);
  ebb_free(c);
  struct ebb_stats s1 = stats();
  cr_assert_eq(s1.dirty, s0.dirty + 20 * MiB);
  cr_assert_eq(s1.mapped, s0.mapped);
  size_t n = ebb_trim();
  cr_assert_geq(n, 20 * MiB, "trim counts the cached blocks' bytes (%zu)", n);
  struct ebb_stats s2 = stats();
  cr_assert_eq(s2.dirty, 0);
  cr_assert_eq(s2.mapped, s0.mapped - 20 * MiB);
  cr_assert_geq(s2.purged, s1.purged + 20 * MiB);
  cr_assert_eq(fake_unmaps, 3);
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_not(mapped_at(a) || mapped_at(b) || mapped_at(c));
}

/* ---------------------------------------------------------------- realloc */

Test(huge, realloc_shrink_gives_whole_regions_to_the_cache) {
  char *p = big(16 * MiB);
  fill(p, 5 * MiB, 7);
  size_t active = huge_active_bytes();
  size_t dirty = stats().dirty;
  char *q = ebb_realloc(p, 5 * MiB);
  cr_assert_eq(q, p, "a shrink stays in place");
  cr_assert_eq(check(q, 5 * MiB, 7), SIZE_MAX, "contents kept");
  cr_assert_eq(huge_cache_bytes(), 8 * MiB, "regions 3 and 4 (beyond region(5 MiB) = 8 MiB) are cached");
  cr_assert_eq(huge_active_bytes(), active - 8 * MiB);
  cr_assert_eq(huge_slack_bytes(), 3 * MiB, "the rest of the kept span beyond the size is its slack");
  cr_assert_eq(stats().dirty, dirty + 11 * MiB);
  cr_assert_eq(fake_unmaps + fake_purges, 0);
  char *r = ebb_malloc(8 * MiB);
  cr_assert_eq(r, p + 8 * MiB, "the cached tail serves the next request");
  cr_assert_eq(fake_maps, 0);
  cr_assert_eq((unsigned char)r[8 * MiB - 1], 0x5a, "resident");
}

/* The tail a shrink leaves waits for the decay as any slack: a shrink and a
 * regrowth (a buffer cut to fit, then filled again) cost no system call and
 * no fault (purged at once: 8 -> 4.5 -> 8 MiB faulted 896 times a cycle,
 * found by a probe). */
Test(huge, realloc_shrink_within_a_region_keeps_the_span) {
  char *p = big(8 * MiB);
  uint64_t t0 = fake_now;
  cr_assert_eq(ebb_realloc(p, 5 * MiB), p);
  cr_assert_eq(huge_cache_bytes(), 0, "less than a whole region beyond: nothing cached");
  cr_assert_eq(huge_slack_bytes(), 3 * MiB);
  cr_assert_eq(fake_purges, 0);
  cr_assert_eq(ebb_realloc(p, 8 * MiB), p, "growing back within the span is free");
  cr_assert_eq(fake_maps + fake_resizes + fake_moves + fake_purges, 0);
  cr_assert_eq((unsigned char)p[8 * MiB - 1], 0x5a, "and finds its old pages");
  cr_assert_eq(huge_slack_bytes(), 0);
  cr_assert_eq(ebb_realloc(p, 5 * MiB), p);
  fake_now = t0 + DECAY;
  activity(200);
  cr_assert(fake_was_purged(p + 5 * MiB, 3 * MiB), "the tail goes back at the decay");
  cr_assert_eq(fake_purged_bytes, 3 * MiB);
  ebb_free(p);
}

/* A tail that went back is not purged, nor counted in `purged`, again by
 * later shrinks (found by a probe: each 8 KiB shrink purged and counted the
 * same 3 MiB again); only what the shrink itself gives up is. */
/* A 17 MiB block in a cached 20 MiB extent, its 3 MiB slack gone back (ebb_trim). */
static char *block_whose_slack_went_back(void) {
  char *p = big(20 * MiB);
  ebb_free(p);
  char *q = ebb_malloc(17 * MiB); /* 20 <= 17 * 1.25: taken whole, 3 MiB of slack */
  cr_assert_eq(q, p);
  ebb_trim();
  cr_assert(fake_was_purged(q + 17 * MiB, 3 * MiB));
  fake_reset();
  return q;
}

Test(huge, a_shrink_purges_no_byte_twice) {
  char *q = block_whose_slack_went_back();
  size_t purged = stats().purged;
  cr_assert_eq(ebb_realloc(q, 17 * MiB - 128 * KiB), q);
  cr_assert(fake_was_purged(q + 17 * MiB - 128 * KiB, 128 * KiB), "what the shrink gave up went back");
  cr_assert_eq(fake_purged_bytes, 128 * KiB, "and nothing else");
  cr_assert_eq(stats().purged, purged + 128 * KiB);
  cr_assert_eq(huge_slack_bytes(), 0, "nothing resident is listed");
  ebb_free(q);
}

/* A shrink that gives whole regions up caches only what may be resident: the
 * part of the span whose slack already went back is unmapped (the cache would
 * count it as dirty; found by a probe: 4.19 MB dirty, none of it resident). */
Test(huge, a_shrink_caches_no_region_that_went_back) {
  char *q = block_whose_slack_went_back(); /* [17, 20) MiB went back */
  size_t purged = stats().purged;
  cr_assert_eq(ebb_realloc(q, 5 * MiB), q);
  cr_assert_eq(huge_cache_bytes(), 9 * MiB, "[8, 17) MiB is cached");
  cr_assert_eq(huge_slack_bytes(), 3 * MiB, "[5, 8) MiB is the block's slack");
  cr_assert_eq(stats().dirty, 12 * MiB, "and nothing else counts as dirty");
  cr_assert(mapped_at(q + 16 * MiB) && !mapped_at(q + 17 * MiB), "[17, 20) MiB is unmapped");
  cr_assert_eq(fake_purges, 0, "nothing resident was purged");
  cr_assert_eq(stats().purged, purged, "and nothing counted twice");
  ebb_free(q);
}

/* A shrink's tail is dirty at once, so the cap applies at once (found by a
 * probe: 20 blocks of 7 MiB shrunk to 2.5 MiB under EBB_DIRTY_MAX=0 kept 90
 * MB dirty until an unrelated malloc). */
Test(huge, a_shrink_over_the_cap_goes_back_at_once) {
  opt.dirty_max = 1 * MiB;
  char *p = big(7 * MiB);
  cr_assert_eq(ebb_realloc(p, 5 * MiB / 2), p);
  cr_assert_leq(stats().dirty, 1 * MiB, "dirty %zu KiB over a 1 MiB cap", stats().dirty / KiB);
  cr_assert(fake_was_purged(p + 5 * MiB / 2 + 64 * KiB, 4 * MiB), "the tail went back");
  ebb_free(p);
}

/* The same at the free: a block whose slack went back is cached without it. */
Test(huge, a_free_caches_no_tail_that_went_back) {
  char *q = block_whose_slack_went_back(), *p = q;
  size_t purged = stats().purged;
  ebb_free(q);
  cr_assert_eq(huge_cache_bytes(), 17 * MiB, "the block's own 17 MiB is cached");
  cr_assert_eq(stats().dirty, 17 * MiB);
  cr_assert(!mapped_at(q + 17 * MiB), "the tail that went back is unmapped");
  cr_assert_eq(stats().purged, purged, "and not counted twice");
  char *r = ebb_malloc(17 * MiB);
  cr_assert_eq(r, p, "the cached part serves the same size again");
  ebb_free(r);
}

/* active and allocated count a large block's size whatever happens to its
 * slack (found by a probe: they rose by the slack when the decay purged it). */
Test(huge, a_blocks_size_is_what_counts_active_before_and_after_its_slack_goes) {
  char *p = big(11 * MiB);
  ebb_free(p);
  struct ebb_stats s0 = stats();
  char *q = ebb_malloc(7 * MiB);
  cr_assert_eq(q, p);
  struct ebb_stats s1 = stats();
  cr_assert_eq(s1.active, s0.active + 7 * MiB);
  cr_assert_eq(s1.allocated, s0.allocated + 7 * MiB);
  cr_assert_eq(s1.mapped, s0.mapped);
  ebb_trim();
  struct ebb_stats s2 = stats();
  cr_assert_eq(s2.active, s1.active, "active moved from %zu to %zu", s1.active, s2.active);
  cr_assert_eq(s2.allocated, s1.allocated);
  cr_assert_eq(s2.dirty, 0);
  cr_assert_eq(s2.mapped, s1.mapped);
  cr_assert_eq(ebb_realloc(q, 9 * MiB), q);
  cr_assert_eq(stats().active, s0.active + 9 * MiB);
  ebb_free(q);
  cr_assert_eq(stats().active, s0.active);
}

Test(huge, realloc_shrink_with_decay_0_unmaps_the_tail) {
  opt.decay_ms = 0;
  char *p = big(16 * MiB);
  cr_assert_eq(ebb_realloc(p, 5 * MiB), p);
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(fake_unmaps, 1);
  cr_assert_not(mapped_at(p + 8 * MiB));
}

Test(huge, realloc_grows_into_the_cached_extent_right_after_it) {
  char *p = big(16 * MiB);
  ebb_free(p);
  char *q = ebb_malloc(5 * MiB); /* split: [p, p+8M) a block, [p+8M, p+16M) cached */
  cr_assert_eq(q, p);
  fill(q, 5 * MiB, 3);
  size_t active = huge_active_bytes();
  fake_reset();
  char *r = ebb_realloc(q, 12 * MiB);
  cr_assert_eq(r, p, "grown in place");
  cr_assert_eq(fake_maps + fake_resizes + fake_moves + fake_unmaps, 0, "no system call at all");
  cr_assert_eq(check(r, 5 * MiB, 3), SIZE_MAX, "contents kept");
  cr_assert_eq(huge_active_bytes(), active + 4 * MiB, "it took one region");
  cr_assert_eq(huge_cache_bytes(), 4 * MiB, "the last region stays cached");
  cr_assert_eq((unsigned char)r[12 * MiB - 1], 0x5a, "and the growth is resident memory");
  char *s = ebb_realloc(r, 16 * MiB);
  cr_assert_eq(s, p, "then the last region");
  cr_assert_eq(fake_maps + fake_resizes + fake_moves, 0);
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(check(s, 5 * MiB, 3), SIZE_MAX);
  memset(s, 0, 16 * MiB);
}

/* Cached space of the same mapping that does not start right at the block's
 * end is not the block's to grow into. */
Test(huge, realloc_grows_only_into_cached_space_right_after_it) {
  char *p = big(20 * MiB);
  ebb_free(p);
  char *a = ebb_malloc(3 * MiB); /* [p, p+4M) */
  char *b = ebb_malloc(5 * MiB); /* [p+4M, p+12M); [p+12M, p+20M) stays cached */
  cr_assert_eq(a, p);
  cr_assert_eq(b, p + 4 * MiB);
  cr_assert_eq(huge_cache_bytes(), 8 * MiB);
  fill(a, 3 * MiB, 1);
  fill(b, 5 * MiB, 2);
  char *a2 = ebb_realloc(a, 9 * MiB);
  cr_assert_not_null(a2);
  cr_assert(a2 + 9 * MiB <= b || a2 >= b + 5 * MiB, "a grew over its neighbour: %p + 9 MiB, b %p", a2, b);
  cr_assert_eq(check(a2, 3 * MiB, 1), SIZE_MAX);
  memset(a2, 0x77, 9 * MiB);
  cr_assert_eq(check(b, 5 * MiB, 2), SIZE_MAX, "the neighbour is intact");
  cr_assert_eq(huge_cache_bytes(), 8 * MiB, "the cached extent is still cached");
}

Test(huge, realloc_growth_past_the_cached_extent_moves_without_losing_it) {
  char *p = big(16 * MiB);
  ebb_free(p);
  char *q = ebb_malloc(5 * MiB);
  fill(q, 5 * MiB, 9);
  fake_reset();
  char *r = ebb_realloc(q, 40 * MiB); /* more than the block and the cached 8 MiB */
  cr_assert_not_null(r);
  cr_assert_eq(check(r, 5 * MiB, 9), SIZE_MAX, "contents kept");
  memset(r, 1, 40 * MiB);
  cr_assert_eq(huge_cache_bytes(), 8 * MiB, "the cached extent is still there");
  cr_assert(mapped_at(p + 8 * MiB));
  char *s = ebb_malloc(8 * MiB);
  cr_assert_eq(s, p + 8 * MiB);
  cr_assert_eq((unsigned char)s[0], 0x5a);
}

/* A block grown by realloc (in place, into the cache after it, or moved by
 * the kernel: the same descriptor) is a new peak of active memory: in
 * ebb_stats, and for the auto cap's recent peak (which then lets its teardown
 * wait for a rebuild). */
Test(huge, realloc_growth_is_a_peak) {
  char *p = big(4 * MiB);
  char *q = ebb_realloc(p, 48 * MiB);
  cr_assert_not_null(q);
  cr_assert_gt(fake_resizes + fake_moves, 0, "grown by the kernel (huge_resize), not copied");
  ebb_free(q);
  cr_assert_geq(stats().peak_active, 48 * MiB, "peak_active %zu", stats().peak_active);
}

/* ---------------------------------------------------------------- the kernel refusing */

Test(huge, a_refused_mapping_is_enomem_and_leaks_nothing) {
  struct ebb_stats s0 = stats();
  size_t cached = huge_cache_bytes(), active = huge_active_bytes();
  /* more failures than a descriptor slab holds: a descriptor lost per failure would show below */
  for (int i = 0; i < 1500; i++) {
    fake_fail_maps = 1 << 20;
    errno = 0;
    void *p = ebb_malloc(8 * MiB);
    cr_assert_null(p, "attempt %d", i);
    cr_assert_eq(errno, ENOMEM);
  }
  cr_assert_geq(fake_refused, 1500, "the kernel was asked");
  cr_assert_eq(fake_maps, 0);
  struct ebb_stats s1 = stats();
  cr_assert_eq(s1.mapped, s0.mapped);
  cr_assert_eq(s1.active, s0.active);
  cr_assert_eq(s1.dirty, s0.dirty);
  cr_assert_eq(huge_cache_bytes(), cached);
  cr_assert_eq(huge_active_bytes(), active);
  fake_fail_maps = 0;
  size_t leaves0 = leaves();
  char *p = ebb_malloc(8 * MiB);
  cr_assert_not_null(p);
  cr_assert_eq(fake_maps, 1 + leaves() - leaves0, "the block's mapping only: no descriptor slab was lost");
  memset(p, 1, 8 * MiB);
  ebb_free(p);
}

Test(huge, a_usable_cached_block_needs_no_mapping) {
  char *p = big(8 * MiB);
  ebb_free(p);
  fake_fail_maps = 1 << 20;
  char *q = ebb_malloc(7 * MiB);
  cr_assert_eq(q, p, "served from the cache");
  cr_assert_eq(fake_refused, 0, "the kernel was not even asked");
  ebb_free(q);
  char *r = ebb_calloc(1, 8 * MiB);
  cr_assert_eq(r, p);
  cr_assert_eq(fake_refused, 0);
}

Test(huge, a_refused_in_place_growth_moves_the_block_instead) {
  char *p = big(12 * MiB);
  cr_assert_eq(ebb_realloc(p, 7 * MiB + 512 * KiB), p);
  ebb_trim(); /* a hole after [p, p+8M) */
  ebb_free(p);
  fake_reset();
  fake_fail_resizes = 1;
  char *q = ebb_malloc(8 * MiB + 512 * KiB);
  cr_assert_not_null(q);
  cr_assert_eq(fake_refused, 1, "the growth in place was tried");
  cr_assert_eq(fake_moves, 1, "then the move");
  cr_assert_neq(q, p);
  cr_assert_eq(huge_cache_bytes(), 0, "the cached block became the new one");
  cr_assert_not(mapped_at(p));
  cr_assert_eq((unsigned char)q[7 * MiB], 0x5a, "with its pages");
  memset(q, 1, 8 * MiB + 512 * KiB);
}

Test(huge, a_refused_realloc_growth_keeps_the_block) {
  char *p = big(8 * MiB);
  fill(p, 8 * MiB, 5);
  struct ebb_stats s0 = stats();
  fake_fail_maps = 1 << 20;
  fake_fail_resizes = 1 << 20;
  errno = 0;
  cr_assert_null(ebb_realloc(p, 20 * MiB));
  cr_assert_eq(errno, ENOMEM);
  cr_assert_gt(fake_refused, 0);
  cr_assert(ebb_owns(p), "the block is still live");
  cr_assert_eq(ebb_malloc_usable_size(p), 8 * MiB);
  cr_assert_eq(check(p, 8 * MiB, 5), SIZE_MAX, "and intact");
  struct ebb_stats s1 = stats();
  cr_assert_eq(s1.mapped, s0.mapped);
  cr_assert_eq(s1.active, s0.active);
  fake_fail_maps = fake_fail_resizes = 0;
  char *q = ebb_realloc(p, 20 * MiB);
  cr_assert_not_null(q);
  cr_assert_eq(check(q, 8 * MiB, 5), SIZE_MAX);
  ebb_free(q);
}

/* A block moved by the kernel (mremap) to an address whose registry leaf
 * cannot be mapped: the leaf is made before the move, so the refusal leaves
 * the block where it was; made after (as before), the moved block could be
 * neither registered nor moved back, and realloc died with "registry out of
 * memory". Here realloc copies instead. */
Test(huge, a_move_to_where_the_registry_has_no_room_leaves_the_block_in_place) {
  char *p = big(8 * MiB);
  fill(p, 8 * MiB, 7);
  size_t leaves0 = leaves();
  fake_fail_resizes = 1; /* no growth in place: a move */
  fake_far_maps = 1;     /* to address space that no registry leaf covers */
  fake_fail_leaves = 1;  /* with no memory for its leaf */
  char *q = ebb_realloc(p, 20 * MiB);
  cr_assert_not_null(q);
  cr_assert_eq(fake_refused, 2, "the growth in place and the leaf were refused");
  cr_assert_eq(fake_moves, 0, "the block never moved");
  cr_assert_eq(leaves(), leaves0);
  cr_assert_eq(check(q, 8 * MiB, 7), SIZE_MAX, "realloc copied it instead");
  cr_assert(ebb_owns(q));
  cr_assert_not(ebb_owns(p));
  memset(q, 1, 20 * MiB);
  ebb_free(q);
}

/* The same for a cached block too small, which a malloc moves to grow it:
 * refused before the move, it stays cached where it was. */
Test(huge, a_cached_block_whose_move_finds_no_registry_room_stays_cached) {
  char *p = big(6 * MiB);
  void *wall = block_after(p, 6 * MiB);
  ebb_free(p);
  fake_far_maps = 1;
  fake_fail_leaves = 1;
  char *q = ebb_malloc(12 * MiB);
  cr_assert_not_null(q);
  cr_assert_eq(fake_refused, 1, "the leaf was refused");
  cr_assert_eq(fake_moves, 0);
  cr_assert_eq(huge_cache_bytes(), 6 * MiB, "the block stayed in the cache");
  cr_assert(mapped_at(p));
  cr_assert_eq((unsigned char)p[6 * MiB - 1], 0x5a);
  memset(q, 2, 12 * MiB);
  ebb_free(q);
  munmap(wall, 4096);
}

/* ---------------------------------------------------------------- first-class arenas */

#define SMALL_N 3000
static void *small[SMALL_N];

/* A request's worth of blocks in arena a: 3000 small ones, 450 KB, 8 MiB. */
static void request(ebb_arena_t *a, void **mid, void **large) {
  for (int i = 0; i < SMALL_N; i++) {
    small[i] = ebb_arena_malloc(a, 16 + (size_t)(i * 37 % 497));
    cr_assert_not_null(small[i]);
    memset(small[i], i, 16);
  }
  *mid = ebb_arena_malloc(a, 450 * KiB);
  memset(*mid, 1, 450 * KiB);
  *large = ebb_arena_malloc(a, 8 * MiB);
  memset(*large, 2, 8 * MiB);
}

Test(huge, arena_destroy_leaves_its_memory_warm_for_the_next_arena) {
  ebb_arena_t *a = ebb_arena_create();
  void *mid, *large;
  request(a, &mid, &large);
  chunk_t *chunk = chunk_of(small[0]);
  struct ebb_stats s0 = stats();
  ebb_arena_destroy(a);
  struct ebb_stats s1 = stats();
  cr_assert_eq(huge_cache_bytes(), 8 * MiB, "the large block is cached");
  cr_assert_gt(chunk_pool_dirty(), 0, "the chunks are pooled, resident");
  cr_assert_geq(s1.dirty, s0.dirty + 8 * MiB + 450 * KiB, "all of it counts as dirty");
  cr_assert_eq(s1.mapped, s0.mapped, "nothing went back yet");
  cr_assert_eq(fake_unmaps, 0);
  fake_reset();
  ebb_arena_t *b = ebb_arena_create();
  void *mid2, *large2;
  request(b, &mid2, &large2);
  cr_assert_eq(fake_maps, 0, "the next arena's request maps nothing");
  cr_assert_eq(chunk_of(small[0]), chunk, "it took the destroyed arena's chunk");
  cr_assert_eq(large2, large, "and its large block");
  cr_assert_eq(huge_cache_bytes(), 0);
  ebb_arena_destroy(b);
}

Test(huge, pooled_chunks_are_taken_newest_first) {
  ebb_arena_t *a = ebb_arena_create(), *b = ebb_arena_create();
  void *pa = ebb_arena_malloc(a, 1000), *pb = ebb_arena_malloc(b, 1000);
  cr_assert_neq(chunk_of(pa), chunk_of(pb));
  ebb_arena_destroy(a);
  fake_now += 10;
  ebb_arena_destroy(b);
  fake_reset();
  ebb_arena_t *c = ebb_arena_create();
  void *pc = ebb_arena_malloc(c, 1000);
  cr_assert_eq(chunk_of(pc), chunk_of(pb), "the last destroyed arena's chunk comes first");
  ebb_arena_t *d = ebb_arena_create();
  void *pd = ebb_arena_malloc(d, 1000);
  cr_assert_eq(chunk_of(pd), chunk_of(pa));
  cr_assert_eq(fake_maps, 0, "no chunk mapped, no arena either");
}

static void *thread_block;
static void *new_thread(void *arg) {
  (void)arg;
  thread_block = ebb_malloc(1000);
  memset(thread_block, 3, 1000);
  return NULL;
}

Test(huge, a_new_threads_arena_takes_pooled_chunks) {
  ebb_arena_t *a = ebb_arena_create();
  void *p = ebb_arena_malloc(a, 1000);
  memset(p, 1, 1000);
  chunk_t *chunk = chunk_of(p);
  ebb_arena_destroy(a);
  fake_reset();
  pthread_t t;
  pthread_create(&t, NULL, new_thread, NULL);
  pthread_join(t, NULL);
  cr_assert_eq(chunk_of(thread_block), chunk, "the thread's first chunk came from the pool");
  cr_assert_eq(fake_maps, 0);
  cr_assert(ebb_owns(thread_block));
  ebb_free(thread_block);
}

Test(huge, arena_reset_frees_everything_and_keeps_it_warm) {
  ebb_arena_t *a = ebb_arena_create();
  void *mid, *large;
  request(a, &mid, &large);
  chunk_t *chunk = chunk_of(small[0]);
  size_t active = stats().active;
  ebb_arena_reset(a);
  struct ebb_stats s = stats();
  cr_assert_leq(s.active + 8 * MiB + 450 * KiB, active, "its blocks are free");
  cr_assert_eq(huge_cache_bytes(), 8 * MiB);
  cr_assert_eq(fake_unmaps + fake_purges, 0, "and its memory stays resident");
  cr_assert_not(ebb_owns(small[0]));
  cr_assert_not(ebb_owns(large));
  for (int round = 0; round < 3; round++) {
    fake_reset();
    void *mid2, *large2;
    request(a, &mid2, &large2);
    cr_assert_eq(fake_maps, 0, "round %d: the request maps nothing", round);
    cr_assert_eq(chunk_of(small[0]), chunk);
    cr_assert_eq(large2, large);
    ebb_arena_reset(a);
  }
  ebb_arena_destroy(a);
}

Test(huge, arena_destroy_with_decay_0_keeps_nothing) {
  opt.decay_ms = 0;
  ebb_arena_t *a = ebb_arena_create();
  void *mid, *large;
  request(a, &mid, &large);
  ebb_arena_destroy(a);
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(chunk_pool_dirty(), 0);
  cr_assert_eq(stats().dirty, 0);
  cr_assert_not(mapped_at(large));
}

Test(huge, arena_aligned_alloc) {
  ebb_arena_t *a = ebb_arena_create();
  errno = 0;
  cr_assert_null(ebb_arena_aligned_alloc(a, 3 * 4096, 100));
  cr_assert_eq(errno, EINVAL);
  cr_assert_null(ebb_arena_aligned_alloc(a, 0, 100));
  char *p = ebb_arena_aligned_alloc(a, 8 * MiB, 3 * MiB);
  cr_assert_not_null(p);
  cr_assert_eq((uintptr_t)p % (8 * MiB), 0);
  memset(p, 1, 3 * MiB);
  char *q = ebb_arena_aligned_alloc(a, 4096, 100 * KiB);
  cr_assert_eq((uintptr_t)q % 4096, 0);
  ebb_arena_destroy(a);
  cr_assert_eq(huge_cache_bytes(), 3 * MiB, "the arena's aligned large block went to the cache");
}

/* ---------------------------------------------------------------- a seeded mix of every path */

static uint64_t mix_next(uint64_t *s) {
  uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

#define MIX_SLOTS 8
#define MIX_RANGES 8192
static struct {
  char *p;
  size_t n;
} mix_seen[MIX_RANGES];
static size_t mix_nseen;

static void mix_note(char *p, size_t n) {
  if (mix_nseen < MIX_RANGES) mix_seen[mix_nseen++].p = p, mix_seen[mix_nseen - 1].n = n;
}

/* 8 bytes at the start, the end and every 1 MiB of a block: its tag. */
static void mix_fill(char *p, size_t n, uint64_t tag) {
  for (size_t off = 0; off + 8 <= n; off += MiB) memcpy(p + off, &tag, 8);
  memcpy(p + n - 8, &tag, 8);
}
static void mix_check(const char *p, size_t n, uint64_t tag, const char *what) {
  for (size_t off = 0; off + 8 <= n; off += MiB) {
    uint64_t v;
    memcpy(&v, p + off, 8);
    cr_assert_eq(v, tag, "%s: block %p (%zu B) overwritten at %zu", what, (void *)p, n, off);
  }
}

/* malloc, calloc, aligned_alloc, realloc up and down, free, decay passes and
 * cap trims in a seeded mix: contents stay, no two blocks overlap, and once
 * all is freed and trimmed nothing is left mapped, active or cached. */
Test(huge, a_seeded_mix_leaves_nothing_behind) {
  uint64_t seed = 2024;
  struct {
    char *p;
    size_t n;
    uint64_t tag;
  } s[MIX_SLOTS] = {{0}};
  uint64_t tag = 0;
  struct ebb_stats s0 = stats();
  for (int op = 0; op < 1500; op++) {
    unsigned i = (unsigned)(mix_next(&seed) % MIX_SLOTS), kind = (unsigned)(mix_next(&seed) % 8);
    size_t n = 2 * MiB + 1 + mix_next(&seed) % (20 * MiB);
    if (s[i].p) mix_check(s[i].p, s[i].n, s[i].tag, "before an operation");
    if (s[i].p && kind < 3) { /* realloc */
      char *q = ebb_realloc(s[i].p, n);
      cr_assert_not_null(q);
      size_t keep = n < s[i].n ? n : s[i].n;
      uint64_t v;
      memcpy(&v, q, 8);
      cr_assert_eq(v, s[i].tag, "realloc %zu -> %zu lost the start", s[i].n, n);
      if (keep >= MiB + 8) {
        memcpy(&v, q + MiB, 8);
        cr_assert_eq(v, s[i].tag, "realloc %zu -> %zu lost 1 MiB", s[i].n, n);
      }
      s[i].p = q;
    } else {
      ebb_free(s[i].p);
      size_t align = (size_t)1 << (22 + mix_next(&seed) % 3);
      s[i].p = kind == 3 ? ebb_calloc(1, n) : kind == 4 ? ebb_aligned_alloc(align, n) : ebb_malloc(n);
      cr_assert_not_null(s[i].p);
      if (kind == 3)
        for (size_t off = 0; off < n; off += 256 * KiB) cr_assert_eq(s[i].p[off], 0, "calloc: byte %zu", off);
      if (kind == 4) cr_assert_eq((uintptr_t)s[i].p % align, 0);
    }
    s[i].n = n;
    s[i].tag = ++tag;
    mix_fill(s[i].p, n, tag);
    mix_note(s[i].p, n);
    for (unsigned k = 0; k < MIX_SLOTS; k++) /* no overlap */
      if (k != i && s[k].p)
        cr_assert(s[k].p + s[k].n <= s[i].p || s[i].p + n <= s[k].p, "op %d: blocks %u and %u overlap", op, k,
                  i);
    fake_now += mix_next(&seed) % 8;
    if (op % 50 == 0) activity(100); /* decay passes */
    if (op % 500 == 250)
      opt.dirty_max = 16 * MiB, ebb_free(ebb_malloc(3 * MiB)), opt.dirty_max = (int64_t)1 << 40;
  }
  for (unsigned k = 0; k < MIX_SLOTS; k++) {
    mix_check(s[k].p, s[k].n, s[k].tag, "at the end");
    ebb_free(s[k].p);
  }
  ebb_trim();
  struct ebb_stats s1 = stats();
  cr_assert_eq(huge_active_bytes(), 0, "active large bytes left: %zu", huge_active_bytes());
  cr_assert_eq(huge_cache_bytes(), 0);
  cr_assert_eq(s1.dirty, 0);
  cr_assert_eq(s1.active, s0.active);
  cr_assert_eq(s1.mapped, s0.mapped, "mapped %zu -> %zu", s0.mapped, s1.mapped);
  for (size_t r = 0; r < mix_nseen; r++) {
    cr_assert_not(mapped_at(mix_seen[r].p), "a block's range is still mapped: %p", (void *)mix_seen[r].p);
    cr_assert_not(mapped_at(mix_seen[r].p + mix_seen[r].n - 1), "still mapped: the end of %p + %zu",
                  (void *)mix_seen[r].p, mix_seen[r].n);
  }
}
