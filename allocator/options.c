/* options.c — owns the parsed EBB_* settings (options.h).
 * May call: os_getenv, os_environ_at, os_write (through fmt). Must never
 * allocate: values are parsed in place; a bad value, or an EBB_* variable that
 * is no setting, gets a one-line warning and is ignored. */
#include "options.h"
#include "fmt.h"
#include "os.h"
#include <string.h>

_Static_assert(EBB_DEFAULT_DIRTY_MAX >= 0,
               "EBB_DEFAULT_DIRTY_MAX is bytes, or OPT_PCT(n) for n percent, or OPT_DIRTY_AUTO(bytes)");

static int stats_fd = 2;
static uint64_t stats_id[2]; /* what stderr was at start-up */
static bool stats_id_known;

static bool is_stats_file(int fd) {
  uint64_t id[2];
  return os_fd_identity(fd, id) && id[0] == stats_id[0] && id[1] == stats_id[1];
}

int options_stats_out(void) {
  /* stderr was not open at start-up: nowhere, since fd 2 may be a file the
   * program opened since (found by a probe: run with 2>&-, a program's first
   * open took fd 2 and got the stats appended to its data) */
  if (!stats_id_known) return -1;
  if (is_stats_file(stats_fd)) return stats_fd;
  return is_stats_file(2) ? 2 : -1;
}

static const options_t opt_defaults = {
#define OPT_DEFAULT(NAME, field, kind, def, values, doc) .field = (def),
    EBB_OPTIONS(OPT_DEFAULT)
#undef OPT_DEFAULT
};
options_t opt = {
#define OPT_DEFAULT(NAME, field, kind, def, values, doc) .field = (def),
    EBB_OPTIONS(OPT_DEFAULT)
#undef OPT_DEFAULT
};

/* Where each setting came from, for EBB_VERBOSE. */
enum opt_source { FROM_DEFAULT, FROM_BUILD, FROM_ENV };
static const struct opt_row {
  const char *var, *values;
  enum opt_kind kind;
  bool built;    /* default set with -DEBB_DEFAULT_<NAME> */
  size_t offset; /* of the field in options_t */
} opt_rows[] = {
#define OPT_ROW(NAME, field, kind, def, values, doc)                                                         \
  {"EBB_" #NAME, values, kind, OPT_BUILT_##NAME, offsetof(options_t, field)},
    EBB_OPTIONS(OPT_ROW)
#undef OPT_ROW
};
#define OPT_COUNT (sizeof opt_rows / sizeof opt_rows[0])

static int64_t *opt_field(const struct opt_row *r) { return (int64_t *)((char *)&opt + r->offset); }

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
  if (strncmp(s, "auto", 4) == 0) { /* auto, auto+SIZE */
    if (!s[4]) return *out = OPT_DIRTY_AUTO(DIRTY_AUTO_ROOM), true;
    int64_t room; /* never *out: a value rejected below must not stay behind in it */
    if (s[4] != '+' || !parse_size_pct(s + 5, &room) || OPT_IS_PCT(room) || OPT_IS_AUTO(room)) return false;
    *out = OPT_DIRTY_AUTO(room);
    return true;
  }
  if (!parse_u64(&s, &v)) return false;
  if (*s == '%') {
    if (s[1] || v > 1000) return false;
    *out = OPT_PCT(v);
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
  if (*s || v >= ((uint64_t)OPT_AUTO_BIT >> shift)) return false;
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
  case OPT_STATS:
    if (strcmp(s, "json") == 0) return *out = EBB_STATS_JSON, true;
    if (s[0] >= '0' && s[0] <= '2' && !s[1]) return *out = s[0] - '0', true;
    return false;
  }
  return false;
}

void options_format(fmt_t *f, enum opt_kind kind, int64_t v) {
  if ((kind == OPT_AUTO && v == 2) || (kind == OPT_SIZE_PCT && v == OPT_DIRTY_AUTO(DIRTY_AUTO_ROOM))) {
    fmt_str(f, "auto");
  } else if (kind == OPT_PURGE) {
    fmt_str(f, v ? "free" : "dontneed");
  } else if (kind == OPT_STATS && v == EBB_STATS_JSON) {
    fmt_str(f, "json");
  } else if (kind == OPT_SIZE_PCT && OPT_IS_AUTO(v)) {
    fmt_str(f, "auto+");
    options_format(f, kind, (int64_t)OPT_AUTO_OF(v));
  } else if (kind == OPT_SIZE_PCT && OPT_IS_PCT(v)) {
    fmt_u64(f, OPT_PCT_OF(v));
    fmt_str(f, "%");
  } else if (kind == OPT_SIZE_PCT && v) {
    static const char suffix[] = "GMK"; /* as docs/options.md writes it: 256M */
    for (int i = 0; i < 3; i++) {
      unsigned shift = 30 - 10 * (unsigned)i;
      if (v % ((int64_t)1 << shift) == 0) {
        fmt_u64(f, (uint64_t)v >> shift);
        char s[2] = {suffix[i], 0};
        fmt_str(f, s);
        return;
      }
    }
    fmt_u64(f, (uint64_t)v);
  } else {
    fmt_u64(f, (uint64_t)v);
  }
}

static void warn_bad(const struct opt_row *r, const char *val, int64_t kept) {
  char line[512];
  fmt_t f = FMT_ON(line);
  fmt_str(&f, "ebb: warning: ");
  fmt_str(&f, r->var);
  fmt_str(&f, "=");
  fmt_strn(&f, val, 64);
  fmt_str(&f, " is not valid (");
  fmt_str(&f, r->values);
  fmt_str(&f, "); keeping the default ");
  options_format(&f, r->kind, kept);
  fmt_str(&f, "\n");
  fmt_flush(&f, 2);
}

