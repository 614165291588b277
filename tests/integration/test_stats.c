/* test_stats.c — EBB_STATS, EBB_VERBOSE and the option warnings as a program
 * sees them: small C programs written and compiled at run time (into
 * build/tests/tmp), run with LD_PRELOAD=build/libebb.so or linked with
 * build/libebb.a, their stderr checked. A program whose first (or only)
 * allocation is large gets its settings, warnings and stats; EBB_STATS=json
 * parses with python3's json module and agrees with ebb_stats; EBB_STATS=2
 * lists the size classes the program used. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <malloc.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(stats_env, .timeout = 120);

static struct cmd_result r; /* large: not on the stack */

/* The only allocation is a 64 MiB block; no stdio. The pointer escapes
 * through a volatile so that the compiler keeps the malloc. */
static const char big_src[] = "#include <stdlib.h>\n"
                              "#include <string.h>\n"
                              "char *volatile sink;\n"
                              "int main(void) {\n"
                              "  char *p = malloc((size_t)64 << 20);\n"
                              "  if (!p) return 1;\n"
                              "  memset(p, 1, 4096);\n"
                              "  sink = p;\n"
                              "  return sink[100] != 1;\n"
                              "}\n";

/* The same from a constructor that runs before ebb's own (static link, same
 * priority, earlier in the link): ebb must read its settings lazily, there. */
static const char ctor_src[] = "#include <stdlib.h>\n"
                               "#include <string.h>\n"
                               "#include <unistd.h>\n"
                               "static char *volatile p;\n"
                               "__attribute__((constructor(101))) static void first(void) {\n"
                               "  write(2, \"program constructor\\n\", 20);\n"
                               "  p = malloc((size_t)64 << 20);\n"
                               "  if (p) memset(p, 1, 4096);\n"
                               "}\n"
                               "int main(void) { return !p || p[100] != 1; }\n";

/* Known live blocks: 1000 x 48 bytes, 10 x 5000, 3 x 80000, one of 64 MiB;
 * then prints its own ebb_stats (ebb_stats_sized, found with dlsym: the
 * ebb_stats symbol fills only 0.1's fields) as key=value lines. */
static const char mix_src[] =
    "#define _GNU_SOURCE\n"
    "#include <dlfcn.h>\n"
    "#include <malloc.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#include \"ebb.h\"\n"
    "static void *keep[2000];\n"
    "int main(int argc, char **argv) {\n"
    "  int n = 0;\n"
    "  for (int i = 0; i < 1000; i++) keep[n++] = malloc(48);\n"
    "  for (int i = 0; i < 10; i++) keep[n++] = malloc(5000);\n"
    "  for (int i = 0; i < 3; i++) keep[n++] = malloc(80000);\n"
    "  for (int i = 0; i < 4; i++) keep[n++] = malloc(300000);\n" /* one-block pages, colored */
    "  keep[n++] = malloc((size_t)64 << 20);\n"
    "  for (int i = 0; i < n; i++) if (!keep[i]) return 1;\n"
    "  memset(keep[n - 1], 7, 1 << 20);\n"
    "  if (argc > 1 && strcmp(argv[1], \"malloc_stats\") == 0) { malloc_stats(); return 0; }\n"
    "  void (*st)(struct ebb_stats *, size_t) =\n"
    "      (void (*)(struct ebb_stats *, size_t))dlsym(RTLD_DEFAULT, \"ebb_stats_sized\");\n"
    "  if (!st) return 2;\n"
    "  struct ebb_stats s;\n"
    "  st(&s, sizeof s);\n"
    "  printf(\"live_requested=%zu\\nallocated=%zu\\nactive=%zu\\nmapped=%zu\\narenas=%llu\\n\"\n"
    "         \"peak_allocated=%zu\\nthreads=%llu\\nmmap_calls=%llu\\n\",\n"
    "         (size_t)(1000 * 48 + 10 * 5000 + 3 * 80000 + 4 * 300000) + ((size_t)64 << 20), s.allocated, s.active,\n"
    "         s.mapped, (unsigned long long)s.arenas, s.peak_allocated, (unsigned long long)s.threads,\n"
    "         (unsigned long long)s.mmap_calls);\n"
    "  fflush(stdout);\n"
    "  return 0;\n"
    "}\n";

/* Writes src to build/tests/tmp/<name>.c and compiles it (extra: flags after
 * the source, e.g. build/libebb.a). Names are unique per process: tests run
 * in parallel. Returns the binary's path. */
