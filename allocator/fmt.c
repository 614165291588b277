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

/* A control character shows as '?': a newline in an EBB_* value split the
 * one-line warning in two (found by a probe). */
void fmt_strn(fmt_t *f, const char *s, size_t max) {
  size_t n = 0;
  while (s[n] && n <= max) n++;
  size_t keep = n <= max ? n : (max > 3 ? max - 3 : 0);
  for (size_t i = 0; i < keep && f->len + 1 < f->cap; i++) {
    unsigned char c = (unsigned char)s[i];
    f->buf[f->len++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  f->buf[f->len] = 0;
  if (n > max) fmt_str(f, "...");
}

void fmt_bytes(fmt_t *f, uint64_t v) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (v < 1024) {
    fmt_u64(f, v);
    fmt_str(f, " B");
    return;
  }
  unsigned u = 1;
  while (u < 6 && v >> (10 * u) >= 1024) u++;
  /* tenths of the unit, rounded; 1023.96 KiB becomes 1.0 MiB */
  unsigned __int128 t = ((unsigned __int128)v * 10 + ((uint64_t)1 << (10 * u - 1))) >> (10 * u);
  if (t >= 10240 && u < 6) {
    u++;
    t = ((unsigned __int128)v * 10 + ((uint64_t)1 << (10 * u - 1))) >> (10 * u);
  }
  fmt_u64(f, (uint64_t)(t / 10));
  char frac[4] = {'.', (char)('0' + (int)(t % 10)), ' ', 0};
  fmt_str(f, frac);
  fmt_str(f, unit[u]);
}

void fmt_col(fmt_t *f, const char *s, int width) {
  size_t n = 0, w = (size_t)(width < 0 ? -width : width);
  while (s[n]) n++;
  if (width < 0) fmt_str(f, s);
  for (; n < w; n++) fmt_str(f, " ");
  if (width >= 0) fmt_str(f, s);
}

void fmt_col_u64(fmt_t *f, uint64_t v, int width) {
  char tmp[24];
  fmt_t t = FMT_ON(tmp);
  fmt_u64(&t, v);
  fmt_col(f, tmp, width);
}

void fmt_col_bytes(fmt_t *f, uint64_t v, int width) {
  char tmp[24];
  fmt_t t = FMT_ON(tmp);
  fmt_bytes(&t, v);
  fmt_col(f, tmp, width);
}

void fmt_reserve(fmt_t *f, int fd, size_t need) {
  if (f->cap - f->len <= need) fmt_flush(f, fd);
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
