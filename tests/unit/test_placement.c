/* Where a chunk places new spans, over the fake OS: the shortest free run that
 * holds the span (best fit), single-unit pages from the top down, longer spans
 * from the bottom up, so that rounds of a changing size
 * mix (a prover's scratch, one round per proof) keep reusing the units the
 * first rounds made resident instead of faulting in fresh ones beside them.
 * ebb_* names, no override; the decay time is far away, so nothing resident is
 * ever purged and "resident" is every unit a span ever took. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "arena.h"
#include "chunk.h"
#include "ebb.h"
#include "fake_os.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void setup(void) {
  fake_reset();
  opt.decay_ms = 1000000;
  opt.dirty_max = (int64_t)1 << 40;
  opt.background = 0;
}
TestSuite(placement, .init = setup);

/* ---------------------------------------------------------------- the rule */

static uint64_t span_bits(unsigned first, unsigned n) { return (((uint64_t)1 << n) - 1) << first; }

Test(placement, one_unit_pages_take_the_top_and_longer_spans_the_bottom) {
  sizeclass_init();
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  page_t *one = chunk_take_span(c, 1, 1, false);
  page_t *four = chunk_take_span(c, 4, 1, false);
  page_t *one2 = chunk_take_span(c, 1, 1, false);
  page_t *two = chunk_take_span(c, 2, 1, false);
  cr_assert_eq(one - c->pages, CHUNK_UNITS - 1, "the first single unit is the chunk's last");
  cr_assert_eq(one2 - c->pages, CHUNK_UNITS - 2, "the next one just below it");
  cr_assert_eq(four - c->pages, 1, "a longer span starts right after the header");
  cr_assert_eq(two - c->pages, 5, "and the next one after it");
  /* Among resident free units (10, 20-21 and 40), a run of exactly the
   * length wanted comes first, from the kind's end: single units take 40,
   * then 10, and leave the run of two whole for a two-unit span. */
  chunk_t *w = chunk_new(NULL, false, 0);
  w->dirty_units = ((uint64_t)1 << 10) | ((uint64_t)1 << 40) | ((uint64_t)3 << 20);
  cr_assert_eq(chunk_take_span(w, 1, 1, true) - w->pages, 40);
  cr_assert_eq(chunk_take_span(w, 1, 1, true) - w->pages, 10, "not 21: that would cut the run of two");
  cr_assert_eq(chunk_take_span(w, 2, 1, true) - w->pages, 20);
  cr_assert_null(chunk_take_span(w, 1, 1, true), "no warm unit left");
}

/* Ghostscript's pattern: a long span freed and taken again every page it
 * renders, one-unit pages coming and going in between. A single unit must take
 * the smallest hole, never cut the one the long span left, or the long span
 * finds no room and every page takes a new chunk (gs: 67 MB peak RSS, 38 with
 * best fit). The same for a longer span: the shortest run that holds it. */
Test(placement, a_page_takes_the_shortest_run_that_holds_it) {
  sizeclass_init();
  chunk_t *w = chunk_new(NULL, false, 0);
  cr_assert_not_null(w);
  /* resident free runs: 5-6 (two units), 40-48 (nine, where a long span was) */
  w->dirty_units = ((uint64_t)3 << 5) | ((uint64_t)0x1ff << 40);
  cr_assert_eq(chunk_take_span(w, 1, 1, true) - w->pages, 6, "the top of the run of two, not unit 48");
  cr_assert_eq(chunk_take_span(w, 9, 1, true) - w->pages, 40, "the nine units are still whole");
  cr_assert_eq(chunk_take_span(w, 1, 1, true) - w->pages, 5);
  cr_assert_null(chunk_take_span(w, 1, 1, true), "no warm unit left");
  /* free runs 1-5 (five units), 20-23 (four), 30-63 (the rest): three units
   * go to the bottom of the run of four, then four to the run of five */
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  uint64_t busy = span_bits(6, 14) | span_bits(24, 6);
  c->free_units &= ~busy;
  c->free_count -= (uint32_t)__builtin_popcountll(busy);
  cr_assert_eq(chunk_take_span(c, 3, 1, false) - c->pages, 20);
  cr_assert_eq(chunk_take_span(c, 4, 1, false) - c->pages, 1);
  cr_assert_eq(chunk_take_span(c, 2, 1, false) - c->pages, 30, "only the long run is left");
}

/* The span search asks each chunk's run-length index (chunk_fit_len) instead
 * of walking its runs; it must answer what chunk_fit does, for any bitmaps
 * (tests and the pool write them directly) and after every take and give. */
Test(placement, the_run_length_index_answers_as_the_walk_does) {
  sizeclass_init();
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (int round = 0; round < 2000; round++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint64_t y = x * 0x2545F4914F6CDD1DULL;
    c->free_units = (round % 3 ? x | (x >> 1) : x) & CHUNK_ALL_FREE; /* longer runs on two rounds in three */
    c->free_count = (uint32_t)__builtin_popcountll(c->free_units);
    c->dirty_units = c->free_units & (round % 2 ? y : ~y >> 3);
    for (unsigned n = 1; n < CHUNK_UNITS; n++)
      for (int warm = 0; warm < 2; warm++) {
        unsigned at;
        cr_assert_eq(chunk_fit_len(c, n, warm), chunk_fit(c, n, 1, warm, &at), "round %d, %u units, warm %d",
                     round, n, warm);
      }
  }
  /* after a take and a give through the chunk's own functions */
  c->free_units = CHUNK_ALL_FREE, c->free_count = CHUNK_UNITS - 1, c->dirty_units = 0;
  cr_assert_eq(chunk_fit_len(c, 5, false), CHUNK_UNITS - 1);
  page_t *pg = chunk_take_span(c, 5, 1, false);
  cr_assert_eq(pg - c->pages, 1);
  cr_assert_eq(chunk_fit_len(c, 5, false), CHUNK_UNITS - 6, "the run after the span");
  cr_assert_eq(chunk_fit_len(c, 5, true), 0, "nothing resident yet");
  pg->units = 5;
  chunk_give_span(c, pg, 1);
  cr_assert_eq(chunk_fit_len(c, 5, true), 5, "the span given back, resident");
  cr_assert_eq(chunk_fit_len(c, 6, true), 0);
  cr_assert_eq(chunk_fit_len(c, 6, false), CHUNK_UNITS - 1, "one run again");
  /* the dirty bitmap alone changes */
  cr_assert_eq(chunk_purge(c, UINT64_MAX, SIZE_MAX, false), 5 * UNIT_SIZE);
  cr_assert_eq(chunk_fit_len(c, 5, true), 0, "purged: nothing resident");
}

/* Every unit of a live span leads a lookup to the span's head, however spans
 * of other lengths came and went over the same units; a unit of a span given
 * back leads to no live page. chunk_give_span leaves the tails as they were,
 * and take_at rewrites only the ones that are not already the new span's. */
static void *unit_addr(chunk_t *c, unsigned u) { return (char *)c + ((size_t)u << UNIT_SHIFT); }

static void leads_to(chunk_t *c, page_t *head, unsigned first, unsigned n) {
  for (unsigned u = first; u < first + n; u++) {
    cr_assert_eq(chunk_page_of(c, unit_addr(c, u)), head, "unit %u leads to the span at %u", u, first);
    cr_assert_eq(chunk_page_of(c, (char *)unit_addr(c, u) + 4096), head, "inside unit %u too", u);
    if (u > first) cr_assert_not(page_is_block(chunk_unit_page(c, unit_addr(c, u)), unit_addr(c, u)),
                                 "a tail is no block of its own (free's fast path goes to the head)");
  }
}

static page_t *take_as(chunk_t *c, unsigned first, unsigned n) {
  page_t *pg = chunk_take_span_at(c, &c->pages[first], n);
  cr_assert_not_null(pg, "units %u-%u free", first, first + n - 1);
  page_init(pg, size_class(64 * KiB), unit_addr(c, first), NULL, false); /* a head with a class and geometry */
  pg->units = (uint8_t)n;
  return pg;
}

