/* test_races.c — races between threads that independent probes found:
 *  - huge_realloc: a large block moved by mremap while other threads map large
 *    blocks; the move must not erase the registry entry of a block another thread
 *    has just placed at the old address (its free then aborted with "invalid
 *    pointer").
 *  - double free across threads: a block freed by another thread sits in that
 *    thread cache, where the owner's list walk cannot see it; a
 *    second free by the owner must still abort with "double free" (and the other
 *    order too).
 *  - ebb_owns on pointers that were live a moment ago, while their chunks and
 *    large mappings are unmapped: "safe on any pointer value", never SIGSEGV.
 *  - a large block's slack (the resident tail past its size, left for the
 *    decay) purged by another thread's ebb_trim while the block's realloc
 *    grows into it or moves it away: not a byte of the block may be lost.
 * Only the ebb_* names are called (the TSan build does not override malloc).
 * Loops are bounded by an operation count and a time cap; seeds are fixed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "stress_util.h"

#define MiB ((size_t)1 << 20)
#define RC_PAGE ((size_t)4096)

static uint64_t rc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ================================================================ large realloc */

#define HR_MOVES 200000     /* reallocs by the resizing thread, at most (release) */
#define HR_MAPPERS 4        /* threads mapping and freeing large blocks */
#define HR_MAPPER_OPS 20000 /* malloc/free pairs per mapper, at most (release) */
#define HR_TIME_MS 8000     /* and at most this long */
#define HR_SMALL (3 * MiB)
#define HR_BIG (40 * MiB)
#define HR_STRIDE                                                                                            \
  ((size_t)64 << 10) /* mappers write a byte every 64 KiB: faulting in every                                 \
                        page would slow them so much the race is rarely hit */

static atomic_int hr_stop;
static atomic_ulong hr_mapper_ops, hr_moves;

/* Checks what ebb promises of a large block: ownership and usable size. */
static void hr_check_new(unsigned char *p, size_t size, const char *who) {
  if (!p) stress_die("%s: ebb_malloc(%zu) returned NULL", who, size);
  if (!ebb_owns(p))
    stress_die("%s: ebb_owns(%p) is 0 for a block just allocated (%zu B)", who, (void *)p, size);
  size_t usable = ebb_malloc_usable_size(p);
  if (usable < size) stress_die("%s: usable size %zu < %zu at %p", who, usable, size, (void *)p);
}

static void *hr_mapper(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(31000 + id);
  size_t ops = stress_n(HR_MAPPER_OPS);
  for (size_t i = 0; i < ops && !atomic_load_explicit(&hr_stop, memory_order_relaxed); i++) {
    size_t size = 3 * MiB + (size_t)rng_below(&r, 17 * MiB);
    unsigned char *p = ebb_malloc(size);
    hr_check_new(p, size, "huge mapper");
    unsigned char mark = (unsigned char)(i | 1);
    for (size_t off = 0; off < size; off += HR_STRIDE) p[off] = mark;
    p[size - 1] = mark;
    /* a registry entry erased by another thread's realloc shows here, or in free */
    if (!ebb_owns(p)) stress_die("huge mapper: ebb_owns(%p) became 0 while the block was live", (void *)p);
    for (size_t off = 0; off < size; off += HR_STRIDE)
      if (p[off] != mark) stress_die("huge mapper: block %p changed at offset %zu", (void *)p, off);
    if (p[size - 1] != mark) stress_die("huge mapper: block %p changed at its last byte", (void *)p);
    ebb_free(p);
    atomic_fetch_add_explicit(&hr_mapper_ops, 1, memory_order_relaxed);
  }
  return NULL;
}

/* Maps a page of our own `gap` bytes after the end of the block's mapping
 * (p + usable size). Within the room a growth to HR_BIG needs, it makes realloc
 * move the block, and the hole left behind ends at the guard, where a mapper's
 * next block may land exactly at the old address. NULL when something is
 * mapped there already. */
static void *hr_guard(void *p, size_t gap) {
  char *at = (char *)p + ebb_malloc_usable_size(p) + gap;
  if ((uintptr_t)at % RC_PAGE) stress_die("huge realloc: mapping of %p ends off a page boundary", p);
  void *g = mmap(at, RC_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (g == MAP_FAILED) return NULL;
  if (g != at) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
    munmap(g, RC_PAGE);
    return NULL;
  }
  return g;
}

