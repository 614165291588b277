/* rss_probe.c — run by tests/integration/test_rss.c in a fresh process, with
 * LD_PRELOAD=build/libebb.so and the EBB_* settings a scenario needs already in
 * its environment (or without the preload, for a comparison with glibc).
 * Measures through the kernel: RSS from /proc/self/statm and minor faults from
 * getrusage, read without allocating. Prints one line of `key=value` fields
 * per scenario; the test decides what passes. Exit status: 0, or 2 on bad usage
 * or a failed mapping, or (fork) 3 when the child did not exit 0.
 * The ebb_* functions are found with dlsym, so the program also runs on glibc
 * (where it prints ebb=0 and uses malloc_trim for ebb_trim). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ebb.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define DEADLINE_MS 1500 /* at least the default decay time (250 ms) + 1 s */
#define POLL_MS 50
/* Where only the background thread can return the memory (no allocator call
 * in the process; threads that stay alive count as idle only after the decay
 * time without a tick, and only then does it take their pages): the same
 * second after the decay time, and 1 s more of room, since on a loaded machine
 * (make test runs other test processes beside this one) its passes run late
 * and each madvise of ~256 MiB takes longer (seen: 34.6 of 269 MiB still
 * resident at 1544 ms, where alone it is all gone by 350-400 ms). A purge that
 * never comes still fails: RSS stays at the whole build. */
#define BG_DEADLINE_MS 2500

/* ---------------------------------------------------------------- measuring */

static void (*stats_fn)(struct ebb_stats *);
static size_t (*trim_fn)(void);
static int (*owns_fn)(const void *);

static void find_ebb(void) {
  stats_fn = (void (*)(struct ebb_stats *))dlsym(RTLD_DEFAULT, "ebb_stats");
  trim_fn = (size_t(*)(void))dlsym(RTLD_DEFAULT, "ebb_trim");
  owns_fn = (int (*)(const void *))dlsym(RTLD_DEFAULT, "ebb_owns");
}

/* 1 when malloc is ebb's: the symbols exist and ebb claims a fresh block. */
static int on_ebb(void) {
  if (!stats_fn || !trim_fn || !owns_fn) return 0;
  void *p = malloc(100);
  int yes = owns_fn(p);
  free(p);
  return yes;
}

static struct ebb_stats stats(void) {
  struct ebb_stats s = {0};
  if (stats_fn) stats_fn(&s);
  return s;
}

/* Reads a small /proc file into buf without allocating (no stdio). */
static int read_proc(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return (int)n;
}

