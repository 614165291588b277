/* test_command.c — the ebb command (tools/ebb, built as build/ebb), the man pages
 * and the one version number, driven through the shell like a user would:
 *   ebb run      preloads libebb.so in front of LD_PRELOAD and passes the settings
 *                (checked by a probe program that prints its environment and whether
 *                ebb_version resolves in it, and by stderr: ebb's stats, no warning);
 *   ebb compare  a row per allocator with the right "served by", failures in their
 *                rows, --plot writes a PNG, the /proc-only measurement;
 *   errors       one line "ebb: …" and exit status 2 for each wrong command line;
 *   install      bin/ebb, the man pages and ebb.pc with the version of ebb.h;
 *   man pages    `man --warnings` finds nothing; every function of ebb.h, every
 *                setting of docs/options.md and every option of `ebb --help` is in them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(command, .timeout = 90);

static struct cmd_result r; /* large: not on the stack */

/* The probe: allocates and touches 8 MiB, holds it `ms` milliseconds, prints what it
 * was run with, exits with `code`. Under ebb, ebb_version resolves in it. */
static const char probe_src[] =
    "#include <dlfcn.h>\n"
    "#include <signal.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#include <time.h>\n"
    "static const char *env(const char *n) { const char *v = getenv(n); return v ? v : \"(unset)\"; }\n"
    "int main(int argc, char **argv) {\n"
    "  long ms = argc > 1 ? atol(argv[1]) : 0;\n"
    "  int code = argc > 2 ? atoi(argv[2]) : 0;\n"
    "  const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, \"ebb_version\");\n"
    "  char *b[32];\n"
    "  for (int i = 0; i < 32; i++) {\n"
    "    if (!(b[i] = malloc(256 << 10))) return 99;\n"
    "    memset(b[i], i + 1, 256 << 10);\n"
    "  }\n"
    "  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};\n"
    "  nanosleep(&ts, NULL);\n"
    "  for (int i = 0; i < 32; i++) free(b[i]);\n"
    "  printf(\"served=%s\\nversion=%s\\n\", ver ? \"ebb\" : \"other\", ver ? ver() : \"-\");\n"
    "  const char *names[] = {\"LD_PRELOAD\", \"EBB_STATS\", \"EBB_DECAY_MS\",\n"
    "                         \"EBB_DIRTY_MAX\", \"EBB_BACKGROUND\"};\n"
    "  for (int i = 0; i < 5; i++) printf(\"%s=%s\\n\", names[i], env(names[i]));\n"
    "  fflush(stdout);\n"
    "  if (ver && getenv(\"PROBE_FAIL_UNDER_EBB\")) {\n"
    "    fprintf(stderr, \"probe: failing under ebb\\n\");\n"
    "    return 3;\n"
    "  }\n"
    "  if (getenv(\"GLIBC_TUNABLES\") && getenv(\"PROBE_SEGV_TUNED\")) raise(SIGSEGV);\n"
    "  return code;\n"
    "}\n";

/* Compiles the probe into build/tests/tmp/cmd_probe (once per test process; the rename
 * makes parallel tests safe) and returns its path. */
static const char *probe(void) {
  static char path[512];
  if (path[0]) return path;
  char src[512];
  snprintf(src, sizeof src, "%s/cmd_probe.%d.c", tmp_dir(), (int)getpid());
  FILE *f = fopen(src, "w");
  cr_assert_not_null(f, "cannot write %s", src);
  fputs(probe_src, f);
  fclose(f);
  snprintf(path, sizeof path, "%s/cmd_probe", tmp_dir());
  int st = run_cmd(&r, "cc -O1 -o '%s.%d' '%s' -ldl && mv -f '%s.%d' '%s' && rm -f '%s'", path, (int)getpid(),
                   src, path, (int)getpid(), path, src);
  cr_assert_eq(st, 0, "compiling the probe failed: %s%s", r.out, r.err);
  return path;
}

static int exited_with(int st, int code) { return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == code; }

