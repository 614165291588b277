/* test_fuzz.c — a seeded shadow-model fuzzer over the whole ebb_* API. Threads
 * run random sequences of allocations (every entry point, every size range up
 * to 64 MiB, alignments up to 8 MiB, first-class arenas), frees, reallocs and
 * hand-overs: blocks pass between threads through shared slots and are freed
 * or reallocated by a thread other than the one that allocated them. The model
 * (fuzz_model.h) checks every block it touches (contents, alignment, usable
 * size, ebb_owns), calloc's zeroes and realloc's kept prefix; at checkpoints
 * all threads stop and one checks every live block and that none overlap.
 *
 * Only ebb_* names are called, so this also runs in the ThreadSanitizer build
 * (-DEBB_NO_OVERRIDE). EBBTEST_FUZZ_SEED, EBBTEST_FUZZ_OPS (total over all threads)
 * and EBBTEST_FUZZ_THREADS choose the run; a failure prints them, the thread and
 * the op index, then aborts. With EBBTEST_FUZZ_THREADS=1 a run is exactly
 * reproducible (hand-overs then go through the slots to the same thread). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "fuzz_model.h"

#define FZ_MAX_THREADS 16
#define FZ_THREADS 4
#define FZ_LOCAL 256                    /* blocks a thread holds */
#define FZ_SLOTS 64                     /* hand-over slots shared by all threads */
#define FZ_ARENAS 2                     /* first-class arenas a thread may have at once */
#define FZ_CHECK_EVERY 4096             /* ops of each thread between checkpoints */
#define FZ_MAX_BLOCK ((size_t)64 << 20) /* largest block realloc grows to */
#define FZ_LIVE_CAP ((size_t)512 << 20) /* beyond this many live bytes, no new large blocks */
#define FZ_DEFAULT_SEED 20240611ull
#define FZ_DEFAULT_OPS 200000 /* total; divided by EBBTEST_SCALE */
#define FZ_ERRNO_MARK 4242

/* A first-class arena, created and destroyed by one thread only. Anyone
 * touching one of its blocks holds the read lock, so the owner's destroy (under
 * the write lock) never pulls memory from under a check or a free. */
typedef struct {
  pthread_rwlock_t lock;
  ebb_arena_t *a; /* NULL when there is none */
  uint32_t gen;   /* bumped by destroy: blocks of an older generation are dead */
} fz_arena_t;

typedef struct {
  pthread_mutex_t lock;
  fz_blk_t b; /* b.p == NULL: empty */
} fz_slot_t;

typedef struct {
  int id;
  rng_t r;
  size_t op, ops;         /* current op index, ops to run */
  atomic_size_t progress; /* op, for the watchdog (the main thread reads it) */
  uint64_t nalloc;        /* allocations so far (keys the seeds) */
  size_t n_alloc, n_free, n_realloc, n_large_realloc, n_handover, n_dead; /* ops done, by kind */
  size_t n_arena_create, n_arena_reset, n_arena_destroy, n_misc;
  fz_blk_t local[FZ_LOCAL];
} fz_thread_t;

static struct {
  uint64_t seed;
  int nthreads;
  int devnull; /* for ebb_stats_print */
  size_t ops;  /* total requested */
  size_t checkpoints;
  atomic_int running; /* workers not finished yet */
  pthread_barrier_t barrier;
  atomic_size_t live_bytes;
  fz_slot_t slots[FZ_SLOTS];
  fz_arena_t arenas[FZ_MAX_THREADS * FZ_ARENAS];
  fz_thread_t th[FZ_MAX_THREADS];
  fz_span_t snap[FZ_MAX_THREADS * FZ_LOCAL + FZ_SLOTS];
} fz;

static uint64_t fz_env(const char *name, uint64_t dflt);

/* ---------------------------------------------------------------- failures */

/* Writes the failure (seed, thread, op, the block's particulars) with no
 * allocation, then stress_die adds how to repeat the run and aborts. */
