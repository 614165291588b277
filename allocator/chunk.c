/* chunk.c — owns chunk mapping, the pool of retired chunks, and the unit
 * bitmaps (chunk.h).
 * May call: os_map_aligned, os_purge, registry. Must never: touch a page's free
 * lists, run without the owning arena's lock (except chunk_new and
 * chunk_retire), or unmap a chunk. */
#include "chunk.h"
#include "os.h"
#include "registry.h"

static spinlock_t pool_lock;
static chunk_t *warm_new, *warm_old; /* pooled warm chunks, newest first (next: older, prev: newer) */
static chunk_t *clean;               /* pooled purged chunks, linked by next */
static atomic_size_t pool_count, warm_count, warm_dirty;

void chunk_pool_lock(void) { spin_lock(&pool_lock); }
void chunk_pool_unlock(void) { spin_unlock(&pool_lock); }
size_t chunk_pool_bytes(void) { return atomic_load_explicit(&pool_count, memory_order_relaxed) * CHUNK_SIZE; }
size_t chunk_pool_dirty(void) { return atomic_load_explicit(&warm_dirty, memory_order_relaxed); }
size_t chunk_pool_warm_bytes(void) { return atomic_load_explicit(&warm_count, memory_order_relaxed) * CHUNK_SIZE; }

static size_t units_bytes(uint64_t m) { return (size_t)popcount64(m) * UNIT_SIZE; }
#define pooled_since dirty_since[0] /* unit 0 (the header) is never a dirty unit */

static void warm_unlink_locked(chunk_t *c) {
  if (c->prev) c->prev->next = c->next;
  else warm_new = c->next;
  if (c->next) c->next->prev = c->prev;
  else warm_old = c->prev;
  atomic_fetch_sub_explicit(&warm_dirty, units_bytes(c->dirty_units), memory_order_relaxed);
  atomic_fetch_sub_explicit(&warm_count, 1, memory_order_relaxed);
}

static void clean_push_locked(chunk_t *c) {
  c->next = clean;
  clean = c;
}

static chunk_t *pool_pop(void) {
  spin_lock(&pool_lock);
  chunk_t *c = warm_new;
  if (c)
    warm_unlink_locked(c);
  else if ((c = clean))
    clean = c->next;
  if (c) atomic_fetch_sub_explicit(&pool_count, 1, memory_order_relaxed);
  spin_unlock(&pool_lock);
  return c;
}

/* Dirty since now: the units of resident that were not dirty before (in a
 * page until now); those that were keep their time, so a unit that goes from
 * one arena to another through the pool, unused, still goes back one decay
 * time after it was freed, not after its last move. */
static void dirty_from_now(chunk_t *c, uint64_t resident, uint64_t now) {
  for (uint64_t m = resident & ~c->dirty_units; m; m &= m - 1) c->dirty_since[__builtin_ctzll(m)] = now;
}

/* Every unit free; what lookups read of an unused unit says "no block". */
static void reset_units(chunk_t *c, uint64_t resident, uint64_t now) {
  dirty_from_now(c, resident, now);
  for (unsigned i = 0; i < CHUNK_UNITS; i++) {
    page_t *pg = &c->pages[i];
    relaxed_store(pg->cls, (uint8_t)PAGE_UNUSED);
    relaxed_store(pg->magic, 0);
    relaxed_store(pg->head_back, 0);
    page_set_carved(pg, 0);
    page_set_slow(pg, true);
    page_set_cache(pg);
  }
  c->free_units = CHUNK_ALL_FREE;
  c->dirty_units = resident & CHUNK_ALL_FREE;
  c->free_count = CHUNK_UNITS - 1;
  chunk_reindex(c);
}

/* A fresh or purged chunk reads as zeroes; a warm one has its old descriptors. */
chunk_t *chunk_new(struct arena *a, bool first_class, uint64_t now) {
  chunk_t *c = pool_pop();
  uint64_t resident = 0;
  if (c)
    resident = c->dirty_units; /* its zero_units still hold */
  else if ((c = os_map_aligned(CHUNK_SIZE, CHUNK_SIZE)))
    c->zero_units = CHUNK_ALL_FREE;
  else
    return NULL;
  c->kind = HDR_CHUNK;
  c->ix = NULL; /* a pooled chunk left its arena's index */
  relaxed_store(c->arena, a);
  relaxed_store(c->first_class, (uint32_t)first_class);
  c->next = c->prev = NULL;
  reset_units(c, resident, now);
  if (!registry_set(c, c)) {
    chunk_retire(c);
    return NULL;
  }
  return c;
}

