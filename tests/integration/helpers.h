/* helpers.h — what the integration tests share: values the compiler cannot see
 * through, byte patterns, /proc readers, running commands and compilers, and
 * running a misuse case in a child with its stderr captured.
 * The static inline part needs nothing else; the rest lives in helpers.c, which
 * the valgrind build of test_api.c (-DEBB_API_ONLY) does not link. */
#ifndef EBB_TEST_HELPERS_H
#define EBB_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Hide a value from the optimiser, so that malloc(SIZE_MAX) is neither warned
 * about at compile time nor folded, and malloc/free pairs are not elided. */
static inline size_t hide_size(size_t n) {
  __asm__ volatile("" : "+r"(n));
  return n;
}
static inline void *hide_ptr(void *p) {
  __asm__ volatile("" : "+r"(p)::"memory");
  return p;
}

/* The tests look at freed pointers on purpose (ebb_owns, the misuse table). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif
/* ebb_owns on a pointer that has been freed: must be 0 until it is handed out again. */
#define OWNS_FREED(p) ebb_owns(p)

/* A position-dependent byte pattern: neighbouring blocks filled with different
 * seeds cannot be confused with each other. */
static inline unsigned char pattern_byte(size_t i, unsigned seed) {
  return (unsigned char)((i * 131u + (i >> 8) * 7u + seed * 97u + 1u) & 0xff);
}
static inline void pattern_fill(void *p, size_t n, unsigned seed) {
  unsigned char *c = p;
  for (size_t i = 0; i < n; i++) c[i] = pattern_byte(i, seed);
}
/* Offset of the first byte that differs from the pattern, or SIZE_MAX. */
static inline size_t pattern_check(const void *p, size_t n, unsigned seed) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != pattern_byte(i, seed)) return i;
  return SIZE_MAX;
}
/* The same idea eight bytes at a time, for big blocks: byte j is byte j % 8 of
 * pattern_word(j / 8), so a prefix of a filled block checks as the same pattern.
 * p must be 8-aligned. */
static inline uint64_t pattern_word(size_t i, unsigned seed) {
  return ((uint64_t)i * 0x9E3779B97F4A7C15u) ^ ((uint64_t)seed << 40) ^ 0x5bd1e995u;
}
static inline unsigned char pattern_word_byte(size_t j, unsigned seed) {
  uint64_t w = pattern_word(j / 8, seed);
  return ((const unsigned char *)&w)[j % 8];
}
static inline void words_fill(void *p, size_t n, unsigned seed) {
  uint64_t *w = p;
  size_t nw = n / 8;
  for (size_t i = 0; i < nw; i++) w[i] = pattern_word(i, seed);
  for (size_t j = nw * 8; j < n; j++) ((unsigned char *)p)[j] = pattern_word_byte(j, seed);
}
/* Offset of the first byte that differs, or SIZE_MAX. */
static inline size_t words_check(const void *p, size_t n, unsigned seed) {
  const uint64_t *w = p;
  size_t nw = n / 8, j = nw * 8;
  for (size_t i = 0; i < nw; i++)
    if (w[i] != pattern_word(i, seed)) {
      j = i * 8;
      break;
    }
  for (; j < n; j++)
    if (((const unsigned char *)p)[j] != pattern_word_byte(j, seed)) return j;
  return SIZE_MAX;
}

/* Offset of the first nonzero byte, or SIZE_MAX. */
static inline size_t first_nonzero(const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i]) return i;
  return SIZE_MAX;
}
static inline int is_aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }
static inline void *align_up_ptr(void *p, size_t a) {
  return (void *)(((uintptr_t)p + a - 1) & ~(uintptr_t)(a - 1));
}

#ifndef EBB_API_ONLY
/* ---- helpers.c ---- */

/* The repository root (found from /proc/self/exe: <root>/build/tests/integration). */
const char *repo_root(void);
/* <root>/build/tests/tmp, created on first use. */
const char *tmp_dir(void);

/* Output of a command run through /bin/sh -c. */
struct cmd_result {
  int status;     /* as from waitpid */
  char out[65536];/* stdout, NUL-terminated, truncated */
  char err[65536];/* stderr, NUL-terminated, truncated */
};
/* Runs a printf-formatted shell command from the repository root, with stdout
 * and stderr captured. Returns r->status, or -1 if it could not be started. */
int run_cmd(struct cmd_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "exited with 3", "killed by signal 6 (Aborted)" ... into a static buffer. */
const char *describe_status(int status);

/* Compiles tests/programs/<src> with `compiler` (default $CC/$CXX or cc/c++)
 * into build/tests/tmp/<out>, with the given extra flags before and after the
 * source. Returns 0, or the failed command's status with its output in r. */
int compile_program(struct cmd_result *r, const char *compiler, const char *src, const char *out,
                    const char *flags_before, const char *flags_after);

/* The assertions on tests/programs/ctor_thread.c's output ("threads=N
 * rss_mib=M"): ebb's background thread ran (3 threads) and took back the
 * worker's freed 100 MiB (under 40 MiB resident). */
void expect_ctor_thread_got_the_background_thread(const char *out);

/* Size in kB of the [heap] mapping in /proc/self/smaps, or -1 if there is none. */
long heap_kb(void);
/* Resident set size from /proc/self/statm, in bytes. */
size_t rss_bytes(void);

/* dlsym(RTLD_DEFAULT, name), but only if the definition found lives in
 * libebb; otherwise NULL, and *where names the object that defines it (or
 * "nowhere"). */
void *ebb_symbol(const char *name, const char **where);

/* Runs fn(expected) in a forked child with stderr going to a pipe. fn stores
 * the pointer it is about to misuse in *expected before misusing it; the
 * parent reads it back through shared memory. */
struct child_result {
  int status;         /* as from waitpid */
  uintptr_t expected; /* what the child stored */
  char err[8192];     /* its stderr, NUL-terminated */
};
typedef void misuse_fn(volatile uintptr_t *expected);
void run_misuse_child(misuse_fn *fn, struct child_result *r);
#endif

#endif
