/* The options table: values parse as documented, bad values keep the default
 * with a one-line warning naming the variable, EBB_* variables that are no
 * setting get a warning naming the closest one, EBB_VERBOSE lists every
 * setting with its source, and docs/options.md mirrors the table. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "decay.h"
#include "fake_os.h"
#include "options.h"

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* Runs options_init over the given environment (NULL-terminated), stderr captured. */
static void init_with(const char *const *env) {
  fake_reset();
  memset(fake_env, 0, sizeof fake_env);
  for (int i = 0; env[i]; i++) fake_env[i] = env[i];
  options_init();
}

/* A test that turned EBB_STATS on must not print stats when its process exits. */
static void quiet(void) { opt.stats = 0; }
TestSuite(options, .fini = quiet);

Test(options, values_parse_as_documented) {
  int64_t v;
  cr_assert(options_parse(OPT_MS, "250", &v) && v == 250);
  cr_assert(options_parse(OPT_MS, "0", &v) && v == 0);
  cr_assert(options_parse(OPT_SIZE_PCT, "64M", &v) && v == 64 << 20);
  cr_assert(options_parse(OPT_SIZE_PCT, "1g", &v) && v == 1 << 30);
  cr_assert(options_parse(OPT_SIZE_PCT, "4096", &v) && v == 4096);
  cr_assert(options_parse(OPT_SIZE_PCT, "0", &v) && v == 0);
  cr_assert(options_parse(OPT_SIZE_PCT, "25%", &v) && v == OPT_PCT(25) && OPT_IS_PCT(v) &&
            OPT_PCT_OF(v) == 25);
  cr_assert(options_parse(OPT_SIZE_PCT, "0%", &v) && v == OPT_PCT(0) && v != 0, "0%% and 0 bytes differ");
  cr_assert(options_parse(OPT_SIZE_PCT, "auto", &v) && v == OPT_DIRTY_AUTO(256 << 20) && OPT_IS_AUTO(v) &&
            !OPT_IS_PCT(v) && OPT_AUTO_OF(v) == 256 << 20);
  cr_assert(options_parse(OPT_SIZE_PCT, "auto+64M", &v) && v == OPT_DIRTY_AUTO(64 << 20));
  cr_assert(options_parse(OPT_SIZE_PCT, "auto+0", &v) && v == OPT_DIRTY_AUTO(0) && v != 0);
  const char *bad_auto[] = {"auto+",    "auto+5%", "auto+auto",          "autox",
                            "auto 64M", "auto+-1", "2305843009213693952"};
  for (size_t i = 0; i < 7; i++)
    cr_assert_not(options_parse(OPT_SIZE_PCT, bad_auto[i], &v), "%s", bad_auto[i]);
  cr_assert(options_parse(OPT_BOOL, "yes", &v) && v == 1);
  cr_assert(options_parse(OPT_BOOL, "0", &v) && v == 0);
  cr_assert(options_parse(OPT_PURGE, "free", &v) && v == 1);
  cr_assert(options_parse(OPT_STATS, "0", &v) && v == 0);
  cr_assert(options_parse(OPT_STATS, "1", &v) && v == EBB_STATS_SUMMARY);
  cr_assert(options_parse(OPT_STATS, "2", &v) && v == EBB_STATS_CLASSES);
  cr_assert(options_parse(OPT_STATS, "json", &v) && v == EBB_STATS_JSON);
  const char *bad_ms[] = {"", "abc", "-5", "12ms", "99999999999"};
  for (size_t i = 0; i < 5; i++) cr_assert_not(options_parse(OPT_MS, bad_ms[i], &v), "%s", bad_ms[i]);
  const char *bad_size[] = {
      "", "-1", "10X", "5%%", "%", "1M5", "1001%", "4294967296G", "4611686018427387904"};
  for (size_t i = 0; i < 9; i++)
    cr_assert_not(options_parse(OPT_SIZE_PCT, bad_size[i], &v), "%s", bad_size[i]);
  cr_assert_not(options_parse(OPT_BOOL, "maybe", &v));
  cr_assert(options_parse(OPT_AUTO, "auto", &v) && v == 2);
  cr_assert(options_parse(OPT_AUTO, "on", &v) && v == 1);
  cr_assert_not(options_parse(OPT_AUTO, "sometimes", &v));
  cr_assert_not(options_parse(OPT_PURGE, "sometimes", &v));
  const char *bad_stats[] = {"", "3", "yes", "JSON", "12", "-1", "json2"};
  for (size_t i = 0; i < 7; i++)
    cr_assert_not(options_parse(OPT_STATS, bad_stats[i], &v), "%s", bad_stats[i]);
}

