/* test_rss.c — what the kernel sees: resident memory and page faults of real
 * processes on ebb. Each scenario runs tests/programs/rss_probe.c, compiled here
 * at run time into build/tests/tmp, in a fresh process started with
 * `env -i EBB_...=... LD_PRELOAD=build/libebb.so`, so the options are in place
 * before the allocator's first call and nothing inherited changes them. The
 * probe measures (RSS from /proc/self/statm, minor faults from getrusage) and
 * prints key=value fields; the assertions are here, with generous margins and
 * deadlines rather than timings (1500 ms, at least the decay time + 1 s, wherever memory must fall;
 * 2.5 s where only the background thread can make it fall). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"

TestSuite(rss, .timeout = 60);

#define RSS_PROBE "rss_probe"
#define RSS_DIRTY_MAX_MIB 256.0 /* the room of the default EBB_DIRTY_MAX (auto) */

static struct cmd_result rss_out; /* large: not on the stack */

/* Compiles the probe (each test is its own process, and tests may run in
 * parallel: compile_program writes under a unique name and renames). */
static void rss_build_probe(void) {
  int st = compile_program(&rss_out, NULL, "rss_probe.c", RSS_PROBE, "-O1 -Wall -Wextra -Werror -fno-builtin -pthread",
                           "-ldl -pthread");
  cr_assert_eq(st, 0, "compiling rss_probe.c: %s\n%s%s", describe_status(st), rss_out.out, rss_out.err);
}

/* Runs the probe on ebb with exactly the EBB_* settings in env (a string of
 * NAME=value words, or ""); returns its exit status, with stdout in rss_out. */
static int rss_probe(const char *env, const char *args) {
  rss_build_probe();
  int st = run_cmd(&rss_out, "env -i %s LD_PRELOAD='%s/build/libebb.so' '%s/%s' %s", env, repo_root(), tmp_dir(),
                   RSS_PROBE, args);
  cr_log_info("rss_probe %s [%s]: %s", args, env, rss_out.out);
  cr_assert(WIFEXITED(st), "rss_probe %s %s\nstdout: %s\nstderr: %s", args, describe_status(st), rss_out.out,
            rss_out.err);
  cr_assert(strstr(rss_out.out, "ebb=1 ") == rss_out.out || strstr(rss_out.out, " ebb=1 "),
            "rss_probe %s did not run on ebb (LD_PRELOAD failed?)\nstdout: %s\nstderr: %s", args, rss_out.out,
            rss_out.err);
  return st;
}

/* The number after " key=" (or "key=" at the start) in the probe's output. */
static double rss_field(const char *key) {
  size_t n = strlen(key);
  for (const char *p = rss_out.out; (p = strstr(p, key)) != NULL; p += n) {
    if ((p != rss_out.out && p[-1] != ' ') || p[n] != '=') continue;
    char *end;
    double v = strtod(p + n + 1, &end);
    cr_assert_neq(end, p + n + 1, "field %s has no number in: %s", key, rss_out.out);
    return v;
  }
  cr_assert_fail("field %s missing from the probe's output:\n%s\nstderr: %s", key, rss_out.out, rss_out.err);
  return 0;
}

static void rss_assert_exit0(const char *what, int st) {
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: rss_probe %s\nstdout: %s\nstderr: %s", what,
            describe_status(st), rss_out.out, rss_out.err);
}

/* ---------------------------------------------------------------- 1. steady churn */

/* A request loop: the same ~450 KB + 3000 small + 24 medium blocks every cycle,
 * all written, freed in a random order. After 100 warm-up cycles, three
 * windows of 100 more: at most one of them may fault more than 10 pages in
 * (the footprint's last pages touched for the first time, once: rss_probe.c's
 * CHURN_WINDOWS says why), and RSS grows by at most 1 MiB over all three
 * (ebb reuses resident spans before fresh ones and keeps what it freed
 * resident for the decay time, so nothing is faulted back in again). */
