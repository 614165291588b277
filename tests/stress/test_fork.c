/* test_fork.c — fork from a multi-threaded program while other threads are in
 * the middle of malloc and free. The child has only the forking thread; any
 * allocator lock another thread held at the fork must not leave the child
 * deadlocked or its heap inconsistent. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "stress_util.h"

#define FK_BUSY 3        /* threads allocating while main forks */
#define FK_HELD 256      /* blocks each busy thread holds */
#define FK_CHILD_WAIT 10 /* seconds before a silent child counts as deadlocked */

static atomic_int fk_stop;
/* Blocks the busy threads allocated; the child frees some of them. They are only
 * read in the child, whose copy no other thread touches. */
static blk_t fk_held[FK_BUSY][FK_HELD];

static void *fk_busy(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  rng_t r = rng_seed(7000 + id);
  for (uint64_t i = 1; !atomic_load_explicit(&fk_stop, memory_order_relaxed); i++) {
    blk_t *b = &fk_held[id][rng_below(&r, FK_HELD)];
    /* publish NULL first and the new block last, so a child forked at any point
     * sees either nothing or a complete, filled block */
    blk_t old = *b;
    b->p = NULL;
    atomic_thread_fence(memory_order_seq_cst);
    if (old.p) blk_free(&old, "fork busy");
    blk_t fresh = blk_new(stress_size(&r), (id << 40) | i, "fork busy");
    b->size = fresh.size;
    b->tag = fresh.tag;
    atomic_thread_fence(memory_order_seq_cst);
    b->p = fresh.p;
  }
  return NULL;
}

static void *fk_child_thread(void *arg) {
  rng_t r = rng_seed(7900);
  for (int i = 0; i < 1000; i++) {
    blk_t b = blk_new(stress_size(&r), (uint64_t)i + 1, "fork child thread");
    blk_free(&b, "fork child thread");
  }
  return arg;
}

/* In the child: allocate at once (every size range), free blocks the parent's
 * threads allocated, start a thread that allocates too, then leave with _exit so
 * Criterion's own handlers do not run in the child. */
static void fk_child(int iter) {
  rng_t r = rng_seed(7800 + (uint64_t)iter);
  blk_t mine[64];
  for (int i = 0; i < 64; i++) {
    size_t size = i % 8 == 0 ? ((size_t)1 << 20) + (size_t)i : stress_size(&r); /* 1 in 8 huge */
    mine[i] = blk_new(size, (uint64_t)i + 1, "fork child");
  }
  for (int t = 0; t < FK_BUSY; t++)
    for (int i = 0; i < FK_HELD; i += 4)
      if (fk_held[t][i].p) blk_free(&fk_held[t][i], "fork child frees parent's");
  pthread_t th;
  if (pthread_create(&th, NULL, fk_child_thread, NULL) != 0) _exit(3);
  pthread_join(th, NULL);
  for (int i = 0; i < 64; i++) blk_realloc(&mine[i], stress_size(&r), "fork child realloc");
  for (int i = 0; i < 64; i++) blk_free(&mine[i], "fork child");
  _exit(0);
}

static int fk_wait(pid_t pid) { return stress_wait_child(pid, FK_CHILD_WAIT); }

static void fk_run(int forks) {
  pthread_t t[FK_BUSY];
  atomic_store(&fk_stop, 0);
  for (uintptr_t i = 0; i < FK_BUSY; i++) cr_assert_eq(pthread_create(&t[i], NULL, fk_busy, (void *)i), 0);
  struct timespec nap = {0, 2 * 1000 * 1000};
  for (int iter = 0; iter < forks; iter++) {
    nanosleep(&nap, NULL); /* let the busy threads get deep into their loops */
    void *p = ebb_malloc(100); /* the forking thread's own arena is in use too */
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork failed");
    if (pid == 0) fk_child(iter);
    ebb_free(p);
    int status = fk_wait(pid);
    cr_assert_neq(status, -1, "fork %d: child did not exit within %d s (deadlock after fork?)", iter,
                  FK_CHILD_WAIT);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "fork %d: child ended with status 0x%x (signal %d)", iter, status,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  atomic_store(&fk_stop, 1);
  for (int i = 0; i < FK_BUSY; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < FK_BUSY; i++)
    for (int j = 0; j < FK_HELD; j++)
      if (fk_held[i][j].p) blk_free(&fk_held[i][j], "fork end");
}

Test(fork, child_allocates_while_parent_threads_busy, .timeout = 120) { fk_run((int)stress_n(40)); }

/* A child that forks again: the grandchild inherits the child's post-fork state. */
static void *fk_nested_busy(void *arg) {
  rng_t r = rng_seed(7700);
  while (!atomic_load_explicit(&fk_stop, memory_order_relaxed)) {
    void *p = ebb_malloc(stress_size(&r));
    ebb_free(p);
  }
  return arg;
}

Test(fork, nested_fork, .timeout = 120) {
  pthread_t t;
  atomic_store(&fk_stop, 0);
  cr_assert_eq(pthread_create(&t, NULL, fk_nested_busy, NULL), 0);
  for (int iter = 0; iter < 5; iter++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
      pthread_t c;
      if (pthread_create(&c, NULL, fk_nested_busy, NULL) != 0) _exit(3);
      void *p = ebb_malloc(4096);
      pid_t g = fork();
      if (g == 0) {
        ebb_free(p);
        ebb_free(ebb_malloc(1 << 20));
        _exit(0);
      }
      int gs = fk_wait(g);
      atomic_store(&fk_stop, 1);
      pthread_join(c, NULL);
      ebb_free(p);
      _exit(g > 0 && gs >= 0 && WIFEXITED(gs) && WEXITSTATUS(gs) == 0 ? 0 : 4);
    }
    int status = fk_wait(pid);
    cr_assert(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "nested fork %d: child status %d",
              iter, status);
  }
  atomic_store(&fk_stop, 1);
  pthread_join(t, NULL);
}
