/* thread.c — owns process set-up, thread binding and exit, fork, and the
 * background thread (thread.h).
 * May call: arena, huge (waiting for unmaps at a fork), options, os (its thread functions only from the constructor,
 * os.c's pthread_create wrapper (through a hook) and the background thread itself),
 * and ebb_malloc/ebb_free from that hook and the thread start routine it installs.
 * Must never: start a thread, sleep, or call pthread_atfork from a
 * malloc/free/realloc path (glibc calls free with internal locks held). */
#include "thread.h"
#include "huge.h"
#include "os.h"
#include "ebb.h"

__thread int spin_fork_holder __attribute__((tls_model("initial-exec")));
__thread int spin_held __attribute__((tls_model("initial-exec")));

static atomic_int init_state;         /* 0 none, 1 running, 2 done */
static atomic_int bg_state;           /* 0 not running, 1 running (or starting) */
static atomic_uint_fast64_t threads_seen;

/* During fork the forking thread holds every arena lock (fork_prepare); a fork
 * handler registered before ebb's may allocate on that thread in between, so
 * its lock calls succeed at once without touching the locks: no other thread
 * can be inside, and this thread is not in the middle of an update (fork is
 * not called from inside malloc). */
void spin_lock_wait(spinlock_t *l) {
  do os_yield();
  while (!spin_trylock(l));
}

/* ------------------------------------------------------------ set-up */

/* Set once the thread's key destructor has run. glibc runs key destructors in
 * at most 4 rounds, and another key's destructor may allocate after ebb's ran
 * in the last one: an arena bound then would never be abandoned (found by a
 * probe: 1000 such threads left 1000 arenas owned for good). Such late calls
 * borrow an arena for the one call instead (thread_arena_done). */
static __thread uint8_t thread_gone __attribute__((tls_model("initial-exec")));

/* Set in a thread that ebb's pthread_create started (thread_trampoline): its
 * exit key holds a value from its first instruction on, so thread_exit runs
 * in the first round of key destructors whatever the thread does. A thread
 * whose first allocation came in the last round, from another key's
 * destructor, bound an arena that thread_exit never saw: it stayed owned by
 * a thread that was gone, and the next thread to take back an idle owner's
 * pages swapped a key in the dead thread's freed stack (found by a probe:
 * SIGSEGV in arena_reclaim_queues_locked, from malloc_trim, the background
 * thread or any thread's decay pass; and one arena leaked per such thread).
 * Only such a thread, and the first thread, whose thread-local storage is
 * never freed, show other threads where their free key is (thread_arena). */
static __thread uint8_t thread_keyed_at_start __attribute__((tls_model("initial-exec")));
/* Set while thread_trampoline sets the key: glibc may allocate the key's
 * second-level block (a key past the first 32) inside that call, binding the
 * thread's arena, whose own setspecific would then run inside the first and
 * lose a block to it (found by a probe: 512 B a thread). Volatile: glibc
 * declares pthread_setspecific a leaf (it never calls back into this file), so
 * gcc dropped the store of 1 before the call. */
static __thread volatile uint8_t thread_keying __attribute__((tls_model("initial-exec")));

/* While the process's first thread is alive the background thread cannot be
 * the last one and reads no /proc file: its open took the lowest free
 * descriptor for a moment, so a program's close(0) and open() got another
 * number about once in 20,000 tries (found by a probe). The robust mutex of
 * os_main_alive_mark sees that thread end however it ends (pthread_exit, or
 * the raw exit system call, which runs no destructor). Where it was never
 * taken (ebb loaded by another thread), /proc is asked this often, so the
 * process ends at most this long after its last thread. */
#define MAIN_ASK_MS 2000

static void thread_exit(void *arg) {
  arena_t *a = arg;
  thread_gone = 1;
  if (a == &arena_none) return; /* keyed at start, never bound an arena */
  owner_enter(a); /* not while another thread takes its pages back */
  /* first: a taker that swapped the free key away restores it under the lock,
   * and must not put this arena's key back after the line below */
  arena_forget_owner(a);
  if (arena_tls == a) {
    arena_tls = &arena_none;
    arena_sync_free_key();
  }
  arena_abandon(a);
  owner_leave();
}

void thread_process_init(void) {
  int st = 0;
  if (likely(atomic_load_explicit(&init_state, memory_order_acquire) == 2)) return;
  if (!atomic_compare_exchange_strong(&init_state, &st, 1)) {
    while (atomic_load_explicit(&init_state, memory_order_acquire) != 2) os_yield();
    return;
  }
  if (os_page_size() != OS_PAGE) ebb_fatal("malloc", "unsupported page size", (void *)os_page_size());
  options_init();
  sizeclass_init();
  page_key = os_random_seed() | 1;
  page_empty.cls = PAGE_UNUSED;
  /* glibc's pthread_key_create claims a slot with a CAS: no lock, no allocation. */
  os_exit_key_create(thread_exit);
  atomic_store_explicit(&init_state, 2, memory_order_release);
}