static const char *formatted(enum opt_kind kind, int64_t v) {
  static char buf[64];
  fmt_t f = FMT_ON(buf);
  options_format(&f, kind, v);
  return buf;
}

Test(options, values_print_as_documented) {
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, 256 << 20), "256M");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, (int64_t)2 << 30), "2G");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, 3 << 10), "3K");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, 1000), "1000");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, 0), "0");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, OPT_PCT(0)), "0%");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, OPT_PCT(25)), "25%");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, OPT_DIRTY_AUTO(256 << 20)), "auto");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, OPT_DIRTY_AUTO(64 << 20)), "auto+64M");
  cr_assert_str_eq(formatted(OPT_SIZE_PCT, OPT_DIRTY_AUTO(0)), "auto+0");
  cr_assert_str_eq(formatted(OPT_AUTO, 2), "auto");
  cr_assert_str_eq(formatted(OPT_AUTO, 0), "0");
  cr_assert_str_eq(formatted(OPT_PURGE, 1), "free");
  cr_assert_str_eq(formatted(OPT_STATS, EBB_STATS_JSON), "json");
  cr_assert_str_eq(formatted(OPT_STATS, 2), "2");
  cr_assert_str_eq(formatted(OPT_MS, 250), "250");
}

Test(options, bad_values_warn_and_keep_the_default) {
  int64_t decay = opt.decay_ms, dirty = opt.dirty_max;
  init_with((const char *[]){"EBB_DECAY_MS=abc", "EBB_DIRTY_MAX=-3", "EBB_STATS=3", "EBB_PURGE=free", NULL});
  cr_assert_eq(opt.decay_ms, decay);
  cr_assert_eq(opt.dirty_max, dirty);
  cr_assert_eq(opt.stats, 0);
  cr_assert_eq(opt.purge, 1, "a good value next to bad ones is taken");
  cr_assert_not_null(strstr(fake_stderr,
                            "ebb: warning: EBB_DECAY_MS=abc is not valid (milliseconds, 0-86400000); "
                            "keeping the default 250\n"),
                     "%s", fake_stderr);
  cr_assert_not_null(strstr(fake_stderr,
                            "ebb: warning: EBB_DIRTY_MAX=-3 is not valid (auto, auto+SIZE, SIZE (bytes, "
                            "optional K/M/G and B suffix), or N%); keeping the default auto\n"),
                     "%s", fake_stderr);
  cr_assert_not_null(
      strstr(fake_stderr, "ebb: warning: EBB_STATS=3 is not valid (0, 1, 2, json); keeping the default 0\n"),
      "%s", fake_stderr);
  cr_assert_eq(count_lines(fake_stderr), 3, "one line per bad variable:\n%s", fake_stderr);
}

/* Found by a probe: auto+N% parsed N% into the live setting before rejecting
 * the whole, so the warning named N% as "the default kept" and N% ruled. */
Test(options, a_rejected_value_leaves_nothing_behind) {
  const char *bad[] = {"auto+0%", "auto+50%", "auto+auto+5M", "auto+auto", "auto+5M%", "auto+1001%"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int64_t v = 12345;
    cr_assert_not(options_parse(OPT_SIZE_PCT, bad[i], &v), "%s", bad[i]);
    cr_assert_eq(v, 12345, "%s wrote %lld before it was rejected", bad[i], (long long)v);
  }
  int64_t dirty = opt.dirty_max;
  init_with((const char *[]){"EBB_DIRTY_MAX=auto+0%", NULL});
  cr_assert_eq(opt.dirty_max, dirty, "the default stays in force");
  cr_assert_not_null(strstr(fake_stderr, "EBB_DIRTY_MAX=auto+0% is not valid"), "%s", fake_stderr);
  cr_assert_not_null(strstr(fake_stderr, "; keeping the default auto\n"), "%s", fake_stderr);
  init_with((const char *[]){"EBB_DIRTY_MAX=auto+auto+5M", NULL});
  cr_assert_eq(opt.dirty_max, dirty, "%s", fake_stderr);
}

Test(options, a_long_bad_value_is_cut_and_the_line_ends) {
  static char env[300] = "EBB_DECAY_MS=";
  memset(env + 13, '7', 250);
  init_with((const char *[]){env, NULL});
  cr_assert_eq(opt.decay_ms, 250);
  cr_assert_not_null(strstr(fake_stderr,
                            "=7777777777777777777777777777777777777777777777777777777777777... is not "
                            "valid (milliseconds, 0-86400000); keeping the default 250\n"),
                     "%s", fake_stderr);
  cr_assert_eq(count_lines(fake_stderr), 1, "%s", fake_stderr);
  cr_assert_lt(strlen(fake_stderr), 200, "%s", fake_stderr);
}