/* Resident bytes, from the second field of /proc/self/statm. */
static size_t rss(void) {
  char buf[256];
  if (read_proc("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  char *p = buf;
  while (*p && *p != ' ') p++;
  size_t pages = 0;
  while (*p == ' ') p++;
  while (*p >= '0' && *p <= '9') pages = pages * 10 + (size_t)(*p++ - '0');
  return pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* The Threads: line of /proc/self/status. */
static int threads(void) {
  char buf[4096];
  if (read_proc("/proc/self/status", buf, sizeof buf) <= 0) return -1;
  char *p = strstr(buf, "\nThreads:");
  if (!p) return -1;
  p += 9;
  while (*p == ' ' || *p == '\t') p++;
  int n = 0;
  while (*p >= '0' && *p <= '9') n = n * 10 + (*p++ - '0');
  return n;
}

static long minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static double mib(size_t bytes) { return (double)bytes / (double)MiB; }
static double smib(size_t a, size_t b) { return a >= b ? mib(a - b) : -mib(b - a); } /* a - b */

/* Fixed-seed generator (xorshift64*): the same plan on every run. */
static uint64_t rnd(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}
static size_t rnd_in(uint64_t *s, size_t lo, size_t hi) { return lo + (size_t)(rnd(s) % (hi - lo + 1)); }

/* Writes every page of a block (and keeps the compiler from dropping it). */
static void touch(void *p, size_t n, int byte) {
  memset(p, byte, n);
  __asm__ volatile("" ::"r"(p) : "memory");
}

static void *xmap(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    printf("error: mmap of %zu bytes failed\n", n);
    exit(2);
  }
  return p;
}

/* A block of `size` bytes allocated, written and freed: work in one size. */
static void use_and_free(size_t size, int byte) {
  char *p = malloc(size);
  if (p) touch(p, size, byte);
  free(p);
}

/* n blocks of `size` bytes into ps, each written; -1 if a malloc failed. */
static int fill_blocks(void **ps, size_t n, size_t size) {
  for (size_t i = 0; i < n; i++) {
    ps[i] = malloc(size);
    if (!ps[i]) return -1;
    touch(ps[i], size, (int)i);
  }
  return 0;
}

/* ---------------------------------------------------------------- churn */

/* One request's worth of work, the same sizes every cycle: a ~450 KB block,
 * 3000 of 16-512 B and 24 of 4-64 KiB, in a fixed interleaved order, all
 * written, then freed in a fresh random order. */
#define CHURN_SMALL 3000
#define CHURN_MEDIUM 24
#define CHURN_N (1 + CHURN_SMALL + CHURN_MEDIUM)
#define CHURN_WARM 100
#define CHURN_MEASURED 100
/* Measured windows of CHURN_MEASURED cycles each. One window may see the
 * footprint's last few pages touched for the first time: at 6032148 one run
 * in 25 had 37 faults in one cycle after the warm-up (warm_faults 602 + 37
 * there, 639 + 0 or 602 + 0 elsewhere: first touches, RSS grew by them), and
 * more warm-up cycles did not remove it. Pages faulted back in again and
 * again would show in every window. */
#define CHURN_WINDOWS 3

static size_t churn_size[CHURN_N];
static void *churn_ptr[CHURN_N];
static unsigned churn_order[CHURN_N];

static void churn_plan(void) {
  uint64_t s = 0x5eed0001;
  size_t n = 0;
  churn_size[n++] = 450 * KiB;
  for (int i = 0; i < CHURN_SMALL; i++) churn_size[n++] = rnd_in(&s, 16, 512);
  for (int i = 0; i < CHURN_MEDIUM; i++) churn_size[n++] = rnd_in(&s, 4 * KiB, 64 * KiB);
  for (size_t i = CHURN_N - 1; i > 0; i--) { /* interleave the kinds, once */
    size_t j = (size_t)(rnd(&s) % (i + 1)), t = churn_size[i];
    churn_size[i] = churn_size[j];
    churn_size[j] = t;
  }
  for (unsigned i = 0; i < CHURN_N; i++) churn_order[i] = i;
}

static int churn_cycle(uint64_t *s) {
  for (unsigned i = 0; i < CHURN_N; i++) {
    churn_ptr[i] = malloc(churn_size[i]);
    if (!churn_ptr[i]) return -1;
    touch(churn_ptr[i], churn_size[i], (int)i);
  }
  for (unsigned i = CHURN_N - 1; i > 0; i--) {
    unsigned j = (unsigned)(rnd(s) % (i + 1)), t = churn_order[i];
    churn_order[i] = churn_order[j];
    churn_order[j] = t;
  }
  for (unsigned i = 0; i < CHURN_N; i++) free(churn_ptr[churn_order[i]]);
  return 0;
}

static int mode_churn(unsigned gap_ms) {
  uint64_t s = 0x5eed0002;
  churn_plan();
  size_t rss0 = rss();
  long f0 = minflt();
  for (int c = 0; c < CHURN_WARM; c++) {
    if (churn_cycle(&s)) return printf("error: malloc failed\n"), 2;
    if (gap_ms) sleep_ms(gap_ms);
  }
  long f1 = minflt();
  size_t rss1 = rss();
  uint64_t t1 = now_ms();
  long worst = 0, prev = f1, window[CHURN_WINDOWS];
  for (int w = 0; w < CHURN_WINDOWS; w++) {
    long start = prev;
    for (int c = 0; c < CHURN_MEASURED; c++) {
      if (churn_cycle(&s)) return printf("error: malloc failed\n"), 2;
      if (gap_ms) sleep_ms(gap_ms);
      long f = minflt();
      if (f - prev > worst) worst = f - prev;
      prev = f;
    }
    window[w] = prev - start;
  }
  long f2 = minflt();
  uint64_t t2 = now_ms();
  printf("ebb=%d gap_ms=%u warm_cycles=%d cycles=%d windows=%d warm_faults=%ld faults=%ld w0=%ld w1=%ld w2=%ld "
         "worst_cycle=%ld rss_before_mib=%.1f rss_mib=%.1f rss_growth_kib=%ld measured_ms=%llu\n",
         on_ebb(), gap_ms, CHURN_WARM, CHURN_MEASURED, CHURN_WINDOWS, f1 - f0, f2 - f1, window[0], window[1],
         window[2], worst, mib(rss0), mib(rss()), (long)((long long)rss() - (long long)rss1) / 1024,
         (unsigned long long)(t2 - t1));
  return 0;
}

/* ---------------------------------------------------------------- handoff */

/* Two threads each build half of ~256 MiB of 32-512 B objects, swap arrays,
 * free the other's objects except one in 512, and exit. Then the main thread
 * watches RSS fall, either allocating a little every millisecond or (with the
 * background thread) doing nothing the allocator can see. */
#define HANDOFF_BYTES (128 * MiB) /* per thread */
#define HANDOFF_MAX (HANDOFF_BYTES / 32)
#define KEEP_EVERY 512

struct worker {
  int id;
  void **ptrs;       /* what it built (an mmap, not a malloc) */
  size_t n;          /* objects built */
  size_t *sizes;     /* their sizes */
  void **kept;       /* the other's survivors, one in KEEP_EVERY */
  size_t nkept, live;/* how many, and their bytes */
  size_t build_rss;  /* RSS when both had built */
};
static struct worker workers[2];
static pthread_barrier_t handoff_barrier;
static int handoff_stay;              /* workers stay alive, blocked, after their frees */
static int handoff_busy;              /* ... or at work: a small malloc/free loop */
static atomic_int handoff_release;    /* ends that loop */
static atomic_int handoff_done;       /* workers past their frees */
static pthread_barrier_t handoff_end; /* releases them */

/* The busy workers' one small block, allocated and freed at every step from
 * the start: its page stays the class's, so the work after the frees never
 * needs a page (a malloc that needs one takes back the pages other threads
 * freed, arena_drain_remote). */
static void handoff_small(int k) { use_and_free(16, k); /* a size the build never uses */ }

static void *handoff_main(void *arg) {
  struct worker *w = arg, *other = &workers[1 - w->id];
  uint64_t s = 0xb01d0000u + (uint64_t)w->id;
  size_t bytes = 0;
  while (bytes < HANDOFF_BYTES) {
    size_t sz = rnd_in(&s, 32, 512);
    void *p = malloc(sz);
    if (!p) break;
    touch(p, sz, (int)(w->n & 0xff));
    w->ptrs[w->n] = p;
    w->sizes[w->n++] = sz;
    bytes += sz;
    if (handoff_busy) handoff_small((int)w->n);
  }
  pthread_barrier_wait(&handoff_barrier);
  if (w->id == 0) w->build_rss = rss();
  pthread_barrier_wait(&handoff_barrier);
  for (size_t i = 0; i < other->n; i++) {
    if (i % KEEP_EVERY == 0) {
      w->kept[w->nkept++] = other->ptrs[i];
      w->live += other->sizes[i];
    } else {
      free(other->ptrs[i]);
    }
    if (handoff_busy) handoff_small((int)i);
  }
  atomic_fetch_add(&handoff_done, 1);
  if (handoff_busy) /* alive and at work */
    while (!atomic_load(&handoff_release)) {
      for (int k = 0; k < 16; k++) handoff_small(k);
      sleep_ms(1);
    }
  else if (handoff_stay)
    pthread_barrier_wait(&handoff_end); /* alive and idle, as a worker pool */
  return NULL;
}

static int mode_handoff(int activity, int stay, int busy) {
  size_t nkept_max = HANDOFF_MAX / KEEP_EVERY + 1;
  for (int i = 0; i < 2; i++) {
    workers[i] = (struct worker){.id = i};
    workers[i].ptrs = xmap(HANDOFF_MAX * sizeof(void *));
    workers[i].sizes = xmap(HANDOFF_MAX * sizeof(size_t));
    workers[i].kept = xmap(nkept_max * sizeof(void *));
  }
  pthread_barrier_init(&handoff_barrier, NULL, 2);
  pthread_barrier_init(&handoff_end, NULL, 3);
  stay = stay || busy;
  handoff_stay = stay;
  handoff_busy = busy;
  int ebb = on_ebb();
  size_t base = rss();
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, handoff_main, &workers[i])) return printf("error: pthread_create\n"), 2;
  if (stay)
    while (atomic_load(&handoff_done) < 2) sleep_ms(1);
  else
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  /* The arrays go back now: only the survivors and what the allocator keeps remain. */
  for (int i = 0; i < 2; i++) {
    munmap(workers[i].ptrs, HANDOFF_MAX * sizeof(void *));
    munmap(workers[i].sizes, HANDOFF_MAX * sizeof(size_t));
  }
  uint64_t t0 = now_ms();
  unsigned deadline = (stay || !activity) ? BG_DEADLINE_MS : DEADLINE_MS; /* !activity: only the background thread */
  size_t live = workers[0].live + workers[1].live, bound = 2 * live + 16 * MiB;
  size_t at_exit = rss(), r = at_exit;
  long reached = -1;
  uint64_t next_poll = t0, spins = 0;
  for (;;) {
    uint64_t t = now_ms();
    if (t >= next_poll) {
      r = rss();
      if (r <= base + bound) {
        reached = (long)(t - t0);
        break;
      }
      if (t - t0 >= deadline) break;
      next_poll += POLL_MS;
    }
    if (activity) {
      size_t sz = 16 + (spins++ % 16) * 16;
      char *p = malloc(sz);
      if (p) touch(p, sz, 1);
      free(p);
      sleep_ms(1);
    } else {
      sleep_ms(POLL_MS);
    }
  }
  uint64_t t1 = now_ms();
  struct ebb_stats st = stats();
  printf("ebb=%d activity=%d objects=%zu kept=%zu live_kib=%zu bound_mib=%.1f base_mib=%.1f "
         "build_mib=%.1f exit_mib=%.1f final_mib=%.1f reached_ms=%ld watched_ms=%llu "
         "dirty_mib=%.1f active_mib=%.1f mapped_mib=%.1f threads=%d deadline_ms=%u\n",
         ebb, activity, workers[0].n + workers[1].n, workers[0].nkept + workers[1].nkept, live / KiB,
         mib(bound), mib(base), smib(workers[0].build_rss, base), smib(at_exit, base), smib(r, base),
         reached, (unsigned long long)(t1 - t0), mib(st.dirty), mib(st.active), mib(st.mapped), threads(),
         deadline);
  if (busy) {
    atomic_store(&handoff_release, 1);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  } else if (stay) {
    pthread_barrier_wait(&handoff_end);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < 2; i++)
    for (size_t k = 0; k < workers[i].nkept; k++) free(workers[i].kept[k]);
  return 0;
}