Test(placement, every_unit_of_a_span_leads_to_its_head_as_spans_come_and_go) {
  sizeclass_init();
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  page_t *a = take_as(c, 1, 16);
  leads_to(c, a, 1, 16);
  chunk_give_span(c, a, 1);
  cr_assert_geq(chunk_page_of(c, unit_addr(c, 9))->cls, NCLASSES, "given back: no live page");
  page_t *b = take_as(c, 5, 4); /* inside the old span: a head where a tail was */
  leads_to(c, b, 5, 4);
  cr_assert_geq(chunk_page_of(c, unit_addr(c, 12))->cls, NCLASSES, "the rest of the old span: still none");
  page_t *d = take_as(c, 10, 3);
  leads_to(c, d, 10, 3);
  chunk_give_span(c, b, 2);
  chunk_give_span(c, d, 2);
  a = take_as(c, 1, 16); /* the old span again, whole: every tail that moved is mended */
  leads_to(c, a, 1, 16);
  chunk_give_span(c, a, 3);
  a = take_as(c, 1, 16); /* and taken again untouched in between */
  leads_to(c, a, 1, 16);
  chunk_give_span(c, a, 4);
  page_t *e = take_as(c, 2, 20); /* one unit later, longer: every unit a different head */
  leads_to(c, e, 2, 20);
}

/* An arena keeps its chunks with no free unit on a list of their own, so a new
 * page never walks them (a growing heap walked all of them for every page); a
 * chunk comes back to the searched list when one of its pages goes back, and
 * the stats still count every chunk. 64 KiB blocks: one page of one unit each. */
static unsigned list_len(const chunk_t *c) {
  unsigned n = 0;
  for (; c; c = c->next) n++;
  return n;
}

Test(placement, full_chunks_leave_the_search_and_come_back_when_a_page_goes_back) {
  enum { N = 3 * (CHUNK_UNITS - 1) };
  static void *blocks[N];
  for (int i = 0; i < N; i++) cr_assert_not_null(blocks[i] = ebb_malloc(64 * KiB));
  arena_t *a = arena_tls;
  a->tc_cap[size_class(64 * KiB)] = 1; /* no cache for the thread's own blocks (arena_cache_own_full): */
  relaxed_store(a->tc[size_class(64 * KiB)].fl.used, 0); /* every free goes to its page */
  cr_assert_eq(list_len(a->chunks_full), 3, "three chunks of 64 KiB pages, all full");
  for (const chunk_t *c = a->chunks_full; c; c = c->next) cr_assert_eq(c->free_count, 0);
  struct ebb_stats s;
  ebb_stats(&s);
  cr_assert_geq(s.allocated, (size_t)N * 64 * KiB, "blocks in full chunks are counted");
  size_t mapped = s.mapped;
  chunk_t *c = chunk_of(blocks[N / 2]);
  cr_assert_eq(chunk_of(blocks[N / 2 - 1]), c);
  ebb_free(blocks[N / 2 - 1]); /* its page empties and stays, the class's spare (arena.c, page_kept_spare) */
  cr_assert_eq(list_len(a->chunks_full), 3);
  ebb_free(blocks[N / 2]); /* a second page empties and goes back: its chunk has a free unit again */
  cr_assert_eq(list_len(a->chunks_full), 2);
  bool found = false;
  for (const chunk_t *q = a->chunks; q; q = q->next) found |= q == c;
  cr_assert(found, "the chunk is searched again");
  blocks[N / 2 - 1] = ebb_malloc(64 * KiB);
  blocks[N / 2] = ebb_malloc(64 * KiB);
  cr_assert(chunk_of(blocks[N / 2 - 1]) == c && chunk_of(blocks[N / 2]) == c,
            "the spare and the unit given back are taken again");
  ebb_stats(&s);
  cr_assert_eq(s.mapped, mapped, "no new chunk");
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
  cr_assert_eq(list_len(a->chunks_full), 0);
}

/* The span search (arena.c, take_span_locked) takes the best fit over all of
 * an arena's chunks: the chunk whose shortest run that holds the span is the
 * shortest, as the arena's span index (chunk.h) tells it, and again after
 * each take and each span given back (written first for the memo of ranked
 * chunks that the index replaced: a chunk with runs of 3 and 10 kept
 * answering with its 10 after the 3 was taken, where another chunk had a run
 * of 5). Two chunks of 64 KiB pages (one unit each) with runs cut into them,
 * then blocks of two units (one-block pages); EBB_DECAY_MS=0 so that no page
 * is kept and every free unit is purged (the search's second pass, over all
 * free units). */
static unsigned unit_of(const void *p) {
  return (unsigned)(((uintptr_t)p - (uintptr_t)chunk_of(p)) >> UNIT_SHIFT);
}

/* n blocks of 64 KiB (one-unit pages of one block) filling nchunks chunks
 * whole, with the class's thread cache off so that every free goes to its
 * page: the set-up of the best-fit tests below. */
static arena_t *full_chunks_of_64k_pages(void **blocks, int n, unsigned nchunks) {
  for (int i = 0; i < n; i++) cr_assert_not_null(blocks[i] = ebb_malloc(64 * KiB));
  arena_t *a = arena_tls;
  a->tc_cap[size_class(64 * KiB)] = 1; /* every free goes to its page */
  relaxed_store(a->tc[size_class(64 * KiB)].fl.used, 0);
  cr_assert_eq(list_len(a->chunks_full), nchunks);
  cr_assert_null(a->chunks);
  return a;
}

Test(placement, the_span_search_gives_the_best_fit_across_chunks) {
  sizeclass_init();
  opt.decay_ms = 0;
  enum { N = 2 * (CHUNK_UNITS - 1), TWO = 114688 };
  cr_assert(class_is_one_block(size_class(TWO)));
  cr_assert_eq(class_info[size_class(TWO)].units, 2);
  static void *blocks[N];
  full_chunks_of_64k_pages(blocks, N, 2);
  chunk_t *ca = chunk_of(blocks[0]), *cb = NULL;
  for (int i = 0; i < N; i++)
    if (chunk_of(blocks[i]) != ca) cb = chunk_of(blocks[i]);
  cr_assert_not_null(cb);
  /* chunk A: free runs of 3 (units 10-12) and 10 (30-39); chunk B: of 5 (20-24) */
  for (int i = 0; i < N; i++) {
    unsigned u = unit_of(blocks[i]);
    bool in_a = chunk_of(blocks[i]) == ca;
    if ((in_a && ((u >= 10 && u <= 12) || (u >= 30 && u <= 39))) || (!in_a && u >= 20 && u <= 24)) {
      ebb_free(blocks[i]);
      blocks[i] = NULL;
    }
  }
  cr_assert_eq(ca->free_count, 13);
  cr_assert_eq(cb->free_count, 5);
  void *t1 = ebb_malloc(TWO); /* A's run of 3; A's best is then its 10 */
  cr_assert_eq(chunk_of(t1), ca, "the shortest run that holds two units is A's three");
  void *t2 = ebb_malloc(TWO);
  cr_assert_eq(chunk_of(t2), cb, "A answered with its run of 10 where B has one of 5");
  void *t3 = ebb_malloc(TWO); /* B's run left: 3 */
  cr_assert_eq(chunk_of(t3), cb);
  void *t4 = ebb_malloc(TWO); /* B's run left: 1 */
  cr_assert_eq(chunk_of(t4), ca, "only A's run of 10 holds two units");
  /* a 64 KiB page beside B's last free unit goes back: a run of exactly 2 */
  int beside = -1;
  for (int i = 0; i < N; i++)
    if (blocks[i] && chunk_of(blocks[i]) == cb && unit_of(blocks[i]) == 25) beside = i;
  cr_assert_geq(beside, 0);
  ebb_free(blocks[beside]);
  blocks[beside] = NULL;
  void *t5 = ebb_malloc(TWO);
  cr_assert_eq(chunk_of(t5), cb, "the run of 2 that a span given back made");
  cr_assert_eq(unit_of(t5), 24);
  ebb_free(t1);
  ebb_free(t2);
  ebb_free(t3);
  ebb_free(t4);
  ebb_free(t5);
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
}

