/* Decay, driven by the fake clock: the pure policy, then the whole allocator
 * (ebb_* names, no override) returning memory on time, at the cap, from
 * abandoned arenas, and from the background thread with no activity at all. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdio.h>
#include <stdio.h>
#include <unistd.h>
#include "arena.h"
#include "thread.h"
#include "ebb.h"
#include "fake_os.h"

Test(decay_policy, expiry_is_exactly_the_decay_time) {
  cr_assert_not(decay_expired(1000, 1499, 500));
  cr_assert(decay_expired(1000, 1500, 500));
  cr_assert(decay_expired(1000, 1000, 0));
  cr_assert_not(decay_expired(2000, 1000, 0), "a stamp from the future never expires");
  cr_assert_eq(decay_look_interval(250), 62);
  cr_assert_eq(decay_look_interval(0), 8, "a page is never looked at more often than every 8 ms");
}

Test(decay_policy, dirty_limit_in_bytes_or_percent_with_a_floor) {
  cr_assert_eq(decay_dirty_limit(64 << 20, 0, 0), 64 << 20);
  cr_assert_eq(decay_dirty_limit(OPT_PCT(50), (size_t)1 << 30, 0), (size_t)512 << 20);
  cr_assert_eq(decay_dirty_limit(OPT_PCT(50), 1 << 20, 0), DECAY_PCT_FLOOR);
  cr_assert_eq(decay_dirty_limit(0, 1 << 30, 0), 0, "0 bytes keeps nothing");
  cr_assert_eq(decay_dirty_limit(OPT_PCT(0), (size_t)1 << 30, 0), DECAY_PCT_FLOOR,
               "0% keeps the 4 MiB floor");
  cr_assert_eq(decay_dirty_limit(OPT_PCT(200), (size_t)1 << 30, 0), (size_t)2 << 30);
  cr_assert_eq(decay_cap_batch(64 << 20, 64 << 20), 8 << 20, "a fixed cap purges an eighth of itself more");
}

Test(decay_policy, auto_limit_is_the_room_plus_the_fall_from_the_recent_peak) {
  const int64_t autocap = OPT_DIRTY_AUTO(256 << 20);
  cr_assert_eq(decay_dirty_limit(autocap, 100 << 20, 100 << 20), (size_t)256 << 20, "at the peak: the room");
  cr_assert_eq(decay_dirty_limit(autocap, 0, (size_t)1 << 30), ((size_t)1 << 30) + (256 << 20),
               "torn down: all of it, plus the room");
  cr_assert_eq(decay_dirty_limit(autocap, 300 << 20, 1000 << 20), (size_t)956 << 20);
  cr_assert_eq(decay_dirty_limit(autocap, 200 << 20, 100 << 20), (size_t)256 << 20, "above a stale peak");
  cr_assert_eq(decay_dirty_limit(OPT_DIRTY_AUTO(0), 5, 5), 0);
  cr_assert_eq(decay_cap_batch(autocap, (size_t)4 << 30), 32 << 20,
               "batches are an eighth of the room, not of the peak: that is memory about to be reused");
}

static void activity(int n) { /* enough local frees for several clock reads */
  for (int i = 0; i < n; i++) ebb_free(ebb_malloc(32));
}

static struct ebb_stats stats(void) {
  struct ebb_stats s;
  ebb_stats(&s);
  return s;
}

static void setup(void) {
  fake_reset();
  opt.decay_ms = 500;
  opt.dirty_max = (int64_t)1 << 40;
  opt.background = 0;
  activity(200); /* creates this thread's arena and its 32-byte page */
}
TestSuite(decay, .init = setup);

Test(decay, nothing_before_the_decay_time_everything_after) {
  static void *p[1024];
  for (int i = 0; i < 1024; i++) p[i] = ebb_malloc(4096);
  for (int i = 0; i < 1024; i++) ebb_free(p[i]);
  arena_purge_all(false); /* a decay pass at time 0: sends the thread's cache home, purges nothing */
  cr_assert_eq(fake_purges, 0);
  size_t dirty = stats().dirty;
  cr_assert_geq(dirty, (size_t)3 << 20, "freed pages wait, resident (dirty %zu)", dirty);
  fake_reset();
  fake_now += 499;
  activity(1000);
  cr_assert_eq(stats().dirty, dirty, "nothing is purged before the decay time");
  cr_assert_eq(fake_purges, 0);
  fake_now += 1 + decay_look_interval(500) / 2; /* the decay time, plus at most one pass interval */
  activity(1000);
  cr_assert_eq(stats().dirty, 0, "everything is purged once it has decayed");
  cr_assert_geq(fake_purged_bytes, dirty);
  cr_assert_lt(fake_purges, 8, "contiguous runs go back in one madvise each, not per block (%zu)",
               fake_purges);
}