/* Returns all of c to the kernel with MADV_DONTNEED (stale readers see
 * zeroes); every unit then reads as zeroes (noted after the purge, which
 * clears the header too), unless the kernel refused (locked pages: the old
 * bytes stay, and no unit may pass for zeroes). */
static void purge_whole(chunk_t *c) {
  bool zeroed = os_purge(c, CHUNK_SIZE, false);
  c->zero_units = zeroed ? CHUNK_ALL_FREE : 0;
}

void chunk_retire(chunk_t *c) {
  span_index_leave(c);
  registry_clear(c);
  purge_whole(c);
  spin_lock(&pool_lock);
  clean_push_locked(c);
  atomic_fetch_add_explicit(&pool_count, 1, memory_order_relaxed);
  spin_unlock(&pool_lock);
}

/* The warm list stays in the order of pooled_since, newest first: a chunk
 * whose units were freed a while ago (an arena's empty chunk, pooled at its
 * next decay pass) goes in behind those freed since, so the pool's decay,
 * which stops at the first chunk not yet due from the old end, finds it on
 * time. */
void chunk_pool_put(chunk_t *c, uint64_t resident, uint64_t now) {
  resident &= CHUNK_ALL_FREE;
  if (!resident) return chunk_retire(c);
  span_index_leave(c);
  registry_clear(c);
  dirty_from_now(c, resident, now);
  c->dirty_units = resident;
  c->pooled_since = chunk_oldest_dirty(c);
  spin_lock(&pool_lock);
  chunk_t *after = NULL, *before = warm_new; /* c goes between them */
  while (before && before->pooled_since > c->pooled_since) after = before, before = before->next;
  c->prev = after;
  c->next = before;
  if (after) after->next = c;
  else warm_new = c;
  if (before) before->prev = c;
  else warm_old = c;
  atomic_fetch_add_explicit(&warm_dirty, units_bytes(resident), memory_order_relaxed);
  atomic_fetch_add_explicit(&warm_count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool_count, 1, memory_order_relaxed);
  spin_unlock(&pool_lock);
}

void chunk_reset(chunk_t *c, uint64_t resident, uint64_t now) { reset_units(c, resident, now); }

size_t chunk_pool_decay(uint64_t cutoff, size_t max_bytes) {
  size_t bytes = 0;
  spin_lock(&pool_lock);
  while (warm_old && warm_old->pooled_since <= cutoff && bytes < max_bytes) {
    chunk_t *c = warm_old;
    bytes += units_bytes(c->dirty_units);
    warm_unlink_locked(c);
    purge_whole(c);
    clean_push_locked(c);
  }
  spin_unlock(&pool_lock);
  return bytes;
}

static uint64_t span_mask(unsigned first, unsigned n) {
  uint64_t m = n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
  return m << first;
}

static page_t *take_at(chunk_t *c, unsigned first, unsigned n) {
  uint64_t m = span_mask(first, n);
  c->pages[first].fresh_zero = (c->zero_units & m) == m;
  c->free_units &= ~m;
  c->dirty_units &= ~m;
  c->zero_units &= ~m;
  c->free_count -= n;
  chunk_reindex(c);
  /* A tail that is already this span's (the span given back and taken again
   * whole, as chunk_give_span leaves its tails) is only read: a 1 MiB block
   * has 15 tails, each in a cache line of its own that every chunk's same
   * unit shares a cache set with. */
  for (unsigned k = 1; k < n; k++) {
    page_t *t = &c->pages[first + k];
    if (relaxed_load(t->cls) == PAGE_TAIL && relaxed_load(t->head_back) == (uint16_t)(k * sizeof(page_t))) continue;
    relaxed_store(t->magic, 0);
    page_set_carved(t, 0);
    relaxed_store(t->cls, (uint8_t)PAGE_TAIL);
    page_set_cache(t);
    relaxed_store(t->head_back, (uint16_t)(k * sizeof(page_t)));
  }
  return &c->pages[first];
}

