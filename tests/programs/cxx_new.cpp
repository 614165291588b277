/* cxx_new.cpp — run by tests/integration/test_cxx.c with LD_PRELOAD=build/libebb.so
 * (it is not linked with ebb): every form of operator new and delete (plain,
 * array, nothrow, sized, aligned, and their combinations) must hand out ebb's
 * blocks, aligned as asked, and free them. ebb_owns is found with dlsym, so
 * the program also says clearly when ebb is not there at all.
 * Prints "FAIL ..." for each broken expectation and "OK" at the end; the exit
 * status is the number of failures (2 when ebb is absent). */
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free" /* freed() looks at freed pointers on purpose */
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

static int (*owns)(const void *);
static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::printf("FAIL line %d: %s: ", __LINE__, #cond);                                          \
      std::printf(__VA_ARGS__);                                                                    \
      std::printf("\n");                                                                           \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static volatile std::size_t huge = SIZE_MAX / 4; /* volatile: no compile-time size warnings */

static bool aligned(const void *p, std::size_t a) { return (reinterpret_cast<std::uintptr_t>(p) & (a - 1)) == 0; }

/* A live block from ebb: owned, aligned, writable. */
static void live(void *p, std::size_t size, std::size_t align, const char *form) {
  CHECK(p != nullptr, "%s(%zu) returned NULL", form, size);
  if (!p) return;
  CHECK(owns(p), "%s(%zu, align %zu) = %p is not ebb's", form, size, align, p);
  CHECK(aligned(p, align), "%s(%zu) = %p is not %zu-aligned", form, size, p, align);
  std::memset(p, 0x5e, size);
}
static void freed(void *p, const char *form) { CHECK(!owns(p), "%s left %p live", form, p); }

static const std::size_t sizes[] = {0, 1, 16, 100, 4096, 100000, 3u << 20};
static const std::size_t aligns[] = {16, 32, 64, 256, 4096, 65536, 1u << 20};

static void plain_forms() {
  for (std::size_t s : sizes) {
    void *p = ::operator new(s);
    live(p, s, 16, "operator new");
    ::operator delete(p);
    freed(p, "operator delete(void *)");
    p = ::operator new(s);
    live(p, s, 16, "operator new");
    ::operator delete(p, s);
    freed(p, "operator delete(void *, size_t)");
    p = ::operator new[](s);
    live(p, s, 16, "operator new[]");
    ::operator delete[](p);
    freed(p, "operator delete[](void *)");
    p = ::operator new[](s);
    live(p, s, 16, "operator new[]");
    ::operator delete[](p, s);
    freed(p, "operator delete[](void *, size_t)");
    p = ::operator new(s, std::nothrow);
    live(p, s, 16, "operator new(nothrow)");
    ::operator delete(p, std::nothrow);
    freed(p, "operator delete(void *, nothrow)");
    p = ::operator new[](s, std::nothrow);
    live(p, s, 16, "operator new[](nothrow)");
    ::operator delete[](p, std::nothrow);
    freed(p, "operator delete[](void *, nothrow)");
  }
}

static void aligned_forms() {
  for (std::size_t a : aligns)
    for (std::size_t s : sizes) {
      std::align_val_t al{a};
      void *p = ::operator new(s, al);
      live(p, s, a, "operator new(align)");
      ::operator delete(p, al);
      freed(p, "operator delete(void *, align)");
      p = ::operator new(s, al);
      live(p, s, a, "operator new(align)");
      ::operator delete(p, s, al);
      freed(p, "operator delete(void *, size_t, align)");
      p = ::operator new[](s, al);
      live(p, s, a, "operator new[](align)");
      ::operator delete[](p, al);
      freed(p, "operator delete[](void *, align)");
      p = ::operator new[](s, al);
      live(p, s, a, "operator new[](align)");
      ::operator delete[](p, s, al);
      freed(p, "operator delete[](void *, size_t, align)");
      p = ::operator new(s, al, std::nothrow);
      live(p, s, a, "operator new(align, nothrow)");
      ::operator delete(p, al, std::nothrow);
      freed(p, "operator delete(void *, align, nothrow)");
      p = ::operator new[](s, al, std::nothrow);
      live(p, s, a, "operator new[](align, nothrow)");
      ::operator delete[](p, al, std::nothrow);
      freed(p, "operator delete[](void *, align, nothrow)");
    }
}

struct alignas(128) Over {
  char bytes[200];
};
struct Plain {
  int x[10];
  ~Plain() {} /* non-trivial: new[] stores a cookie in front of the elements */
};

static void expressions() {
  int *i = new int(7);
  live(i, sizeof *i, 16, "new int");
  delete i;
  Over *o = new Over;
  live(o, sizeof *o, 128, "new Over (alignas 128)");
  delete o;
  Over *oa = new Over[5];
  live(oa, 5 * sizeof *oa, 128, "new Over[5]");
  delete[] oa;
  Plain *pa = new Plain[3];
  /* The block starts before pa (the array cookie); pa itself is interior. */
  CHECK(!owns(pa), "new Plain[3] returned a block start: no array cookie?");
  delete[] pa;
  std::vector<std::string> v;
  for (int k = 0; k < 1000; k++) v.emplace_back(100, 'x');
  CHECK(owns(v.data()), "vector storage is not ebb's");
  CHECK(owns(v[500].data()), "string storage is not ebb's");
  auto u = std::make_unique<Over[]>(3);
  CHECK(owns(u.get()), "make_unique<Over[]> storage is not ebb's");
}

static int handler_calls;
static void handler() {
  handler_calls++;
  std::set_new_handler(nullptr); /* next failure throws */
}

static int throwing_calls;
static void throwing_handler() {
  throwing_calls++;
  throw std::bad_alloc();
}

/* A handler that frees a reserve makes a failed nothrow new succeed, as
 * under libstdc++'s own operators: in a child whose address space is capped
 * just above a 512 MiB reserve, new(400 MiB, nothrow) fails until the
 * handler frees it (found by a probe: ebb returned nullptr without calling
 * the handler). */
static char *reserve;
static int reserve_calls;
static void release_reserve() {
  reserve_calls++;
  std::free(reserve);
  reserve = nullptr;
  std::set_new_handler(nullptr);
}
/* In a forked child: caps the address space `room` bytes above what the
 * process has now; exits 3 if it cannot. */
static void cap_address_space(rlim_t room) {
  long pages = 0;
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (!f || std::fscanf(f, "%ld", &pages) != 1) _exit(3);
  std::fclose(f);
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + room;
  if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
}
static void handler_releases_a_reserve() {
  pid_t pid = fork();
  if (pid == 0) {
    cap_address_space((rlim_t)640 << 20);
    reserve = static_cast<char *>(std::malloc((std::size_t)512 << 20));
    if (!reserve) _exit(3);
    std::set_new_handler(release_reserve);
    void *p = ::operator new((std::size_t)400 << 20, std::nothrow);
    _exit(p && reserve_calls == 1 ? 0 : 1);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/waitpid failed");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 3, "the child could not set up its address-space cap");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "new(400 MiB, nothrow) with a handler that frees a 512 MiB reserve under a cap: did not succeed "
        "with one handler call (child status %d)",
        st);
}

/* The same with memory exhausted, small blocks too: the child caps its
 * address space 64 MiB above what it has, keeps a reserve of 2000 blocks of
 * 1000 bytes, and makes blocks of that size with the nothrow form (plain, then
 * aligned) until it gets nullptr; a handler that frees 500 reserve blocks a
 * call must have been called until the reserve is gone. ebb looked the
 * runtime's nothrow form up at the failure, with dlopen, which failed itself
 * then: the handler was never called (found by a probe). */
static std::vector<char *> *exhaust_reserve;
static int exhaust_calls;
static void release_some() {
  exhaust_calls++;
  for (int i = 0; i < 500 && !exhaust_reserve->empty(); i++) {
    ::operator delete(exhaust_reserve->back());
    exhaust_reserve->pop_back();
  }
  if (exhaust_reserve->empty()) std::set_new_handler(nullptr);
}
static void handler_runs_when_memory_is_exhausted(bool aligned) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char *> reserve, made;
    reserve.reserve(2000);
    made.reserve(1 << 20); /* 8 MiB of pointers, made before the cap */
    for (int i = 0; i < 2000; i++) reserve.push_back(static_cast<char *>(::operator new(1000)));
    exhaust_reserve = &reserve;
    cap_address_space((rlim_t)64 << 20);
    std::set_new_handler(release_some);
    for (;;) {
      void *p = aligned ? ::operator new(1000, std::align_val_t(64), std::nothrow) : ::operator new(1000, std::nothrow);
      if (!p || made.size() == made.capacity()) break;
      made.push_back(static_cast<char *>(p));
    }
    _exit(made.size() < made.capacity() && reserve.empty() && exhaust_calls == 4 ? 0 : 1);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/waitpid failed");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 3, "the child could not set up its address-space cap");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "new(1000, %snothrow) until nullptr under a cap, with a handler that frees a reserve: the handler "
        "was not called until the reserve was gone (child status %d)",
        aligned ? "align_val_t(64), " : "", st);
}

