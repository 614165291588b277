/* fake_os.c — implements allocator/os.h for unit tests (see fake_os.h). */
#include "fake_os.h"
#include "os.h"
#include "registry.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

uint64_t fake_now = 1000;
size_t fake_maps, fake_unmaps, fake_purges, fake_purged_bytes, fake_zeroes;
const char *fake_env[16];
char fake_stderr[4096];
size_t fake_stderr_len;
os_counters_t os_counters;
int fake_fail_maps, fake_fail_resizes, fake_fail_purges, fake_fail_leaves, fake_far_maps;
size_t fake_refused, fake_resizes, fake_moves;

/* The kernel refusing: while *knob > 0, a call fails and counts it down. */
static int fake_refuse(int *knob) {
  if (__atomic_load_n(knob, __ATOMIC_RELAXED) <= 0) return 0;
  __atomic_fetch_sub(knob, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&fake_refused, 1, __ATOMIC_RELAXED);
  return 1;
}

#define MAX_RANGES 65536
static struct {
  const char *p;
  size_t n;
} ranges[MAX_RANGES];
static size_t nranges;

void fake_reset(void) {
  fake_maps = fake_unmaps = fake_purges = fake_purged_bytes = fake_zeroes = 0;
  fake_fail_maps = fake_fail_resizes = fake_fail_purges = fake_fail_leaves = fake_far_maps = 0;
  fake_refused = fake_resizes = fake_moves = 0;
  nranges = 0;
  fake_stderr_len = 0;
  fake_stderr[0] = 0;
}

int fake_was_purged(const void *p, size_t n) {
  const char *a = p, *b = a + n;
  for (const char *c = a; c < b; c += 4096) {
    int hit = 0;
    for (size_t i = 0; i < nranges && !hit; i++) hit = c >= ranges[i].p && c < ranges[i].p + ranges[i].n;
    if (!hit) return 0;
  }
  return 1;
}

void *os_map(size_t size) {
  if (fake_refuse(&fake_fail_maps)) return NULL;
  if (size == sizeof(reg_leaf_t) && fake_refuse(&fake_fail_leaves)) return NULL;
  fake_maps++;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* A mapping at the start of a 512 GiB window of the address space that no
 * registry leaf covers yet (fake_far_maps), or NULL when there is none free. */
static void *map_far(size_t size) {
  for (uintptr_t w = 32; w < (1u << REG_L1_BITS); w++) {
    if (__atomic_load_n(&reg_root[w], __ATOMIC_ACQUIRE) != &reg_empty_leaf) continue;
    void *hint = (void *)(w << (REG_L2_BITS + CHUNK_SHIFT));
    void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p == hint) return p;
    if (p != MAP_FAILED) munmap(p, size); /* an older kernel took the flag for a hint */
  }
  return NULL;
}

void *os_map_aligned(size_t size, size_t align) {
  if (__atomic_load_n(&fake_far_maps, __ATOMIC_RELAXED) > 0) {
    __atomic_fetch_sub(&fake_far_maps, 1, __ATOMIC_RELAXED);
    void *p = map_far(size);
    if (p) {
      fake_maps++;
      return p;
    }
  }
  char *p = os_map(size + align);
  if (!p) return NULL;
  char *q = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  if (q > p) munmap(p, (size_t)(q - p));
  size_t tail = (size_t)((p + size + align) - (q + size));
  if (tail) munmap(q + size, tail);
  return q;
}

void (*fake_on_unmap)(void *p, size_t size);

void os_unmap(void *p, size_t size) {
  fake_unmaps++;
  if (fake_on_unmap) fake_on_unmap(p, size);
  munmap(p, size);
}

bool os_purge(void *p, size_t size, bool use_free) {
  fake_purges++;
  fake_purged_bytes += size;
  if (nranges < MAX_RANGES) ranges[nranges++] = (typeof(ranges[0])){p, size};
  if (fake_refuse(&fake_fail_purges)) return false; /* as on locked pages: the bytes stay */
  /* MADV_FREE (use_free) may keep the bytes: os.c says "zeroes" only for MADV_DONTNEED */
  return madvise(p, size, MADV_DONTNEED) == 0 && !use_free;
}