static void rss_churn(unsigned gap_ms) {
  char args[32];
  snprintf(args, sizeof args, "churn %u", gap_ms);
  rss_assert_exit0("churn", rss_probe("", args));
  double cycles = rss_field("cycles"), w[3] = {rss_field("w0"), rss_field("w1"), rss_field("w2")};
  cr_assert_eq(cycles, 100);
  cr_assert_eq(rss_field("windows"), 3);
  int over = (w[0] > 10) + (w[1] > 10) + (w[2] > 10);
  cr_expect_leq(over, 1,
                "%d of 3 windows of %.0f steady cycles (gap %u ms) faulted more than 10 pages in: %.0f, %.0f, "
                "%.0f; worst cycle %.0f",
                over, cycles, gap_ms, w[0], w[1], w[2], rss_field("worst_cycle"));
  cr_expect_leq(rss_field("rss_growth_kib"), 1024, "RSS grew by %.0f KiB over the measured cycles",
                rss_field("rss_growth_kib"));
}

Test(rss, churn_back_to_back_faults_nothing) { rss_churn(0); }

Test(rss, churn_with_2ms_gap_faults_nothing) { rss_churn(2); }

/* ---------------------------------------------------------------- 2, 3. cross-thread frees */

/* Two threads build ~256 MiB of 32-512 B objects, swap, free all but one in
 * 512 of the other's, and exit. RSS (over the RSS before the build) must fall
 * to 2 x live + 16 MiB within the decay time + 1 s (2.5 s where only the
 * background thread can return it: rss_probe.c's BG_DEADLINE_MS says why). */
static void rss_handoff(const char *env, const char *args) {
  rss_assert_exit0("handoff", rss_probe(env, args));
  double build = rss_field("build_mib"), bound = rss_field("bound_mib"), live = rss_field("live_kib");
  cr_assert_geq(build, 200, "the build reached only %.1f MiB of RSS: nothing to return", build);
  cr_assert_leq(live, 1024, "live set %.0f KiB: one in 512 of ~256 MiB should be ~512 KiB", live);
  cr_expect_geq(rss_field("reached_ms"), 0,
                "RSS (over the pre-build RSS) is still %.1f MiB %.0f ms after both threads exited "
                "(%.1f MiB when they did); want <= %.1f MiB (2 x %.0f KiB live + 16 MiB) within %.0f ms; "
                "ebb: dirty %.1f MiB, active %.1f MiB",
                rss_field("final_mib"), rss_field("watched_ms"), rss_field("exit_mib"), bound, live,
                rss_field("deadline_ms"),
                rss_field("dirty_mib"), rss_field("active_mib"));
}

/* The main thread mallocs and frees a small block every millisecond: its ticks
 * purge the abandoned arenas. */
Test(rss, cross_thread_frees_return_with_light_activity) { rss_handoff("", "handoff 1"); }

/* No allocator call at all in the main thread: only the background thread can
 * return the memory. */
Test(rss, cross_thread_frees_return_with_background_thread) {
  rss_handoff("EBB_BACKGROUND=1", "handoff 0");
  cr_expect_geq(rss_field("threads"), 2, "no background thread in /proc/self/status (Threads: %.0f)",
                rss_field("threads"));
}

/* The workers stay alive, blocked, after their frees, and nobody calls the
 * allocator: only the background thread can take their memory back, from
 * threads that are alive (arena_reclaim_locked). Before, RSS stayed at the
 * whole build for as long as the workers lived. */
Test(rss, cross_thread_frees_return_while_the_threads_stay_alive) {
  rss_handoff("", "handoff 0 stay");
}

/* The workers stay alive and at work after their frees, each a small
 * malloc/free loop served by its current page, so neither ever needs a page
 * nor looks idle: each must take back itself the full pages the other freed
 * (owner_reclaim_remote). Before, RSS stayed at the whole build for as long
 * as they worked (found by an independent probe). */
Test(rss, cross_thread_frees_return_while_the_threads_work) { rss_handoff("", "handoff 0 busy"); }

/* A class with thousands of partly used pages (one live block each) of a
 * thread at work in another size: the free granules of all of them go back,
 * not only of the first pages a bounded pass looks at (found by a probe: 228
 * MB stayed where 33 MB is the floor). */
