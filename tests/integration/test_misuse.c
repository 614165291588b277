/* test_misuse.c — the misuse table (OpenBSD's malloc_errs.c, adapted): the rows
 * of docs/api.md "Bad input", one Criterion parameterised test over them.
 * Each row runs in a child forked here with its stderr captured (helpers.c,
 * run_misuse_child). A detected misuse must kill the child with SIGABRT after
 * exactly one line "ebb: <function>(): <message> 0x<pointer passed>"; a row of
 * a documented limit says what happens instead. A row may have several forms
 * (the same misuse reached another way); each form runs in its own child.
 * In a child, a form that cannot set up its misuse explains on stderr and
 * exits with SETUP_FAILED (or SKIPPED), so the parent never guesses. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ebb.h"
#include "helpers.h"

TestSuite(misuse, .timeout = 60);

#define SETUP_FAILED 2
#define SKIPPED 77

static int form; /* which form of a row the next child performs (inherited by fork) */

/* Each case stores the pointer it is about to misuse in *e, then misuses it
 * (p is evaluated once: it may be a malloc call). */
#define SET(e, p)                                                                                            \
  ({                                                                                                         \
    void *set_p_ = (void *)(p);                                                                              \
    *(e) = (uintptr_t)set_p_;                                                                                \
    hide_ptr(set_p_);                                                                                        \
  })

/* In the child: one line on stderr saying why, then exit with code. Never
 * allocates (vsnprintf into the stack, write). */
static void __attribute__((noreturn, format(printf, 2, 3))) child_exit(int code, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n > sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  ssize_t w = write(2, buf, (size_t)n);
  (void)w;
  _exit(code);
}

static void *map_pages(size_t n) {
  void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) child_exit(SETUP_FAILED, "mmap of %zu bytes failed", n);
  return m;
}

/* ---------------------------------------------------------------- pointers ebb never handed out */

static void m_stack(volatile uintptr_t *e) {
  char buf[64] __attribute__((aligned(16)));
  memset(buf, 0, sizeof buf);
  free(SET(e, buf));
}

static char static_block[256] __attribute__((aligned(64)));
static void m_static(volatile uintptr_t *e) { free(SET(e, static_block)); }

static void m_foreign_mmap(volatile uintptr_t *e) {
  if (form == 0) {
    free(SET(e, map_pages(4096)));
  } else if (form == 1) {
    free(SET(e, (char *)map_pages(64 * KiB) + 4096 + 256));
  } else { /* a mapping aligned like ebb's chunks (4 MiB), garbage where a chunk header would be */
    char *c = align_up_ptr(map_pages(12 * MiB), 4 * MiB);
    memset(c, 0x41, 64 * KiB);
    free(SET(e, c + 64 * KiB));
  }
}

static void m_wild_low(volatile uintptr_t *e) { free(SET(e, (void *)16)); }

/* The registry masks an address's high bits instead of range-checking them, so
 * a non-canonical address with bit 47 set looks up the same slot as the live
 * block below it: forms 1 and 2 hit a registered chunk and a large block. */
static void m_wild_high(volatile uintptr_t *e) {
  const uintptr_t bit47 = (uintptr_t)1 << 47;
  if (form == 0) {
    free(SET(e, (void *)0xffffffffffff0000u));
  } else if (form == 1) {
    free(SET(e, (void *)((uintptr_t)malloc(64) | bit47)));
  } else if (form == 2) {
    free(SET(e, (void *)((uintptr_t)malloc(64 * MiB) | bit47)));
  } else {
    char *m = map_pages(4 * MiB); /* a high user address that is surely unmapped */
    munmap(m, 4 * MiB);
    free(SET(e, m + 64 * KiB));
  }
}

static void m_interior_small(volatile uintptr_t *e) {
  if (form == 0)
    free(SET(e, (char *)malloc(64) + 16));
  else
    free(SET(e, (char *)malloc(100000) + 4096));
}

static void m_misaligned(volatile uintptr_t *e) {
  if (form == 0)
    free(SET(e, (char *)malloc(64) + 1));
  else
    free(SET(e, (char *)malloc(64 * MiB) + 1));
}

