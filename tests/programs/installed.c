/* Built against an installed ebb (make install) through pkg-config: malloc and the
 * ebb_* API both come from the installed library. */
#include <ebb.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  void *p = malloc(100);
  struct ebb_stats s;
  ebb_stats(&s);
  int ok = p && ebb_owns(p) && s.mapped > 0;
  printf("owns=%d mapped=%zu\n", ebb_owns(p), s.mapped);
  free(p);
  return ok ? 0 : 1;
}
