/* decay.h — the purge policy, as pure functions of (state, now): they decide
 * how much freed-but-resident ("dirty") memory may stay, and never read a clock
 * or call the kernel (jemalloc's decay.c habit). The arena applies the decision. */
#ifndef EBB_DECAY_H
#define EBB_DECAY_H
#include "options.h" /* OPT_PCT: how EBB_DIRTY_MAX encodes a percentage */

#define DECAY_PCT_FLOOR ((size_t)4 << 20) /* a percentage cap never goes below this */

/* Dirty bytes allowed given the EBB_DIRTY_MAX setting, active bytes now, and
 * the recent peak of active bytes (of the last 4 to 12 decay times; arena.c
 * keeps it):
 * - bytes: that many;
 * - OPT_PCT(n): n percent of active bytes but never below DECAY_PCT_FLOOR (so
 *   0% keeps 4 MiB, while 0 bytes keeps nothing);
 * - OPT_DIRTY_AUTO(room): room, plus what active bytes have fallen below
 *   their recent peak. Resident memory (active + dirty) may stay at that peak
 *   plus room: a structure torn down and rebuilt within the decay time
 *   keeps its pages whatever its size, but what one thread frees cannot sit
 *   beside what another maps afresh beyond it. */
size_t decay_dirty_limit(int64_t dirty_max, size_t active, size_t recent_peak);
/* How far below the limit a purge for the cap goes, so that a long teardown
 * (or a long build beside dirty memory) purges in batches, not page by page:
 * an eighth of the cap (of the room, for auto: what lies below the peak is
 * memory about to be reused). */
size_t decay_cap_batch(int64_t dirty_max, size_t limit);
/* Memory that became dirty at `since` must be returned at `now`. */
bool decay_expired(uint64_t since, uint64_t now, uint64_t decay_ms);
/* Whether a page that has not been allocated from since `touched` may have its
 * free granules returned: the same rule, so the two levels decay alike. */
bool decay_page_idle(uint64_t touched, uint64_t now, uint64_t decay_ms);
/* How often a decay pass may look at the same partly used page (and how often
 * a thread runs its own pass: twice as often): a page being freed into is left
 * alone until its count holds still for one interval, so a burst of frees does
 * not pay for walking free lists that will soon be empty anyway. */
uint64_t decay_look_interval(uint64_t decay_ms);
#endif
