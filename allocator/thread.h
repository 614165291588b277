/* thread.h — owns the process and thread lifecycle: set-up (options, classes,
 * keys; once, from a constructor or lazily from the first allocation), binding
 * a thread to an arena and abandoning it at exit, fork handling, and the
 * background purge thread, started by the hook os.c's pthread_create wrapper runs.
 * Layer: above arena, os. Nothing here runs a libc call that may take a libc
 * lock on a malloc/free path: those (pthread_create, pthread_atfork) run only
 * from the constructor and the pthread_create wrapper. */
#ifndef EBB_THREAD_H
#define EBB_THREAD_H
#include "arena.h"

void thread_process_init(void);        /* idempotent; cheap once done */
/* Slow path: the calling thread's arena, set up on first use. Once the
 * thread's exit handler has run (a later thread-key destructor allocating),
 * an arena lent for this one call: give it back with thread_arena_done. */
arena_t *thread_arena(void);
void thread_arena_done(arena_t *a);    /* after using what thread_arena returned (nothing unless lent) */
bool thread_background_start(void);    /* starts the purge thread if it is not running (never from malloc) */
uint64_t thread_count_seen(void);      /* threads that ever got an arena */
#endif