static void m_interior_large(volatile uintptr_t *e) {
  if (form == 0)
    free(SET(e, (char *)malloc(64 * MiB) + 4096));
  else
    free(SET(e, (char *)malloc(8 * MiB) + 64 * KiB));
}

/* ---------------------------------------------------------------- double frees in a page */

/* Double frees keep a neighbour of the same size live, so the page stays. */
static void double_free_of_size(volatile uintptr_t *e, size_t size) {
  void *keep = malloc(size), *p = malloc(size);
  free(p);
  free(SET(e, p));
  free(keep);
}

static void m_double_small(volatile uintptr_t *e) { double_free_of_size(e, form == 0 ? 32 : 1000); }

/* Not the most recently freed block: a check of the list head is not enough. */
static void m_double_not_last(volatile uintptr_t *e) {
  void *keep = malloc(48), *p = malloc(48), *q = malloc(48), *r = malloc(48);
  free(p);
  free(q);
  free(r);
  free(SET(e, q));
  free(keep);
}

static void m_double_aligned(volatile uintptr_t *e) {
  void *keep = aligned_alloc(4096, 4096), *p = aligned_alloc(4096, 4096);
  free(p);
  free(SET(e, p));
  free(keep);
}

/* The first block of a fresh page of the class of `size`, whose blocks are
 * `size_class_bytes` apart: pages start at a unit (64 KiB) boundary, and in the
 * classes used here only a page's first block is 64 KiB aligned. Blocks
 * skipped on the way stay live (they belong to older pages). Then its next
 * `more` neighbours, checked to follow it. */
static char *fresh_page(size_t size, size_t stride, char **next, int more) {
  char *first = NULL;
  for (int i = 0; i < 32 && !first; i++) {
    char *p = malloc(size);
    if (!p) child_exit(SETUP_FAILED, "malloc(%zu) failed", size);
    if (is_aligned(p, 64 * KiB)) first = p;
  }
  if (!first) child_exit(SETUP_FAILED, "no block of malloc(%zu) was 64 KiB aligned in 32 tries", size);
  for (int i = 0; i < more; i++) {
    next[i] = malloc(size);
    if (next[i] != first + (size_t)(i + 1) * stride)
      child_exit(SETUP_FAILED, "malloc(%zu) after the page's first block %p gave %p, not %p", size,
                 (void *)first, (void *)next[i], (void *)(first + (size_t)(i + 1) * stride));
  }
  return first;
}

/* 80000 B: class 81920, 3 blocks in a 4-unit page, at offsets 0, 0x14000, 0x28000. */
#define K80 ((size_t)80000)
#define K80_STRIDE ((size_t)81920)

static void m_double_80k_first(volatile uintptr_t *e) {
  char *next[1], *p = fresh_page(K80, K80_STRIDE, next, 1);
  free(p);
  free(SET(e, p));
  free(next[0]);
}

static void m_double_80k_not_first(volatile uintptr_t *e) {
  char *next[2], *p = fresh_page(K80, K80_STRIDE, next, 2);
  char *q = next[form == 0 ? 0 : 1]; /* the 2nd or the 3rd block: in a later unit of the span */
  free(q);
  free(SET(e, q));
  free(p);
}

/* The page empties and goes back to its chunk; the second free must still be
 * named a double free (docs/api.md: the descriptor keeps its geometry). */
static void m_double_emptied_page(volatile uintptr_t *e) {
  if (form <= 1) { /* one block of 3000 B (a single-unit page), nothing else of its class */
    void *p = malloc(3000);
    free(p);
    if (form == 1) ebb_trim(); /* even a class's current page goes back, and is purged */
    free(SET(e, p));
    return;
  }
  /* 40000 B: class 40960, 3 blocks in a 2-unit page; such a page goes back at once. */
  char *next[2], *p = fresh_page(40000, 40960, next, 2);
  free(p);
  free(next[0]);
  free(next[1]);
  free(SET(e, p));
}

/* Blocks of 192 KiB to 2 MiB (and of 112 and 128 KiB) are a page each, born full and off every queue; the
 * first free gives the span back to its chunk at once (arena.c, page_new_one).
 * Forms: a lone block; one freed while another of its class is live (before,
 * the first block's page was marked full only at the class's next malloc);
 * a block aligned beyond a unit. */
