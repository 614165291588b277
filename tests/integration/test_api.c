/* test_api.c — the contract of every public function and of each bad input,
 * with glibc as the reference: the standard names, the ebb_ names and the glibc
 * aliases (__libc_malloc, ...), ebb_owns, ebb_stats, ebb_trim.
 * The same contract functions run against each table of functions.
 * Built twice: into the integration binary, and alone with -DEBB_API_ONLY,
 * statically linked with the valgrind build of libebb.a and run under memcheck;
 * that build uses only the static inline part of helpers.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ebb.h"
#include "helpers.h"

#ifdef EBB_API_ONLY
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef VALGRIND_GET_VBITS
#define VALGRIND_GET_VBITS(a, bits, n) ((void)(a), (void)(bits), (void)(n), 0)
#endif
#ifdef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND_OR_0 ((int)RUNNING_ON_VALGRIND)
#else
#define RUNNING_ON_VALGRIND_OR_0 0
#endif
#ifndef VALGRIND_COUNT_ERRORS
#define VALGRIND_COUNT_ERRORS 0u
#endif

/* Criterion ignores a worker's exit status once the test has reported (so
 * valgrind's --error-exitcode cannot fail a test) and does not count failed
 * assertions in a .fini: every test here ends by counting memcheck's errors
 * itself (always 0 when not running under valgrind). API_TEST wraps a body so. */
static void vg_check(void) {
  unsigned errors = VALGRIND_COUNT_ERRORS;
  cr_assert_eq(errors, 0, "memcheck reported %u error(s) in this test (see its output above)", errors);
}
#define API_TEST(suite, name)                                                                      \
  static void suite##_##name##_body(void);                                                         \
  Test(suite, name, .timeout = 60) {                                                               \
    suite##_##name##_body();                                                                       \
    vg_check();                                                                                    \
  }                                                                                                \
  static void suite##_##name##_body(void)

/* Not declared by glibc 2.36 (cfree is gone from its headers, the C23 ones are newer). */
void cfree(void *p);
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
#ifdef EBB_API_ONLY
extern __typeof__(cfree) cfree __attribute__((weak));
extern __typeof__(free_sized) free_sized __attribute__((weak));
extern __typeof__(free_aligned_sized) free_aligned_sized __attribute__((weak));
#endif

