/* huge.c — owns large blocks, their descriptors and the cache of freed ones (huge.h).
 * May call: os_map, os_map_aligned, os_unmap, os_purge, os_resize_inplace,
 * os_move_into, registry. Must never: copy a block's contents (mremap moves
 * pages), or leave a registry entry naming an address range it no longer owns. */
#include "huge.h"
#include "os.h"
#include "registry.h"

_Atomic size_t huge_purged;
static _Atomic size_t active_bytes, cache_bytes, slack_bytes, size_bytes, block_count;

#define DESC_SLAB ((size_t)64 << 10)
static spinlock_t lock;   /* descriptors and cache */
static huge_t *desc_free; /* recycled descriptors, linked by next */

typedef struct {
  char *base;       /* a chunk boundary */
  size_t len;       /* page multiple */
  uint64_t since;   /* when it was freed (coarse ms) */
  uintptr_t map_id; /* the mmap it came from */
} extent_t;
static extent_t cache[HUGE_CACHE_MAX]; /* sorted by base */
static unsigned ncache;
/* No extent was freed before this (UINT64_MAX: none is cached): a lower bound
 * that huge_cache_decay reads without the lock, so the decay every large
 * free runs takes the lock only when something may be due. Lowered by every
 * insert, set exact by each decay. */
static _Atomic uint64_t oldest_since = UINT64_MAX;

void huge_lock_all(void) { spin_lock(&lock); }
void huge_unlock_all(void) { spin_unlock(&lock); }
/* Bytes taken out of the cache and not yet unmapped (cache_take_out). They
 * still count as cached (mapped, dirty), and a trim and a fork wait for them,
 * not only the thread unmapping them (found by a probe: a trim that found the
 * cache empty returned, stats saying all was purged, with another thread's
 * 500 MB still mapped for 60 ms; a fork child inherits such mappings, which
 * nobody in it owns). */
static _Atomic size_t unmapping_bytes;
size_t huge_cache_bytes(void) {
  return atomic_load_explicit(&cache_bytes, memory_order_relaxed) +
         atomic_load_explicit(&unmapping_bytes, memory_order_relaxed);
}
size_t huge_active_bytes(void) { return atomic_load_explicit(&active_bytes, memory_order_relaxed); }
size_t huge_slack_bytes(void) { return atomic_load_explicit(&slack_bytes, memory_order_relaxed); }
size_t huge_in_use_bytes(void) { return atomic_load_explicit(&size_bytes, memory_order_relaxed); }
size_t huge_blocks(void) { return atomic_load_explicit(&block_count, memory_order_relaxed); }

/* The six counts (cache_bytes, active_bytes, slack_bytes, size_bytes,
 * block_count, huge_purged) are written only
 * under the lock, so with plain_add, no locked instruction (readers load them
 * relaxed): a large malloc/free pair ran seven locked instructions, each
 * waiting for the stores before it. */

/* ------------------------------------------------------------ descriptors (lock held) */

static huge_t *desc_new_locked(void) {
  if (!desc_free) {
    huge_t *slab = os_map(DESC_SLAB);
    for (size_t i = 0; slab && i < DESC_SLAB / sizeof(huge_t); i++) {
      slab[i].next = desc_free;
      desc_free = &slab[i];
    }
  }
  huge_t *h = desc_free;
  if (h) desc_free = h->next;
  return h;
}

static void desc_delete_locked(huge_t *h) {
  h->next = desc_free;
  desc_free = h;
}

/* ------------------------------------------------------------ the cache (lock held) */

static void cache_remove_at(unsigned i) {
  plain_add(&cache_bytes, -cache[i].len);
  for (; i + 1 < ncache; i++) cache[i] = cache[i + 1];
  ncache--;
}

/* Extents taken out of the cache, to be unmapped with the lock let go: a
 * munmap of resident MiBs takes a while, and a decay pass or trim over a
 * thousand extents held another thread's large malloc for 200 ms (found by a
 * probe). Out of the cache, no other thread can take them. */
#define UNMAP_BATCH 16
typedef struct {
  char *base;
  size_t len;
} span_t;

