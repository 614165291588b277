/* os.c — owns every system call and every libc call the allocator makes (see os.h).
 * May call: the kernel through libc's thin syscall wrappers (mmap, munmap,
 * madvise, mincore, mremap, clock_gettime, nanosleep, sched_yield, getauxval, getpid,
 * pthread_sigmask and sigpending around its writes;
 * fcntl, fstat and getrlimit for the stats descriptor) and through syscall()
 * (write, and openat/read/close for /proc/self/statm and, in the background
 * thread, /proc/self/stat: never a cancellation point), and, from the
 * constructor or ebb's pthread_create
 * wrapper only, pthread_create, pthread_sigmask, pthread_key_create and
 * pthread_atfork; the robust mutex of os_main_alive_mark (the constructor, a fork
 * child's handler) and its trylock (the background thread); libc's _Fork from ebb's _Fork wrapper; the vDSO's clock_gettime, found from getauxval (os_now_ms).
 * Must never: allocate, use stdio, or change errno as seen by the caller. */
#include "os.h"
#include "ebb.h"
#include <errno.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <link.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

os_counters_t os_counters;
extern char **environ;

#define os_count(c) atomic_fetch_add_explicit(&os_counters.c, 1, memory_order_relaxed)

/* ThreadSanitizer sees munmap and mmap but not mremap: when one thread moves
 * its block away with mremap and another later grows a mapping in place over
 * the range it left, the second thread's writes look racy with the first's.
 * The kernel orders the two; these edges tell TSan so (every call that gives
 * address space back releases, every call that takes some acquires). */
#ifdef EBB_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char vm_order;
#define vm_release() __tsan_release(&vm_order)
#define vm_acquire() __tsan_acquire(&vm_order)
#else
#define vm_release() ((void)0)
#define vm_acquire() ((void)0)
#endif

/* A fresh mapping at hint if that range is free (no MAP_FIXED: never over
 * another), else where the kernel likes. Without MAP_NORESERVE, so that the
 * kernel's overcommit heuristic (vm.overcommit_memory=0) refuses a request
 * larger than RAM and swap together, as it does glibc's: malloc(1 << 46) on a
 * 24 GiB machine returned a block (found by a probe; jemalloc's and
 * mimalloc's do too), and a program that checks for NULL was killed later
 * instead. Nothing else changes: vm.overcommit_memory=1 checks nothing, and
 * under 2 the kernel ignores the flag (docs/api.md: there the charge of
 * chunks, never unmapped, stays). */
static void *map_near(void *hint, size_t size) {
  int saved = errno;
  os_count(mmap_calls);
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  vm_acquire();
  errno = saved;
  return p == MAP_FAILED ? NULL : p;
}

void *os_map(size_t size) { return map_near(NULL, size); }

/* A munmap that would split a mapping fails (ENOMEM) at vm.max_map_count; the
 * pages go back all the same, and the range stays mapped as address space
 * only (found by a probe: a large block freed from the middle of a cached
 * mapping stayed resident for the life of the process;
 * limits::a_large_block_freed_at_the_map_count_goes_back). madvise never
 * splits a mapping. */
void os_unmap(void *p, size_t size) {
  int saved = errno;
  os_count(munmap_calls);
  vm_release();
  if (munmap(p, size) != 0) {
    os_count(madvise_calls);
    madvise(p, size, MADV_DONTNEED);
  }
  errno = saved;
}

/* The exact size first, where the kernel places it and, when that is not
 * aligned, at the aligned address just below (top-down placement leaves that
 * free most often); else over-map by align less a page and trim both ends
 * (jemalloc's pages_map tries the exact size first too). Over-mapping by
 * align every time made a thread's first chunk need 8 MiB of `ulimit -v` and
 * a 16 MiB block 20 (found by a probe); the exact size alone, without the
 * second try, fitted in 15 of 20 runs. */
void *os_map_aligned(size_t size, size_t align) {
  char *p = os_map(size);
  if (!p || ((uintptr_t)p & (align - 1)) == 0) return p;
  os_unmap(p, size);
  char *below = (char *)((uintptr_t)p & ~(uintptr_t)(align - 1));
  if ((p = map_near(below, size)) == below) return p;
  if (p) os_unmap(p, size);
  size_t span = size + align - os_page_size();
  if (span < size) return NULL;
  if (!(p = os_map(span))) return NULL;
  char *q = (char *)align_up((uintptr_t)p, align);
  if (q > p) os_unmap(p, (size_t)(q - p));
  size_t tail = (size_t)((p + span) - (q + size));
  if (tail) os_unmap(q + size, tail);
  return q;
}