/* One implementation of the malloc family. */
struct api {
  const char *name;
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*reallocarray)(void *, size_t, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void *(*memalign)(size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
  size_t (*usable)(const void *);
  void (*free_sized)(void *, size_t);
  void (*free_aligned_sized)(void *, size_t, size_t);
};

static struct api ebb_api = {"ebb_", ebb_malloc, ebb_free, ebb_calloc, ebb_realloc, ebb_reallocarray,
                             ebb_posix_memalign, ebb_aligned_alloc, ebb_memalign, ebb_valloc,
                             ebb_pvalloc, ebb_malloc_usable_size, ebb_free_sized,
                             ebb_free_aligned_sized};

/* The functions a name resolves to: at link time when built alone (static
 * link, where the standard names can only be ebb's), else looked up at run time
 * and required to come from libebb (so a missing export fails one test, not the
 * link of the whole binary). */
#ifdef EBB_API_ONLY
#define LOOKUP(name) ((void *)(name))
#else
#define LOOKUP(name) lookup(#name)
static void *lookup(const char *name) {
  const char *where;
  void *f = ebb_symbol(name, &where);
  cr_assert(f != NULL, "%s is not exported by libebb.so (it resolves to %s)", name, where);
  return f;
}
#endif

static size_t std_usable(const void *p) { return malloc_usable_size((void *)p); }

static struct api *std_api(void) {
  static struct api a;
  a = (struct api){"std ", malloc, free, calloc, realloc, reallocarray, posix_memalign,
                   aligned_alloc, memalign, valloc, pvalloc, std_usable,
                   NULL, NULL};
#ifndef EBB_API_ONLY
  /* The standard names must be ebb's (libebb.so comes first in the lookup order). */
  static const char *const names[] = {"malloc", "free", "calloc", "realloc", "reallocarray",
                                      "posix_memalign", "aligned_alloc", "memalign", "valloc",
                                      "pvalloc", "malloc_usable_size"};
  for (size_t i = 0; i < ARRAY_LEN(names); i++) (void)lookup(names[i]);
#endif
  return hide_ptr(&a);
}
/* free_sized and friends: only the tests that use them look them up. */
static struct api *std_api_sized(void) {
  struct api *a = std_api();
#ifdef EBB_API_ONLY
  cr_assert(&free_sized && &free_aligned_sized, "free_sized/free_aligned_sized not defined by libebb.a");
  a->free_sized = free_sized;
  a->free_aligned_sized = free_aligned_sized;
#else
  a->free_sized = (void (*)(void *, size_t))LOOKUP(free_sized);
  a->free_aligned_sized = (void (*)(void *, size_t, size_t))LOOKUP(free_aligned_sized);
#endif
  return a;
}
#ifndef EBB_API_ONLY
static struct api *alias_api(void) {
  static struct api a;
  a = *std_api();
  a.name = "__libc_";
  a.malloc = (void *(*)(size_t))LOOKUP(__libc_malloc);
  a.free = (void (*)(void *))LOOKUP(__libc_free);
  a.calloc = (void *(*)(size_t, size_t))LOOKUP(__libc_calloc);
  a.realloc = (void *(*)(void *, size_t))LOOKUP(__libc_realloc);
  a.memalign = (void *(*)(size_t, size_t))LOOKUP(__libc_memalign);
  a.valloc = (void *(*)(size_t))LOOKUP(__libc_valloc);
  a.pvalloc = (void *(*)(size_t))LOOKUP(__libc_pvalloc);
  a.posix_memalign = (int (*)(void **, size_t, size_t))LOOKUP(__posix_memalign);
  return hide_ptr(&a);
}
#endif

/* Every contract function runs against the standard names and the ebb_ names;
 * CONTRACT3 also against the glibc aliases. */
#define CONTRACT(fn)                                                                               \
  API_TEST(api_std, fn) { fn(std_api()); }                                                         \
  API_TEST(api_ebb, fn) { fn(hide_ptr(&ebb_api)); }
#ifdef EBB_API_ONLY /* the aliases are looked up in libebb.so; each valgrind test costs seconds */
#define CONTRACT3(fn) CONTRACT(fn)
#else
#define CONTRACT3(fn)                                                                              \
  CONTRACT(fn)                                                                                     \
  API_TEST(api_alias, fn) { fn(alias_api()); }
#endif

static const size_t huge_sizes[] = {SIZE_MAX, SIZE_MAX - 15, SIZE_MAX - 4096, SIZE_MAX / 2 + 1,
                                    (size_t)1 << 62, (size_t)1 << 48};

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* A live block: aligned to 16, ours, and big enough. */
static void check_block(const struct api *a, void *p, size_t size, const char *what) {
  cr_assert(p != NULL, "%s%s returned NULL", a->name, what);
  cr_assert(is_aligned(p, 16), "%s%s: %p is not 16-byte aligned", a->name, what, p);
  cr_assert(ebb_owns(p), "%s%s: ebb_owns(%p) is 0 for a live block", a->name, what, p);
  size_t u = a->usable(p);
  cr_assert_geq(u, size, "%s%s: usable size %zu < %zu requested", a->name, what, u, size);
}

static void expect_null_errno(const struct api *a, void *p, int err, const char *what, size_t arg) {
  int e = errno;
  cr_assert_null(p, "%s%s (%#zx) returned %p, expected NULL", a->name, what, arg, p);
  cr_assert_eq(e, err, "%s%s (%#zx): errno %d (%s), expected %d (%s)", a->name, what, arg, e,
               strerror(e), err, strerror(err));
}

/* ---------------------------------------------------------------- malloc / free */

static void malloc_zero_unique(const struct api *a) {
  void *p[64];
  for (int i = 0; i < 64; i++) {
    p[i] = a->malloc(hide_size(0));
    check_block(a, p[i], 0, "malloc(0)");
    for (int j = 0; j < i; j++) cr_assert_neq(p[i], p[j], "%smalloc(0) returned %p twice", a->name, p[i]);
  }
  for (int i = 0; i < 64; i++) a->free(p[i]);
}
CONTRACT3(malloc_zero_unique)

static void malloc_huge_enomem(const struct api *a) {
  for (size_t i = 0; i < ARRAY_LEN(huge_sizes); i++) {
    errno = 0;
    void *p = a->malloc(hide_size(huge_sizes[i]));
    expect_null_errno(a, p, ENOMEM, "malloc", huge_sizes[i]);
  }
}
CONTRACT3(malloc_huge_enomem)

static void malloc_sizes_writable(const struct api *a) {
  static const size_t sizes[] = {1, 15, 16, 17, 100, 1000, 4095, 4096, 4097, 65536, 100000, 1 << 20,
                                 (2 << 20) + 1, 3 << 20, 9 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    unsigned char *p = a->malloc(hide_size(sizes[i]));
    check_block(a, p, sizes[i], "malloc");
    pattern_fill(p, sizes[i], (unsigned)i);
    cr_assert_eq(pattern_check(p, sizes[i], (unsigned)i), SIZE_MAX);
    a->free(p);
    cr_assert_not(OWNS_FREED(p), "%sfree(%p): ebb_owns still 1 after free", a->name, (void *)p);
  }
}
CONTRACT3(malloc_sizes_writable)

static void free_null(const struct api *a) {
  errno = EDOM;
  a->free(hide_ptr(NULL));
  cr_assert_eq(errno, EDOM, "%sfree(NULL) changed errno to %d", a->name, errno);
}
CONTRACT3(free_null)

/* A successful free never changes errno, whatever path it takes (small, medium,
 * large, a page emptied, a chunk released). */
static void free_keeps_errno(const struct api *a) {
  static const size_t sizes[] = {0, 1, 16, 100, 1000, 5000, 40000, 100000, 1 << 20, 2 << 20,
                                 3 << 20, 40 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    char *p = a->malloc(hide_size(sizes[i]));
    cr_assert(p);
    memset(p, 1, sizes[i]);
    errno = EDOM;
    a->free(p);
    cr_assert_eq(errno, EDOM, "%sfree of a %zu-byte block changed errno to %d (%s)", a->name,
                 sizes[i], errno, strerror(errno));
  }
  enum { N = 3000 };
  static void *many[N];
  for (size_t s = 24; s <= 24000; s *= 10) {
    for (int i = 0; i < N; i++) {
      many[i] = a->malloc(hide_size(s));
      cr_assert(many[i]);
      memset(many[i], 2, s);
    }
    errno = ERANGE;
    for (int i = 0; i < N; i++) a->free(many[i]);
    cr_assert_eq(errno, ERANGE, "%sfreeing %d blocks of %zu bytes changed errno to %d (%s)", a->name,
                 N, s, errno, strerror(errno));
  }
}
CONTRACT3(free_keeps_errno)

/* ---------------------------------------------------------------- calloc */

static void calloc_zero(const struct api *a) {
  void *p1 = a->calloc(hide_size(0), 0), *p2 = a->calloc(hide_size(0), 16),
       *p3 = a->calloc(hide_size(16), 0);
  check_block(a, p1, 0, "calloc(0, 0)");
  check_block(a, p2, 0, "calloc(0, 16)");
  check_block(a, p3, 0, "calloc(16, 0)");
  cr_assert(p1 != p2 && p2 != p3 && p1 != p3, "%scalloc with a zero size returned a pointer twice",
            a->name);
  a->free(p1);
  a->free(p2);
  a->free(p3);
}
CONTRACT3(calloc_zero)

static void calloc_overflow(const struct api *a) {
  static const size_t cases[][2] = {{SIZE_MAX / 2 + 1, 2}, {SIZE_MAX, SIZE_MAX}, {(size_t)1 << 32, (size_t)1 << 32},
                                    {1, SIZE_MAX}, {SIZE_MAX, 1}, {SIZE_MAX / 16 + 1, 16},
                                    {3, SIZE_MAX / 3 + 1}};
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    errno = 0;
    void *p = a->calloc(hide_size(cases[i][0]), hide_size(cases[i][1]));
    int e = errno;
    cr_assert_null(p, "%scalloc(%#zx, %#zx) returned %p, expected NULL", a->name, cases[i][0],
                   cases[i][1], p);
    cr_assert_eq(e, ENOMEM, "%scalloc(%#zx, %#zx): errno %d, expected ENOMEM", a->name, cases[i][0],
                 cases[i][1], e);
  }
}
CONTRACT3(calloc_overflow)

