/* map_limit.c — a large block freed from the middle of a cached mapping while
 * the process is at vm.max_map_count. Returning it to the kernel means
 * splitting that mapping, which munmap then refuses (ENOMEM); found by a
 * probe: the freed 8 MiB stayed mapped and resident for the life of the
 * process, while ebb_trim and the stats counted it as returned.
 *
 * Frees a 64 MiB block (so its mapping waits in the large-block cache), takes
 * three 8 MiB blocks from that mapping, writes them, fills the map count with
 * one-page mappings, frees the middle block and trims; then lifts the map
 * count, frees the rest and trims again. Prints key=value fields; exits 0 when
 * the middle block's pages are no longer resident, 1 when they are, 2 when
 * the set-up went wrong. Run it with LD_PRELOAD=libebb.so EBB_BACKGROUND=0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BLOCK ((size_t)8 << 20)
#define PADS 70000

static char *pads[PADS];

/* Pages of [p, p + n) resident now. */
static size_t resident_pages(const char *p, size_t n) {
  static unsigned char vec[BLOCK / 4096];
  if (mincore((void *)p, n, vec) != 0) return 0; /* unmapped: nothing resident */
  size_t r = 0;
  for (size_t i = 0; i < n / 4096; i++) r += vec[i] & 1;
  return r;
}

int main(void) {
  size_t (*trim)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "ebb_trim");
  if (!trim) {
    printf("setup=no_ebb\n");
    return 2;
  }
  void *volatile big = malloc((size_t)64 << 20);
  free(big);
  char *b[3];
  for (int i = 0; i < 3; i++) {
    if (!(b[i] = malloc(BLOCK))) return 2;
    memset(b[i], i + 1, BLOCK);
  }
  int npad = 0;
  while (npad < PADS) { /* alternate protections: neighbours never merge */
    char *p = mmap(NULL, 4096, (npad & 1) ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    pads[npad++] = p;
  }
  if (npad == PADS) {
    printf("setup=map_count_not_reached\n");
    return 2;
  }
  free(b[1]);
  trim();
  size_t left = resident_pages(b[1], BLOCK);
  while (npad) munmap(pads[--npad], 4096);
  free(b[0]);
  free(b[2]);
  trim();
  printf("resident_pages_of_freed_block=%zu\n", left);
  return left == 0 ? 0 : 1;
}