static const char *build(const char *name, const char *src, const char *extra) {
  static char bin[4096];
  char path[4096];
  snprintf(path, sizeof path, "%s/stats-%s-%d.c", tmp_dir(), name, (int)getpid());
  snprintf(bin, sizeof bin, "%s/stats-%s-%d", tmp_dir(), name, (int)getpid());
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  fputs(src, f);
  fclose(f);
  const char *cc = getenv("CC");
  int st = run_cmd(&r, "%s -std=gnu11 -O1 -Wall -Iinclude '%s' -o '%s' %s", cc && *cc ? cc : "cc", path, bin,
                   extra ? extra : "-ldl");
  cr_assert_eq(st, 0, "compiling %s: %s\n%s%s", path, describe_status(st), r.out, r.err);
  unlink(path);
  return bin;
}

#define PRELOAD "LD_PRELOAD='%s/build/libebb.so' "
/* Every run starts from a clean slate: no EBB_* from whoever runs the tests. */
#define CLEAN "env $(env | sed -n 's/^\\(EBB_[A-Za-z0-9_]*\\)=.*/-u \\1/p') "

static void assert_ran(int st, const char *what) {
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s\nstdout:\n%s\nstderr:\n%s", what,
            describe_status(st), r.out, r.err);
}

/* The number after "key=" on the "ebb stats:" line. */
static unsigned long long raw_field(const char *err, const char *key) {
  const char *line = strstr(err, "ebb stats:");
  cr_assert_not_null(line, "no 'ebb stats:' line in:\n%s", err);
  char k[64];
  snprintf(k, sizeof k, " %s=", key);
  const char *p = strstr(line, k);
  cr_assert_not_null(p, "no %s in %s", k, line);
  return strtoull(p + strlen(k), NULL, 10);
}

static void assert_big_summary(const char *err, const char *what) {
  cr_assert_not_null(strstr(err, "ebb " EBB_VERSION_STRING " stats, pid "), "%s: no summary:\n%s", what, err);
  cr_assert_not_null(strstr(err, "\n  allocated   64.0 MiB   64.0 MiB"), "%s:\n%s", what, err);
  cr_assert_not_null(strstr(err, "\n  resident "), "%s:\n%s", what, err);
  cr_assert_not_null(strstr(err, "\n  calls      mmap "), "%s:\n%s", what, err);
  cr_assert_geq(raw_field(err, "allocated"), 64 * MiB, "%s:\n%s", what, err);
  cr_assert_geq(raw_field(err, "mapped"), 64 * MiB, "%s:\n%s", what, err);
  cr_assert_gt(raw_field(err, "mmap"), 0, "%s:\n%s", what, err);
}

Test(stats_env, only_a_large_block_still_gets_stats_and_warnings) {
  const char *bin = build("big", big_src, "");
  int st = run_cmd(&r, CLEAN "EBB_STATS=1 " PRELOAD "'%s'", repo_root(), bin);
  assert_ran(st, "EBB_STATS=1 big");
  assert_big_summary(r.err, "EBB_STATS=1");
  st = run_cmd(&r, CLEAN "EBB_DECAY_MS=abc " PRELOAD "'%s'", repo_root(), bin);
  assert_ran(st, "EBB_DECAY_MS=abc big");
  cr_assert_str_eq(
      r.err,
      "ebb: warning: EBB_DECAY_MS=abc is not valid (milliseconds, 0-86400000); keeping the default 250\n");
  unlink(bin);
}

/* A daemon's habits: close every descriptor above stderr, then open its own
 * files, which expect to start at 3. ebb's duplicate of stderr must neither
 * shift that numbering nor, once closed and reused, send the stats into the
 * program's file (found by a probe: they went into its data file). */
static const char daemon_src[] = "#include <fcntl.h>\n"
                                 "#include <stdio.h>\n"
                                 "#include <stdlib.h>\n"
                                 "#include <string.h>\n"
                                 "#include <unistd.h>\n"
                                 "int main(int argc, char **argv) {\n"
                                 "  free(malloc(100));\n"
                                 "  int first = open(\"/dev/null\", O_RDONLY);\n"
                                 "  close(first);\n"
                                 "  for (int fd = 3; fd < 1024; fd++) close(fd);\n"
                                 "  int d = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);\n"
                                 "  if (d < 0 || write(d, \"data\\n\", 5) != 5) return 2;\n"
                                 "  printf(\"first=%d data=%d\\n\", first, d);\n"
                                 "  return 0;\n"
                                 "}\n";

/* Runs the daemon with EBB_STATS=1 and `redirect` after its command line;
 * `fds` must be in what it prints, and its data file must hold its own line
 * only. */