/* ---------------------------------------------------------------- large + trim */

#define TRIM_BLOCK (64 * KiB)
#define TRIM_COUNT (200 * MiB / TRIM_BLOCK)
static void *trim_ptr[TRIM_COUNT];

static int mode_large(void) {
  int ebb = on_ebb();
  /* A 64 MiB block: ebb keeps a freed large block resident for the decay time
   * (dirty, reusable at no cost), then unmaps it; the polling loop below is a
   * lightly active program (each poll mallocs and frees a few small blocks),
   * so decay runs without a background thread. */
  size_t base = rss();
  char *big = malloc(64 * MiB);
  if (!big) return printf("error: malloc failed\n"), 2;
  touch(big, 64 * MiB, 7);
  size_t with_big = rss();
  uint64_t t0 = now_ms();
  free(big);
  size_t r = rss();
  long reached = -1;
  for (;;) {
    uint64_t t = now_ms();
    if (r < with_big && with_big - r >= 60 * MiB) { /* RSS may also have grown a page: no unsigned wrap */
      reached = (long)(t - t0);
      break;
    }
    if (t - t0 >= DEADLINE_MS) break;
    sleep_ms(POLL_MS);
    for (int k = 0; k < 100; k++) free(malloc(64));
    r = rss();
  }
  printf("ebb=%d big_growth_mib=%.1f big_drop_mib=%.1f big_reached_ms=%ld ", ebb, smib(with_big, base),
         smib(with_big, r), reached);

  /* 200 MiB of 64 KiB blocks, freed: what stays dirty, then one trim. */
  size_t base2 = rss(), dirty0 = stats().dirty;
  for (size_t i = 0; i < TRIM_COUNT; i++) {
    trim_ptr[i] = malloc(TRIM_BLOCK);
    if (!trim_ptr[i]) return printf("error: malloc failed\n"), 2;
    touch(trim_ptr[i], TRIM_BLOCK, (int)i);
  }
  size_t full = rss();
  for (size_t i = 0; i < TRIM_COUNT; i++) free(trim_ptr[i]);
  struct ebb_stats before = stats();
  size_t freed = rss();
  size_t trimmed = trim_fn && ebb ? trim_fn() : (size_t)malloc_trim(0);
  struct ebb_stats after = stats();
  size_t end = rss();
  printf("blocks_mib=%.1f rss_after_free_mib=%.1f dirty_before_mib=%.1f trimmed_mib=%.1f "
         "dirty_after=%zu trim_drop_mib=%.1f rss_after_trim_mib=%.1f purged_growth_mib=%.1f\n",
         smib(full, base2), smib(freed, base2), smib(before.dirty, dirty0), ebb ? mib(trimmed) : (double)trimmed,
         after.dirty, smib(freed, end), smib(end, base2), smib(after.purged, before.purged));
  return 0;
}

/* ---------------------------------------------------------------- fork */

#define FORK_BLOCK (64 * KiB)
#define FORK_CHILD_COUNT (100 * MiB / FORK_BLOCK)
#define FORK_PARENT_COUNT (16 * MiB / FORK_BLOCK)
static void *fork_ptr[FORK_CHILD_COUNT];

static void alloc_free_blocks(size_t count) {
  for (size_t i = 0; i < count; i++) {
    fork_ptr[i] = malloc(FORK_BLOCK);
    if (fork_ptr[i]) touch(fork_ptr[i], FORK_BLOCK, (int)i);
  }
  for (size_t i = 0; i < count; i++) free(fork_ptr[i]);
}

/* Waits, touching nothing of the allocator but ebb_stats (which only reads),
 * until dirty memory is gone or the deadline passes. Returns ms, or -1. */
static long wait_dirty_gone(struct ebb_stats *out) {
  uint64_t t0 = now_ms();
  for (;;) {
    uint64_t t = now_ms();
    *out = stats();
    if (out->dirty <= MiB) return (long)(t - t0);
    if (t - t0 >= DEADLINE_MS) return -1;
    sleep_ms(POLL_MS);
  }
}

/* Waits up to a second for the background thread to show in /proc. */
static int wait_threads(int want) {
  int n = threads();
  for (int i = 0; i < 20 && n < want; i++) {
    sleep_ms(POLL_MS);
    n = threads();
  }
  return n;
}

