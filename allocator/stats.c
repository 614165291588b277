/* stats.c — owns the public accounting: ebb_stats, ebb_stats_print (a summary,
 * a table per size class, or JSON), and what EBB_STATS prints at exit.
 * May call: arena (sums, peaks, class stats), huge, thread, fmt, os.
 * Must never: allocate or use stdio: everything is formatted into stack
 * buffers and written with os_write, a long table in pieces. */
#include "ebb.h"
#include "arena.h"
#include "fmt.h"
#include "huge.h"
#include "os.h"
#include "thread.h"

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static void stats_fill(struct ebb_stats *out) {
  thread_process_init(); /* options, classes: ebb_stats may be a program's first call */
  size_t mapped = 0, active = 0, dirty = 0, purged = 0, allocated = 0;
  uint64_t arenas = 0;
  arena_stats_sum(&mapped, &active, &dirty, &purged, &allocated, &arenas);
  size_t huge = huge_in_use_bytes(), cached = huge_dirty_bytes();
  *out = (struct ebb_stats){
      .mapped = mapped + huge_active_bytes() + huge_cache_bytes(),
      .active = active + huge,
      .dirty = dirty + cached,
      .purged = purged + atomic_load_explicit(&huge_purged, memory_order_relaxed),
      .allocated = allocated + huge,
      .mmap_calls = atomic_load_explicit(&os_counters.mmap_calls, memory_order_relaxed),
      .munmap_calls = atomic_load_explicit(&os_counters.munmap_calls, memory_order_relaxed),
      .madvise_calls = atomic_load_explicit(&os_counters.madvise_calls, memory_order_relaxed),
      .arenas = arenas,
      .resident = os_resident_bytes(),
      .threads = thread_count_seen(),
  };
  /* The sums are read arena by arena, page by page, while other threads
   * allocate and free: a block counted live whose page's span was read a
   * moment before can put allocated above active (found by a probe: 9 samples
   * in 20,000, and active - allocated wrapped for a program subtracting
   * them). Each is kept within the one it is part of. */
  if (out->active > out->mapped) out->active = out->mapped;
  if (out->allocated > out->active) out->allocated = out->active;
  /* The marks are kept apart from the sums just taken: a peak is never below them. */
  arena_note_live_peak(out->allocated);
  arena_peaks(&out->peak_mapped, &out->peak_active, &out->peak_dirty, &out->peak_allocated);
  out->peak_mapped = max_size(out->peak_mapped, out->mapped);
  out->peak_active = max_size(out->peak_active, out->active);
  out->peak_dirty = max_size(out->peak_dirty, out->dirty);
}

EBB_EXPORT void ebb_stats_sized(struct ebb_stats *out, size_t size) {
  struct ebb_stats s;
  stats_fill(&s);
  memcpy(out, &s, size < sizeof s ? size : sizeof s);
}

/* ebb 0.1's struct ended at arenas; the name in parentheses is the symbol, not the header's macro. */
EBB_EXPORT void(ebb_stats)(struct ebb_stats *out) {
  ebb_stats_sized(out, offsetof(struct ebb_stats, arenas) + sizeof out->arenas);
}


/* ------------------------------------------------------------ summary */

/* "  mapped     68.1 MiB   68.1 MiB  address space in use" */
static void row(fmt_t *f, const char *name, size_t now, const size_t *peak, const char *what) {
  fmt_str(f, "  ");
  fmt_col(f, name, -9);
  fmt_col_bytes(f, now, 11);
  if (peak)
    fmt_col_bytes(f, *peak, 11);
  else
    fmt_col(f, "", 11);
  fmt_str(f, "  ");
  fmt_str(f, what);
  fmt_str(f, "\n");
}

static void field(fmt_t *f, const char *name, uint64_t v) {
  fmt_str(f, " ");
  fmt_str(f, name);
  fmt_str(f, "=");
  fmt_u64(f, v);
}