static void daemon_case(const char *redirect, const char *fds, const char *name) {
  const char *bin = build("daemon", daemon_src, "");
  char data[4096];
  snprintf(data, sizeof data, "%s/stats-%s-%d.data", tmp_dir(), name, (int)getpid());
  int st = run_cmd(&r, CLEAN "EBB_STATS=1 " PRELOAD "'%s' '%s' %s", repo_root(), bin, data, redirect);
  assert_ran(st, "EBB_STATS=1 daemon");
  cr_assert_not_null(strstr(r.out, fds), "want \"%s\" from the program: %s", fds, r.out);
  FILE *f = fopen(data, "r");
  cr_assert_not_null(f);
  char got[4096] = "";
  size_t n = fread(got, 1, sizeof got - 1, f);
  fclose(f);
  got[n] = 0;
  cr_assert_str_eq(got, "data\n", "the data file holds:\n%s", got);
  unlink(data);
  unlink(bin);
}

Test(stats_env, stats_stay_out_of_the_programs_files) {
  daemon_case("", "first=3 data=3", "daemon"); /* the program's descriptors start at 3 */
  cr_assert_not_null(strstr(r.err, "ebb stats: mapped="), "stderr is still stderr: the stats go there\n%s", r.err);
}

/* The same program started with stderr closed (2>&-): its data file is then
 * fd 2, and the stats go nowhere (they were appended to the data). */
Test(stats_env, stats_stay_out_of_the_programs_files_when_stderr_was_closed) {
  daemon_case("2>&-", "data=2", "daemon-closed");
}

/* Stats at exit into a pipe whose reader has gone (`prog 2>&1 | head -1`
 * once head has quit): the program still exits 0, not by SIGPIPE (found by a
 * probe), and a warning at start-up into such a pipe does not end it either.
 * The subshell starts the program once `true`, the pipe's only reader, has
 * exited, and leaves its status in a file. */
Test(stats_env, stats_into_a_broken_pipe_leave_the_exit_status_alone) {
  const char *bin = build("pipe", big_src, "");
  char status[4096];
  snprintf(status, sizeof status, "%s/stats-pipe-%d.status", tmp_dir(), (int)getpid());
  const char *envs[] = {"EBB_STATS=1", "EBB_STATS=json", "EBB_STATS=2 EBB_DECAY_MS=soon"};
  for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
    unlink(status);
    int st = run_cmd(&r, "( sleep 0.3; " CLEAN "%s " PRELOAD "'%s'; echo $? > '%s' ) 2>&1 >/dev/null | true; sleep 0.5",
                     envs[i], repo_root(), bin, status);
    cr_assert_eq(st, 0, "the pipeline: %s", describe_status(st));
    FILE *f = fopen(status, "r");
    cr_assert_not_null(f, "%s: the program left no status", envs[i]);
    int code = -1;
    cr_assert_eq(fscanf(f, "%d", &code), 1);
    fclose(f);
    cr_assert_eq(code, 0, "%s, stderr a pipe with no reader: the program exited with %d (141: SIGPIPE)", envs[i],
                 code);
  }
  unlink(status);
  unlink(bin);
}

Test(stats_env, a_large_first_allocation_before_ebbs_constructor) {
  char lib[4096];
  snprintf(lib, sizeof lib, "'%s/build/libebb.a' -pthread", repo_root());
  const char *bin = build("ctor", ctor_src, lib);
  int st = run_cmd(&r, CLEAN "EBB_STATS=1 EBB_DECAY_MS=abc EBB_VERBOSE=1 '%s'", bin);
  assert_ran(st, "the static program");
  /* The program's constructor ran first, so what ebb printed at start-up
   * comes after its line: ebb read its settings on the large malloc. */
  const char *ctor = strstr(r.err, "program constructor\n"),
             *warn = strstr(r.err, "ebb: warning: EBB_DECAY_MS=abc");
  cr_assert(ctor && warn, "%s", r.err);
  cr_assert_lt(ctor, warn, "the test is meant to run the program's constructor first:\n%s", r.err);
  cr_assert_not_null(strstr(r.err, "ebb: EBB_STATS=1 (environment)\n"), "%s", r.err);
  assert_big_summary(r.err, "static, constructor");
  unlink(bin);
}

Test(stats_env, verbose_lists_the_settings_once) {
  const char *bin = build("big", big_src, "");
  int st =
      run_cmd(&r, CLEAN "EBB_VERBOSE=1 EBB_DIRTY_MAX=0%% EBB_PURGE=free " PRELOAD "'%s'", repo_root(), bin);
  assert_ran(st, "EBB_VERBOSE=1 big");
  char want[1024];
  snprintf(want, sizeof want,
           "ebb: EBB_DECAY_MS=250 (default)\n"
           "ebb: EBB_DIRTY_MAX=0%% (environment)\n"
           "ebb: EBB_BACKGROUND=auto (default)\n"
           "ebb: EBB_STATS=0 (default)\n"
           "ebb: EBB_PURGE=free (environment)\n"
           "ebb: EBB_VERBOSE=1 (environment)\n");
  cr_assert_eq(strncmp(r.err, "ebb: version " EBB_VERSION_STRING ", pid ", 20), 0, "%s", r.err);
  const char *rest = strchr(r.err, '\n') + 1;
  cr_assert_str_eq(rest, want);
  unlink(bin);
}

