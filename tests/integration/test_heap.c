/* test_heap.c — where the memory comes from and that it goes back: ebb never
 * grows the brk heap ([heap] in /proc/self/smaps stays absent or empty), and
 * freed memory leaves the resident set once trimmed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <stdlib.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(heap, .timeout = 60);

Test(heap, no_brk_heap_after_1_gib) {
  enum { WINDOW = 64 };
  static const size_t sizes[] = {16,     24,     100,   1000,     4096,    10000,
                                 65536,  100000, 500000, 1 << 20, 2 << 20, (2 << 20) + 1,
                                 5 << 20, 8 << 20, 33,    700};
  void *live[WINDOW] = {0};
  size_t total = 0, n = 0;
  while (total < 1 * GiB) {
    size_t s = sizes[n % ARRAY_LEN(sizes)];
    size_t slot = n % WINDOW;
    free(live[slot]); /* freed along the way */
    unsigned char *p = malloc(s);
    cr_assert(p, "malloc(%zu) returned NULL after %zu bytes", s, total);
    p[0] = 1;
    p[s - 1] = 2;
    live[slot] = p;
    total += s;
    n++;
  }
  long kb = heap_kb();
  for (int i = 0; i < WINDOW; i++) free(live[i]);
  cr_assert_leq(kb, 0, "[heap] is %ld kB after allocating 1 GiB in %zu blocks: something used brk", kb, n);
  kb = heap_kb();
  cr_assert_leq(kb, 0, "[heap] is %ld kB after freeing", kb);
}

/* Touch 128 MiB in large and in medium blocks, free it, trim: the resident set
 * must come back down. */
static void rss_returns(size_t block, const char *what) {
  size_t total = 128 * MiB, n = total / block;
  void **p = malloc(n * sizeof *p);
  memset(p, 0, n * sizeof *p); /* resident before the baseline */
  ebb_trim();
  size_t rss0 = rss_bytes();
  for (size_t i = 0; i < n; i++) {
    p[i] = malloc(block);
    cr_assert(p[i]);
    memset(p[i], 0x66, block);
  }
  size_t rss1 = rss_bytes();
  cr_assert_geq(rss1, rss0 + total - total / 16, "%s: RSS %zu -> %zu after touching %zu", what, rss0, rss1,
                total);
  for (size_t i = 0; i < n; i++) free(p[i]);
  ebb_trim();
  size_t rss2 = rss_bytes();
  cr_assert_leq(rss2, rss0 + 8 * MiB,
                "%s: RSS was %zu MiB, %zu MiB with 128 MiB live, still %zu MiB after free + ebb_trim", what,
                rss0 / MiB, rss1 / MiB, rss2 / MiB);
  free(p);
}
Test(heap, rss_returns_large_blocks) { rss_returns(4 * MiB, "4 MiB blocks"); }
Test(heap, rss_returns_medium_blocks) { rss_returns(48 * KiB, "48 KiB blocks"); }
Test(heap, rss_returns_small_blocks) { rss_returns(200, "200-byte blocks"); }

/* ebb_stats agrees: nothing mapped for those blocks any more once trimmed. */
Test(heap, mapped_drops_after_free_and_trim) {
  struct ebb_stats s0, s1, s2;
  ebb_trim();
  ebb_stats(&s0);
  enum { N = 512 };
  static void *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = malloc(256 * KiB);
    memset(p[i], 1, 256 * KiB);
  }
  ebb_stats(&s1);
  cr_assert_geq(s1.mapped, s0.mapped + N * 256 * KiB * 7 / 8, "mapped %zu -> %zu", s0.mapped, s1.mapped);
  for (int i = 0; i < N; i++) free(p[i]);
  ebb_trim();
  ebb_stats(&s2);
  cr_assert_eq(s2.dirty, 0);
  /* Mapped may stay (address space kept for reuse), but not resident: active must fall. */
  cr_assert_leq(s2.active + N * 256 * KiB, s1.active, "active %zu -> %zu after freeing 128 MiB", s1.active,
                s2.active);
}