/* The resizing thread: one block grown from 3 MiB to about 40 MiB and back,
 * over and over. Before each growth, ebb_trim unmaps the freed large blocks ebb
 * keeps for reuse (the space after p among them, and the mappers' blocks, who
 * must then map anew), and a guard page 1..60 MiB after p makes most growths
 * move it: the old address is free for the mappers the moment mremap returns.
 * Without the guards the block settles below everything else and grows in
 * place almost every time. The first and last kept words carry a value that
 * must survive every move. */
static void hr_resize(size_t moves, uint64_t deadline) {
  rng_t r = rng_seed(30000);
  size_t size = HR_SMALL;
  uint64_t *p = ebb_malloc(size);
  hr_check_new((unsigned char *)p, size, "huge realloc");
  for (size_t i = 0; i < moves && rc_now_ms() < deadline; i++) {
    uint64_t tag = mix64(i + 1);
    p[0] = tag;
    p[HR_SMALL / 8 - 1] = ~tag;
    bool grow = size == HR_SMALL;
    size_t want = grow ? HR_BIG + (size_t)rng_below(&r, 8) * RC_PAGE : HR_SMALL;
    if (grow) ebb_trim(); /* unmaps freed large blocks kept for reuse, the room after p among them */
    void *guard = grow ? hr_guard(p, (1 + (size_t)rng_below(&r, 60)) * MiB) : NULL;
    uint64_t *q = ebb_realloc(p, want);
    if (!q) stress_die("huge realloc: ebb_realloc(%p, %zu) returned NULL", (void *)p, want);
    if (q != p) atomic_fetch_add_explicit(&hr_moves, 1, memory_order_relaxed);
    if (guard) munmap(guard, RC_PAGE);
    hr_check_new((unsigned char *)q, want, "huge realloc");
    if (q[0] != tag || q[HR_SMALL / 8 - 1] != ~tag)
      stress_die("huge realloc: %p -> %p (%zu -> %zu B) lost its contents", (void *)p, (void *)q, size, want);
    if (grow) ((unsigned char *)q)[want - 1] = 1; /* the grown tail is mapped and writable */
    p = q;
    size = want;
  }
  ebb_free(p);
}

Test(races, huge_realloc_moves_while_others_map, .timeout = 40) {
  atomic_store(&hr_stop, 0);
  atomic_store(&hr_mapper_ops, 0);
  atomic_store(&hr_moves, 0);
  pthread_t t[HR_MAPPERS];
  for (uintptr_t i = 0; i < HR_MAPPERS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, hr_mapper, (void *)i), 0);
  hr_resize(stress_n(HR_MOVES), rc_now_ms() + HR_TIME_MS);
  atomic_store(&hr_stop, 1);
  for (int i = 0; i < HR_MAPPERS; i++) pthread_join(t[i], NULL);
  cr_log_info("huge realloc: %lu moves, %lu mapper operations", atomic_load(&hr_moves),
              atomic_load(&hr_mapper_ops));
}

/* ================================================================ slack purged while its block grows */

#define SL_ROUNDS 20000 /* rounds of the growing thread, at most (release) */
#define SL_TIME_MS 3000 /* and at most this long */
static atomic_int sl_stop;
static atomic_ulong sl_trims;

static void *sl_trimmer(void *arg) {
  (void)arg;
  while (!atomic_load_explicit(&sl_stop, memory_order_relaxed)) {
    ebb_trim(); /* purges every listed slack */
    atomic_fetch_add_explicit(&sl_trims, 1, memory_order_relaxed);
  }
  return NULL;
}

/* The word at each page offset of p that lies within `to` bytes carries
 * tag ^ offset; those that lay within `from` bytes already do. */
static void sl_mark(unsigned char *p, size_t from, size_t to, uint64_t tag) {
  for (size_t off = 0; off + 8 <= to; off += RC_PAGE)
    if (off + 8 > from) *(uint64_t *)(p + off) = tag ^ off;
}
static void sl_check(unsigned char *p, size_t to, uint64_t tag, const char *when) {
  for (size_t off = 0; off + 8 <= to; off += RC_PAGE)
    if (*(uint64_t *)(p + off) != (tag ^ off))
      stress_die("slack: %s: the word at %p + %zu of %zu B lost its value", when, (void *)p, off, to);
}