/* The value of "name=value" on a line of out, into buf ("" if absent). */
static const char *field(const char *out, const char *name, char *buf, size_t cap) {
  char key[128];
  snprintf(key, sizeof key, "%s=", name);
  buf[0] = 0;
  for (const char *p = out; (p = strstr(p, key)) != NULL; p++) {
    if (p != out && p[-1] != '\n') continue;
    p += strlen(key);
    size_t n = strcspn(p, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    break;
  }
  return buf;
}

static void expect_field(const char *out, const char *name, const char *want) {
  char got[1024];
  field(out, name, got, sizeof got);
  cr_expect_str_eq(got, want, "%s: wanted '%s', the program saw '%s'; its output:\n%s", name, want, got, out);
}

/* A table row split into words: name, then wall, ratio, peak, ratio, exit, ratio,
 * faults, ratio, served by, result... */
struct row {
  int found;
  char line[1024]; /* the whole row */
  char w[16][64];
  int n;
};

/* The row of allocator `name` in the table printed by ebb compare (after its header). */
static struct row find_row(const char *out, const char *name) {
  struct row row = {0};
  size_t nl = strlen(name);
  const char *p = strstr(out, "\nallocator ");
  for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, name, nl) != 0 || p[nl] != ' ') continue;
    size_t n = strcspn(p, "\n");
    if (n >= sizeof row.line) n = sizeof row.line - 1;
    memcpy(row.line, p, n);
    row.line[n] = 0;
    row.found = 1;
    char words[1024];
    memcpy(words, row.line, n + 1);
    for (char *save, *t = strtok_r(words, " ", &save); t && row.n < 16; t = strtok_r(NULL, " ", &save))
      snprintf(row.w[row.n++], sizeof row.w[0], "%s", t);
    break;
  }
  return row;
}

/* ------------------------------------------------------------------ ebb run */

/* The settings reach the program as EBB_* variables, ebb serves it (ebb_version resolves),
 * ebb accepts them (no warning on stderr) and prints its stats at exit; the exit status is
 * the program's. Checked through the environment the program sees: that works whatever
 * the stats' format. */
Test(command, run_preloads_and_applies_settings) {
  const char *p = probe();
  int st = run_cmd(
      &r, "env -u LD_PRELOAD build/ebb run --stats --decay 123 --dirty-max 64M --background off -- '%s' 0 7",
      p);
  cr_assert(exited_with(st, 7), "ebb run %s (wanted the program's 7); stderr:\n%s", describe_status(st),
            r.err);
  expect_field(r.out, "served", "ebb");
  expect_field(r.out, "version", ebb_version());
  char lib[1200];
  snprintf(lib, sizeof lib, "%s/build/libebb.so", repo_root());
  expect_field(r.out, "LD_PRELOAD", lib);
  expect_field(r.out, "EBB_STATS", "1");
  expect_field(r.out, "EBB_DECAY_MS", "123");
  expect_field(r.out, "EBB_DIRTY_MAX", "64M");
  expect_field(r.out, "EBB_BACKGROUND", "off");
  cr_expect(strstr(r.err, "mapped") != NULL, "--stats: no stats from ebb on stderr:\n%s", r.err);
  cr_expect(strstr(r.err, "warning") == NULL, "ebb warned about a setting ebb run passed:\n%s", r.err);
}

/* What ebb itself reports: --stats=json gives one JSON object that parses (python3) and
 * says ebb served the program; with EBB_VERBOSE=1, ebb lists the settings ebb run set as
 * coming from the environment. */
Test(command, run_settings_as_ebb_reports_them) {
  const char *p = probe();
  int st = run_cmd(&r,
                   "env -u LD_PRELOAD EBB_VERBOSE=1 build/ebb run --stats=json --decay 123 --dirty-max 64M "
                   "--background off -- '%s' 0 0 2>&1 >/dev/null | tee %s/cmd_json.txt | grep '^{' | "
                   "python3 -c 'import json,sys; d=json.load(sys.stdin); print(\"version\", d[\"version\"]); "
                   "print(\"mapped_ok\", d[\"mapped\"] >= d[\"active\"] >= 0)'",
                   p, tmp_dir());
  cr_assert_eq(st, 0, "--stats=json did not give one JSON object that parses: %s\n%s", r.out, r.err);
  cr_expect(strstr(r.out, ebb_version()) != NULL, "JSON stats without ebb's version: %s", r.out);
  cr_expect(strstr(r.out, "mapped_ok True") != NULL, "JSON stats inconsistent: %s", r.out);
  st = run_cmd(&r, "cat %s/cmd_json.txt", tmp_dir());
  cr_expect(strstr(r.out, "ebb: EBB_DECAY_MS=123 (environment)") != NULL, "no decay setting from ebb run:\n%s", r.out);
  cr_expect(strstr(r.out, "ebb: EBB_DIRTY_MAX=64M (environment)") != NULL, "no dirty-max setting:\n%s", r.out);
  cr_expect(strstr(r.out, "ebb: EBB_BACKGROUND=0 (environment)") != NULL ||
                strstr(r.out, "ebb: EBB_BACKGROUND=off (environment)") != NULL,
            "no background setting:\n%s", r.out);
  cr_expect(strstr(r.out, "ebb: EBB_STATS=json (environment)") != NULL, "no stats setting:\n%s", r.out);
  st = run_cmd(&r, "build/ebb run --stats=3 -- true");
  cr_expect(exited_with(st, 2) && strstr(r.err, "--stats takes 1, 2 or json"), "--stats=3: %s", r.err);
}