static int fork_child(void) {
  int threads_at_fork = threads();
  struct ebb_stats s0 = stats();
  alloc_free_blocks(FORK_CHILD_COUNT);
  struct ebb_stats s1 = stats();
  int threads_after = wait_threads(2);
  struct ebb_stats s2;
  long ms = wait_dirty_gone(&s2);
  size_t purged_idle = s2.purged - s1.purged;
  int ok = ms >= 0 && s2.dirty <= 64 * MiB && s2.purged > s1.purged;
  printf("child_threads_at_fork=%d child_threads=%d child_dirty_after_free_mib=%.1f "
         "child_purged_by_free_mib=%.1f child_purged_idle_mib=%.1f child_dirty_end_kib=%zu child_ms=%ld ",
         threads_at_fork, threads_after, mib(s1.dirty), smib(s1.purged, s0.purged), mib(purged_idle),
         s2.dirty / KiB, ms);
  fflush(stdout);
  return ok ? 0 : 1;
}

static int mode_fork(void) {
  int ebb = on_ebb();
  /* Blocks that live across the fork, to check in both processes. */
  enum { KEEP = 64 };
  char *keep[KEEP];
  for (int i = 0; i < KEEP; i++) {
    keep[i] = malloc(1000 + (size_t)i * 100);
    if (keep[i]) memset(keep[i], i, 1000 + (size_t)i * 100);
  }
  alloc_free_blocks(FORK_PARENT_COUNT); /* dirty memory: starts the background thread */
  int threads_before = wait_threads(2);
  printf("ebb=%d parent_threads_before_fork=%d ", ebb, threads_before);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return printf("error: fork\n"), 2;
  if (pid == 0) {
    int rc = fork_child();
    for (int i = 0; i < KEEP; i++)
      if (!keep[i] || keep[i][0] != (char)i || keep[i][999 + i * 100] != (char)i) rc = 1;
    _exit(rc);
  }
  int status = 0;
  alloc_free_blocks(FORK_PARENT_COUNT); /* the parent goes on as before */
  while (waitpid(pid, &status, 0) < 0) {
  }
  int intact = 1;
  for (int i = 0; i < KEEP; i++) {
    if (!keep[i] || keep[i][0] != (char)i || keep[i][999 + i * 100] != (char)i) intact = 0;
    free(keep[i]);
  }
  alloc_free_blocks(FORK_PARENT_COUNT);
  struct ebb_stats s;
  long ms = wait_dirty_gone(&s);
  int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  printf("child_status=%d child_signal=%d parent_intact=%d parent_threads=%d parent_dirty_end_kib=%zu "
         "parent_ms=%ld\n",
         WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0, intact,
         threads(), s.dirty / KiB, ms);
  return child_ok ? 0 : 3;
}

/* ---------------------------------------------------------------- small program */

/* What a small program pays for its allocator: 1000 live blocks of 8–256 B,
 * then the whole process's RSS (code, data, relocations and heap). The test
 * runs it with and without ebb and bounds the difference. */
static int mode_small(void) {
  static void *keep[1000];
  for (int i = 0; i < 1000; i++) {
    size_t n = 8 + (size_t)(i * 37) % 249;
    keep[i] = malloc(n);
    if (!keep[i]) return 2;
    memset(keep[i], i, n);
  }
  char buf[2048];
  long anon = -1;
  if (read_proc("/proc/self/smaps_rollup", buf, sizeof buf) > 0) {
    char *a = strstr(buf, "\nAnonymous:");
    if (a) anon = strtol(a + 11, NULL, 10);
  }
  printf("ebb=%d rss_kib=%zu anon_kib=%ld\n", on_ebb(), rss() / KiB, anon);
  for (int i = 0; i < 1000; i++) free(keep[i]);
  return 0;
}

/* ---------------------------------------------------------------- threads' aligned blocks */

/* ALIGNED_THREADS threads, each holding one small block, then as many again
 * (adopting the first ones' arenas), each also allocating and freeing one
 * 128 KiB-aligned block, every thread alive while RSS is read: the second
 * group's RSS a thread. The aligned block's search reads the arena's span
 * index, whose memory is untouched until used: a first version of that
 * search wrote a word in each of the index's 64 groups on a thread's first
 * aligned block, about 96 KiB resident a thread. */
#define ALIGNED_THREADS 64
static pthread_barrier_t aligned_bar;

static void *aligned_thread(void *arg) {
  void *keep = malloc(100), *p = NULL;
  if (!keep) exit(2);
  memset(keep, 1, 100);
  if (arg) {
    if (posix_memalign(&p, 128 * 1024, 100) != 0) exit(2);
    memset(p, 1, 100);
    free(p);
  }
  pthread_barrier_wait(&aligned_bar); /* RSS is read */
  pthread_barrier_wait(&aligned_bar);
  free(keep);
  return NULL;
}

static size_t aligned_group(bool aligned) {
  pthread_t t[ALIGNED_THREADS];
  size_t before = rss();
  for (int i = 0; i < ALIGNED_THREADS; i++)
    if (pthread_create(&t[i], NULL, aligned_thread, aligned ? (void *)1 : NULL) != 0) exit(2);
  pthread_barrier_wait(&aligned_bar);
  size_t grown = rss() - before;
  pthread_barrier_wait(&aligned_bar);
  for (int i = 0; i < ALIGNED_THREADS; i++) pthread_join(t[i], NULL);
  return grown / ALIGNED_THREADS;
}

static int mode_aligned_threads(void) {
  pthread_barrier_init(&aligned_bar, NULL, ALIGNED_THREADS + 1);
  size_t plain = aligned_group(false), aligned = aligned_group(true);
  printf("ebb=%d plain_kib=%zu aligned_kib=%zu\n", on_ebb(), plain / KiB, aligned / KiB);
  return 0;
}

/* ---------------------------------------------------------------- a big structure rebuilt */

/* REBUILD_MIB of 64-1024 B blocks built (each written), freed in allocation
 * order, built again, twice: the faults of the first build and of each
 * rebuild. Then (cross) main frees its build and a second thread builds the
 * same afresh in its own arena while main's teardown is still dirty: RSS over
 * the start must stay within the recent peak + EBB_DIRTY_MAX's room. The
 * pointer table is mapped here, outside the allocator. */
#define REBUILD_MIB 512
static void **rebuild_ptrs;
static size_t rebuild_n;

static void rebuild_build(void) {
  size_t bytes = 0;
  rebuild_n = 0;
  for (size_t i = 0; bytes < REBUILD_MIB * MiB; i++) {
    size_t n = 64 + (i * 37) % 961;
    rebuild_ptrs[i] = malloc(n);
    if (!rebuild_ptrs[i]) exit(2);
    touch(rebuild_ptrs[i], n, (int)i);
    bytes += n;
    rebuild_n = i + 1;
  }
}

static void rebuild_free(void) {
  for (size_t i = 0; i < rebuild_n; i++) free(rebuild_ptrs[i]);
}

static void *rebuild_thread(void *arg) {
  (void)arg;
  rebuild_build();
  return NULL;
}