/* The one-line form of ebb 0.1, kept as the summary's last line for scripts
 * that look for "ebb stats:" (EBB_STATS=json is the form to parse). */
static void raw_line(fmt_t *f, const struct ebb_stats *s) {
  fmt_str(f, "ebb stats:");
  field(f, "mapped", s->mapped);
  field(f, "active", s->active);
  field(f, "dirty", s->dirty);
  field(f, "purged", s->purged);
  field(f, "allocated", s->allocated);
  field(f, "mmap", s->mmap_calls);
  field(f, "munmap", s->munmap_calls);
  field(f, "madvise", s->madvise_calls);
  field(f, "arenas", s->arenas);
  fmt_str(f, "\n");
}

static void summary(fmt_t *f, const struct ebb_stats *s) {
  fmt_str(f, "ebb " EBB_VERSION_STRING " stats, pid ");
  fmt_u64(f, (uint64_t)os_getpid());
  fmt_str(f, "\n                   now       peak\n");
  row(f, "mapped", s->mapped, &s->peak_mapped, "address space in use");
  row(f, "active", s->active, &s->peak_active, "pages and large blocks in use");
  row(f, "dirty", s->dirty, &s->peak_dirty, "freed, still resident, waiting for decay");
  size_t cap = arena_dirty_limit();
  row(f, "dirty cap", cap, NULL, "the most dirty memory kept now (EBB_DIRTY_MAX)");
  row(f, "allocated", s->allocated, &s->peak_allocated, "in live blocks (the peak is sampled)");
  if (s->resident)
    row(f, "resident", s->resident, NULL, "the whole process, as the kernel counts it");
  else
    fmt_str(f, "  resident     unknown              (no /proc/self/statm)\n");
  row(f, "purged", s->purged, NULL, "returned to the kernel since start");
  fmt_str(f, "  calls      mmap ");
  fmt_u64(f, s->mmap_calls);
  fmt_str(f, ", munmap ");
  fmt_u64(f, s->munmap_calls);
  fmt_str(f, ", madvise ");
  fmt_u64(f, s->madvise_calls);
  fmt_str(f, "\n  arenas     ");
  fmt_u64(f, s->arenas);
  fmt_str(f, s->arenas == 1 ? " arena, " : " arenas, ");
  fmt_u64(f, s->threads);
  fmt_str(f, s->threads == 1 ? " thread seen\n" : " threads seen\n");
}

/* ------------------------------------------------------------ size classes */

#define ROW_MAX 256 /* room one table row, JSON element or the raw line needs at most */

/* Live bytes are k->live_bytes, summed from each page's block size: a
 * colored one-block page's block is smaller than its class (found by a probe:
 * 4 blocks of 300,000 B showed 1,310,720 live bytes against 1,300,736
 * allocated, when they were blocks times the class's size). */
static uint64_t class_waste(const class_stat_t *k) {
  return k->span_bytes > k->live_bytes ? k->span_bytes - k->live_bytes : 0;
}

static void class_row(fmt_t *f, const char *size, uint64_t pages, uint64_t blocks, uint64_t live,
                      uint64_t span, uint64_t waste) {
  fmt_str(f, "  ");
  fmt_col(f, size, 9);
  fmt_col_u64(f, pages, 7);
  fmt_col_u64(f, blocks, 13);
  fmt_col_bytes(f, live, 12);
  fmt_col_bytes(f, span, 12);
  fmt_col_bytes(f, waste, 12);
  fmt_str(f, "\n");
}

static void class_table(fmt_t *f, int fd, const class_stat_t *cls) {
  fmt_str(f, "size classes with pages (waste: span bytes not in live blocks)\n"
             "       size  pages  live blocks  live bytes  span bytes       waste\n");
  uint64_t pages = 0, blocks = 0, live = 0, span = 0, waste = 0;
  for (unsigned c = 0; c < NCLASSES; c++) {
    const class_stat_t *k = &cls[c];
    if (!k->pages) continue;
    char size[24];
    fmt_t t = FMT_ON(size);
    fmt_u64(&t, class_size_of(c));
    fmt_reserve(f, fd, ROW_MAX);
    class_row(f, size, k->pages, k->blocks, k->live_bytes, k->span_bytes, class_waste(k));
    pages += k->pages, blocks += k->blocks, live += k->live_bytes;
    span += k->span_bytes, waste += class_waste(k);
  }
  fmt_reserve(f, fd, ROW_MAX);
  class_row(f, "total", pages, blocks, live, span, waste);
}

