/* ebb.h — the public interface of ebb, an mmap-only malloc with per-thread arenas
 * and decay-based page return.
 *
 * Besides the standard names (malloc, free, ... exported by libebb.so and libebb.a),
 * every function is also available under an ebb_ name that works without
 * overriding anything. See docs/api.md for the guarantees of each function. */
#ifndef EBB_H
#define EBB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version, one number for the header, the library (ebb_version()), ebb.pc and
 * the ebb command (the Makefile reads EBB_VERSION_STRING from here). */
#define EBB_VERSION_MAJOR 0
#define EBB_VERSION_MINOR 2
#define EBB_VERSION_PATCH 0
#define EBB_VERSION_STRING "0.2.0"

/* The version of the library in use, EBB_VERSION_STRING of the ebb.h it was
 * built with: compare the two to catch a header/library mismatch. */
const char *ebb_version(void);

/* The malloc family under ebb_ names. Same contracts as the standard ones (glibc's
 * choices where the standard leaves one: malloc(0) returns a unique pointer,
 * realloc(p, 0) frees p and returns NULL). */
void *ebb_malloc(size_t size);
void ebb_free(void *p);
void *ebb_calloc(size_t n, size_t size);
void *ebb_realloc(void *p, size_t size);
void *ebb_reallocarray(void *p, size_t n, size_t size);
int ebb_posix_memalign(void **out, size_t alignment, size_t size);
void *ebb_aligned_alloc(size_t alignment, size_t size);
void *ebb_memalign(size_t alignment, size_t size);
void *ebb_valloc(size_t size);
void *ebb_pvalloc(size_t size);
size_t ebb_malloc_usable_size(const void *p);
void ebb_free_sized(void *p, size_t size);
void ebb_free_aligned_sized(void *p, size_t alignment, size_t size);

/* 1 if p is the start of a block ebb handed out and has not seen freed, else 0.
 * Never aborts; safe on any pointer value. */
int ebb_owns(const void *p);

/* First-class arenas: allocate many blocks, free them all at once.
 * An arena may be used by one thread at a time (the caller serialises calls on
 * the same arena); a block from it may be passed to free() from any thread. */
typedef struct ebb_arena ebb_arena_t;
ebb_arena_t *ebb_arena_create(void);
void *ebb_arena_malloc(ebb_arena_t *a, size_t size);
void *ebb_arena_calloc(ebb_arena_t *a, size_t n, size_t size);
void *ebb_arena_realloc(ebb_arena_t *a, void *p, size_t size);
/* As aligned_alloc, from arena a: alignment a power of two, else NULL and EINVAL. */
void *ebb_arena_aligned_alloc(ebb_arena_t *a, size_t alignment, size_t size);
/* Frees every block of the arena; the arena stays, and so does its memory,
 * resident for the next request until decay returns it (EBB_DECAY_MS). */
void ebb_arena_reset(ebb_arena_t *a);
/* Frees every block of the arena and the arena itself. Its memory stays
 * resident until decay returns it, and the next ebb_arena_create (or a new
 * thread) takes it first, so a create/work/destroy loop pays no page faults. */
void ebb_arena_destroy(ebb_arena_t *a);

/* Memory accounting, summed over all arenas. Byte counts are of memory the
 * allocator mapped from the kernel, except resident (the whole process). */
struct ebb_stats {
  size_t mapped;          /* bytes currently mapped (chunks and large blocks) */
  size_t active;          /* bytes in pages and large blocks serving live blocks */
  size_t dirty;           /* freed bytes still resident, waiting for decay (not the free blocks of
                             pages that still hold live ones: those count in active) */
  size_t purged;          /* bytes returned to the kernel since start (cumulative) */
  size_t allocated;       /* bytes in live blocks (usable sizes), approximate; allocated <= active <= mapped */
  uint64_t mmap_calls;    /* mmap calls since start */
  uint64_t munmap_calls;  /* munmap calls since start */
  uint64_t madvise_calls; /* madvise (purge) calls since start */
  uint64_t arenas;        /* arenas in existence (thread and first-class) */
  size_t peak_mapped;     /* high-water mark of mapped */
  size_t peak_active;     /* high-water mark of active */
  size_t peak_dirty;      /* high-water mark of dirty */
  size_t peak_allocated;  /* highest allocated seen when sampled (ebb_stats calls, background passes): a lower bound */
  size_t resident;        /* resident bytes of the whole process as the kernel counts them
                             (/proc/self/statm); 0 if unknown */
  uint64_t threads;       /* threads that ever allocated (each got an arena) */
};
/* Fills *out. ebb_stats(&s) passes the struct's size (the macro below), so
 * the library writes only the fields the caller's header has: a program built
 * against an older header (0.1's ended at `arenas`) is never written past
 * its struct, and fields appended later reach only callers that have them.
 * The symbol ebb_stats itself, which 0.1 binaries and dlsym callers reach,
 * writes 0.1's fields, mapped to arenas, and nothing after them. */
void ebb_stats_sized(struct ebb_stats *out, size_t size);
void ebb_stats(struct ebb_stats *out);
#define ebb_stats(out) ebb_stats_sized((out), sizeof *(out))
/* ebb_stats_print levels, as EBB_STATS: */
#define EBB_STATS_SUMMARY 1 /* a short summary for people (EBB_STATS=1) */
#define EBB_STATS_CLASSES 2 /* the summary and a table per size class in use (EBB_STATS=2) */
#define EBB_STATS_JSON 3    /* all of it as one JSON object on one line, bytes as numbers (EBB_STATS=json) */
/* Writes the stats to fd at the given level (what EBB_STATS prints at exit);
 * level 0, or any level not above, writes nothing. Never allocates. */
void ebb_stats_print(int fd, int level);

/* Returns all dirty memory of all arenas to the kernel now. Returns the number
 * of bytes purged. malloc_trim(0) does the same. */
size_t ebb_trim(void);

/* pthread_create with ebb's hook: under EBB_BACKGROUND=auto it starts ebb's
 * background thread before the program's first thread, then calls libc's
 * pthread_create (the arguments are pthread_create's: pthread_t *, const
 * pthread_attr_t *, the start routine, its argument). libebb.so's own
 * pthread_create is this; a program linked with libebb.a gets it for every
 * pthread_create, its shared libraries' too (std::thread), with
 * -Wl,--defsym=pthread_create=ebb_pthread_create -Wl,-u,ebb_pthread_create,
 * or calls it. */
int ebb_pthread_create(void *thread, const void *attr, void *(*start)(void *), void *arg);

#ifdef __cplusplus
}
#endif
#endif