/* Placement: best fit, the shortest free run that holds n units (a run of
 * exactly n is usually where a span of the same length was freed), single-unit
 * pages at the top end of their run and from the top of the chunk down, longer
 * spans at the bottom end and from the bottom up (jemalloc's extent heaps and
 * mimalloc's span queues, indexed by size, likewise start at the smallest size
 * that fits).
 *   Placed lowest first, a round's small pages cut the resident runs that the
 * next round's long spans needed, and those took fresh units beside them:
 * prover scratch (2 threads x 32 MiB of 64 B-1 MiB blocks a round, 20 ms
 * apart) peaked at 98.0 MiB; from the top down, 84.7, 2392 -> 2059 faults a
 * round, while instance churn, whose spans come back in the same order every
 * request, faults no more (0.03 a request at 1-10 ms gaps with the background
 * thread). Placed in the first run that fits, from the top down, a single
 * unit still cut the hole a long span had just left whenever the hole was the
 * chunk's highest: Ghostscript (mimalloc-bench's gs) frees and mallocs a
 * 541 KB block (a 9-unit span) every page it renders, and a one-unit page
 * placed in between left 8 units each time, so every page took a new chunk
 * and freed memory piled up resident: 67 MB peak RSS against glibc's 34; best
 * fit, 38 MB. */
unsigned chunk_fit(const chunk_t *c, unsigned n, unsigned step, bool warm_only, unsigned *at) {
  if (c->free_count < n) return 0;
  uint64_t m = (warm_only ? c->free_units & c->dirty_units : c->free_units) & CHUNK_ALL_FREE;
  unsigned best = 0, best_len = CHUNK_UNITS + 1;
  for (uint64_t r = m; r;) { /* each maximal run of free units, lowest first (unit 0 is never free) */
    unsigned a = (unsigned)__builtin_ctzll(r), len = (unsigned)__builtin_ctzll(~(r >> a));
    unsigned s = (a + step - 1) & ~(step - 1); /* its first unit at a multiple of step */
    /* ties: a single unit takes the highest run, a longer span the lowest */
    if (s + n <= a + len && (len < best_len || (n == 1 && len == best_len))) {
      best = n == 1 ? a + len - 1 : s, best_len = len;
      if (len == n && n > 1) break;
    }
    r &= ~span_mask(a, len);
  }
  if (best_len > CHUNK_UNITS) return 0;
  *at = best;
  return best_len;
}

static uint64_t run_lengths(uint64_t m) {
  uint64_t lens = 0;
  for (uint64_t r = m; r;) {
    unsigned a = (unsigned)__builtin_ctzll(r), len = (unsigned)__builtin_ctzll(~(r >> a));
    lens |= (uint64_t)1 << len; /* len <= CHUNK_UNITS - 1: unit 0 is never free */
    r &= ~span_mask(a, len);
  }
  return lens;
}

/* ------------------------------------------------------------ span index */

/* Sets (on) or clears slot s's bit in bin [warm][l], and the summaries. */
static void bin_set(span_index_t *ix, unsigned s, unsigned warm, unsigned l, bool on) {
  unsigned w = s / 64;
  uint64_t bit = (uint64_t)1 << (s % 64), *b = &ix->group[w].bins[warm][l];
  if (on) {
    *b |= bit;
    ix->words[warm][l] |= (uint64_t)1 << w;
    ix->lens[warm] |= (uint64_t)1 << l;
  } else {
    *b &= ~bit;
    if (*b) return;
    ix->words[warm][l] &= ~((uint64_t)1 << w);
    if (!ix->words[warm][l]) ix->lens[warm] &= ~((uint64_t)1 << l);
  }
}

/* Slot s's bins of one kind ([0] or [1]) from the run lengths old to lens. */
static void bins_move(span_index_t *ix, unsigned s, unsigned warm, uint64_t old, uint64_t lens) {
  for (uint64_t d = old ^ lens; d; d &= d - 1) {
    unsigned l = (unsigned)__builtin_ctzll(d);
    bin_set(ix, s, warm, l, (lens >> l) & 1);
  }
}

static void wait_push(span_index_t *ix, chunk_t *c) {
  c->ix_prev = NULL;
  c->ix_next = ix->waiting;
  if (ix->waiting) ix->waiting->ix_prev = c;
  else ix->waiting_old = c;
  ix->waiting = c;
  c->ix_waiting = 1;
  ix->nwaiting++;
}