/* Every EBB_DIRTY_MAX value the library takes, ebb run passes on and the library
 * uses (found by a probe: `--dirty-max auto`, the default, was refused). */
Test(command, run_passes_every_dirty_max_form_the_library_takes) {
  const char *p = probe();
  /* and plain byte counts of 16 to 19 digits up to the library's 2^61 - 1
   * (found by a probe: more than 15 digits were refused) */
  static const char *const ok[] = {"auto", "auto+64M", "0", "0%", "1000%", "512K", "2G", "1073741823G",
                                   "1000000000000001", "2305843009213693951"};
  for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
    int st = run_cmd(&r, "env -u LD_PRELOAD EBB_VERBOSE=1 build/ebb run --dirty-max %s -- '%s' 0 0", ok[i], p);
    cr_expect(exited_with(st, 0), "ebb run --dirty-max %s: %s; stderr:\n%s", ok[i], describe_status(st), r.err);
    char want[96];
    snprintf(want, sizeof want, "ebb: EBB_DIRTY_MAX=%s (environment)", ok[i]);
    cr_expect(strstr(r.err, want) != NULL && strstr(r.err, "warning") == NULL,
              "--dirty-max %s: ebb did not take it as given:\n%s", ok[i], r.err);
  }
}

Test(command, run_prepends_to_ld_preload_and_passes_signals) {
  const char *p = probe();
  int st = run_cmd(&r, "LD_PRELOAD=libm.so.6 build/ebb run '%s'", p); /* no "--": allowed */
  cr_assert(exited_with(st, 0), "ebb run %s; stderr:\n%s", describe_status(st), r.err);
  char want[1200];
  snprintf(want, sizeof want, "%s/build/libebb.so:libm.so.6", repo_root());
  expect_field(r.out, "LD_PRELOAD", want);
  expect_field(r.out, "served", "ebb");
  /* ebb replaces itself with the program: a signal that kills the program is its status */
  st = run_cmd(&r, "build/ebb run -- sh -c 'kill -SEGV $$'; echo \"status=$?\"");
  cr_expect(strstr(r.out, "status=139") != NULL, "a program killed by SIGSEGV under ebb run: %s", r.out);
}

/* tools/ebb in the source tree finds ../build/libebb.so and reads ../include/ebb.h. */
Test(command, source_tree_script_works) {
  const char *p = probe();
  int st = run_cmd(&r, "env -u LD_PRELOAD tools/ebb run -- '%s'", p);
  cr_assert(exited_with(st, 0), "tools/ebb run %s; stderr:\n%s", describe_status(st), r.err);
  char lib[1200];
  snprintf(lib, sizeof lib, "%s/build/libebb.so", repo_root());
  expect_field(r.out, "LD_PRELOAD", lib);
  st = run_cmd(&r, "tools/ebb --version");
  char want[64];
  snprintf(want, sizeof want, "ebb %s\n", ebb_version());
  cr_expect(exited_with(st, 0) && strcmp(r.out, want) == 0, "tools/ebb --version printed '%s' (%s), not '%s'",
            r.out, describe_status(st), want);
}

/* ------------------------------------------------------------------ version, help */

