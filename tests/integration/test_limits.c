/* test_limits.c — ebb when the kernel refuses memory: under an address-space
 * limit, what a program freed and ebb still holds (the large-block cache, an
 * exited thread's arena) is taken back before a malloc fails with ENOMEM. Each
 * scenario runs tests/programs/as_limit.c, compiled here at run time, in a fresh
 * process with `env -i EBB_BACKGROUND=0 LD_PRELOAD=build/libebb.so`: no
 * background thread returns the memory behind the test's back. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(limits, .timeout = 60);

static struct cmd_result lim_out; /* large: not on the stack */

static void as_limit(const char *mode) {
  int st = compile_program(&lim_out, NULL, "as_limit.c", "as_limit",
                           "-O1 -Wall -Wextra -Werror -fno-builtin -pthread -Iinclude", "-ldl -pthread");
  cr_assert_eq(st, 0, "compiling as_limit.c: %s\n%s%s", describe_status(st), lim_out.out, lim_out.err);
  st = run_cmd(&lim_out, "env -i EBB_BACKGROUND=0 LD_PRELOAD='%s/build/libebb.so' '%s/as_limit' %s",
               repo_root(), tmp_dir(), mode);
  cr_log_info("as_limit %s: %s", mode, lim_out.out);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 2, "as_limit %s could not set up: %s\nstdout: %s\nstderr: %s",
            mode, describe_status(st), lim_out.out, lim_out.err);
  cr_assert(WEXITSTATUS(st) == 0, "as_limit %s: an allocation failed with freed memory in ebb's hands\n%s%s",
            mode, lim_out.out, lim_out.err);
}

/* 8 MiB blocks fill the address space and are freed into the large-block
 * cache; 20000 mallocs of 1000 B must then all succeed (they failed after
 * 3968, with 248 MiB cached). */
Test(limits, the_large_block_cache_gives_way_to_small_blocks) { as_limit("large"); }

/* A thread fills the address space with 1000 B blocks, frees them and exits:
 * its arena's chunks must serve the main thread and a new first-class arena
 * (which failed after 3776 and at once). */
Test(limits, an_exited_threads_arena_gives_way) { as_limit("thread"); }

/* A thread's first chunk fits in 4.5 MiB of the limit and a 16 MiB block in
 * 17 MiB: aligned mappings are tried at their exact size first (they needed
 * 8 and 20 MiB, found by a probe). */
Test(limits, aligned_mappings_need_no_more_than_their_size) { as_limit("exact"); }

/* A large block grows in place under a limit that leaves room for the
 * growth once the large-block cache has given its block back (the growth
 * failed with ENOMEM and succeeded when called again; as_limit.c says how). */
Test(limits, a_large_realloc_gets_the_cache_back_before_failing) { as_limit("realloc"); }

/* A first-class arena whose blocks were freed with plain free() serves its
 * next mallocs from their pages when the kernel refuses more (ENOMEM at once
 * before; found by a probe). */
Test(limits, an_arenas_freed_blocks_serve_it_under_a_limit) { as_limit("arena_freed"); }

/* At vm.max_map_count, munmap of the middle of a mapping fails: a freed large
 * block's pages must go back all the same (they stayed resident for the
 * process's life; tests/programs/map_limit.c). */
Test(limits, a_large_block_freed_at_the_map_count_goes_back) {
  int st = compile_program(&lim_out, NULL, "map_limit.c", "map_limit", "-O1 -Wall -Wextra -Werror -fno-builtin",
                           "-ldl");
  cr_assert_eq(st, 0, "compiling map_limit.c: %s\n%s%s", describe_status(st), lim_out.out, lim_out.err);
  st = run_cmd(&lim_out, "env -i EBB_BACKGROUND=0 LD_PRELOAD='%s/build/libebb.so' '%s/map_limit'", repo_root(),
               tmp_dir());
  cr_log_info("map_limit: %s", lim_out.out);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 2, "map_limit could not set up: %s\nstdout: %s\nstderr: %s",
            describe_status(st), lim_out.out, lim_out.err);
  cr_assert(WEXITSTATUS(st) == 0, "the freed block stayed resident: %s%s", lim_out.out, lim_out.err);
}

/* Under the kernel's default overcommit heuristic (vm.overcommit_memory=0) a
 * request larger than RAM and swap together is refused, as glibc's is: NULL
 * and ENOMEM, where ebb mapped 64 TiB with MAP_NORESERVE and returned a block
 * the program could never use (found by a probe). (A small block at a huge
 * alignment may well succeed: ebb maps it at an aligned address the kernel
 * has free, not over-mapping by the alignment as glibc does.) Skipped where the machine
 * overcommits without a check (1) or has that much memory. */
Test(limits, a_request_beyond_ram_and_swap_fails_as_glibcs) {
  FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (f) {
    if (fscanf(f, "%d", &mode) != 1) mode = -1;
    fclose(f);
  }
  if (mode == 1) cr_skip_test("vm.overcommit_memory=1: the kernel refuses no mapping");
  size_t ram_swap = 0;
  f = fopen("/proc/meminfo", "r");
  cr_assert(f, "no /proc/meminfo");
  char line[256];
  unsigned long kb;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %lu kB", &kb) == 1 || sscanf(line, "SwapTotal: %lu kB", &kb) == 1)
      ram_swap += (size_t)kb << 10;
  fclose(f);
  size_t size = (size_t)1 << 46; /* 64 TiB */
  if (ram_swap >= size / 2) cr_skip_test("this machine has %zu bytes of RAM and swap", ram_swap);
  errno = 0;
  void *p = ebb_malloc(size);
  int e = errno;
  ebb_free(p);
  cr_expect_null(p, "ebb_malloc(64 TiB) returned a block with %zu bytes of RAM and swap", ram_swap);
  cr_expect_eq(e, ENOMEM, "errno %d, expected ENOMEM", e);
}

/* ebb's background thread starts under an address-space limit that leaves
 * less room than its default stack: with 1 MiB then (it silently never
 * started, found by a probe). as_limit bgstack says how. */
Test(limits, the_background_thread_starts_with_little_address_space_left) {
  int st = compile_program(&lim_out, NULL, "as_limit.c", "as_limit",
                           "-O1 -Wall -Wextra -Werror -fno-builtin -pthread -Iinclude", "-ldl -pthread");
  cr_assert_eq(st, 0, "compiling as_limit.c: %s\n%s%s", describe_status(st), lim_out.out, lim_out.err);
  st = run_cmd(&lim_out, "env -i EBB_BACKGROUND=auto LD_PRELOAD='%s/build/libebb.so' '%s/as_limit' bgstack",
               repo_root(), tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 2, "as_limit bgstack could not set up: %s\n%s%s",
            describe_status(st), lim_out.out, lim_out.err);
  cr_assert(WEXITSTATUS(st) == 0, "no background thread (2 threads after the join with it): %s%s", lim_out.out,
            lim_out.err);
}