static void calloc_zeroes(const struct api *a) {
  static const size_t sizes[][2] = {{1, 1}, {3, 5}, {10, 100}, {1, 4096}, {7, 10000},
                                    {1000, 100}, {1, 3 << 20}, {(1 << 20) + 3, 5}};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    size_t n = sizes[i][0] * sizes[i][1];
    unsigned char *p = a->calloc(hide_size(sizes[i][0]), hide_size(sizes[i][1]));
    check_block(a, p, n, "calloc");
    size_t at = first_nonzero(p, n);
    cr_assert_eq(at, SIZE_MAX, "%scalloc(%zu, %zu): byte %zu is %#x", a->name, sizes[i][0],
                 sizes[i][1], at, at == SIZE_MAX ? 0 : p[at]);
    memset(p, 0xAA, n);
    a->free(p);
  }
}
CONTRACT3(calloc_zeroes)

/* ---------------------------------------------------------------- realloc */

static void realloc_null_is_malloc(const struct api *a) {
  void *p = a->realloc(hide_ptr(NULL), 100);
  check_block(a, p, 100, "realloc(NULL, 100)");
  void *q = a->realloc(hide_ptr(NULL), 0);
  check_block(a, q, 0, "realloc(NULL, 0)");
  cr_assert_neq(p, q);
  a->free(p);
  a->free(q);
}
CONTRACT3(realloc_null_is_malloc)

static void realloc_zero_frees(const struct api *a) {
  static const size_t sizes[] = {1, 100, 5000, 100000, 3 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    void *p = a->malloc(hide_size(sizes[i]));
    cr_assert(ebb_owns(p));
    void *q = a->realloc(p, hide_size(0));
    cr_assert_null(q, "%srealloc(p, 0) returned %p, expected NULL (glibc frees p)", a->name, q);
    cr_assert_not(OWNS_FREED(p), "%srealloc(p, 0) did not free the %zu-byte block %p", a->name,
                  sizes[i], p);
  }
}
CONTRACT3(realloc_zero_frees)

static void realloc_huge_keeps_block(const struct api *a) {
  for (size_t i = 0; i < ARRAY_LEN(huge_sizes); i++) {
    unsigned char *p = a->malloc(hide_size(200));
    pattern_fill(p, 200, 7);
    errno = 0;
    void *q = a->realloc(p, hide_size(huge_sizes[i]));
    expect_null_errno(a, q, ENOMEM, "realloc(p, huge)", huge_sizes[i]);
    cr_assert(ebb_owns(p), "%srealloc failing freed the original block", a->name);
    cr_assert_eq(pattern_check(p, 200, 7), SIZE_MAX, "%srealloc failing changed the block", a->name);
    a->free(p);
  }
}
CONTRACT3(realloc_huge_keeps_block)

static void realloc_grow_shrink(const struct api *a) {
  size_t size = 1;
  unsigned char *p = a->malloc(size);
  pattern_fill(p, size, 3);
  /* up by small and large steps, then down again; contents survive each move */
  static const size_t steps[] = {2,    15,    16,    17,    100,    128,     129,     1000,    4096,
                                 5000, 65536, 65537, 300000, 1 << 20, 3 << 20, 3 << 20, 10 << 20, 1000,
                                 24,   0x555, 77777, 16,     1};
  for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
    size_t keep = size < steps[i] ? size : steps[i];
    unsigned char *q = a->realloc(p, hide_size(steps[i]));
    check_block(a, q, steps[i], "realloc");
    size_t bad = pattern_check(q, keep, 3);
    cr_assert_eq(bad, SIZE_MAX, "%srealloc %zu -> %zu: byte %zu lost", a->name, size, steps[i], bad);
    if (q != p) cr_assert_not(OWNS_FREED(p), "%srealloc moved the block but left the old one live", a->name);
    pattern_fill(q, steps[i], 3);
    p = q;
    size = steps[i];
  }
  a->free(p);
}
CONTRACT3(realloc_grow_shrink)

/* Threads resizing blocks across the 2 MiB line and between large sizes at
 * once, after large blocks were shrunk in place (so the large-block cache
 * holds ranges): the kernel moves one block's pages while another thread maps
 * or reuses the range they left. Contents survive; under memcheck (the
 * valgrind suite) no access is reported, which needs ebb to unregister a
 * block before its pages move (found by a probe: about 14 false "invalid
 * write" reports a run when it did so after; this workload is the probe's). */