static void m_double_one_block(volatile uintptr_t *e) {
  void *keep = NULL, *p = form == 2 ? aligned_alloc(128 * KiB, 100) : malloc(300000);
  if (!p) child_exit(SETUP_FAILED, "allocating the block failed");
  if (form == 1) keep = malloc(300000);
  free(p);
  free(SET(e, p));
  free(keep);
}

static void m_double_emptied_80k_not_first(volatile uintptr_t *e) {
  char *next[2], *p = fresh_page(K80, K80_STRIDE, next, 2);
  free(p);
  free(next[0]);
  free(next[1]);
  free(SET(e, next[form == 0 ? 0 : 1]));
}

/* A block in a granule returned to the kernel: ebb_trim() purges the wholly
 * free 4 KiB granules of a partly used page at once and parks their blocks.
 * One block is kept live in every 64 KiB page the blocks came from, so no page
 * empties; mincore finds a freed block whose memory really went back. */
static void m_double_purged(volatile uintptr_t *e) {
  enum { N = 3000 }; /* 64 B blocks: about three pages' worth */
  static char *b[N];
  static bool keep[N];
  for (int i = 0; i < N; i++) {
    b[i] = malloc(64);
    if (!b[i]) child_exit(SETUP_FAILED, "malloc(64) failed");
    keep[i] = true;
    for (int j = 0; j < i && keep[i]; j++)
      if (keep[j] && ((uintptr_t)b[j] >> 16) == ((uintptr_t)b[i] >> 16)) keep[i] = false;
  }
  for (int i = 0; i < N; i++)
    if (!keep[i]) free(b[i]);
  ebb_trim();
  for (int i = 0; i < N; i++) {
    if (keep[i]) continue;
    unsigned char in_core = 1;
    if (mincore((void *)((uintptr_t)b[i] & ~(uintptr_t)4095), 4096, &in_core))
      child_exit(SETUP_FAILED, "mincore failed");
    if (!(in_core & 1)) {
      free(SET(e, b[i]));
      return;
    }
  }
  child_exit(SETUP_FAILED, "after ebb_trim() every freed 64 B block was still resident (EBB_PURGE=free?)");
}

/* ---------------------------------------------------------------- two threads */

static void *xp;                /* the block the two threads share */
static bool t2_waits;           /* T2 stays until T1 is past its second free */
static pthread_barrier_t freed; /* T2 has freed xp */
static pthread_barrier_t done;  /* T1 is past its second free */

static void *t2_frees(void *with_arena) {
  void *mine = with_arena ? malloc(64) : NULL; /* gives T2 an arena (and a thread cache) */
  free(xp);
  if (t2_waits) {
    pthread_barrier_wait(&freed);
    pthread_barrier_wait(&done);
  }
  free(mine);
  return NULL;
}

static pthread_t t2_start(bool with_arena) {
  pthread_t t;
  if (pthread_create(&t, NULL, t2_frees, with_arena ? (void *)1 : NULL))
    child_exit(SETUP_FAILED, "pthread_create");
  return t;
}

/* T1 (this thread) mallocs, T2 frees, T1 frees again. Form 0: T2 (with an
 * arena) is still running, the block sits in its thread cache; form 1:
 * T2 (with an arena) has exited; form 2: T2 never allocated. */
static void m_double_xthread_owner_second(volatile uintptr_t *e) {
  t2_waits = form == 0;
  pthread_barrier_init(&freed, NULL, 2);
  pthread_barrier_init(&done, NULL, 2);
  void *keep = malloc(64);
  xp = malloc(64);
  pthread_t t = t2_start(form != 2);
  if (t2_waits)
    pthread_barrier_wait(&freed);
  else
    pthread_join(t, NULL);
  free(SET(e, xp));
  if (t2_waits) {
    pthread_barrier_wait(&done);
    pthread_join(t, NULL);
  }
  free(keep);
}

/* T1 mallocs and frees, T2 frees again (form 0: T2 has an arena, 1: not). */
static void m_double_xthread_other_second(volatile uintptr_t *e) {
  void *keep = malloc(64);
  xp = malloc(64);
  free(xp);
  *e = (uintptr_t)xp;
  pthread_join(t2_start(form == 0), NULL);
  free(keep);
}