Test(stats_env, a_misspelt_variable_names_the_setting) {
  const char *bin = build("big", big_src, "");
  int st = run_cmd(&r, CLEAN "EBB_STAT=1 " PRELOAD "'%s'", repo_root(), bin);
  assert_ran(st, "EBB_STAT=1 big");
  cr_assert_str_eq(r.err,
                   "ebb: warning: EBB_STAT=1 is not an ebb setting (did you mean EBB_STATS?); ignored\n");
  unlink(bin);
}

Test(stats_env, json_parses_and_agrees_with_ebb_stats) {
  const char *bin = build("mix", mix_src, "-ldl");
  char out[4096], err[4096];
  snprintf(out, sizeof out, "%s/stats-json-%d.out", tmp_dir(), (int)getpid());
  snprintf(err, sizeof err, "%s/stats-json-%d.err", tmp_dir(), (int)getpid());
  int st = run_cmd(&r, CLEAN "EBB_STATS=json " PRELOAD "'%s' >'%s' 2>'%s'", repo_root(), bin, out, err);
  assert_ran(st, "EBB_STATS=json mix");
  /* python3 checks the JSON; it prints OK or what is wrong. */
  static const char check[] =
      "import json, sys\n"
      "err = open(sys.argv[2]).read()\n"
      "lines = [l for l in err.splitlines() if l.startswith('{')]\n"
      "assert len(lines) == 1 and err.endswith('}\\n'), 'one JSON line expected: %r' % err\n"
      "d = json.loads(lines[0])\n"
      "prog = dict(l.split('=') for l in open(sys.argv[1]).read().split())\n"
      "prog = {k: int(v) for k, v in prog.items()}\n"
      "keys = ['mapped', 'active', 'dirty', 'purged', 'allocated', 'mmap_calls', 'munmap_calls',\n"
      "        'madvise_calls', 'arenas', 'peak_mapped', 'peak_active', 'peak_dirty', 'peak_allocated',\n"
      "        'resident', 'threads', 'pid', 'dirty_limit']\n"
      "for k in keys: assert type(d[k]) is int and d[k] >= 0, k\n"
      "assert d['version'] == '" EBB_VERSION_STRING "', d['version']\n"
      "for k in ['mapped', 'active', 'dirty', 'allocated']:\n"
      "    assert d['peak_' + k] >= d[k], (k, d)\n"
      "assert d['allocated'] >= prog['live_requested'], (d['allocated'], prog)\n"
      "assert d['allocated'] <= d['active'] <= d['mapped'], d\n"
      "assert d['peak_allocated'] >= prog['allocated'], (d, prog)\n"
      "assert abs(d['allocated'] - prog['allocated']) < (1 << 20), (d['allocated'], prog)\n"
      "assert d['arenas'] == prog['arenas'] >= 1 and d['threads'] == prog['threads'] >= 1, (d, prog)\n"
      "assert d['mmap_calls'] >= prog['mmap_calls'] > 0, (d, prog)\n"
      "assert d['resident'] >= (1 << 20), d['resident']\n"
      "assert d['dirty_limit'] >= (256 << 20), d['dirty_limit']  # the default, auto: at least its room\n"
      "by_size = {c['size']: c for c in d['classes']}\n"
      "for c in d['classes']:\n"
      "    assert c['pages'] > 0, c\n"
      "    # a colored one-block page's block gives up to 4 KiB of its class's size to the color\n"
      "    assert c['blocks'] * (c['size'] - 4096) <= c['live_bytes'] <= c['blocks'] * c['size'], c\n"
      "    assert c['waste'] == c['span_bytes'] - c['live_bytes'], c\n"
      "# the classes' live bytes are what allocated counts, the 64 MiB block aside (found by a probe:\n"
      "# the table counted each colored block at its class's size)\n"
      "assert sum(c['live_bytes'] for c in d['classes']) + (64 << 20) == d['allocated'], d\n"
      "for size, n in [(48, 1000), (5120, 10), (81920, 3), (327680, 4)]:\n"
      "    assert size in by_size and by_size[size]['blocks'] >= n, (size, d['classes'])\n"
      "print('OK')\n";
  char script[4096];
  snprintf(script, sizeof script, "%s/stats-json-%d.py", tmp_dir(), (int)getpid());
  FILE *f = fopen(script, "w");
  cr_assert_not_null(f);
  fputs(check, f);
  fclose(f);
  st = run_cmd(&r, "python3 '%s' '%s' '%s'", script, out, err);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strncmp(r.out, "OK", 2) == 0,
            "python3 json check %s:\n%s%s", describe_status(st), r.out, r.err);
  unlink(script);
  unlink(out);
  unlink(err);
  unlink(bin);
}