/* When the best chunk has no run left that holds the span the next best
 * answers, each answer still the best fit: three chunks of 64 KiB pages with
 * free runs of 9, 4 and 6 units (in the chunks' list order: the choice is by
 * run, not by place), then two-unit blocks. */
Test(placement, the_next_best_chunk_answers_in_turn) {
  sizeclass_init();
  opt.decay_ms = 0;
  enum { N = 3 * (CHUNK_UNITS - 1), TWO = 114688 };
  cr_assert_eq(class_info[size_class(TWO)].units, 2);
  static void *blocks[N];
  arena_t *a = full_chunks_of_64k_pages(blocks, N, 3);
  chunk_t *cs[3];
  unsigned nc = 0;
  for (int i = 0; i < N; i++) {
    bool seen = false;
    for (unsigned k = 0; k < nc; k++) seen |= cs[k] == chunk_of(blocks[i]);
    if (!seen) cs[nc++] = chunk_of(blocks[i]);
  }
  cr_assert_eq(nc, 3);
  const unsigned run[3] = {9, 4, 6};
  for (int i = 0; i < N; i++) {
    unsigned k = 0, u = unit_of(blocks[i]);
    while (cs[k] != chunk_of(blocks[i])) k++;
    if (u >= 20 && u < 20 + run[k]) {
      ebb_free(blocks[i]);
      blocks[i] = NULL;
    }
  }
  /* best fit, run by run: the 4 twice, the 6 three times, then the 9 */
  chunk_t *want[] = {cs[1], cs[1], cs[2], cs[2], cs[2], cs[0], cs[0], cs[0], cs[0]};
  void *t[9];
  for (unsigned i = 0; i < 9; i++) {
    t[i] = ebb_malloc(TWO);
    cr_assert_eq(chunk_of(t[i]), want[i], "block %u: the chunk with the shortest run that holds it", i);
  }
  cr_assert_eq(list_len(a->chunks_full), 2, "the runs of 4 and 6 taken whole, one unit of the 9 left");
  for (unsigned i = 0; i < 9; i++) ebb_free(t[i]);
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
}

/* The span index itself (chunk.h): after every take, give back, purge, join
 * and leave on a set of chunks, for every span length and both kinds of run,
 * it answers with a chunk whose shortest fitting run is the shortest of all
 * (what a walk over every chunk finds), and with none exactly when no chunk
 * has such a run. */
static unsigned walk_best(chunk_t **cs, unsigned n, const bool *in, unsigned units, bool warm) {
  unsigned best = 0;
  for (unsigned i = 0; i < n; i++) {
    unsigned len = in[i] ? chunk_fit_len(cs[i], units, warm) : 0;
    if (len && (!best || len < best)) best = len;
  }
  return best;
}

/* The shortest aligned fit over every chunk (chunk_fit's answer), 0 if none;
 * *tried: chunks whose runs may hold it but not surely (what
 * span_index_aligned_best reads, up to SPAN_ALIGNED_PROBES). */
static unsigned walk_aligned_best(chunk_t **cs, unsigned n, const bool *in, unsigned units, unsigned step, bool warm,
                                  unsigned *tried) {
  unsigned best = 0, at = 0;
  *tried = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!in[i]) continue;
    unsigned l = chunk_fit_len(cs[i], units, warm);
    if (l && l < units + step - 1) ++*tried;
    unsigned len = chunk_fit(cs[i], units, step, warm, &at);
    if (len && (!best || len < best)) best = len;
  }
  return best;
}

/* span_index_aligned_best against that walk: the same shortest aligned fit
 * while the chunks it must read are within its bound; always a fit that is
 * there, and one whenever a run surely holds it. */
static void expect_aligned_best(span_index_t *ix, chunk_t **cs, unsigned n, const bool *in, int round) {
  /* units a multiple of step, as every aligned class's are (its size a multiple of the alignment) */
  static const unsigned shapes[][2] = {{2, 2}, {6, 2}, {4, 4}, {12, 4}, {8, 8}, {24, 8}, {16, 16}, {32, 16}};
  for (unsigned k = 0; k < sizeof shapes / sizeof *shapes; k++)
    for (int warm = 0; warm < 2; warm++) {
      unsigned units = shapes[k][0], step = shapes[k][1], tried = 0, at = 0, len = 0;

      unsigned want = walk_aligned_best(cs, n, in, units, step, warm, &tried);
      chunk_t *got = span_index_aligned_best(ix, units, step, warm, &at, &len);
      if (got) {
        unsigned at2 = 0;
        cr_assert_eq(chunk_fit(got, units, step, warm, &at2), len, "round %d: the answer is chunk_fit's", round);
        cr_assert_eq(at, at2, "round %d: the place is chunk_fit's", round);
        cr_assert_eq(at % step, 0, "round %d: aligned", round);
      }
      if (tried <= SPAN_ALIGNED_PROBES) {
        cr_assert_eq(got ? len : 0, want, "round %d, %u units at %u, warm %d: the shortest aligned fit", round,
                     units, step, warm);
      } else if (lens_fit(ix->lens[warm], units + step - 1)) {
        cr_assert_not_null(got, "round %d, %u units at %u, warm %d: a run surely holds it", round, units, step,
                           warm);
      }
    }
}

Test(placement, the_span_index_answers_as_a_walk_over_every_chunk) {
  sizeclass_init();
  enum { N = 70, SPANS = 64 }; /* more chunks than one group of slots */
  static span_index_t ix; /* zeroes: empty */
  static chunk_t *cs[N];
  static bool in[N];
  static page_t *live[N][SPANS];
  static unsigned nlive[N];
  for (unsigned i = 0; i < N; i++) {
    cr_assert_not_null(cs[i] = chunk_new(NULL, false, 0));
    span_index_join(&ix, cs[i]);
    in[i] = true;
  }
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (int round = 0; round < 3000; round++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    unsigned i = (unsigned)(x % N), op = (unsigned)(x >> 32) % 16;
    chunk_t *c = cs[i];
    if (op == 0) { /* leave and join again, as a chunk pooled and taken back does */
      if (in[i]) span_index_leave(c);
      else span_index_join(&ix, c);
      in[i] = !in[i];
    } else if (op == 1) {
      chunk_purge(c, UINT64_MAX, (size_t)(x >> 40) % 8 * UNIT_SIZE, false);
    } else if (op < 9 && nlive[i] < SPANS) {
      unsigned n = 1 + (unsigned)(x >> 20) % (op < 6 ? 3 : 20);
      page_t *pg = chunk_take_span(c, n, 1, (x >> 50) & 1);
      if (pg) pg->units = (uint16_t)n, live[i][nlive[i]++] = pg;
    } else if (nlive[i]) {
      unsigned k = (unsigned)(x >> 24) % nlive[i];
      chunk_give_span(c, live[i][k], (uint64_t)round);
      live[i][k] = live[i][--nlive[i]];
    }
    for (unsigned units = 1; units < CHUNK_UNITS; units++)
      for (int warm = 0; warm < 2; warm++) {
        unsigned len = 0, want = walk_best(cs, N, in, units, warm);
        chunk_t *got = span_index_best(&ix, units, warm, &len);
        if (!want) {
          cr_assert_null(got, "round %d, %u units, warm %d: no chunk fits", round, units, warm);
          continue;
        }
        cr_assert_not_null(got, "round %d, %u units, warm %d", round, units, warm);
        cr_assert_eq(len, want, "round %d, %u units, warm %d: the shortest fitting run", round, units, warm);
        cr_assert_eq(chunk_fit_len(got, units, warm), want, "round %d: the chunk answered has it", round);
      }
    expect_aligned_best(&ix, cs, N, in, round);
  }
  for (unsigned i = 0; i < N; i++)
    if (in[i]) span_index_leave(cs[i]);
  span_index_t empty;
  memset(&empty, 0, sizeof empty);
  memset(ix.aligned_from, 0, sizeof ix.aligned_from); /* where aligned searches go on: no chunk's */
  cr_assert(memcmp(&ix, &empty, sizeof ix) == 0, "every chunk gone: the index is empty again");
}