Test(decay, the_dirty_cap_is_enforced_at_once) {
  opt.dirty_max = 1 << 20;
  static void *p[2048];
  for (int i = 0; i < 2048; i++) p[i] = ebb_malloc(4096);
  for (int i = 0; i < 2048; i++) ebb_free(p[i]);
  struct ebb_stats s = stats();
  cr_assert_leq(s.dirty, 1 << 20, "dirty %zu", s.dirty);
  cr_assert_geq(s.dirty, (1 << 20) - (1 << 20) / 8 - UNIT_SIZE,
                "the excess goes, oldest first, and at most an eighth of the cap more (dirty %zu)", s.dirty);
  cr_assert_geq(fake_purged_bytes, (size_t)6 << 20);
  /* down to 7/8 of the cap each time: 37 purges here, 111 when every page
   * freed beyond the cap purged alone */
  cr_assert_lt(fake_purges, 60, "the cap purges in batches (%zu madvise calls)", (size_t)fake_purges);
}

/* The default cap ("auto") with a room of 1 MiB: a teardown eight times the
 * room stays resident, and the rebuild takes it back without a purge or a
 * fresh page (with a fixed 1 MiB cap, above, 6 MiB or more went back). */
Test(decay, auto_cap_keeps_a_teardown_for_its_rebuild) {
  opt.dirty_max = OPT_DIRTY_AUTO(1 << 20);
  static void *p[2048];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 2048; i++) p[i] = ebb_malloc(4096);
    struct ebb_stats built = stats();
    for (int i = 0; i < 2048; i++) ebb_free(p[i]);
    struct ebb_stats s = stats();
    cr_assert_geq(s.dirty, (size_t)7 << 20, "round %d: the teardown stays dirty (%zu)", round, s.dirty);
    cr_assert_eq(fake_purges, 0, "round %d: nothing purged (%zu bytes)", round, fake_purged_bytes);
    cr_assert_geq(arena_dirty_limit(), s.dirty + (1 << 20) - UNIT_SIZE,
                  "round %d: the cap (EBB_STATS' dirty cap) is the room plus the fall from the peak", round);
    if (round) cr_assert_eq(built.mapped, s.mapped, "round %d: the rebuild mapped nothing new", round);
    fake_now += 10;
  }
}

static void *build_8mib(void *arg) {
  void **q = arg;
  for (int i = 0; i < 2048; i++) q[i] = ebb_malloc(4096);
  return NULL; /* keeps them: only the resident total matters */
}

/* The auto cap bounds resident memory by the recent peak of active memory plus
 * the room: a teardown in one thread cannot stay resident beside a build in
 * another that maps afresh (the builder purges the other arena's dirty units). */
Test(decay, auto_cap_purges_a_teardown_beside_a_fresh_build) {
  opt.dirty_max = OPT_DIRTY_AUTO(1 << 20);
  static void *p[2048];
  for (int i = 0; i < 2048; i++) p[i] = ebb_malloc(4096);
  size_t peak = stats().active;
  for (int i = 0; i < 2048; i++) ebb_free(p[i]);
  cr_assert_geq(stats().dirty, (size_t)7 << 20, "the teardown waits, dirty");
  cr_assert_eq(fake_purges, 0);
  pthread_t t;
  static void *q[2048];
  pthread_create(&t, NULL, build_8mib, q);
  pthread_join(t, NULL);
  struct ebb_stats s = stats();
  cr_assert_geq(s.active, (size_t)7 << 20, "the other thread's build is active (%zu)", s.active);
  cr_assert_leq(s.active + s.dirty, peak + (1 << 20) + UNIT_SIZE,
                "resident %zu + %zu over the peak %zu + the 1 MiB room", s.active, s.dirty, peak);
  cr_assert_geq(fake_purged_bytes, (size_t)6 << 20, "the teardown was purged (%zu)", fake_purged_bytes);
}

/* The recent peak lives for one to two windows of 4 decay times (2 to 4 s
 * here). The clock moves while this thread runs no decay pass and the other
 * only mallocs 128 KiB, too little for a tick: what goes, the cap took (the
 * control shows decay took none). */
static void *build_a_little(void *arg) { /* 32 refills: fewer slow-path events than a tick takes */
  void **q = arg;
  for (int i = 0; i < 32; i++) q[i] = ebb_malloc(4096);
  return NULL;
}

