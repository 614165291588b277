/* helpers.c — the out-of-line test helpers declared in helpers.h: /proc readers,
 * running shell commands and compilers with their output captured, symbol
 * lookup restricted to libebb, and forked misuse children.
 * Used by every integration test file except test_api.c built alone. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers.h"
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

const char *repo_root(void) {
  static char root[PATH_MAX];
  if (root[0]) return root;
  ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
  if (n <= 0) return strcpy(root, ".");
  root[n] = 0;
  for (int up = 0; up < 3; up++) { /* drop /integration, /tests, /build */
    char *slash = strrchr(root, '/');
    if (!slash) return strcpy(root, ".");
    *slash = 0;
  }
  return root;
}

const char *tmp_dir(void) {
  static char dir[PATH_MAX];
  if (dir[0]) return dir;
  snprintf(dir, sizeof dir, "%s/build/tests/tmp", repo_root());
  mkdir(dir, 0755); /* build/tests exists: this binary lives there */
  return dir;
}

/* Appends what is readable on fd to buf (keeping it NUL-terminated); 0 at EOF. */
static int drain(int fd, char *buf, size_t cap, size_t *len) {
  char tmp[4096];
  ssize_t n = read(fd, tmp, sizeof tmp);
  if (n < 0 && errno == EINTR) return 1;
  if (n <= 0) return 0;
  size_t room = cap - 1 - *len, take = (size_t)n < room ? (size_t)n : room;
  memcpy(buf + *len, tmp, take);
  *len += take;
  buf[*len] = 0;
  return 1;
}

int run_cmd(struct cmd_result *r, const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  r->out[0] = r->err[0] = 0;
  r->status = -1;

  int po[2], pe[2];
  if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  char full[8400];
  snprintf(full, sizeof full, "cd '%s' && %s", repo_root(), cmd);
  char *argv[] = {"sh", "-c", full, NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(po[1]);
  close(pe[1]);
  if (rc) {
    close(po[0]);
    close(pe[0]);
    return -1;
  }
  size_t lo = 0, le = 0;
  struct pollfd fds[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
  int open_fds = 2;
  while (open_fds) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int more = i == 0 ? drain(fds[i].fd, r->out, sizeof r->out, &lo)
                        : drain(fds[i].fd, r->err, sizeof r->err, &le);
      if (!more) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR) {
  }
  return r->status;
}

const char *describe_status(int status) {
  static char buf[128];
  if (status == -1) snprintf(buf, sizeof buf, "could not be started");
  else if (WIFEXITED(status)) snprintf(buf, sizeof buf, "exited with %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, sizeof buf, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else snprintf(buf, sizeof buf, "status 0x%x", status);
  return buf;
}

int compile_program(struct cmd_result *r, const char *compiler, const char *src, const char *out,
                    const char *flags_before, const char *flags_after) {
  int cxx = strstr(src, ".cpp") != NULL;
  if (!compiler) compiler = getenv(cxx ? "CXX" : "CC");
  if (!compiler || !*compiler) compiler = cxx ? "c++" : "cc";
  /* Unique temporary name, then rename: tests run in parallel (--jobs). */
  int st = run_cmd(r, "%s %s -Iinclude tests/programs/%s -o '%s/%s.%d' %s && mv -f '%s/%s.%d' '%s/%s'",
                   compiler, flags_before ? flags_before : "", src, tmp_dir(), out, (int)getpid(),
                   flags_after ? flags_after : "", tmp_dir(), out, (int)getpid(), tmp_dir(), out);
  return st;
}

long heap_kb(void) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -2;
  char line[512];
  long kb = -1;
  int in_heap = 0;
  while (fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    /* A mapping header starts with a hex range "lo-hi "; field lines do not. */
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in_heap = n >= 6 && strcmp(line + n - 6, "[heap]") == 0;
      continue;
    }
    long v;
    if (in_heap && sscanf(line, "Size: %ld kB", &v) == 1) kb = (kb < 0 ? 0 : kb) + v;
  }
  fclose(f);
  return kb;
}

size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

void *ebb_symbol(const char *name, const char **where) {
  void *sym = dlsym(RTLD_DEFAULT, name);
  *where = "nowhere";
  if (!sym) return NULL;
  Dl_info info;
  if (!dladdr(sym, &info) || !info.dli_fname) {
    *where = "an unknown object";
    return NULL;
  }
  *where = info.dli_fname;
  return strstr(info.dli_fname, "libebb") ? sym : NULL;
}

void run_misuse_child(misuse_fn *fn, struct child_result *r) {
  volatile uintptr_t *shared =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int p[2];
  r->status = -1;
  r->expected = 0;
  r->err[0] = 0;
  if (shared == MAP_FAILED || pipe(p)) return;
  *shared = 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    dup2(p[1], 2);
    close(p[1]);
    alarm(20); /* a hang (deadlock on a corrupt heap) shows as SIGALRM */
    fn(shared);
    _exit(0); /* the misuse went unnoticed */
  }
  close(p[1]);
  size_t len = 0;
  if (pid > 0)
    while (drain(p[0], r->err, sizeof r->err, &len)) {
    }
  close(p[0]);
  if (pid > 0)
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR) {
    }
  r->expected = *shared;
  munmap((void *)shared, 4096);
}

void expect_ctor_thread_got_the_background_thread(const char *out) {
  int threads = 0;
  double rss = -1;
  cr_assert_eq(sscanf(out, "threads=%d rss_mib=%lf", &threads, &rss), 2, "ctor_thread said: %s", out);
  cr_expect_eq(threads, 3, "no background thread (main, the worker and it make 3): %s", out);
  cr_expect_lt(rss, 40, "the worker's freed 100 MiB stayed resident: %s", out);
}
