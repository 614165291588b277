/* static.c — the whole allocator as one translation unit (mimalloc's habit), so
 * the fast paths inline across layers and libebb.a is a single object.
 * Layers, bottom-up: os → fmt → options → sizeclass → decay → registry → page →
 * chunk → huge → arena → thread → alloc → stats → public. */
#ifndef EBB_FAKE_OS
#include "os.c"
#endif
#include "fmt.c"
#include "options.c"
#include "sizeclass.c"
#include "decay.c"
#include "registry.c"
#include "page.c"
#include "chunk.c"
#include "huge.c"
#include "arena.c"
#include "thread.c"
#include "alloc.c"
#include "stats.c"
#include "public.c"
#include "version.c"