Test(rss, every_page_of_a_large_class_is_reached_while_its_thread_works) {
  rss_assert_exit0("sparse", rss_probe("", "sparse"));
  cr_assert_geq(rss_field("built_mib"), 150, "the build reached only %.1f MiB of RSS", rss_field("built_mib"));
  cr_expect_geq(rss_field("reached_ms"), 0,
                "RSS (over the start) is still %.1f MiB after %.0f ms; want <= %.1f MiB (a 4 KiB granule a page "
                "+ 16 MiB); ebb: dirty %.1f MiB, active %.1f MiB",
                rss_field("final_mib"), rss_field("deadline_ms"), rss_field("bound_mib"), rss_field("dirty_mib"),
                rss_field("active_mib"));
}

/* One thread, no background thread, that frees 200 MB of small blocks and
 * then works only with large ones: its large frees run its decay pass (found
 * by a probe: 228 MB stayed dirty for as long as it worked). */
Test(rss, small_blocks_go_back_while_a_thread_works_only_with_large_ones) {
  rss_assert_exit0("large_only", rss_probe("", "large_only"));
  cr_assert_geq(rss_field("built_mib"), 150, "the build reached only %.1f MiB of RSS", rss_field("built_mib"));
  cr_expect_eq(rss_field("threads"), 1, "a second thread (a background thread?) in the process");
  cr_expect_geq(rss_field("reached_ms"), 0, "RSS (over the start) is still %.1f MiB after %.0f ms; want <= %.1f MiB; dirty %.1f MiB",
                rss_field("final_mib"), rss_field("deadline_ms"), rss_field("bound_mib"), rss_field("dirty_mib"));
}

/* A second grow-and-shrink idles as low as the first (rss_probe.c, reshrink:
 * a refilled page whose count fell back to where it had been purged was
 * taken for purged already, and kept its free granules: 31.6 MB idle after
 * the first round, 70 MB after each later one, found by a probe). */
Test(rss, a_second_shrink_goes_back_as_far_as_the_first) {
  rss_assert_exit0("reshrink", rss_probe("", "reshrink"));
  double f1 = rss_field("floor1_mib"), f2 = rss_field("floor2_mib");
  cr_expect_leq(f2, f1 + 4, "idle RSS over the start: %.1f MiB after the first shrink, %.1f MiB after the second "
                            "(%.1f MiB live)", f1, f2, rss_field("live_mib"));
}

/* ---------------------------------------------------------------- 4. large blocks and ebb_trim */

/* ebb_trim returns the bytes it returned, whatever EBB_DECAY_MS: at 0 the
 * pages a pass retires are purged on the way, and were not counted (61,440
 * of 20 MB; found by a probe). */
static void rss_trim_count(const char *env) {
  rss_assert_exit0("trim_count", rss_probe(env, "trim_count"));
  double trimmed = rss_field("trimmed"), purged = rss_field("purged");
  cr_assert_geq(purged, 16e6, "[%s] 20 MB freed by another thread, but the trim purged only %.0f bytes", env, purged);
  cr_expect_eq(trimmed, purged, "[%s] ebb_trim() returned %.0f; the stats' purged grew by %.0f", env, trimmed,
               purged);
  cr_expect_eq(rss_field("dirty_after"), 0, "[%s] dirty memory left after ebb_trim()", env);
}
Test(rss, trim_counts_what_it_returns) {
  rss_trim_count("EBB_BACKGROUND=0 EBB_DECAY_MS=0");
  rss_trim_count("EBB_BACKGROUND=0");
}

/* A freed 64 MiB block stays resident for the decay time (cached for reuse),
 * then leaves RSS while the program does a little allocating; 200 MiB of 64 KiB
 * blocks freed, then one ebb_trim(): no dirty memory is left and RSS drops by
 * what was dirty. */
