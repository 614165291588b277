/* options.h — the one table of EBB_* settings (habit: one options table, as in
 * mimalloc's options.c). Each row: X(NAME, field, kind, default, doc). Every
 * default can be overridden at build time with -DEBB_DEFAULT_<NAME>=value.
 * docs/options.md mirrors this table; tests/unit checks that it does.
 * Layer: above os and fmt. Parsed once, lazily, without allocating. */
#ifndef EBB_OPTIONS_H
#define EBB_OPTIONS_H
#include "common.h"

#ifndef EBB_DEFAULT_DECAY_MS
#define EBB_DEFAULT_DECAY_MS 250
#endif
#ifndef EBB_DEFAULT_DIRTY_MAX
#define EBB_DEFAULT_DIRTY_MAX (256ll << 20) /* bytes; a negative value means -N percent */
#endif
#ifndef EBB_DEFAULT_BACKGROUND
#define EBB_DEFAULT_BACKGROUND 2 /* 0 never, 1 always, 2 auto: once the process has a second thread */
#endif
#ifndef EBB_DEFAULT_STATS
#define EBB_DEFAULT_STATS 0
#endif
#ifndef EBB_DEFAULT_PURGE
#define EBB_DEFAULT_PURGE 0 /* 0: MADV_DONTNEED, 1: MADV_FREE */
#endif

enum opt_kind { OPT_MS, OPT_SIZE_PCT, OPT_BOOL, OPT_AUTO, OPT_PURGE };

#define EBB_OPTIONS(X)                                                                                       \
  X(DECAY_MS, decay_ms, OPT_MS, EBB_DEFAULT_DECAY_MS,                                                        \
    "milliseconds freed memory may stay resident before it is returned to the kernel (0: at once)")          \
  X(DIRTY_MAX, dirty_max, OPT_SIZE_PCT, EBB_DEFAULT_DIRTY_MAX,                                               \
    "most freed-but-resident memory kept, as bytes (K/M/G suffix) or N% of active memory "                   \
    "(never below 4M); beyond it the oldest is returned at once")                                            \
  X(BACKGROUND, background, OPT_AUTO, EBB_DEFAULT_BACKGROUND,                                                \
    "a background thread returns decayed memory even when no thread allocates: 1 always, "                   \
    "0 never, auto once the process has a second thread")                                                    \
  X(STATS, stats, OPT_BOOL, EBB_DEFAULT_STATS, "1: print a one-line summary to stderr at exit")              \
  X(PURGE, purge, OPT_PURGE, EBB_DEFAULT_PURGE,                                                              \
    "how memory is returned: dontneed (MADV_DONTNEED, RSS drops at once) or free (MADV_FREE)")

typedef struct {
#define OPT_FIELD(NAME, field, kind, def, doc) int64_t field;
  EBB_OPTIONS(OPT_FIELD)
#undef OPT_FIELD
} options_t;

extern options_t opt; /* read-only after options_init */
/* Where EBB_STATS=1 writes at exit: a duplicate of stderr taken at start-up,
 * since programs such as coreutils close fd 2 in their own exit handlers. */
extern int options_stats_fd;
void options_init(void);
/* Parses one value; returns false (and leaves *out) when it is not valid. Exposed for tests. */
bool options_parse(enum opt_kind kind, const char *s, int64_t *out);
#endif