static size_t cache_take_out(unsigned i, span_t *batch, unsigned *n) {
  size_t len = cache[i].len;
  batch[(*n)++] = (span_t){cache[i].base, len};
  atomic_fetch_add_explicit(&unmapping_bytes, len, memory_order_relaxed);
  cache_remove_at(i);
  return len;
}

static void unmap_unlocked(span_t *batch, unsigned *n) {
  size_t bytes = 0;
  spin_unlock(&lock);
  for (unsigned k = 0; k < *n; k++) {
    os_unmap(batch[k].base, batch[k].len);
    bytes += batch[k].len;
    atomic_fetch_sub_explicit(&unmapping_bytes, batch[k].len, memory_order_release);
  }
  *n = 0;
  spin_lock(&lock);
  plain_add(&huge_purged, bytes);
}

static bool unmaps_under_way(void) { return atomic_load_explicit(&unmapping_bytes, memory_order_acquire) != 0; }

bool huge_wait_unmaps(uint64_t ms) { return os_wait_while(unmaps_under_way, ms); }

static size_t cache_unmap_at(unsigned i) {
  size_t len = cache[i].len;
  os_unmap(cache[i].base, len);
  plain_add(&huge_purged, len);
  cache_remove_at(i);
  return len;
}

/* The bytes of [0, end) past a block of `size`, from the unit after its
 * size on, when that is more than a unit (less is not worth a purge); else 0.
 * What a block's slack is, and what purge_slack purges. */
static size_t tail_past(size_t size, size_t end) {
  size_t from = align_up(size, UNIT_SIZE);
  return end > from + UNIT_SIZE ? end - from : 0;
}

/* ------------------------------------------------------------ slack (lock held) */

/* Blocks whose span's tail past their size is resident, oldest first (each
 * is appended when listed, with the time then). A block whose realloc or free
 * comes first takes itself off (the decay must never purge what a growth
 * handed to the program, nor a range a move gave up). */
static huge_t *slack_head, *slack_tail;

static void lower_oldest(uint64_t since) {
  if (since < atomic_load_explicit(&oldest_since, memory_order_relaxed))
    atomic_store_explicit(&oldest_since, since, memory_order_relaxed);
}

/* Lists h's span past its size (tail_past). h->user, size and span are set. */
static void slack_add(huge_t *h, uint64_t now) {
  size_t tail = tail_past(h->size, h->span);
  if (!tail) return;
  h->slack_since = now;
  h->snext = NULL;
  h->sprev = slack_tail;
  if (slack_tail)
    slack_tail->snext = h;
  else
    slack_head = h;
  slack_tail = h;
  plain_add(&slack_bytes, tail);
  atomic_store_explicit(&h->slack, tail, memory_order_relaxed);
  lower_oldest(now);
}

static void slack_remove(huge_t *h) {
  if (h->sprev)
    h->sprev->snext = h->snext;
  else
    slack_head = h->snext;
  if (h->snext)
    h->snext->sprev = h->sprev;
  else
    slack_tail = h->sprev;
  plain_add(&slack_bytes, -h->slack);
  /* release: the owner that reads 0 without the lock (huge_resize) finds the
   * purge done */
  atomic_store_explicit(&h->slack, 0, memory_order_release);
}

/* Purges the oldest listed slack, then lets the lock go for a moment: each
 * purge is a system call over MiBs, and the list has no bound (a probe's
 * ebb_trim of 500 blocks' slack, 265 MB, held another thread's large malloc
 * for 18 ms). */
static size_t slack_purge_oldest(void) {
  huge_t *h = slack_head;
  size_t bytes = h->slack;
  os_purge(h->user + h->span - bytes, bytes, false);
  plain_add(&huge_purged, bytes);
  slack_remove(h);
  spin_unlock(&lock);
  spin_lock(&lock);
  return bytes;
}

static unsigned cache_oldest(void) {
  unsigned o = 0;
  for (unsigned i = 1; i < ncache; i++)
    if (cache[i].since < cache[o].since) o = i;
  return o;
}

/* Adds [base, base+len) (base a chunk boundary), merged with cached neighbours
 * of the same mapping. */
