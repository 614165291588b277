/* Stats for people and scripts, over the fake OS: fmt's units and columns, the
 * three levels of ebb_stats_print (summary, size classes, JSON) and what they
 * say matching ebb_stats, peaks never below the current values, the sampled
 * peak of live bytes, and a table longer than one buffer written in pieces. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "arena.h"
#include "ebb.h"
#include "fake_os.h"
#include "fmt.h"

extern size_t fake_resident; /* fake_os.c: what os_resident_bytes returns */

static const char *bytes(uint64_t v) {
  static char buf[32];
  fmt_t f = FMT_ON(buf);
  fmt_bytes(&f, v);
  return buf;
}

Test(fmt, bytes_in_binary_units) {
  cr_assert_str_eq(bytes(0), "0 B");
  cr_assert_str_eq(bytes(1023), "1023 B");
  cr_assert_str_eq(bytes(1024), "1.0 KiB");
  cr_assert_str_eq(bytes(1536), "1.5 KiB");
  cr_assert_str_eq(bytes(1048575), "1.0 MiB", "1023.999 KiB rounds up to the next unit");
  cr_assert_str_eq(bytes(64u << 20), "64.0 MiB");
  cr_assert_str_eq(bytes((size_t)3 << 30 | (size_t)512 << 20), "3.5 GiB");
  cr_assert_str_eq(bytes((uint64_t)5 << 40), "5.0 TiB");
  cr_assert_str_eq(bytes(UINT64_MAX), "16.0 EiB");
}

Test(fmt, columns_and_cut_strings) {
  char buf[64];
  fmt_t f = FMT_ON(buf);
  fmt_col(&f, "ab", 5);
  fmt_col(&f, "cd", -4);
  fmt_col(&f, "toolong", 3);
  fmt_str(&f, "|");
  cr_assert_str_eq(buf, "   abcd  toolong|");
  f = FMT_ON(buf);
  fmt_strn(&f, "abcdefghij", 10);
  fmt_str(&f, "|");
  fmt_strn(&f, "abcdefghijk", 10);
  cr_assert_str_eq(buf, "abcdefghij|abcdefg...");
  char small[8];
  f = FMT_ON(small);
  fmt_str(&f, "0123456789");
  cr_assert_str_eq(small, "0123456", "truncated, never overflowed");
}

/* ---------------------------------------------------------------- levels */

static void *blocks[2000];

/* 1000 blocks of 48 bytes and 10 of 5000 (class 5120), kept live. */
static void setup(void) {
  fake_reset();
  opt.stats = 0;
  for (int i = 0; i < 1000; i++) blocks[i] = ebb_malloc(48);
  for (int i = 1000; i < 1010; i++) blocks[i] = ebb_malloc(5000);
}
TestSuite(stats, .init = setup);

