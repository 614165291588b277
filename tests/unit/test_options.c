/* The options table: values parse as documented, bad values keep the default
 * with a one-line warning naming the variable, and docs/options.md mirrors it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "fake_os.h"
#include "options.h"

Test(options, values_parse_as_documented) {
  int64_t v;
  cr_assert(options_parse(OPT_MS, "250", &v) && v == 250);
  cr_assert(options_parse(OPT_SIZE_PCT, "64M", &v) && v == 64 << 20);
  cr_assert(options_parse(OPT_SIZE_PCT, "1g", &v) && v == 1 << 30);
  cr_assert(options_parse(OPT_SIZE_PCT, "4096", &v) && v == 4096);
  cr_assert(options_parse(OPT_SIZE_PCT, "25%", &v) && v == -25);
  cr_assert(options_parse(OPT_BOOL, "yes", &v) && v == 1);
  cr_assert(options_parse(OPT_BOOL, "0", &v) && v == 0);
  cr_assert(options_parse(OPT_PURGE, "free", &v) && v == 1);
  const char *bad_ms[] = {"", "abc", "-5", "12ms", "99999999999"};
  for (size_t i = 0; i < 5; i++) cr_assert_not(options_parse(OPT_MS, bad_ms[i], &v), "%s", bad_ms[i]);
  const char *bad_size[] = {"", "-1", "10X", "5%%", "%", "1M5"};
  for (size_t i = 0; i < 6; i++)
    cr_assert_not(options_parse(OPT_SIZE_PCT, bad_size[i], &v), "%s", bad_size[i]);
  cr_assert_not(options_parse(OPT_BOOL, "maybe", &v));
  cr_assert(options_parse(OPT_AUTO, "auto", &v) && v == 2);
  cr_assert(options_parse(OPT_AUTO, "on", &v) && v == 1);
  cr_assert_not(options_parse(OPT_AUTO, "sometimes", &v));
  cr_assert_not(options_parse(OPT_PURGE, "sometimes", &v));
}

Test(options, bad_values_warn_and_keep_the_default) {
  fake_reset();
  fake_env[0] = "EBB_DECAY_MS=abc";
  fake_env[1] = "EBB_DIRTY_MAX=-3";
  fake_env[2] = "EBB_STATS=1";
  int64_t decay = opt.decay_ms, dirty = opt.dirty_max;
  options_init();
  cr_assert_eq(opt.decay_ms, decay);
  cr_assert_eq(opt.dirty_max, dirty);
  cr_assert_eq(opt.stats, 1);
  cr_assert_not_null(
      strstr(fake_stderr, "ebb: warning: EBB_DECAY_MS=abc is not valid; keeping the default 250\n"), "%s",
      fake_stderr);
  cr_assert_not_null(strstr(fake_stderr, "ebb: warning: EBB_DIRTY_MAX=-3 is not valid"), "%s", fake_stderr);
  int lines = 0;
  for (char *p = fake_stderr; *p; p++) lines += *p == '\n';
  cr_assert_eq(lines, 2, "one line per bad variable");
}

/* The default as docs/options.md writes it: 500, 64M, 25%, 0, dontneed. */
static void doc_value(enum opt_kind kind, int64_t v, char *out, size_t n) {
  if (kind == OPT_PURGE)
    snprintf(out, n, "%s", v ? "free" : "dontneed");
  else if (kind == OPT_AUTO && v == 2)
    snprintf(out, n, "auto");
  else if (kind == OPT_SIZE_PCT && v < 0)
    snprintf(out, n, "%lld%%", (long long)-v);
  else if (kind == OPT_SIZE_PCT && v && v % (1 << 30) == 0)
    snprintf(out, n, "%lldG", (long long)(v >> 30));
  else if (kind == OPT_SIZE_PCT && v && v % (1 << 20) == 0)
    snprintf(out, n, "%lldM", (long long)(v >> 20));
  else if (kind == OPT_SIZE_PCT && v && v % (1 << 10) == 0)
    snprintf(out, n, "%lldK", (long long)(v >> 10));
  else
    snprintf(out, n, "%lld", (long long)v);
}

static void check_row(const char *doc, const char *var, enum opt_kind kind, int64_t def) {
  char key[64], want[64], row[1024];
  snprintf(key, sizeof key, "| `%s` |", var);
  const char *r = strstr(doc, key);
  cr_assert_not_null(r, "%s is not in docs/options.md", var);
  size_t len = strcspn(r, "\n");
  cr_assert_lt(len, sizeof row);
  memcpy(row, r, len);
  row[len] = 0;
  char v[32];
  doc_value(kind, def, v, sizeof v);
  snprintf(want, sizeof want, "| `%s` |", v);
  cr_assert_not_null(strstr(row, want), "docs/options.md row for %s does not give the default %s: %s", var,
                     want, row);
}

/* docs/options.md must list every option with its default (test run from the repo root). */
Test(options, docs_mirror_the_table) {
  FILE *f = fopen("docs/options.md", "r");
  cr_assert_not_null(f, "docs/options.md is missing");
  static char doc[65536];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = 0;
  int rows = 0;
#define CHECK_DOC(NAME, field, kind, def, text) check_row(doc, "EBB_" #NAME, kind, def), rows++;
  EBB_OPTIONS(CHECK_DOC)
#undef CHECK_DOC
  int documented = 0;
  for (const char *p = doc; (p = strstr(p, "| `EBB_")) != NULL; p++) documented++;
  cr_assert_eq(documented, rows, "docs/options.md lists options the table does not have");
}
