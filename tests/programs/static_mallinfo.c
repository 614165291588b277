/* static_mallinfo.c — a program that uses a glibc malloc function ebb does not
 * define (mallinfo), linked with build/libebb.a. With -static this pulls
 * libc.a's malloc.o next to ebb's: tests/integration/test_static.c checks which
 * of the two documented outcomes happens. Exit status 0 when ebb serves malloc. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "ebb.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(void) {
  void *p = malloc(10);
  struct mallinfo m = mallinfo();
  int ours = ebb_owns(p);
  printf("ebb_owns=%d arena=%d\n", ours, m.arena);
  free(p);
  return ours ? 0 : 1;
}
