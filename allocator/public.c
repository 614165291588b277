/* public.c — owns the standard names: the malloc family, glibc's aliases and
 * extras (malloc_trim, malloc_stats, mallinfo2), and C++ operator new/delete
 * in all their forms, so LD_PRELOAD and static linking both route every
 * allocation to ebb. Left out of unit-test builds (EBB_NO_OVERRIDE).
 * May call: the ebb_* API, and alloc.c's inline malloc and free paths
 * (operator new and delete are as hot as malloc and free in C++ programs: a
 * call to the exported ebb_malloc from here is an indirect jump through the
 * PLT and a stack frame). */
#ifndef EBB_NO_OVERRIDE
#include "ebb.h"
#include "common.h"
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include "fmt.h"
#include "huge.h"

#define ALIAS(name) __attribute__((alias(#name), used, visibility("default")))

void *malloc(size_t size) ALIAS(ebb_malloc);
void free(void *p) ALIAS(ebb_free);
void cfree(void *p) ALIAS(ebb_free);
void *calloc(size_t n, size_t size) ALIAS(ebb_calloc);
void *realloc(void *p, size_t size) ALIAS(ebb_realloc);
void *reallocarray(void *p, size_t n, size_t size) ALIAS(ebb_reallocarray);
int posix_memalign(void **out, size_t alignment, size_t size) ALIAS(ebb_posix_memalign);
void *aligned_alloc(size_t alignment, size_t size) ALIAS(ebb_aligned_alloc);
void *memalign(size_t alignment, size_t size) ALIAS(ebb_memalign);
void *valloc(size_t size) ALIAS(ebb_valloc);
void *pvalloc(size_t size) ALIAS(ebb_pvalloc);
size_t malloc_usable_size(void *p) ALIAS(ebb_malloc_usable_size);
void free_sized(void *p, size_t size) ALIAS(ebb_free_sized);
void free_aligned_sized(void *p, size_t alignment, size_t size) ALIAS(ebb_free_aligned_sized);

void *__libc_malloc(size_t size) ALIAS(ebb_malloc);
void __libc_free(void *p) ALIAS(ebb_free);
void *__libc_calloc(size_t n, size_t size) ALIAS(ebb_calloc);
void *__libc_realloc(void *p, size_t size) ALIAS(ebb_realloc);
void *__libc_memalign(size_t alignment, size_t size) ALIAS(ebb_memalign);
void *__libc_valloc(size_t size) ALIAS(ebb_valloc);
void *__libc_pvalloc(size_t size) ALIAS(ebb_pvalloc);
int __posix_memalign(void **out, size_t alignment, size_t size) ALIAS(ebb_posix_memalign);

EBB_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  return ebb_trim() > 0;
}

EBB_EXPORT void malloc_stats(void) { ebb_stats_print(2, EBB_STATS_SUMMARY); }

EBB_EXPORT struct mallinfo2 mallinfo2(void) {
  struct ebb_stats s;
  ebb_stats(&s);
  /* Shaped as glibc's, so that its usual sums mean the same: arena is what
   * the heaps hold (ebb's chunks and the large-block cache), hblkhd and hblks
   * the live large blocks, each mapped on its own, uordblks the bytes in live
   * blocks outside them: arena + hblkhd is everything mapped, uordblks +
   * hblkhd what live blocks take. hblkhd was the whole mapping, as arena was,
   * so that arena + hblkhd counted it twice (found by a probe). keepcost:
   * what malloc_trim returns, the dirty bytes. Read apart from ebb_stats
   * while other threads run: each is kept within the one it is part of. */
  size_t large = huge_active_bytes(), large_live = huge_in_use_bytes();
  struct mallinfo2 m = {0};
  m.hblkhd = large < s.mapped ? large : s.mapped;
  m.hblks = huge_blocks();
  m.arena = s.mapped - m.hblkhd;
  m.uordblks = s.allocated > large_live ? s.allocated - large_live : 0;
  if (m.uordblks > m.arena) m.uordblks = m.arena;
  m.fordblks = m.arena - m.uordblks;
  m.keepcost = s.dirty;
  return m;
}

/* The old int-sized mallinfo, clamped; defined too so that a fully static program
 * calling it does not pull glibc's malloc.o (and its clashing malloc) from libc.a. */
static int clamp_int(size_t v) { return v > INT32_MAX ? INT32_MAX : (int)v; }
EBB_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m = {0};
  m.arena = clamp_int(m2.arena);
  m.uordblks = clamp_int(m2.uordblks);
  m.fordblks = clamp_int(m2.fordblks);
  m.keepcost = clamp_int(m2.keepcost);
  m.hblkhd = clamp_int(m2.hblkhd);
  m.hblks = clamp_int(m2.hblks);
  return m;
}

/* glibc's malloc_info writes XML to a FILE. ebb writes the same counters as a
 * small XML document, formatted in a stack buffer and written to the stream's
 * descriptor after flushing it (fflush and fileno do not allocate). */