bool os_purge(void *p, size_t size, bool use_free) {
  int saved = errno;
  os_count(madvise_calls);
  bool zeroed = false;
  if (!use_free || madvise(p, size, MADV_FREE) != 0) zeroed = madvise(p, size, MADV_DONTNEED) == 0;
  errno = saved;
  return zeroed;
}

/* A run of pages for os_zero: written if resident, else dropped. */
static void zero_run(char *q, size_t len, bool resident) {
  if (!resident) {
    os_count(madvise_calls);
    if (madvise(q, len, MADV_DONTNEED) == 0) return;
  }
  memset(q, 0, len);
}

/* Each run of resident pages, or of others, is one call, across mincore's
 * batches: a fully resident block is one memset (long ones stream). A check
 * whether a resident page reads as zeroes already (the kernel's shared zero
 * page, after reads only) read a cold line of every page before the write:
 * a calloc of a reused, fully written 64 MiB block took 1.6 ms against 0.8
 * (found by a probe), so such pages are written, as before os_zero. */
void os_zero(void *p, size_t size) {
  int saved = errno;
  char *c = p, *run = c;
  size_t pages = size / OS_PAGE, run_len = 0;
  bool run_resident = true;
  unsigned char vec[1024]; /* 4 MiB of pages a call */
  for (size_t i = 0; i < pages;) {
    size_t n = pages - i < sizeof vec ? pages - i : sizeof vec;
    char *at = c + i * OS_PAGE;
    bool known = mincore(at, n * OS_PAGE, vec) == 0; /* else: written, as resident */
    for (size_t j = 0; j < n; j++) {
      bool resident = !known || (vec[j] & 1);
      if (run_len && resident != run_resident) {
        zero_run(run, run_len, run_resident);
        run_len = 0;
      }
      if (!run_len) {
        run = at + j * OS_PAGE;
        run_resident = resident;
      }
      run_len += OS_PAGE;
    }
    i += n;
  }
  if (run_len) zero_run(run, run_len, run_resident);
  memset(c + pages * OS_PAGE, 0, size - pages * OS_PAGE);
  errno = saved;
}

bool os_resize_inplace(void *p, size_t old_size, size_t new_size) {
  int saved = errno;
  vm_release();
  void *q = mremap(p, old_size, new_size, 0);
  vm_acquire();
  errno = saved;
  return q != MAP_FAILED;
}

/* mremap moves the pages into the range the caller mapped (os.h): no copy. */
void *os_move_into(void *p, size_t old_size, size_t new_size, void *dst) {
  int saved = errno;
  vm_release();
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  vm_acquire();
  errno = saved;
  if (q == MAP_FAILED) {
    os_unmap(dst, new_size);
    return NULL;
  }
  return q;
}

/* The kernel's clock_gettime in the vDSO, found from its ELF symbol table
 * (the vDSO's ABI: the kernel's Documentation/ABI/stable/vdso), called
 * directly rather than through libc's wrapper: the wrapper sits apart from
 * everything else ebb calls in libc, and its first call mapped 64-128 KiB of
 * libc's code into a small program that never reads the clock itself (the
 * kernel maps 64 KiB around a faulting page of a file: the maximum RSS that
 * wait4 reports for a one-malloc program, 1276 -> 1148 KB). NULL when there is
 * no vDSO (valgrind hides it) or no such symbol: the wrapper then. */
#if defined(__x86_64__) || defined(__i386__)
#define VDSO_CLOCK_GETTIME "__vdso_clock_gettime"
#elif defined(__aarch64__) || defined(__riscv)
#define VDSO_CLOCK_GETTIME "__kernel_clock_gettime"
#endif
typedef int vdso_gettime_fn(clockid_t, struct timespec *);