static void spot_fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i += 509) p[i] = (unsigned char)(seed + i * 7);
  if (n) p[n - 1] = (unsigned char)(seed + (n - 1) * 7);
}
static size_t spot_bad(const unsigned char *p, size_t n, unsigned seed) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i += 509) bad += p[i] != (unsigned char)(seed + i * 7);
  return bad;
}
struct big_walk {
  const struct api *a;
  unsigned seed;
  size_t lost; /* spots that lost their byte */
};
static void *big_walk(void *arg) {
  struct big_walk *w = arg;
  unsigned seed = w->seed, s = seed;
  size_t n = 1;
  unsigned char *p = w->a->malloc(1);
  spot_fill(p, 1, seed);
  for (int i = 0; i < 300; i++) {
    s = s * 1103515245u + 12345u;
    size_t m;
    switch (s % 6) {
    case 0: m = n * 2 + 1; break;
    case 1: m = n / 2; break;
    case 2: m = n + 1; break;
    case 3: m = n > 1 ? n - 1 : 1; break;
    case 4: m = (s >> 8) % (24u << 20); break;
    default: m = (s >> 8) % 4096;
    }
    if (m > (40u << 20)) m = (s >> 8) % (40u << 20);
    if (m == 0) m = 1;
    unsigned char *q = w->a->realloc(p, m);
    if (!q) break;
    w->lost += spot_bad(q, n < m ? n : m, seed);
    spot_fill(q, m, ++seed);
    p = q, n = m;
  }
  w->a->free(p);
  return NULL;
}
static void realloc_large_in_threads(const struct api *a) {
  for (size_t n = 3u << 20; n <= 64u << 20; n = n * 3 / 2) {
    unsigned char *p = a->malloc(n);
    spot_fill(p, n, 1);
    p = a->realloc(p, n / 2 + 4096);
    p = a->realloc(p, (2u << 20) + 1);
    size_t kept = n / 2 + 4096 < (2u << 20) + 1 ? n / 2 + 4096 : (2u << 20) + 1;
    cr_assert_eq(spot_bad(p, kept, 1), 0, "%srealloc: a shrunk %zu-byte block lost bytes", a->name, n);
    a->free(p);
  }
  pthread_t t[6];
  struct big_walk w[6];
  for (unsigned r = 0; r < 3; r++) {
    for (unsigned i = 0; i < 6; i++) {
      w[i] = (struct big_walk){a, i * 1000 + r * 7 + 1, 0};
      cr_assert_eq(pthread_create(&t[i], NULL, big_walk, &w[i]), 0);
    }
    for (unsigned i = 0; i < 6; i++) {
      pthread_join(t[i], NULL);
      cr_assert_eq(w[i].lost, 0, "%srealloc: thread %u lost %zu spots", a->name, i, w[i].lost);
    }
  }
}
CONTRACT(realloc_large_in_threads)

/* Growing within the usable size must not move the block. */
static void realloc_within_usable(const struct api *a) {
  static const size_t sizes[] = {1, 20, 100, 1000, 5000, 50000};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    void *p = a->malloc(hide_size(sizes[i]));
    size_t u = a->usable(p);
    void *q = a->realloc(p, hide_size(u));
    cr_assert_eq(q, p, "%srealloc(p, usable size %zu) moved a %zu-byte block", a->name, u, sizes[i]);
    a->free(q);
  }
}
CONTRACT(realloc_within_usable)

static void reallocarray_contract(const struct api *a) {
  unsigned char *p = a->reallocarray(hide_ptr(NULL), hide_size(10), 10);
  check_block(a, p, 100, "reallocarray(NULL, 10, 10)");
  pattern_fill(p, 100, 9);
  static const size_t over[][2] = {{SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 32, (size_t)1 << 32},
                                   {SIZE_MAX, SIZE_MAX}, {2, SIZE_MAX / 2 + 1}};
  for (size_t i = 0; i < ARRAY_LEN(over); i++) {
    errno = 0;
    void *q = a->reallocarray(p, hide_size(over[i][0]), hide_size(over[i][1]));
    int e = errno;
    cr_assert_null(q, "%sreallocarray(p, %#zx, %#zx) returned %p", a->name, over[i][0], over[i][1], q);
    cr_assert_eq(e, ENOMEM, "%sreallocarray overflow: errno %d, expected ENOMEM", a->name, e);
    cr_assert(ebb_owns(p), "%sreallocarray overflow freed the block", a->name);
    cr_assert_eq(pattern_check(p, 100, 9), SIZE_MAX);
  }
  unsigned char *q = a->reallocarray(p, hide_size(1000), 1000);
  check_block(a, q, 1000000, "reallocarray(p, 1000, 1000)");
  cr_assert_eq(pattern_check(q, 100, 9), SIZE_MAX, "%sreallocarray lost the contents", a->name);
  void *r = a->reallocarray(q, hide_size(0), 10);
  cr_assert_null(r, "%sreallocarray(p, 0, 10) returned %p, expected NULL (as realloc(p, 0))", a->name, r);
  cr_assert_not(OWNS_FREED(q), "%sreallocarray(p, 0, 10) did not free p", a->name);
}
CONTRACT(reallocarray_contract)

/* ---------------------------------------------------------------- aligned allocation */

static const size_t bad_alignments[] = {3, 5, 6, 12, 24, 48, 100, 4095, 4097, 12288, 65535,
                                        (1 << 20) + 16, SIZE_MAX, SIZE_MAX / 2, SIZE_MAX - 15};

static void posix_memalign_einval(const struct api *a) {
  /* not a power of two, or smaller than (so not a multiple of) sizeof(void *) */
  static const size_t small[] = {0, 1, 2, 4};
  for (size_t i = 0; i < ARRAY_LEN(bad_alignments) + ARRAY_LEN(small); i++) {
    size_t al = i < ARRAY_LEN(small) ? small[i] : bad_alignments[i - ARRAY_LEN(small)];
    void *out = (void *)(uintptr_t)0x5a5a5a50;
    errno = EDOM;
    int rc = a->posix_memalign(&out, hide_size(al), 64);
    int e = errno;
    cr_assert_eq(rc, EINVAL, "%sposix_memalign(alignment %#zx) returned %d, expected EINVAL", a->name, al, rc);
    cr_assert_eq(out, (void *)(uintptr_t)0x5a5a5a50, "%sposix_memalign(alignment %#zx) changed *out to %p",
                 a->name, al, out);
    cr_assert_eq(e, EDOM, "%sposix_memalign(alignment %#zx) changed errno to %d", a->name, al, e);
  }
}
CONTRACT3(posix_memalign_einval)

