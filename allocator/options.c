/* options.c — owns the parsed EBB_* settings (options.h).
 * May call: os_getenv, fmt. Must never allocate: values are parsed in place and a
 * bad value gets a one-line warning naming the variable and the default kept. */
#include "options.h"
#include "fmt.h"
#include "os.h"
#include <string.h>

int options_stats_fd = 2;

options_t opt = {
#define OPT_DEFAULT(NAME, field, kind, def, doc) .field = (def),
    EBB_OPTIONS(OPT_DEFAULT)
#undef OPT_DEFAULT
};

static bool parse_u64(const char **s, uint64_t *out) {
  uint64_t v = 0;
  const char *p = *s;
  if (*p < '0' || *p > '9') return false;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *s = p;
  *out = v;
  return true;
}

static bool parse_size_pct(const char *s, int64_t *out) {
  uint64_t v;
  if (!parse_u64(&s, &v)) return false;
  if (*s == '%') {
    if (s[1] || v > 1000) return false;
    *out = -(int64_t)v;
    return true;
  }
  unsigned shift = 0;
  switch (*s) {
  case 'k':
  case 'K':
    shift = 10;
    s++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    s++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    s++;
    break;
  }
  if (*s == 'b' || *s == 'B') s++;
  if (*s || v > ((uint64_t)INT64_MAX >> shift)) return false;
  *out = (int64_t)(v << shift);
  return true;
}

static bool parse_bool(const char *s, int64_t *out) {
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcmp(s, yes[i]) == 0) return *out = 1, true;
    if (strcmp(s, no[i]) == 0) return *out = 0, true;
  }
  return false;
}

bool options_parse(enum opt_kind kind, const char *s, int64_t *out) {
  uint64_t v;
  switch (kind) {
  case OPT_MS:
    if (!parse_u64(&s, &v) || *s || v > 86400000u) return false;
    *out = (int64_t)v;
    return true;
  case OPT_SIZE_PCT: return parse_size_pct(s, out);
  case OPT_BOOL: return parse_bool(s, out);
  case OPT_AUTO:
    if (strcmp(s, "auto") == 0) return *out = 2, true;
    return parse_bool(s, out);
  case OPT_PURGE:
    if (strcmp(s, "dontneed") == 0) return *out = 0, true;
    if (strcmp(s, "free") == 0) return *out = 1, true;
    return false;
  }
  return false;
}

static void warn_bad(const char *var, enum opt_kind kind, const char *val, int64_t def) {
  char line[256];
  fmt_t f = FMT_ON(line);
  fmt_str(&f, "ebb: warning: ");
  fmt_str(&f, var);
  fmt_str(&f, "=");
  fmt_str(&f, val);
  fmt_str(&f, " is not valid; keeping the default ");
  if (kind == OPT_AUTO && def == 2) {
    fmt_str(&f, "auto");
  } else if (kind == OPT_PURGE) {
    fmt_str(&f, def ? "free" : "dontneed");
  } else if (def < 0) {
    fmt_u64(&f, (uint64_t)-def);
    fmt_str(&f, "%");
  } else if (kind == OPT_SIZE_PCT && def && def % (1 << 20) == 0) {
    fmt_u64(&f, (uint64_t)def >> 20); /* as docs/options.md writes it: 256M */
    fmt_str(&f, "M");
  } else {
    fmt_u64(&f, (uint64_t)def);
  }
  fmt_str(&f, "\n");
  fmt_flush(&f, 2);
}

static void read_one(const char *var, enum opt_kind kind, int64_t *field) {
  const char *val = os_getenv(var);
  if (val && !options_parse(kind, val, field)) warn_bad(var, kind, val, *field);
}

void options_init(void) {
#define OPT_READ(NAME, field, kind, def, doc) read_one("EBB_" #NAME, kind, &opt.field);
  EBB_OPTIONS(OPT_READ)
#undef OPT_READ
  if (opt.stats) options_stats_fd = os_dup_fd(2);
}