/* Chunks of single units taken 1-63, for the tests below. */
static chunk_t *chunk_of_units(span_index_t *ix, page_t **unit) {
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  span_index_join(ix, c);
  for (unsigned k = 1; k < CHUNK_UNITS; k++) {
    page_t *pg = chunk_take_span(c, 1, 1, false);
    cr_assert_not_null(pg);
    pg->units = 1;
    unit[pg - c->pages] = pg;
  }
  return c;
}

static void give_units(chunk_t *c, page_t **unit, unsigned first, unsigned end) {
  for (unsigned k = first; k < end; k++) chunk_give_span(c, unit[k], 1);
}

/* Chunks whose free runs are long enough for an aligned span but not where
 * it must start do not hide the chunks behind them from every search: each
 * search reads at most SPAN_ALIGNED_PROBES such chunks, and goes on where the
 * last one ended. Tried from the lowest slot every time, 100 exact 1
 * MiB-aligned holes behind 80 such chunks were never used, each aligned
 * block mapping a chunk (found by a probe); two fixes that remembered which
 * chunks could not hold the span were undone by a search for another shape,
 * a block freed into such a chunk and taken back, or one freed beside its
 * run and taken back (found by two more). */
static page_t *decoy_unit[SPAN_ALIGNED_PROBES + 24][CHUNK_UNITS];

Test(placement, chunks_that_cannot_hold_an_aligned_span_do_not_hide_those_that_can) {
  sizeclass_init();
  enum { DECOYS = SPAN_ALIGNED_PROBES + 16, HOLES = 8, N = DECOYS + HOLES };
  static span_index_t ix;
  static chunk_t *cs[N];
  static page_t *beside[DECOYS];
  page_t *(*unit)[CHUNK_UNITS] = decoy_unit;
  for (unsigned i = 0; i < N; i++) {
    cs[i] = chunk_of_units(&ix, unit[i]); /* the decoys take the lower slots */
    /* a decoy: units 9-24 free, 16 of them but none of 16-31, and 25-31 one
     * span of 7; a hole: 16-31 */
    unsigned first = i < DECOYS ? 9 : 16;
    give_units(cs[i], unit[i], first, first + 16);
    if (i < DECOYS) {
      give_units(cs[i], unit[i], 25, 32);
      cr_assert_not_null(beside[i] = chunk_take_span_at(cs[i], &cs[i]->pages[25], 7));
      beside[i]->units = 7;
    }
  }
  unsigned at = 0, len = 0, searches = 0;
  chunk_t *got = NULL;
  while (!got && searches < 3) got = span_index_aligned_best(&ix, 16, 16, false, &at, &len), searches++;
  cr_assert_not_null(got, "no hole found in %u searches", searches);
  bool hole = false;
  for (unsigned i = DECOYS; i < N; i++) hole |= got == cs[i];
  cr_assert(hole, "the answer is not a chunk with an aligned hole");
  cr_assert_eq(at, 16);
  cr_assert_eq(len, 16);
  cr_assert_leq(searches, 2, "%u searches before the hole", searches);
  /* the searches after it find a hole at once, the decoys not read again
   * (they are more than a search reads): the next one, */
  cr_assert_eq(span_index_aligned_best(&ix, 16, 16, false, &at, &len), got);
  /* one after a search for another shape (2 units at 2, which a decoy holds), */
  cr_assert_not_null(span_index_aligned_best(&ix, 2, 2, false, &at, &len));
  cr_assert_eq(span_index_aligned_best(&ix, 16, 16, false, &at, &len), got, "after another shape");
  /* one after a unit freed into each decoy and taken back, */
  for (unsigned i = 0; i < DECOYS; i++) {
    chunk_give_span(cs[i], unit[i][63], 2);
    cr_assert_eq(chunk_take_span(cs[i], 1, 1, false), unit[i][63]);
  }
  cr_assert_eq(span_index_aligned_best(&ix, 16, 16, false, &at, &len), got, "after frees into the decoys");
  /* and one after the span beside each decoy's run freed (16-31 free with
   * it) and taken back */
  for (unsigned i = 0; i < DECOYS; i++) {
    chunk_give_span(cs[i], beside[i], 2);
    cr_assert_eq(chunk_take_span_at(cs[i], &cs[i]->pages[25], 7), beside[i]);
    beside[i]->units = 7;
  }
  cr_assert_eq(span_index_aligned_best(&ix, 16, 16, false, &at, &len), got, "after frees beside the decoys");
  /* with the holes gone, a decoy whose run grew to hold it (units 25-31 free
   * too) is found among the others */
  for (unsigned i = DECOYS; i < N; i++) span_index_leave(cs[i]);
  chunk_give_span(cs[3], beside[3], 3);
  searches = 0;
  got = NULL;
  while (!got && searches < 3) got = span_index_aligned_best(&ix, 16, 16, false, &at, &len), searches++;
  cr_assert_eq(got, cs[3], "the decoy that changed");
  cr_assert_eq(at, 16);
  cr_assert_eq(len, 23);
  for (unsigned i = 0; i < DECOYS; i++) span_index_leave(cs[i]);
}

/* Each shape of aligned span has its own place to go on from: one for all
 * of them, a search for 2 units at 2 that found its fit in slot 0 sent every
 * search for 16 at 16 back to read the same 64 decoys, and 8 exact holes
 * behind them were never found (found by a probe: with blocks of both
 * shapes, every second 1 MiB-aligned block mapped a chunk, +200 MiB for 100).
 * And a search that took a chunk it did not read here (one whose runs surely
 * hold the span, shorter than what it read) goes on after what it read: kept
 * at the chunk it read, every search read the same 64 again and cut the
 * shorter runs while exact holes further on stayed free. */
static page_t *shape_unit[100][CHUNK_UNITS];

Test(placement, every_aligned_shape_goes_on_where_its_last_search_ended) {
  sizeclass_init();
  enum { DECOYS = SPAN_ALIGNED_PROBES + 16, HOLES = 8, N = 1 + DECOYS + HOLES };
  static span_index_t ix;
  static chunk_t *cs[N];
  for (unsigned i = 0; i < N; i++) {
    cs[i] = chunk_of_units(&ix, shape_unit[i]);
    if (i == 0) /* slot 0: runs of 2 at even units */
      for (unsigned k = 2; k + 1 < CHUNK_UNITS; k += 4) give_units(cs[i], shape_unit[i], k, k + 2);
    else if (i <= DECOYS) /* decoys: 9-24 free */
      give_units(cs[i], shape_unit[i], 9, 25);
    else /* exact holes: 16-31 */
      give_units(cs[i], shape_unit[i], 16, 32);
  }
  unsigned at = 0, len = 0, searches = 0;
  chunk_t *got = NULL;
  while (!got && searches < 4) {
    got = span_index_aligned_best(&ix, 16, 16, false, &at, &len), searches++;
    cr_assert_eq(span_index_aligned_best(&ix, 2, 2, false, &at, &len), cs[0], "the other shape's exact fit");
  }
  cr_assert_not_null(got, "no hole found in %u searches with another shape's between them", searches);
  bool hole = false;
  for (unsigned i = 1 + DECOYS; i < N; i++) hole |= got == cs[i];
  cr_assert(hole, "the answer is not a chunk with an exact hole");
  cr_assert_leq(searches, 2);
  for (unsigned i = 0; i < N; i++) span_index_leave(cs[i]);
}