static int mode_rebuild(void) {
  rebuild_ptrs = xmap(REBUILD_MIB * MiB / 64 * sizeof *rebuild_ptrs);
  size_t base = rss();
  long f0 = minflt();
  rebuild_build();
  long first = minflt() - f0, worst = 0;
  size_t built = rss();
  for (int c = 0; c < 2; c++) {
    rebuild_free();
    long f = minflt();
    rebuild_build();
    if (minflt() - f > worst) worst = minflt() - f;
  }
  size_t peak = rss();
  rebuild_free();
  size_t torn = rss();
  struct ebb_stats st = stats();
  pthread_t t; /* the second build, in another thread's arena, beside the dirty teardown */
  if (pthread_create(&t, NULL, rebuild_thread, NULL) || pthread_join(t, NULL)) return 2;
  size_t cross = rss();
  struct ebb_stats sc = stats();
  printf("ebb=%d first_faults=%ld rebuild_faults=%ld built_mib=%.1f peak_mib=%.1f torn_mib=%.1f "
         "torn_dirty_mib=%.1f cross_mib=%.1f cross_active_mib=%.1f cross_dirty_mib=%.1f\n",
         on_ebb(), first, worst, smib(built, base), smib(peak, base), smib(torn, base), mib(st.dirty),
         smib(cross, base), mib(sc.active), mib(sc.dirty));
  return 0;
}

/* ---------------------------------------------------------------- an idle owner */

/* A live thread that has gone idle: does what it built come back to the
 * kernel once freed, by main (idle_owner) or by itself (idle_self)? */
#define IDLE_MIB 64
#define IDLE_COUNT (IDLE_MIB * MiB / 256)
static void **idle_ptrs;
static pthread_barrier_t idle_built, idle_done;

enum { IDLE_NONE, IDLE_SELF, IDLE_HALF };

/* Builds IDLE_COUNT 256-byte blocks and blocks on a barrier, alive, until
 * main has measured; with IDLE_SELF (idle_self) it first frees all but one
 * block in 512 itself, and the rest at the end; with IDLE_HALF (idle_late)
 * every odd one, leaving the even ones to main. */
static void *idle_main(void *arg) {
  int how = (int)(intptr_t)arg;
  bool self = how == IDLE_SELF;
  for (size_t i = 0; i < IDLE_COUNT; i++) {
    idle_ptrs[i] = malloc(256);
    if (!idle_ptrs[i]) break;
    touch(idle_ptrs[i], 256, 1);
  }
  for (size_t i = 0; how != IDLE_NONE && i < IDLE_COUNT; i++)
    if (idle_ptrs[i] && (self ? i % 512 != 0 : i % 2 != 0)) free(idle_ptrs[i]);
  pthread_barrier_wait(&idle_built);
  pthread_barrier_wait(&idle_done); /* alive and blocked until main has measured */
  if (self)
    for (size_t i = 0; i < IDLE_COUNT; i += 512) free(idle_ptrs[i]);
  return NULL;
}

/* Starts idle_main and returns once it has built (and, with self, freed). */
static int idle_start(pthread_t *t, int how) {
  idle_ptrs = xmap(IDLE_COUNT * sizeof(void *));
  pthread_barrier_init(&idle_built, NULL, 2);
  pthread_barrier_init(&idle_done, NULL, 2);
  if (pthread_create(t, NULL, idle_main, (void *)(intptr_t)how)) return printf("error: pthread_create\n"), 2;
  pthread_barrier_wait(&idle_built);
  return 0;
}

static void idle_stop(pthread_t t) {
  pthread_barrier_wait(&idle_done);
  pthread_join(t, NULL);
}

/* Polls RSS until it is within limit of base: the ms that took, or -1 after
 * deadline ms; *r is the last reading. */
static long wait_rss_within(size_t base, size_t limit, size_t *r, unsigned deadline) {
  uint64_t t0 = now_ms();
  while (now_ms() - t0 < deadline) {
    sleep_ms(POLL_MS);
    *r = rss();
    if (*r <= base + limit) return (long)(now_ms() - t0);
  }
  return -1;
}

/* A thread allocates IDLE_MIB of 256-byte blocks and blocks, alive; main frees
 * every block and then makes no allocator call. Prints how long RSS took to
 * fall back to within 8 MiB of where it was before the build. */
static int mode_idle_owner(void) {
  size_t base = rss();
  pthread_t t;
  if (idle_start(&t, IDLE_NONE)) return 2;
  for (size_t i = 0; i < IDLE_COUNT; i++) {
    if (!idle_ptrs[i]) return printf("error: malloc\n"), 2;
    free(idle_ptrs[i]);
  }
  size_t built = rss(), r = built;
  long reached = wait_rss_within(base, 8 * MiB, &r, DEADLINE_MS);
  struct ebb_stats st = stats();
  printf("ebb=%d built_mib=%.1f final_mib=%.1f reached_ms=%ld allocated_mib=%.1f active_mib=%.1f\n", on_ebb(),
         smib(built, base), smib(r, base), reached, mib(st.allocated), mib(st.active));
  idle_stop(t);
  return 0;
}

/* The thread frees all but one block in 512 itself before it blocks; main
 * makes no allocator call. Prints how long RSS took to fall back to within
 * 12 MiB of where it was before the build. */
static int mode_idle_self(void) {
  size_t base = rss();
  pthread_t t;
  if (idle_start(&t, IDLE_SELF)) return 2;
  for (size_t i = 0; i < IDLE_COUNT; i += 512)
    if (!idle_ptrs[i]) return printf("error: malloc\n"), 2;
  size_t freed = rss(), r = freed;
  long reached = wait_rss_within(base, 12 * MiB, &r, DEADLINE_MS);
  printf("ebb=%d freed_mib=%.1f final_mib=%.1f reached_ms=%ld\n", on_ebb(), smib(freed, base), smib(r, base),
         reached);
  idle_stop(t);
  return 0;
}

/* The thread frees every odd block itself and blocks; main waits until the
 * background thread has gone over the idle thread's pages (the decay time,
 * then its pass), then frees the even ones and makes no allocator call either.
 * Prints how long RSS took to fall back to within 8 MiB of where it was
 * before the build (BG_DEADLINE_MS: only the background thread can do it). */