static void cache_insert(char *base, size_t len, uintptr_t map_id, uint64_t now) {
  lower_oldest(now);
  unsigned i = 0;
  while (i < ncache && cache[i].base < base) i++;
  plain_add(&cache_bytes, len);
  bool after_prev = i > 0 && cache[i - 1].map_id == map_id && cache[i - 1].base + cache[i - 1].len == base;
  bool before_next = i < ncache && cache[i].map_id == map_id && base + len == cache[i].base;
  if (after_prev) {
    cache[i - 1].len += len;
    cache[i - 1].since = now;
    if (before_next) {
      cache[i - 1].len += cache[i].len;
      plain_add(&cache_bytes, cache[i].len); /* cache_remove_at takes it off again */
      cache_remove_at(i);
    }
    return;
  }
  if (before_next) {
    cache[i].base = base;
    cache[i].len += len;
    cache[i].since = now;
    return;
  }
  if (ncache == HUGE_CACHE_MAX) {
    unsigned o = cache_oldest();
    cache_unmap_at(o);
    if (o < i) i--;
  }
  for (unsigned k = ncache; k > i; k--) cache[k] = cache[k - 1];
  cache[i] = (extent_t){.base = base, .len = len, .since = now, .map_id = map_id};
  ncache++;
}

/* Takes the first `take` bytes of extent i (take a chunk multiple when the rest stays). */
static char *cache_take(unsigned i, size_t take) {
  char *base = cache[i].base;
  if (take >= cache[i].len) {
    cache_remove_at(i);
  } else {
    cache[i].base += take;
    cache[i].len -= take;
    plain_add(&cache_bytes, -take);
  }
  return base;
}

/* The cached extent that serves need bytes at align with the least waste:
 * one no more than a quarter larger, taken whole; else a bigger one split on a
 * region boundary (the rest stays cached); else a somewhat bigger one, taken
 * whole (its unused tail is the block's slack). *span: what the block takes.
 * *below: when none serves, the largest smaller one (any alignment), which
 * huge_new grows: its resident pages become the start of the block. */
static int cache_fit(size_t need, size_t align, size_t *span, int *below) {
  int whole = -1, split = -1, other = -1;
  *below = -1;
  size_t region = align_up(need, CHUNK_SIZE);
  for (unsigned i = 0; i < ncache; i++) {
    size_t len = cache[i].len;
    if (len < need) {
      if (*below < 0 || len > cache[*below].len) *below = (int)i;
      continue;
    }
    if ((uintptr_t)cache[i].base % align) continue;
    if (len <= need + need / 4) {
      if (whole < 0 || len < cache[whole].len) whole = (int)i;
    } else if (len >= region + CHUNK_SIZE) {
      if (split < 0 || len < cache[split].len) split = (int)i;
    } else if (other < 0 || len < cache[other].len) {
      other = (int)i;
    }
  }
  if (whole >= 0) return *span = cache[whole].len, whole;
  if (split >= 0) return *span = region, split;
  if (other >= 0) *span = cache[other].len;
  return other;
}

size_t huge_cache_decay(uint64_t cutoff, size_t max) {
  if (cutoff < atomic_load_explicit(&oldest_since, memory_order_relaxed)) return 0; /* nothing due (or cached) */
  size_t bytes = 0;
  uint64_t oldest = UINT64_MAX;
  spin_lock(&lock);
  span_t batch[UNMAP_BATCH];
  unsigned n = 0;
  for (unsigned i = 0; i < ncache && bytes < max;) {
    if (cache[i].since > cutoff) {
      i++;
      continue;
    }
    bytes += cache_take_out(i, batch, &n);
    if (n == UNMAP_BATCH) {
      unmap_unlocked(batch, &n);
      i = 0; /* other threads may have changed the cache meanwhile */
    }
  }
  if (n) unmap_unlocked(batch, &n);
  /* listed in the order of their times, but for threads' clocks read a
   * moment apart: the first one not due ends the walk, and bounds the rest */
  while (bytes < max && slack_head && slack_head->slack_since <= cutoff) bytes += slack_purge_oldest();
  /* the bound from what is there now, extents cached meanwhile included */
  for (unsigned i = 0; i < ncache; i++)
    if (cache[i].since < oldest) oldest = cache[i].since;
  if (slack_head && slack_head->slack_since < oldest) oldest = slack_head->slack_since;
  atomic_store_explicit(&oldest_since, oldest, memory_order_relaxed);
  spin_unlock(&lock);
  return bytes;
}