static struct ebb_stats teardown_then_fresh_build(uint64_t later) {
  opt.dirty_max = OPT_DIRTY_AUTO(1 << 20);
  static void *p[2048];
  for (int i = 0; i < 2048; i++) p[i] = ebb_malloc(4096);
  for (int i = 0; i < 2048; i++) ebb_free(p[i]);
  cr_assert_geq(stats().dirty, (size_t)7 << 20);
  fake_reset();
  fake_now += later;
  arena_tls->tick = 1 << 30; /* this thread's frees (pthread_join's own) run no decay pass */
  pthread_t t;
  static void *q[32];
  pthread_create(&t, NULL, build_a_little, q);
  pthread_join(t, NULL);
  return stats();
}

Test(decay, the_recent_peak_holds_for_a_window_and_more) {
  struct ebb_stats s = teardown_then_fresh_build(6 * 500);
  cr_assert_geq(s.dirty, (size_t)7 << 20, "the teardown still waits (%zu): its peak is recent", s.dirty);
  cr_assert_eq(fake_purges, 0);
}

Test(decay, the_recent_peak_is_forgotten_after_two_windows) {
  struct ebb_stats s = teardown_then_fresh_build(8 * 500 + 1);
  cr_assert_leq(s.dirty, (size_t)2 << 20, "the old teardown beside a fresh build (%zu)", s.dirty);
  cr_assert_geq(fake_purged_bytes, (size_t)6 << 20);
}

Test(decay, trim_returns_everything_now) {
  static void *p[512];
  for (int i = 0; i < 512; i++) p[i] = ebb_malloc(8192);
  for (int i = 0; i < 512; i++) ebb_free(p[i]);
  cr_assert_gt(stats().dirty, 0);
  size_t n = ebb_trim();
  cr_assert_gt(n, 0);
  cr_assert_eq(stats().dirty, 0);
}

/* ebb_trim returns an exited thread's memory even while another thread (the
 * background thread) is in the middle of a pass over that arena: it waits for
 * the pass and purges the rest itself (a probe found 223 MiB left active after
 * a malloc_trim, in one run in five). */
static void *build_and_exit(void *arg) {
  static void *p[1024];
  for (int i = 0; i < 1024; i++) p[i] = ebb_malloc(8192);
  for (int i = 0; i < 1024; i++) ebb_free(p[i]);
  *(arena_t **)arg = arena_tls;
  return NULL;
}

static void *end_the_pass(void *arg) {
  usleep(50 * 1000);
  atomic_store((_Atomic int *)&((arena_t *)arg)->state, ARENA_ABANDONED);
  return NULL;
}

Test(decay, trim_waits_for_another_threads_pass_over_an_abandoned_arena) {
  arena_t *gone = NULL;
  pthread_t t;
  pthread_create(&t, NULL, build_and_exit, &gone);
  pthread_join(t, NULL);
  cr_assert_not_null(gone);
  cr_assert_eq(atomic_load(&gone->state), ARENA_ABANDONED);
  cr_assert_geq(stats().dirty, (size_t)7 << 20, "the exited thread's 8 MiB wait for decay");
  atomic_store(&gone->state, ARENA_PURGING); /* another thread's pass over it, as the background thread's */
  pthread_create(&t, NULL, end_the_pass, gone);
  ebb_trim();
  pthread_join(t, NULL);
  cr_assert_lt(stats().dirty, (size_t)1 << 20, "all of it returned (%zu left)", stats().dirty);
}

/* A thread allocates, frees all but one block in 512, and exits. */
static void *churn_and_exit(void *arg) {
  size_t n = (size_t)(uintptr_t)arg;
  void **p = ebb_malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = ebb_malloc(64 + (i % 8) * 16);
  for (size_t i = 0; i < n; i++)
    if (i % 512) ebb_free(p[i]);
  return NULL; /* the survivors and p stay live */
}

static void run_thread(size_t n) {
  pthread_t t;
  pthread_create(&t, NULL, churn_and_exit, (void *)(uintptr_t)n);
  pthread_join(t, NULL);
}

Test(decay, abandoned_arena_is_purged_by_another_threads_activity) {
  run_thread(100000);
  size_t active = stats().active;
  fake_reset();
  fake_now += 501;
  activity(2000);
  struct ebb_stats s = stats();
  cr_assert_eq(s.dirty, 0);
  /* 100000 blocks of ~120 B is ~12 MiB; one in 512 live pins at most one 4 KiB granule each */
  cr_assert_geq(fake_purged_bytes, (size_t)8 << 20, "purged %zu (active before %zu)", fake_purged_bytes,
                active);
}

