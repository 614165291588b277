/* os.c — owns every system call the allocator makes (see os.h).
 * May call: the kernel through libc's thin syscall wrappers (mmap, munmap,
 * madvise, mremap, clock_gettime, write, getauxval).
 * Must never: allocate, use stdio, or change errno as seen by the caller. */
#include "os.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

os_counters_t os_counters;
extern char **environ;

#define count(c) atomic_fetch_add_explicit(&os_counters.c, 1, memory_order_relaxed)

void *os_map(size_t size) {
  int saved = errno;
  count(mmap_calls);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  errno = saved;
  return p == MAP_FAILED ? NULL : p;
}

void os_unmap(void *p, size_t size) {
  int saved = errno;
  count(munmap_calls);
  munmap(p, size);
  errno = saved;
}

/* Over-map by align and trim both ends, the usual way to get an aligned mapping. */
void *os_map_aligned(size_t size, size_t align) {
  if (size + align < size) return NULL;
  char *p = os_map(size + align);
  if (!p) return NULL;
  char *q = (char *)align_up((uintptr_t)p, align);
  if (q > p) os_unmap(p, (size_t)(q - p));
  size_t tail = (size_t)((p + size + align) - (q + size));
  if (tail) os_unmap(q + size, tail);
  return q;
}

void os_purge(void *p, size_t size, bool use_free) {
  int saved = errno;
  count(madvise_calls);
  if (!use_free || madvise(p, size, MADV_FREE) != 0) madvise(p, size, MADV_DONTNEED);
  errno = saved;
}

bool os_resize_inplace(void *p, size_t old_size, size_t new_size) {
  int saved = errno;
  void *q = mremap(p, old_size, new_size, 0);
  errno = saved;
  return q != MAP_FAILED;
}

/* Reserve an aligned range, then let mremap move the pages there: no copy. */
void *os_move_aligned(void *p, size_t old_size, size_t new_size, size_t align) {
  char *dst = os_map_aligned(new_size, align);
  if (!dst) return NULL;
  int saved = errno;
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  errno = saved;
  if (q == MAP_FAILED) {
    os_unmap(dst, new_size);
    return NULL;
  }
  return q;
}

uint64_t os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

size_t os_page_size(void) {
  int saved = errno;
  long n = sysconf(_SC_PAGESIZE);
  errno = saved;
  return n > 0 ? (size_t)n : OS_PAGE;
}

const char *os_getenv(const char *name) {
  size_t n = strlen(name);
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

void os_write(int fd, const char *s, size_t n) {
  int saved = errno;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
  errno = saved;
}

int os_dup_fd(int fd) {
  int saved = errno;
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  errno = saved;
  return d >= 0 ? d : fd;
}

void os_abort(void) { abort(); }

uint64_t os_random_seed(void) {
  uint64_t r = 0;
  const void *at = (const void *)getauxval(AT_RANDOM);
  if (at) memcpy(&r, at, sizeof r);
  return r ^ (uint64_t)(uintptr_t)&r ^ os_now_ms();
}