#define LATE_WAIT_MS 800
static int mode_idle_late(void) {
  size_t base = rss();
  pthread_t t;
  if (idle_start(&t, IDLE_HALF)) return 2;
  for (size_t i = 0; i < IDLE_COUNT; i += 2)
    if (!idle_ptrs[i]) return printf("error: malloc\n"), 2;
  size_t half = rss();
  sleep_ms(LATE_WAIT_MS);
  size_t waited = rss();
  for (size_t i = 0; i < IDLE_COUNT; i += 2) free(idle_ptrs[i]);
  size_t r = rss();
  long reached = wait_rss_within(base, 8 * MiB, &r, BG_DEADLINE_MS);
  struct ebb_stats st = stats();
  printf("ebb=%d half_mib=%.1f waited_mib=%.1f final_mib=%.1f reached_ms=%ld allocated_mib=%.1f active_mib=%.1f "
         "deadline_ms=%d\n",
         on_ebb(), smib(half, base), smib(waited, base), smib(r, base), reached, mib(st.allocated), mib(st.active),
         BG_DEADLINE_MS);
  idle_stop(t);
  return 0;
}

/* ---------------------------------------------------------------- calloc */

/* calloc of fresh memory: blocks of 256 KiB to 1.9 MiB (served from chunks,
 * not the large-block path) must not make their pages resident, only what a
 * block's first bytes need; every round's blocks must read as zeroes: fresh,
 * reused while still resident (written with 0x5a before the free), and reused
 * after ebb_trim returned them (MADV_DONTNEED reads back zeroes, MADV_FREE
 * may not). Smaller classes (3000 B, 8 KiB) take part in the zero checks. */
#define CALLOC_BIG 44
#define CALLOC_ALL (CALLOC_BIG + 64)
static size_t calloc_size(int i) {
  if (i < 32) return 256 * KiB;
  if (i < 40) return MiB;
  if (i < CALLOC_BIG) return 1900 * KiB;
  return i % 2 ? 3000 : 8 * KiB;
}

/* Nonzero bytes in the blocks. Reading a page the program never wrote maps
 * the kernel's zero page: RSS does not grow. */
static size_t calloc_nonzero(char **p) {
  size_t bad = 0;
  for (int i = 0; i < CALLOC_ALL; i++)
    for (size_t k = 0; k < calloc_size(i); k++) bad += p[i][k] != 0;
  return bad;
}

static int calloc_round(char **p) {
  for (int i = 0; i < CALLOC_ALL; i++)
    if (!(p[i] = calloc(1, calloc_size(i)))) return printf("error: calloc\n"), 2;
  return 0;
}

static void calloc_dirty_free(char **p) {
  for (int i = 0; i < CALLOC_ALL; i++) {
    memset(p[i], 0x5a, calloc_size(i));
    free(p[i]);
  }
}

static int mode_calloc(bool locked) {
  /* locked: every page locked first (mlockall), so the kernel refuses to
   * purge (MADV_DONTNEED fails with EINVAL) and the trimmed round's blocks
   * still hold 0x5a unless calloc clears them. */
  if (locked && mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
    printf("ebb=%d locked=0\n", on_ebb()); /* no CAP_IPC_LOCK and a low RLIMIT_MEMLOCK: the caller skips */
    return 0;
  }
  char **p = xmap(CALLOC_ALL * sizeof *p);
  size_t requested = 0;
  for (int i = 0; i < CALLOC_BIG; i++) requested += calloc_size(i);
  size_t base = rss();
  if (calloc_round(p)) return 2;
  size_t grown = rss() - base;
  size_t bad_fresh = calloc_nonzero(p);
  calloc_dirty_free(p);
  if (calloc_round(p)) return 2;
  size_t bad_resident = calloc_nonzero(p);
  calloc_dirty_free(p);
  size_t trimmed = trim_fn && on_ebb() ? trim_fn() : (size_t)malloc_trim(0);
  if (calloc_round(p)) return 2;
  size_t bad_trimmed = calloc_nonzero(p);
  for (int i = 0; i < CALLOC_ALL; i++) free(p[i]);
  printf("ebb=%d locked=%d requested_kib=%zu grown_kib=%zu bad_fresh=%zu bad_resident=%zu bad_trimmed=%zu "
         "trimmed_kib=%zu\n",
         on_ebb(), locked, requested / KiB, grown / KiB, bad_fresh, bad_resident, bad_trimmed, trimmed / KiB);
  return 0;
}

/* ---------------------------------------------------------------- sparse */

/* A thread builds 200 MB of 100 B blocks, frees all but one in 585 (one live
 * block on each 64 KiB page, so no page empties), then stays at work in
 * another size, 3000 B blocks. Its decay passes must reach every one of the
 * ~3,300 pages of the class, not only the first few hundred, and return their
 * free granules; main watches RSS. */
#define SPARSE_BYTES (200 * MiB)
#define SPARSE_SIZE 100
#define SPARSE_KEEP 585
#define SPARSE_DEADLINE_MS 5000 /* ~1.2 s here: each pass looks at 256 pages, each page needs two looks */
static atomic_int sparse_built, sparse_release;
static size_t sparse_kept_bytes;

static void *sparse_main(void *arg) {
  (void)arg;
  size_t n = SPARSE_BYTES / SPARSE_SIZE;
  void **ps = xmap(n * sizeof(void *));
  void **kept = xmap((n / SPARSE_KEEP + 1) * sizeof(void *));
  size_t nkept = 0;
  if (fill_blocks(ps, n, SPARSE_SIZE)) return NULL;
  for (size_t i = 0; i < n; i++)
    if (i % SPARSE_KEEP == 0)
      kept[nkept++] = ps[i];
    else
      free(ps[i]);
  munmap(ps, n * sizeof(void *));
  sparse_kept_bytes = nkept * SPARSE_SIZE;
  atomic_store(&sparse_built, 1);
  while (!atomic_load(&sparse_release)) {
    for (int k = 0; k < 16; k++) use_and_free(3000, k);
    sleep_ms(1);
  }
  for (size_t i = 0; i < nkept; i++) free(kept[i]);
  munmap(kept, (n / SPARSE_KEEP + 1) * sizeof(void *));
  return NULL;
}

static int mode_sparse(void) {
  int ebb = on_ebb();
  size_t base = rss();
  pthread_t t;
  if (pthread_create(&t, NULL, sparse_main, NULL)) return printf("error: pthread_create\n"), 2;
  while (!atomic_load(&sparse_built)) sleep_ms(1);
  size_t built = rss();
  /* what must stay: the 4 KiB granule of each page that holds a live block */
  size_t pages = SPARSE_BYTES / (64 * KiB), bound = pages * 4 * KiB + 16 * MiB;
  uint64_t t0 = now_ms();
  long reached = -1;
  size_t r = built;
  while (now_ms() - t0 < SPARSE_DEADLINE_MS) {
    r = rss();
    if (r <= base + bound) {
      reached = (long)(now_ms() - t0);
      break;
    }
    sleep_ms(POLL_MS);
  }
  struct ebb_stats st = stats();
  atomic_store(&sparse_release, 1);
  pthread_join(t, NULL);
  printf("ebb=%d built_mib=%.1f final_mib=%.1f bound_mib=%.1f kept_kib=%zu reached_ms=%ld deadline_ms=%u "
         "dirty_mib=%.1f active_mib=%.1f\n",
         ebb, smib(built, base), smib(r, base), mib(bound), sparse_kept_bytes / KiB, reached, SPARSE_DEADLINE_MS,
         mib(st.dirty), mib(st.active));
  return 0;
}