/* ------------------------------------------------------------ JSON */

static void jnum(fmt_t *f, const char *key, uint64_t v) {
  fmt_str(f, ",\"");
  fmt_str(f, key);
  fmt_str(f, "\":");
  fmt_u64(f, v);
}

static void json(fmt_t *f, int fd, const struct ebb_stats *s, const class_stat_t *cls) {
  fmt_str(f, "{\"version\":\"" EBB_VERSION_STRING "\"");
  jnum(f, "pid", (uint64_t)os_getpid());
  jnum(f, "mapped", s->mapped);
  jnum(f, "active", s->active);
  jnum(f, "dirty", s->dirty);
  jnum(f, "purged", s->purged);
  jnum(f, "allocated", s->allocated);
  jnum(f, "mmap_calls", s->mmap_calls);
  jnum(f, "munmap_calls", s->munmap_calls);
  jnum(f, "madvise_calls", s->madvise_calls);
  jnum(f, "arenas", s->arenas);
  jnum(f, "peak_mapped", s->peak_mapped);
  jnum(f, "peak_active", s->peak_active);
  jnum(f, "peak_dirty", s->peak_dirty);
  jnum(f, "peak_allocated", s->peak_allocated);
  jnum(f, "resident", s->resident);
  jnum(f, "threads", s->threads);
  jnum(f, "dirty_limit", arena_dirty_limit());
  fmt_str(f, ",\"classes\":[");
  bool first = true;
  for (unsigned c = 0; c < NCLASSES; c++) {
    const class_stat_t *k = &cls[c];
    if (!k->pages) continue;
    fmt_reserve(f, fd, ROW_MAX);
    fmt_str(f, first ? "{\"class\":" : ",{\"class\":");
    first = false;
    fmt_u64(f, c);
    jnum(f, "size", class_size_of(c));
    jnum(f, "pages", k->pages);
    jnum(f, "blocks", k->blocks);
    jnum(f, "live_bytes", k->live_bytes);
    jnum(f, "span_bytes", k->span_bytes);
    jnum(f, "waste", class_waste(k));
    fmt_str(f, "}");
  }
  fmt_reserve(f, fd, ROW_MAX);
  fmt_str(f, "]}\n");
}

/* One buffer of PIPE_BUF bytes: the summary goes out in one write, which a
 * pipe does not interleave with other processes' output. */
EBB_EXPORT void ebb_stats_print(int fd, int level) {
  if (level <= 0 || level > EBB_STATS_JSON) return; /* no such level: nothing, as level 0 */
  struct ebb_stats s;
  ebb_stats(&s);
  class_stat_t cls[NCLASSES] = {{0}};
  if (level == EBB_STATS_CLASSES || level == EBB_STATS_JSON) arena_class_stats(cls);
  char buf[4096];
  fmt_t f = FMT_ON(buf);
  if (level == EBB_STATS_JSON) {
    json(&f, fd, &s, cls);
  } else {
    summary(&f, &s);
    if (level == EBB_STATS_CLASSES) class_table(&f, fd, cls);
    fmt_reserve(&f, fd, ROW_MAX);
    raw_line(&f, &s);
  }
  fmt_flush(&f, fd);
}

/* Runs at exit for both the shared and the static library. */
__attribute__((destructor)) static void stats_at_exit(void) {
  int fd = opt.stats ? options_stats_out() : -1;
  if (fd >= 0) ebb_stats_print(fd, (int)opt.stats);
}