EBB_EXPORT int malloc_info(int options, FILE *fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  int fd = fileno(fp);
  if (fd < 0) { /* a stream with no descriptor (open_memstream, fmemopen): only stdio could write it */
    errno = EBADF;
    return -1;
  }
  struct ebb_stats s;
  ebb_stats(&s);
  char buf[512];
  fmt_t f = FMT_ON(buf);
  fmt_str(&f, "<malloc version=\"ebb-1\">\n<total type=\"mapped\" size=\"");
  fmt_u64(&f, s.mapped);
  fmt_str(&f, "\"/>\n<total type=\"active\" size=\"");
  fmt_u64(&f, s.active);
  fmt_str(&f, "\"/>\n<total type=\"dirty\" size=\"");
  fmt_u64(&f, s.dirty);
  fmt_str(&f, "\"/>\n<total type=\"allocated\" size=\"");
  fmt_u64(&f, s.allocated);
  fmt_str(&f, "\"/>\n</malloc>\n");
  fflush(fp);
  fmt_flush(&f, fd);
  return 0;
}

/* mallopt is accepted and ignored (ebb is tuned by EBB_* variables). */
EBB_EXPORT int mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}

/* ---- C++: defined here with their mangled names so libebb needs no libstdc++.
 * A failed throwing new calls the installed new_handler, then throws
 * std::bad_alloc through libstdc++ when the program has it: weak references,
 * or, when those were bound before libstdc++ was loaded (a C program that
 * dlopens C++ code, found by a probe: ebb aborted), the loader's lookup. */
typedef void (*new_handler_t)(void);
typedef new_handler_t get_new_handler_t(void);
typedef void throw_bad_alloc_t(void);
extern get_new_handler_t _ZSt15get_new_handlerv __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));
/* What a program's own `throw std::bad_alloc()` refers to: the exception's
 * storage and throw (the C++ ABI's), std::bad_alloc's type_info, vtable (its
 * inline constructor stores it) and destructor. In a fully static link these
 * come out of libstdc++.a when the program throws std::bad_alloc itself, where
 * std::__throw_bad_alloc comes only with the library code that calls it (a
 * standard container): such a program aborted (found by a probe). */
extern void *__cxa_allocate_exception(size_t) __attribute__((weak));
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak, noreturn));
extern char bad_alloc_type_info[] __asm__("_ZTISt9bad_alloc") __attribute__((weak));
extern void *bad_alloc_vtable[] __asm__("_ZTVSt9bad_alloc") __attribute__((weak));
extern void bad_alloc_destroy(void *) __asm__("_ZNSt9bad_allocD1Ev") __attribute__((weak));

/* Throws std::bad_alloc built from its parts, when the program has them all. */
static void throw_bad_alloc_by_parts(void) {
  void *(*allocate)(size_t) = __cxa_allocate_exception;
  void (*throw_it)(void *, void *, void (*)(void *)) = __cxa_throw;
  char *type = bad_alloc_type_info;
  void **vtable = bad_alloc_vtable;
  void (*destroy)(void *) = bad_alloc_destroy;
  if (!allocate || !throw_it || !type || !vtable || !destroy) return;
  void **e = allocate(sizeof(void *));
  e[0] = &vtable[2]; /* the object's vptr: past the offset to top and the type_info */
  throw_it(e, type, destroy);
}

static get_new_handler_t *new_handler_getter(void) {
  get_new_handler_t *get = _ZSt15get_new_handlerv;
  return get ? get : (get_new_handler_t *)os_cxx_symbol("_ZSt15get_new_handlerv");
}

static void *new_failed(size_t size, size_t align) {
  get_new_handler_t *get = new_handler_getter();
  for (;;) {
    new_handler_t h = get ? get() : NULL;
    if (!h) break;
    h();
    void *p = align > 16 ? ebb_aligned_alloc(align, size ? size : 1) : ebb_malloc(size); /* as new_aligned_throw */
    if (p) return p;
  }
  throw_bad_alloc_t *bad = _ZSt17__throw_bad_allocv;
  if (!bad) bad = (throw_bad_alloc_t *)os_cxx_symbol("_ZSt17__throw_bad_allocv");
  if (bad) bad();
  throw_bad_alloc_by_parts();
  ebb_fatal("operator new", "out of memory", NULL);
}

static EBB_NOINLINE void *new_slow(size_t size) {
  void *p = malloc_slow(size);
  return p ? p : new_failed(size, 0);
}
EBB_INLINE void *new_throw(size_t size) {
  void *p = malloc_fast(size);
  return likely(p != NULL) ? p : new_slow(size);
}
/* No rounding of the size up to the alignment (aligned_alloc takes any size):
 * that rounding wrapped around to 0 for sizes near SIZE_MAX, and a tiny block
 * came back (found by a probe; libstdc++ 12's own operator does the same). */