/* Each round caches an 11 MiB block and takes it back for 7 MiB (a 4 MiB
 * slack), then grows it by realloc into the slack, page by page of the growth
 * written, and sometimes past it (a move or an in-place mremap): another
 * thread purges all slack in a loop meanwhile. */
Test(races, slack_purged_while_its_block_grows, .timeout = 40) {
  atomic_store(&sl_stop, 0);
  atomic_store(&sl_trims, 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, sl_trimmer, NULL), 0);
  rng_t r = rng_seed(40000);
  uint64_t deadline = rc_now_ms() + SL_TIME_MS;
  size_t rounds = 0, n = stress_n(SL_ROUNDS);
  for (; rounds < n && rc_now_ms() < deadline; rounds++) {
    uint64_t tag = mix64(rounds + 1);
    ebb_free(ebb_malloc(11 * MiB));
    size_t size = 7 * MiB;
    unsigned char *p = ebb_malloc(size);
    if (!p) stress_die("slack: ebb_malloc(7 MiB) returned NULL");
    sl_mark(p, 0, size, tag);
    for (int step = 0; step < 4; step++) {
      size_t want = size + (size_t)rng_below(&r, 1u << 20) + 1;
      if (step == 3 && rng_below(&r, 2)) want = 16 * MiB + (size_t)rng_below(&r, 64) * RC_PAGE;
      unsigned char *q = ebb_realloc(p, want);
      if (!q) stress_die("slack: ebb_realloc(%p, %zu) returned NULL", (void *)p, want);
      sl_check(q, size, tag, "after the realloc");
      sl_mark(q, size, want, tag);
      p = q, size = want;
      sl_check(p, size, tag, "written after the growth");
    }
    ebb_free(p);
  }
  atomic_store(&sl_stop, 1);
  pthread_join(t, NULL);
  cr_log_info("slack: %zu rounds, %lu trims", rounds, atomic_load(&sl_trims));
}

/* ================================================================ cross-thread double free */

/* A helper thread that runs one step on demand and stays alive until told to
 * exit, so what it freed stays in its thread cache. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int step; /* 0 idle; 1 free `block`; 2 exit */
  int done; /* steps completed */
  void *block;
  void *warm; /* its own block: it has an arena (and a thread cache) */
} df_peer_t;

static void *df_peer_main(void *arg) {
  df_peer_t *d = arg;
  d->warm = ebb_malloc(64);
  STRESS_CHECK(d->warm != NULL);
  pthread_mutex_lock(&d->lock);
  d->done = 1; /* ready */
  pthread_cond_broadcast(&d->cond);
  for (;;) {
    while (d->step == 0) pthread_cond_wait(&d->cond, &d->lock);
    int step = d->step;
    d->step = 0;
    if (step == 2) break;
    pthread_mutex_unlock(&d->lock);
    ebb_free(d->block);
    pthread_mutex_lock(&d->lock);
    d->done++;
    pthread_cond_broadcast(&d->cond);
  }
  pthread_mutex_unlock(&d->lock);
  ebb_free(d->warm);
  return NULL;
}

static void df_peer_do(df_peer_t *d, int step) {
  pthread_mutex_lock(&d->lock);
  int target = d->done + 1;
  d->step = step;
  pthread_cond_broadcast(&d->cond);
  if (step == 1)
    while (d->done < target) pthread_cond_wait(&d->cond, &d->lock);
  pthread_mutex_unlock(&d->lock);
}

