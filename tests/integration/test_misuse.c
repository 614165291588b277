/* test_misuse.c — the misuse table (OpenBSD's malloc_errs.c, adapted): each
 * case must kill the process with SIGABRT and print exactly one line
 * "ebb: <function>(): <what> 0x<pointer>" naming the pointer passed.
 * Each case runs twice: in the test process with Criterion's .signal = SIGABRT,
 * and in a child forked here with stderr captured, to check the message. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(misuse, .timeout = 30);
TestSuite(misuse_msg, .timeout = 30);

/* Each case stores the pointer it is about to misuse in *e, then misuses it. */
#define SET(e, p) (*(e) = (uintptr_t)(p), (void *)hide_ptr((void *)(p)))

/* Double frees keep a neighbour of the same size live, so the page still serves
 * its class (docs/api.md: otherwise the second free may read "invalid pointer"). */
static void double_free_of_size(volatile uintptr_t *e, size_t size) {
  void *keep = malloc(size), *p = malloc(size);
  free(p);
  free(SET(e, p));
  free(keep);
}
static void double_free_small(volatile uintptr_t *e) { double_free_of_size(e, 32); }
static void double_free_medium(volatile uintptr_t *e) { double_free_of_size(e, 1000); }
static void double_free_100k(volatile uintptr_t *e) { double_free_of_size(e, 100000); }
/* Not the most recently freed block: a check of the list head is not enough. */
static void double_free_not_last(volatile uintptr_t *e) {
  void *keep = malloc(48), *p = malloc(48), *q = malloc(48), *r = malloc(48);
  free(p);
  free(q);
  free(r);
  free(SET(e, q));
  free(keep);
}
static void double_free_aligned(volatile uintptr_t *e) {
  void *keep = aligned_alloc(4096, 4096), *p = aligned_alloc(4096, 4096);
  free(p);
  free(SET(e, p));
  free(keep);
}
static void double_free_large(volatile uintptr_t *e) {
  void *p = malloc(64 * MiB);
  free(p);
  free(SET(e, p));
}
static void double_free_ebb_free(volatile uintptr_t *e) {
  void *keep = ebb_malloc(64), *p = ebb_malloc(64);
  ebb_free(p);
  ebb_free(SET(e, p));
  ebb_free(keep);
}
static void double_free_libc_alias(volatile uintptr_t *e) {
  const char *where;
  void (*libc_free)(void *) = (void (*)(void *))ebb_symbol("__libc_free", &where);
  if (!libc_free) _exit(3); /* not exported by libebb: no SIGABRT, the test fails */
  void *keep = malloc(64), *p = malloc(64);
  libc_free(p);
  libc_free(SET(e, p));
  free(keep);
}
/* C++: operator delete(void *) twice on what operator new(size_t) gave. */
static void double_delete(volatile uintptr_t *e) {
  const char *where;
  void *(*op_new)(size_t) = (void *(*)(size_t))ebb_symbol("_Znwm", &where);
  void (*op_delete)(void *) = (void (*)(void *))ebb_symbol("_ZdlPv", &where);
  if (!op_new || !op_delete) _exit(3);
  void *keep = op_new(64), *p = op_new(64);
  op_delete(p);
  op_delete(SET(e, p));
  op_delete(keep);
}
static void double_free_realloc(volatile uintptr_t *e) {
  void *keep = malloc(48), *p = malloc(48);
  free(p);
  void *q = realloc(SET(e, p), 96);
  (void)q;
  free(keep);
}
static void free_interior_small(volatile uintptr_t *e) {
  char *p = malloc(64);
  free(SET(e, p + 16));
}
static void free_interior_medium(volatile uintptr_t *e) {
  char *p = malloc(100000);
  free(SET(e, p + 4096));
}
static void free_interior_large(volatile uintptr_t *e) {
  char *p = malloc(8 * MiB);
  free(SET(e, p + 64 * KiB));
}
static void free_misaligned(volatile uintptr_t *e) {
  char *p = malloc(100);
  free(SET(e, p + 1));
}
static void free_stack(volatile uintptr_t *e) {
  char buf[64] __attribute__((aligned(16)));
  memset(buf, 0, sizeof buf);
  free(SET(e, buf));
}
static char static_block[256] __attribute__((aligned(64)));
static void free_static(volatile uintptr_t *e) { free(SET(e, static_block)); }
static void free_own_mmap_page(volatile uintptr_t *e) {
  char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  free(SET(e, m));
}
static void free_within_own_mmap(volatile uintptr_t *e) {
  char *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  free(SET(e, m + 4096 + 256));
}
/* Our own mapping at an address aligned like ebb's chunks (4 MiB), filled with
 * garbage where a chunk header would be. */