unsigned options_distance(const char *a, const char *b) {
  enum { MAX = 63 };
  unsigned row[MAX + 1];
  size_t na = strnlen(a, MAX), nb = strnlen(b, MAX);
  for (size_t j = 0; j <= nb; j++) row[j] = (unsigned)j;
  for (size_t i = 1; i <= na; i++) {
    unsigned diag = row[0];
    row[0] = (unsigned)i;
    for (size_t j = 1; j <= nb; j++) {
      char x = a[i - 1], y = b[j - 1];
      if (x >= 'a' && x <= 'z') x = (char)(x - 'a' + 'A');
      if (y >= 'a' && y <= 'z') y = (char)(y - 'a' + 'A');
      unsigned best = diag + (x != y), up = row[j] + 1, left = row[j - 1] + 1;
      if (up < best) best = up;
      if (left < best) best = left;
      diag = row[j];
      row[j] = best;
    }
  }
  return row[nb];
}

/* "EBB_STAT=1 is not an ebb setting (did you mean EBB_STATS?)": the closest
 * name is suggested when at most half of the longer name must change; else
 * every setting is listed. */
static void warn_unknown(const char *entry, size_t name_len) {
  char name[64];
  size_t n = name_len < sizeof name - 1 ? name_len : sizeof name - 1;
  memcpy(name, entry, n);
  name[n] = 0;
  const struct opt_row *best = NULL;
  unsigned best_d = ~0u;
  for (size_t i = 0; i < OPT_COUNT; i++) {
    unsigned d = options_distance(name + 4, opt_rows[i].var + 4);
    if (d < best_d) best_d = d, best = &opt_rows[i];
  }
  size_t la = strlen(name + 4), lb = strlen(best->var + 4);
  char line[512];
  fmt_t f = FMT_ON(line);
  fmt_str(&f, "ebb: warning: ");
  fmt_strn(&f, entry, 80);
  fmt_str(&f, " is not an ebb setting (");
  if (best_d * 2 <= (la > lb ? la : lb)) {
    fmt_str(&f, "did you mean ");
    fmt_str(&f, best->var);
    fmt_str(&f, "?");
  } else {
    fmt_str(&f, "the settings are");
    for (size_t i = 0; i < OPT_COUNT; i++) {
      fmt_str(&f, i ? ", " : " ");
      fmt_str(&f, opt_rows[i].var);
    }
  }
  fmt_str(&f, "); ignored\n");
  fmt_flush(&f, 2);
}

static bool is_setting(const char *entry, size_t name_len) {
  for (size_t i = 0; i < OPT_COUNT; i++)
    if (strlen(opt_rows[i].var) == name_len && memcmp(opt_rows[i].var, entry, name_len) == 0) return true;
  return false;
}

static void check_unknown(void) {
  const char *e;
  for (size_t i = 0; (e = os_environ_at(i)) != NULL; i++) {
    if (strncmp(e, "EBB_", 4) != 0) continue;
    const char *eq = strchr(e, '=');
    size_t len = eq ? (size_t)(eq - e) : strlen(e);
    if (!is_setting(e, len)) warn_unknown(e, len);
  }
}

/* One line per setting: "ebb: EBB_DECAY_MS=250 (default)". */
static void print_settings(const enum opt_source *src, const bool *rejected) {
  char line[256];
  fmt_t f = FMT_ON(line);
  fmt_str(&f, "ebb: version " EBB_VERSION_STRING ", pid ");
  fmt_u64(&f, (uint64_t)os_getpid());
  fmt_str(&f, "\n");
  fmt_flush(&f, 2);
  for (size_t i = 0; i < OPT_COUNT; i++) {
    const struct opt_row *r = &opt_rows[i];
    fmt_str(&f, "ebb: ");
    fmt_str(&f, r->var);
    fmt_str(&f, "=");
    options_format(&f, r->kind, *opt_field(r));
    if (src[i] == FROM_ENV) {
      fmt_str(&f, " (environment)");
    } else {
      fmt_str(&f, src[i] == FROM_BUILD ? " (build-time -DEBB_DEFAULT_" : " (default");
      if (src[i] == FROM_BUILD) fmt_str(&f, r->var + 4);
      fmt_str(&f, rejected[i] ? "; the environment's value was not valid)" : ")");
    }
    fmt_str(&f, "\n");
    fmt_flush(&f, 2);
  }
}

void options_init(void) {
  enum opt_source src[OPT_COUNT];
  bool rejected[OPT_COUNT];
  opt = opt_defaults;
  for (size_t i = 0; i < OPT_COUNT; i++) {
    const struct opt_row *r = &opt_rows[i];
    const char *val = os_getenv(r->var);
    src[i] = r->built ? FROM_BUILD : FROM_DEFAULT;
    int64_t v; /* the field keeps its default unless the whole value parses */
    rejected[i] = val && !options_parse(r->kind, val, &v);
    if (val && !rejected[i]) *opt_field(r) = v;
    if (rejected[i])
      warn_bad(r, val, *opt_field(r));
    else if (val)
      src[i] = FROM_ENV;
  }
  check_unknown();
  if (opt.verbose) print_settings(src, rejected);
  if (opt.stats) {
    stats_id_known = os_fd_identity(2, stats_id);
    stats_fd = os_dup_fd(2);
  }
}