Test(placement, an_aligned_search_that_takes_a_sure_run_goes_on_after_what_it_read) {
  sizeclass_init();
  enum { DECOYS = SPAN_ALIGNED_PROBES + 16, HOLES = 8, LONG = 8, N = 1 + DECOYS + HOLES + LONG };
  static span_index_t ix;
  static chunk_t *cs[N];
  for (unsigned i = 0; i < N; i++) {
    cs[i] = chunk_of_units(&ix, shape_unit[i]);
    if (i == 0) { /* slot 0: a decoy's run and one of 38 (26-63) */
      give_units(cs[i], shape_unit[i], 9, 25);
      give_units(cs[i], shape_unit[i], 26, 64);
    } else if (i <= DECOYS) {
      give_units(cs[i], shape_unit[i], 9, 25);
    } else if (i <= DECOYS + HOLES) {
      give_units(cs[i], shape_unit[i], 16, 32);
    } else { /* runs of 31 (1-31): they surely hold 16 at 16, and are shorter than 38 */
      give_units(cs[i], shape_unit[i], 1, 32);
    }
  }
  unsigned exact = 0;
  for (unsigned r = 0; r < HOLES; r++) {
    unsigned at = 0, len = 0;
    chunk_t *c = span_index_aligned_best(&ix, 16, 16, false, &at, &len);
    cr_assert_not_null(c);
    exact += len == 16;
    page_t *pg = chunk_take_span_at(c, &c->pages[at], 16);
    cr_assert_not_null(pg);
    pg->units = 16;
  }
  cr_assert_geq(exact, HOLES - 1, "%u of %u searches took an exact hole", exact, HOLES);
  for (unsigned i = 0; i < N; i++) span_index_leave(cs[i]);
}

/* More chunks with free units than slots: only chunks with a free unit hold
 * a slot, the others wait on a list, newest first, which the search walks
 * too, and a slot that comes free (its chunk full, or gone) goes to the
 * oldest waiting chunk at once, the one the walk is furthest from. (A first
 * version let full chunks keep their slots and left the others out until a
 * change of their own: past 4 GiB every new page mapped a chunk of its own,
 * found by a probe.) After every step, the index and the walk of the waiting
 * chunks together answer what a walk over every chunk does. */
static void expect_best_of_all(span_index_t *ix, chunk_t **cs, unsigned n, const bool *in, const char *step) {
  static const unsigned lens[] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 62, 63};
  for (unsigned k = 0; k < sizeof lens / sizeof *lens; k++)
    for (int warm = 0; warm < 2; warm++) {
      unsigned len = 0, want = walk_best(cs, n, in, lens[k], warm);
      chunk_t *got = span_index_best(ix, lens[k], warm, &len);
      if (ix->waiting) got = span_index_waiting_best(ix, lens[k], warm, got, &len);
      if (!want) {
        cr_assert_null(got, "%s, %u units, warm %d: no chunk fits", step, lens[k], warm);
        continue;
      }
      cr_assert_not_null(got, "%s, %u units, warm %d", step, lens[k], warm);
      cr_assert_eq(len, want, "%s, %u units, warm %d: the shortest fitting run", step, lens[k], warm);
      cr_assert_eq(chunk_fit_len(got, lens[k], warm), want, "%s: the chunk answered has it", step);
    }
}

Test(placement, chunks_past_the_last_slot_wait_and_are_searched_too) {
  sizeclass_init();
  enum { N = SPAN_SLOTS + 3 };
  static span_index_t ix;
  static chunk_t *cs[N];
  static bool in[N];
  for (unsigned i = 0; i < N; i++) {
    cr_assert_not_null(cs[i] = chunk_new(NULL, false, 0));
    /* a run of a length of its own in each of the last chunks, 60 units taken in the others */
    unsigned take = i < SPAN_SLOTS ? CHUNK_UNITS - 4 : CHUNK_UNITS - 1 - (N - i);
    cr_assert_not_null(chunk_take_span(cs[i], take, 1, false), "chunk %u", i);
    span_index_join(&ix, cs[i]);
    in[i] = true;
  }
  cr_assert_eq(cs[SPAN_SLOTS - 1]->ix_slot, SPAN_SLOTS - 1);
  cr_assert_eq(ix.nwaiting, 3);
  cr_assert_eq(ix.waiting, cs[N - 1], "the newest waits first");
  expect_best_of_all(&ix, cs, N, in, "3 waiting");
  unsigned len;
  cr_assert_neq(span_index_best(&ix, 1, false, &len), cs[N - 1], "a waiting chunk is in no bin");
  cr_assert_eq(len, 3);
  /* a chunk that fills up gives its slot to the oldest waiting chunk */
  cr_assert_not_null(chunk_take_span(cs[5], 3, 1, false));
  cr_assert_eq(cs[5]->ix_slot, SPAN_NO_SLOT, "full: no slot");
  cr_assert_eq(cs[N - 3]->ix_slot, 5, "the slot that came free, taken at once by the oldest");
  cr_assert_eq(ix.nwaiting, 2);
  expect_best_of_all(&ix, cs, N, in, "filled");
  /* a unit of the full chunk comes free: it waits, newest first */
  page_t *pg = &cs[5]->pages[CHUNK_UNITS - 3];
  pg->units = 3;
  chunk_give_span(cs[5], pg, 1);
  cr_assert_eq(ix.waiting, cs[5]);
  cr_assert_eq(ix.nwaiting, 3);
  expect_best_of_all(&ix, cs, N, in, "given back");
  /* a waiting chunk that gets a longer run than it had moves to the front,
   * where the walk looks: cs[N - 1] (a run of 1) gets one of 2 */
  page_t *top = &cs[N - 1]->pages[1]; /* the head of its 62-unit span */
  cr_assert_not_null(chunk_take_span(cs[N - 2], 1, 1, false), "one unit of cs[N - 2] taken: it stays waiting");
  cr_assert_eq(ix.waiting, cs[5]);
  top->units = 2;
  chunk_give_span(cs[N - 1], top, 1);
  cr_assert_eq(ix.waiting, cs[N - 1], "a longer run: to the front");
  cr_assert_eq(ix.nwaiting, 3);
  cr_assert_eq(ix.waiting_old, cs[N - 2]);
  expect_best_of_all(&ix, cs, N, in, "moved");
  /* a chunk that leaves gives its slot too, and a waiting chunk that leaves its place */
  span_index_leave(cs[9]);
  in[9] = false;
  cr_assert_eq(cs[N - 2]->ix_slot, 9, "the oldest waiting");
  span_index_leave(cs[N - 1]);
  in[N - 1] = false;
  cr_assert_eq(ix.nwaiting, 1);
  cr_assert_eq(ix.waiting, cs[5]);
  cr_assert_eq(ix.waiting_old, cs[5]);
  expect_best_of_all(&ix, cs, N, in, "left");
  /* random takes and gives over the last chunks, and over some slotted ones */
  uint64_t x = 0x2545F4914F6CDD1DULL;
  for (int round = 0; round < 200; round++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    unsigned i = (unsigned)(x % 2 ? N - 1 - x % 8 : x % 16);
    if (x % 5 == 0) i = (unsigned)(x >> 8) % N; /* anywhere, now and then */
    if (!in[i]) continue;
    chunk_t *c = cs[i];
    if ((x >> 33) % 3 && c->free_count) {
      cr_assert_not_null(chunk_take_span(c, 1, 1, false));
    } else {
      unsigned u = 1 + (unsigned)(x >> 40) % (CHUNK_UNITS - 1);
      if (!(c->free_units >> u & 1) && relaxed_load(c->pages[u].cls) != PAGE_TAIL) {
        page_t *one = &c->pages[u];
        if (one->units == 1 || one->units == 0) {
          one->units = 1;
          chunk_give_span(c, one, (uint64_t)round);
        }
      }
    }
    char step[32];
    snprintf(step, sizeof step, "round %d", round);
    expect_best_of_all(&ix, cs, N, in, step);
  }
  for (unsigned i = 0; i < N; i++)
    if (in[i]) span_index_leave(cs[i]);
  cr_assert_eq(ix.nwaiting, 0);
  cr_assert_null(ix.waiting);
  for (unsigned w = 0; w < SPAN_WORDS; w++) cr_assert_eq(ix.group[w].used, 0, "every slot free again");
}

