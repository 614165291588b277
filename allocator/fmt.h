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
#endif
