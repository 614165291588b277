/* decay.c — owns the purge policy (decay.h). Pure: no clock, no kernel, no state. */
#include "decay.h"

size_t decay_dirty_limit(int64_t dirty_max, size_t active, size_t recent_peak) {
  if (OPT_IS_AUTO(dirty_max)) /* the room, plus the fall from the recent peak */
    return (recent_peak > active ? recent_peak - active : 0) + OPT_AUTO_OF(dirty_max);
  if (!OPT_IS_PCT(dirty_max)) return (size_t)dirty_max;
  size_t pct = (size_t)OPT_PCT_OF(dirty_max);
  size_t lim = active / 100 * pct + active % 100 * pct / 100;
  return lim > DECAY_PCT_FLOOR ? lim : DECAY_PCT_FLOOR;
}

bool decay_expired(uint64_t since, uint64_t now, uint64_t decay_ms) {
  return now >= since && now - since >= decay_ms;
}

bool decay_page_idle(uint64_t touched, uint64_t now, uint64_t decay_ms) {
  return decay_expired(touched, now, decay_ms);
}

uint64_t decay_look_interval(uint64_t decay_ms) {
  uint64_t i = decay_ms / 4;
  return i < 8 ? 8 : i;
}

size_t decay_cap_batch(int64_t dirty_max, size_t limit) {
  return (OPT_IS_AUTO(dirty_max) ? OPT_AUTO_OF(dirty_max) : limit) / 8;
}
