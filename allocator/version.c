/* version.c — ebb_version(): the EBB_VERSION_STRING of the ebb.h the library was
 * built from. May call: nothing. Never allocates. */
#include "common.h"
#include "ebb.h"

EBB_EXPORT const char *ebb_version(void) { return EBB_VERSION_STRING; }