/* One version number: ebb.h's macros, ebb_version(), ebb --version, the man pages, the changelog. */
Test(command, one_version_everywhere) {
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", EBB_VERSION_MAJOR, EBB_VERSION_MINOR, EBB_VERSION_PATCH);
  cr_assert_str_eq(EBB_VERSION_STRING, want,
                   "EBB_VERSION_STRING disagrees with the MAJOR/MINOR/PATCH macros");
  cr_assert_str_eq(ebb_version(), EBB_VERSION_STRING,
                   "libebb.so's ebb_version() is not the header's version");
  int st = run_cmd(&r, "build/ebb --version");
  char line[96];
  snprintf(line, sizeof line, "ebb %s\n", want);
  cr_expect(exited_with(st, 0) && strcmp(r.out, line) == 0, "build/ebb --version printed '%s' (%s), not '%s'",
            r.out, describe_status(st), line);
  st = run_cmd(&r, "grep -c '^\\.TH EBB [13] .*\"ebb %s\"' man/ebb.1 man/ebb.3", want);
  cr_expect(strstr(r.out, "man/ebb.1:1") && strstr(r.out, "man/ebb.3:1"),
            "the .TH lines of man/ebb.1 and man/ebb.3 must say \"ebb %s\": %s%s", want, r.out, r.err);
  st = run_cmd(&r, "grep -q '^## %s' CHANGELOG.md", want);
  cr_expect(exited_with(st, 0), "CHANGELOG.md has no section '## %s'", want);
}

Test(command, help_and_usage) {
  int st = run_cmd(&r, "build/ebb --help");
  cr_assert(exited_with(st, 0), "ebb --help %s", describe_status(st));
  const char *words[] = {"ebb run",      "ebb compare", "--stats",      "--decay", "--dirty-max",
                         "--background", "-n RUNS",     "--allocators", "--plot",  "--version"};
  for (size_t i = 0; i < ARRAY_LEN(words); i++)
    cr_expect(strstr(r.out, words[i]) != NULL, "ebb --help does not mention %s:\n%s", words[i], r.out);
  st = run_cmd(&r, "build/ebb");
  cr_expect(exited_with(st, 2) && strstr(r.err, "ebb run") != NULL, "ebb without arguments: %s, stderr:\n%s",
            describe_status(st), r.err);
}

/* ------------------------------------------------------------------ errors */

/* Each wrong command line: exit status 2 and one line "ebb: ..." naming the problem. */
Test(command, errors_are_one_line_and_exit_2) {
  char noexec[512], dir[512];
  snprintf(noexec, sizeof noexec, "%s/cmd-noexec-%d", tmp_dir(), (int)getpid());
  snprintf(dir, sizeof dir, "%s", tmp_dir());
  cr_assert_eq(run_cmd(&r, "printf '#!/bin/sh\\n' > '%s' && chmod 644 '%s'", noexec, noexec), 0);
  struct {
    char args[600];
    const char *says;
  } cases[] = {
      {"run -- /nonexistent/prog", "/nonexistent/prog: no such file"},
      {"run -- ebb-no-such-program-anywhere", "ebb-no-such-program-anywhere: program not found"},
      {"", "not executable"}, /* filled below */
      {"", "is a directory"},
      {"run", "no program given"},
      {"run --stats", "no program given"},
      {"compare", "no program given"},
      {"compare -n 1 -- /nonexistent/prog", "no such file"},
      {"run --decay abc -- true", "--decay wants milliseconds"},
      {"run --decay -5 -- true", "--decay wants milliseconds"},
      {"run --decay 86400001 -- true", "--decay wants milliseconds"},
      {"run --decay", "--decay needs a value"},
      {"run --dirty-max 12X -- true", "--dirty-max wants a size"},
      {"run --dirty-max 1001% -- true", "--dirty-max wants a size"},
      /* the library's limit (found by a probe: ebb run passed it, ebb warned and kept its default) */
      {"run --dirty-max 3000000000G -- true", "--dirty-max wants a size"},
      {"run --dirty-max 2305843009213693952 -- true", "--dirty-max wants a size"},
      {"run --dirty-max auto+5% -- true", "--dirty-max wants a size"},
      {"run --dirty-max autox -- true", "--dirty-max wants a size"},
      {"run --decay '' -- true", "--decay needs a value"}, /* an empty value is no value */
      {"run --decay= -- true", "--decay needs a value"},
      {"run --dirty-max= -- true", "--dirty-max needs a value"},
      {"run --background= -- true", "--background needs a value"},
      {"run --background maybe -- true", "--background wants on, off or auto"},
      {"run --bogus -- true", "unknown option '--bogus'"},
      {"compare -n 0 -- true", "-n wants a positive integer"},
      {"compare -n abc -- true", "-n wants a positive integer"},
      {"compare -n -3 -- true", "-n wants a positive integer"},
      {"compare --allocators glibc,nosuch -- true", "unknown allocator 'nosuch'"},
      {"compare --allocators , -- true", "--allocators wants a list"},
      {"compare --time /bin/true -- true", "not GNU time"},
      {"compare --plot /nonexistent/dir/x.png -- true", "does not exist"},
      {"frobnicate", "unknown command 'frobnicate'"},
  };
  snprintf(cases[2].args, sizeof cases[2].args, "run -- '%s'", noexec);
  snprintf(cases[3].args, sizeof cases[3].args, "compare -- '%s'", dir);
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    int st = run_cmd(&r, "build/ebb %s", cases[i].args);
    cr_expect(exited_with(st, 2), "ebb %s: %s, not exit 2; stdout:\n%s\nstderr:\n%s", cases[i].args,
              describe_status(st), r.out, r.err);
    size_t len = strlen(r.err);
    int one_line = len > 0 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1;
    cr_expect(strncmp(r.err, "ebb: ", 5) == 0 && one_line, "ebb %s: stderr is not one line 'ebb: ...':\n%s",
              cases[i].args, r.err);
    cr_expect(strstr(r.err, cases[i].says) != NULL, "ebb %s: stderr does not say '%s':\n%s", cases[i].args,
              cases[i].says, r.err);
    cr_expect(r.out[0] == 0, "ebb %s printed on stdout:\n%s", cases[i].args, r.out);
  }
  run_cmd(&r, "rm -f '%s'", noexec);
}

