/* test_static.c — static linking with build/libebb.a: C and C++ programs from
 * tests/programs are compiled here at run time into build/tests/tmp, linked with
 * the archive (dynamic libc, then fully -static), run, and must show that ebb
 * served malloc and operator new (each program checks ebb_owns and ebb_stats
 * itself and prints OK). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(static_link, .timeout = 120);

#define ARCHIVE "build/libebb.a -pthread"

static struct cmd_result r; /* large: not on the stack */

/* 1 if the ELF file asks for a program interpreter (is dynamically linked). */
static int has_interp(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  Elf64_Ehdr eh;
  int interp = -1;
  if (fread(&eh, sizeof eh, 1, f) == 1) {
    interp = 0;
    for (int i = 0; i < eh.e_phnum; i++) {
      Elf64_Phdr ph;
      if (fseek(f, (long)(eh.e_phoff + (Elf64_Off)i * eh.e_phentsize), SEEK_SET) ||
          fread(&ph, sizeof ph, 1, f) != 1)
        break;
      if (ph.p_type == PT_INTERP) interp = 1;
    }
  }
  fclose(f);
  cr_assert_neq(interp, -1, "%s is not an ELF file", path);
  return interp;
}

static void build(const char *src, const char *out, const char *before) {
  /* compile_program puts the flags before the source and the archive after it. */
  int st = compile_program(&r, NULL, src, out, before, ARCHIVE);
  cr_assert_eq(st, 0, "compiling %s %s: %s\n%s%s", src, before, describe_status(st), r.out, r.err);
}

static void run_ok(const char *out) {
  int st = run_cmd(&r, "'%s/%s'", tmp_dir(), out);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s; stdout:\n%s\nstderr:\n%s", out, describe_status(st),
            r.out, r.err);
  cr_assert(strncmp(r.out, "OK", 2) == 0, "%s printed:\n%s", out, r.out);
}

/* glibc's own allocator must not be in a fully static binary next to ebb. */
static void no_glibc_malloc(const char *out) {
  int st = run_cmd(&r, "nm '%s/%s' | grep -E ' (_int_malloc|main_arena|tcache_init)$' || true", tmp_dir(), out);
  cr_assert_eq(st, 0);
  cr_assert_eq(r.out[0], 0, "%s contains glibc's malloc:\n%s", out, r.out);
}

static char path[4096];
static const char *tmp_path(const char *out) {
  snprintf(path, sizeof path, "%s/%s", tmp_dir(), out);
  return path;
}

/* cc prog.c build/libebb.a -pthread: libc stays dynamic, malloc is ebb's. */
Test(static_link, c_program_with_archive) {
  build("static_c.c", "static_c", "-O1 -Wall");
  cr_assert_eq(has_interp(tmp_path("static_c")), 1);
  run_ok("static_c");
}

Test(static_link, cxx_program_with_archive) {
  build("static_cxx.cpp", "static_cxx", "-O1 -Wall -std=c++17");
  run_ok("static_cxx");
}

/* gcc -static prog.c build/libebb.a -pthread: works with glibc 2.36, because
 * ebb defines every name libc.a's malloc.o would otherwise be pulled in for,
 * and nothing else of libc's: the archive has no pthread_create, so no flag is
 * needed to pull in libc.a's. */
#define FULL_STATIC "-static "
Test(static_link, c_program_fully_static) {
  build("static_c.c", "static_c_full", FULL_STATIC "-O1 -Wall");
  cr_assert_eq(has_interp(tmp_path("static_c_full")), 0, "-static produced a dynamic executable");
  no_glibc_malloc("static_c_full");
  run_ok("static_c_full");
}

Test(static_link, cxx_program_fully_static) {
  build("static_cxx.cpp", "static_cxx_full", FULL_STATIC "-O1 -Wall -std=c++17");
  cr_assert_eq(has_interp(tmp_path("static_cxx_full")), 0, "-static produced a dynamic executable");
  no_glibc_malloc("static_cxx_full");
  run_ok("static_cxx_full");
}

/* No standard container, so no std::__throw_bad_alloc in the link: the
 * program's own `throw std::bad_alloc()` is what ebb throws with. */
Test(static_link, cxx_program_fully_static_without_containers_catches_bad_alloc) {
  build("static_cxx_bare.cpp", "static_cxx_bare", FULL_STATIC "-O1 -Wall -std=c++17");
  cr_assert_eq(has_interp(tmp_path("static_cxx_bare")), 0, "-static produced a dynamic executable");
  run_ok("static_cxx_bare");
}

