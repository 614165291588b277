/* test_misuse.c — the misuse table (OpenBSD's malloc_errs.c, adapted): each
 * case must kill the process with SIGABRT and print exactly one line
 * "ebb: <function>(): <what> 0x<pointer>" naming the pointer passed.
 * Each case runs twice: in the test process with Criterion's .signal = SIGABRT,
 * and in a child forked here with stderr captured, to check the message. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(misuse, .timeout = 30);
TestSuite(misuse_msg, .timeout = 30);

/* Each case stores the pointer it is about to misuse in *e, then misuses it. */
#define SET(e, p) (*(e) = (uintptr_t)(p), (void *)hide_ptr((void *)(p)))

static void double_free_small(volatile uintptr_t *e) {
  void *p = malloc(32);
  free(p);
  free(SET(e, p));
}
static void double_free_medium(volatile uintptr_t *e) {
  void *p = malloc(1000);
  free(p);
  free(SET(e, p));
}
static void double_free_100k(volatile uintptr_t *e) {
  void *p = malloc(100000);
  free(p);
  free(SET(e, p));
}
/* Not the most recently freed block: a check of the list head is not enough. */
static void double_free_not_last(volatile uintptr_t *e) {
  void *p = malloc(48), *q = malloc(48), *r = malloc(48);
  free(p);
  free(q);
  free(r);
  free(SET(e, q));
}
static void double_free_aligned(volatile uintptr_t *e) {
  void *p = aligned_alloc(4096, 4096);
  free(p);
  free(SET(e, p));
}
static void double_free_large(volatile uintptr_t *e) {
  void *p = malloc(64 * MiB);
  free(p);
  free(SET(e, p));
}
static void double_free_ebb_free(volatile uintptr_t *e) {
  void *p = ebb_malloc(64);
  ebb_free(p);
  ebb_free(SET(e, p));
}
static void double_free_realloc(volatile uintptr_t *e) {
  void *p = malloc(48);
  free(p);
  void *q = realloc(SET(e, p), 96);
  (void)q;
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
#define MISUSE(name, ...)                                                                          \
  Test(misuse, name, .signal = SIGABRT) {                                                          \
    volatile uintptr_t e;                                                                          \
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
MISUSE(double_free_ebb_free, DOUBLE, "ebb: ebb_free(): double free ")
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