/* ebb_stats_print(fd, level) through a pipe, whatever its length. */
static char *printed(int level) {
  static char out[1 << 16];
  int p[2];
  cr_assert_eq(pipe(p), 0);
  ebb_stats_print(p[1], level);
  close(p[1]);
  size_t n = 0;
  ssize_t r;
  while ((r = read(p[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
  close(p[0]);
  out[n] = 0;
  return out;
}

static uint64_t raw_field(const char *s, const char *key) {
  char k[64];
  snprintf(k, sizeof k, " %s=", key);
  const char *p = strstr(s, k);
  cr_assert_not_null(p, "no %s in %s", k, s);
  return strtoull(p + strlen(k), NULL, 10);
}

Test(stats, summary_for_people) {
  struct ebb_stats s;
  ebb_stats(&s);
  char *out = printed(EBB_STATS_SUMMARY);
  cr_assert_eq(
      strncmp(out, "ebb " EBB_VERSION_STRING " stats, pid 4242\n                   now       peak\n", 60), 0,
      "%s", out);
  const char *rows[] = {"\n  mapped  ",
                        "\n  active  ",
                        "\n  dirty   ",
                        "\n  dirty cap ",
                        "\n  allocated ",
                        "\n  purged  ",
                        "\n  calls      mmap ",
                        "\n  arenas     1 arena, 1 thread seen\n"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    cr_assert_not_null(strstr(out, rows[i]), "no '%s' in:\n%s", rows[i], out);
  cr_assert_not_null(strstr(out, "\n  resident    42.0 MiB             the whole process"), "%s", out);
  cr_assert_not_null(strstr(out, "(the peak is sampled)"), "%s", out);
  cr_assert_null(strstr(out, "size classes"), "level 1 has no class table:\n%s", out);
  /* The last line is ebb 0.1's, with ebb_stats' numbers. */
  char *last = strstr(out, "\nebb stats: mapped=");
  cr_assert_not_null(last, "%s", out);
  cr_assert_eq(strchr(last + 1, '\n')[1], 0, "the raw line is the last:\n%s", out);
  cr_assert_eq(raw_field(last, "mapped"), s.mapped);
  cr_assert_eq(raw_field(last, "active"), s.active);
  cr_assert_eq(raw_field(last, "allocated"), s.allocated);
  cr_assert_eq(raw_field(last, "arenas"), s.arenas);
  cr_assert_eq(raw_field(last, "mmap"), s.mmap_calls); /* the fake OS does not count calls */
  for (char *l = out; *l; l = strchr(l, '\n') + 1)
    cr_assert_lt(strcspn(l, "\n"), 120, "a long line in:\n%s", out);
}

Test(stats, resident_unknown) {
  fake_resident = 0;
  char *out = printed(EBB_STATS_SUMMARY);
  cr_assert_not_null(strstr(out, "\n  resident     unknown"), "%s", out);
}

Test(stats, level_zero_prints_nothing) {
  cr_assert_str_empty(printed(0));
  cr_assert_str_empty(printed(-1));
}

Test(stats, classes_table_lists_the_classes_in_use) {
  char *out = printed(EBB_STATS_CLASSES);
  cr_assert_not_null(strstr(out, "\n  allocated "), "the summary comes first:\n%s", out);
  const char *head = "size classes with pages (waste: span bytes not in live blocks)\n"
                     "       size  pages  live blocks  live bytes  span bytes       waste\n";
  char *t = strstr(out, head);
  cr_assert_not_null(t, "%s", out);
  t += strlen(head);
  /* 1000 x 48 bytes: 46.9 KiB live in one 64 KiB page, 17.1 KiB waste. */
  const char *r48 = "         48      1         1000    46.9 KiB    64.0 KiB    17.1 KiB\n";
  const char *r5k = "       5120      1           10    50.0 KiB    64.0 KiB    14.0 KiB\n";
  const char *tot = "      total      2         1010    96.9 KiB   128.0 KiB    31.1 KiB\n";
  cr_assert_eq(strncmp(t, r48, strlen(r48)), 0, "got:\n%s", t);
  t += strlen(r48);
  cr_assert_eq(strncmp(t, r5k, strlen(r5k)), 0, "got:\n%s", t);
  t += strlen(r5k);
  cr_assert_eq(strncmp(t, tot, strlen(tot)), 0, "got:\n%s", t);
  t += strlen(tot);
  cr_assert_eq(strncmp(t, "ebb stats: mapped=", 18), 0, "the raw line closes it:\n%s", t);
}

/* The number after "key": in the JSON text. */
static uint64_t jfield(const char *s, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(s, k);
  cr_assert_not_null(p, "no %s in %s", k, s);
  return strtoull(p + strlen(k), NULL, 10);
}

Test(stats, json_for_scripts) {
  char *out = printed(EBB_STATS_JSON);
  struct ebb_stats s;
  ebb_stats(&s);
  size_t n = strlen(out);
  cr_assert(n > 2 && out[0] == '{' && out[n - 2] == '}' && out[n - 1] == '\n', "%s", out);
  cr_assert_eq(strchr(out, '\n'), out + n - 1, "one line:\n%s", out);
  int depth = 0, min_depth = 1;
  for (size_t i = 0; i < n; i++) {
    depth += (out[i] == '{' || out[i] == '[') - (out[i] == '}' || out[i] == ']');
    if (i < n - 2 && depth < min_depth) min_depth = depth;
  }
  cr_assert_eq(depth, 0, "unbalanced: %s", out);
  cr_assert_eq(min_depth, 1, "more than one object: %s", out);
  cr_assert_not_null(strstr(out, "{\"version\":\"" EBB_VERSION_STRING "\",\"pid\":4242,"), "%s", out);
  cr_assert_eq(jfield(out, "mapped"), s.mapped);
  cr_assert_eq(jfield(out, "active"), s.active);
  cr_assert_eq(jfield(out, "allocated"), s.allocated);
  cr_assert_eq(jfield(out, "arenas"), s.arenas);
  cr_assert_eq(jfield(out, "resident"), 42 << 20);
  cr_assert_eq(jfield(out, "threads"), 1);
  cr_assert_geq(jfield(out, "peak_allocated"), s.allocated);
  cr_assert_geq(jfield(out, "peak_mapped"), s.mapped);
  cr_assert_eq(jfield(out, "dirty_limit"), arena_dirty_limit());
  const char *classes =
      ",\"classes\":[{\"class\":2,\"size\":48,\"pages\":1,\"blocks\":1000,\"live_bytes\":48000,"
      "\"span_bytes\":65536,\"waste\":17536},{\"class\":48,\"size\":5120,\"pages\":1,\"blocks\":10,"
      "\"live_bytes\":51200,\"span_bytes\":65536,\"waste\":14336}]}\n";
  cr_assert_not_null(strstr(out, classes), "%s", out);
}

Test(stats, peaks_never_below_the_current_values) {
  struct ebb_stats s;
  ebb_stats(&s);
  cr_assert_geq(s.peak_mapped, s.mapped);
  cr_assert_geq(s.peak_active, s.active);
  cr_assert_geq(s.peak_dirty, s.dirty);
  cr_assert_geq(s.peak_allocated, s.allocated);
  cr_assert_eq(s.resident, 42 << 20);
  cr_assert_eq(s.threads, 1);
  cr_assert_geq(s.allocated, 1000 * 48 + 10 * 5000);
}

Test(stats, the_live_peak_is_sampled) {
  struct ebb_stats s0, s1;
  ebb_stats(&s0);
  enum { N = 512 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = ebb_malloc(4096);
  arena_sample_live_peak(); /* what the background thread's passes call */
  for (int i = 0; i < N; i++) ebb_free(p[i]);
  ebb_stats(&s1);
  cr_assert_geq(s1.peak_allocated, s0.allocated + N * 4096, "the sample saw %d live pages", N);
  cr_assert_lt(s1.allocated, s1.peak_allocated);
  /* Unsampled, a spike is missed: that is what "sampled" means. */
  for (int i = 0; i < N; i++) p[i] = ebb_malloc(8192);
  for (int i = 0; i < N; i++) ebb_free(p[i]);
  struct ebb_stats s2;
  ebb_stats(&s2);
  cr_assert_eq(s2.peak_allocated, s1.peak_allocated);
}

static size_t active_now(void) { /* without sampling, as ebb_stats would */
  size_t mapped = 0, active = 0, dirty = 0, purged = 0, live = 0;
  uint64_t arenas = 0;
  arena_stats_sum(&mapped, &active, &dirty, &purged, &live, &arenas);
  return active;
}

static size_t live_peak(void) {
  size_t mapped, active, dirty, live;
  arena_peaks(&mapped, &active, &dirty, &live);
  return live;
}

/* The background thread samples only when a sample may find a new peak: at
 * once when active memory grew, else once a second. */
Test(stats, the_background_samples_when_active_memory_grows_or_once_a_second) {
  enum { N = 512 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = ebb_malloc(4096);
  for (int i = 1; i < N; i += 2) ebb_free(p[i]); /* every page half free: active stays */
  arena_purge_background(fake_now);
  size_t half = live_peak(), active = active_now();
  cr_assert_geq(half, N / 2 * 4096, "active memory grew: sampled (%zu)", half);
  cr_assert_lt(half, N * 4096);
  for (int i = 1; i < N; i += 2) p[i] = ebb_malloc(4096); /* into the same pages */
  cr_assert_eq(active_now(), active, "the blocks went into the half-free pages");
  arena_purge_background(fake_now + 10);
  cr_assert_eq(live_peak(), half, "no growth, within the second: not sampled");
  arena_purge_background(fake_now + 1010);
  cr_assert_geq(live_peak(), N * 4096, "a second later: sampled (%zu)", live_peak());
}

/* A block in every class: a table of NCLASSES (84) rows, longer than the 4 KiB buffer. */
Test(stats, a_long_table_goes_out_in_pieces) {
  static void *p[NCLASSES];
  for (unsigned c = 0; c < NCLASSES; c++) p[c] = ebb_malloc(class_size_of(c));
  char *out = printed(EBB_STATS_CLASSES);
  cr_assert_gt(strlen(out), 6000, "%zu bytes", strlen(out));
  char *t = strstr(out, "span bytes       waste\n");
  cr_assert_not_null(t, "%s", out);
  t = strchr(t, '\n') + 1;
  for (unsigned c = 0; c < NCLASSES; c++) {
    char want[32];
    snprintf(want, sizeof want, "  %9zu ", class_size_of(c));
    cr_assert_eq(strncmp(t, want, strlen(want)), 0, "row of class %u (%zu): %.80s", c, class_size_of(c), t);
    t = strchr(t, '\n') + 1;
  }
  cr_assert_eq(strncmp(t, "      total    ", 15), 0, "%.80s", t);
  t = strchr(t, '\n') + 1;
  cr_assert_eq(strncmp(t, "ebb stats: mapped=", 18), 0, "%.80s", t);
  char *json = printed(EBB_STATS_JSON);
  cr_assert_gt(strlen(json), 6000);
  cr_assert_not_null(strstr(json, "{\"class\":83,\"size\":2097152,\"pages\":1,\"blocks\":1,"), "%s", json);
  cr_assert_str_eq(json + strlen(json) - 4, "}]}\n");
  for (unsigned c = 0; c < NCLASSES; c++) ebb_free(p[c]);
}

/* What EBB_STATS prints at exit goes to the duplicate of stderr taken at start-up. */
Test(stats, printed_at_exit_at_the_level_chosen) {
  fake_env[0] = "EBB_STATS=2";
  options_init();
  cr_assert_eq(opt.stats, EBB_STATS_CLASSES);
  cr_assert_eq(options_stats_out(), 2, "the fake dup returns the fd itself, still stderr");
  /* The destructor runs after Criterion has read the test's result; checked in
   * tests/integration/test_stats.c instead. Here: the level reaches the printer. */
  fake_reset();
  ebb_stats_print(options_stats_out(), (int)opt.stats);
  cr_assert_not_null(strstr(fake_stderr, "size classes with pages"), "%s", fake_stderr);
  opt.stats = 0;
}