/* Through an arena past SPAN_SLOTS chunks: a heap that grows to 30 chunks
 * past them, of blocks three to a chunk, maps one chunk for every three blocks all
 * the way (the first version of the index mapped one for each block past
 * 1024 chunks: the chunk being carved had no slot, so its free units went
 * unseen; a probe's 4.5 GiB of 16 KiB blocks mapped 41 GiB). */
Test(placement, a_heap_past_the_slots_fills_its_chunks) {
  sizeclass_init();
  enum { BLOCKS = 3 * (SPAN_SLOTS + 30) };
  size_t size = 1 * MiB + 1;
  unsigned units = class_info[size_class(size)].units;
  cr_assert_eq(CHUNK_UNITS / units, 3, "three blocks of %u units to a chunk", units);
  static void *blocks[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) cr_assert_not_null(blocks[i] = ebb_malloc(size), "block %d", i);
  struct ebb_stats st;
  ebb_stats(&st);
  size_t chunks = st.mapped / CHUNK_SIZE;
  cr_assert_gt(chunks, SPAN_SLOTS, "past the slots");
  cr_assert_leq(chunks, BLOCKS / 3 + 2, "%zu chunks mapped for %d blocks, three to a chunk", chunks, BLOCKS);
  for (int i = 0; i < BLOCKS; i++) ebb_free(blocks[i]);
}

/* Through an arena: the one chunk with the best fit is found however many
 * chunks fit less well, and wherever it is. The walk the index replaced looked
 * no further than 32 chunks that fit at all, newest first, so a two-unit block
 * went into a run of 3 of one of the 40 newer chunks and left the oldest
 * chunk's run of exactly 2 alone. */
Test(placement, the_best_fit_is_found_among_many_chunks_that_fit_less_well) {
  sizeclass_init();
  opt.decay_ms = 0;
  enum { CHUNKS = 41, N = CHUNKS * (CHUNK_UNITS - 1), TWO = 114688 };
  static void *blocks[N];
  full_chunks_of_64k_pages(blocks, N, CHUNKS);
  chunk_t *oldest = chunk_of(blocks[0]);
  for (int i = 0; i < N; i++) {
    unsigned u = unit_of(blocks[i]);
    if (u >= 20 && u < (chunk_of(blocks[i]) == oldest ? 22u : 23u)) {
      ebb_free(blocks[i]);
      blocks[i] = NULL;
    }
  }
  void *t = ebb_malloc(TWO);
  cr_assert_eq(chunk_of(t), oldest, "the only run of exactly two units");
  cr_assert_eq(unit_of(t), 20);
  ebb_free(t);
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
}

/* ---------------------------------------------------------------- aligned spans */

Test(placement, an_aligned_span_starts_at_a_multiple_of_its_step) {
  sizeclass_init();
  chunk_t *c = chunk_new(NULL, false, 0);
  cr_assert_not_null(c);
  unsigned at;
  cr_assert_eq(chunk_fit(c, 2, 2, false, &at), CHUNK_UNITS - 1);
  cr_assert_eq(at, 2, "unit 1 (after the header) is no multiple of 2");
  cr_assert_eq(chunk_fit(c, 16, 16, false, &at), CHUNK_UNITS - 1);
  cr_assert_eq(at, 16);
  /* free runs 3-5 (no room at a multiple of 4 for 2 units: 4-5 fits) and 9-11 (8 is taken) */
  c->free_units = span_bits(3, 3) | span_bits(9, 3);
  c->free_count = 6;
  cr_assert_eq(chunk_fit(c, 2, 4, false, &at), 3);
  cr_assert_eq(at, 4);
  c->free_units = span_bits(9, 3);
  c->free_count = 3;
  cr_assert_eq(chunk_fit(c, 2, 4, false, &at), 0, "12 is past the run");
  cr_assert_eq(chunk_fit(c, 2, 1, false, &at), 3, "unaligned, it fits");
  cr_assert_eq(at, 9);
}

/* Blocks aligned beyond a unit (up to MAX_CHUNK_ALIGN) come from chunks, many
 * to a chunk, not a mapping each (found by a probe: 65,530 live
 * aligned_alloc(128 KiB, 100) blocks reached vm.max_map_count). */
Test(placement, blocks_aligned_beyond_a_unit_share_chunks) {
  enum { N = 200 };
  static void *blocks[N];
  static const size_t aligns[] = {128 * KiB, 256 * KiB, 1 * MiB};
  ebb_free(ebb_malloc(1)); /* the thread's arena, mapped once */
  for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++) {
    size_t al = aligns[k], maps = fake_maps;
    for (int i = 0; i < N; i++) {
      blocks[i] = ebb_aligned_alloc(al, i % 2 ? 100 : al);
      cr_assert(blocks[i] && (uintptr_t)blocks[i] % al == 0, "aligned_alloc(%zu) = %p", al, blocks[i]);
      cr_assert(ebb_owns(blocks[i]));
      memset(blocks[i], 0xab, 100);
    }
    size_t per_chunk = CHUNK_SIZE / al - 1; /* the first slot holds the header */
    cr_assert_leq(fake_maps - maps, (N + per_chunk - 1) / per_chunk + 1,
                  "align %zu: %zu mappings for %d blocks", al, fake_maps - maps, N);
    for (int i = 0; i < N; i++) ebb_free(blocks[i]);
    /* freed, the spans serve again with no new mapping */
    maps = fake_maps;
    for (int i = 0; i < N; i++) cr_assert_not_null(blocks[i] = ebb_aligned_alloc(al, 100));
    cr_assert_eq(fake_maps, maps, "align %zu: the freed spans are taken again", al);
    for (int i = 0; i < N; i++) ebb_free(blocks[i]);
  }
  void *big = ebb_aligned_alloc(2 * MiB, 100); /* beyond MAX_CHUNK_ALIGN: a large block */
  cr_assert(big && (uintptr_t)big % (2 * MiB) == 0);
  ebb_free(big);
}

/* A freed aligned span is its class's last span and is taken back first
 * wherever it is, so a loop that frees and allocates aligned blocks reuses
 * the same memory and maps nothing, however many chunks the arena has (264
 * here: the search for an aligned span once looked at the newest 256 only). */
#define DEEP_CHUNKS 264
Test(placement, a_freed_aligned_span_is_taken_back_even_deep_in_the_chunk_list) {
  enum { N = 3 * DEEP_CHUNKS }; /* chunks of three 1 MiB-aligned spans each (units 16, 32, 48) */
  static void *blocks[N];
  for (int i = 0; i < N; i++) cr_assert_not_null(blocks[i] = ebb_aligned_alloc(1 * MiB, 100));
  size_t maps = fake_maps;
  void *oldest = blocks[1]; /* in the first chunk made, now the last of the arena's list */
  ebb_free(oldest);
  for (int k = 0; k < 3; k++) {
    void *p = ebb_aligned_alloc(1 * MiB, 100);
    cr_assert_eq(p, oldest, "round %d: the span just freed", k);
    ebb_free(p);
  }
  cr_assert_eq(fake_maps, maps, "no chunk mapped");
  blocks[1] = ebb_aligned_alloc(1 * MiB, 100);
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
}