static void *new_aligned_throw(size_t size, size_t align) {
  void *p = ebb_aligned_alloc(align, size ? size : 1);
  return p ? p : new_failed(size, align);
}
/* A failed nothrow form. The standard's is the throwing form with its
 * std::bad_alloc caught: it calls the new_handler until that gives up, so a
 * handler that frees a reserve makes it succeed. ebb's returned NULL at once
 * (found by a probe: libstdc++'s own succeeded). C cannot catch, so with a
 * handler installed the request goes to the C++ runtime's own nothrow form
 * (libstdc++'s is try { return operator new(n); } catch (...) { return
 * nullptr; }), whose operator new is ebb's throwing one (new_failed: the
 * handler loop, then the throw it catches). With no handler the answer is
 * NULL without a throw; with no runtime to catch (a fully static link) it is
 * NULL without calling the handler, as before. form: the caller's, which
 * names the runtime's of the same form. */
typedef void *nothrow_new_t(size_t, const void *);
typedef void *nothrow_new_aligned_t(size_t, size_t, const void *);
/* The runtime's four nothrow forms, looked up in ebb's constructor while
 * memory is still there: the lookup needs dlopen, which fails itself once
 * memory is exhausted, just when a failing nothrow new needs it (found by a
 * probe: under an address-space cap, with small blocks exhausted too, the
 * handler was never called). A runtime that was not loaded then (dlopen'd
 * later) is looked up at the first failure. */
enum { NT_NEW, NT_NEW_ARRAY, NT_NEW_ALIGNED, NT_NEW_ARRAY_ALIGNED, NT_FORMS };
static const char *const nothrow_names[NT_FORMS] = {"_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
                                                    "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                                    "_ZnamSt11align_val_tRKSt9nothrow_t"};
static void *_Atomic nothrow_runtime[NT_FORMS];
static void *nothrow_runtime_form(unsigned form) {
  void *f = atomic_load_explicit(&nothrow_runtime[form], memory_order_acquire);
  if (!f && (f = os_cxx_runtime_symbol(nothrow_names[form])))
    atomic_store_explicit(&nothrow_runtime[form], f, memory_order_release);
  return f;
}
/* Only where a C++ runtime was loaded with the program (the weak reference
 * says so without a lookup): a failed dlsym mallocs its error message, and
 * asking in every C program gave each one an arena and a chunk at start-up
 * (found by a probe: 1000 runs of /bin/true, +10 % page faults). */
__attribute__((constructor(101))) static void nothrow_runtime_lookup(void) {
  if (!_ZSt15get_new_handlerv) return;
  for (unsigned form = 0; form < NT_FORMS; form++) nothrow_runtime_form(form);
}
static EBB_NOINLINE void *nothrow_failed(unsigned form, size_t n, size_t al, const void *nt) {
  get_new_handler_t *get = new_handler_getter();
  if (!get || !get()) return NULL;
  void *f = nothrow_runtime_form(form);
  if (!f) return NULL;
  return al ? ((nothrow_new_aligned_t *)f)(n, al, nt) : ((nothrow_new_t *)f)(n, nt);
}
static EBB_NOINLINE void *new_nothrow_slow(unsigned form, size_t n, const void *nt) {
  void *p = malloc_slow(n);
  return p ? p : nothrow_failed(form, n, 0, nt);
}
EBB_INLINE void *new_nothrow(unsigned form, size_t n, const void *nt) {
  void *p = malloc_fast(n);
  return likely(p != NULL) ? p : new_nothrow_slow(form, n, nt);
}
static void *new_aligned_nothrow(unsigned form, size_t size, size_t align, const void *nt) {
  void *p = ebb_aligned_alloc(align, size ? size : 1);
  return p ? p : nothrow_failed(form, size, align, nt);
}

EBB_EXPORT EBB_HOT_ENTRY void *_Znwm(size_t n) { return new_throw(n); }
EBB_EXPORT EBB_HOT_ENTRY void *_Znam(size_t n) { return new_throw(n); }
EBB_EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt) { return new_nothrow(NT_NEW, n, nt); }
EBB_EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *nt) { return new_nothrow(NT_NEW_ARRAY, n, nt); }
EBB_EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) { return new_aligned_throw(n, al); }
EBB_EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) { return new_aligned_throw(n, al); }
EBB_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) {
  return new_aligned_nothrow(NT_NEW_ALIGNED, n, al, nt);
}
EBB_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) {
  return new_aligned_nothrow(NT_NEW_ARRAY_ALIGNED, n, al, nt);
}

void _ZdlPv(void *p) ALIAS(ebb_free);
void _ZdaPv(void *p) ALIAS(ebb_free);
void _ZdlPvm(void *p, size_t n) ALIAS(ebb_free_sized);
void _ZdaPvm(void *p, size_t n) ALIAS(ebb_free_sized);
EBB_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt, free_fast(p); }
EBB_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt, free_fast(p); }
/* The aligned forms ignore their extra arguments as ebb_free_sized and
 * ebb_free_aligned_sized do theirs, so they are the same functions (no call
 * through the PLT). */
void _ZdlPvSt11align_val_t(void *p, size_t al) ALIAS(ebb_free_sized);
void _ZdaPvSt11align_val_t(void *p, size_t al) ALIAS(ebb_free_sized);
void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) ALIAS(ebb_free_aligned_sized);
void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) ALIAS(ebb_free_aligned_sized);
EBB_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
  (void)al, (void)nt, free_fast(p);
}
EBB_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
  (void)al, (void)nt, free_fast(p);
}
#endif