/* ---------------------------------------------------------------- large_only */

/* One thread (no background thread under the default auto) builds 200 MB of
 * 100 B blocks, frees them all, then works only with one 4 MiB block at a
 * time: its large frees must run its arena's decay, which returns the small
 * blocks' pages. */
static int mode_large_only(void) {
  int ebb = on_ebb();
  size_t n = SPARSE_BYTES / SPARSE_SIZE;
  void **ps = xmap(n * sizeof(void *));
  size_t base = rss();
  if (fill_blocks(ps, n, SPARSE_SIZE)) return printf("error: malloc\n"), 2;
  size_t built = rss();
  for (size_t i = 0; i < n; i++) free(ps[i]);
  size_t bound = 32 * MiB; /* the 4 MiB block, the cache's, and some pages */
  uint64_t t0 = now_ms();
  long reached = -1;
  size_t r = rss();
  while (now_ms() - t0 < DEADLINE_MS) {
    for (int k = 0; k < 4; k++) use_and_free(4 * MiB, k);
    sleep_ms(1);
    r = rss();
    if (r <= base + bound) {
      reached = (long)(now_ms() - t0);
      break;
    }
  }
  struct ebb_stats st = stats();
  printf("ebb=%d built_mib=%.1f final_mib=%.1f bound_mib=%.1f reached_ms=%ld deadline_ms=%u dirty_mib=%.1f "
         "threads=%d\n",
         ebb, smib(built, base), smib(r, base), mib(bound), reached, DEADLINE_MS, mib(st.dirty), threads());
  munmap(ps, n * sizeof(void *));
  return 0;
}

/* ---------------------------------------------------------------- trim_count */

/* 20,000 blocks of 1000 B, freed by another thread, then one ebb_trim: what
 * it returns against what the stats say went back meanwhile (run with
 * EBB_BACKGROUND=0, so nothing else purges). */
static void *trim_count_freer(void *arg) {
  void **ps = arg;
  for (int i = 0; i < 20000; i++) free(ps[i]);
  return NULL;
}

static int mode_trim_count(void) {
  if (!on_ebb()) return printf("ebb=0\n"), 2;
  void **ps = xmap(20000 * sizeof(void *));
  if (fill_blocks(ps, 20000, 1000)) return printf("error: malloc\n"), 2;
  pthread_t t;
  if (pthread_create(&t, NULL, trim_count_freer, ps) || pthread_join(t, NULL)) return printf("error: thread\n"), 2;
  struct ebb_stats before = stats();
  size_t trimmed = trim_fn();
  struct ebb_stats after = stats();
  printf("ebb=1 trimmed=%zu purged=%zu dirty_after=%zu\n", trimmed, (size_t)(after.purged - before.purged),
         (size_t)after.dirty);
  return 0;
}

/* ---------------------------------------------------------------- reshrink */

/* Two rounds of: grow the live set to 120 MB of 16-4112 B blocks, free
 * blocks at random down to 5 MB, idle until RSS holds still. A second thread
 * waits all along, so the background thread runs (EBB_BACKGROUND=auto). The
 * second round's floor must be the first's: a page whose free granules were
 * purged, refilled and emptied again down to the same count kept them (found
 * by a probe: 31.6 MB idle after the first round, 70 MB after each later one,
 * with 250 MB built). */
#define RESHRINK_MAX ((size_t)2 << 20)
static atomic_int reshrink_done;
static void *reshrink_waiter(void *arg) {
  (void)arg;
  while (!atomic_load(&reshrink_done)) sleep_ms(10);
  return NULL;
}

/* RSS once it held still for 500 ms (polled), or at 3 s. */
static size_t settled_rss(void) {
  size_t r = rss(), low = r;
  uint64_t t0 = now_ms(), since = t0;
  while (now_ms() - t0 < 3000 && now_ms() - since < 500) {
    sleep_ms(POLL_MS);
    r = rss();
    if (r + 64 * KiB < low) low = r, since = now_ms();
  }
  return low;
}

static int mode_reshrink(void) {
  int ebb = on_ebb();
  void **ps = xmap(RESHRINK_MAX * sizeof(void *));
  size_t *sz = xmap(RESHRINK_MAX * sizeof(size_t));
  pthread_t t;
  if (pthread_create(&t, NULL, reshrink_waiter, NULL)) return printf("error: pthread_create\n"), 2;
  size_t base = rss(), n = 0, live = 0, idle_rss[2];
  unsigned s = 3;
  for (int round = 0; round < 2; round++) {
    while (live < 120 * MiB && n < RESHRINK_MAX) {
      s = s * 1103515245 + 12345;
      size_t z = 16 + (s >> 8) % 4097;
      char *p = malloc(z);
      if (!p) return printf("error: malloc\n"), 2;
      memset(p, 2, z);
      ps[n] = p, sz[n] = z, n++, live += z;
    }
    while (live > 5 * MiB) {
      s = s * 1103515245 + 12345;
      size_t i = (s >> 4) % n;
      free(ps[i]);
      live -= sz[i];
      ps[i] = ps[n - 1], sz[i] = sz[n - 1], n--;
    }
    idle_rss[round] = settled_rss();
  }
  atomic_store(&reshrink_done, 1);
  pthread_join(t, NULL);
  printf("ebb=%d floor1_mib=%.1f floor2_mib=%.1f live_mib=%.1f\n", ebb, smib(idle_rss[0], base), smib(idle_rss[1], base),
         mib(live));
  for (size_t i = 0; i < n; i++) free(ps[i]);
  return 0;
}

/* ---------------------------------------------------------------- main */

/* ---------------------------------------------------------------- threads taking turns */

#define TURNS 5
#define TURN_MIB 32
#define TURN_IDLE_MS 400 /* run with EBB_DECAY_MS=1000: past a quarter of it, short of all of it */
#define TURN_MAX (TURN_MIB * MiB / 16)

static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond = PTHREAD_COND_INITIALIZER;
static int turn_now = -1, turn_finished = -1;
static long turn_faults[TURNS];
static void **turn_ptrs;

/* Thread id takes turns id, id + 2, ...: each builds TURN_MIB of 16-1016 B
 * blocks, every byte written, and frees them all; between its turns it
 * blocks. The faults of a turn are the process's: the other threads block. */