static void df_peer_start(df_peer_t *d, pthread_t *t) {
  *d = (df_peer_t){.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
  if (pthread_create(t, NULL, df_peer_main, d) != 0) stress_die("double free: pthread_create failed");
  pthread_mutex_lock(&d->lock);
  while (d->done < 1) pthread_cond_wait(&d->cond, &d->lock);
  pthread_mutex_unlock(&d->lock);
}

/* Each case stores the pointer it is about to free a second time in *e. It
 * returns only if the double free went unnoticed. */
typedef void df_case_fn(volatile uintptr_t *e);

/* The owner frees a block a second time after another (live) thread freed it:
 * the block sits in that thread's cache. */
static void df_remote_then_owner(volatile uintptr_t *e) {
  df_peer_t d;
  pthread_t t;
  df_peer_start(&d, &t);
  void *keep = ebb_malloc(64), *p = ebb_malloc(64); /* keep: the page stays in use */
  STRESS_CHECK(keep && p);
  d.block = p;
  df_peer_do(&d, 1);
  *e = (uintptr_t)p;
  ebb_free(p);
  df_peer_do(&d, 2);
  pthread_join(t, NULL);
  ebb_free(keep);
}

/* The owner frees first; another thread frees the same block again. */
static void df_owner_then_remote(volatile uintptr_t *e) {
  df_peer_t d;
  pthread_t t;
  df_peer_start(&d, &t);
  void *keep = ebb_malloc(64), *p = ebb_malloc(64);
  STRESS_CHECK(keep && p);
  ebb_free(p);
  d.block = p;
  *e = (uintptr_t)p;
  df_peer_do(&d, 1);
  df_peer_do(&d, 2);
  pthread_join(t, NULL);
  ebb_free(keep);
}

/* Runs a case in a forked child with stderr on a pipe (as the integration
 * suite's run_misuse_child); the pointer comes back through shared memory. */
typedef struct {
  int status;
  uintptr_t expected;
  char err[4096];
} df_result_t;

static void df_run_child(df_case_fn *fn, df_result_t *r) {
  volatile uintptr_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq((void *)shared, MAP_FAILED);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  *shared = 0;
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0, "fork failed");
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    close(fds[1]);
    alarm(20); /* a hang shows as SIGALRM */
    fn(shared);
    _exit(0); /* the double free went unnoticed */
  }
  close(fds[1]);
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fds[0], r->err + len, sizeof r->err - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
    if (len == sizeof r->err - 1) break;
  }
  r->err[len] = 0;
  close(fds[0]);
  while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR) {
  }
  r->expected = *shared;
  munmap((void *)shared, 4096);
}

/* The child must die of SIGABRT after one line "ebb: free(): double free 0x<p>". */
static void df_check_message(df_case_fn *fn) {
  df_result_t r;
  df_run_child(fn, &r);
  cr_assert(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT,
            "expected death by SIGABRT; the child's status is 0x%x (exit %d, signal %d); stderr:\n%s",
            r.status, WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1,
            WIFSIGNALED(r.status) ? WTERMSIG(r.status) : 0, r.err);
  cr_assert_neq(r.expected, 0, "the case did not record its pointer");
  char want[128];
  snprintf(want, sizeof want, "ebb: free(): double free %#lx\n", (unsigned long)r.expected);
  cr_assert_str_eq(r.err, want, "stderr was:\n%s", r.err);
}

/* In the test process itself, with Criterion's .signal (stderr silenced: the
 * message is checked by the _msg twin). */
static void df_in_process(df_case_fn *fn) {
  volatile uintptr_t e;
  int null = open("/dev/null", O_WRONLY);
  cr_assert(null >= 0 && dup2(null, 2) == 2);
  fn(&e);
}

Test(races, double_free_remote_then_owner, .signal = SIGABRT, .timeout = 20) {
  df_in_process(df_remote_then_owner);
}
Test(races, double_free_remote_then_owner_msg, .timeout = 30) { df_check_message(df_remote_then_owner); }
Test(races, double_free_owner_then_remote, .signal = SIGABRT, .timeout = 20) {
  df_in_process(df_owner_then_remote);
}
Test(races, double_free_owner_then_remote_msg, .timeout = 30) { df_check_message(df_owner_then_remote); }

/* ================================================================ ebb_owns on stale pointers */

#define OW_CHURNERS 2
#define OW_WATCHERS 3   /* more threads than the 2 cores: watchers get preempted mid-lookup */
#define OW_SLOTS 256    /* pointers on show to the watchers */
#define OW_CYCLES 3000  /* churn cycles per churner, at most (release) */
#define OW_TIME_MS 5000 /* and at most this long */
#define OW_BLOCKS 96    /* blocks per cycle: 96 x 64 KiB = 6 MiB, two chunks and more */
#define OW_BLOCK (64 << 10)