static void rss_large(const char *env) {
  rss_assert_exit0("large", rss_probe(env, "large"));
  cr_assert_geq(rss_field("big_growth_mib"), 60, "malloc(64 MiB) + memset raised RSS by only %.1f MiB",
                rss_field("big_growth_mib"));
  if (!strstr(env, "EBB_DECAY_MS")) /* the default decay time: the block is gone within it + 1 s */
    cr_expect_geq(rss_field("big_reached_ms"), 0, "RSS fell by only %.1f MiB within 1500 ms of freeing 64 MiB",
                  rss_field("big_drop_mib"));
  cr_assert_geq(rss_field("blocks_mib"), 190, "200 MiB of 64 KiB blocks raised RSS by only %.1f MiB",
                rss_field("blocks_mib"));
  double dirty = rss_field("dirty_before_mib"), left = rss_field("rss_after_free_mib");
  cr_expect_geq(left, dirty - 4, "the stats claim %.1f MiB dirty, but only %.1f MiB stayed resident", dirty, left);
  cr_expect_eq(rss_field("dirty_after"), 0, "ebb_stats().dirty is %.0f bytes right after ebb_trim()",
               rss_field("dirty_after"));
  cr_expect_geq(rss_field("trimmed_mib"), dirty - 0.5, "ebb_trim() returned %.1f MiB of %.1f MiB dirty",
                rss_field("trimmed_mib"), dirty);
  cr_expect_geq(rss_field("trim_drop_mib"), dirty * 0.9 - 1, "RSS fell by %.1f MiB at ebb_trim(), %.1f MiB was dirty",
                rss_field("trim_drop_mib"), dirty);
  cr_expect_leq(rss_field("rss_after_trim_mib"), 8, "%.1f MiB of the 200 MiB still resident after ebb_trim()",
                rss_field("rss_after_trim_mib"));
}

Test(rss, large_block_and_trim_default_settings) { rss_large(""); }

/* With a cap and decay that keep all 200 MiB dirty, one ebb_trim() returns it all. */
Test(rss, trim_returns_200mib_of_dirty_at_once) {
  rss_large("EBB_DIRTY_MAX=1G EBB_DECAY_MS=600000");
  cr_assert_geq(rss_field("dirty_before_mib"), 190, "only %.1f MiB dirty with EBB_DIRTY_MAX=1G",
                rss_field("dirty_before_mib"));
  cr_expect_geq(rss_field("trim_drop_mib"), 180, "RSS fell by %.1f MiB at ebb_trim()", rss_field("trim_drop_mib"));
}

/* ---------------------------------------------------------------- a big structure rebuilt */

/* 512 MiB of 64-1024 B blocks built, freed and built again (rss_probe's
 * rebuild mode), with a decay time long enough that only the cap decides.
 * The default cap (auto) keeps a teardown of any size for its rebuild; the
 * fixed 256M cap of ebb 0.2 purged the excess at the teardown, and every
 * rebuild faulted it back (~74000 faults here; glibc trims its heap top and
 * refaults all of it). Either way, a second thread that builds the same
 * afresh beside the dirty teardown must not take RSS beyond the peak + 256 MiB
 * (+ 16 MiB of slack: the batch, the pointer tables). */
static void rss_rebuild(const char *env) {
  rss_assert_exit0("rebuild", rss_probe(env, "rebuild"));
  double first = rss_field("first_faults"), peak = rss_field("peak_mib");
  cr_assert_geq(first, 100000, "the first build of 512 MiB faulted only %.0f times", first);
  cr_expect_leq(rss_field("cross_mib"), peak + RSS_DIRTY_MAX_MIB + 16,
                "RSS %.1f MiB with a fresh build beside a dirty teardown: over the peak %.1f MiB + 256 MiB "
                "(ebb: active %.1f, dirty %.1f MiB)",
                rss_field("cross_mib"), peak, rss_field("cross_active_mib"), rss_field("cross_dirty_mib"));
}

Test(rss, a_structure_bigger_than_256mib_is_rebuilt_without_faults) {
  rss_rebuild("EBB_DECAY_MS=60000");
  cr_expect_leq(rss_field("rebuild_faults"), 2000, "a rebuild faulted %.0f times (the first build %.0f)",
                rss_field("rebuild_faults"), rss_field("first_faults"));
  cr_expect_geq(rss_field("torn_dirty_mib"), 500, "only %.1f MiB of the 512 MiB teardown stayed dirty",
                rss_field("torn_dirty_mib"));
}

/* A fixed cap is a cap: the teardown beyond it goes back at once, and the
 * rebuild faults it in again. */
Test(rss, a_fixed_dirty_cap_returns_a_teardown_beyond_it) {
  rss_rebuild("EBB_DECAY_MS=60000 EBB_DIRTY_MAX=256M");
  cr_expect_leq(rss_field("torn_dirty_mib"), RSS_DIRTY_MAX_MIB, "%.1f MiB dirty over a 256M cap",
                rss_field("torn_dirty_mib"));
  cr_expect_geq(rss_field("rebuild_faults"), 40000, "a rebuild beyond the cap faulted only %.0f times",
                rss_field("rebuild_faults"));
}