/* A copy of tools/ebb with no library anywhere near it: ebb run and an explicit
 * --allocators ebb fail; compare lists ebb as not installed and runs the others. */
Test(command, library_not_found_and_allocator_not_installed) {
  const char *p = probe();
  char dir[512], bin[600];
  snprintf(dir, sizeof dir, "%s/cmd-nolib-%d", tmp_dir(), (int)getpid());
  snprintf(bin, sizeof bin, "%s/bin", dir);
  cr_assert_eq(run_cmd(&r, "mkdir -p '%s' && cp tools/ebb '%s/ebb'", bin, bin), 0, "%s", r.err);
  int st = run_cmd(&r, "'%s/ebb' run -- true", bin);
  cr_expect(exited_with(st, 2) && strncmp(r.err, "ebb: libebb.so not found", 24) == 0,
            "ebb run without a library: %s, stderr:\n%s", describe_status(st), r.err);
  st = run_cmd(&r, "'%s/ebb' compare -n 1 --allocators glibc,ebb -- true", bin);
  cr_expect(exited_with(st, 2) && strstr(r.err, "ebb: allocator ebb is not installed") == r.err,
            "ebb compare --allocators glibc,ebb without libebb: %s, stderr:\n%s", describe_status(st), r.err);
  st = run_cmd(&r, "'%s/ebb' compare -n 1 -- '%s' 30", bin, p);
  cr_expect(exited_with(st, 0), "ebb compare without libebb: %s\n%s%s", describe_status(st), r.out, r.err);
  struct row e = find_row(r.out, "ebb");
  cr_expect(e.found && strstr(e.line, "not installed (libebb.so not found") != NULL,
            "no 'not installed' row for ebb:\n%s", r.out);
  struct row g = find_row(r.out, "glibc");
  cr_expect(g.n >= 11 && strcmp(g.w[10], "ok") == 0, "glibc's row without libebb:\n%s", r.out);
  run_cmd(&r, "rm -rf '%s'", dir);
}

/* ------------------------------------------------------------------ ebb compare */

static const struct {
  const char *name, *family, *soname;
} allocators[] = {
    {"glibc", "glibc", NULL},
    {"glibc-notrim", "glibc", NULL},
    {"glibc-mmap8m", "glibc", NULL},
    {"jemalloc", "jemalloc", "libjemalloc.so.2"},
    {"mimalloc", "mimalloc", "libmimalloc.so.2"},
    {"tcmalloc", "tcmalloc", "libtcmalloc_minimal.so.4"},
    {"ebb", "ebb", NULL},
};