static void free_own_chunk_lookalike(volatile uintptr_t *e) {
  char *m = mmap(NULL, 12 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *c = align_up_ptr(m, 4 * MiB);
  memset(c, 0x41, 64 * KiB);
  free(SET(e, c + 64 * KiB));
}
/* A block of a destroyed first-class arena: its memory is gone. */
static void free_after_arena_destroy(volatile uintptr_t *e) {
  ebb_arena_t *a = ebb_arena_create();
  void *p = ebb_arena_malloc(a, 100);
  ebb_arena_destroy(a);
  free(SET(e, p));
}
static void realloc_interior(volatile uintptr_t *e) {
  char *p = malloc(64);
  void *q = realloc(SET(e, p + 16), 128);
  (void)q;
}
static void realloc_stack(volatile uintptr_t *e) {
  char buf[64] __attribute__((aligned(16)));
  memset(buf, 0, sizeof buf);
  void *q = realloc(SET(e, buf), 128);
  (void)q;
}
static void usable_size_interior(volatile uintptr_t *e) {
  char *p = malloc(64);
  size_t u = malloc_usable_size(SET(e, p + 16));
  (void)u;
}
static void usable_size_stack(volatile uintptr_t *e) {
  char buf[64] __attribute__((aligned(16)));
  memset(buf, 0, sizeof buf);
  size_t u = malloc_usable_size(SET(e, buf));
  (void)u;
}
static void usable_size_own_mmap(volatile uintptr_t *e) {
  char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  size_t u = malloc_usable_size(SET(e, m));
  (void)u;
}

/* Runs the case in a child and checks its death and its one line of stderr:
 * one of the accepted prefixes, then 0x<hex> equal to the misused pointer. */
static void check_message(misuse_fn *fn, const char *const *prefixes) {
  struct child_result r;
  run_misuse_child(fn, &r);
  cr_assert(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT,
            "expected death by SIGABRT; the child %s; its stderr:\n%s", describe_status(r.status), r.err);
  cr_assert_neq(r.expected, 0, "the case did not record its pointer");
  int matches = 0;
  const char *match = NULL;
  size_t match_len = 0;
  for (char *line = r.err; *line;) {
    char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    for (const char *const *pre = prefixes; *pre; pre++)
      if (len >= strlen(*pre) && strncmp(line, *pre, strlen(*pre)) == 0) {
        matches++;
        match = line + strlen(*pre);
        match_len = len - strlen(*pre);
        break;
      }
    line += len + (end != NULL);
  }
  cr_assert_eq(matches, 1, "expected exactly one line starting with \"%s\"%s; stderr was:\n%s", prefixes[0],
               prefixes[1] ? " (or an alternative)" : "", r.err);
  char hex[64];
  snprintf(hex, sizeof hex, "%.*s", (int)(match_len < 63 ? match_len : 63), match);
  char *endp;
  cr_assert(strncmp(hex, "0x", 2) == 0, "the message does not end in 0x<pointer>: \"%s\"", hex);
  unsigned long long v = strtoull(hex, &endp, 16);
  cr_assert(*endp == 0 || *endp == ' ', "trailing text after the pointer: \"%s\"", hex);
  cr_assert_eq(v, (unsigned long long)r.expected, "the message names %#llx, but the pointer passed was %#llx",
               v, (unsigned long long)r.expected);
}

#define PREFIXES(...) ((const char *const[]){__VA_ARGS__, NULL})
/* The in-process run keeps its stderr quiet: misuse_msg checks the message. */
#define MISUSE(name, ...)                                                                          \
  Test(misuse, name, .signal = SIGABRT) {                                                          \
    volatile uintptr_t e;                                                                          \
    int null = open("/dev/null", O_WRONLY);                                                        \
    cr_assert(null >= 0 && dup2(null, 2) == 2);                                                    \
    name(&e);                                                                                      \
  }                                                                                                \
  Test(misuse_msg, name) { check_message(name, PREFIXES(__VA_ARGS__)); }

#define DOUBLE "ebb: free(): double free "
#define INVALID "ebb: free(): invalid pointer "

MISUSE(double_free_small, DOUBLE)
MISUSE(double_free_medium, DOUBLE)
MISUSE(double_free_100k, DOUBLE)
MISUSE(double_free_not_last, DOUBLE)
MISUSE(double_free_aligned, DOUBLE)
/* A large block's mapping may be gone by the second free: either word will do. */
MISUSE(double_free_large, DOUBLE, INVALID)
/* docs/api.md: the ebb_ and __libc_ names report as the standard function. */
MISUSE(double_free_ebb_free, DOUBLE)
MISUSE(double_free_libc_alias, DOUBLE)
MISUSE(double_delete, DOUBLE)
MISUSE(double_free_realloc, "ebb: realloc(): invalid pointer ", "ebb: realloc(): double free ")
MISUSE(free_interior_small, INVALID)
MISUSE(free_interior_medium, INVALID)
MISUSE(free_interior_large, INVALID)
MISUSE(free_misaligned, INVALID)
MISUSE(free_stack, INVALID)
MISUSE(free_static, INVALID)
MISUSE(free_own_mmap_page, INVALID)
MISUSE(free_within_own_mmap, INVALID)
MISUSE(free_own_chunk_lookalike, INVALID)
MISUSE(free_after_arena_destroy, INVALID, DOUBLE)
MISUSE(realloc_interior, "ebb: realloc(): invalid pointer ")
MISUSE(realloc_stack, "ebb: realloc(): invalid pointer ")
MISUSE(usable_size_interior, "ebb: malloc_usable_size(): invalid pointer ")
MISUSE(usable_size_stack, "ebb: malloc_usable_size(): invalid pointer ")
MISUSE(usable_size_own_mmap, "ebb: malloc_usable_size(): invalid pointer ")

/* The checks must not fire on correct use: the child runner itself is sound. */
static void correct_use(volatile uintptr_t *e) {
  void *p = malloc(32);
  *e = (uintptr_t)p;
  free(p);
}
Test(misuse_msg, correct_use_does_not_abort) {
  struct child_result r;
  run_misuse_child(correct_use, &r);
  cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "the child %s; stderr:\n%s",
            describe_status(r.status), r.err);
  cr_assert_eq(r.err[0], 0, "correct use printed: %s", r.err);
}