#ifdef VDSO_CLOCK_GETTIME
static vdso_gettime_fn *vdso_find_clock_gettime(void) {
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (!base) return NULL;
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
  const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
  const ElfW(Dyn) *dyn = NULL;
  uintptr_t bias = 0;
  bool loaded = false;
  for (unsigned i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_LOAD && !loaded) {
      bias = base + ph[i].p_offset - ph[i].p_vaddr; /* where the image's addresses are */
      loaded = true;
    } else if (ph[i].p_type == PT_DYNAMIC) {
      dyn = (const ElfW(Dyn) *)(base + ph[i].p_offset);
    }
  }
  if (!loaded || !dyn) return NULL;
  const ElfW(Sym) *sym = NULL;
  const char *str = NULL;
  const uint32_t *hash = NULL; /* DT_HASH: its second word counts the symbols */
  for (; dyn->d_tag != DT_NULL; dyn++) {
    if (dyn->d_tag == DT_SYMTAB)
      sym = (const ElfW(Sym) *)(bias + dyn->d_un.d_ptr);
    else if (dyn->d_tag == DT_STRTAB)
      str = (const char *)(bias + dyn->d_un.d_ptr);
    else if (dyn->d_tag == DT_HASH)
      hash = (const uint32_t *)(bias + dyn->d_un.d_ptr);
  }
  if (!sym || !str || !hash) return NULL;
  for (uint32_t i = 0; i < hash[1]; i++) {
    unsigned bind = ELF64_ST_BIND(sym[i].st_info);
    if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC || sym[i].st_shndx == SHN_UNDEF ||
        (bind != STB_GLOBAL && bind != STB_WEAK) || strcmp(str + sym[i].st_name, VDSO_CLOCK_GETTIME) != 0)
      continue;
    return (vdso_gettime_fn *)(bias + sym[i].st_value);
  }
  return NULL;
}
#else
static vdso_gettime_fn *vdso_find_clock_gettime(void) { return NULL; }
#endif

/* The kernel's coarse monotonic clock: the time of its last tick, read from
 * the vDSO's data page with no TSC read and no paravirtual clock to scale
 * (4.5 ns a read on the Intel Xeon VM of docs/benchmarks.md, where
 * CLOCK_MONOTONIC takes 17.8: a third of a 3 MiB malloc/free pair went on its
 * two reads). Its resolution is the kernel's tick, 1-10 ms (4 here), fine for
 * a decay time of milliseconds to seconds: a unit's age is off by less than a
 * tick, and a purge never comes before its time by more than one. */
#define EBB_CLOCK CLOCK_MONOTONIC_COARSE

static _Atomic(vdso_gettime_fn *) now_fn; /* found at the first call: every thread finds the same */

/* Out of line, so os_now_ms saves no register for it. */
static EBB_NOINLINE vdso_gettime_fn *now_fn_find(void) {
  int saved = errno;
  vdso_gettime_fn *fn = vdso_find_clock_gettime();
  if (!fn) fn = clock_gettime; /* libc's wrapper */
  if (EBB_DEBUG >= 1) { /* the symbol found is the clock: it agrees with libc's to the millisecond */
    struct timespec a, b, c;
    clock_gettime(EBB_CLOCK, &a);
    int r = fn(EBB_CLOCK, &b);
    clock_gettime(EBB_CLOCK, &c);
    ebb_assert(r == 0 && (a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec <= b.tv_nsec)) &&
               (b.tv_sec < c.tv_sec || (b.tv_sec == c.tv_sec && b.tv_nsec <= c.tv_nsec)));
  }
  atomic_store_explicit(&now_fn, fn, memory_order_relaxed);
  errno = saved;
  return fn;
}