__attribute__((noreturn, format(printf, 3, 4))) static void fz_die(const fz_thread_t *t, const fz_blk_t *b,
                                                                   const char *fmt, ...) {
  char line[1024];
  size_t n = 0, room = sizeof line - 1; /* one byte kept for the newline */
#define FZ_APPEND(call)                                                                                      \
  do {                                                                                                       \
    int k_ = (call);                                                                                         \
    if (k_ > 0) n += (size_t)k_ < room - n ? (size_t)k_ : room - n - 1;                                      \
  } while (0)
  FZ_APPEND(snprintf(line, room, "fuzz: FAILED seed=%llu thread=%d op=%zu: ", (unsigned long long)fz.seed,
                     t->id, t->op));
  va_list ap;
  va_start(ap, fmt);
  FZ_APPEND(vsnprintf(line + n, room - n, fmt, ap));
  va_end(ap);
  if (b) FZ_APPEND(snprintf(line + n, room - n, " "));
  if (b) FZ_APPEND(fz_desc(line + n, room - n, b));
#undef FZ_APPEND
  line[n++] = '\n';
  ssize_t w = write(2, line, n);
  (void)w;
  signal(SIGABRT, SIG_DFL); /* this message says it all */
  stress_die("fuzz: repeat with EBBTEST_FUZZ_SEED=%llu EBBTEST_FUZZ_OPS=%zu EBBTEST_FUZZ_THREADS=%d",
             (unsigned long long)fz.seed, fz.ops, fz.nthreads);
}

/* A crash (a segfault in ebb, ebb's own abort after its message) names the run
 * too: each worker publishes its state here, and the handler adds one line
 * before the signal takes its default course and Criterion reports it. */
static __thread const fz_thread_t *fz_current;

static void fz_on_signal(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  char line[256];
  const fz_thread_t *t = fz_current;
  int n =
      snprintf(line, sizeof line,
               "fuzz: signal %d (address %p) in thread %d at op %zu; seed=%llu ops=%zu threads=%d\n", sig,
               si->si_addr, t ? t->id : -1, t ? t->op : 0, (unsigned long long)fz.seed, fz.ops, fz.nthreads);
  ssize_t w = write(2, line, n > 0 && n < (int)sizeof line ? (size_t)n : 0);
  (void)w;
  raise(sig); /* SA_RESETHAND: now with the default action */
}

