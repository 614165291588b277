/* render.c — render churn: what a template engine or an API server does per request.
 * Per cycle: build a JSON-like tree (records of keyed fields, string values grown a
 * few characters at a time, child arrays grown by realloc), serialise it into a buffer
 * that grows by realloc, free everything. Many small allocations and many reallocs
 * of growing buffers, which stresses in-place growth and size-class transitions.
 *
 * Reports: us_per_cycle (median), faults_per_cycle, allocs_per_cycle (malloc +
 * realloc calls the program made, to size the work), out_bytes, rss_kb, peak_rss_kb. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CYCLES 100000

enum kind { K_OBJECT, K_ARRAY, K_STRING, K_NUMBER };

struct node {
  enum kind kind;
  char *key;           /* field name in the parent object, or NULL */
  char *text;          /* string or number text */
  struct node **kids;  /* children of an object or array */
  size_t nkids, cap;   /* kids used / allocated */
};

static long alloc_calls; /* malloc + realloc calls this cycle */
static double cycle_us[MAX_CYCLES];

static void *xrealloc(void *p, size_t n) {
  alloc_calls++;
  p = realloc(p, n);
  if (!p) {
    perror("render: realloc");
    exit(1);
  }
  return p;
}

/* A growable string, the way naive code builds one: grow by a quarter when full. */
struct buf {
  char *p;
  size_t len, cap;
};

static void buf_put(struct buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    b->cap = b->cap + b->cap / 4 + n + 8;
    b->p = xrealloc(b->p, b->cap);
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void buf_puts(struct buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static struct node *node_new(enum kind kind, const char *key) {
  struct node *n = xrealloc(NULL, sizeof *n);
  memset(n, 0, sizeof *n);
  n->kind = kind;
  if (key) {
    n->key = xrealloc(NULL, strlen(key) + 1);
    strcpy(n->key, key);
  }
  return n;
}

static void node_add(struct node *parent, struct node *kid) {
  if (parent->nkids == parent->cap) {
    parent->cap = parent->cap ? parent->cap * 2 : 1; /* starting at one: many small reallocs */
    parent->kids = xrealloc(parent->kids, parent->cap * sizeof *parent->kids);
  }
  parent->kids[parent->nkids++] = kid;
}

/* A string value appended a few characters at a time, as a tokenizer would. */
static struct node *make_string(const char *key, uint64_t *rng) {
  struct node *n = node_new(K_STRING, key);
  struct buf b = {0};
  size_t len = bench_rand_range(rng, 4, 96);
  while (b.len < len) {
    char piece[8];
    size_t k = bench_rand_range(rng, 1, 7);
    for (size_t i = 0; i < k; i++) piece[i] = (char)('a' + bench_rand(rng) % 26);
    buf_put(&b, piece, k);
  }
  n->text = b.p;
  return n;
}

static struct node *make_number(const char *key, uint64_t *rng) {
  struct node *n = node_new(K_NUMBER, key);
  char tmp[32];
  int len = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)(bench_rand(rng) % 1000000007));
  n->text = xrealloc(NULL, (size_t)len + 1);
  memcpy(n->text, tmp, (size_t)len + 1);
  return n;
}

static struct node *make_record(uint64_t *rng, long fields) {
  struct node *rec = node_new(K_OBJECT, NULL);
  for (long f = 0; f < fields; f++) {
    char key[32];
    snprintf(key, sizeof key, "field_%ld", f);
    node_add(rec, f % 3 == 2 ? make_number(key, rng) : make_string(key, rng));
  }
  struct node *tags = node_new(K_ARRAY, "tags");
  for (size_t t = bench_rand_range(rng, 0, 12); t > 0; t--) node_add(tags, make_string(NULL, rng));
  node_add(rec, tags);
  return rec;
}

static void put_quoted(struct buf *b, const char *s) {
  buf_put(b, "\"", 1);
  buf_puts(b, s);
  buf_put(b, "\"", 1);
}

static void serialise(struct buf *b, const struct node *n) {
  if (n->key) {
    put_quoted(b, n->key);
    buf_put(b, ":", 1);
  }
  if (n->kind == K_STRING) put_quoted(b, n->text);
  if (n->kind == K_NUMBER) buf_puts(b, n->text);
  if (n->kind != K_OBJECT && n->kind != K_ARRAY) return;
  buf_put(b, n->kind == K_OBJECT ? "{" : "[", 1);
  for (size_t i = 0; i < n->nkids; i++) {
    if (i) buf_put(b, ",", 1);
    serialise(b, n->kids[i]);
  }
  buf_put(b, n->kind == K_OBJECT ? "}" : "]", 1);
}

static void node_free(struct node *n) {
  for (size_t i = 0; i < n->nkids; i++) node_free(n->kids[i]);
  free(n->kids);
  free(n->key);
  free(n->text);
  free(n);
}

/* One request; returns the output size. */
static size_t run_cycle(uint64_t *rng, long records, long fields) {
  struct node *root = node_new(K_ARRAY, NULL);
  for (long r = 0; r < records; r++) node_add(root, make_record(rng, fields));
  struct buf out = {0};
  serialise(&out, root);
  size_t len = out.len;
  node_free(root);
  free(out.p);
  return len;
}

int main(int argc, char **argv) {
  long cycles = bench_opt(argc, argv, "cycles", 200);
  long warmup = bench_opt(argc, argv, "warmup", 2);
  long records = bench_opt(argc, argv, "records", 200);
  long fields = bench_opt(argc, argv, "fields", 8);
  uint64_t rng = (uint64_t)bench_opt(argc, argv, "seed", 1) * 0x9E3779B97F4A7C15ULL + 1;
  if (cycles < 1 || cycles > MAX_CYCLES || records < 1 || fields < 1) {
    fprintf(stderr, "render: need 1 <= cycles <= %d, records >= 1, fields >= 1\n", MAX_CYCLES);
    return 2;
  }
  bench_begin("render", "tree", argc, argv);
  for (long c = 0; c < warmup; c++) run_cycle(&rng, records, fields);
  long flt0 = bench_minflt();
  size_t out_bytes = 0;
  alloc_calls = 0;
  for (long c = 0; c < cycles; c++) {
    uint64_t t = bench_now_ns();
    out_bytes = run_cycle(&rng, records, fields);
    cycle_us[c] = (double)(bench_now_ns() - t) / 1e3;
  }
  long faults = bench_minflt() - flt0;
  printf("result us_per_cycle=%.2f faults_per_cycle=%.2f allocs_per_cycle=%.0f out_bytes=%zu rss_kb=%ld "
         "peak_rss_kb=%ld\n",
         bench_median(cycle_us, (size_t)cycles), (double)faults / (double)cycles,
         (double)alloc_calls / (double)cycles, out_bytes, bench_rss_kb(), bench_peak_rss_kb());
  return 0;
}