uint64_t os_now_ms(void) {
  vdso_gettime_fn *fn = atomic_load_explicit(&now_fn, memory_order_relaxed);
  if (unlikely(!fn)) fn = now_fn_find();
  struct timespec ts;
  if (fn(EBB_CLOCK, &ts) != 0) clock_gettime(EBB_CLOCK, &ts); /* the vDSO declined: its wrapper */
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

size_t os_page_size(void) {
  int saved = errno;
  long n = (long)getauxval(AT_PAGESZ); /* not sysconf: see os_now_ms */
  errno = saved;
  return n > 0 ? (size_t)n : OS_PAGE;
}

/* A set-user-ID or set-group-ID program (or one with file capabilities) runs
 * with the kernel's AT_SECURE set: there ebb reads none of the environment,
 * as glibc ignores its own MALLOC_* settings, so an unprivileged caller can
 * neither change its decay and cap nor have its stats written (found by a
 * probe: EBB_STATS and EBB_VERBOSE took effect in a set-user-ID program). */
static bool environment_untrusted(void) { return getauxval(AT_SECURE) != 0; }

const char *os_getenv(const char *name) {
  if (environment_untrusted()) return NULL;
  size_t n = strlen(name);
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

/* The reads and writes ebb makes itself go through syscall(), which is no
 * cancellation point: libc's open, read, write and close are, and ebb must be
 * none (found by a probe: threads cancelled inside a mallinfo2() loop, each
 * leaving the descriptor of /proc/self/statm open, 1,636 of them in 2,000
 * threads; glibc's mallinfo2 is no cancellation point). A cancel taken in the
 * warning a bad EBB_* setting prints at start-up would leave the set-up half
 * done for every other thread.
 *   With SIGPIPE blocked in this thread, and the one a write to a pipe with no
 * reader raised taken back off it (unless one was pending already): ebb's
 * lines never end the program or run its handler (found by a probe: under
 * EBB_STATS=1, a program whose stderr was a pipe its reader had closed, as in
 * `prog 2>&1 | head -1`, died of SIGPIPE at exit instead of exiting 0). The
 * wait for it is a raw system call: sigtimedwait is a cancellation point. */
void os_write(int fd, const char *s, size_t n) {
  int saved = errno;
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  bool masked = pthread_sigmask(SIG_BLOCK, &pipe_only, &old) == 0;
  bool was_pending = masked && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  bool broke = false;
  while (n > 0) {
    ssize_t w = syscall(SYS_write, fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EPIPE) broke = true;
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
  if (masked) {
    if (broke && !was_pending) {
      struct timespec none = {0, 0};
      syscall(SYS_rt_sigtimedwait, &pipe_only, NULL, &none, (size_t)(_NSIG / 8));
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  errno = saved;
}

int os_dup_fd(int fd) {
  int saved = errno;
  struct rlimit rl;
  int low = 999; /* the program's own files start at 3 and are not renumbered */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= (rlim_t)low)
    low = rl.rlim_cur > 3 ? (int)rl.rlim_cur - 1 : 3;
  int d = fcntl(fd, F_DUPFD_CLOEXEC, low);
  if (d < 0) d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  errno = saved;
  return d >= 0 ? d : fd;
}

bool os_fd_identity(int fd, uint64_t id[2]) {
  int saved = errno;
  struct stat st;
  bool ok = fstat(fd, &st) == 0;
  errno = saved;
  if (ok) id[0] = (uint64_t)st.st_dev, id[1] = (uint64_t)st.st_ino;
  return ok;
}

void os_abort(void) { abort(); }

uint64_t os_random_seed(void) {
  uint64_t r = 0;
  const void *at = (const void *)getauxval(AT_RANDOM);
  if (at) memcpy(&r, at, sizeof r);
  return r ^ (uint64_t)(uintptr_t)&r ^ os_now_ms();
}

const char *os_environ_at(size_t i) { return environ && !environment_untrusted() ? environ[i] : NULL; }

/* The start of a /proc file into buf, NUL-terminated; its length, 0 if unreadable. */
static size_t read_proc(const char *path, char *buf, size_t size) {
  int saved = errno;
  ssize_t n = -1;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC); /* not open(): see os_write */
  if (fd >= 0) {
    do n = syscall(SYS_read, fd, buf, size - 1);
    while (n < 0 && errno == EINTR);
    syscall(SYS_close, fd);
  }
  errno = saved;
  if (n <= 0) return 0;
  buf[n] = 0;
  return (size_t)n;
}

size_t os_resident_bytes(void) {
  char buf[128];
  if (!read_proc("/proc/self/statm", buf, sizeof buf)) return 0;
  const char *p = buf; /* "size resident shared ...", in pages */
  while (*p && *p != ' ') p++;
  while (*p == ' ') p++;
  uint64_t pages = 0;
  for (; *p >= '0' && *p <= '9'; p++) pages = pages * 10 + (uint64_t)(*p - '0');
  return (size_t)pages * os_page_size();
}

int os_getpid(void) { return (int)getpid(); }

void os_yield(void) {
  int saved = errno;
  sched_yield();
  errno = saved;
}

/* 1 registered, -1 unavailable, 0 not tried yet. Registering twice is
 * harmless, so two threads racing here do no harm. */
static atomic_int fence_state;

bool os_fence_threads(void) {
  int saved = errno, st = atomic_load_explicit(&fence_state, memory_order_relaxed);
  if (st == 0) {
    st = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
    atomic_store_explicit(&fence_state, st, memory_order_relaxed);
  }
  bool ok = st == 1 && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
  errno = saved;
  return ok;
}

/* Reads /proc/self/stat: the process's state (its first thread's) and its
 * number of threads. */
static bool read_self_stat(char *state, unsigned long *threads) {
  char buf[1024];
  size_t n = read_proc("/proc/self/stat", buf, sizeof buf);
  if (!n) return false;
  const char *p = buf + n; /* "pid (comm) S ppid ...": comm may hold spaces and ')' */
  while (p > buf && *p != ')') p--;
  if (*p != ')' || p[1] != ' ' || !p[2]) return false;
  *state = p[2];
  p += 3;
  for (int field = 4; field < 20; field++) { /* ppid (4) to nice (19); num_threads is field 20 */
    while (*p == ' ') p++;
    while (*p && *p != ' ') p++;
  }
  while (*p == ' ') p++;
  unsigned long t = 0;
  for (; *p >= '0' && *p <= '9'; p++) t = t * 10 + (unsigned long)(*p - '0');
  *threads = t;
  return t > 0;
}

bool os_only_thread_left(void) {
  char state;
  unsigned long threads;
  /* Unreadable (no descriptor left, /proc masked or absent): not known, and
   * taken as yes, so that the background thread ends: kept running, it kept
   * a process whose main() had called pthread_exit alive for good (found by
   * a probe). The program's next pthread_create starts it again. */
  if (!read_self_stat(&state, &threads)) return true;
  /* the first thread, gone with pthread_exit, stays a zombie in the count
   * until the last thread ends */
  return threads == 1 || (threads == 2 && state == 'Z');
}

bool os_wait_while(bool (*busy)(void), uint64_t ms) {
  uint64_t start = 0;
  for (unsigned i = 1; busy(); i++) {
    os_yield();
    if (i % 64) continue; /* the clock every 64 yields */
    uint64_t now = os_now_ms();
    if (!start)
      start = now;
    else if (now - start > ms)
      return false;
  }
  return true;
}

void os_sleep_ms(uint64_t ms) {
  int saved = errno;
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  errno = saved;
}

/* ---- C++ */

/* name in the loaded library of that soname (RTLD_NOLOAD: never loads it),
 * which dlsym on its handle searches first; NULL if it is not loaded. dlopen
 * itself is looked up, not linked: a static link would warn for it (and there
 * dlsym finds nothing, so this returns NULL). */
static void *cxx_lib_symbol(const char *soname, const char *name) {
  void *(*open_fn)(const char *, int) = (void *(*)(const char *, int))dlsym(RTLD_DEFAULT, "dlopen");
  int (*close_fn)(void *) = open_fn ? (int (*)(void *))dlsym(RTLD_DEFAULT, "dlclose") : NULL;
  void *lib = close_fn ? open_fn(soname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  if (!lib) return NULL;
  void *f = dlsym(lib, name);
  close_fn(lib); /* the library that loaded it keeps it */
  return f;
}

/* Only on a throwing operator new that failed (public.c), never on malloc's
 * path: dlsym and dlopen take the loader's lock (recursive: a constructor
 * running under dlopen may get here) and may allocate (an error string). A
 * library loaded with dlopen's default RTLD_LOCAL, and the libstdc++ it
 * brought, are not in the global scope: libstdc++ is asked for by its soname
 * then, only if already loaded (RTLD_NOLOAD). */
void *os_cxx_symbol(const char *name) {
  int saved = errno;
  void *f = dlsym(RTLD_DEFAULT, name);
  if (!f) f = cxx_lib_symbol("libstdc++.so.6", name);
  errno = saved;
  return f;
}

/* Asks the runtime library itself, not the global scope, where ebb's
 * definitions come first and another allocator's replacement could come
 * next: a block from that one would die in ebb's free as an invalid pointer. */
void *os_cxx_runtime_symbol(const char *name) {
  int saved = errno;
  void *f = cxx_lib_symbol("libstdc++.so.6", name);
  if (!f) f = cxx_lib_symbol("libc++.so.1", name);
  errno = saved;
  return f;
}

/* ---- threads (see os.h for why these never run on a malloc/free path) */

typedef int pthread_create_fn(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
/* In a fully static link dlsym finds nothing; glibc's libc.a then has the real
 * function under this name, pulled in by any call of pthread_create (or by
 * -Wl,-u,__pthread_create_2_1 when only EBB_BACKGROUND=1 creates a thread). */
extern pthread_create_fn __pthread_create_2_1 __attribute__((weak));
static pthread_create_fn *_Atomic real_pthread_create;
#ifndef EBB_NO_OVERRIDE
static pid_t (*_Atomic real_fork_only)(void); /* libc's _Fork (glibc 2.34 on), or NULL */
#endif

bool os_thread_init(void) {
  if (atomic_load_explicit(&real_pthread_create, memory_order_acquire)) return true;
  int saved = errno;
  pthread_create_fn *f = __pthread_create_2_1;
#ifndef EBB_NO_OVERRIDE
  if (!f) f = (pthread_create_fn *)dlsym(RTLD_NEXT, "pthread_create"); /* may allocate: never on malloc's path */
  atomic_store_explicit(&real_fork_only, (pid_t(*)(void))dlsym(RTLD_NEXT, "_Fork"), memory_order_release);
#else
  if (!f) f = pthread_create; /* ebb does not wrap it in this build */
#endif
  errno = saved;
  atomic_store_explicit(&real_pthread_create, f, memory_order_release);
  return f != NULL;
}

static int real_create(void *thread, const void *attr, void *(*fn)(void *), void *arg) {
  if (!os_thread_init()) {
    static const char msg[] = "ebb: pthread_create(): no libc pthread_create in this fully static program; "
                              "link it with -Wl,-u,__pthread_create_2_1\n";
    os_write(2, msg, sizeof msg - 1);
    return EAGAIN;
  }
  return atomic_load_explicit(&real_pthread_create, memory_order_acquire)(thread, attr, fn, arg);
}

/* The thread starts with every signal blocked (jemalloc does the same for its
 * background threads): it must never take a signal the program meant for
 * itself, by sigwait or a signalfd (found by a probe: a blocked SIGUSR1 killed
 * the process, a SIGCHLD never reached the signalfd). */
bool os_thread_start(void *(*fn)(void *)) {
  int saved = errno;
  pthread_t t;
  pthread_attr_t attr;
  sigset_t all, old;
  sigfillset(&all);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* The default stack size (RLIMIT_STACK's, 8 MiB on Debian: address space,
   * resident only where used), not a small one: glibc carves the program's
   * static TLS out of the thread's stack, and a 64 KiB stack left a program
   * with ~58 KB of __thread data 5 KiB, where the thread's first lazily bound
   * call overflowed it (SIGSEGV under the default settings); with more TLS
   * the thread was refused (EINVAL) and never ran (found by a probe). */
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = real_create(&t, &attr, fn, NULL);
  /* Refused (under an address-space limit with less than the default stack's
   * room left, found by a probe: the thread silently never started, where the
   * program's own threads of 64 KiB stacks still did): once more with 1 MiB,
   * room for the static TLS of all but a few programs. */
  if (rc == EAGAIN && pthread_attr_setstacksize(&attr, (size_t)1 << 20) == 0) rc = real_create(&t, &attr, fn, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  errno = saved;
  return rc == 0;
}

static void (*_Atomic before_create)(void *(**fn)(void *), void **arg);
static void (*_Atomic create_failed)(void *arg);

void os_on_thread_create(void (*before)(void *(**fn)(void *), void **arg), void (*failed)(void *arg)) {
  atomic_store_explicit(&create_failed, failed, memory_order_release);
  atomic_store_explicit(&before_create, before, memory_order_release);
}

/* jemalloc's way to learn that a process becomes multi-threaded: ebb's
 * pthread_create runs the hook (which starts the background thread, and
 * gives the new thread a start routine of ebb's own around the program's:
 * thread.c) in the creating thread, where no libc lock is held, then calls
 * libc's. */
EBB_EXPORT int ebb_pthread_create(void *t, const void *attr, void *(*fn)(void *), void *arg) {
  void (*before)(void *(**)(void *), void **) = atomic_load_explicit(&before_create, memory_order_acquire);
  void *(*start)(void *) = fn;
  void *start_arg = arg;
  if (before) before(&start, &start_arg);
  int rc = real_create(t, attr, start, start_arg);
  if (rc != 0 && start_arg != arg) atomic_load_explicit(&create_failed, memory_order_acquire)(start_arg);
  return rc;
}

/* The first thread's liveness without /proc: it locks a robust mutex and
 * never lets go; when it ends (pthread_exit, or the raw exit system call,
 * which runs no destructor), the kernel walks its robust list and marks the
 * mutex, and a trylock says EOWNERDEAD (the idea of glibc's robust mutexes,
 * used as a death notice). A held one answers EBUSY with no system call. */
static pthread_mutex_t main_alive_mutex;
static atomic_int main_alive_known;

void os_main_alive_mark(void) {
  int saved = errno;
  pthread_mutexattr_t attr;
  atomic_store(&main_alive_known, 0);
  if (pthread_mutexattr_init(&attr) == 0) {
    if (pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) == 0 &&
        pthread_mutex_init(&main_alive_mutex, &attr) == 0 && pthread_mutex_lock(&main_alive_mutex) == 0)
      atomic_store(&main_alive_known, 1);
    pthread_mutexattr_destroy(&attr);
  }
  errno = saved;
}

int os_main_alive(void) {
  int known = atomic_load(&main_alive_known);
  if (known != 1) return known == 2 ? 0 : -1;
  int saved = errno;
  int rc = pthread_mutex_trylock(&main_alive_mutex);
  errno = saved;
  if (rc == EBUSY) return 1;
  if (rc == EOWNERDEAD || rc == 0) { /* the caller holds it now: the first thread is gone */
    atomic_store(&main_alive_known, 2);
    return 0;
  }
  return -1;
}

static void (*_Atomic on_raw_fork_before)(void);
static void (*_Atomic on_raw_fork_after)(bool child);

void os_on_raw_fork(void (*before)(void), void (*after)(bool child)) {
  atomic_store_explicit(&on_raw_fork_after, after, memory_order_release);
  atomic_store_explicit(&on_raw_fork_before, before, memory_order_release);
}

#ifndef EBB_NO_OVERRIDE
/* glibc's _Fork (2.34 on) copies the process and runs no atfork handler: a
 * lock ebb's background thread held at that moment stayed held in the child
 * for good, and the child's next malloc that needed it waited forever (found
 * by a probe: 13 of 600 children of a program whose thread had ended). The
 * hooks (thread.c) hold the background thread off its locks around the call.
 * libebb.so exports it; libebb.a makes it local (Makefile), as pthread_create.
 * fork itself calls libc's _Fork internally, not this one. */
__attribute__((weak, visibility("default"))) pid_t _Fork(void) {
  pid_t (*real)(void) = atomic_load_explicit(&real_fork_only, memory_order_acquire);
  if (!real) real = (pid_t(*)(void))dlsym(RTLD_NEXT, "_Fork"); /* called before ebb's constructor */
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  void (*before)(void) = atomic_load_explicit(&on_raw_fork_before, memory_order_acquire);
  void (*after)(bool) = atomic_load_explicit(&on_raw_fork_after, memory_order_acquire);
  if (before) before();
  pid_t pid = real();
  int saved = errno;
  if (after) after(pid == 0);
  errno = saved;
  return pid;
}
#endif

bool os_is_main_thread(void) {
  int saved = errno;
  bool main = (pid_t)syscall(SYS_gettid) == getpid();
  errno = saved;
  return main;
}

#ifndef EBB_NO_OVERRIDE
/* libebb.so exports it as pthread_create too; libebb.a makes this name local
 * (Makefile), so a static link interposes on nothing of libc's and exports
 * only ebb_* names: a program asks for the hook with
 * -Wl,--defsym=pthread_create=ebb_pthread_create -Wl,-u,ebb_pthread_create.
 * Weak all the same. */
__attribute__((weak, visibility("default"))) int pthread_create(pthread_t *t, const pthread_attr_t *attr,
                                                                void *(*fn)(void *), void *arg) {
  return ebb_pthread_create(t, attr, fn, arg);
}
#endif

static pthread_key_t exit_key;

bool os_exit_key_create(void (*dtor)(void *)) {
  int saved = errno;
  int rc = pthread_key_create(&exit_key, dtor);
  errno = saved;
  return rc == 0;
}

bool os_exit_key_set(void *value) {
  int saved = errno;
  int rc = pthread_setspecific(exit_key, value);
  errno = saved;
  return rc == 0;
}

void os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  int saved = errno;
  pthread_atfork(prepare, parent, child);
  errno = saved;
}
