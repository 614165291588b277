/* test_symbols.c — what build/libebb.a exports: only ebb_* and the standard
 * malloc names (docs/api.md), so a program statically linked with it can use
 * any other name for itself (CONVENTIONS.md, habit 14). The archive's symbol
 * table is read with nm; tests/programs/clash.c, which defines some of ebb's
 * internal names itself, must link with the archive and run on ebb. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(symbols, .timeout = 120);

static struct cmd_result r; /* large: not on the stack */

#define PUBLIC                                                                                               \
  "^(ebb_[a-z_0-9]+|malloc|free|cfree|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|"    \
  "valloc|pvalloc|malloc_usable_size|free_sized|free_aligned_sized|"                                         \
  "__libc_(malloc|free|calloc|realloc|memalign|valloc|pvalloc)|__posix_memalign|malloc_trim|malloc_stats|"   \
  "mallinfo|mallinfo2|malloc_info|mallopt|_Zn[wa].*|_Zd[la].*)$"

/* Every global symbol defined in build/libebb.a is a public name: the archive
 * defines no pthread_create (libebb.so's is ebb_pthread_create, which a static
 * program links in by that name). */
Test(symbols, archive_exports_only_public_names) {
  int st = run_cmd(&r, "nm -g --defined-only build/libebb.a");
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nm -g --defined-only build/libebb.a %s:\n%s",
            describe_status(st), r.err);
  regex_t re;
  cr_assert_eq(regcomp(&re, PUBLIC, REG_EXTENDED | REG_NOSUB), 0);
  static char bad[65536];
  size_t bad_len = 0;
  int bad_count = 0, total = 0;
  for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
    /* "<value> <type> <name>"; the archive also lists "ebb.o:" headers */
    char *name = strrchr(line, ' ');
    if (!name || line[strlen(line) - 1] == ':') continue;
    name++;
    total++;
    if (regexec(&re, name, 0, NULL, 0) == 0) continue;
    bad_count++;
    bad_len += (size_t)snprintf(bad + bad_len, sizeof bad - bad_len, " %s", name);
    if (bad_len >= sizeof bad) bad_len = sizeof bad - 1;
  }
  regfree(&re);
  cr_assert_gt(total, 0, "nm listed no symbols in build/libebb.a");
  cr_assert_eq(bad_count, 0, "build/libebb.a exports %d non-public names (of %d):%s", bad_count, total, bad);
}

/* A program with its own opt, page_init, spin_lock, chunk_new, arena_tls, os_map
 * and pthread_create links with the archive and runs on ebb. */
Test(symbols, program_defining_internal_names_links) {
  int st = compile_program(&r, NULL, "clash.c", "clash", "-O1 -Wall", "build/libebb.a -pthread");
  cr_assert_eq(st, 0, "cc tests/programs/clash.c build/libebb.a -pthread %s:\n%s%s", describe_status(st),
               r.out, r.err);
  st = run_cmd(&r, "'%s/clash'", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clash %s; stdout:\n%s\nstderr:\n%s", describe_status(st),
            r.out, r.err);
  cr_assert(strncmp(r.out, "OK", 2) == 0, "clash printed:\n%s", r.out);
}