#ifdef EBB_FAKE_OS
bool huge_lock_held(void) { return atomic_load_explicit(&lock.held, memory_order_relaxed) != 0; }
#endif

size_t huge_cache_trim(size_t need) {
  size_t bytes = 0;
  span_t batch[UNMAP_BATCH];
  unsigned n = 0;
  spin_lock(&lock);
  while (bytes < need && ncache) {
    bytes += cache_take_out(cache_oldest(), batch, &n);
    if (n == UNMAP_BATCH) unmap_unlocked(batch, &n);
  }
  if (n) unmap_unlocked(batch, &n);
  while (bytes < need && slack_head) bytes += slack_purge_oldest();
  spin_unlock(&lock);
  return bytes;
}

/* ------------------------------------------------------------ blocks */

static void *tagged(huge_t *h) { return (char *)h + HUGE_TAG; }

static bool page_bytes(size_t size, size_t *out) {
  if (size > ((size_t)1 << 46)) return false;
  *out = align_up(size ? size : 1, OS_PAGE);
  return true;
}

/* A purge of the part of a span beyond the usable size, when it is worth it;
 * the bytes purged, which the caller adds to huge_purged under the lock (they
 * were missing from ebb_stats' purged: found by a probe, 0 B purged after
 * 3,096 such madvise calls). */
static size_t purge_slack(char *user, size_t size, size_t span) {
  size_t tail = tail_past(size, span);
  if (tail) os_purge(user + span - tail, tail, false);
  return tail;
}

/* A fresh aligned range of span bytes for a block to move to, its registry
 * leaf made (registry_reserve), so that the moved block can always be
 * registered there; NULL when refused. */
static char *move_target(size_t span, size_t align) {
  char *dst = os_map_aligned(span, align);
  if (dst && !registry_reserve(dst)) {
    os_unmap(dst, span);
    dst = NULL;
  }
  return dst;
}

/* A cached block (not registered) moved by mremap to a fresh aligned range of
 * span bytes; NULL when refused (the block stays where it was). */
static char *move_fresh(char *base, size_t len, size_t span, size_t align) {
  char *dst = move_target(span, align);
  return dst ? os_move_into(base, len, span, dst) : NULL;
}

huge_t *huge_new(size_t size, size_t align, bool keep, uint64_t now, size_t *reused) {
  size_t need, span = 0;
  if (align < CHUNK_SIZE) align = CHUNK_SIZE;
  if (!page_bytes(size, &need)) return NULL;
  spin_lock(&lock);
  huge_t *h = desc_new_locked();
  char *base = NULL;
  uintptr_t map_id = 0;
  int below = -1, i = h ? cache_fit(need, align, &span, &below) : -1;
  size_t below_len = 0;
  if (i >= 0) {
    map_id = cache[i].map_id;
    base = cache_take((unsigned)i, span);
    plain_add(&active_bytes, span); /* taken back below if the registry refuses it */
    plain_add(&size_bytes, need);
    plain_add(&block_count, 1);
    relaxed_store(h->user, base);
    relaxed_store(h->size, need);
    h->span = span;
    /* Its tail waits for the decay: 4 blocks of 2-8 MiB at random a cycle,
     * all written, paid 480 faults a cycle with it purged here, 3.5 now
     * (mimalloc 0.1, tcmalloc 21), peak RSS 31 -> 33 MB (mimalloc's 33). */
    if (keep)
      slack_add(h, now);
    else
      plain_add(&huge_purged, purge_slack(base, need, span));
  } else if (below >= 0) {
    map_id = cache[below].map_id;
    below_len = cache[below].len;
    base = cache_take((unsigned)below, below_len);
  }
  spin_unlock(&lock);
  if (!h) return NULL;
  /* A cached block too small: grown, in place when the range after it is free,
   * else moved by mremap to a fresh aligned range of the full size (page
   * tables move, no byte is copied). Its resident pages start the block, so
   * only the growth faults; mapping afresh instead would keep both resident
   * (malloc-large, 20 live blocks of 5-25 MiB replaced at random: the cache
   * filled with blocks that fit no request: peak RSS 585 -> 550 MB, glibc's 534,
   * page faults 212 k -> 168 k). */
  if (below_len) {
    span = align_up(need, UNIT_SIZE);
    char *grown = (uintptr_t)base % align == 0 && os_resize_inplace(base, below_len, span)
                      ? base /* the growth joins the same mapping: map_id stays */
                      : move_fresh(base, below_len, span, align);
    if (!grown) {
      spin_lock(&lock);
      cache_insert(base, below_len, map_id, 0); /* decays at the next pass */
      spin_unlock(&lock);
    } else if (grown != base) {
      map_id = (uintptr_t)grown;
    }
    base = grown;
  }
  *reused = !base ? 0 : below_len ? below_len : need; /* a grown block's growth is fresh */
  if (!base) { /* the span is rounded up to a unit: sizes that differ a little share cached blocks */
    span = align_up(need, UNIT_SIZE);
    base = os_map_aligned(span, align);
    map_id = (uintptr_t)base;
  }
  if (base) { /* filled before the registry publishes it (a release store) */
    if (i < 0) { /* a cached extent's were set under the lock, where the decay may read them */
      relaxed_store(h->user, base);
      relaxed_store(h->size, need);
      h->span = span;
    }
    h->align = align;
    h->map_id = map_id;
    h->arena = NULL;
    h->next = h->prev = NULL;
  }
  if (!base || !registry_set(base, tagged(h))) {
    spin_lock(&lock);
    if (atomic_load_explicit(&h->slack, memory_order_relaxed)) slack_remove(h);
    if (i >= 0) plain_add(&active_bytes, -span), plain_add(&size_bytes, -need), plain_add(&block_count, -1);
    if (base) cache_insert(base, span, map_id, 0); /* decays at the next pass */
    desc_delete_locked(h);
    spin_unlock(&lock);
    return NULL;
  }
  if (i < 0) { /* grown or freshly mapped: the system call dwarfs a turn of the lock */
    spin_lock(&lock);
    plain_add(&active_bytes, span);
    plain_add(&size_bytes, need);
    plain_add(&block_count, 1);
    spin_unlock(&lock);
  }
  return h;
}