/* A newline or other control character in a value stays out of the line
 * (found by a probe: EBB_DECAY_MS=$'12\nx' split the warning in two). */
Test(options, control_characters_in_a_bad_value_keep_the_warning_one_line) {
  init_with((const char *[]){"EBB_DECAY_MS=12\nx\ty\x7f", "EBB_TYPO=\n", NULL});
  cr_assert_eq(opt.decay_ms, 250);
  cr_assert_not_null(strstr(fake_stderr, "EBB_DECAY_MS=12?x?y? is not valid"), "%s", fake_stderr);
  cr_assert_eq(count_lines(fake_stderr), 2, "%s", fake_stderr);
}

Test(options, zero_percent_is_the_floor_not_zero_bytes) {
  init_with((const char *[]){"EBB_DIRTY_MAX=0%", NULL});
  cr_assert_str_empty(fake_stderr, "0%% is valid: %s", fake_stderr);
  cr_assert_eq(opt.dirty_max, OPT_PCT(0));
  cr_assert_eq(decay_dirty_limit(opt.dirty_max, 0, 0), DECAY_PCT_FLOOR, "0%% keeps the 4 MiB floor");
  cr_assert_eq(decay_dirty_limit(opt.dirty_max, (size_t)1 << 40, 0), DECAY_PCT_FLOOR);
  init_with((const char *[]){"EBB_DIRTY_MAX=0", NULL});
  cr_assert_eq(opt.dirty_max, 0);
  cr_assert_eq(decay_dirty_limit(opt.dirty_max, (size_t)1 << 30, 0), 0, "0 bytes keeps nothing");
  init_with((const char *[]){"EBB_DIRTY_MAX=10%", NULL});
  cr_assert_eq(decay_dirty_limit(opt.dirty_max, (size_t)1 << 30, 0), ((size_t)1 << 30) / 10);
}

Test(options, every_init_starts_from_the_defaults) {
  init_with((const char *[]){"EBB_DECAY_MS=7", "EBB_STATS=json", NULL});
  cr_assert_eq(opt.decay_ms, 7);
  cr_assert_eq(opt.stats, EBB_STATS_JSON);
  init_with((const char *[]){NULL});
  cr_assert_eq(opt.decay_ms, EBB_DEFAULT_DECAY_MS);
  cr_assert_eq(opt.stats, EBB_DEFAULT_STATS);
  cr_assert_str_empty(fake_stderr);
}

Test(options, edit_distance) {
  cr_assert_eq(options_distance("STAT", "STATS"), 1);
  cr_assert_eq(options_distance("stats", "STATS"), 0, "case is ignored");
  cr_assert_eq(options_distance("DECAY", "DECAY_MS"), 3);
  cr_assert_eq(options_distance("DIRTYMAX", "DIRTY_MAX"), 1);
  cr_assert_eq(options_distance("", "PURGE"), 5);
  cr_assert_eq(options_distance("BAKCGROUND", "BACKGROUND"), 2);
}