/* ---------------------------------------------------------------- other functions and aliases */

static void m_double_realloc(volatile uintptr_t *e) {
  void *keep = malloc(64), *p = malloc(64);
  free(p);
  void *q = realloc(SET(e, p), 100);
  (void)q;
  free(keep);
}

static void m_invalid_realloc(volatile uintptr_t *e) {
  char buf[64] __attribute__((aligned(16)));
  memset(buf, 0, sizeof buf);
  void *q = realloc(form == 0 ? SET(e, buf) : SET(e, (char *)malloc(64) + 16), 10);
  (void)q;
}

static void m_invalid_usable_size(volatile uintptr_t *e) {
  char buf[64] __attribute__((aligned(16)));
  memset(buf, 0, sizeof buf);
  void *p = form == 0 ? (void *)buf : form == 1 ? (char *)malloc(64) + 16 : map_pages(4096);
  size_t u = malloc_usable_size(SET(e, p));
  (void)u;
}

static void m_double_ebb_free(volatile uintptr_t *e) {
  void *keep = ebb_malloc(64), *p = ebb_malloc(64);
  ebb_free(p);
  ebb_free(SET(e, p));
  ebb_free(keep);
}

/* A libebb definition of name, or the child explains where it comes from. */
static void *ebb_fn(const char *name) {
  const char *where;
  void *f = ebb_symbol(name, &where);
  if (!f) child_exit(SETUP_FAILED, "%s is not libebb's (defined in %s)", name, where);
  return f;
}

static void m_double_libc_free(volatile uintptr_t *e) {
  void (*libc_free)(void *) = (void (*)(void *))ebb_fn("__libc_free");
  void *keep = malloc(64), *p = malloc(64);
  libc_free(p);
  libc_free(SET(e, p));
  free(keep);
}

/* C++: operator delete(void *) twice on what operator new(size_t) gave. */
static void m_double_delete(volatile uintptr_t *e) {
  void *(*op_new)(size_t) = (void *(*)(size_t))ebb_fn("_Znwm");
  void (*op_delete)(void *) = (void (*)(void *))ebb_fn("_ZdlPv");
  void *keep = op_new(64), *p = op_new(64);
  op_delete(p);
  op_delete(SET(e, p));
  op_delete(keep);
}

static void m_double_free_sized(volatile uintptr_t *e) {
  void (*fs)(void *, size_t) = (void (*)(void *, size_t))ebb_fn("free_sized");
  void *keep = malloc(64), *p = malloc(64);
  fs(p, 64);
  fs(SET(e, p), 64);
  free(keep);
}

/* A block of a destroyed first-class arena: its memory is gone. */
static void m_destroyed_arena(volatile uintptr_t *e) {
  ebb_arena_t *a = ebb_arena_create();
  if (!a) child_exit(SETUP_FAILED, "ebb_arena_create failed");
  void *p = ebb_arena_malloc(a, form == 0 ? 64 : 64 * MiB);
  ebb_arena_destroy(a);
  free(SET(e, p));
}

/* ebb_arena_reset frees every block of the arena: a free after it is a free of
 * a freed block whose page no longer exists (found by a probe: the table had
 * no row for it). */
static void m_reset_arena(volatile uintptr_t *e) {
  ebb_arena_t *a = ebb_arena_create();
  if (!a) child_exit(SETUP_FAILED, "ebb_arena_create failed");
  void *p = ebb_arena_malloc(a, form == 0 ? 64 : 64 * MiB);
  ebb_arena_reset(a);
  free(SET(e, p));
}

/* ---------------------------------------------------------------- arena handles */

/* An arena destroyed twice: the second call would have destroyed whatever
 * had taken the arena since (a new thread's). */
static void m_arena_destroyed_twice(volatile uintptr_t *e) {
  ebb_arena_t *a = ebb_arena_create();
  if (!a) child_exit(SETUP_FAILED, "ebb_arena_create failed");
  if (!ebb_arena_malloc(a, 64)) child_exit(SETUP_FAILED, "ebb_arena_malloc failed");
  ebb_arena_destroy(a);
  ebb_arena_destroy((ebb_arena_t *)SET(e, a));
}