/* A set-user-ID program reads no EBB_* variable (AT_SECURE), as glibc ignores
 * its MALLOC_* settings there: an unprivileged caller must not change its
 * decay or have its stats written (found by a probe). Needs root, to make the
 * program set-user-ID to nobody; the same binary without the bit prints
 * ebb's settings, so the variable does reach a program. */
Test(static_link, a_set_user_id_program_ignores_ebb_settings) {
  if (geteuid() != 0) cr_skip_test("needs root to make a set-user-ID program");
  build("suid_env.c", "suid_env", "-O1 -Wall");
  int st = run_cmd(&r, "EBB_VERBOSE=1 EBB_DECAY_MS=7 '%s/suid_env'", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "suid_env: %s\n%s%s", describe_status(st), r.out, r.err);
  cr_assert(strstr(r.err, "EBB_DECAY_MS=7"), "without the set-user-ID bit, EBB_VERBOSE shows the settings:\n%s", r.err);
  st = run_cmd(&r, "cd '%s' && cp suid_env suid_env_s && chown nobody suid_env_s && chmod 4755 suid_env_s", tmp_dir());
  cr_assert_eq(st, 0, "making suid_env set-user-ID: %s", r.err);
  st = run_cmd(&r, "EBB_VERBOSE=1 EBB_DECAY_MS=7 EBB_STATS=1 '%s/suid_env_s'", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "suid_env_s: %s\n%s%s", describe_status(st), r.out, r.err);
  if (strstr(r.out, "euid=0")) cr_skip_test("the file system ignores the set-user-ID bit (nosuid)");
  cr_assert(strstr(r.err, "ebb") == NULL, "a set-user-ID program took EBB_* settings:\n%s", r.err);
}

/* The archive interposes on nothing of libc's: its pthread_create hook (which
 * starts the background thread under EBB_BACKGROUND=auto), ebb_pthread_create,
 * runs for every pthread_create only when the link makes pthread_create that
 * function, with HOOK_FLAGS (docs/api.md). Without them libc's runs alone and
 * no background thread starts (EBB_BACKGROUND=1 still starts one at start-up). */
#define HOOK_FLAGS "-Wl,--defsym=pthread_create=ebb_pthread_create -Wl,-u,ebb_pthread_create"
Test(static_link, background_thread_needs_the_hook_flags) {
  build("static_wrap.c", "static_hook", "-O1 -Wall " HOOK_FLAGS);
  int st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_hook' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "with the hook flags: %s\n%s%s", describe_status(st), r.out,
            r.err);
  build("static_wrap.c", "static_nowrap", "-O1 -Wall");
  st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_nowrap' 2", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "without them: %s\n%s%s", describe_status(st), r.out, r.err);
  st = run_cmd(&r, "EBB_BACKGROUND=1 '%s/static_nowrap' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "EBB_BACKGROUND=1 without them: %s\n%s%s", describe_status(st),
            r.out, r.err);
}

/* The flags the docs gave before, which still work for the program's own
 * calls (--wrap rewrites only the objects linked into the executable). */
Test(static_link, background_thread_with_the_wrap_flags) {
  build("static_wrap.c", "static_wrap",
        "-O1 -Wall -Wl,--wrap=pthread_create -Wl,--defsym=__wrap_pthread_create=ebb_pthread_create");
  int st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_wrap' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "with --wrap: %s\n%s%s", describe_status(st), r.out, r.err);
}

/* std::thread's pthread_create call is libstdc++.so's, which --wrap never
 * rewrites: a C++ program linked with the --wrap flags got no background
 * thread, and a worker's freed 200 MB stayed resident (found by a probe). With
 * HOOK_FLAGS the executable defines pthread_create (exported, since
 * libstdc++.so refers to it) and every shared library's call binds to it. */
Test(static_link, std_thread_gets_the_background_thread_with_the_hook_flags) {
  build("static_std_thread.cpp", "static_std_thread", "-O1 -Wall -std=c++17 " HOOK_FLAGS);
  int st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_std_thread' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "std::thread with the hook flags: %s\n%s%s",
            describe_status(st), r.out, r.err);
}

/* A thread that the program's own constructor of priority 101 starts may
 * come before ebb's constructor (the same priority), and so before its hook
 * was in place: ebb's constructor starts the background thread when the
 * process has a second thread already (found by a probe). The worker frees
 * 100 MiB and blocks for good. */
Test(static_link, a_thread_from_a_constructor_before_ebbs_gets_the_background_thread) {
  build("ctor_thread.c", "static_ctor_thread", "-O1 -Wall -DCTOR_HERE " HOOK_FLAGS);
  int st = run_cmd(&r, "env -u EBB_BACKGROUND timeout -s KILL 20 '%s/static_ctor_thread'", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "static_ctor_thread: %s\n%s%s", describe_status(st), r.out,
            r.err);
  expect_ctor_thread_got_the_background_thread(r.out);
}