/* What a taker of an idle owner's pages reads (under this lock), only when
 * thread_exit will take it away again before the thread is gone, or the
 * memory outlives the thread (thread_keyed_at_start). */
static void thread_show_owner(arena_t *a) {
  spin_lock(&a->lock);
  a->owner = &owner_tls;
  spin_unlock(&a->lock);
}

arena_t *thread_arena(void) {
  if (arena_tls != &arena_none) return arena_tls;
  thread_process_init();
  arena_t *a = arena_claim(ARENA_ABANDONED, ARENA_OWNED);
  if (!a) a = arena_claim(ARENA_FREE, ARENA_OWNED);
  if (!a) a = arena_new(ARENA_OWNED);
  if (!a || thread_gone) return a; /* lent: thread_arena_done abandons it again */
  arena_tls = a;
  arena_sync_free_key();
  atomic_fetch_add_explicit(&threads_seen, 1, memory_order_relaxed);
  /* may call malloc (a second-level key block): the arena is already set */
  if (thread_keying) return a; /* thread_trampoline keys and shows it */
  if (os_exit_key_set(a) && (thread_keyed_at_start || os_is_main_thread())) thread_show_owner(a);
  return a;
}

void thread_arena_done(arena_t *a) {
  if (a != arena_tls) arena_abandon(a);
}

uint64_t thread_count_seen(void) { return atomic_load_explicit(&threads_seen, memory_order_relaxed); }

/* ------------------------------------------------------------ fork */

/* ebb's handlers are registered from the constructor, before the program's
 * (prepare handlers run in reverse order of registration, so ebb's prepare
 * runs last and its parent/child handlers first); any earlier handler that
 * allocates is covered by spin_fork_holder. */
static void fork_prepare(void) {
  arena_lock_all();
  /* a batch of extents another thread unmaps with the cache's lock let go
   * would stay mapped in the child, owned by nobody; holding the lock, no new
   * one starts, and those under way need no lock to finish */
  huge_wait_unmaps(1000);
  spin_fork_holder = 1;
}
static void fork_parent(void) {
  spin_fork_holder = 0;
  arena_unlock_all();
}
/* Only this thread survives in the child: the background thread is gone. With
 * EBB_BACKGROUND=1 it starts again right here (glibc has reset its own locks
 * before it runs the child handlers); with auto, at the child's first
 * pthread_create, like in any single-threaded process. */
static void fork_child(void) {
  spin_fork_holder = 0;
  arena_fork_child();
  os_main_alive_mark(); /* this thread is the child's first, whichever it was in the parent */
  atomic_store(&bg_state, 0);
  if (opt.background == 1) thread_background_start();
}

/* ------------------------------------------------------------ _Fork */

/* A program's _Fork (not fork: no atfork handler runs) copies the process as
 * it is: a lock the background thread held then is held in the child for good
 * (found by a probe: 13 of 600 children hung in their malloc). ebb's _Fork
 * wrapper (os.c) calls these around libc's: the background thread holds no
 * lock between its passes, and skips them while a _Fork is under way. The
 * wait is bounded (RAW_FORK_WAIT_MS), and a caller that holds a lock of ebb's
 * waits for nothing. Other threads of the
 * program's own may hold locks too: as with glibc's malloc, POSIX allows such
 * a child only async-signal-safe calls. */
#define RAW_FORK_WAIT_MS 1000 /* a pass takes far less; the bound is for a thread that cannot go on */
static atomic_int bg_busy;   /* the background thread is in a pass */
static atomic_int raw_forks; /* _Fork calls under way */

static bool background_busy(void) { return atomic_load(&bg_busy) != 0; }

static void raw_fork_before(void) {
  atomic_fetch_add(&raw_forks, 1);
  /* A caller holding one of ebb's locks (a signal handler that interrupted
   * it) waits for nothing: the background thread may be waiting on that very
   * lock, and the interrupted thread never ran again while each handler waited
   * out the bound and the next signal came (found by a probe); its child
   * inherits the lock, as it would under glibc's malloc. */
  if (spin_held > 0) return;
  if (os_wait_while(background_busy, RAW_FORK_WAIT_MS)) huge_wait_unmaps(RAW_FORK_WAIT_MS);
}