static void posix_memalign_enomem(const struct api *a) {
  static const size_t cases[][2] = {{8, SIZE_MAX},         {16, SIZE_MAX - 100},
                                    {4096, SIZE_MAX / 2},  {1 << 20, SIZE_MAX - (1 << 20)},
                                    {(size_t)1 << 62, 16}, {(size_t)1 << 63, 1}};
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    void *out = (void *)(uintptr_t)0x5a5a5a50;
    int rc = a->posix_memalign(&out, hide_size(cases[i][0]), hide_size(cases[i][1]));
    cr_assert_eq(rc, ENOMEM, "%sposix_memalign(%#zx, %#zx) returned %d, expected ENOMEM", a->name,
                 cases[i][0], cases[i][1], rc);
    cr_assert(out == (void *)(uintptr_t)0x5a5a5a50 || out == NULL,
              "%sposix_memalign failing set *out to %p", a->name, out);
  }
}
CONTRACT3(posix_memalign_enomem)

static void posix_memalign_ok(const struct api *a) {
  for (size_t al = sizeof(void *); al <= 4 * MiB; al *= 4) {
    void *out = NULL;
    int rc = a->posix_memalign(&out, hide_size(al), 100);
    cr_assert_eq(rc, 0, "%sposix_memalign(%zu, 100) returned %d", a->name, al, rc);
    check_block(a, out, 100, "posix_memalign");
    cr_assert(is_aligned(out, al), "%sposix_memalign(%zu): %p misaligned", a->name, al, out);
    memset(out, 0x11, 100);
    a->free(out);
  }
}
CONTRACT3(posix_memalign_ok)

static void aligned_alloc_einval(const struct api *a) {
  for (size_t i = 0; i < ARRAY_LEN(bad_alignments); i++) {
    errno = 0;
    void *p = a->aligned_alloc(hide_size(bad_alignments[i]), 64);
    expect_null_errno(a, p, EINVAL, "aligned_alloc(alignment, 64)", bad_alignments[i]);
  }
}
CONTRACT(aligned_alloc_einval)

static void aligned_alloc_ok(const struct api *a) {
  /* Every power of two is valid, also below 16; sizes need not be multiples. */
  static const size_t cases[][2] = {{1, 1}, {2, 7}, {4, 100}, {8, 3}, {16, 0}, {64, 100},
                                    {4096, 1}, {4096, 5000}, {1 << 20, 3}};
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    void *p = a->aligned_alloc(hide_size(cases[i][0]), hide_size(cases[i][1]));
    check_block(a, p, cases[i][1], "aligned_alloc");
    cr_assert(is_aligned(p, cases[i][0]), "%saligned_alloc(%zu, %zu) = %p", a->name, cases[i][0],
              cases[i][1], p);
    a->free(p);
  }
  errno = 0;
  void *p = a->aligned_alloc(hide_size(4096), hide_size(SIZE_MAX - 4096));
  expect_null_errno(a, p, ENOMEM, "aligned_alloc(4096, huge)", SIZE_MAX - 4096);
}
CONTRACT(aligned_alloc_ok)

static void memalign_einval(const struct api *a) {
  for (size_t i = 0; i < ARRAY_LEN(bad_alignments); i++) {
    errno = 0;
    void *p = a->memalign(hide_size(bad_alignments[i]), 64);
    expect_null_errno(a, p, EINVAL, "memalign(alignment, 64)", bad_alignments[i]);
  }
}
CONTRACT3(memalign_einval)

static void memalign_zero_is_malloc(const struct api *a) {
  void *p = a->memalign(hide_size(0), 100), *q = a->memalign(hide_size(0), 0);
  check_block(a, p, 100, "memalign(0, 100)");
  check_block(a, q, 0, "memalign(0, 0)");
  cr_assert_neq(p, q);
  a->free(p);
  a->free(q);
  for (size_t al = 1; al <= 1 * MiB; al *= 2) {
    void *r = a->memalign(hide_size(al), 33);
    check_block(a, r, 33, "memalign");
    cr_assert(is_aligned(r, al), "%smemalign(%zu, 33) = %p", a->name, al, r);
    a->free(r);
  }
  errno = 0;
  void *r = a->memalign(hide_size(64), hide_size(SIZE_MAX));
  expect_null_errno(a, r, ENOMEM, "memalign(64, huge)", SIZE_MAX);
}
CONTRACT3(memalign_zero_is_malloc)

static void valloc_contract(const struct api *a) {
  static const size_t sizes[] = {0, 1, 4096, 4097, 10000, 3 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    void *p = a->valloc(hide_size(sizes[i]));
    check_block(a, p, sizes[i], "valloc");
    cr_assert(is_aligned(p, page_size()), "%svalloc(%zu) = %p, not page aligned", a->name, sizes[i], p);
    memset(p, 0x22, sizes[i]);
    a->free(p);
  }
  errno = 0;
  void *p = a->valloc(hide_size(SIZE_MAX));
  expect_null_errno(a, p, ENOMEM, "valloc", SIZE_MAX);
}
CONTRACT3(valloc_contract)

static void pvalloc_contract(const struct api *a) {
  size_t pg = page_size();
  static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 10000, (3 << 20) + 1};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    size_t whole = sizes[i] ? (sizes[i] + pg - 1) / pg * pg : pg; /* pvalloc(0) gives a page */
    unsigned char *p = a->pvalloc(hide_size(sizes[i]));
    check_block(a, p, whole, "pvalloc");
    cr_assert(is_aligned(p, pg), "%spvalloc(%zu) = %p, not page aligned", a->name, sizes[i], (void *)p);
    memset(p, 0x33, whole);
    a->free(p);
  }
  /* Rounding up to a page must not wrap around. */
  static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 100, SIZE_MAX - 4095};
  for (size_t i = 0; i < ARRAY_LEN(huge); i++) {
    errno = 0;
    void *p = a->pvalloc(hide_size(huge[i]));
    expect_null_errno(a, p, ENOMEM, "pvalloc", huge[i]);
  }
}
CONTRACT3(pvalloc_contract)

/* ---------------------------------------------------------------- sizes and sized free */

static void usable_size_contract(const struct api *a) {
  cr_assert_eq(a->usable(hide_ptr(NULL)), 0, "%smalloc_usable_size(NULL) != 0", a->name);
  for (size_t s = 0; s < 3000; s += 7) {
    unsigned char *p = a->malloc(hide_size(s));
    size_t u = a->usable(p);
    cr_assert_geq(u, s, "%smalloc_usable_size: %zu < %zu", a->name, u, s);
    memset(p, 0x44, u); /* the whole usable size is ours */
    a->free(p);
  }
}
CONTRACT(usable_size_contract)

