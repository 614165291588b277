/* stats.c — owns the public accounting: ebb_stats, ebb_stats_print, the
 * EBB_STATS=1 summary at exit, and glibc's malloc_stats/mallinfo2 answers.
 * May call: arena_stats_sum, fmt, os. Must never: allocate or use stdio. */
#include "ebb.h"
#include "arena.h"
#include "fmt.h"
#include "huge.h"
#include "os.h"

EBB_EXPORT void ebb_stats(struct ebb_stats *out) {
  size_t mapped = 0, active = 0, dirty = 0, purged = 0, allocated = 0;
  uint64_t arenas = 0;
  arena_stats_sum(&mapped, &active, &dirty, &purged, &allocated, &arenas);
  size_t huge = huge_active_bytes(), cached = huge_cache_bytes();
  *out = (struct ebb_stats){
      .mapped = mapped + huge + cached,
      .active = active + huge,
      .dirty = dirty + cached,
      .purged = purged + atomic_load_explicit(&huge_purged, memory_order_relaxed),
      .allocated = allocated + huge,
      .mmap_calls = atomic_load_explicit(&os_counters.mmap_calls, memory_order_relaxed),
      .munmap_calls = atomic_load_explicit(&os_counters.munmap_calls, memory_order_relaxed),
      .madvise_calls = atomic_load_explicit(&os_counters.madvise_calls, memory_order_relaxed),
      .arenas = arenas,
  };
}

static void field(fmt_t *f, const char *name, uint64_t v) {
  fmt_str(f, " ");
  fmt_str(f, name);
  fmt_str(f, "=");
  fmt_u64(f, v);
}

EBB_EXPORT void ebb_stats_print(int fd) {
  struct ebb_stats s;
  ebb_stats(&s);
  char line[512];
  fmt_t f = FMT_ON(line);
  fmt_str(&f, "ebb stats:");
  field(&f, "mapped", s.mapped);
  field(&f, "active", s.active);
  field(&f, "dirty", s.dirty);
  field(&f, "purged", s.purged);
  field(&f, "allocated", s.allocated);
  field(&f, "mmap", s.mmap_calls);
  field(&f, "munmap", s.munmap_calls);
  field(&f, "madvise", s.madvise_calls);
  field(&f, "arenas", s.arenas);
  fmt_str(&f, "\n");
  fmt_flush(&f, fd);
}

/* Runs at exit for both the shared and the static library. */
__attribute__((destructor)) static void stats_at_exit(void) {
  if (opt.stats) ebb_stats_print(options_stats_fd);
}