static void failures_throw_or_return_null() {
  bool threw = false;
  try {
    void *p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw, "operator new(huge) did not throw std::bad_alloc");
  threw = false;
  try {
    void *p = ::operator new[](huge, std::align_val_t{64});
    ::operator delete[](p, std::align_val_t{64});
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw, "operator new[](huge, align) did not throw std::bad_alloc");
  CHECK(::operator new(huge, std::nothrow) == nullptr, "nothrow new(huge) != nullptr");
  CHECK(::operator new[](huge, std::nothrow) == nullptr, "nothrow new[](huge) != nullptr");
  CHECK(::operator new(huge, std::align_val_t{4096}, std::nothrow) == nullptr, "nothrow aligned new(huge)");
  /* Sizes whose rounding up to the alignment wraps around past SIZE_MAX (to 0
   * or to a small size) must fail too, not hand out a tiny block. */
  static volatile std::size_t near_max[] = {SIZE_MAX, SIZE_MAX - 10, SIZE_MAX - 63, SIZE_MAX - 4096};
  for (std::size_t n : near_max) {
    threw = false;
    try {
      void *p = ::operator new(n, std::align_val_t{64});
      ::operator delete(p, std::align_val_t{64});
    } catch (const std::bad_alloc &) {
      threw = true;
    }
    CHECK(threw, "operator new(SIZE_MAX - %zu, align 64) did not throw std::bad_alloc", SIZE_MAX - n);
    CHECK(::operator new[](n, std::align_val_t{32}, std::nothrow) == nullptr,
          "nothrow new[](SIZE_MAX - %zu, align 32) != nullptr", SIZE_MAX - n);
  }
  /* The new_handler is called before giving up. */
  std::set_new_handler(handler);
  threw = false;
  try {
    void *p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw && handler_calls == 1, "new_handler called %d times (expected 1), threw %d", handler_calls,
        (int)threw);
  /* The retry after the handler takes the size as it is too: it rounded it up
   * to the alignment, which wrapped to 0 near SIZE_MAX, and a block of one
   * alignment's size came back (found by a probe). */
  for (std::size_t n : near_max) {
    for (std::size_t a : {std::size_t{32}, std::size_t{4096}, std::size_t{2} << 20}) {
      handler_calls = 0;
      std::set_new_handler(handler);
      threw = false;
      try {
        void *p = ::operator new[](n, std::align_val_t{a});
        ::operator delete[](p, std::align_val_t{a});
      } catch (const std::bad_alloc &) {
        threw = true;
      }
      CHECK(threw && handler_calls == 1,
            "operator new[](SIZE_MAX - %zu, align %zu) with a new_handler: handler called %d times, threw %d",
            SIZE_MAX - n, a, handler_calls, (int)threw);
    }
  }
  /* The nothrow forms call the new_handler as the throwing ones do (the
   * standard's nothrow form is the throwing one with std::bad_alloc caught):
   * once here, since the handler removes itself, and then nullptr. */
  struct nothrow_form {
    const char *what;
    void *(*fn)(std::size_t);
  } forms[] = {
      {"new(n, nothrow)", [](std::size_t n) { return ::operator new(n, std::nothrow); }},
      {"new[](n, nothrow)", [](std::size_t n) { return ::operator new[](n, std::nothrow); }},
      {"new(n, align 4096, nothrow)",
       [](std::size_t n) { return ::operator new(n, std::align_val_t{4096}, std::nothrow); }},
      {"new[](n, align 32, nothrow)",
       [](std::size_t n) { return ::operator new[](n, std::align_val_t{32}, std::nothrow); }},
  };
  for (const nothrow_form &f : forms) {
    handler_calls = 0;
    std::set_new_handler(handler);
    void *p = f.fn(huge);
    CHECK(p == nullptr && handler_calls == 1, "%s with a new_handler: %p, handler called %d times (expected 1)",
          f.what, p, handler_calls);
    /* a handler that throws std::bad_alloc ends it with nullptr, not the throw */
    throwing_calls = 0;
    std::set_new_handler(throwing_handler);
    p = f.fn(huge);
    CHECK(p == nullptr && throwing_calls == 1, "%s with a throwing new_handler: %p, handler called %d times",
          f.what, p, throwing_calls);
    std::set_new_handler(nullptr);
    handler_calls = 0;
    p = f.fn(huge);
    CHECK(p == nullptr && handler_calls == 0, "%s without a new_handler: %p", f.what, p);
  }
  handler_releases_a_reserve();
  /* operator new(0) gives distinct blocks */
  void *a = ::operator new(0), *b = ::operator new(0);
  CHECK(a && b && a != b, "operator new(0) twice: %p %p", a, b);
  ::operator delete(a);
  ::operator delete(b);
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::align_val_t{64});
}

int main() {
  /* first: once a failed nothrow new has looked the runtime up (the cases
   * below), the loader needs no memory to do it again */
  handler_runs_when_memory_is_exhausted(false);
  handler_runs_when_memory_is_exhausted(true);
  owns = reinterpret_cast<int (*)(const void *)>(dlsym(RTLD_DEFAULT, "ebb_owns"));
  if (!owns) {
    std::printf("FAIL: ebb_owns not found: libebb.so is not loaded\n");
    return 2;
  }
  plain_forms();
  aligned_forms();
  expressions();
  failures_throw_or_return_null();
  std::printf("%s\n", failures ? "FAILED" : "OK");
  return failures;
}