static void free_sized_contract(const struct api *a) {
  a->free_sized(hide_ptr(NULL), 0);
  a->free_sized(hide_ptr(NULL), 100);
  static const size_t sizes[] = {0, 1, 16, 100, 1000, 5000, 100000, 3 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    void *p = a->malloc(hide_size(sizes[i]));
    cr_assert(ebb_owns(p));
    errno = EDOM;
    a->free_sized(p, sizes[i]);
    cr_assert_eq(errno, EDOM, "%sfree_sized changed errno", a->name);
    cr_assert_not(OWNS_FREED(p), "%sfree_sized(%p, %zu) did not free", a->name, p, sizes[i]);
    p = a->calloc(hide_size(sizes[i]), 1);
    a->free_sized(p, sizes[i]);
    cr_assert_not(OWNS_FREED(p), "%sfree_sized of a calloc'd block did not free", a->name);
  }
}
API_TEST(api_std, free_sized_contract) { free_sized_contract(std_api_sized()); }
API_TEST(api_ebb, free_sized_contract) { free_sized_contract(hide_ptr(&ebb_api)); }

static void free_aligned_sized_contract(const struct api *a) {
  a->free_aligned_sized(hide_ptr(NULL), 64, 0);
  static const size_t cases[][2] = {{16, 16}, {64, 64}, {64, 1000}, {4096, 4096}, {4096, 8192},
                                    {65536, 65536}, {1 << 20, 1 << 20}, {1 << 20, 3 << 20}};
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    void *p = a->aligned_alloc(hide_size(cases[i][0]), hide_size(cases[i][1]));
    check_block(a, p, cases[i][1], "aligned_alloc");
    errno = EDOM;
    a->free_aligned_sized(p, cases[i][0], cases[i][1]);
    cr_assert_eq(errno, EDOM, "%sfree_aligned_sized changed errno", a->name);
    cr_assert_not(OWNS_FREED(p), "%sfree_aligned_sized(%p, %zu, %zu) did not free", a->name, p,
                  cases[i][0], cases[i][1]);
  }
}
API_TEST(api_std, free_aligned_sized_contract) { free_aligned_sized_contract(std_api_sized()); }
API_TEST(api_ebb, free_aligned_sized_contract) { free_aligned_sized_contract(hide_ptr(&ebb_api)); }

API_TEST(api_std, cfree_frees) {
  void (*cf)(void *);
#ifdef EBB_API_ONLY
  cr_assert(&cfree != NULL, "cfree is not defined by libebb.a");
  cf = cfree;
#else
  cf = (void (*)(void *))LOOKUP(cfree);
#endif
  cf(hide_ptr(NULL));
  static const size_t sizes[] = {1, 1000, 100000, 3 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    void *p = malloc(hide_size(sizes[i]));
    cr_assert(ebb_owns(p));
    errno = EDOM;
    cf(p);
    cr_assert_eq(errno, EDOM);
    cr_assert_not(OWNS_FREED(p), "cfree(%p) did not free", p);
  }
}

/* Blocks from one family of names may be freed by any other. */
API_TEST(api_extra, names_interchangeable) {
  struct api *s = std_api();
  void *p = ebb_malloc(100), *q = s->malloc(100), *r = ebb_aligned_alloc(4096, 100);
  void *t = s->calloc(3, 33);
  cr_assert(ebb_owns(p) && ebb_owns(q) && ebb_owns(r) && ebb_owns(t));
  cr_assert_geq(s->usable(p), 100);
  cr_assert_geq(ebb_malloc_usable_size(q), 100);
  p = s->realloc(p, 5000);
  q = ebb_realloc(q, 5000);
  cr_assert(ebb_owns(p) && ebb_owns(q));
  s->free(p);
  ebb_free(q);
  s->free(r);
  ebb_free(t);
  cr_assert_not(OWNS_FREED(p) || OWNS_FREED(q) || OWNS_FREED(r) || OWNS_FREED(t));
}

#ifndef EBB_API_ONLY
/* Every alias is exported by libebb.so itself and serves ebb's blocks. */
API_TEST(api_alias, all_exported_and_ebbs) {
  struct api *a = alias_api();
  void *p = a->malloc(10), *q = a->calloc(2, 10), *r = a->memalign(256, 10), *s = a->valloc(10),
       *t = a->pvalloc(10), *u = NULL;
  cr_assert_eq(a->posix_memalign(&u, 512, 10), 0);
  void *all[] = {p, q, r, s, t, u};
  for (size_t i = 0; i < ARRAY_LEN(all); i++)
    cr_assert(ebb_owns(all[i]), "alias #%zu returned %p, which ebb does not own", i, all[i]);
  p = a->realloc(p, 10000);
  cr_assert(ebb_owns(p));
  all[0] = p;
  for (size_t i = 0; i < ARRAY_LEN(all); i++) {
    a->free(all[i]);
    cr_assert_not(OWNS_FREED(all[i]), "__libc_free did not free alias block #%zu", i);
  }
}

API_TEST(api_extra, trim_names_exported) {
  const char *where;
  static const char *const names[] = {"malloc_trim", "cfree", "free_sized", "free_aligned_sized"};
  for (size_t i = 0; i < ARRAY_LEN(names); i++)
    cr_expect(ebb_symbol(names[i], &where) != NULL, "%s is not exported by libebb.so (resolves to %s)",
              names[i], where);
}
#endif

/* ---------------------------------------------------------------- ebb_owns */

static char static_buf[256] __attribute__((aligned(64)));