/* A destroyed arena allocated from. */
static void m_arena_used_after_destroy(volatile uintptr_t *e) {
  ebb_arena_t *a = ebb_arena_create();
  if (!a) child_exit(SETUP_FAILED, "ebb_arena_create failed");
  ebb_arena_destroy(a);
  ebb_arena_malloc((ebb_arena_t *)SET(e, a), 64);
}

/* Something that is no arena: a block, the program's own page. */
static void m_arena_not_an_arena(volatile uintptr_t *e) {
  static char page[8192] __attribute__((aligned(4096)));
  void *h = form == 0 ? malloc(64) : (void *)page;
  ebb_arena_destroy((ebb_arena_t *)SET(e, h));
}

/* The same given to ebb_arena_malloc, whose fast path pops from the handle's
 * pages: a zeroed page-aligned block (its page pointers NULL: this faulted),
 * and static memory whose every word points into itself (a page that looks
 * like one with a free block: this "allocated" it and wrote the program's
 * memory). */
static void m_arena_malloc_not_an_arena(volatile uintptr_t *e) {
  static uintptr_t self[16384 / sizeof(uintptr_t)] __attribute__((aligned(4096))); /* the arena struct's span */
  void *h;
  if (form == 0) {
    h = aligned_alloc(4096, 8192);
    if (!h) child_exit(SETUP_FAILED, "aligned_alloc(4096, 8192) failed");
    memset(h, 0, 8192);
  } else if (form == 2 || form == 3) { /* one page, nothing readable after it: what a handle's check reads lies inside */
    char *m = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + 4096, 4096, PROT_NONE) != 0) child_exit(SETUP_FAILED, "mmap/mprotect failed");
    h = form == 2 ? m : m + 4096 - 16; /* 3: its last 16 bytes, not page-aligned (this faulted; found by a probe) */
  } else {
    for (size_t i = 0; i < ARRAY_LEN(self); i++) self[i] = (uintptr_t)&self[i ^ 1];
    h = self;
  }
  ebb_arena_malloc((ebb_arena_t *)SET(e, h), 64);
}

/* ---------------------------------------------------------------- documented limits */

/* A large block's mapping is gone after the first free. */
static void m_double_large(volatile uintptr_t *e) {
  void *p = malloc(64 * MiB);
  free(p);
  free(SET(e, p));
}

/* Freed, handed out again, freed through the stale pointer: q is freed. */
static void m_stale_reused(volatile uintptr_t *e) {
  void *keep = malloc(64), *p = malloc(64);
  free(p);
  void *q = malloc(64);
  if (q != p) child_exit(SKIPPED, "malloc(64) after free(%p) gave %p, not the same block", p, q);
  *e = (uintptr_t)p;
  free(hide_ptr(p));
  if (ebb_owns(q)) child_exit(1, "after free(p), ebb_owns(q) is 1: the block q was not freed");
  free(keep);
}

/* malloc_usable_size checks that p is a block start, not that it is live. */
static void m_usable_size_freed(volatile uintptr_t *e) {
  void *keep = malloc(64), *p = malloc(64);
  free(p);
  *e = (uintptr_t)p;
  malloc_usable_size(hide_ptr(p));
  free(keep);
}

/* A freed block whose page or mapping went back at its free: the question
 * meets what a second free would (found by a probe: the table said "returns
 * its size" for every freed block). */
static void m_usable_size_freed_gone_double(volatile uintptr_t *e) {
  void *p = form == 1 ? aligned_alloc(1 * MiB, 100) : malloc(300000);
  if (!p) child_exit(SETUP_FAILED, "allocating the block failed");
  free(p);
  malloc_usable_size(SET(e, p));
}

static void m_usable_size_freed_gone_invalid(volatile uintptr_t *e) {
  if (form == 0) {
    void *p = malloc(8 * MiB);
    free(p);
    malloc_usable_size(SET(e, p));
    return;
  }
  ebb_arena_t *a = ebb_arena_create();
  if (!a) child_exit(SETUP_FAILED, "ebb_arena_create failed");
  void *p = ebb_arena_malloc(a, 64);
  ebb_arena_reset(a);
  malloc_usable_size(SET(e, p));
}

