/* test_dropin.c — real programs (python3, git, sqlite3, perl, gcc, sort) run with
 * LD_PRELOAD=build/libebb.so and must succeed with the same stdout as without.
 * Each scenario is a script in tests/dropin (its README gives the contract): it
 * runs once plainly and once preloaded with EBB_STATS=1; the preloaded run must
 * exit 0, print the same stdout, and leave an `ebb stats:` line with mmap>0 on
 * stderr, which only a process that ran on ebb prints. Scratch space is a fresh
 * directory per test under build/tests/tmp, removed afterwards unless
 * EBBTEST_KEEP_TMP=1. Tests share nothing, so Criterion may run them in parallel. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strchrnul */
#endif
#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DR_TIMEOUT 60 /* seconds one run of a scenario may take before `timeout` ends it */
#define DR_MISSING 77 /* a scenario's exit status when a program it needs is absent */
#define DR_SHOW 1500  /* bytes of a run's stderr quoted in a failure message */

static char dr_build[PATH_MAX]; /* build/: two levels above this binary */
static char dr_lib[PATH_MAX];   /* absolute path of libebb.so (EBBTEST_DROPIN_LIB overrides) */
static char dr_dir[PATH_MAX];   /* tests/dropin: the scenarios */
static char dr_tmp[PATH_MAX];   /* this test's scratch directory */

/* snprintf that fails the test instead of truncating a path or command. */
__attribute__((format(printf, 3, 4))) static void dr_fmt(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, cap, fmt, ap);
  va_end(ap);
  cr_assert(n >= 0 && (size_t)n < cap, "path or command too long: %s", out);
}

static void dr_cut(char *path) {
  char *slash = strrchr(path, '/');
  cr_assert_not_null(slash, "no directory in %s", path);
  *slash = '\0';
}

/* Finds the library and the scenarios from where this binary lives
 * (build/tests/integration), so the test runs from any working directory. */
static void dr_init(void) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  cr_assert_gt(n, 0, "readlink /proc/self/exe failed");
  exe[n] = '\0';
  dr_cut(exe);
  dr_cut(exe);
  dr_fmt(dr_build, sizeof dr_build, "%s", exe);
  const char *lib = getenv("EBBTEST_DROPIN_LIB");
  dr_fmt(dr_lib, sizeof dr_lib, "%s/libebb.so", dr_build);
  if (lib && *lib) dr_fmt(dr_lib, sizeof dr_lib, "%s", lib);
  cr_assert_eq(access(dr_lib, R_OK), 0, "no %s: build it first (make all)", dr_lib);
  cr_assert_null(strpbrk(dr_lib, " '\"\\$"), "the library path must not need quoting: %s", dr_lib);
  dr_cut(exe);
  dr_fmt(dr_dir, sizeof dr_dir, "%s/tests/dropin", exe);
  cr_assert_eq(access(dr_dir, R_OK), 0, "no scenarios at %s", dr_dir);
  char parent[PATH_MAX];
  dr_fmt(parent, sizeof parent, "%s/tests/tmp", dr_build);
  mkdir(parent, 0755); /* build/tests exists: this binary lives there */
  dr_fmt(dr_tmp, sizeof dr_tmp, "%s/dropin-XXXXXX", parent);
  cr_assert_not_null(mkdtemp(dr_tmp), "mkdtemp %s failed", dr_tmp);
}

static void dr_fini(void) {
  const char *keep = getenv("EBBTEST_KEEP_TMP");
  if (!dr_tmp[0] || (keep && *keep == '1')) return;
  char cmd[PATH_MAX + 16];
  dr_fmt(cmd, sizeof cmd, "rm -rf '%s'", dr_tmp);
  if (system(cmd) != 0) fprintf(stderr, "test_dropin: could not remove %s\n", dr_tmp);
}

/* Reads a whole file (NUL-terminated, *len without the NUL); NULL if absent. */
static char *dr_slurp(const char *mode, const char *ext, size_t *len) {
  char path[PATH_MAX];
  dr_fmt(path, sizeof path, "%s/%s.%s", dr_tmp, mode, ext);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap + 1);
  cr_assert_not_null(buf);
  while ((got = fread(buf + n, 1, cap - n, f)) > 0)
    if ((n += got) == cap) cr_assert_not_null(buf = realloc(buf, (cap *= 2) + 1));
  fclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

/* The last DR_SHOW bytes of a run's stderr, for failure messages. */
static const char *dr_tail(const char *mode) {
  size_t n;
  char *err = dr_slurp(mode, "err", &n);
  if (!err) return "(no stderr file)";
  return n > DR_SHOW ? err + n - DR_SHOW : err;
}

/* Runs tests/dropin/<name>.sh in <tmp>/<mode>/ with RUN empty ("base") or
 * preloading ebb ("ebb"); stdout and stderr go to <tmp>/<mode>.out and .err.
 * Neither run inherits LD_PRELOAD or EBB_STATS from whoever runs the tests.
 * Returns the exit status, or 128+signal. */