static void wait_remove(span_index_t *ix, chunk_t *c) {
  if (c->ix_prev) c->ix_prev->ix_next = c->ix_next;
  else ix->waiting = c->ix_next;
  if (c->ix_next) c->ix_next->ix_prev = c->ix_prev;
  else ix->waiting_old = c->ix_prev;
  c->ix_next = c->ix_prev = NULL;
  c->ix_waiting = 0;
  ix->nwaiting--;
}

/* The lowest free slot for c, its bins set from its runs; false if none. */
static bool slot_take(span_index_t *ix, chunk_t *c) {
  uint64_t open = ~ix->full_words & (SPAN_WORDS == 64 ? ~(uint64_t)0 : ((uint64_t)1 << SPAN_WORDS) - 1);
  if (!open) return false;
  unsigned w = (unsigned)__builtin_ctzll(open);
  struct span_group *g = &ix->group[w];
  unsigned i = (unsigned)__builtin_ctzll(~g->used);
  g->used |= (uint64_t)1 << i;
  if (!~g->used) ix->full_words |= (uint64_t)1 << w;
  g->slot[i] = c;
  c->ix_slot = w * 64 + i;
  for (unsigned warm = 0; warm < 2; warm++) bins_move(ix, c->ix_slot, warm, 0, c->ix_lens[warm]);
  return true;
}

/* c gives up its slot; the oldest waiting chunk takes it. */
static void slot_release(span_index_t *ix, chunk_t *c) {
  unsigned s = c->ix_slot;
  for (unsigned warm = 0; warm < 2; warm++) bins_move(ix, s, warm, c->ix_lens[warm], 0);
  struct span_group *g = &ix->group[s / 64];
  g->slot[s % 64] = NULL;
  g->used &= ~((uint64_t)1 << (s % 64));
  ix->full_words &= ~((uint64_t)1 << (s / 64));
  c->ix_slot = SPAN_NO_SLOT;
  chunk_t *w = ix->waiting_old;
  if (w) {
    wait_remove(ix, w);
    slot_take(ix, w);
  }
}

void chunk_reindex(chunk_t *c) {
  uint64_t lens[2] = {run_lengths(c->free_units & CHUNK_ALL_FREE),
                      run_lengths(c->free_units & c->dirty_units & CHUNK_ALL_FREE)};
  uint64_t before = c->ix_lens[0];
  span_index_t *ix = c->ix;
  if (ix && c->ix_slot != SPAN_NO_SLOT)
    for (unsigned warm = 0; warm < 2; warm++) bins_move(ix, c->ix_slot, warm, c->ix_lens[warm], lens[warm]);
  c->ix_lens[0] = lens[0];
  c->ix_lens[1] = lens[1];
  if (!ix) return;
  bool wants = c->free_count != 0; /* a slot, or a place on the waiting list */
  if (c->ix_slot != SPAN_NO_SLOT) {
    if (!wants) slot_release(ix, c);
  } else if (c->ix_waiting) {
    if (!wants) {
      wait_remove(ix, c);
    } else if (before && lens[0] >> (63 - __builtin_clzll(before)) > 1 && ix->waiting != c) {
      /* a longer run than it had: to the front, where the search's walk
       * looks (found by a probe: past 4096 chunks, frees into waiting chunks
       * the walk no longer reached left 4 GiB of free runs unseen, and
       * mapped memory grew to 1.39x active; moved, 1.16x) */
      wait_remove(ix, c);
      wait_push(ix, c);
    }
  } else if (wants && !slot_take(ix, c)) {
    wait_push(ix, c);
  }
}

chunk_t *span_index_waiting_best(const span_index_t *ix, unsigned n, bool warm, chunk_t *best, unsigned *len) {
  unsigned seen = 0;
  if (best && *len == n) return best;
  for (chunk_t *c = ix->waiting; c && seen++ < SPAN_WAITING_SCAN; c = c->ix_next) {
    unsigned l = chunk_fit_indexed(c, n, warm);
    if (l && (!best || l < *len)) best = c, *len = l;
    if (l == n) break;
  }
  return best;
}

