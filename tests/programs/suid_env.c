/* suid_env.c — run by tests/integration/test_static.c, linked with
 * build/libebb.a, once as it is and once set-user-ID to another user: prints
 * its effective user ID, allocates, and exits 0. With EBB_VERBOSE=1 in the
 * environment ebb prints its settings on stderr, except in the set-user-ID
 * program, where the kernel sets AT_SECURE and ebb reads no EBB_* variable. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
  char *p = malloc(100);
  if (!p) return 1;
  snprintf(p, 100, "euid=%d", (int)geteuid());
  puts(p);
  free(p);
  return 0;
}