static int dr_run(const char *name, const char *mode) {
  char run[PATH_MAX + 64] = "";
  if (strcmp(mode, "ebb") == 0) dr_fmt(run, sizeof run, "env LD_PRELOAD=%s EBB_STATS=1", dr_lib);
  char cmd[4 * PATH_MAX + 512];
  dr_fmt(cmd, sizeof cmd,
         "cd '%s' && mkdir %s && cd %s && env -u LD_PRELOAD -u EBB_STATS DROPIN='%s' RUN='%s' "
         "timeout -k 5 %d sh '%s/%s.sh' >../%s.out 2>../%s.err",
         dr_tmp, mode, mode, dr_dir, run, DR_TIMEOUT, dr_dir, name, mode, mode);
  int st = system(cmd);
  cr_assert_neq(st, -1, "system() failed for %s", name);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A scenario that lacks a program fails (never skips) and says what to install. */
static void dr_assert_ran(const char *name, const char *mode, int status) {
  cr_assert_neq(status, DR_MISSING, "%s: a program is missing; add its package to tests/deps.sh: %s", name,
                dr_tail(mode));
  cr_assert_neq(status, 124, "%s (%s run): still running after %d s (hang?); stderr ends:\n%s", name, mode,
                DR_TIMEOUT, dr_tail(mode));
  cr_assert_eq(status, 0, "%s (%s run): exit status %d; stderr ends:\n%s", name, mode, status, dr_tail(mode));
}

/* Line number (from 1) and text of the first line where a and b differ. */
static void dr_assert_same(const char *name, const char *a, size_t na, const char *b, size_t nb) {
  if (na == nb && memcmp(a, b, na) == 0) return;
  size_t i = 0, line = 1, start = 0;
  for (; i < na && i < nb && a[i] == b[i]; i++)
    if (a[i] == '\n') line++, start = i + 1;
  int la = (int)strcspn(a + start, "\n"), lb = (int)strcspn(b + start, "\n");
  cr_assert_fail(
      "%s: stdout differs with ebb (%zu vs %zu bytes) at line %zu:\n  without: %.*s\n  with:    %.*s", name,
      na, nb, line, la > 300 ? 300 : la, a + start, lb > 300 ? 300 : lb, b + start);
}

/* Proof that ebb served the run: some process of it printed the EBB_STATS line
 * and had mapped memory through ebb (mmap=N, N > 0). A program that closes its
 * stderr before exit cannot print that line; its scenario proves the preload by
 * /proc/PID/maps instead and prints a line starting `ebb maps:` (sort.sh). */
static void dr_assert_served(const char *name) {
  char *err = dr_slurp("ebb", "err", NULL);
  cr_assert_not_null(err);
  int lines = 0, served = 0, maps = 0;
  for (char *l = err; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    maps += strncmp(l, "ebb maps:", 9) == 0;
    if (strncmp(l, "ebb stats:", 10) != 0) continue;
    lines++;
    const char *m = strstr(l, " mmap=");
    if (m && m < strchrnul(l, '\n') && strtoull(m + 6, NULL, 10) > 0) served++;
  }
  if (maps) return;
  cr_assert_gt(lines, 0, "%s: no 'ebb stats:' line on stderr: the programs did not run on ebb", name);
  cr_assert_gt(served, 0, "%s: %d 'ebb stats:' lines, none with mmap>0: ebb served no memory", name, lines);
}

/* The common shape: baseline, then preloaded; same stdout; ebb really used. */
static void dr_scenario(const char *name) {
  dr_init();
  dr_assert_ran(name, "base", dr_run(name, "base"));
  dr_assert_ran(name, "ebb", dr_run(name, "ebb"));
  size_t na, nb;
  char *a = dr_slurp("base", "out", &na), *b = dr_slurp("ebb", "out", &nb);
  cr_assert(a && b, "%s: missing stdout files", name);
  cr_assert_gt(na, 0, "%s: the scenario printed nothing", name);
  dr_assert_same(name, a, na, b, nb);
  dr_assert_served(name);
}

TestSuite(dropin, .fini = dr_fini, .timeout = 2 * DR_TIMEOUT + 30);

/* The preload really replaces malloc: inside python3, the symbol malloc is
 * ebb's and python's own objects are ebb blocks (tests/dropin/maps.sh). */
Test(dropin, malloc_is_ebb) {
  dr_init();
  dr_assert_ran("maps", "ebb", dr_run("maps", "ebb"));
  char *out = dr_slurp("ebb", "out", NULL), real[PATH_MAX], want[PATH_MAX + 64];
  cr_assert_not_null(realpath(dr_lib, real));
  dr_fmt(want, sizeof want, "mapped %s\nmalloc 1\nstr 1\n", real);
  cr_assert_str_eq(out, want, "python3 under LD_PRELOAD: got\n%s\nwanted\n%s", out, want);
  dr_assert_served("maps");
}

/* dicts, strings, sets, megabyte strings, threads; PYTHONMALLOC=malloc */
Test(dropin, python_churn) { dr_scenario("python"); }

/* test_dict, test_set, test_json from CPython's own suite */
Test(dropin, python_regrtest) {
  dr_scenario("python_regrtest");
  char *out = dr_slurp("ebb", "out", NULL);
  cr_assert(strncmp(out, "status 0\n", 9) == 0, "python3 -m test failed with ebb:\n%s\nlog ends:\n%s", out,
            dr_tail("ebb"));
}

/* init, add, commit 600 files in three commits, log, gc --aggressive, fsck */
Test(dropin, git) { dr_scenario("git"); }

/* 100k rows inserted, indexed, queried, updated, vacuumed */
Test(dropin, sqlite3) { dr_scenario("sqlite"); }

/* hash and string churn */
Test(dropin, perl) { dr_scenario("perl"); }

/* 2000 generated functions at -O1; the object file must be bit-identical */
Test(dropin, gcc) { dr_scenario("gcc"); }

/* 300k lines, four orderings, one spilling to temporary files */
Test(dropin, sort) { dr_scenario("sort"); }