/* The real one writes resident pages and drops the rest; here every byte is
 * written, and the calls counted. */
void os_zero(void *p, size_t size) {
  fake_zeroes++;
  memset(p, 0, size);
}

bool os_resize_inplace(void *p, size_t old_size, size_t new_size) {
  if (fake_refuse(&fake_fail_resizes)) return false;
  fake_resizes++;
  return mremap(p, old_size, new_size, 0) != MAP_FAILED;
}

void *os_move_into(void *p, size_t old_size, size_t new_size, void *dst) {
  if (fake_refuse(&fake_fail_resizes)) {
    munmap(dst, new_size);
    return NULL;
  }
  fake_moves++;
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  if (q == MAP_FAILED) {
    munmap(dst, new_size);
    return NULL;
  }
  return q;
}

uint64_t os_now_ms(void) { return __atomic_load_n(&fake_now, __ATOMIC_RELAXED); }
size_t os_page_size(void) { return 4096; }

const char *os_getenv(const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < 16 && fake_env[i]; i++)
    if (strncmp(fake_env[i], name, n) == 0 && fake_env[i][n] == '=') return fake_env[i] + n + 1;
  return NULL;
}

void os_write(int fd, const char *s, size_t n) {
  if (fd == 2 && fake_stderr_len + n < sizeof fake_stderr) {
    memcpy(fake_stderr + fake_stderr_len, s, n);
    fake_stderr_len += n;
    fake_stderr[fake_stderr_len] = 0;
  }
  (void)!write(fd, s, n);
}

void os_abort(void) { abort(); }
uint64_t os_random_seed(void) { return 0x9e3779b97f4a7c15ull; }
int os_dup_fd(int fd) { return fd; }
#include <sys/stat.h>
bool os_fd_identity(int fd, uint64_t id[2]) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  id[0] = (uint64_t)st.st_dev, id[1] = (uint64_t)st.st_ino;
  return true;
}

/* Threads and sleeps: the real thing (the unit tests start real threads). */
#include <pthread.h>
#include <sched.h>
#include <time.h>
void os_yield(void) { sched_yield(); }
/* The fake clock stands still: bounded by yields instead. */
bool os_wait_while(bool (*busy)(void), uint64_t ms) {
  for (uint64_t i = 0; busy(); i++) {
    if (i > ms * 1000) return false;
    sched_yield();
  }
  return true;
}
void os_sleep_ms(uint64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}
/* The real fence: the unit tests' threads are real. */
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
bool os_fence_threads(void) {
  static int st;
  if (!st) st = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
  return st == 1 && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}
/* The unit tests' main thread never leaves the background thread alone. */
bool os_only_thread_left(void) { return false; }
bool os_thread_init(void) { return true; }
/* no wrapper in unit builds */
void os_on_thread_create(void (*before)(void *(**fn)(void *), void **arg), void (*failed)(void *arg)) {
  (void)before;
  (void)failed;
}
bool os_is_main_thread(void) { return true; }
bool os_thread_start(void *(*fn)(void *)) {
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, fn, NULL);
  pthread_attr_destroy(&attr);
  return rc == 0;
}
static pthread_key_t exit_key;
bool os_exit_key_create(void (*dtor)(void *)) { return pthread_key_create(&exit_key, dtor) == 0; }
bool os_exit_key_set(void *value) { return pthread_setspecific(exit_key, value) == 0; }
void os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  pthread_atfork(prepare, parent, child);
}

/* The unit tests have no background thread: the first thread is never marked. */
void os_main_alive_mark(void) {}
int os_main_alive(void) { return -1; }

/* The unit tests make no _Fork: the hooks are kept, never called. */
void os_on_raw_fork(void (*before)(void), void (*after)(bool child)) {
  (void)before;
  (void)after;
}

/* Stats and options (os.h): the fake environment, a settable resident size. */
size_t fake_resident = 42 << 20; /* what os_resident_bytes returns */
const char *os_environ_at(size_t i) { return i < 16 ? fake_env[i] : NULL; }
size_t os_resident_bytes(void) { return fake_resident; }
int os_getpid(void) { return 4242; }