/* The search for an aligned span asks the span index for chunks whose free
 * runs may hold it, wherever they are. It walked the arena's chunk list,
 * newest first, no further than 256 chunks (a probe found a walk of all 5,333
 * chunks of 16,000 live 1 MiB-aligned blocks costing 183 us a call): an
 * aligned hole in an older chunk went unseen and a chunk was mapped instead
 * (bench/loop --slots 4096 --min 65536 --max 337920 --aligned 100: 3.73 GB
 * of address space, 1.69 with the index). */
Test(placement, an_aligned_span_finds_a_hole_deep_in_a_large_heap) {
  enum { N = 3 * DEEP_CHUNKS }; /* each chunk: three 1 MiB-aligned spans, units 1-15 free (no run of 16) */
  static void *blocks[N];
  for (int i = 0; i < N; i++) cr_assert_not_null(blocks[i] = ebb_aligned_alloc(1 * MiB, 100));
  /* a hole of 16 units at unit 32 of the first chunk made, the last in the
   * list; then two in the newest chunk, which the thread's kept page
   * (one_spare_keep) and the class's last span (last_span) serve first */
  ebb_free(blocks[1]);
  ebb_free(blocks[N - 2]);
  ebb_free(blocks[N - 1]);
  size_t maps = fake_maps;
  void *p = ebb_aligned_alloc(1 * MiB, 100), *q = ebb_aligned_alloc(1 * MiB, 100);
  cr_assert((p == blocks[N - 1] && q == blocks[N - 2]) || (p == blocks[N - 2] && q == blocks[N - 1]));
  void *r = ebb_aligned_alloc(1 * MiB, 100);
  cr_assert_eq(r, blocks[1], "the hole in the oldest chunk was not found (%p, not %p)", r, blocks[1]);
  cr_assert_eq(fake_maps, maps, "a chunk was mapped while one had an aligned hole");
  blocks[1] = r;
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
}

/* Among chunks whose free runs may hold an aligned span, the one whose
 * aligned fit is shortest: a run of exactly 16 units at a 16-unit boundary
 * before a longer one elsewhere, then the longer one from its lowest aligned
 * unit. */
Test(placement, an_aligned_span_takes_the_best_aligned_fit) {
  enum { N = 3 * 4 }; /* chunk k: blocks 3k, 3k + 1, 3k + 2 at units 16, 32, 48 */
  static void *blocks[N];
  for (int i = 0; i < N; i++) cr_assert_not_null(blocks[i] = ebb_aligned_alloc(1 * MiB, 100));
  /* chunk 2: its middle span freed, a run of 16 at unit 32; chunk 1: its
   * middle and last, a run of 32 at unit 32; then two of chunk 3, which the
   * kept page and the class's last span serve first */
  ebb_free(blocks[7]);
  ebb_free(blocks[4]);
  ebb_free(blocks[5]);
  ebb_free(blocks[N - 2]);
  ebb_free(blocks[N - 1]);
  void *p = ebb_aligned_alloc(1 * MiB, 100), *q = ebb_aligned_alloc(1 * MiB, 100);
  cr_assert((p == blocks[N - 1] && q == blocks[N - 2]) || (p == blocks[N - 2] && q == blocks[N - 1]));
  void *r = ebb_aligned_alloc(1 * MiB, 100);
  cr_assert_eq(r, blocks[7], "not the exact aligned fit (%p, not %p)", r, blocks[7]);
  void *t = ebb_aligned_alloc(1 * MiB, 100), *u = ebb_aligned_alloc(1 * MiB, 100);
  cr_assert_eq(t, blocks[4], "then the longer run from its lowest aligned unit (%p)", t);
  cr_assert_eq(u, blocks[5], "and the rest of it (%p)", u);
  for (int i = 0; i < N; i++) ebb_free(blocks[i]);
}

/* ---------------------------------------------------------------- rounds */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* 64 B-1 MiB, as many blocks in each power of two (uniform inside it). */
static size_t log_uniform(uint64_t *s) {
  unsigned e = 6 + (unsigned)(rng_next(s) % 14);
  return ((size_t)1 << e) + (size_t)(rng_next(s) % ((size_t)1 << e));
}

/* Bytes of units ever made resident: pages in use plus freed ones still resident. */
static size_t resident(void) {
  struct ebb_stats s;
  ebb_stats(&s);
  return s.active + s.dirty;
}

static size_t most_active; /* the most any round had in pages in use */

/* One round of prover scratch: `bytes` of 64 B-1 MiB blocks, each written at
 * its ends, then all freed. */
static void round_of(uint64_t *rng, size_t bytes) {
  static void *blocks[16384];
  size_t n = 0, total = 0;
  while (total < bytes && n < 16384) {
    size_t size = log_uniform(rng);
    char *p = ebb_malloc(size);
    cr_assert_not_null(p);
    p[0] = p[size - 1] = 1;
    blocks[n++] = p;
    total += size;
  }
  struct ebb_stats s;
  ebb_stats(&s);
  if (s.active > most_active) most_active = s.active;
  for (size_t i = 0; i < n; i++) ebb_free(blocks[i]);
  arena_purge_all(false); /* the thread's cache goes home: every page empties */
}

/* The prover's pattern, one thread: every round's mix is new, so every round
 * places its spans differently, and a span that finds no resident run long
 * enough takes fresh units. Twelve rounds of 24 MiB end with 11 % more units
 * taken than any round had in use at once (36096 KiB for 32512; 35968 with
 * the first fit that came before best fit); placing every span lowest first,
 * 16 % (37696 KiB). The run is deterministic. */
Test(placement, rounds_of_a_changing_mix_reuse_the_resident_units) {
  uint64_t rng = 0x9E3779B97F4A7C15u;
  for (int r = 0; r < 12; r++) round_of(&rng, 24 * MiB);
  size_t taken = resident();
  cr_assert_leq(taken, most_active + most_active / 8,
                "twelve rounds took %zu KiB of units for at most %zu KiB in use", taken / KiB, most_active / KiB);
}

/* ---------------------------------------------------------------- pages of one block */

/* A block of 192 KiB-2 MiB (and of 112 and 128 KiB) is its page's only block: the page is born full, on no
 * queue and never its class's current page (arena.c, page_new_one). Before,
 * the page went onto its queue as the class's page, came off both at the
 * class's next malloc, and its free put it back on the queue to take it off
 * once more. The block's free keeps the page as the thread's one spare
 * (one_spare_keep), which the class's next block takes again; the page kept
 * before goes back to its chunk, where its class takes the same span first. */
