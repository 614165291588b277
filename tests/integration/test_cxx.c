/* test_cxx.c — C++ operator new and delete in all their forms, in a program
 * built with the C++ compiler at run time (tests/programs/cxx_new.cpp, not
 * linked with ebb) and run with LD_PRELOAD=build/libebb.so. The program checks
 * each pointer with ebb_owns (found with dlsym) and prints OK. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(cxx, .timeout = 120);

static struct cmd_result r; /* large: not on the stack */

static void build_cxx_new(void) {
  int st = compile_program(&r, NULL, "cxx_new.cpp", "cxx_new", "-std=c++17 -O1 -Wall -Wextra", "-ldl");
  cr_assert_eq(st, 0, "compiling tests/programs/cxx_new.cpp: %s\n%s%s", describe_status(st), r.out, r.err);
}

Test(cxx, all_new_delete_forms_are_ebbs) {
  build_cxx_new();
  int st = run_cmd(&r, "LD_PRELOAD='%s/build/libebb.so' '%s/cxx_new'", repo_root(), tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cxx_new under LD_PRELOAD %s; stdout:\n%s\nstderr:\n%s",
            describe_status(st), r.out, r.err);
  cr_assert(strncmp(r.out, "OK", 2) == 0, "cxx_new printed:\n%s", r.out);
}

/* The program notices when ebb is not loaded: the check above means something. */
Test(cxx, program_detects_missing_ebb) {
  build_cxx_new();
  int st = run_cmd(&r, "env -u LD_PRELOAD '%s/cxx_new'", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "cxx_new without ebb %s; stdout:\n%s", describe_status(st),
            r.out);
}

/* EBB_STATS=1 prints the summary at exit of a preloaded C++ program (and only then). */
Test(cxx, stats_summary_at_exit) {
  build_cxx_new();
  int st = run_cmd(&r, "EBB_STATS=1 LD_PRELOAD='%s/build/libebb.so' '%s/cxx_new'", repo_root(), tmp_dir());
  cr_assert_eq(st, 0, "%s\n%s%s", describe_status(st), r.out, r.err);
  cr_assert(strstr(r.err, "ebb stats: mapped="), "EBB_STATS=1 printed no summary on stderr:\n%s", r.err);
  cr_assert(strstr(r.err, "arenas="), "summary lacks arenas=:\n%s", r.err);
  st = run_cmd(&r, "env -u EBB_STATS LD_PRELOAD='%s/build/libebb.so' '%s/cxx_new'", repo_root(), tmp_dir());
  cr_assert_eq(st, 0);
  cr_assert_null(strstr(r.err, "ebb stats"), "summary printed without EBB_STATS:\n%s", r.err);
}

/* A C program that dlopens C++ code: libstdc++ was not there when ebb's weak
 * references were bound, yet a failed new runs the new_handler and throws
 * std::bad_alloc (tests/programs/cxx_plugin.cpp; it aborted, found by a probe). */
Test(cxx, new_in_a_dlopened_library_throws_bad_alloc) {
  int st = run_cmd(&r, "c++ -shared -fPIC -O1 tests/programs/cxx_plugin.cpp -o '%s/libcxx_plugin.so.%d' && mv -f "
                   "'%s/libcxx_plugin.so.%d' '%s/libcxx_plugin.so'",
                   tmp_dir(), (int)getpid(), tmp_dir(), (int)getpid(), tmp_dir());
  cr_assert_eq(st, 0, "compiling cxx_plugin.cpp: %s\n%s%s", describe_status(st), r.out, r.err);
  st = compile_program(&r, NULL, "cxx_host.c", "cxx_host", "-O1 -Wall -Wextra", "-ldl");
  cr_assert_eq(st, 0, "compiling cxx_host.c: %s\n%s%s", describe_status(st), r.out, r.err);
  st = run_cmd(&r, "env -u CXX_PLUGIN_SMALL '%s/cxx_host' '%s'", tmp_dir(), tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "without ebb: %s\n%s%s", describe_status(st), r.out, r.err);
  st = run_cmd(&r, "env -u CXX_PLUGIN_SMALL LD_PRELOAD='%s/build/libebb.so' '%s/cxx_host' '%s'", repo_root(),
               tmp_dir(), tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "under ebb: %s\nstdout: %s\nstderr: %s", describe_status(st),
            r.out, r.err);
}
