/* fmt.c — owns stack-buffer formatting (fmt.h) and the fatal path.
 * May call: os_write, os_abort. Must never allocate or use stdio. */
#include "fmt.h"
#include "os.h"

void fmt_str(fmt_t *f, const char *s) {
  while (*s && f->len + 1 < f->cap) f->buf[f->len++] = *s++;
  f->buf[f->len] = 0;
}

void fmt_u64(fmt_t *f, uint64_t v) {
  char tmp[24];
  int i = 23;
  tmp[i] = 0;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  fmt_str(f, tmp + i);
}

void fmt_hex(fmt_t *f, uint64_t v) {
  char tmp[24];
  int i = 23;
  tmp[i] = 0;
  do {
    tmp[--i] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  tmp[--i] = 'x';
  tmp[--i] = '0';
  fmt_str(f, tmp + i);
}

void fmt_flush(fmt_t *f, int fd) {
  os_write(fd, f->buf, f->len);
  f->len = 0;
  f->buf[0] = 0;
}

void ebb_fatal(const char *func, const char *msg, const void *p) {
  char line[256];
  fmt_t f = FMT_ON(line);
  fmt_str(&f, "ebb: ");
  fmt_str(&f, func);
  fmt_str(&f, "(): ");
  fmt_str(&f, msg);
  if (p) {
    fmt_str(&f, " ");
    fmt_hex(&f, (uint64_t)(uintptr_t)p);
  }
  fmt_str(&f, "\n");
  fmt_flush(&f, 2);
  os_abort();
}