/* A run of at least n + step - 1 units holds n at a multiple of step
 * wherever it starts; a shorter one (of at least n) may. So the chunks with
 * such shorter runs are tried first, each with chunk_fit (its header read:
 * at most SPAN_ALIGNED_PROBES of them a call, the best of them taken, an
 * exact fit at once), then the first chunk of the shortest bin of runs that
 * surely hold it, then the newest waiting chunks, as
 * span_index_waiting_best walks them.
 *   The chunks tried are taken in slot order from where the last search of
 * the same shape and kind ended (ix->aligned_from: the chunk it took, if it
 * read it, else the one after the last it read), wrapping around, so that
 * each is read in turn. Probes broke each version before this one, each
 * with chunks whose runs were long enough but not aligned, which hid exact
 * holes from every search while each aligned block mapped a chunk (100 holes
 * behind 80 such chunks, +200 MiB): tried from the lowest slot every time;
 * marked for one shape until any change (a search for another shape, a unit
 * freed into them and taken back, undid the marks); a record per chunk of
 * what it held aligned, kept up by its frees (a span freed beside such a run
 * and taken back left it too high, and it cost every free into such a chunk
 * up to 330 instructions); one cursor for all shapes (another shape's fit in
 * a low slot sent it back every time); a cursor left on a chunk the search
 * read but did not take. */
chunk_t *span_index_aligned_best(span_index_t *ix, unsigned n, unsigned step, bool warm, unsigned *at, unsigned *len) {
  chunk_t *best = NULL, *read_best = NULL;
  unsigned best_at = 0, best_len = CHUNK_UNITS + 1, read_slot = 0, probes = 0, sure = n + step - 1;
  unsigned k = (unsigned)__builtin_ctz(step) - 1, m = n / step - 1;
  ebb_assert(step >= 2 && k < SPAN_STEPS && n % step == 0 && m < SPAN_SPANS_A_STEP);
  uint16_t *from_p = &ix->aligned_from[warm][k][m]; /* a cursor a shape: another's search moves not this */
  unsigned from = *from_p, next = from;
  uint64_t maybe = ix->lens[warm] >> n << n;
  if (sure < 64) maybe &= ((uint64_t)1 << sure) - 1;
  if (maybe) {
    uint64_t groups = 0; /* groups with a chunk in any of those bins */
    for (uint64_t b = maybe; b; b &= b - 1) groups |= ix->words[warm][__builtin_ctzll(b)];
    /* the start group from `from` up, every other group, then the start group below `from` */
    for (unsigned lap = 0; lap <= SPAN_WORDS && probes < SPAN_ALIGNED_PROBES; lap++) {
      unsigned w = (from / 64 + lap) % SPAN_WORDS;
      if (!((groups >> w) & 1)) continue;
      uint64_t cand = 0;
      for (uint64_t b = maybe; b; b &= b - 1) cand |= ix->group[w].bins[warm][__builtin_ctzll(b)];
      if (lap == 0) cand &= ~(uint64_t)0 << (from % 64);
      else if (lap == SPAN_WORDS) cand &= ((uint64_t)1 << (from % 64)) - 1;
      for (; cand && probes < SPAN_ALIGNED_PROBES; cand &= cand - 1, probes++) {
        unsigned i = (unsigned)__builtin_ctzll(cand), a = 0;
        chunk_t *c = ix->group[w].slot[i];
        unsigned got = chunk_fit(c, n, step, warm, &a);
        next = (w * 64 + i + 1) % SPAN_SLOTS;
        if (got && got < best_len) best = read_best = c, best_at = a, best_len = got, read_slot = w * 64 + i;
        if (got == n) break;
      }
      if (best_len == n) break;
    }
  }
  unsigned l = 0;
  chunk_t *c = best_len != n && sure < 64 ? span_index_best(ix, sure, warm, &l) : NULL;
  if (c && l < best_len) { /* its shortest run that surely holds the span */
    unsigned a = 0, got = chunk_fit(c, n, step, warm, &a);
    ebb_assert(got && got <= l);
    if (got && got < best_len) best = c, best_at = a, best_len = got;
  }
  probes = 0;
  for (c = ix->waiting; c && best_len != n && probes++ < SPAN_WAITING_SCAN; c = c->ix_next) {
    if (!chunk_fit_indexed(c, n, warm)) continue; /* no run long enough (its lengths, not its bitmaps) */
    unsigned a = 0, got = chunk_fit(c, n, step, warm, &a);
    if (got && got < best_len) best = c, best_at = a, best_len = got;
  }
  /* the next search of this shape starts at the chunk taken, if it was one
   * read here, else after the last one read */
  *from_p = (uint16_t)(best && best == read_best ? read_slot : next);
  *at = best_at;
  *len = best_len;
  return best;
}

