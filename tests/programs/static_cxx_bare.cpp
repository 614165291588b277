/* static_cxx_bare.cpp — run by tests/integration/test_static.c linked fully
 * static (-static) with build/libebb.a: a C++ program that uses no standard
 * container (so libstdc++.a's std::__throw_bad_alloc is not linked in) but
 * installs a new_handler and throws std::bad_alloc itself somewhere, as
 * docs/api.md names the condition. A failing operator new must call the
 * handler, then throw a std::bad_alloc the program catches, whose what() is
 * std::bad_alloc's (it aborted with "ebb: operator new(): out of memory",
 * found by a probe). Prints "FAIL ..." for each broken expectation and "OK";
 * the exit status is the number of failures. */
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

static int failures, handler_calls;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::printf("FAIL line %d: %s\n", __LINE__, #cond);                                          \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static volatile std::size_t huge = SIZE_MAX / 4;

static void handler() {
  handler_calls++;
  std::set_new_handler(nullptr); /* gives up: the next failure throws */
}

int main(int argc, char **) {
  if (argc > 100) throw std::bad_alloc(); /* the program's own throw, never run */
  std::set_new_handler(handler);
  bool threw = false;
  try {
    void *p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::exception &e) {
    threw = dynamic_cast<const std::bad_alloc *>(&e) != nullptr;
    CHECK(std::strstr(e.what(), "bad_alloc") != nullptr);
  }
  CHECK(threw);
  CHECK(handler_calls == 1);
  std::printf("%s\n", failures ? "FAILED" : "OK");
  return failures;
}