/* ---------------------------------------------------------------- 5. fork */

/* EBB_BACKGROUND=1: the parent starts the background thread, then forks. fork
 * copies only the calling thread; ebb's atfork child handler starts the
 * background thread again in the child, which allocates and frees 100 MiB and
 * then does nothing: its dirty memory must still be purged within the decay
 * time + 1 s, and it exits 0. The parent keeps its blocks and its background
 * thread. */
Test(rss, fork_with_background_thread) {
  int st = rss_probe("EBB_BACKGROUND=1", "fork");
  cr_assert_geq(rss_field("parent_threads_before_fork"), 2, "the background thread never started in the parent");
  cr_assert_leq(rss_field("child_threads_at_fork"), 2, "the child had %.0f threads at fork",
                rss_field("child_threads_at_fork"));
  double dirty = rss_field("child_dirty_after_free_mib");
  cr_assert_gt(dirty + rss_field("child_purged_by_free_mib"), 90, "the child freed only %.1f MiB",
               dirty + rss_field("child_purged_by_free_mib"));
  cr_expect_geq(rss_field("child_threads"), 2, "no background thread in the child after its frees");
  cr_expect_geq(rss_field("child_ms"), 0, "child: %.0f KiB still dirty 1500 ms after its frees (%.1f MiB right after)",
                rss_field("child_dirty_end_kib"), dirty);
  cr_expect_leq(rss_field("child_dirty_end_kib") / 1024, RSS_DIRTY_MAX_MIB);
  cr_expect_geq(rss_field("child_purged_idle_mib"), dirty - 1,
                "child: only %.1f MiB purged while idle, %.1f MiB was dirty", rss_field("child_purged_idle_mib"),
                dirty);
  cr_expect_eq(rss_field("child_status"), 0, "the child exited with %.0f (signal %.0f)", rss_field("child_status"),
               rss_field("child_signal"));
  cr_expect_eq(rss_field("parent_intact"), 1, "the parent's blocks changed across the fork");
  cr_expect_geq(rss_field("parent_threads"), 2, "the parent lost its background thread");
  cr_expect_geq(rss_field("parent_ms"), 0, "parent: %.0f KiB still dirty 1500 ms after its frees",
                rss_field("parent_dirty_end_kib"));
  rss_assert_exit0("fork", st);
}

/* ---------------------------------------------------------------- an idle owner */

/* 64 MiB allocated by a thread that then blocks, alive, and freed by main,
 * which then makes no allocator call either: with the default settings the
 * background thread takes the owner's pages back once it has been idle for the
 * decay time, and RSS falls to within 8 MiB of where it started. Before, only
 * the owner collected its pages' remote frees, and the 64 MiB stayed for as
 * long as it lived. */
Test(rss, an_idle_threads_memory_freed_by_another_goes_back) {
  rss_assert_exit0("idle_owner", rss_probe("", "idle_owner"));
  cr_assert_geq(rss_field("built_mib"), 60, "the build raised RSS by only %.1f MiB", rss_field("built_mib"));
  cr_expect_geq(rss_field("reached_ms"), 0,
                "RSS is still %.1f MiB above the start 1500 ms after every block was freed (allocated %.1f MiB, "
                "active %.1f MiB)",
                rss_field("final_mib"), rss_field("allocated_mib"), rss_field("active_mib"));
}

/* 64 MiB allocated by a thread that frees all but one block in 512 itself and
 * then blocks, alive, while no thread makes an allocator call: with the
 * default settings the background thread takes the free memory of the
 * owner's pages back once it has been idle for the decay time (after a
 * fence with its free path), and RSS falls to within 12 MiB of the start.
 * Before, only the owner touched those pages' free lists, and about half of
 * the 64 MiB stayed for as long as it lived. */