/* The row of class `size` in the EBB_STATS=2 table, or NULL. */
static const char *class_row(const char *err, size_t size) {
  const char *t = strstr(err, "       size  pages  live blocks  live bytes  span bytes       waste\n");
  if (!t) return NULL;
  char want[32];
  snprintf(want, sizeof want, "\n  %9zu ", size);
  return strstr(t - 1, want);
}

Test(stats_env, classes_table_lists_the_classes_used) {
  const char *bin = build("mix", mix_src, "-ldl");
  int st = run_cmd(&r, CLEAN "EBB_STATS=2 " PRELOAD "'%s'", repo_root(), bin);
  assert_ran(st, "EBB_STATS=2 mix");
  cr_assert_not_null(strstr(r.err, "\n  allocated "), "the summary comes first:\n%s", r.err);
  size_t sizes[] = {48, 5120, 81920};
  unsigned long long at_least[] = {1000, 10, 3};
  for (int i = 0; i < 3; i++) {
    const char *row = class_row(r.err, sizes[i]);
    cr_assert_not_null(row, "no row for class %zu in:\n%s", sizes[i], r.err);
    unsigned long long pages, blocks;
    cr_assert_eq(sscanf(row + 12, "%llu %llu", &pages, &blocks), 2, "%.80s", row);
    cr_assert(pages >= 1 && blocks >= at_least[i], "class %zu: %.80s", sizes[i], row + 1);
  }
  cr_assert_not_null(strstr(r.err, "\n      total "), "%s", r.err);
  cr_assert_geq(raw_field(r.err, "allocated"), 64 * MiB);
  unlink(bin);
}

Test(stats_env, malloc_stats_prints_the_summary) {
  const char *bin = build("mix", mix_src, "-ldl");
  int st = run_cmd(&r, CLEAN PRELOAD "'%s' malloc_stats", repo_root(), bin);
  assert_ran(st, "mix malloc_stats");
  cr_assert_eq(strncmp(r.err, "ebb " EBB_VERSION_STRING " stats, pid ", 20), 0, "%s", r.err);
  cr_assert_null(strstr(r.err, "size classes"), "%s", r.err);
  cr_assert_geq(raw_field(r.err, "allocated"), 64 * MiB);
  unlink(bin);
}

/* malloc_info(0, fp): the counters as XML on fp's descriptor; what it cannot
 * write to (a stream with no descriptor) is an error, not a silent 0 (found by
 * a probe: open_memstream got nothing and the call said it had succeeded). */
extern int malloc_info(int options, FILE *fp);
Test(stats_env, malloc_info_writes_xml_or_says_why_not) {
  void *keep = malloc(hide_size(4096));
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  fputs("before\n", f); /* buffered: flushed first, so it comes first */
  cr_assert_eq(malloc_info(0, f), 0);
  rewind(f);
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  cr_assert_eq(strncmp(buf, "before\n<malloc version=\"ebb-1\">\n", 32), 0, "%s", buf);
  cr_assert_not_null(strstr(buf, "<total type=\"allocated\" size=\""), "%s", buf);
  cr_assert_not_null(strstr(buf, "</malloc>\n"), "%s", buf);
  errno = 0;
  cr_assert_eq(malloc_info(1, stderr), -1);
  cr_assert_eq(errno, EINVAL);
  char *mem = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&mem, &len);
  cr_assert_not_null(m);
  errno = 0;
  cr_assert_eq(malloc_info(0, m), -1);
  cr_assert_eq(errno, EBADF);
  fclose(m);
  free(mem);
  free(keep);
}