void span_index_join(span_index_t *ix, chunk_t *c) {
  c->ix = ix;
  c->ix_slot = SPAN_NO_SLOT;
  c->ix_waiting = 0;
  c->ix_lens[0] = c->ix_lens[1] = 0;
  chunk_reindex(c);
}

void span_index_leave(chunk_t *c) {
  span_index_t *ix = c->ix;
  if (!ix) return;
  if (c->ix_slot != SPAN_NO_SLOT) slot_release(ix, c);
  else if (c->ix_waiting) wait_remove(ix, c);
  c->ix = NULL;
}

unsigned chunk_fit_len(const chunk_t *c, unsigned n, bool warm_only) {
  return lens_fit(run_lengths((warm_only ? c->free_units & c->dirty_units : c->free_units) & CHUNK_ALL_FREE), n);
}

page_t *chunk_take_span(chunk_t *c, unsigned n, unsigned step, bool warm_only) {
  unsigned at;
  return chunk_fit(c, n, step, warm_only, &at) ? take_at(c, at, n) : NULL;
}

page_t *chunk_take_span_at(chunk_t *c, page_t *pg, unsigned n) {
  unsigned first = (unsigned)(pg - c->pages);
  if (first == 0 || first + n > CHUNK_UNITS) return NULL;
  uint64_t m = span_mask(first, n);
  return (c->free_units & m) == m ? take_at(c, first, n) : NULL;
}

/* The head keeps its geometry and the tail units keep pointing at it, so free()
 * can still tell a double free of any of its blocks from a wild pointer;
 * page_set_slow keeps the fast path away. The tails are not written at all:
 * what a lookup reads of one (no block, the way to its head) still holds, the
 * head answers for the span, and take_at rewrites a tail only where a span
 * taken later puts its head or tail in another place. Writing them cost a
 * 1 MiB block 15 descriptors' cache lines each way, stores that a locked
 * instruction then waited for (bench/loop --slots 128 --batch 1, 1 MiB
 * blocks: 336 -> 255 ns a pair). */
void chunk_give_span(chunk_t *c, page_t *pg, uint64_t now) {
  unsigned first = (unsigned)(pg - c->pages), n = pg->units;
  uint64_t m = span_mask(first, n);
  relaxed_store(pg->cls, (uint8_t)PAGE_UNUSED);
  page_set_slow(pg, true);
  page_set_cache(pg);
  for (unsigned k = 0; k < n; k++) c->dirty_since[first + k] = now;
  c->free_units |= m;
  c->dirty_units |= m;
  c->free_count += n;
  chunk_reindex(c);
}

size_t chunk_purge(chunk_t *c, uint64_t cutoff, size_t max_bytes, bool use_free) {
  uint64_t m = 0;
  size_t want = 0;
  for (uint64_t d = c->dirty_units; d && want < max_bytes; d &= d - 1) {
    unsigned i = (unsigned)__builtin_ctzll(d);
    if (c->dirty_since[i] <= cutoff) m |= (uint64_t)1 << i, want += UNIT_SIZE;
  }
  c->dirty_units &= ~m;
  if (m) chunk_reindex(c);
  size_t bytes = 0;
  while (m) { /* one madvise per contiguous run */
    unsigned a = (unsigned)__builtin_ctzll(m);
    uint64_t rest = m >> a;
    unsigned len = ~rest ? (unsigned)__builtin_ctzll(~rest) : 64 - a;
    /* zeroes only where MADV_DONTNEED took the bytes: MADV_FREE may leave
     * them, and on locked pages (mlockall) the kernel refuses (found by a
     * probe: calloc returned the old bytes after ebb_trim under mlockall).
     * A refused run still leaves the dirty set, so no pass retries it forever. */
    if (os_purge((char *)c + ((size_t)a << UNIT_SHIFT), (size_t)len << UNIT_SHIFT, use_free))
      c->zero_units |= span_mask(a, len);
    bytes += (size_t)len << UNIT_SHIFT;
    m &= ~span_mask(a, len);
  }
  return bytes;
}

uint64_t chunk_oldest_dirty(const chunk_t *c) {
  uint64_t oldest = 0;
  for (uint64_t d = c->dirty_units; d; d &= d - 1) {
    uint64_t s = c->dirty_since[(unsigned)__builtin_ctzll(d)];
    if (!oldest || s < oldest) oldest = s;
  }
  return oldest;
}