/* Fully static with HOOK_FLAGS: also -Wl,-u,__pthread_create_2_1 (below). */
Test(static_link, fully_static_with_the_hook_flags) {
  build("static_wrap.c", "static_hook_full", FULL_STATIC "-O1 -Wall " HOOK_FLAGS " -Wl,-u,__pthread_create_2_1");
  cr_assert_eq(has_interp(tmp_path("static_hook_full")), 0, "-static produced a dynamic executable");
  int st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_hook_full' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "-static, the hook flags and -u: %s\n%s%s", describe_status(st),
            r.out, r.err);
  build("static_std_thread.cpp", "static_std_thread_full",
        FULL_STATIC "-O1 -Wall -std=c++17 " HOOK_FLAGS " -Wl,-u,__pthread_create_2_1");
  st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_std_thread_full' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "-static std::thread: %s\n%s%s", describe_status(st), r.out,
            r.err);
}

/* Fully static with --wrap: the program's own pthread_create calls are
 * ebb's, so nothing pulls libc.a's pthread_create in unless the link asks with
 * -Wl,-u,__pthread_create_2_1 (docs/api.md). With it, threads and the
 * background thread start; without it, pthread_create fails and ebb's message
 * names the flag (found by a probe: the docs gave the flag only for programs
 * that create no thread). */
#define WRAP_FLAGS "-Wl,--wrap=pthread_create -Wl,--defsym=__wrap_pthread_create=ebb_pthread_create"
Test(static_link, fully_static_with_the_wrap_flag) {
  build("static_wrap.c", "static_wrap_full", FULL_STATIC "-O1 -Wall " WRAP_FLAGS " -Wl,-u,__pthread_create_2_1");
  cr_assert_eq(has_interp(tmp_path("static_wrap_full")), 0, "-static produced a dynamic executable");
  int st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_wrap_full' 3", tmp_dir());
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "-static, --wrap and -u: %s\n%s%s", describe_status(st), r.out,
            r.err);
  build("static_wrap.c", "static_wrap_full_no_u", FULL_STATIC "-O1 -Wall " WRAP_FLAGS);
  st = run_cmd(&r, "env -u EBB_BACKGROUND '%s/static_wrap_full_no_u' 3", tmp_dir());
  cr_assert(strstr(r.err, "ebb: pthread_create(): ") && strstr(r.err, "-Wl,-u,__pthread_create_2_1"),
            "-static and --wrap without -u: no message naming the flag (%s)\n%s%s", describe_status(st), r.out,
            r.err);
}

/* ebb's exit key past the first 32 keys: each thread's first setspecific of
 * it allocates glibc's second-level block, and nothing of it may stay behind. */
Test(static_link, threads_leave_nothing_when_ebbs_key_is_past_the_first_32) {
  build("static_late_key.c", "static_late_key",
        "-O1 -Wall -Wno-prio-ctor-dtor " HOOK_FLAGS);
  run_ok("static_late_key");
}

/* The documented limitation: a fully static program that also calls a glibc
 * malloc function ebb lacks (mallinfo here) pulls libc.a's malloc.o in, and the
 * link fails with "multiple definition of `malloc'". If ebb ever defines
 * mallinfo, the program must instead link and run on ebb (update the docs). */
Test(static_link, fully_static_with_mallinfo) {
  int st = compile_program(&r, NULL, "static_mallinfo.c", "static_mallinfo", FULL_STATIC "-O1", ARCHIVE);
  if (st != 0) {
    cr_assert(strstr(r.err, "multiple definition of `malloc'") && strstr(r.err, "libc.a(malloc.o)"),
              "the link failed, but not with the documented clash:\n%s", r.err);
    return;
  }
  no_glibc_malloc("static_mallinfo");
  st = run_cmd(&r, "'%s/static_mallinfo'", tmp_dir());
  cr_assert_eq(st, 0, "static_mallinfo %s:\n%s%s", describe_status(st), r.out, r.err);
}

/* The same with libc dynamic: mallinfo comes from libc.so (and knows nothing
 * of ebb), malloc from the archive. */
Test(static_link, mallinfo_with_dynamic_libc) {
  build("static_mallinfo.c", "static_mallinfo_dyn", "-O1");
  int st = run_cmd(&r, "'%s/static_mallinfo_dyn'", tmp_dir());
  cr_assert_eq(st, 0, "static_mallinfo_dyn %s:\n%s%s", describe_status(st), r.out, r.err);
}