/* Every default allocator gets a row: run and served by the allocator it names, or
 * "not installed" exactly when ldconfig does not know its library. */
Test(command, compare_serves_each_row_by_its_allocator) {
  const char *p = probe();
  int st = run_cmd(&r, "build/ebb compare -n 1 -- '%s' 150", p);
  cr_assert(exited_with(st, 0), "ebb compare: %s\n%s%s", describe_status(st), r.out, r.err);
  char out[sizeof r.out];
  memcpy(out, r.out, sizeof out);
  cr_expect(strstr(out, "allocator ") && strstr(out, "served by"), "no table header:\n%s", out);
  for (size_t i = 0; i < ARRAY_LEN(allocators); i++) {
    struct row row = find_row(out, allocators[i].name);
    cr_expect(row.found, "no row for %s:\n%s", allocators[i].name, out);
    if (!row.found) continue;
    int installed = 1;
    if (allocators[i].soname) {
      run_cmd(&r, "{ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep -q '%s '", allocators[i].soname);
      installed = exited_with(r.status, 0);
    }
    if (!installed && strcmp(row.w[1], "not") == 0) continue;
    cr_expect(installed || strcmp(row.w[1], "not") == 0, "%s is not installed, but its row is:\n%s",
              allocators[i].name, out);
    cr_expect(row.n >= 11 && strcmp(row.w[1], "not") != 0,
              "%s is installed, but its row is not a measured one:\n%s", allocators[i].name, out);
    if (row.n < 11) continue;
    cr_expect_str_eq(row.w[9], allocators[i].family, "%s was served by '%s':\n%s", allocators[i].name,
                     row.w[9], out);
    cr_expect_str_eq(row.w[10], "ok", "%s's result:\n%s", allocators[i].name, out);
    cr_expect(atof(row.w[1]) >= 0.1, "%s: wall %s s for a program that sleeps 150 ms", allocators[i].name,
              row.w[1]);
    cr_expect(atof(row.w[3]) >= 8.0, "%s: peak %s MiB for a program that touches 8 MiB", allocators[i].name,
              row.w[3]);
    cr_expect(atol(row.w[7]) >= 50, "%s: %s page faults", allocators[i].name, row.w[7]);
  }
  struct row g = find_row(out, "glibc");
  cr_expect(g.n >= 3 && strcmp(g.w[2], "1.00x") == 0, "glibc's ratio to itself:\n%s", out);
}

/* A failure under one allocator is reported in its row, not hidden, and makes the exit status 1. */
Test(command, compare_reports_failed_runs_in_their_rows) {
  const char *p = probe();
  int st = run_cmd(&r,
                   "PROBE_FAIL_UNDER_EBB=1 PROBE_SEGV_TUNED=1 build/ebb compare -n 1 "
                   "--allocators glibc,glibc-notrim,ebb -- '%s' 50",
                   p);
  cr_assert(exited_with(st, 1), "ebb compare with failing runs: %s, not 1\n%s%s", describe_status(st), r.out,
            r.err);
  struct row g = find_row(r.out, "glibc"), n = find_row(r.out, "glibc-notrim"), e = find_row(r.out, "ebb");
  cr_expect(g.n >= 11 && strcmp(g.w[10], "ok") == 0, "glibc should be ok:\n%s", r.out);
  cr_expect(strstr(n.line, "FAILED: signal 11 (SIGSEGV) in 1 of 1 runs") != NULL,
            "glibc-notrim's row should say it was killed by SIGSEGV:\n%s", r.out);
  cr_expect(strstr(e.line, "FAILED: exit 3 in 1 of 1 runs") != NULL,
            "ebb's row should say it exited with 3:\n%s", r.out);
  cr_expect(strstr(r.out, "probe: failing under ebb") != NULL, "the failed run's stderr is not shown:\n%s",
            r.out);
}

