/* fmt.h — formatting into caller-provided stack buffers, for messages and stats
 * (the allocator may not use stdio). Layer: above os, below everything else.
 * Never allocates; output is truncated, never overflowed. */
#ifndef EBB_FMT_H
#define EBB_FMT_H
#include "common.h"

typedef struct {
  char *buf;  /* destination */
  size_t cap; /* its size */
  size_t len; /* bytes written so far (always < cap, NUL kept) */
} fmt_t;

#define FMT_ON(array) ((fmt_t){.buf = (array), .cap = sizeof(array), .len = 0})
void fmt_str(fmt_t *f, const char *s);
void fmt_u64(fmt_t *f, uint64_t v);
void fmt_hex(fmt_t *f, uint64_t v); /* 0x-prefixed */
void fmt_flush(fmt_t *f, int fd);   /* writes and empties the buffer */
/* At most max characters of s; a longer s ends in "..."; control characters as '?' (user input in messages). */
void fmt_strn(fmt_t *f, const char *s, size_t max);
/* A byte count in binary units, for people: "512 B", "1.5 KiB", "64.0 MiB" (one decimal, rounded). */
void fmt_bytes(fmt_t *f, uint64_t v);
/* s right-aligned in width columns (left-aligned if width < 0); never cut. */
void fmt_col(fmt_t *f, const char *s, int width);
void fmt_col_u64(fmt_t *f, uint64_t v, int width);
void fmt_col_bytes(fmt_t *f, uint64_t v, int width);
/* Flushes to fd first if fewer than need bytes are free: long output goes out in pieces. */
void fmt_reserve(fmt_t *f, int fd, size_t need);
#endif
