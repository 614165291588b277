/* options.h — the one table of EBB_* settings (habit: one options table, as in
 * mimalloc's options.c). Each row: X(NAME, field, kind, default, values, doc):
 * `values` is what the variable accepts, as docs/options.md and the warnings
 * write it. Every default can be overridden at build time with
 * -DEBB_DEFAULT_<NAME>=value (OPT_BUILT_<NAME> then says so, for EBB_VERBOSE).
 * docs/options.md mirrors this table; tests/unit checks that it does.
 * Layer: above os and fmt. Parsed once, lazily, without allocating. */
#ifndef EBB_OPTIONS_H
#define EBB_OPTIONS_H
#include "common.h"
#include "ebb.h"
#include "fmt.h"

#ifndef EBB_VERSION_STRING
#define EBB_VERSION_STRING "0.2.0" /* until ebb.h defines it */
#endif

/* EBB_DIRTY_MAX holds bytes, or a percentage of active memory marked by
 * OPT_PCT_BIT, so that 0% (which means the 4 MiB floor) and 0 bytes differ, or
 * "auto" bytes beyond the recent peak marked by OPT_AUTO_BIT (decay.h). Build
 * time: -DEBB_DEFAULT_DIRTY_MAX='OPT_PCT(25)', ='OPT_DIRTY_AUTO(64ll << 20)' or
 * plain bytes. Byte values stay below OPT_AUTO_BIT (2 EiB). */
#define OPT_PCT_BIT ((int64_t)1 << 62)
#define OPT_PCT(n) (OPT_PCT_BIT | (int64_t)(n))
#define OPT_IS_PCT(v) (((v)&OPT_PCT_BIT) != 0)
#define OPT_PCT_OF(v) ((uint64_t)((v) & ~OPT_PCT_BIT))
#define OPT_AUTO_BIT ((int64_t)1 << 61)
#define OPT_DIRTY_AUTO(n) (OPT_AUTO_BIT | (int64_t)(n))
#define OPT_IS_AUTO(v) (((v)&OPT_AUTO_BIT) != 0)
#define OPT_AUTO_OF(v) ((size_t)((v) & ~OPT_AUTO_BIT))
#define DIRTY_AUTO_ROOM (256ll << 20) /* "auto": 256M beyond the recent peak (docs/tuning.md) */

#ifdef EBB_DEFAULT_DECAY_MS
#define OPT_BUILT_DECAY_MS 1
#else
#define OPT_BUILT_DECAY_MS 0
#define EBB_DEFAULT_DECAY_MS 250
#endif
#ifdef EBB_DEFAULT_DIRTY_MAX
#define OPT_BUILT_DIRTY_MAX 1
#else
#define OPT_BUILT_DIRTY_MAX 0
#define EBB_DEFAULT_DIRTY_MAX OPT_DIRTY_AUTO(DIRTY_AUTO_ROOM) /* bytes, OPT_PCT(n) or OPT_DIRTY_AUTO(bytes)  \
                                                               */
#endif
#ifdef EBB_DEFAULT_BACKGROUND
#define OPT_BUILT_BACKGROUND 1
#else
#define OPT_BUILT_BACKGROUND 0
#define EBB_DEFAULT_BACKGROUND 2 /* 0 never, 1 always, 2 auto: once the process has a second thread */
#endif
#ifdef EBB_DEFAULT_STATS
#define OPT_BUILT_STATS 1
#else
#define OPT_BUILT_STATS 0
#define EBB_DEFAULT_STATS 0 /* 0 none, 1 summary, 2 + size classes, 3 json (EBB_STATS_* in ebb.h) */
#endif
#ifdef EBB_DEFAULT_PURGE
#define OPT_BUILT_PURGE 1
#else
#define OPT_BUILT_PURGE 0
#define EBB_DEFAULT_PURGE 0 /* 0: MADV_DONTNEED, 1: MADV_FREE */
#endif
#ifdef EBB_DEFAULT_VERBOSE
#define OPT_BUILT_VERBOSE 1
#else
#define OPT_BUILT_VERBOSE 0
#define EBB_DEFAULT_VERBOSE 0
#endif

enum opt_kind { OPT_MS, OPT_SIZE_PCT, OPT_BOOL, OPT_AUTO, OPT_PURGE, OPT_STATS };

#define OPT_BOOL_VALUES "0/1 (no/yes, off/on, false/true)"

#define EBB_OPTIONS(X)                                                                                       \
  X(DECAY_MS, decay_ms, OPT_MS, EBB_DEFAULT_DECAY_MS, "milliseconds, 0-86400000",                            \
    "milliseconds freed memory may stay resident before it is returned to the kernel (0: at once)")          \
  X(DIRTY_MAX, dirty_max, OPT_SIZE_PCT, EBB_DEFAULT_DIRTY_MAX,                                               \
    "auto, auto+SIZE, SIZE (bytes, optional K/M/G and B suffix), or N%",                                       \
    "most freed-but-resident memory kept; beyond it the oldest is returned at once. auto: 256M more than "   \
    "active memory's fall from its recent peak (auto+SIZE: SIZE more), so resident memory stays within "     \
    "that peak + 256M; SIZE: that many bytes; N%: of active memory, never below 4M")                         \
  X(BACKGROUND, background, OPT_AUTO, EBB_DEFAULT_BACKGROUND, "auto, " OPT_BOOL_VALUES,                      \
    "a background thread returns decayed memory even when no thread allocates: 1 always, "                   \
    "0 never, auto once the process has a second thread")                                                    \
  X(STATS, stats, OPT_STATS, EBB_DEFAULT_STATS, "0, 1, 2, json",                                             \
    "at exit, print to stderr: 1 a summary, 2 the summary and a table per size class, json all of it "       \
    "as one JSON object")                                                                                    \
  X(PURGE, purge, OPT_PURGE, EBB_DEFAULT_PURGE, "dontneed, free",                                            \
    "how memory is returned: dontneed (MADV_DONTNEED, RSS drops at once) or free (MADV_FREE)")               \
  X(VERBOSE, verbose, OPT_BOOL, EBB_DEFAULT_VERBOSE, OPT_BOOL_VALUES,                                        \
    "1: print the version and every setting with where it came from to stderr at start-up")

typedef struct {
#define OPT_FIELD(NAME, field, kind, def, values, doc) int64_t field;
  EBB_OPTIONS(OPT_FIELD)
#undef OPT_FIELD
} options_t;

extern options_t opt; /* read-only after options_init */
/* Where EBB_STATS writes at exit: the duplicate of stderr taken at start-up
 * (programs such as coreutils close fd 2 in their own exit handlers) while it
 * is still the same file, else fd 2 while that is, else nowhere (-1): a
 * program may close the duplicate and open its own file under its number
 * (found by a probe: the stats went into a daemon's data file). */
int options_stats_out(void);
/* Resets every setting to its default, then reads the environment: a bad
 * value or an EBB_* variable that is no setting gets a one-line warning, and
 * EBB_VERBOSE=1 lists the settings. Runs once (thread_process_init). */
void options_init(void);
/* Parses one value; returns false (and leaves *out) when it is not valid. Exposed for tests. */
bool options_parse(enum opt_kind kind, const char *s, int64_t *out);
/* Writes v as docs/options.md writes a value of this kind (250, 256M, 25%, auto, json...). */
void options_format(fmt_t *f, enum opt_kind kind, int64_t v);
/* Levenshtein distance between a and b, ignoring case (each cut at 63 characters). */
unsigned options_distance(const char *a, const char *b);
#endif