/* ---------------------------------------------------------------- the table */

struct row {
  const char *name;         /* as in docs/api.md */
  misuse_fn *fn;            /* runs in the child; reads `form` */
  const char *func, *msg;   /* the expected line "ebb: func(): msg 0x<ptr>"; NULL: no abort (exit 0) */
  bool limit;               /* a documented limit of detection */
  const char *const *forms; /* what each form does */
};

#define FORMS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define FREE_INVALID "free", "invalid pointer"
#define FREE_DOUBLE "free", "double free"

static const struct row rows[] = {
    {"stack", m_stack, FREE_INVALID, false, FORMS("free(&local)")},
    {"static", m_static, FREE_INVALID, false, FORMS("free(&static_var)")},
    {"foreign_mmap", m_foreign_mmap, FREE_INVALID, false,
     FORMS("free(our mmap'd page)", "free(inside our 64 KiB mapping)",
           "free(our 4 MiB aligned mapping filled with garbage + 64 KiB)")},
    {"wild_low", m_wild_low, FREE_INVALID, false, FORMS("free((void *)16)")},
    {"wild_high", m_wild_high, FREE_INVALID, false,
     FORMS("free((void *)0xffffffffffff0000)", "free(64 B block | 1 << 47) (non-canonical)",
           "free(64 MiB block | 1 << 47) (non-canonical)", "free(an unmapped high user address)")},
    {"interior_small", m_interior_small, FREE_INVALID, false,
     FORMS("free(p + 16), p 64 B", "free(p + 4096), p 100000 B")},
    {"misaligned", m_misaligned, FREE_INVALID, false, FORMS("free(p + 1), p 64 B", "free(p + 1), p 64 MiB")},
    {"interior_large", m_interior_large, FREE_INVALID, false,
     FORMS("free(p + 4096), p 64 MiB", "free(p + 64 KiB), p 8 MiB")},
    {"double_small", m_double_small, FREE_DOUBLE, false, FORMS("32 B freed twice", "1000 B freed twice")},
    {"double_not_last", m_double_not_last, FREE_DOUBLE, false,
     FORMS("the middle of three freed 48 B blocks")},
    {"double_aligned", m_double_aligned, FREE_DOUBLE, false, FORMS("aligned_alloc(4096, 4096) freed twice")},
    {"double_80k_first", m_double_80k_first, FREE_DOUBLE, false,
     FORMS("the first 80000 B block of its page")},
    {"double_80k_not_first", m_double_80k_not_first, FREE_DOUBLE, false,
     FORMS("the 2nd 80000 B block of its page", "the 3rd 80000 B block of its page")},
    {"double_emptied_page", m_double_emptied_page, FREE_DOUBLE, false,
     FORMS("a lone 3000 B block", "a lone 3000 B block, ebb_trim() between the frees",
           "the first 40000 B block of an emptied 2-unit page")},
    {"double_emptied_80k_not_first", m_double_emptied_80k_not_first, FREE_DOUBLE, false,
     FORMS("the 2nd 80000 B block of an emptied page", "the 3rd 80000 B block of an emptied page")},
    {"double_one_block", m_double_one_block, FREE_DOUBLE, false,
     FORMS("a lone 300000 B block", "a 300000 B block, another of its size live",
           "aligned_alloc(128 KiB, 100) freed twice")},
    {"double_purged", m_double_purged, FREE_DOUBLE, false,
     FORMS("a 64 B block in a granule purged by ebb_trim()")},
    {"double_xthread_owner_second", m_double_xthread_owner_second, FREE_DOUBLE, false,
     FORMS("T2 (with an arena) still running", "T2 (with an arena) exited", "T2 without an arena, exited")},
    {"double_xthread_other_second", m_double_xthread_other_second, FREE_DOUBLE, false,
     FORMS("T2 with an arena", "T2 without an arena")},
    {"double_realloc", m_double_realloc, "realloc", "double free", false, FORMS("realloc(freed 64 B, 100)")},
    {"invalid_realloc", m_invalid_realloc, "realloc", "invalid pointer", false,
     FORMS("realloc(&local, 10)", "realloc(p + 16, 10), p 64 B")},
    {"invalid_usable_size", m_invalid_usable_size, "malloc_usable_size", "invalid pointer", false,
     FORMS("malloc_usable_size(&local)", "malloc_usable_size(p + 16), p 64 B",
           "malloc_usable_size(our mmap'd page)")},
    {"double_ebb_free", m_double_ebb_free, FREE_DOUBLE, false, FORMS("ebb_free twice")},
    {"double_libc_free", m_double_libc_free, FREE_DOUBLE, false, FORMS("__libc_free twice")},
    {"double_delete", m_double_delete, FREE_DOUBLE, false, FORMS("operator delete(void *) twice")},
    {"double_free_sized", m_double_free_sized, FREE_DOUBLE, false, FORMS("free_sized twice")},
    {"destroyed_arena", m_destroyed_arena, FREE_INVALID, false,
     FORMS("free(64 B of a destroyed arena)", "free(64 MiB of a destroyed arena)")},
    {"reset_arena", m_reset_arena, FREE_INVALID, false,
     FORMS("free(64 B of an arena since reset)", "free(64 MiB of an arena since reset)")},
    {"arena_destroyed_twice", m_arena_destroyed_twice, "ebb_arena_destroy", "invalid arena", false,
     FORMS("ebb_arena_destroy(a) twice")},
    {"arena_malloc_after_destroy", m_arena_used_after_destroy, "ebb_arena_malloc", "invalid arena", false,
     FORMS("ebb_arena_malloc(destroyed a, 64)")},
    {"arena_not_an_arena", m_arena_not_an_arena, "ebb_arena_destroy", "invalid arena", false,
     FORMS("ebb_arena_destroy(malloc(64))", "ebb_arena_destroy(a page of static data)")},
    {"arena_malloc_not_an_arena", m_arena_malloc_not_an_arena, "ebb_arena_malloc", "invalid arena", false,
     FORMS("ebb_arena_malloc(a zeroed 8 KiB block, 64)", "ebb_arena_malloc(a static page whose words point into it, 64)",
           "ebb_arena_malloc(a lone mmap'd page, 64)", "ebb_arena_malloc(the last 16 bytes of a lone mmap'd page, 64)")},
    {"double_large", m_double_large, FREE_INVALID, true, FORMS("64 MiB freed twice")},
    {"stale_reused", m_stale_reused, NULL, NULL, true, FORMS("free(p) after q = malloc(64) reused p")},
    {"usable_size_freed", m_usable_size_freed, "malloc_usable_size", "double free", false,
     FORMS("malloc_usable_size(freed 64 B)")},
    {"usable_size_freed_one_block", m_usable_size_freed_gone_double, "malloc_usable_size", "double free", false,
     FORMS("malloc_usable_size(freed 300000 B)", "malloc_usable_size(freed aligned_alloc(1 MiB, 100))")},
    {"usable_size_freed_large", m_usable_size_freed_gone_invalid, "malloc_usable_size", "invalid pointer", true,
     FORMS("malloc_usable_size(freed 8 MiB)", "malloc_usable_size(64 B of an arena since reset)")},
};