Test(placement, a_page_of_one_block_is_born_full_and_its_free_gives_the_span_back) {
  sizeclass_init();
  size_t size = 300000;
  unsigned cls = size_class(size);
  cr_assert(class_is_one_block(cls), "class %u: %u blocks in %u units", cls, class_info[cls].count,
            class_info[cls].units);
  void *p = ebb_malloc(size), *q = ebb_malloc(size);
  cr_assert(p && q);
  arena_t *a = arena_tls;
  chunk_t *c = chunk_of(p);
  page_t *pg = chunk_page_of(c, p), *pq = chunk_page_of(chunk_of(q), q);
  cr_assert(page_is_one_block(pg));
  cr_assert_eq(pg->full, 1, "born full");
  cr_assert_eq(pg->used, 1);
  cr_assert_null(a->queues[cls].first, "on no queue");
  cr_assert_neq(a->tc[cls].direct, pg, "not the class's current page");
  cr_assert_neq(a->tc[cls].direct, pq);
  unsigned first = (unsigned)(pg - c->pages), n = pg->units;
  uint64_t span = (n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1) << first;
  cr_assert_eq(c->free_units & span, 0);
  memset(p, 0x5a, size);
  ebb_free(p);
  cr_assert_eq(c->free_units & span, 0, "the span went back instead of being kept");
  cr_assert_eq(atomic_load(&a->one_spare), pg, "the emptied page is not the thread's spare");
  cr_assert_eq(pg->used, 0);
  cr_assert_null(a->queues[cls].first, "nothing went onto the queue");
  void *r = ebb_malloc(size);
  cr_assert_eq(r, p, "the class does not take its spare");
  cr_assert_null(atomic_load(&a->one_spare));
  cr_assert_eq(pg->full, 1, "the page taken again is full");
  ebb_free(q);
  cr_assert_eq(atomic_load(&a->one_spare), pq);
  ebb_free(r);
  cr_assert_eq(atomic_load(&a->one_spare), pg, "the page emptied last is not the spare");
  chunk_t *cq = chunk_of(q);
  unsigned fq = (unsigned)(pq - cq->pages);
  uint64_t sq = (n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1) << fq;
  cr_assert_eq(cq->free_units & sq, sq, "the spare before did not go back to its chunk");
  cr_assert_eq(cq->dirty_units & sq, sq, "and resident");
  void *s2 = ebb_malloc(size), *s3 = ebb_malloc(size);
  cr_assert_eq(s2, p, "the spare first");
  cr_assert_eq(s3, q, "then the span the class gave back last");
  ebb_free(s2);
  ebb_free(s3);
  /* a first-class arena's reset: the class takes back the span its live block had */
  ebb_arena_t *fa = ebb_arena_create();
  cr_assert_not_null(fa);
  void *x = ebb_arena_malloc(fa, size);
  cr_assert_not_null(x);
  ebb_arena_reset(fa);
  cr_assert_eq(ebb_arena_malloc(fa, size), x, "after the reset, the same place");
  ebb_arena_destroy(fa);
}

/* One-block pages are colored (arena.c, page_color): the block starts a
 * multiple of 64 bytes into its span, up to 4032, picked by the span's
 * address, within what the request leaves of the class's size. Spans that
 * all started their blocks on a unit boundary made buffers written in step
 * compete for the same cache sets (bench/bigbuf). */
#define ONE 300000
static size_t color_of(const void *p) { return (uintptr_t)p & (UNIT_SIZE - 1); }

Test(placement, one_block_pages_start_their_block_at_a_color_within_the_slack) {
  sizeclass_init();
  unsigned cls = size_class(ONE);
  size_t cs = class_info[cls].size;
  cr_assert(class_is_one_block(cls));
  cr_assert_geq(cs - ONE, 4096);
  enum { N = 16 };
  void *v[N];
  uint64_t seen = 0;
  for (int i = 0; i < N; i++) {
    cr_assert_not_null(v[i] = ebb_malloc(ONE));
    size_t c = color_of(v[i]);
    cr_assert_eq(c % 64, 0, "block %d at %zu bytes into its span", i, c);
    cr_assert_lt(c, 4096);
    cr_assert_eq(ebb_malloc_usable_size(v[i]), cs - c, "the usable size is the class's less the color");
    seen |= (uint64_t)1 << (c / 64);
  }
  cr_assert_geq(__builtin_popcountll(seen), 4, "%d spans, %d colors", N, __builtin_popcountll(seen));
  for (int i = 0; i < N; i++) memset(v[i], i, ebb_malloc_usable_size(v[i]));
  for (int i = 0; i < N; i++) {
    unsigned char *b = v[i];
    size_t n = ebb_malloc_usable_size(b);
    cr_assert(b[0] == i && b[n - 1] == i, "block %d was overwritten", i);
  }
  for (int i = 0; i < N; i++) ebb_free(v[i]);
  /* no slack: no color; an aligned block neither */
  void *full = ebb_malloc(cs);
  cr_assert_eq(color_of(full), 0);
  void *al = ebb_aligned_alloc(2 * UNIT_SIZE, ONE);
  cr_assert_eq((uintptr_t)al % (2 * UNIT_SIZE), 0);
  ebb_free(full);
  ebb_free(al);
  ebb_trim();
}

/* The thread's kept page (one_spare) serves only a request its colored block
 * holds; a larger one takes a page of its own, uncolored. */
/* Blocks of ONE into v until one has a color; that one (the last); *n: how many. */
static void *a_colored_block(void **v, int *n) {
  sizeclass_init();
  void *p = NULL;
  for (*n = 0; *n < 16 && !p; (*n)++) {
    v[*n] = ebb_malloc(ONE);
    if (color_of(v[*n])) p = v[*n];
  }
  cr_assert_not_null(p, "16 spans, none colored");
  return p;
}

Test(placement, a_kept_colored_page_serves_only_what_its_block_holds) {
  void *v[16];
  int n;
  void *p = a_colored_block(v, &n);
  size_t cs = class_info[size_class(ONE)].size;
  ebb_free(p);
  cr_assert_eq(atomic_load(&arena_tls->one_spare), chunk_page_of(chunk_of(p), p));
  void *q = ebb_malloc(cs);
  cr_assert_neq(q, p);
  cr_assert_eq(color_of(q), 0);
  cr_assert_geq(ebb_malloc_usable_size(q), cs);
  memset(q, 1, cs);
  void *r = ebb_malloc(ONE);
  cr_assert_eq(r, p, "a request the kept block holds does not take it");
  ebb_free(q);
  ebb_free(r);
  for (int i = 0; i < n; i++)
    if (v[i] != p) ebb_free(v[i]);
  ebb_trim();
}

/* A colored block freed by another thread: its page comes back to the
 * owner's queue (arena_drain_remote), from where any malloc of the class may
 * take its block, so the page is uncolored first. */
static void *free_it(void *p) {
  ebb_free(p);
  return NULL;
}

Test(placement, a_colored_page_freed_by_another_thread_serves_the_whole_class_again) {
  void *v[16];
  int n;
  void *p = a_colored_block(v, &n);
  size_t cs = class_info[size_class(ONE)].size;
  page_t *pg = chunk_page_of(chunk_of(p), p);
  memset(p, 0xff, ebb_malloc_usable_size(p)); /* its span no longer reads as zeroes */
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, free_it, p), 0);
  pthread_join(t, NULL);
  unsigned char *q = ebb_calloc(1, cs); /* drains the remote page: its block, uncolored */
  for (size_t i = 0; i < cs; i++)
    cr_assert_eq(q[i], 0, "calloc's block not cleared at %zu (the span was taken as fresh zeroes)", i);
  cr_assert_eq(chunk_page_of(chunk_of(q), q), pg, "the page another thread emptied was not used again");
  cr_assert_eq(color_of(q), 0);
  cr_assert_eq(pg->color, 0);
  cr_assert_geq(ebb_malloc_usable_size(q), cs);
  memset(q, 2, cs);
  ebb_free(q);
  for (int i = 0; i < n; i++)
    if (v[i] != p) ebb_free(v[i]);
  ebb_trim();
}

/* Two threads freeing a one-block page's block at once can both pass free's
 * checks; when the other thread's push lands first, the block is on the
 * page's remote list, and the owner's free must name the double free instead
 * of putting the block on its local list too, from where it would be handed
 * out twice (found by a probe: 68 of 1000 runs). The other thread's push is
 * written here as it leaves the page. */
Test(placement, the_owners_free_of_a_one_block_page_whose_block_another_thread_freed_aborts,
     .signal = SIGABRT) {
  sizeclass_init();
  block_t *p = ebb_malloc(300000);
  cr_assert_not_null(p);
  page_t *pg = chunk_page_of(chunk_of(p), p);
  cr_assert(page_is_one_block(pg) && pg->full);
  p->next = NULL;
  atomic_store(&pg->xfree, XFREE_PUSHED(atomic_load(&pg->xfree), p, 1));
  owner_enter(arena_tls);
  arena_return_slow(arena_tls, pg, p);
}