static void fz_catch_signals(void) {
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fz_on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

/* ---------------------------------------------------------------- model bookkeeping */

static fz_arena_t *fz_arena_rec(int i) { return &fz.arenas[i]; }

/* Pins a block: for one of a first-class arena, takes the arena's read lock.
 * Returns 0 (and forgets the block) when the arena was destroyed since: the
 * block died with it and must not be touched. */
static int fz_pin(fz_thread_t *t, fz_blk_t *b) {
  if (b->arena < 0) return 1;
  fz_arena_t *ar = fz_arena_rec(b->arena);
  pthread_rwlock_rdlock(&ar->lock);
  if (ar->a && ar->gen == b->gen) return 1;
  pthread_rwlock_unlock(&ar->lock);
  atomic_fetch_sub(&fz.live_bytes, b->size);
  memset(b, 0, sizeof *b);
  t->n_dead++;
  return 0;
}
static void fz_unpin(int arena) {
  if (arena >= 0) pthread_rwlock_unlock(&fz_arena_rec(arena)->lock);
}

static void fz_forget(fz_blk_t *b) {
  atomic_fetch_sub(&fz.live_bytes, b->size);
  memset(b, 0, sizeof *b);
}

/* What ebb promises of any live block, and what the model expects of its bytes. */
static void fz_check(fz_thread_t *t, const fz_blk_t *b, const char *where) {
  if ((uintptr_t)b->p & 15 || (uintptr_t)b->p & (b->align - 1)) fz_die(t, b, "%s: misaligned", where);
  size_t u = ebb_malloc_usable_size(b->p);
  if (u < b->size || u != b->usable) fz_die(t, b, "%s: ebb_malloc_usable_size is now %zu", where, u);
  if (ebb_owns(b->p) != 1) fz_die(t, b, "%s: ebb_owns is 0 for a live block", where);
  size_t off = fz_pattern_bad(b);
  if (off != PAT_OK) fz_die(t, b, "%s: contents corrupt at offset %zu", where, off);
}

/* Records a block just returned by an allocation, checks it and fills it. */
static void fz_adopt(fz_thread_t *t, fz_blk_t *b, void *p, size_t size, size_t align, int how, int arena,
                     int zeroed) {
  *b = (fz_blk_t){.p = p,
                  .size = size,
                  .align = align < 16 ? 16 : align,
                  .arena = arena,
                  .how = (uint16_t)how,
                  .origin = (uint16_t)t->id};
  b->seed = mix64(fz.seed ^ ((uint64_t)t->id << 56) ^ ++t->nalloc) | 1;
  b->gen = arena >= 0 ? fz_arena_rec(arena)->gen : 0;
  if (!p) fz_die(t, b, "%s(%zu, align %zu) returned NULL", fz_how_name[how], size, align);
  b->usable = ebb_malloc_usable_size(p);
  if (zeroed) {
    size_t off = fz_zero_bad(p, size);
    if (off != PAT_OK) fz_die(t, b, "calloc'ed memory not zero at offset %zu", off);
  }
  atomic_fetch_add(&fz.live_bytes, size);
  fz_fill(b);
  fz_check(t, b, "new");
  t->n_alloc++;
}

/* ---------------------------------------------------------------- random choices */

static size_t fz_log_uniform(rng_t *r, unsigned lo_bits, unsigned hi_bits) {
  unsigned bits = lo_bits + (unsigned)rng_below(r, hi_bits - lo_bits);
  size_t lo = (size_t)1 << bits;
  return lo + (size_t)rng_below(r, lo);
}

static int fz_tight(void) { return atomic_load_explicit(&fz.live_bytes, memory_order_relaxed) > FZ_LIVE_CAP; }

/* Mostly small, a fair share medium, a few at and around the class and page
 * boundaries, one in a hundred large (2..8 MiB). */
static size_t fz_size(rng_t *r) {
  static const size_t edge[] = {0,
                                1,
                                15,
                                16,
                                17,
                                128,
                                4095,
                                4096,
                                4097,
                                65535,
                                65536,
                                65537,
                                (1u << 20),
                                (2u << 20) - 1,
                                2u << 20,
                                (2u << 20) + 1,
                                (4u << 20) - 4096,
                                4u << 20};
  uint64_t x = rng_below(r, 1000);
  size_t s;
  if (x < 590)
    s = 1 + (size_t)rng_below(r, 256);
  else if (x < 840)
    s = fz_log_uniform(r, 8, 14);
  else if (x < 950)
    s = fz_log_uniform(r, 14, 18);
  else if (x < 980)
    s = fz_log_uniform(r, 18, 21);
  else if (x < 990)
    s = edge[rng_below(r, sizeof edge / sizeof edge[0])];
  else
    s = FZ_SMALL_MAX + (size_t)rng_below(r, 6u << 20);
  return s > ((size_t)256 << 10) && fz_tight() ? 1 + (size_t)rng_below(r, 4096) : s;
}

/* New size for a realloc: anything, a growth, a shrink, a nudge (which must
 * stay in place), a drop into the small sizes, or a step of the large ladder
 * (across 2 MiB, and doubling large blocks up to 64 MiB). Never 0. */
static size_t fz_resize(rng_t *r, size_t old) {
  uint64_t x = rng_below(r, 100);
  size_t s;
  if (x < 35)
    s = fz_size(r);
  else if (x < 55)
    s = old + 1 + old * (size_t)rng_below(r, 300) / 100;
  else if (x < 72)
    s = old - old * (size_t)rng_below(r, 95) / 100;
  else if (x < 82)
    s = old + (size_t)rng_below(r, 64) - (old >= 32 ? 32 : old);
  else if (x < 90)
    s = 1 + (size_t)rng_below(r, 512);
  else if (old >= ((size_t)1 << 20))
    s = old * (2 + (size_t)rng_below(r, 3)) - (size_t)rng_below(r, 4096);
  else
    s = FZ_SMALL_MAX - 64 + (size_t)rng_below(r, 128);
  if (s > FZ_MAX_BLOCK) s = FZ_MAX_BLOCK - (size_t)rng_below(r, 1u << 20);
  if (s > old && s > ((size_t)256 << 10) && fz_tight()) s = 1 + old / 4;
  return s ? s : 1;
}

static size_t fz_align(rng_t *r) {
  uint64_t x = rng_below(r, 100);
  if (x < 60) return (size_t)16 << rng_below(r, 5);   /* 16 .. 256 */
  if (x < 85) return (size_t)512 << rng_below(r, 4);  /* 512 .. 4 KiB */
  if (x < 97) return (size_t)8192 << rng_below(r, 4); /* 8 KiB .. 64 KiB */
  return (size_t)128 << 10 << rng_below(r, 7);        /* 128 KiB .. 8 MiB: own mappings */
}

/* A live first-class arena of this thread, or -1 if it has none; k: where the
 * search starts. */
static int fz_live_own_arena(fz_thread_t *t, int k) {
  int base = t->id * FZ_ARENAS;
  for (int i = 0; i < FZ_ARENAS; i++)
    if (fz_arena_rec(base + (k + i) % FZ_ARENAS)->a) return base + (k + i) % FZ_ARENAS;
  return -1;
}

/* A live first-class arena of this thread, creating one if it has none. */
static int fz_own_arena(fz_thread_t *t) {
  int base = t->id * FZ_ARENAS, k = (int)rng_below(&t->r, FZ_ARENAS);
  int live = fz_live_own_arena(t, k);
  if (live >= 0) return live;
  fz_arena_t *ar = fz_arena_rec(base + k);
  pthread_rwlock_wrlock(&ar->lock);
  ar->a = ebb_arena_create();
  pthread_rwlock_unlock(&ar->lock);
  if (!ar->a) fz_die(t, NULL, "ebb_arena_create returned NULL");
  t->n_arena_create++;
  return base + k;
}

/* ---------------------------------------------------------------- operations */

static void fz_alloc(fz_thread_t *t, fz_blk_t *b) {
  rng_t *r = &t->r;
  size_t size = fz_size(r), align = 16, n = 1 + (size_t)rng_below(r, 8), each = (size + n - 1) / n;
  int how = (int)rng_below(r, FZ_ARENA_ALIGNED_ALLOC + 1), arena = -1;
  void *p = NULL;
  if (how >= FZ_ARENA_MALLOC && rng_below(r, 2)) how = FZ_MALLOC; /* arenas: half as often */
  switch (how) {
  case FZ_MALLOC: p = ebb_malloc(size); break;
  case FZ_CALLOC: p = ebb_calloc(n, each), size = n * each; break;
  case FZ_REALLOC_NULL: p = ebb_realloc(NULL, size); break;
  case FZ_REALLOCARRAY_NULL: p = ebb_reallocarray(NULL, n, each), size = n * each; break;
  case FZ_ALIGNED_ALLOC: /* any power of two (1..8 are below malloc's 16), any size */
    align = rng_below(r, 8) ? fz_align(r) : (size_t)1 << rng_below(r, 4);
    p = ebb_aligned_alloc(align, size);
    break;
  case FZ_POSIX_MEMALIGN: {
    align = rng_below(r, 8) ? fz_align(r) : 8;
    int rc = ebb_posix_memalign(&p, align, size);
    if (rc != 0) fz_die(t, NULL, "ebb_posix_memalign(%zu, %zu) returned %d", align, size, rc);
    break;
  }
  case FZ_MEMALIGN: /* memalign(0, n) is malloc(n) */
    align = rng_below(r, 8) ? fz_align(r) : 0;
    p = ebb_memalign(align, size);
    break;
  case FZ_VALLOC: align = 4096, p = ebb_valloc(size); break;
  case FZ_PVALLOC:
    align = 4096, p = ebb_pvalloc(size);
    size = size ? (size + 4095) & ~(size_t)4095 : 4096;
    break;
  default: {
    fz_arena_t *ar = fz_arena_rec(arena = fz_own_arena(t));
    if (how == FZ_ARENA_MALLOC)
      p = ebb_arena_malloc(ar->a, size);
    else if (how == FZ_ARENA_CALLOC)
      p = ebb_arena_calloc(ar->a, n, each), size = n * each;
    else if (how == FZ_ARENA_REALLOC_NULL)
      p = ebb_arena_realloc(ar->a, NULL, size);
    else
      p = ebb_arena_aligned_alloc(ar->a, align = rng_below(r, 8) ? fz_align(r) : (size_t)1 << rng_below(r, 4),
                                  size);
  }
  }
  fz_adopt(t, b, p, size, align, how, arena, how == FZ_CALLOC || how == FZ_ARENA_CALLOC);
}

static void fz_free(fz_thread_t *t, fz_blk_t *b) {
  if (!fz_pin(t, b)) return;
  fz_check(t, b, "before free");
  int arena = b->arena,
      aligned = (b->how >= FZ_ALIGNED_ALLOC && b->how <= FZ_MEMALIGN) || b->how == FZ_ARENA_ALIGNED_ALLOC;
  uint64_t x = rng_below(&t->r, 20);
  errno = FZ_ERRNO_MARK;
  if (x < 10) {
    ebb_free(b->p);
  } else if (x < 14) {
    ebb_free_sized(b->p, b->size);
  } else if (x < 17 && aligned) {
    ebb_free_aligned_sized(b->p, b->align, b->size);
  } else if (x < 19 || (x < 17 && !aligned)) {
    void *q = ebb_realloc(b->p, 0);
    if (q) fz_die(t, b, "ebb_realloc(p, 0) returned %p, not NULL", q);
    errno = FZ_ERRNO_MARK; /* promised of free only */
  } else {
    /* Only an arena this thread has already: creating one takes its record's
     * write lock while b's pin holds another's read lock, and two threads
     * doing that with each other's blocks wait for each other (TSan reported
     * the lock-order inversion). */
    int own = fz_live_own_arena(t, (int)rng_below(&t->r, FZ_ARENAS));
    if (own < 0) {
      ebb_free(b->p);
    } else {
      void *q = ebb_arena_realloc(fz_arena_rec(own)->a, b->p, 0);
      if (q) fz_die(t, b, "ebb_arena_realloc(a, p, 0) returned %p, not NULL", q);
      errno = FZ_ERRNO_MARK;
    }
  }
  if (errno != FZ_ERRNO_MARK) fz_die(t, b, "free changed errno to %d", errno);
  fz_unpin(arena);
  fz_forget(b);
  t->n_free++;
}

/* Realloc by one of three functions; checks the kept prefix, the documented
 * in-place rule for small blocks, and follows the block into its new arena:
 * a block left in place keeps its arena, a moved one (copied, or a large block
 * moved by the kernel) belongs to the arena realloc was asked for (none for
 * plain realloc), as docs/api.md says. */
static void fz_realloc(fz_thread_t *t, fz_blk_t *b) {
  if (!fz_pin(t, b)) return;
  fz_check(t, b, "before realloc");
  rng_t *r = &t->r;
  fz_blk_t old = *b;
  size_t size = fz_resize(r, b->size);
  uint64_t x = rng_below(r, 10);
  int how, target = -1;
  void *q;
  if (x >= 8) /* only an arena the thread has already: see fz_free */
    target = fz_live_own_arena(t, (int)rng_below(r, FZ_ARENAS));
  if (x < 6 || (x >= 8 && target < 0)) {
    how = FZ_REALLOC, q = ebb_realloc(old.p, size);
  } else if (x < 8) {
    size_t n = 1 + (size_t)rng_below(r, 4);
    size = (size + n - 1) / n * n;
    how = FZ_REALLOCARRAY, q = ebb_reallocarray(old.p, n, size / n);
  } else {
    how = FZ_ARENA_REALLOC, q = ebb_arena_realloc(fz_arena_rec(target)->a, old.p, size);
  }
  if (!q) fz_die(t, &old, "%s(p, %zu) returned NULL", fz_how_name[how], size);
  int large = fz_is_large(old.size, old.align);
  if (!large && size <= old.usable && size >= old.usable / 2 && q != old.p)
    fz_die(t, &old, "%s(p, %zu) moved the block to %p although it fits", fz_how_name[how], size, q);
  size_t keep = size < old.size ? size : old.size;
  size_t off = fz_walk(q, keep, fz_plen(&old), fz_key(&old), 1);
  if (off != PAT_OK)
    fz_die(t, &old, "%s(p, %zu) -> %p lost the contents at offset %zu", fz_how_name[how], size, q, off);
  if (q != old.p) {
    b->arena = target;
    b->gen = target >= 0 ? fz_arena_rec(target)->gen : 0;
  }
  if (q != old.p) b->align = 16; /* a moved block is only malloc-aligned */
  b->p = q;
  b->size = size;
  b->how = (uint16_t)how;
  b->usable = ebb_malloc_usable_size(q);
  atomic_fetch_add(&fz.live_bytes, size);
  atomic_fetch_sub(&fz.live_bytes, old.size);
  fz_fill(b);
  fz_check(t, b, "after realloc");
  /* still pinned: the block is in the old arena (kept), in this thread's own
   * arena (only this thread destroys it) or in none */
  fz_unpin(old.arena);
  t->n_realloc++;
  if (large || size > FZ_SMALL_MAX) t->n_large_realloc++;
}

/* Swaps a local slot (full or empty) with a shared one; what arrives was
 * allocated, and possibly reallocated, by other threads, and will be freed or
 * reallocated by this one. Both sides are checked. */
static void fz_handover(fz_thread_t *t, fz_blk_t *b) {
  if (b->p && fz_pin(t, b)) {
    fz_check(t, b, "before hand-over");
    fz_unpin(b->arena);
  }
  fz_slot_t *s = &fz.slots[rng_below(&t->r, FZ_SLOTS)];
  pthread_mutex_lock(&s->lock);
  fz_blk_t got = s->b;
  s->b = *b;
  pthread_mutex_unlock(&s->lock);
  *b = got;
  if (!b->p) return;
  t->n_handover++;
  if (!fz_pin(t, b)) return;
  fz_check(t, b, "received");
  fz_unpin(b->arena);
  if (rng_below(&t->r, 4) == 0) fz_free(t, b); /* freed at once by a foreign thread */
}

/* Create, reset or destroy one of this thread's first-class arenas. Blocks of
 * an arena reset or destroyed are dead wherever they are (this thread's table,
 * the slots, other threads' tables); every holder finds that out in fz_pin. */
static void fz_arena_op(fz_thread_t *t) {
  int i = t->id * FZ_ARENAS + (int)rng_below(&t->r, FZ_ARENAS), reset = rng_below(&t->r, 3) == 0;
  fz_arena_t *ar = fz_arena_rec(i);
  if (!ar->a) {
    pthread_rwlock_wrlock(&ar->lock);
    ar->a = ebb_arena_create();
    pthread_rwlock_unlock(&ar->lock);
    if (!ar->a) fz_die(t, NULL, "ebb_arena_create returned NULL");
    t->n_arena_create++;
    return;
  }
  for (size_t k = 0; k < FZ_LOCAL; k++) /* the last look at what is about to die */
    if (t->local[k].p && t->local[k].arena == i && t->local[k].gen == ar->gen)
      fz_check(t, &t->local[k], reset ? "before reset" : "before destroy");
  pthread_rwlock_wrlock(&ar->lock);
  if (reset) {
    ebb_arena_reset(ar->a);
  } else {
    ebb_arena_destroy(ar->a);
    ar->a = NULL;
  }
  ar->gen++;
  pthread_rwlock_unlock(&ar->lock);
  if (reset)
    t->n_arena_reset++;
  else
    t->n_arena_destroy++;
}

/* Rare calls: statistics, their printing and trim (they walk every arena while
 * others work), and the error contracts, which must leave everything as it was. */
static void fz_misc(fz_thread_t *t) {
  rng_t *r = &t->r;
  fz_blk_t *b = &t->local[rng_below(r, FZ_LOCAL)];
  void *p = (void *)&fz, *q;
  int rc;
  t->n_misc++;
  switch (rng_below(r, 8)) {
  case 0: {
    struct ebb_stats st;
    if (!b->p || !fz_pin(t, b)) break;
    ebb_stats(&st);
    if (st.mapped == 0 || st.mmap_calls == 0)
      fz_die(t, b, "ebb_stats: mapped %zu, mmap %llu while this block lives", st.mapped,
             (unsigned long long)st.mmap_calls);
    fz_unpin(b->arena);
    break;
  }
  case 1:
    if (rng_below(r, 2)) {
      ebb_trim();
    } else { /* every level writes without allocating, while the others run */
      ebb_stats_print(fz.devnull, 1 + (int)rng_below(r, 3));
      if (!ebb_version() || !*ebb_version()) fz_die(t, NULL, "ebb_version() is empty");
    }
    break;
  case 2:
    errno = 0;
    if ((q = ebb_malloc(SIZE_MAX)) || errno != ENOMEM)
      fz_die(t, NULL, "ebb_malloc(SIZE_MAX) = %p, errno %d", q, errno);
    errno = 0;
    if ((q = ebb_calloc(SIZE_MAX / 2 + 1, 2)) || errno != ENOMEM)
      fz_die(t, NULL, "ebb_calloc overflowing = %p, errno %d", q, errno);
    break;
  case 3:
    errno = 0;
    if ((rc = ebb_posix_memalign(&p, 24, 100)) != EINVAL || p != (void *)&fz || errno != 0)
      fz_die(t, NULL, "ebb_posix_memalign(24) = %d, *out %p, errno %d", rc, p, errno);
    if ((rc = ebb_posix_memalign(&p, 4, 100)) != EINVAL || p != (void *)&fz)
      fz_die(t, NULL, "ebb_posix_memalign(4) = %d, *out %p", rc, p);
    if ((q = ebb_aligned_alloc(48, 100)) || errno != EINVAL)
      fz_die(t, NULL, "ebb_aligned_alloc(48) = %p, errno %d", q, errno);
    errno = 0;
    if ((q = ebb_arena_aligned_alloc(fz_arena_rec(fz_own_arena(t))->a, 96, 100)) || errno != EINVAL)
      fz_die(t, NULL, "ebb_arena_aligned_alloc(96) = %p, errno %d", q, errno);
    break;
  case 4:
  case 5:
    if (!b->p || !fz_pin(t, b)) break;
    errno = 0;
    q = rng_below(r, 2) ? ebb_realloc(b->p, SIZE_MAX - 4096) : ebb_reallocarray(b->p, SIZE_MAX / 2 + 1, 2);
    if (q || errno != ENOMEM) fz_die(t, b, "realloc to an impossible size = %p, errno %d", q, errno);
    fz_check(t, b, "after failed realloc");
    fz_unpin(b->arena);
    break;
  case 6: {
    int local = 0;
    errno = FZ_ERRNO_MARK;
    ebb_free(NULL);
    if (errno != FZ_ERRNO_MARK || ebb_malloc_usable_size(NULL) != 0 || ebb_owns(NULL) || ebb_owns(&local) ||
        ebb_owns(&fz))
      fz_die(t, NULL, "free(NULL), usable_size(NULL) or ebb_owns of a non-heap pointer misbehaved");
    break;
  }
  default:
    if (!b->p || !fz_pin(t, b)) break;
    if (b->usable > 16 && ebb_owns(b->p + 16)) fz_die(t, b, "ebb_owns(p + 16) is 1 inside a live block");
    fz_unpin(b->arena);
  }
}

static void fz_step(fz_thread_t *t) {
  uint64_t x = rng_below(&t->r, 1024);
  fz_blk_t *b = &t->local[rng_below(&t->r, FZ_LOCAL)];
  if (x < 2)
    fz_arena_op(t);
  else if (x < 4)
    fz_misc(t);
  else if (x < 260)
    fz_handover(t, b);
  else if (!b->p)
    fz_alloc(t, b);
  else if ((x = rng_below(&t->r, 16)) < 5)
    fz_free(t, b);
  else if (x < 11)
    fz_realloc(t, b);
  else if (fz_pin(t, b)) { /* just a look */
    fz_check(t, b, "touch");
    fz_unpin(b->arena);
  }
}

/* ---------------------------------------------------------------- checkpoints */

static void fz_snap(fz_thread_t *t, size_t *n, const fz_blk_t *b) {
  if (!b->p) return;
  if (b->arena >= 0 && (!fz_arena_rec(b->arena)->a || fz_arena_rec(b->arena)->gen != b->gen))
    return; /* dead */
  fz_check(t, b, "checkpoint");
  fz.snap[(*n)++] = (fz_span_t){(uintptr_t)b->p, (uintptr_t)b->p + (b->usable ? b->usable : 1), b};
}

/* Every thread stops; one checks every live block and that no two overlap. */
static void fz_checkpoint(fz_thread_t *t) {
  if (pthread_barrier_wait(&fz.barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
    size_t n = 0;
    for (int i = 0; i < fz.nthreads; i++)
      for (size_t k = 0; k < FZ_LOCAL; k++) fz_snap(t, &n, &fz.th[i].local[k]);
    for (size_t k = 0; k < FZ_SLOTS; k++) fz_snap(t, &n, &fz.slots[k].b);
    long i = fz_first_overlap(fz.snap, n);
    if (i >= 0) {
      char other[256];
      fz_desc(other, sizeof other, fz.snap[i + 1].b);
      fz_die(t, fz.snap[i].b, "checkpoint: live blocks overlap: %s and", other);
    }
    fz.checkpoints++;
  }
  pthread_barrier_wait(&fz.barrier);
}

static void *fz_thread(void *arg) {
  fz_thread_t *t = arg;
  fz_current = t;
  for (t->op = 0; t->op < t->ops; t->op++) {
    atomic_store_explicit(&t->progress, t->op, memory_order_relaxed);
    fz_step(t);
    if ((t->op + 1) % FZ_CHECK_EVERY == 0) fz_checkpoint(t);
  }
  fz_checkpoint(t);
  for (size_t k = 0; k < FZ_LOCAL; k++) /* exit: most of these are other threads' blocks */
    if (t->local[k].p) fz_free(t, &t->local[k]);
  atomic_fetch_sub(&fz.running, 1);
  return NULL;
}

/* A hang (a deadlock in ebb, a lost wake-up) fails the test within
 * EBBTEST_FUZZ_STALL_S seconds (default 60) of the last operation of any thread,
 * naming the op each thread is stuck in, however long the run was meant to be. */
static void fz_watch(void) {
  const struct timespec tick = {0, 100 * 1000 * 1000};
  uint64_t limit = 10 * fz_env("EBBTEST_FUZZ_STALL_S", 60), still = 0;
  size_t last = SIZE_MAX;
  while (atomic_load(&fz.running) > 0) {
    nanosleep(&tick, NULL);
    size_t sum = 0;
    for (int i = 0; i < fz.nthreads; i++)
      sum += atomic_load_explicit(&fz.th[i].progress, memory_order_relaxed);
    still = sum == last ? still + 1 : 0;
    last = sum;
    if (still < limit) continue;
    char line[128];
    for (int i = 0; i < fz.nthreads; i++) {
      int n = snprintf(line, sizeof line, "fuzz: thread %d is at op %zu\n", i,
                       atomic_load_explicit(&fz.th[i].progress, memory_order_relaxed));
      ssize_t w = write(2, line, (size_t)n);
      (void)w;
    }
    signal(SIGABRT, SIG_DFL);
    stress_die("fuzz: FAILED seed=%llu: no thread made progress for %llu s (deadlock?); EBBTEST_FUZZ_OPS=%zu "
               "EBBTEST_FUZZ_THREADS=%d",
               (unsigned long long)fz.seed, (unsigned long long)limit / 10, fz.ops, fz.nthreads);
  }
}

/* ---------------------------------------------------------------- the run */

static uint64_t fz_env(const char *name, uint64_t dflt) {
  const char *s = getenv(name);
  return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static void fz_run(int default_threads, size_t divide_default) {
  memset(&fz, 0, sizeof fz);
  fz.seed = fz_env("EBBTEST_FUZZ_SEED", FZ_DEFAULT_SEED);
  fz.ops = (size_t)fz_env("EBBTEST_FUZZ_OPS", stress_n(FZ_DEFAULT_OPS / divide_default));
  fz.nthreads = (int)fz_env("EBBTEST_FUZZ_THREADS", (uint64_t)default_threads);
  if (default_threads == 1) fz.nthreads = 1;
  cr_assert(fz.nthreads >= 1 && fz.nthreads <= FZ_MAX_THREADS, "EBBTEST_FUZZ_THREADS=%d", fz.nthreads);
  fz_catch_signals();
  fz.devnull = open("/dev/null", O_WRONLY);
  cr_assert_geq(fz.devnull, 0);
  for (int i = 0; i < FZ_SLOTS; i++) pthread_mutex_init(&fz.slots[i].lock, NULL);
  for (int i = 0; i < FZ_MAX_THREADS * FZ_ARENAS; i++) pthread_rwlock_init(&fz.arenas[i].lock, NULL);
  cr_assert_eq(pthread_barrier_init(&fz.barrier, NULL, (unsigned)fz.nthreads), 0);
  atomic_store(&fz.running, fz.nthreads);
  pthread_t tid[FZ_MAX_THREADS];
  for (int i = 0; i < fz.nthreads; i++) {
    fz_thread_t *t = &fz.th[i];
    t->id = i;
    t->r = rng_seed(fz.seed * 1000003u + (uint64_t)i);
    t->ops = (fz.ops + (size_t)fz.nthreads - 1) / (size_t)fz.nthreads;
    cr_assert_eq(pthread_create(&tid[i], NULL, fz_thread, t), 0);
  }
  fz_watch();
  for (int i = 0; i < fz.nthreads; i++) pthread_join(tid[i], NULL);
  fz_thread_t *main_t = &fz.th[0]; /* the main thread drains the slots and destroys what is left */
  fz_current = main_t;
  for (int k = 0; k < FZ_SLOTS; k++)
    if (fz.slots[k].b.p) fz_free(main_t, &fz.slots[k].b);
  for (int i = 0; i < fz.nthreads * FZ_ARENAS; i++)
    if (fz.arenas[i].a) ebb_arena_destroy(fz.arenas[i].a), fz.arenas[i].a = NULL, fz.arenas[i].gen++;
  pthread_barrier_destroy(&fz.barrier);
  close(fz.devnull);

  fz_thread_t sum = {0};
  for (int i = 0; i < fz.nthreads; i++) {
    fz_thread_t *t = &fz.th[i];
    sum.op += t->op, sum.n_alloc += t->n_alloc, sum.n_free += t->n_free, sum.n_realloc += t->n_realloc;
    sum.n_large_realloc += t->n_large_realloc, sum.n_handover += t->n_handover, sum.n_dead += t->n_dead;
    sum.n_arena_create += t->n_arena_create, sum.n_arena_reset += t->n_arena_reset;
    sum.n_arena_destroy += t->n_arena_destroy, sum.n_misc += t->n_misc;
  }
  char line[512];
  int len = snprintf(line, sizeof line,
                     "fuzz: seed=%llu ops=%zu threads=%d allocs=%zu frees=%zu reallocs=%zu (large %zu) "
                     "handovers=%zu arenas=%zu/%zu/%zu died_with_arena=%zu misc=%zu checkpoints=%zu\n",
                     (unsigned long long)fz.seed, sum.op, fz.nthreads, sum.n_alloc, sum.n_free, sum.n_realloc,
                     sum.n_large_realloc, sum.n_handover, sum.n_arena_create, sum.n_arena_reset,
                     sum.n_arena_destroy, sum.n_dead, sum.n_misc, fz.checkpoints);
  ssize_t w = write(2, line, len > 0 ? (size_t)len : 0);
  (void)w;
  cr_assert_eq(sum.op, (size_t)fz.nthreads * fz.th[0].ops);
  cr_assert_gt(sum.n_handover, 0);
  cr_assert_gt(fz.checkpoints, 0);
}

/* The time limit is for long runs (make fuzz); a hang fails much sooner (fz_watch). */
Test(fuzz, threads, .timeout = 3600) { fz_run(FZ_THREADS, 1); }

/* One thread: the same operations, hand-overs through the slots to itself,
 * fully reproducible from the seed; a quarter of the default ops. */
Test(fuzz, one_thread, .timeout = 3600) { fz_run(1, 4); }