/* A failed check reports and ends the form, not the row: every form is run. */
#define CHECK(cond, ...)                                                                                     \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      cr_expect_fail(__VA_ARGS__);                                                                           \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

/* Runs form f of row in a child and checks what happened. */
static void check_form(const struct row *row, int f) {
  static struct child_result r; /* large: not on the stack */
  form = f;
  run_misuse_child(row->fn, &r);
  const char *name = row->name, *what = row->forms[f], *limit = row->limit ? " (documented limit)" : "";
  CHECK(!(WIFEXITED(r.status) && WEXITSTATUS(r.status) == SETUP_FAILED), "%s [%s]: could not set up: %s",
        name, what, r.err);
  if (!row->func) {
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == SKIPPED)
      cr_skip_test("%s [%s]: %s", name, what, r.err);
    CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
          "%s [%s]%s: expected no abort; the child %s; its stderr:\n%s", name, what, limit,
          describe_status(r.status), r.err);
    CHECK(r.err[0] == 0, "%s [%s]%s: expected a silent return; stderr:\n%s", name, what, limit, r.err);
    return;
  }
  /* Exactly one line: "ebb: func(): msg 0x<hex>\n", hex the pointer passed. */
  char prefix[128];
  snprintf(prefix, sizeof prefix, "ebb: %s(): %s 0x", row->func, row->msg);
  CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT,
        "%s [%s]%s: expected death by SIGABRT after \"%s<pointer>\"; the child %s; its stderr:\n%s", name,
        what, limit, prefix, describe_status(r.status), r.err);
  CHECK(r.expected != 0, "%s [%s]: the case did not record its pointer", name, what);
  size_t n = strlen(prefix);
  char *end = NULL;
  unsigned long long v = strncmp(r.err, prefix, n) == 0 ? strtoull(r.err + n, &end, 16) : 0;
  CHECK(end && end > r.err + n && strcmp(end, "\n") == 0,
        "%s [%s]%s: expected exactly one line \"%s%llx\"; stderr was:\n%s", name, what, limit, prefix,
        (unsigned long long)r.expected, r.err);
  CHECK(v == (unsigned long long)r.expected,
        "%s [%s]: the message names %#llx, but the pointer passed was %#llx", name, what, v,
        (unsigned long long)r.expected);
}

