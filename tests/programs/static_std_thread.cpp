// static_std_thread.cpp — run by tests/integration/test_static.c, linked with
// build/libebb.a: a thread made by std::thread, whose pthread_create call is
// libstdc++.so's (in a dynamic link), not the program's. While it lives the
// program counts its threads: 3 when ebb's pthread_create ran and started its
// background thread (EBB_BACKGROUND=auto), 2 when libc's ran alone. Prints
// "OK threads=N" when N is argv[1], else "FAIL threads=N".
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <thread>

#include "ebb.h"

static std::atomic<int> release;

static int threads() {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (dirent *e; (e = readdir(d)) != nullptr;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  int want = argc > 1 ? atoi(argv[1]) : -1;
  int *p = new int(1);
  if (!ebb_owns(p)) return std::printf("FAIL not on ebb\n"), 1;
  delete p;
  std::thread t([] {
    while (!release.load()) std::this_thread::yield();
  });
  int n = threads();
  release = 1;
  t.join();
  std::printf("%s threads=%d\n", n == want ? "OK" : "FAIL", n);
  return n == want ? 0 : 1;
}
