/* stats.h — what stats.c offers the layers below the public API: the sampled
 * peak of live bytes. Layer: stats (above arena, thread); declared here so
 * that arena's decay passes may call the hook. */
#ifndef EBB_STATS_H
#define EBB_STATS_H
#include "common.h"

/* Records the current bytes in live blocks as a candidate for
 * ebb_stats.peak_allocated. Live bytes are summed by walking every arena's page
 * descriptors under each arena's lock (arena_stats_sum), so the peak is a
 * sample: ebb_stats and ebb_stats_print take one, and a decay pass may. Call it
 * with no arena lock held, never from a fast path. */
void stats_sample_peak(void);
#endif