static void raw_fork_after(bool child) {
  if (!child) {
    atomic_fetch_sub(&raw_forks, 1);
    return;
  }
  /* the child's only thread is this one: no background thread (the program's
   * next pthread_create starts one under auto; none is started from here,
   * which may be a signal handler) */
  atomic_store(&raw_forks, 0);
  atomic_store(&bg_busy, 0);
  atomic_store(&bg_state, 0);
  os_main_alive_mark(); /* _Fork gave this thread an empty robust list: a fresh mutex */
}

/* ------------------------------------------------------------ background thread */

/* Ends once it is the last thread (asked of /proc each pass once the first
 * thread is gone, every MAIN_ASK_MS where that is not known): a program whose
 * main() called pthread_exit ends when its last thread does (glibc's exit(0) in that
 * thread), and this thread must not be that one forever (found by a probe: the
 * process never exited, and Python's test_threading hung). Returning runs
 * that exit(0) here. */
static void *background_main(void *arg) {
  (void)arg;
  uint64_t asked = os_now_ms(); /* when /proc was last asked */
  for (;;) {
    uint64_t period = (uint64_t)opt.decay_ms / 4;
    if (period < 10) period = 10;
    if (period > 100) period = 100;
    os_sleep_ms(period);
    uint64_t now = os_now_ms();
    int alive = os_main_alive(); /* 1, 0, or -1: not known (the robust mutex was never taken) */
    if (alive == 0 || (alive < 0 && now - asked >= MAIN_ASK_MS)) {
      asked = now;
      if (os_only_thread_left()) break;
    }
    /* Dekker's handshake with raw_fork_before (both sequentially consistent):
     * either that thread sees this one busy and waits, or this one sees the
     * _Fork coming and skips its pass. */
    atomic_store(&bg_busy, 1);
    if (!atomic_load(&raw_forks)) arena_purge_background(os_now_ms());
    atomic_store(&bg_busy, 0);
  }
  atomic_store(&bg_state, 0);
  return NULL;
}

bool thread_background_start(void) {
  int off = 0;
  if (atomic_load_explicit(&bg_state, memory_order_relaxed) || !atomic_compare_exchange_strong(&bg_state, &off, 1))
    return true;
  if (os_thread_start(background_main)) return true;
  atomic_store(&bg_state, 0);
  return false;
}

/* The program's start routine and argument, boxed for thread_trampoline. */
typedef struct {
  void *(*fn)(void *);
  void *arg;
} start_box_t;

/* A thread ebb's pthread_create started: its exit key gets a value (arena_none:
 * no arena yet) before the program's code runs (thread_keyed_at_start). The box
 * was the creating thread's block. */
static void *thread_trampoline(void *p) {
  start_box_t box = *(start_box_t *)p;
  thread_keying = 1;
  bool keyed = os_exit_key_set(&arena_none);
  thread_keying = 0;
  thread_keyed_at_start = keyed;
  /* the key's block was this thread's first allocation: its arena, bound
   * inside the call, gets the key's value now (the block exists: no
   * allocation) and is shown to takers, as thread_arena would have */
  if (keyed && arena_tls != &arena_none && os_exit_key_set(arena_tls)) thread_show_owner(arena_tls);
  ebb_free(p);
  return box.fn(box.arg);
}

/* Called by os.c's pthread_create wrapper in the creating thread: a process
 * about to get a second thread starts the purge thread (EBB_BACKGROUND=auto),
 * and the new thread starts in thread_trampoline (without a block for its
 * box, as before: keyed at its first allocation). */
static void thread_before_create(void *(**fn)(void *), void **arg) {
  if (opt.background != 0) thread_background_start();
  start_box_t *box = ebb_malloc(sizeof *box);
  if (!box) return;
  box->fn = *fn;
  box->arg = *arg;
  *fn = thread_trampoline;
  *arg = box;
}

static void thread_create_failed(void *box) { ebb_free(box); }

/* Runs before the program's own constructors (priority 101) in a static link,
 * and before the executable's with LD_PRELOAD or -lebb. */
__attribute__((constructor(101))) static void thread_constructor(void) {
  thread_process_init();
  os_thread_init();
  if (os_is_main_thread()) os_main_alive_mark();
  os_on_thread_create(thread_before_create, thread_create_failed);
  os_atfork(fork_prepare, fork_parent, fork_child);
  os_on_raw_fork(raw_fork_before, raw_fork_after);
  /* EBB_BACKGROUND=auto: a thread that came before this constructor did not
   * pass through the hook (ld.so runs the constructors of the program's own
   * libraries before a preloaded libebb.so's, and a static program's of
   * priority 101 may run first): the process has its second thread already
   * (found by a probe: a library's constructor started a worker that freed
   * 200 MB, and the memory stayed for good) */
  if (opt.background == 1 || (opt.background != 0 && process_threads_started())) thread_background_start();
}

