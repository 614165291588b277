/* static_cxx.cpp — run by tests/integration/test_static.c after linking with
 * build/libebb.a (and once more with -static): proves that ebb serves
 * operator new in its forms, the standard containers and malloc.
 * Prints "FAIL ..." for each broken expectation and "OK" at the end;
 * the exit status is the number of failures. */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "ebb.h"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::printf("FAIL line %d: %s\n", __LINE__, #cond);                                          \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

struct alignas(256) Wide {
  char bytes[300];
};

static volatile std::size_t huge = SIZE_MAX / 4;

int main() {
  int *i = new int(42);
  CHECK(ebb_owns(i));
  delete i;
  char *arr = new char[5000];
  CHECK(ebb_owns(arr));
  delete[] arr;
  Wide *w = new Wide;
  CHECK(ebb_owns(w));
  CHECK(reinterpret_cast<std::uintptr_t>(w) % 256 == 0);
  delete w;
  int *nt = new (std::nothrow) int[10];
  CHECK(ebb_owns(nt));
  delete[] nt;
  std::vector<int> v(100000, 7);
  CHECK(ebb_owns(v.data()));
  std::string s(1000, 'x');
  CHECK(ebb_owns(s.data()));
  void *m = std::malloc(100);
  CHECK(ebb_owns(m));
  std::free(m);
  bool threw = false;
  try {
    void *p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);
  CHECK(::operator new(huge, std::nothrow) == nullptr);
  struct ebb_stats st;
  ebb_stats(&st);
  CHECK(st.mapped > 0);
  std::printf("%s mapped=%zu\n", failures ? "FAILED" : "OK", st.mapped);
  return failures;
}