Test(stats_env, stats_print_levels_in_process) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  void *keep = malloc(hide_size(48));
  ebb_stats_print(p[1], 0);
  ebb_stats_print(p[1], -1);
  ebb_stats_print(p[1], EBB_STATS_JSON + 1); /* no such level: nothing (it printed the summary) */
  ebb_stats_print(p[1], 100);
  ebb_stats_print(p[1], EBB_STATS_JSON);
  close(p[1]);
  static char buf[1 << 16];
  size_t n = 0;
  ssize_t k;
  while ((k = read(p[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)k;
  close(p[0]);
  buf[n] = 0;
  cr_assert(n > 2 && buf[0] == '{' && buf[n - 1] == '\n' && !memchr(buf, '\n', n - 1),
            "levels 0, -1, 4 and 100 write nothing, json one line:\n%s", buf);
  struct ebb_stats s;
  ebb_stats(&s);
  cr_assert_geq(s.peak_allocated, s.allocated);
  cr_assert_geq(s.peak_mapped, s.mapped);
  cr_assert_geq(s.peak_active, s.active);
  cr_assert_geq(s.threads, 1);
  cr_assert_gt(s.resident, 0);
  free(keep);
}

/* mallinfo2 is shaped as glibc's: a large block is in hblkhd and hblks, not
 * in arena or uordblks, so arena + hblkhd is all that ebb mapped and
 * uordblks + hblkhd what live blocks take. hblkhd was the whole mapping, as
 * arena was (arena + hblkhd counted it twice), and hblks 0 (found by a probe). */
Test(stats_env, mallinfo2_counts_large_blocks_as_glibc_does) {
  void *small = malloc(hide_size(100));
  struct mallinfo2 m0 = mallinfo2();
  char *big = malloc(hide_size(10 * MiB));
  cr_assert_not_null(big);
  struct mallinfo2 m1 = mallinfo2();
  struct ebb_stats s;
  ebb_stats(&s);
  cr_assert_eq(m1.hblks, m0.hblks + 1, "hblks %zu -> %zu", m0.hblks, m1.hblks);
  cr_assert_geq(m1.hblkhd, m0.hblkhd + 10 * MiB, "hblkhd %zu -> %zu", m0.hblkhd, m1.hblkhd);
  cr_assert_lt(m1.uordblks, m0.uordblks + MiB, "uordblks %zu -> %zu", m0.uordblks, m1.uordblks);
  size_t total = m1.arena + m1.hblkhd;
  cr_assert(total + MiB > s.mapped && total < s.mapped + MiB, "arena %zu + hblkhd %zu, mapped %zu", m1.arena,
            m1.hblkhd, s.mapped);
  cr_assert_geq(m1.uordblks + m1.hblkhd + MiB, s.allocated, "uordblks %zu + hblkhd %zu, allocated %zu",
                m1.uordblks, m1.hblkhd, s.allocated);
  cr_assert_eq(m1.fordblks, m1.arena - m1.uordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo(); /* the int-sized one, the same figures */
#pragma GCC diagnostic pop
  cr_assert_eq((size_t)old.hblks, m1.hblks);
  free(big);
  struct mallinfo2 m2 = mallinfo2();
  cr_assert_eq(m2.hblks, m0.hblks);
  cr_assert_eq(m2.hblkhd, m0.hblkhd);
  free(small);
}

/* The stats calls are no cancellation points (glibc's mallinfo2 is none): a
 * thread with a cancel pending goes through all of them and is cancelled at
 * its own pthread_testcancel, and leaves no descriptor open. Before, ebb read
 * /proc/self/statm with libc's open and read, where the cancel was taken with
 * the descriptor open (found by a probe: 1,636 descriptors after 2,000
 * threads cancelled in a mallinfo2 loop). */
static int stats_fd; /* where the thread prints */
static int stats_reached;

static void *stats_then_testcancel(void *arg) {
  (void)arg;
  pthread_cancel(pthread_self()); /* pending: the default deferred type */
  struct ebb_stats s;
  ebb_stats(&s);
  struct mallinfo2 mi = mallinfo2();
  ebb_stats_print(stats_fd, EBB_STATS_SUMMARY);
  ebb_stats_print(stats_fd, EBB_STATS_JSON);
  malloc_trim(0);
  stats_reached = s.resident > 0 && mi.arena > 0;
  pthread_testcancel();
  return NULL;
}

static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 1024; fd++) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

Test(stats_env, stats_calls_are_no_cancellation_points) {
  stats_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  cr_assert_geq(stats_fd, 0);
  int before = open_fds();
  for (int i = 0; i < 20; i++) {
    stats_reached = 0;
    pthread_t t;
    void *rv = NULL;
    cr_assert_eq(pthread_create(&t, NULL, stats_then_testcancel, NULL), 0);
    cr_assert_eq(pthread_join(t, &rv), 0);
    cr_assert_eq(rv, PTHREAD_CANCELED, "the thread was not cancelled at its pthread_testcancel");
    cr_assert(stats_reached, "a cancel pending was taken inside ebb_stats, mallinfo2, ebb_stats_print or "
                             "malloc_trim (or the stats read no resident size)");
  }
  cr_assert_eq(open_fds(), before, "descriptors open: %d before, %d after", before, open_fds());
  close(stats_fd);
}

/* What a large block's shrink leaves past its size is dirty until it goes
 * back, and then counts in purged (found by a probe: 3,096 such madvise calls
 * left purged at 0). 10 MiB shrunk to 9 MiB: the span's last 1 MiB is slack,
 * which ebb_trim purges; active and allocated stay at the block's size. */
Test(stats_env, a_large_blocks_purged_slack_counts_in_purged) {
  char *p = malloc(hide_size(10 * MiB));
  cr_assert_not_null(p);
  memset(p, 1, 10 * MiB);
  struct ebb_stats before, shrunk, after;
  ebb_stats(&before);
  char *q = realloc(p, hide_size(9 * MiB));
  ebb_stats(&shrunk);
  cr_assert_eq(q, p, "the shrink moved the block");
  cr_assert_geq(shrunk.dirty, before.dirty + 1 * MiB - 64 * KiB, "the tail counts as dirty");
  cr_assert_geq(before.allocated - shrunk.allocated, 1 * MiB - 64 * KiB, "allocated went from %zu to %zu",
                before.allocated, shrunk.allocated);
  ebb_trim();
  ebb_stats(&after);
  cr_assert_geq(after.purged - before.purged, 1 * MiB - 64 * KiB, "purged grew by %zu bytes at the trim",
                after.purged - before.purged);
  cr_assert_leq(after.active, shrunk.active, "active grew when the tail went back (ebb_trim may give back empty pages that count as active, never add)");
  cr_assert_leq(after.allocated, shrunk.allocated + 64 * KiB, "allocated grew from %zu to %zu when the tail went back",
                shrunk.allocated, after.allocated);
  free(q);
}

/* allocated <= active <= mapped in every sample, while two threads allocate
 * and free blocks of 1 B to 8 MiB (found by a probe: allocated above active in
 * 9 samples of 20,000). */
static atomic_int sampling_stop;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *sampling_churn(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *keep[512] = {0};
  while (!atomic_load_explicit(&sampling_stop, memory_order_relaxed)) {
    int i = (int)(rand_r(&seed) % 512);
    free(keep[i]);
    size_t sz = (size_t)1 << (rand_r(&seed) % 23);
    sz += (size_t)rand_r(&seed) % sz;
    keep[i] = malloc(sz);
    if (keep[i]) memset(keep[i], 1, sz < 64 ? sz : 64);
  }
  for (int i = 0; i < 512; i++) free(keep[i]);
  return NULL;
}

Test(stats_env, stats_hold_their_order_while_threads_allocate) {
  pthread_t t[2];
  atomic_store(&sampling_stop, 0);
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&t[i], NULL, sampling_churn, (void *)(uintptr_t)(i + 1)), 0);
  long bad = 0, n = 0;
  struct ebb_stats first_bad = {0};
  uint64_t t0 = now_ns();
  while (now_ns() - t0 < 2000000000ull && n < 20000) {
    struct ebb_stats st;
    ebb_stats(&st);
    n++;
    if (st.allocated > st.active || st.active > st.mapped || st.peak_allocated < st.allocated) {
      if (!bad) first_bad = st;
      bad++;
    }
  }
  atomic_store(&sampling_stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  cr_assert_eq(bad, 0, "%ld of %ld samples out of order; the first: mapped %zu active %zu allocated %zu peak_allocated %zu",
               bad, n, first_bad.mapped, first_bad.active, first_bad.allocated, first_bad.peak_allocated);
}

/* A library built with -DEBB_DEFAULT_<NAME> says so under EBB_VERBOSE=1, and a
 * percentage default is written OPT_PCT(n): the old negative form does not compile. */
Test(stats_env, build_time_defaults_are_named) {
  char lib[4096];
  snprintf(lib, sizeof lib, "%s/stats-built-%d.so", tmp_dir(), (int)getpid());
  const char *cc = getenv("CC");
  const char *flags =
      "-std=gnu11 -D_GNU_SOURCE -O0 -fPIC -shared -fvisibility=hidden -pthread -Iinclude -Iallocator";
  int st = run_cmd(
      &r, "%s %s -DEBB_DEFAULT_PURGE=1 '-DEBB_DEFAULT_DIRTY_MAX=OPT_PCT(25)' allocator/static.c -o '%s'",
      cc && *cc ? cc : "cc", flags, lib);
  cr_assert_eq(st, 0, "building the library: %s\n%s%s", describe_status(st), r.out, r.err);
  const char *bin = build("big", big_src, "");
  st = run_cmd(&r, CLEAN "EBB_VERBOSE=1 EBB_PURGE=dontneed LD_PRELOAD='%s' '%s'", lib, bin);
  assert_ran(st, "EBB_VERBOSE=1 big with build-time defaults");
  cr_assert_not_null(strstr(r.err, "\nebb: EBB_DIRTY_MAX=25% (build-time -DEBB_DEFAULT_DIRTY_MAX)\n"), "%s",
                     r.err);
  cr_assert_not_null(strstr(r.err, "\nebb: EBB_PURGE=dontneed (environment)\n"), "%s", r.err);
  cr_assert_not_null(strstr(r.err, "\nebb: EBB_DECAY_MS=250 (default)\n"), "%s", r.err);
  st = run_cmd(&r, "%s %s -DEBB_DEFAULT_DIRTY_MAX=-25 allocator/static.c -o '%s'", cc && *cc ? cc : "cc",
               flags, lib);
  cr_assert_neq(st, 0, "a negative EBB_DEFAULT_DIRTY_MAX compiled");
  cr_assert_not_null(strstr(r.err, "EBB_DEFAULT_DIRTY_MAX is bytes, or OPT_PCT(n) for n percent"), "%s",
                     r.err);
  unlink(lib);
  unlink(bin);
}

/* Whichever entry point a program calls first (here from a constructor that
 * runs before ebb's, in a static link) reads the options: what EBB_VERBOSE=1
 * prints at start-up comes out during that call. */
static const char first_src[] =
    "#include <malloc.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#include <unistd.h>\n"
    "#include \"ebb.h\"\n"
    "void *volatile sink;\n"
    "static void say(const char *s) { write(2, s, strlen(s)); }\n"
    "__attribute__((constructor(101))) static void first(void) {\n"
    "  const char *e = getenv(\"FIRST\");\n"
    "  size_t big = (size_t)64 << 20;\n"
    "  void *p = NULL;\n"
    "  struct ebb_stats st;\n"
    "  say(\"before\\n\");\n"
    "  if (!strcmp(e, \"malloc\")) sink = malloc(16);\n"
    "  else if (!strcmp(e, \"malloc_large\")) sink = malloc(big);\n"
    "  else if (!strcmp(e, \"calloc\")) sink = calloc(1, 16);\n"
    "  else if (!strcmp(e, \"calloc_large\")) sink = calloc(1, big);\n"
    "  else if (!strcmp(e, \"realloc\")) sink = realloc(NULL, 16);\n"
    "  else if (!strcmp(e, \"realloc_large\")) sink = realloc(NULL, big);\n"
    "  else if (!strcmp(e, \"aligned\")) sink = aligned_alloc(4096, 4096);\n"
    "  else if (!strcmp(e, \"aligned_large\")) sink = aligned_alloc((size_t)8 << 20, big);\n"
    "  else if (!strcmp(e, \"posix_memalign\")) { if (!posix_memalign(&p, 256, 100)) sink = p; }\n"
    "  else if (!strcmp(e, \"valloc\")) sink = valloc(100);\n"
    "  else if (!strcmp(e, \"arena\")) sink = ebb_arena_create();\n"
    "  else if (!strcmp(e, \"stats\")) ebb_stats(&st);\n"
    "  else if (!strcmp(e, \"mallinfo2\")) (void)mallinfo2();\n"
    "  say(\"after\\n\");\n"
    "}\n"
    "int main(void) { return 0; }\n";

Test(stats_env, every_entry_point_reads_the_options_first) {
  char lib[4096];
  snprintf(lib, sizeof lib, "'%s/build/libebb.a' -pthread", repo_root());
  const char *bin = build("first", first_src, lib);
  const char *entries[] = {"malloc",        "malloc_large", "calloc",        "calloc_large",   "realloc",
                           "realloc_large", "aligned",      "aligned_large", "posix_memalign", "valloc",
                           "arena",         "stats",        "mallinfo2"};
  for (size_t i = 0; i < ARRAY_LEN(entries); i++) {
    int st = run_cmd(&r, CLEAN "FIRST=%s EBB_VERBOSE=1 EBB_STAT=1 '%s'", entries[i], bin);
    assert_ran(st, entries[i]);
    const char *before = strstr(r.err, "before\n"), *warn = strstr(r.err, "ebb: warning: EBB_STAT=1"),
               *verbose = strstr(r.err, "ebb: EBB_VERBOSE=1 (environment)\n"),
               *after = strstr(r.err, "after\n");
    cr_assert(before && warn && verbose && after, "%s:\n%s", entries[i], r.err);
    cr_assert(before < warn && warn < verbose && verbose < after,
              "%s did not read the options when it ran first:\n%s", entries[i], r.err);
  }
  unlink(bin);
}