Test(rss, a_thread_that_freed_its_own_memory_and_blocks_gives_it_back) {
  rss_assert_exit0("idle_self", rss_probe("", "idle_self"));
  cr_assert_geq(rss_field("freed_mib"), 12, "RSS was only %.1f MiB above the start after the frees",
                rss_field("freed_mib"));
  cr_expect_geq(rss_field("reached_ms"), 0, "RSS is still %.1f MiB above the start 1500 ms after the owner's frees",
                rss_field("final_mib"));
}

/* 64 MiB of 256-byte blocks built by a thread that frees every other one
 * itself and blocks, alive; main frees the rest only after the background
 * thread has gone over the idle thread's pages once, and then makes no
 * allocator call: RSS must still fall to within 8 MiB of the start (2.5 s: only
 * the background thread can do it). Before, a taker went over an idle
 * thread's pages once per idle spell, and what others freed into them later
 * stayed for as long as the thread lived (an independent probe: 124 of 165
 * MiB). */
Test(rss, memory_freed_to_an_idle_thread_after_its_pages_were_gone_over_goes_back) {
  rss_assert_exit0("idle_late", rss_probe("", "idle_late"));
  cr_assert_geq(rss_field("half_mib"), 30, "RSS was only %.1f MiB above the start with half the blocks live",
                rss_field("half_mib"));
  cr_expect_geq(rss_field("reached_ms"), 0,
                "RSS is still %.1f MiB above the start %.0f ms after every block was freed (%.1f MiB before main's "
                "frees; allocated %.1f MiB, active %.1f MiB)",
                rss_field("final_mib"), rss_field("deadline_ms"), rss_field("waited_mib"),
                rss_field("allocated_mib"), rss_field("active_mib"));
}

/* Two threads take turns at 32 MiB of 16-1016 B blocks, built and freed,
 * each idle 400 ms between its own turns (EBB_DECAY_MS=1000: past the quarter
 * of it after which another thread may take an idle thread's memory, short of
 * the decay time). A turn after the first must find the memory the turn
 * before it freed, in the other thread's arena, still resident: at most a
 * quarter of its pages fault in. Before, each idle thread kept an empty
 * current page and a cached block's page a class, which pinned nearly every
 * chunk it had, so the next thread faulted its build in afresh (5622 of 8192
 * pages; bench/turns idle100, 4 threads: 7788 faults a job, now 0-300). */
Test(rss, threads_taking_turns_reuse_each_others_memory) {
  rss_assert_exit0("turns", rss_probe("EBB_DECAY_MS=1000", "turns"));
  double pages = rss_field("pages"), later = rss_field("later_faults");
  cr_assert_geq(rss_field("first_faults"), pages / 2, "the first turn faulted only %.0f of %.0f pages",
                rss_field("first_faults"), pages);
  cr_expect_leq(later, pages / 4, "a later turn faulted %.0f of its %.0f pages in", later, pages);
}

/* 8 threads wake every 100 ms (between a quarter of the default decay time
 * and all of it) to make and free 50 blocks of 16-1024 B: each keeps its
 * current pages between wakes, and a wake faults next to nothing in (0.6 a
 * wake here, from the stack and the clock). A first version of the lending
 * above took them at every pass that found the thread's clock old, which
 * moves only every 64 slow-path events: 3.7-4.3 faults a wake, and with
 * 100 threads 74 % more faults and 53 % more RSS (found by a probe). */
Test(rss, periodic_threads_keep_their_pages_between_wakes) {
  rss_assert_exit0("periodic", rss_probe("", "periodic"));
  cr_expect_leq(rss_field("faults_per_wake"), 2.0, "%.2f faults a wake", rss_field("faults_per_wake"));
}

/* ---------------------------------------------------------------- small programs */

/* A thread's first block aligned beyond a unit costs what the block does,
 * not its arena's whole span index: 64 threads, each holding a small block,
 * then 64 more (in the first ones' arenas) that each also allocated and freed
 * a 128 KiB-aligned block, grew RSS by 46 and 11 KiB a thread; a first
 * version of the aligned search, which wrote a word in each of the index's
 * 64 groups on a thread's first aligned block, 46 and 107 (2026-12-07). */
Test(rss, a_threads_first_aligned_block_leaves_its_span_index_untouched) {
  rss_assert_exit0("aligned_threads", rss_probe("", "aligned_threads"));
  double aligned = rss_field("aligned_kib");
  cr_log_info("aligned_threads: %.0f KiB a thread", aligned);
  cr_assert_lt(aligned, 60, "a thread's first aligned block added %.0f KiB of RSS", aligned);
}