void huge_delete(huge_t *h, bool keep, uint64_t now) {
  registry_clear(h->user); /* before the range can be reused by anyone */
  spin_lock(&lock);
  bool listed = atomic_load_explicit(&h->slack, memory_order_relaxed) != 0;
  if (listed) slack_remove(h); /* resident still: cached with the block */
  /* A tail past the size that is not listed went back already (the decay,
   * ebb_trim or a shrink purged it, and counted it in purged): unmapped, not
   * cached, where the cache would count it as dirty (found by a probe). */
  size_t cold = listed ? 0 : tail_past(h->size, h->span);
  plain_add(&active_bytes, -h->span);
  plain_add(&size_bytes, -h->size);
  plain_add(&block_count, -1);
  if (keep) {
    if (cold) os_unmap(h->user + h->span - cold, cold);
    cache_insert(h->user, h->span - cold, h->map_id, now);
  } else {
    os_unmap(h->user, h->span);
    plain_add(&huge_purged, h->span - cold);
  }
  desc_delete_locked(h);
  spin_unlock(&lock);
}

/* Growth into the cached extent right after the span (same mapping): no
 * system call, and its pages are still resident. */
static bool grow_into_cache(huge_t *h, size_t need) {
  size_t region = align_up(need, CHUNK_SIZE);
  bool done = false;
  spin_lock(&lock);
  for (unsigned i = 0; i < ncache && !done; i++) {
    extent_t *e = &cache[i];
    if (e->base != h->user + h->span || e->map_id != h->map_id || h->span + e->len < need) continue;
    size_t take = h->span + e->len >= region + CHUNK_SIZE ? region - h->span : e->len;
    cache_take(i, take);
    plain_add(&active_bytes, take);
    h->span += take;
    done = true;
  }
  spin_unlock(&lock);
  return done;
}

/* A move clears the old address's registry entry before mremap releases the
 * range: once released, another thread may map a block there and register it
 * at once, and a late clear would erase that block's entry. The destination's
 * registry leaf is made first, while a refusal can still leave the block
 * where it was: after the move the block could not be registered at its new
 * address, nor moved back (its old range may be someone else's by then). */