API_TEST(owns, live_blocks_and_freed) {
  static const size_t sizes[] = {0, 1, 16, 100, 1000, 4096, 20000, 65536, 100000, 1 << 20, 2 << 20,
                                 (2 << 20) + 1, 5 << 20, 64 << 20};
  void *p[ARRAY_LEN(sizes)];
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    p[i] = malloc(hide_size(sizes[i]));
    cr_assert(ebb_owns(p[i]), "ebb_owns(malloc(%zu)) = 0", sizes[i]);
  }
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    free(p[i]);
    cr_assert_not(OWNS_FREED(p[i]), "ebb_owns(%p) = 1 after freeing the %zu-byte block", p[i], sizes[i]);
  }
  void *al = aligned_alloc(1 << 20, 100);
  cr_assert(ebb_owns(al), "ebb_owns(aligned_alloc(1 MiB, 100)) = 0");
  free(al);
}

API_TEST(owns, interior_pointers) {
  static const size_t sizes[] = {32, 100, 1000, 20000, 100000, 1 << 20, 3 << 20, 40 << 20};
  for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
    char *p = malloc(hide_size(sizes[i]));
    size_t u = malloc_usable_size(p);
    size_t offs[] = {1, 8, 16, sizes[i] / 2, sizes[i] / 2 & ~(size_t)15, sizes[i] - 16, u,
                     4096, 65536};
    for (size_t j = 0; j < ARRAY_LEN(offs); j++) {
      if (offs[j] == 0 || offs[j] > u) continue;
      /* One past the end may be the start of the next block; only test inside. */
      if (offs[j] == u) continue;
      cr_assert_not(ebb_owns(p + offs[j]), "ebb_owns(p + %zu) = 1 for a %zu-byte block", offs[j],
                    sizes[i]);
    }
    free(p);
  }
}

API_TEST(owns, foreign_pointers) {
  char stack_buf[64];
  int local;
  cr_assert_not(ebb_owns(NULL));
  cr_assert_not(ebb_owns(hide_ptr(stack_buf)), "ebb_owns(stack array) = 1");
  cr_assert_not(ebb_owns(hide_ptr(&local)), "ebb_owns(&local) = 1");
  cr_assert_not(ebb_owns(hide_ptr(static_buf)), "ebb_owns(static array) = 1");
  cr_assert_not(ebb_owns(hide_ptr((void *)"a string literal")));
  cr_assert_not(ebb_owns((const void *)(uintptr_t)&ebb_owns), "ebb_owns(a function) = 1");
  static const uintptr_t wild[] = {1,
                                   16,
                                   4096,
                                   0xfff0,
                                   (uintptr_t)1 << 32,
                                   (uintptr_t)1 << 46,
                                   0x7ffffffff000,
                                   0x7ffffffffff0,
                                   (uintptr_t)1 << 47,
                                   0x800000000000,
                                   (uintptr_t)1 << 56,
                                   0xffff800000000000,
                                   UINTPTR_MAX - 4095,
                                   UINTPTR_MAX - 15,
                                   UINTPTR_MAX};
  for (size_t i = 0; i < ARRAY_LEN(wild); i++)
    cr_assert_not(ebb_owns((const void *)wild[i]), "ebb_owns(%#lx) = 1", (unsigned long)wild[i]);
}

/* Memory of our own, even aligned as ebb's chunks are and inaccessible, is not ebb's. */
API_TEST(owns, own_mappings) {
  size_t len = 16 * MiB;
  char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert(m != MAP_FAILED);
  char *aligned = (char *)align_up_ptr(m, 4 * MiB);
  memset(aligned, 0xff, 64 * KiB); /* garbage where a chunk header would be */
  const void *probes[] = {m, m + 16, m + 4096, aligned, aligned + 16, aligned + 64 * KiB,
                          aligned + 64 * KiB + 48, aligned + 2 * MiB};
  for (size_t i = 0; i < ARRAY_LEN(probes); i++)
    cr_assert_not(ebb_owns(probes[i]), "ebb_owns(own mmap + %#lx) = 1",
                  (unsigned long)((const char *)probes[i] - m));
  cr_assert_eq(mprotect(aligned, 4 * MiB, PROT_NONE), 0);
  cr_assert_not(ebb_owns(aligned), "ebb_owns(PROT_NONE page) = 1");
  cr_assert_not(ebb_owns(aligned + 64 * KiB + 16));
  munmap(m, len);
  cr_assert_not(ebb_owns(aligned), "ebb_owns(unmapped address) = 1");
}

API_TEST(owns, arena_blocks) {
  ebb_arena_t *ar = ebb_arena_create();
  cr_assert(ar);
  void *p = ebb_arena_malloc(ar, 100), *q = ebb_arena_calloc(ar, 10, 1000),
       *r = ebb_arena_malloc(ar, 5 << 20);
  cr_assert(ebb_owns(p) && ebb_owns(q) && ebb_owns(r), "ebb_owns is 0 for a first-class arena's block");
  cr_assert_not(ebb_owns((char *)q + 16));
  ebb_arena_destroy(ar);
}

/* Whether memcheck (when running under it, in the valgrind build) takes the
 * byte at p for unaddressable: 3 from VALGRIND_GET_VBITS, which reports no
 * error; 0 when not under valgrind. */
static int vg_unaddressable(const void *p) {
  unsigned char bits;
  return VALGRIND_GET_VBITS(p, &bits, 1) == 3;
}

/* ebb_arena_reset and ebb_arena_destroy free every block at once, memcheck
 * included: a block of a reset arena, and a small and a large one of a
 * destroyed arena, are unaddressable to it afterwards, and the reset arena
 * hands the same memory out again without memcheck seeing two live blocks at
 * one address (its leak check aborted on that; found by a probe). Outside
 * valgrind only the reuse is checked. */
API_TEST(arena, reset_and_destroy_free_every_block) {
  ebb_arena_t *ar = ebb_arena_create();
  cr_assert(ar);
  char *p = ebb_arena_malloc(ar, 100), *big = ebb_arena_malloc(ar, 5 << 20);
  cr_assert(p && big);
  memset(p, 1, 100);
  big[0] = 1;
  int vg = RUNNING_ON_VALGRIND_OR_0;
  cr_assert(!vg || !vg_unaddressable(p), "a live block is addressable");
  ebb_arena_reset(ar);
  cr_assert(!vg || vg_unaddressable(p), "memcheck still takes a block of a reset arena for live");
  cr_assert(!vg || vg_unaddressable(big), "memcheck still takes a large block of a reset arena for live");
  char *q = ebb_arena_malloc(ar, 100);
  cr_assert(q);
  memset(q, 2, 100);
  cr_assert(!vg || !vg_unaddressable(q));
  ebb_arena_destroy(ar);
  cr_assert(!vg || vg_unaddressable(q), "memcheck still takes a block of a destroyed arena for live");
}

