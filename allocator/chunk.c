/* chunk.c — owns chunk mapping, the pool of retired chunks, and the unit
 * bitmaps (chunk.h).
 * May call: os_map_aligned, os_purge, registry. Must never: touch a page's free
 * lists, run without the owning arena's lock (except chunk_new and
 * chunk_retire), or unmap a chunk. */
#include "chunk.h"
#include "os.h"
#include "registry.h"

static spinlock_t pool_lock;
static chunk_t *pool;             /* retired chunks, purged, linked by next */
static atomic_size_t pool_count;

void chunk_pool_lock(void) { spin_lock(&pool_lock); }
void chunk_pool_unlock(void) { spin_unlock(&pool_lock); }
size_t chunk_pool_bytes(void) { return atomic_load_explicit(&pool_count, memory_order_relaxed) * CHUNK_SIZE; }

static chunk_t *pool_pop(void) {
  spin_lock(&pool_lock);
  chunk_t *c = pool;
  if (c) {
    pool = c->next;
    atomic_fetch_sub_explicit(&pool_count, 1, memory_order_relaxed);
  }
  spin_unlock(&pool_lock);
  return c;
}

/* A pooled chunk reads as zeroes (it was purged whole), like a fresh one; only
 * the fields that are not zero when unused are written. */
chunk_t *chunk_new(struct arena *a, bool first_class) {
  chunk_t *c = pool_pop();
  if (!c && !(c = os_map_aligned(CHUNK_SIZE, CHUNK_SIZE))) return NULL;
  c->kind = HDR_CHUNK;
  relaxed_store(c->arena, a);
  relaxed_store(c->first_class, (uint32_t)first_class);
  c->free_units = CHUNK_ALL_FREE;
  c->dirty_units = 0; /* fresh or purged: not resident */
  c->free_count = CHUNK_UNITS - 1;
  c->next = c->prev = NULL;
  for (unsigned i = 0; i < CHUNK_UNITS; i++) relaxed_store(c->pages[i].cls, (uint8_t)PAGE_UNUSED);
  if (!registry_set(c, c)) {
    chunk_retire(c);
    return NULL;
  }
  return c;
}

void chunk_retire(chunk_t *c) {
  registry_clear(c);
  os_purge(c, CHUNK_SIZE, false); /* MADV_DONTNEED: stale readers see zeroes */
  spin_lock(&pool_lock);
  c->next = pool;
  pool = c;
  atomic_fetch_add_explicit(&pool_count, 1, memory_order_relaxed);
  spin_unlock(&pool_lock);
}

/* Bit i set iff bits i..i+n-1 of m are all set. */
static uint64_t runs_of(uint64_t m, unsigned n) {
  uint64_t r = m;
  for (unsigned k = 1; k < n && r; k++) r &= m >> k;
  return r;
}

static uint64_t span_mask(unsigned first, unsigned n) {
  uint64_t m = n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
  return m << first;
}

static page_t *take_at(chunk_t *c, unsigned first, unsigned n) {
  uint64_t m = span_mask(first, n);
  c->free_units &= ~m;
  c->dirty_units &= ~m;
  c->free_count -= n;
  for (unsigned k = 1; k < n; k++) {
    page_t *t = &c->pages[first + k];
    relaxed_store(t->magic, 0);
    relaxed_store(t->cls, (uint8_t)PAGE_TAIL);
    relaxed_store(t->head_back, (uint16_t)(k * sizeof(page_t)));
  }
  return &c->pages[first];
}

page_t *chunk_take_span(chunk_t *c, unsigned n, bool warm_only) {
  if (c->free_count < n) return NULL;
  uint64_t runs = runs_of(warm_only ? c->free_units & c->dirty_units : c->free_units, n);
  if (!runs) return NULL;
  return take_at(c, (unsigned)__builtin_ctzll(runs), n);
}

page_t *chunk_take_span_at(chunk_t *c, page_t *pg, unsigned n) {
  unsigned first = (unsigned)(pg - c->pages);
  if (first == 0 || first + n > CHUNK_UNITS) return NULL;
  uint64_t m = span_mask(first, n);
  return (c->free_units & m) == m ? take_at(c, first, n) : NULL;
}

/* The head keeps its geometry and the tail units keep pointing at it, so free()
 * can still tell a double free of any of its blocks from a wild pointer;
 * slow_free keeps the fast path away. */
void chunk_give_span(chunk_t *c, page_t *pg, uint64_t now) {
  unsigned first = (unsigned)(pg - c->pages), n = pg->units;
  uint64_t m = span_mask(first, n);
  for (unsigned k = 0; k < n; k++) {
    relaxed_store(c->pages[first + k].cls, (uint8_t)PAGE_UNUSED);
    c->pages[first + k].slow_free = 1;
    c->dirty_since[first + k] = now;
  }
  c->free_units |= m;
  c->dirty_units |= m;
  c->free_count += n;
}

size_t chunk_purge(chunk_t *c, uint64_t cutoff, size_t max_bytes, bool use_free) {
  uint64_t m = 0;
  size_t want = 0;
  for (uint64_t d = c->dirty_units; d && want < max_bytes; d &= d - 1) {
    unsigned i = (unsigned)__builtin_ctzll(d);
    if (c->dirty_since[i] <= cutoff) m |= (uint64_t)1 << i, want += UNIT_SIZE;
  }
  c->dirty_units &= ~m;
  size_t bytes = 0;
  while (m) { /* one madvise per contiguous run */
    unsigned a = (unsigned)__builtin_ctzll(m);
    uint64_t rest = m >> a;
    unsigned len = ~rest ? (unsigned)__builtin_ctzll(~rest) : 64 - a;
    os_purge((char *)c + ((size_t)a << UNIT_SHIFT), (size_t)len << UNIT_SHIFT, use_free);
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