static bool move(huge_t *h, size_t need) {
  char *old = h->user;
  char *dst = move_target(need, h->align);
  if (!dst) return false;
  registry_clear(old);
  char *moved = os_move_into(old, h->span, need, dst);
  if (!moved) {
    registry_set(old, tagged(h)); /* its leaf exists: cannot fail */
    return false;
  }
  relaxed_store(h->user, moved);
  h->map_id = (uintptr_t)moved;
  registry_set(moved, tagged(h)); /* its leaf exists (registry_reserve): cannot fail */
  return true;
}

static bool grow(huge_t *h, size_t need) {
  if (grow_into_cache(h, need)) return true;
  size_t old = h->span;
  if (!os_resize_inplace(h->user, h->span, need) && !move(h, need)) return false;
  spin_lock(&lock);
  plain_add(&active_bytes, need - old);
  spin_unlock(&lock);
  h->span = need;
  return true;
}

/* A shrink gives up whole regions past the new size (to the cache, or back to
 * the kernel). What is left past the size becomes the block's slack (true: the
 * caller lists it) when all of it may be resident (the span up to `warm`);
 * else its resident part is purged now, and no byte twice (found by a probe:
 * each shrink of a block whose slack had gone purged the whole tail again and
 * counted it in `purged`). Purged at once, a shrink and a regrowth faulted
 * the tail in again every time: realloc 8 MiB -> 4.5 MiB -> 8 MiB, 896
 * faults a cycle (glibc's 896, mimalloc 0); now none. */
static bool shrink(huge_t *h, size_t need, size_t warm, bool keep, uint64_t now) {
  size_t region = align_up(need, CHUNK_SIZE);
  if (h->span >= region + CHUNK_SIZE) {
    size_t tail = h->span - region;
    /* What of it lies past `warm` went back already (and was counted in
     * purged then): unmapped, not cached, where the cache would count it as
     * dirty (found by a probe: 4.19 MB dirty with none of it resident) */
    size_t cold = warm < h->span ? h->span - (warm > region ? warm : region) : 0;
    size_t cached = keep ? tail - cold : 0;
    h->span = region;
    spin_lock(&lock);
    plain_add(&active_bytes, -tail);
    if (cached) cache_insert(h->user + region, cached, h->map_id, now);
    if (cached < tail) {
      os_unmap(h->user + region + cached, tail - cached);
      plain_add(&huge_purged, tail - cached - cold);
    }
    spin_unlock(&lock);
  }
  if (warm >= h->span) {
    if (keep) return true;
    warm = h->span;
  }
  size_t purged = purge_slack(h->user, need, warm);
  if (purged) {
    spin_lock(&lock);
    plain_add(&huge_purged, purged);
    spin_unlock(&lock);
  }
  return false;
}

/* h's slack off the list before its span or size changes, so the decay purges
 * none of what a growth hands to the program nor a range a move gives up;
 * whether it was listed. */
static bool slack_unlist(huge_t *h) {
  if (!atomic_load_explicit(&h->slack, memory_order_acquire)) return false; /* only the decay clears it */
  spin_lock(&lock);
  bool listed = atomic_load_explicit(&h->slack, memory_order_relaxed) != 0;
  if (listed) slack_remove(h);
  spin_unlock(&lock);
  return listed;
}

bool huge_resize(huge_t *h, size_t size, bool keep, uint64_t now) {
  size_t need;
  if (!page_bytes(size, &need)) return false;
  size_t old = h->size;
  bool listed = slack_unlist(h), grew = need > h->span;
  /* Where the part of the span that may be resident ends: the span's end,
   * unless its tail past the size went back (a slack the decay took). */
  size_t warm = h->span - (listed ? 0 : tail_past(old, h->span));
  if (grew && !grow(h, need)) {
    if (listed) {
      spin_lock(&lock);
      slack_add(h, now);
      spin_unlock(&lock);
    }
    return false;
  }
  bool lazy = need < old && shrink(h, need, warm, keep, now);
  relaxed_store(h->size, need);
  /* What is resident past the new size waits for the decay: slack that was
   * listed, a cached extent grown into, a shrink's tail. */
  spin_lock(&lock);
  plain_add(&size_bytes, need - old);
  if (keep && (listed || grew || lazy)) slack_add(h, now);
  spin_unlock(&lock);
  return true;
}