/* Most programs are small: ebb must not add much to them. The same 1000
 * blocks cost the process at most 128 KiB more anonymous memory on ebb than on
 * glibc (0.2.0 added 205 KiB: a registry root written by 4096 relocations, and
 * 30 KiB of remote-cache descriptors written in every arena). Anonymous memory
 * is compared because it repeats to the page; the whole RSS, logged, also
 * counts shared library pages, which vary with the kernel's fault-around. */
Test(rss, small_program_footprint) {
  rss_assert_exit0("small", rss_probe("", "small"));
  double anon_ebb = rss_field("anon_kib"), rss_ebb = rss_field("rss_kib");
  int st = run_cmd(&rss_out, "env -i '%s/%s' small", tmp_dir(), RSS_PROBE);
  rss_assert_exit0("small on glibc", st);
  double anon_glibc = rss_field("anon_kib"), rss_glibc = rss_field("rss_kib");
  cr_log_info("small program: anonymous %.0f KiB on ebb, %.0f on glibc; RSS %.0f vs %.0f KiB", anon_ebb,
              anon_glibc, rss_ebb, rss_glibc);
  cr_assert_geq(anon_glibc, 0, "no Anonymous: line in /proc/self/smaps_rollup");
  cr_expect_leq(anon_ebb - anon_glibc, 128, "ebb adds %.0f KiB of anonymous memory to a small program (%.0f vs %.0f KiB)",
                anon_ebb - anon_glibc, anon_ebb, anon_glibc);
}

/* ---------------------------------------------------------------- calloc */

/* calloc of fresh memory leaves the kernel's zero pages untouched (before,
 * ebb cleared every byte: calloc(1 MiB) made 1 MiB resident), and every
 * block reads as zeroes however its memory was last used: fresh, freed and
 * still resident, or returned with ebb_trim (EBB_PURGE=free: MADV_FREE may
 * keep the old bytes, so those blocks must be cleared). */
static void rss_calloc(const char *env) {
  rss_assert_exit0("calloc", rss_probe(env, "calloc"));
  cr_expect_eq(rss_field("bad_fresh"), 0, "nonzero bytes in fresh calloc blocks");
  cr_expect_eq(rss_field("bad_resident"), 0, "nonzero bytes in calloc blocks reusing freed, resident memory");
  cr_expect_eq(rss_field("bad_trimmed"), 0, "nonzero bytes in calloc blocks reusing memory ebb_trim returned");
  cr_expect_gt(rss_field("trimmed_kib"), 0, "ebb_trim returned nothing: the last round reused resident memory");
  double req = rss_field("requested_kib"), grown = rss_field("grown_kib");
  cr_expect_leq(grown, req / 8, "calloc of %.0f KiB of fresh 256 KiB-1.9 MiB blocks made %.0f KiB resident", req,
                grown);
}

Test(rss, calloc_of_fresh_memory_touches_nothing_and_always_reads_zero) { rss_calloc(""); }

Test(rss, calloc_reads_zero_after_madv_free) { rss_calloc("EBB_PURGE=free"); }

/* In a process that locked its memory (mlockall) the kernel refuses every
 * purge and the old bytes stay: calloc must clear them (found by a probe: 56
 * of 64 calloc blocks held the program's old bytes after ebb_trim). */
Test(rss, calloc_reads_zero_when_the_kernel_refuses_to_purge) {
  rss_assert_exit0("calloc locked", rss_probe("EBB_DECAY_MS=0", "calloc locked"));
  if (rss_field("locked") == 0) cr_skip_test("mlockall refused (no CAP_IPC_LOCK, low RLIMIT_MEMLOCK)");
  cr_expect_eq(rss_field("bad_fresh"), 0, "nonzero bytes in fresh calloc blocks");
  cr_expect_eq(rss_field("bad_resident"), 0, "nonzero bytes in calloc blocks reusing freed, resident memory");
  cr_expect_eq(rss_field("bad_trimmed"), 0, "nonzero bytes in calloc blocks reusing memory whose purge was refused");
}
