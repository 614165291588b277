/* cxx_host.c — a C program (no libstdc++ at start-up) that dlopens C++ code
 * (cxx_plugin.cpp, built as DIR/libcxx_plugin.so) and calls it: see there.
 * Usage: cxx_host DIR. Prints result=N (cxx_plugin_try's) and exits with it,
 * or 3 when the plugin cannot be loaded. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  char path[4096];
  snprintf(path, sizeof path, "%s/libcxx_plugin.so", argc > 1 ? argv[1] : ".");
  void *h = dlopen(path, RTLD_NOW);
  if (!h) return printf("dlopen: %s\n", dlerror()), 3;
  int (*try_new)(void) = (int (*)(void))dlsym(h, "cxx_plugin_try");
  if (!try_new) return 3;
  int r = try_new();
  printf("result=%d\n", r);
  return r;
}