/* ---------------------------------------------------------------- stats and trim */

/* struct ebb_stats as ebb 0.1's header had it: a binary built against it and
 * run on this library reaches the symbol ebb_stats, which must fill these
 * fields and write nothing after them (0.2 appended six fields; writing them
 * into an old caller's struct would overwrite its stack). */
struct ebb_stats_0_1 {
  size_t mapped, active, dirty, purged, allocated;
  uint64_t mmap_calls, munmap_calls, madvise_calls, arenas;
};

API_TEST(stats, a_caller_built_against_the_0_1_header_is_not_written_past_its_struct) {
  struct {
    struct ebb_stats_0_1 s;
    unsigned char canary[128];
  } old;
  memset(&old, 0xa5, sizeof old);
  void *big = malloc(hide_size(8 * MiB));
  cr_assert(big);
  void (*sym)(struct ebb_stats *) = hide_ptr(ebb_stats); /* the symbol, as a 0.1 binary calls it */
  sym((struct ebb_stats *)(void *)&old.s);
  for (size_t i = 0; i < sizeof old.canary; i++)
    cr_assert_eq(old.canary[i], 0xa5, "byte %zu after a 0.1-sized struct was written", i);
  cr_assert_geq(old.s.mapped, 8 * MiB, "the 0.1 fields are filled (mapped %zu)", old.s.mapped);
  cr_assert_geq(old.s.active, 8 * MiB);
  cr_assert_geq(old.s.mmap_calls, 1);
  cr_assert_neq(old.s.arenas, 0xa5a5a5a5a5a5a5a5ull, "the last 0.1 field is written");
  /* this header's callers get every field: ebb_stats(&s) passes its size */
  struct ebb_stats s;
  memset(&s, 0, sizeof s);
  ebb_stats(&s);
  cr_assert_geq(s.threads, 1, "a field 0.2 added is filled for a 0.2 caller");
  cr_assert_geq(s.peak_active, s.active);
  free(big);
}

API_TEST(stats, counters_follow_a_large_block) {
  struct ebb_stats s0, s1, s2;
  ebb_stats(&s0);
  size_t n = 64 * MiB;
  char *p = malloc(hide_size(n));
  cr_assert(p);
  memset(p, 1, n);
  ebb_stats(&s1);
  /* n - n / 8: a purge thread may unmap older memory meanwhile */
  cr_assert_geq(s1.mapped, s0.mapped + n - n / 8, "mapped %zu -> %zu after a 64 MiB malloc", s0.mapped,
                s1.mapped);
  cr_assert_geq(s1.active, s0.active + n, "active %zu -> %zu after a 64 MiB malloc", s0.active, s1.active);
  cr_assert_geq(s1.allocated, s0.allocated + n / 2, "allocated %zu -> %zu after a 64 MiB malloc",
                s0.allocated, s1.allocated);
  cr_assert_gt(s1.mmap_calls, s0.mmap_calls, "mmap_calls did not move for a 64 MiB block");
  cr_assert_geq(s1.arenas, 1);
  cr_assert_leq(s1.active, s1.mapped);
  free(p);
  ebb_stats(&s2);
  cr_assert_leq(s2.active + n, s1.active, "active %zu -> %zu after freeing 64 MiB", s1.active, s2.active);
}

API_TEST(stats, print_writes_something) {
  int pfd[2];
  cr_assert_eq(pipe(pfd), 0);
  ebb_stats_print(pfd[1], EBB_STATS_SUMMARY);
  close(pfd[1]);
  char buf[65536];
  ssize_t n = read(pfd[0], buf, sizeof buf - 1);
  close(pfd[0]);
  cr_assert_gt(n, 0, "ebb_stats_print wrote nothing");
  buf[n] = 0;
  cr_assert(strchr(buf, '\n'), "ebb_stats_print output has no newline: %s", buf);
}

/* Frees many medium blocks, then trims: nothing dirty may stay. */
static void trim_check(size_t (*trim)(void), const char *name) {
  enum { N = 2048 };
  static void *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = malloc(hide_size(16 * KiB));
    memset(p[i], 5, 16 * KiB);
  }
  for (int i = 0; i < N; i++) free(p[i]);
  struct ebb_stats s0, s1;
  ebb_stats(&s0);
  size_t t = trim();
  ebb_stats(&s1);
  /* Criterion's own threads may free (and so leave a page dirty) between the
   * trim and the second ebb_stats: a few pages, never the 32 MiB freed here. */
  cr_assert_leq(s1.dirty, 256 * KiB, "%s left %zu dirty bytes (%zu before)", name, s1.dirty, s0.dirty);
  cr_assert_geq(s1.purged + 256 * KiB, s0.purged + s0.dirty, "%s: purged %zu -> %zu with %zu dirty", name,
                s0.purged, s1.purged, s0.dirty);
  if (t != SIZE_MAX) cr_assert_geq(t, s0.dirty, "ebb_trim returned %zu, but %zu were dirty", t, s0.dirty);
}
API_TEST(stats, ebb_trim_purges_all) { trim_check(ebb_trim, "ebb_trim()"); }

#ifndef EBB_API_ONLY
static int (*malloc_trim_fn)(size_t);
static size_t call_malloc_trim(void) {
  malloc_trim_fn(0);
  return SIZE_MAX;
}
API_TEST(stats, malloc_trim_purges_all) {
  malloc_trim_fn = (int (*)(size_t))LOOKUP(malloc_trim);
  trim_check(call_malloc_trim, "malloc_trim(0)");
}
#endif