/* --plot draws a PNG (gnuplot-nox); --time none measures from /proc alone. */
Test(command, compare_plot_writes_a_png) {
  int st = run_cmd(&r, "command -v gnuplot");
  cr_assert(exited_with(st, 0), "gnuplot is not installed: tests/deps.sh test must install gnuplot-nox");
  const char *p = probe();
  char png[512];
  snprintf(png, sizeof png, "%s/cmd-plot-%d.png", tmp_dir(), (int)getpid());
  st = run_cmd(&r, "rm -f '%s' && build/ebb compare -n 1 --allocators glibc,ebb --plot '%s' -- '%s' 150", png,
               png, p);
  cr_assert(exited_with(st, 0), "ebb compare --plot: %s\n%s%s", describe_status(st), r.out, r.err);
  FILE *f = fopen(png, "rb");
  cr_assert_not_null(f, "--plot wrote no %s:\n%s%s", png, r.out, r.err);
  unsigned char magic[8] = {0};
  size_t got = fread(magic, 1, sizeof magic, f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  cr_expect(got == 8 && memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0, "%s is not a PNG", png);
  cr_expect_gt(size, 2000, "%s is only %ld bytes", png, size);
  unlink(png);
}

Test(command, compare_without_gnu_time) {
  const char *p = probe();
  int st = run_cmd(&r, "build/ebb compare -n 1 --time none --allocators glibc,ebb -- '%s' 150", p);
  cr_assert(exited_with(st, 0), "ebb compare --time none: %s\n%s%s", describe_status(st), r.out, r.err);
  const char *names[] = {"glibc", "ebb"};
  for (size_t i = 0; i < 2; i++) {
    struct row row = find_row(r.out, names[i]);
    cr_expect(row.n >= 11 && strcmp(row.w[9], names[i]) == 0 && strcmp(row.w[10], "ok") == 0,
              "--time none: %s's row:\n%s", names[i], r.out);
    if (row.n >= 11) {
      cr_expect(atof(row.w[3]) >= 8.0, "--time none: %s peak %s MiB", names[i], row.w[3]);
      cr_expect(atol(row.w[7]) >= 50, "--time none: %s: %s page faults", names[i], row.w[7]);
    }
  }
}

/* A run too short for the sampler's first read of /proc has no exit figure:
 * the column shows "-" (when no run of the allocator has one) or the median of
 * those that do, never a 0 the missing reads made (found by a probe: every row
 * of `ebb compare -- /bin/true` showed 0.0, as if ebb had returned it all). */
Test(command, compare_leaves_out_exit_figures_it_could_not_read) {
  int st = run_cmd(&r, "build/ebb compare -n 3 --allocators glibc,ebb -- /bin/true");
  cr_assert(exited_with(st, 0), "ebb compare -- /bin/true: %s\n%s%s", describe_status(st), r.out, r.err);
  const char *names[] = {"glibc", "ebb"};
  for (size_t i = 0; i < 2; i++) {
    struct row row = find_row(r.out, names[i]);
    cr_assert(row.n >= 11, "%s's row:\n%s", names[i], r.out);
    cr_expect(strcmp(row.w[5], "-") == 0 || atof(row.w[5]) > 0, "%s: exit MiB '%s':\n%s", names[i], row.w[5],
              r.out);
  }
  st = run_cmd(&r, "build/ebb compare -n 1 --time none --allocators glibc -- /bin/true");
  cr_expect(strstr(r.out, "GNU time not used (--time none)") != NULL, "the legend under --time none:\n%s", r.out);
}

/* ------------------------------------------------------------------ library, install */

/* ebb_version is public: global in libebb.a after --localize-hidden (it matches ebb_*),
 * and resolved from libebb.so by this process. */
Test(command, ebb_version_is_exported) {
  int st = run_cmd(&r, "nm -g --defined-only build/libebb.a | grep -q ' T ebb_version$'");
  cr_expect(exited_with(st, 0), "build/libebb.a does not export ebb_version");
  const char *where;
  cr_expect_not_null(ebb_symbol("ebb_version", &where), "ebb_version resolves to %s, not libebb", where);
}

Test(command, install_puts_command_man_pages_and_pc) {
  const char *p = probe();
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s/cmd-install-%d", tmp_dir(), (int)getpid());
  int st = run_cmd(&r, "rm -rf '%s' && make -s install PREFIX='%s'", prefix, prefix);
  cr_assert_eq(st, 0, "make install failed: %s%s", r.out, r.err);
  const char *files[] = {"bin/ebb", "share/man/man1/ebb.1", "share/man/man3/ebb.3", "lib/pkgconfig/ebb.pc",
                         "lib/libebb.so.0"};
  for (size_t i = 0; i < ARRAY_LEN(files); i++) {
    st = run_cmd(&r, "test -f '%s/%s'", prefix, files[i]);
    cr_expect(exited_with(st, 0), "%s was not installed", files[i]);
  }
  st = run_cmd(&r, "test -x '%s/bin/ebb'", prefix);
  cr_expect(exited_with(st, 0), "bin/ebb is not executable");
  st = run_cmd(&r, "PKG_CONFIG_LIBDIR='%s/lib/pkgconfig' pkg-config --modversion ebb", prefix);
  char want[64];
  snprintf(want, sizeof want, "%s\n", ebb_version());
  cr_expect(exited_with(st, 0) && strcmp(r.out, want) == 0, "ebb.pc's version is '%s'%s, not %s", r.out,
            r.err, want);
  st = run_cmd(&r, "'%s/bin/ebb' --version", prefix);
  cr_expect(exited_with(st, 0) && strncmp(r.out, "ebb ", 4) == 0 && strcmp(r.out + 4, want) == 0,
            "the installed ebb --version printed '%s'", r.out);
  /* the installed command preloads the installed library */
  st = run_cmd(&r, "env -u LD_PRELOAD '%s/bin/ebb' run -- '%s'", prefix, p);
  cr_expect(exited_with(st, 0), "the installed ebb run: %s\n%s", describe_status(st), r.err);
  char lib[700];
  snprintf(lib, sizeof lib, "%s/lib/libebb.so.0", prefix);
  expect_field(r.out, "LD_PRELOAD", lib);
  expect_field(r.out, "served", "ebb");
  /* man finds the pages under the prefix */
  st = run_cmd(&r, "command -v man >/dev/null && man -M '%s/share/man' -w 3 ebb", prefix);
  if (exited_with(st, 0)) cr_expect(strstr(r.out, "man3/ebb.3") != NULL, "man -w 3 ebb: %s", r.out);
  run_cmd(&r, "rm -rf '%s'", prefix);
}

/* ------------------------------------------------------------------ man pages */

Test(command, man_pages_have_no_warnings) {
  int st = run_cmd(&r, "command -v man");
  cr_assert(exited_with(st, 0), "man is not installed: tests/deps.sh test must install man-db");
  const char *pages[] = {"man/ebb.1", "man/ebb.3"};
  for (size_t i = 0; i < ARRAY_LEN(pages); i++) {
    st = run_cmd(&r, "MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings=w -E UTF-8 -l %s >/dev/null", pages[i]);
    cr_expect(exited_with(st, 0) && r.err[0] == 0, "man --warnings -l %s: %s\n%s", pages[i],
              describe_status(st), r.err);
  }
}

/* ebb(3) names every function of ebb.h and every setting of docs/options.md; ebb(1)
 * every option of `ebb --help`. */
Test(command, man_pages_cover_the_header_the_settings_and_the_options) {
  int st = run_cmd(&r, "for f in $(grep -o 'ebb_[a-z_0-9]*(' include/ebb.h | tr -d '(' | sort -u); do "
                       "grep -q \"$f\" man/ebb.3 || echo \"$f\"; done");
  cr_expect(exited_with(st, 0) && r.out[0] == 0, "functions of include/ebb.h missing from man/ebb.3:\n%s",
            r.out);
  st = run_cmd(&r, "for v in $(grep -o '^| `EBB_[A-Z_]*`' docs/options.md | tr -d '|` '); do "
                   "grep -qx \".B $v\" man/ebb.3 || echo \"$v\"; done");
  cr_expect(exited_with(st, 0) && r.out[0] == 0, "settings of docs/options.md missing from man/ebb.3:\n%s",
            r.out);
  st = run_cmd(&r,
               "for o in $(build/ebb --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do "
               "grep -qF -- \"$(printf '%%s' \"$o\" | sed 's/-/\\\\-/g')\" man/ebb.1 || echo \"$o\"; done");
  cr_expect(exited_with(st, 0) && r.out[0] == 0, "options of ebb --help missing from man/ebb.1:\n%s", r.out);
}