Test(decay, background_thread_purges_with_no_activity) {
  opt.background = 1;
  cr_assert(thread_background_start(), "the background thread starts (ebb does it from pthread_create)");
  run_thread(50000);
  fake_reset();
  __atomic_store_n(&fake_now, fake_now + 600, __ATOMIC_RELAXED);
  for (int i = 0; i < 300 && (stats().dirty || fake_purged_bytes < ((size_t)4 << 20)); i++) usleep(10000);
  cr_assert_eq(stats().dirty, 0);
  cr_assert_geq(fake_purged_bytes, (size_t)4 << 20, "purged %zu", fake_purged_bytes);
}

Test(decay, a_live_threads_pages_are_left_to_it) {
  static void *p[4096];
  for (int i = 0; i < 4096; i++) p[i] = ebb_malloc(64);
  for (int i = 0; i < 4096; i++)
    if (i % 512) ebb_free(p[i]);
  fake_reset();
  fake_now += 100; /* well within the decay time: nothing goes */
  activity(500);
  cr_assert_eq(fake_purged_bytes, 0);
  fake_now += 1000; /* decayed: a first look notes each idle page's count ... */
  for (int i = 0; i < 4096; i += 512) *(volatile char *)p[i] = 1;
  activity(500);
  cr_assert_eq(fake_purged_bytes, 0, "a page is purged only once its count held still");
  fake_now += decay_look_interval(500); /* ... and once it held still, free granules go */
  activity(500);
  cr_assert_geq(fake_purged_bytes, (size_t)3 * 14 * 4096);
  for (int i = 0; i < 4096; i += 512) cr_assert_eq(*(volatile char *)p[i], 1);
}

/* Steps the fake clock from `from` to `to` in 25 ms steps, with activity at
 * each (its ticks run the thread's own decay passes) and one malloc/free of
 * `size`, whose class stays in use. */
static void work_until(uint64_t from, uint64_t to, size_t size) {
  for (uint64_t t = from; t <= to; t += 25) {
    fake_now = t;
    activity(100);
    ebb_free(ebb_malloc(size));
  }
}

/* A thread that keeps working in one class gives back, on the decay clock,
 * the pages of the classes it stopped using: each class's current page used
 * to stay (with whatever of it had been written resident) for the thread's
 * whole life, since only an idle owner's current pages were looked at. The
 * class it still allocates from keeps its page, the one it empties with every
 * free included. */
Test(decay, a_working_threads_disused_classes_give_their_pages_back) {
  static void *p[64];
  size_t classes = 0;
  for (size_t size = 48; size <= 1024; size += 16) {
    classes += size_class(size) != size_class(size - 16);
    for (int i = 0; i < 64; i++) p[i] = ebb_malloc(size);
    for (int i = 0; i < 64; i++) ebb_free(p[i]);
  }
  unsigned in_use = size_class(64), unused = size_class(512);
  page_t *kept = arena_tls->tc[in_use].direct, *dropped = arena_tls->tc[unused].direct;
  cr_assert(kept != &page_empty && dropped != &page_empty && kept != dropped);
  size_t active = stats().active;
  cr_assert_geq(active, classes * UNIT_SIZE, "a page per class (%zu): active %zu", classes, active);
  fake_reset();
  uint64_t t0 = fake_now;
  work_until(t0, t0 + 499, 64);
  cr_assert_eq(stats().active, active, "no page goes before the decay time");
  cr_assert_eq(arena_tls->tc[unused].direct, dropped);
  work_until(t0 + 500, t0 + 1200, 64); /* seen empty by a pass, then the decay time, then a pass */
  cr_assert_eq(arena_tls->tc[in_use].direct, kept, "the class in use keeps its page");
  cr_assert_eq(arena_tls->tc[unused].direct, &page_empty, "the disused class's page went back");
  cr_assert_leq(stats().active, 2 * UNIT_SIZE, "left: the 32- and 64-byte pages (active %zu)", stats().active);
  work_until(t0 + 1225, t0 + 1800, 64); /* and, dirty since it was seen empty, it is purged on time */
  cr_assert_eq(stats().dirty, 0);
  cr_assert_geq(fake_purged_bytes, (classes - 2) * 4096, "purged %zu", fake_purged_bytes);
  void *q = ebb_malloc(512); /* the class works again */
  cr_assert_not_null(q);
  cr_assert_neq(arena_tls->tc[unused].direct, &page_empty);
  ebb_free(q);
}

/* A thread's empty chunks beyond its reserve of one go to the pool at its next
 * decay pass, still resident, and another thread's next chunks come from
 * there: threads that take turns at a structure each mapped afresh, and the
 * cap purged the idle one's copy just before its turn (found by a probe: 2
 * threads taking turns at 400 MB of small blocks, 41,000 faults a turn). */