Test(options, unknown_variables_warn_with_the_closest_name) {
  init_with((const char *[]){"HOME=/root", "EBBSTATS=1", "EBB_STAT=1", "EBB_decay_ms=5", "EBB_DIRTYMAX=1G",
                             "EBB_VERBOSITY=2", "EBB_KEEP_TMP=1", "EBB_STATS=1", "EBB_PURGE", NULL});
  const char *want[] = {
      "ebb: warning: EBB_STAT=1 is not an ebb setting (did you mean EBB_STATS?); ignored\n",
      "ebb: warning: EBB_decay_ms=5 is not an ebb setting (did you mean EBB_DECAY_MS?); ignored\n",
      "ebb: warning: EBB_DIRTYMAX=1G is not an ebb setting (did you mean EBB_DIRTY_MAX?); ignored\n",
      "ebb: warning: EBB_VERBOSITY=2 is not an ebb setting (did you mean EBB_VERBOSE?); ignored\n",
      "ebb: warning: EBB_KEEP_TMP=1 is not an ebb setting (the settings are EBB_DECAY_MS, EBB_DIRTY_MAX, "
      "EBB_BACKGROUND, EBB_STATS, EBB_PURGE, EBB_VERBOSE); ignored\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_assert_not_null(strstr(fake_stderr, want[i]), "missing: %s\nin:\n%s", want[i], fake_stderr);
  /* HOME, EBBSTATS (no EBB_ prefix) and the real EBB_STATS get none; "EBB_PURGE"
   * without a value is the setting's name, not an unknown one. */
  cr_assert_eq(count_lines(fake_stderr), 5, "%s", fake_stderr);
  cr_assert_eq(opt.stats, 1);
  cr_assert_eq(opt.decay_ms, EBB_DEFAULT_DECAY_MS, "EBB_decay_ms is not EBB_DECAY_MS");
}

Test(options, verbose_lists_every_setting_with_its_source) {
  init_with(
      (const char *[]){"EBB_VERBOSE=1", "EBB_DECAY_MS=100", "EBB_STATS=json", "EBB_PURGE=sometimes", NULL});
  const char *want = "ebb: version " EBB_VERSION_STRING ", pid 4242\n"
                     "ebb: EBB_DECAY_MS=100 (environment)\n"
                     "ebb: EBB_DIRTY_MAX=auto (default)\n"
                     "ebb: EBB_BACKGROUND=auto (default)\n"
                     "ebb: EBB_STATS=json (environment)\n"
                     "ebb: EBB_PURGE=dontneed (default; the environment's value was not valid)\n"
                     "ebb: EBB_VERBOSE=1 (environment)\n";
  const char *at = strstr(fake_stderr, "ebb: version");
  cr_assert_not_null(at, "%s", fake_stderr);
  cr_assert_str_eq(at, want);
  cr_assert_eq(strncmp(fake_stderr, "ebb: warning: EBB_PURGE=sometimes", 33), 0,
               "the warning comes first:\n%s", fake_stderr);
}

Test(options, quiet_without_verbose) {
  init_with((const char *[]){"EBB_DECAY_MS=100", "EBB_DIRTY_MAX=10%", "EBB_BACKGROUND=0", NULL});
  cr_assert_str_empty(fake_stderr);
  cr_assert_eq(opt.decay_ms, 100);
  cr_assert_eq(opt.dirty_max, OPT_PCT(10));
  cr_assert_eq(opt.background, 0);
}

Test(options, this_build_has_no_build_time_defaults) {
  /* What EBB_VERBOSE calls "default" here: no -DEBB_DEFAULT_<NAME> in the test build. */
#define NOT_BUILT(NAME, field, kind, def, values, doc) cr_assert_eq(OPT_BUILT_##NAME, 0, #NAME);
  EBB_OPTIONS(NOT_BUILT)
#undef NOT_BUILT
}

/* The default as docs/options.md writes it: 250, 256M, 25%, auto, dontneed, json. */
static void doc_value(enum opt_kind kind, int64_t v, char *out, size_t n) {
  fmt_t f = {.buf = out, .cap = n, .len = 0};
  options_format(&f, kind, v);
}

/* The row's n-th cell (0: the variable), without backticks and outer spaces. */
static void cell(const char *row, int n, char *out, size_t cap) {
  const char *p = row;
  for (int i = 0; i <= n; i++) {
    p = strchr(p, '|');
    cr_assert_not_null(p, "row has no cell %d: %s", n, row);
    p++;
  }
  size_t len = 0;
  while (*p == ' ') p++;
  for (; *p && *p != '|' && len + 1 < cap; p++)
    if (*p != '`') out[len++] = *p;
  while (len && out[len - 1] == ' ') len--;
  out[len] = 0;
}

static void check_row(const char *doc, const char *var, enum opt_kind kind, int64_t def, const char *values) {
  char key[64], row[2048], got[256], want[64];
  snprintf(key, sizeof key, "| `%s` |", var);
  const char *r = strstr(doc, key);
  cr_assert_not_null(r, "%s is not in docs/options.md", var);
  size_t len = strcspn(r, "\n");
  cr_assert_lt(len, sizeof row);
  memcpy(row, r, len);
  row[len] = 0;
  doc_value(kind, def, want, sizeof want);
  cell(row, 1, got, sizeof got);
  cr_assert_str_eq(got, want, "docs/options.md row for %s does not give the default %s: %s", var, want, row);
  cell(row, 2, got, sizeof got);
  cr_assert_str_eq(got, values, "docs/options.md row for %s does not give the values as the table does: %s",
                   var, row);
}

/* docs/options.md must list every option with its default and values (test run from the repo root). */
Test(options, docs_mirror_the_table) {
  FILE *f = fopen("docs/options.md", "r");
  cr_assert_not_null(f, "docs/options.md is missing");
  static char doc[65536];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = 0;
  int rows = 0;
#define CHECK_DOC(NAME, field, kind, def, values, text)                                                      \
  check_row(doc, "EBB_" #NAME, kind, def, values), rows++;
  EBB_OPTIONS(CHECK_DOC)
#undef CHECK_DOC
  int documented = 0;
  for (const char *p = doc; (p = strstr(p, "| `EBB_")) != NULL; p++) documented++;
  cr_assert_eq(documented, rows, "docs/options.md lists options the table does not have");
}