static void *turn_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t seed = 0x1234567u + (uint64_t)id;
  for (int turn = id; turn < TURNS; turn += 2) {
    pthread_mutex_lock(&turn_lock);
    while (turn_now != turn) pthread_cond_wait(&turn_cond, &turn_lock);
    pthread_mutex_unlock(&turn_lock);
    long f0 = minflt();
    size_t n = 0, total = 0;
    while (total < TURN_MIB * MiB && n < TURN_MAX) {
      size_t size = rnd_in(&seed, 16, 1016);
      void *p = malloc(size);
      if (!p) break;
      touch(p, size, turn + 1);
      turn_ptrs[n++] = p;
      total += size;
    }
    for (size_t i = 0; i < n; i++) free(turn_ptrs[i]);
    turn_faults[turn] = minflt() - f0;
    pthread_mutex_lock(&turn_lock);
    turn_finished = turn;
    pthread_cond_broadcast(&turn_cond);
    pthread_mutex_unlock(&turn_lock);
  }
  return NULL;
}

/* Two threads take turns at a structure, each idle for two gaps between its
 * own turns (bench/turns, smaller). Prints the faults of the first turn and
 * the most of any later one, against the pages a turn writes. */
static int mode_turns(void) {
  turn_ptrs = xmap(TURN_MAX * sizeof(void *));
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, turn_worker, (void *)(intptr_t)i)) return printf("error: pthread_create\n"), 2;
  for (int turn = 0; turn < TURNS; turn++) {
    pthread_mutex_lock(&turn_lock);
    turn_now = turn;
    pthread_cond_broadcast(&turn_cond);
    while (turn_finished != turn) pthread_cond_wait(&turn_cond, &turn_lock);
    pthread_mutex_unlock(&turn_lock);
    sleep_ms(TURN_IDLE_MS);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  long later = 0;
  for (int turn = 1; turn < TURNS; turn++)
    if (turn_faults[turn] > later) later = turn_faults[turn];
  printf("ebb=%d pages=%zu first_faults=%ld later_faults=%ld\n", on_ebb(), TURN_MIB * MiB / 4096, turn_faults[0],
         later);
  return 0;
}

/* ---------------------------------------------------------------- periodic threads */

#define BEAT_THREADS 8
#define BEAT_WAKES 20
#define BEAT_WARM 5 /* wakes not counted */
#define BEAT_BLOCKS 50
#define BEAT_MS 100 /* between a quarter of the default decay time and all of it */

static long beat_faults[BEAT_THREADS];

static long thread_minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

/* Wakes every BEAT_MS: BEAT_BLOCKS blocks of 16-1024 B, written, then freed,
 * and sleeps; counts its own faults after the warm-up. */
static void *beat_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t seed = 0x51ed27u + (uint64_t)id;
  void *blocks[BEAT_BLOCKS];
  for (int wake = 0; wake < BEAT_WAKES; wake++) {
    long f0 = thread_minflt();
    for (int i = 0; i < BEAT_BLOCKS; i++) {
      size_t size = rnd_in(&seed, 16, 1024);
      blocks[i] = malloc(size);
      if (!blocks[i]) return (void *)1;
      touch(blocks[i], size, wake + 1);
    }
    for (int i = 0; i < BEAT_BLOCKS; i++) free(blocks[i]);
    if (wake >= BEAT_WARM) beat_faults[id] += thread_minflt() - f0;
    sleep_ms(BEAT_MS);
  }
  return NULL;
}

/* Threads that wake now and then to make and free a few blocks each: idle
 * longer than a quarter of the decay time at a stretch, they keep their
 * current pages, and a wake faults nothing in again. Prints faults a wake. */
static int mode_periodic(void) {
  pthread_t t[BEAT_THREADS];
  for (int i = 0; i < BEAT_THREADS; i++)
    if (pthread_create(&t[i], NULL, beat_worker, (void *)(intptr_t)i)) return printf("error: pthread_create\n"), 2;
  long faults = 0;
  for (int i = 0; i < BEAT_THREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    if (r) return printf("error: malloc\n"), 2;
    faults += beat_faults[i];
  }
  printf("ebb=%d faults_per_wake=%.2f\n", on_ebb(), (double)faults / (BEAT_THREADS * (BEAT_WAKES - BEAT_WARM)));
  return 0;
}

int main(int argc, char **argv) {
  find_ebb();
  if (argc >= 2 && strcmp(argv[1], "churn") == 0) return mode_churn(argc >= 3 ? (unsigned)atoi(argv[2]) : 0);
  if (argc >= 2 && strcmp(argv[1], "handoff") == 0)
    return mode_handoff(argc >= 3 && atoi(argv[2]), argc >= 4 && strcmp(argv[3], "stay") == 0,
                        argc >= 4 && strcmp(argv[3], "busy") == 0);
  if (argc >= 2 && strcmp(argv[1], "large") == 0) return mode_large();
  if (argc >= 2 && strcmp(argv[1], "trim_count") == 0) return mode_trim_count();
  if (argc >= 2 && strcmp(argv[1], "reshrink") == 0) return mode_reshrink();
  if (argc >= 2 && strcmp(argv[1], "sparse") == 0) return mode_sparse();
  if (argc >= 2 && strcmp(argv[1], "large_only") == 0) return mode_large_only();
  if (argc >= 2 && strcmp(argv[1], "fork") == 0) return mode_fork();
  if (argc >= 2 && strcmp(argv[1], "small") == 0) return mode_small();
  if (argc >= 2 && strcmp(argv[1], "idle_owner") == 0) return mode_idle_owner();
  if (argc >= 2 && strcmp(argv[1], "idle_self") == 0) return mode_idle_self();
  if (argc >= 2 && strcmp(argv[1], "idle_late") == 0) return mode_idle_late();
  if (argc >= 2 && strcmp(argv[1], "calloc") == 0) return mode_calloc(argc >= 3 && strcmp(argv[2], "locked") == 0);
  if (argc >= 2 && strcmp(argv[1], "rebuild") == 0) return mode_rebuild();
  if (argc >= 2 && strcmp(argv[1], "aligned_threads") == 0) return mode_aligned_threads();
  if (argc >= 2 && strcmp(argv[1], "turns") == 0) return mode_turns();
  if (argc >= 2 && strcmp(argv[1], "periodic") == 0) return mode_periodic();
  fprintf(stderr,
          "usage: rss_probe churn GAP_MS | handoff ACTIVITY [stay|busy] | large | trim_count | sparse | large_only | fork | small | idle_owner | idle_self | "
          "idle_late | calloc [locked] | rebuild | aligned_threads | turns | periodic\n");
  return 2;
}
