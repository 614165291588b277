// cxx_plugin.cpp — C++ code a C program loads with dlopen (cxx_host.c): its
// failing operator new must throw std::bad_alloc, and run the new_handler
// first, under LD_PRELOAD=libebb.so although libstdc++ was not loaded when
// ebb started (found by a probe: ebb aborted with "operator new(): out of
// memory").
#include <cstdlib>
#include <new>

static int handler_calls;
static void handler() {
  handler_calls++;
  std::set_new_handler(nullptr); // the next failure throws
}

void *volatile sink;

// 0: std::bad_alloc caught after the handler ran once; 1: no exception; 2: the handler never ran.
extern "C" int cxx_plugin_try(void) {
  std::set_new_handler(handler);
  try {
    sink = new char[getenv("CXX_PLUGIN_SMALL") ? 16 : (size_t)1 << 62];
    return 1;
  } catch (const std::bad_alloc &) {
    return handler_calls == 1 ? 0 : 2;
  }
}