Test(decay, a_threads_empty_chunks_serve_another_threads_build_warm) {
  static void *p[6144]; /* 24 MiB: 6 chunks, 5 of them empty after */
  for (int i = 0; i < 6144; i++) p[i] = ebb_malloc(4096);
  for (int i = 0; i < 6144; i++) ebb_free(p[i]);
  arena_purge_all(false); /* this thread's pass at time 0: purges nothing */
  struct ebb_stats torn = stats();
  cr_assert_eq(fake_purges, 0);
  cr_assert_geq(torn.dirty, (size_t)23 << 20, "the teardown waits, resident (dirty %zu)", torn.dirty);
  pthread_t t;
  static void *q[2048];
  pthread_create(&t, NULL, build_8mib, q);
  pthread_join(t, NULL);
  struct ebb_stats built = stats();
  cr_assert_eq(fake_purges, 0, "the other thread's build purged %zu bytes", fake_purged_bytes);
  cr_assert_leq(built.mapped, torn.mapped + CHUNK_SIZE,
                "the other thread mapped %zu bytes afresh beside %zu bytes of empty resident chunks",
                built.mapped - torn.mapped, torn.dirty);
  cr_assert_leq(built.dirty + (8 << 20), torn.dirty + CHUNK_SIZE, "it took the teardown's units (dirty %zu -> %zu)",
                torn.dirty, built.dirty);
}

/* A unit that goes through the pool unused keeps the time it was freed: the
 * empty chunks go to the pool at a pass 400 ms after the teardown, this
 * thread takes one back and uses half of it, and at 501 ms the other half is
 * due (its units were dirty since the move: another 500 ms, and a chunk that
 * moved faster than the decay time stayed resident for good). */
Test(decay, a_pooled_units_time_survives_its_moves) {
  static void *p[6144], *q[6144];
  for (int i = 0; i < 6144; i++) p[i] = ebb_malloc(4096);
  for (int i = 0; i < 6144; i++) ebb_free(p[i]);
  fake_now += 400;
  arena_purge_all(false);
  cr_assert_eq(fake_purges, 0, "nothing is due yet");
  size_t pooled = chunk_pool_dirty(), units = 0;
  cr_assert_geq(pooled, (size_t)8 << 20, "the empty chunks are pooled, resident (%zu)", pooled);
  for (chunk_t *c = arena_tls->chunks; c; c = c->next) units += (size_t)__builtin_popcountll(c->free_units);
  /* the arena's free units, then 32 units (16 blocks each) of a pooled chunk */
  size_t n = (units + 32) * 16;
  cr_assert_leq(n, 6144);
  for (size_t i = 0; i < n; i++) q[i] = ebb_malloc(4096);
  fake_now += 101;
  arena_purge_all(false);
  struct ebb_stats s = stats();
  cr_assert_lt(s.dirty, (size_t)1 << 20, "units freed 501 ms ago are still resident (dirty %zu)", s.dirty);
  for (size_t i = 0; i < n; i++) ebb_free(q[i]);
}

/* When none of the arena's resident units fit, a warm pooled chunk comes
 * before units of its own that decay returned to the kernel. */
Test(decay, a_warm_pooled_chunk_before_the_arenas_purged_units) {
  static void *p[6144], *q[256];
  for (int i = 0; i < 6144; i++) p[i] = ebb_malloc(4096);
  for (int i = 0; i < 6144; i++) ebb_free(p[i]);
  fake_now += 600;
  arena_purge_all(false); /* all decayed: purged, the empty chunks pooled as address space */
  cr_assert_lt(chunk_pool_dirty(), (size_t)1 << 20, "pool dirty %zu", chunk_pool_dirty());
  fake_reset();
  pthread_t t; /* another thread's teardown, pooled warm at its exit */
  pthread_create(&t, NULL, build_8mib, p);
  pthread_join(t, NULL);
  for (int i = 0; i < 2048; i++) ebb_free(p[i]);
  arena_purge_all(false);
  size_t warm = chunk_pool_dirty();
  cr_assert_geq(warm, (size_t)4 << 20, "the other thread's chunks are pooled warm (%zu)", warm);
  for (int i = 0; i < 256; i++) q[i] = ebb_malloc(4096); /* 16 units */
  cr_assert_lt(chunk_pool_dirty(), warm, "the new pages came from purged units of the arena's own (pool %zu)", warm);
  for (int i = 0; i < 256; i++) ebb_free(q[i]);
}