static _Atomic(void *) ow_slots[OW_SLOTS];
static atomic_int ow_stop;
static atomic_ulong ow_cycles, ow_calls, ow_true;

static void ow_show(rng_t *r, void *p) {
  atomic_store_explicit(&ow_slots[rng_below(r, OW_SLOTS)], p, memory_order_relaxed);
}

/* Maps memory (pages in fresh chunks, a large block), shows its pointers to the
 * watchers, frees it all and trims, so the chunks and the mapping are unmapped
 * while the watchers still look at the stale pointers. */
static void *ow_churner(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(32000 + id);
  void *blocks[OW_BLOCKS];
  size_t cycles = stress_n(OW_CYCLES);
  for (size_t c = 0; c < cycles && !atomic_load_explicit(&ow_stop, memory_order_relaxed); c++) {
    size_t size = OW_BLOCK - 16 * (size_t)rng_below(&r, 64); /* one or two neighbouring classes */
    for (int i = 0; i < OW_BLOCKS; i++) {
      blocks[i] = ebb_malloc(size);
      STRESS_CHECK(blocks[i] != NULL);
      ow_show(&r, blocks[i]);
    }
    size_t big = 2 * MiB + 4096 + (size_t)rng_below(&r, 6 * MiB);
    void *large = ebb_malloc(big);
    STRESS_CHECK(large != NULL);
    ow_show(&r, large);
    ow_show(&r, (char *)large + 4096); /* an interior pointer of a large block too */
    for (int i = 0; i < OW_BLOCKS; i++) ebb_free(blocks[i]);
    ebb_free(large);
    ebb_trim();
    atomic_fetch_add_explicit(&ow_cycles, 1, memory_order_relaxed);
  }
  return NULL;
}

static void *ow_watcher(void *arg) {
  rng_t r = rng_seed(33000 + (uintptr_t)arg);
  unsigned long calls = 0, yes = 0;
  while (!atomic_load_explicit(&ow_stop, memory_order_relaxed)) {
    for (int k = 0; k < 1024; k++) {
      const void *p = atomic_load_explicit(&ow_slots[rng_below(&r, OW_SLOTS)], memory_order_relaxed);
      int v = ebb_owns(p);
      if (v != 0 && v != 1) stress_die("ebb_owns(%p) returned %d", p, v);
      yes += (unsigned long)v;
      calls++;
    }
  }
  atomic_fetch_add(&ow_calls, calls);
  atomic_fetch_add(&ow_true, yes);
  return NULL;
}

Test(races, owns_on_stale_pointers_while_unmapping, .timeout = 60) {
  atomic_store(&ow_stop, 0);
  atomic_store(&ow_cycles, 0);
  for (int i = 0; i < OW_SLOTS; i++) atomic_store(&ow_slots[i], NULL);
  pthread_t c[OW_CHURNERS], w[OW_WATCHERS];
  for (uintptr_t i = 0; i < OW_WATCHERS; i++)
    cr_assert_eq(pthread_create(&w[i], NULL, ow_watcher, (void *)i), 0);
  for (uintptr_t i = 0; i < OW_CHURNERS; i++)
    cr_assert_eq(pthread_create(&c[i], NULL, ow_churner, (void *)i), 0);
  uint64_t deadline = rc_now_ms() + OW_TIME_MS;
  struct timespec nap = {0, 10 * 1000 * 1000};
  while (rc_now_ms() < deadline && atomic_load(&ow_cycles) < OW_CHURNERS * stress_n(OW_CYCLES))
    nanosleep(&nap, NULL);
  atomic_store(&ow_stop, 1);
  for (int i = 0; i < OW_CHURNERS; i++) pthread_join(c[i], NULL);
  for (int i = 0; i < OW_WATCHERS; i++) pthread_join(w[i], NULL);
  cr_log_info("owns: %lu churn cycles, %lu ebb_owns calls, %lu returned 1", atomic_load(&ow_cycles),
              atomic_load(&ow_calls), atomic_load(&ow_true));
}