static void free_params(struct criterion_test_params *p) { cr_free(p->params); }

ParameterizedTestParameters(misuse, table) {
  size_t n = ARRAY_LEN(rows);
  unsigned *index = cr_malloc(n * sizeof *index);
  for (size_t i = 0; i < n; i++) index[i] = (unsigned)i;
  return cr_make_param_array(unsigned, index, n, free_params);
}

/* One row per parameter (an index into rows: the parameter itself is copied
 * into the worker, pointers in it might not be valid there). */
ParameterizedTest(unsigned *i, misuse, table) {
  cr_assert_lt(*i, ARRAY_LEN(rows));
  const struct row *row = &rows[*i];
  for (int f = 0; row->forms[f]; f++) check_form(row, f);
}

/* The checks must not fire on correct use: the child runner itself is sound. */
static void correct_use(volatile uintptr_t *e) {
  void *p = malloc(32);
  *e = (uintptr_t)p;
  free(p);
}
Test(misuse, correct_use_does_not_abort) {
  struct child_result r;
  run_misuse_child(correct_use, &r);
  cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "the child %s; stderr:\n%s",
            describe_status(r.status), r.err);
  cr_assert_eq(r.err[0], 0, "correct use printed: %s", r.err);
}

/* docs/api.md's misuse table names its rows in the first column, in backquotes:
 * they must be exactly this file's rows, in the same order. */
Test(misuse, docs_table_matches_the_rows) {
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/api.md", repo_root());
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  char line[1024];
  bool in_table = false;
  size_t n = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "| row | misuse | result |", 25) == 0) in_table = true;
    else if (in_table && strncmp(line, "| `", 3) == 0) {
      char *end = strchr(line + 3, '`');
      cr_assert_not_null(end);
      *end = 0;
      cr_assert_lt(n, ARRAY_LEN(rows), "docs/api.md has more rows than the test (extra: %s)", line + 3);
      cr_assert_str_eq(line + 3, rows[n].name, "row %zu: docs/api.md says %s, the test %s", n, line + 3,
                       rows[n].name);
      bool doc_limit = strstr(end + 1, "**limit:**") != NULL;
      cr_assert_eq(doc_limit, rows[n].limit, "row %s: a limit in one and not the other", rows[n].name);
      if (rows[n].func) {
        char want[128];
        snprintf(want, sizeof want, "`%s(): %s`", rows[n].func, rows[n].msg);
        cr_assert(strstr(end + 1, want), "row %s: docs/api.md does not say %s", rows[n].name, want);
      }
      n++;
    } else if (in_table && line[0] != '|')
      break;
  }
  fclose(f);
  cr_assert_eq(n, ARRAY_LEN(rows), "docs/api.md lists %zu rows, the test %zu", n, ARRAY_LEN(rows));
}
