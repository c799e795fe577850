/* The floor of a per-thread event log: what any profiler that times events on NCCL's
 * threads pays per call, with nothing else. A yardstick for the meter (docs/meter.md),
 * never a profiler: it writes no trace and nobody reads its log.
 *
 * Each call reads the clock once (rdtsc on x86-64) and appends one 32-byte entry (ID,
 * time, type or state, parent or argument) to the calling thread's own buffer, reached
 * through initial-exec thread-local storage (the thread pointer plus a constant: no
 * __tls_get_addr). No handle is checked, no string read, no slot minted (a handle is a
 * per-thread counter), no entry published to another thread, no memory ever shared: so
 * none of the cache lines it writes is ever read by another core. A design that must
 * also validate handles, copy descriptors and hand its entries to a writer thread
 * (issue 24's hot path) costs at least this; the meter's ratio of a plugin to this
 * floor says how far it is from it.
 *
 *   cc -O2 -shared -fPIC -o libfloorprof.so floorprof.c
 *
 * Exports the v5, v6 and v7 tables (one shape; the meter takes the inner's table of
 * the version NCCL calls it through). The first init allocates and writes through the
 * buffers of up to 64 threads (64 KiB each), as evring maps its tables at init; a
 * thread takes one at its first call (one atomic add), so no call pays for memory
 * setup or a page fault. Threads past the 64th share one spare buffer (racy writes nobody reads).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t now(void) { return __rdtsc(); }
#else
#include <time.h>
static inline uint64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
#endif

struct entry {
  uint64_t id, t, a, b;
};
#define ENTRIES (1u << 11)
#define THREADS 64
#define TLS __thread __attribute__((tls_model("initial-exec")))
static TLS struct entry *buf;
static TLS uint64_t pos;
/* The calling thread's handle prefix: its buffer's number. */
static TLS uint64_t tag;
static struct entry *pool; /* THREADS buffers of ENTRIES, resident from the first init */
static struct entry spare[ENTRIES]; /* no pool, or more threads than buffers */
static unsigned next_buffer;

/* The thread's first call: a buffer of the pool. */
static __attribute__((noinline)) void claim(void) {
  struct entry *p = __atomic_load_n(&pool, __ATOMIC_ACQUIRE);
  unsigned i = __atomic_fetch_add(&next_buffer, 1, __ATOMIC_RELAXED);
  buf = p != NULL && i < THREADS ? p + (size_t)i * ENTRIES : spare;
  tag = (uint64_t)(i + 1) << 40;
}

static inline struct entry *next(void) {
  if (__builtin_expect(buf == NULL, 0)) claim();
  return &buf[pos++ & (ENTRIES - 1)];
}

static int init(void **ctx, uint64_t comm_id, int *mask, const char *name, int nnodes,
                int nranks, int rank, void *logfn) {
  (void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)logfn;
  if (__atomic_load_n(&pool, __ATOMIC_ACQUIRE) == NULL) {
    size_t bytes = (size_t)THREADS * ENTRIES * sizeof(struct entry);
    struct entry *p = malloc(bytes);
    if (p != NULL) {
      memset(p, 0, bytes); /* resident now, not at a call */
      struct entry *none = NULL;
      if (!__atomic_compare_exchange_n(&pool, &none, p, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        free(p);
    }
  }
  const char *m = getenv("NCCL_PROFILE_EVENT_MASK");
  if (m) __atomic_store_n(mask, (int)strtol(m, 0, 0), __ATOMIC_RELAXED);
  *ctx = (void *)1;
  return 0;
}

/* NCCL's descriptors of every version start with the type and the parent. */
struct head {
  uint64_t type;
  void *parent;
};

static int start(void *ctx, void **handle, void *descr) {
  (void)ctx;
  const struct head *d = descr;
  struct entry *e = next();
  uint64_t id = tag | (pos & 0xffffffffff) | 1;
  e->id = id;
  e->a = d->type;
  e->b = (uint64_t)(uintptr_t)d->parent;
  e->t = now();
  *handle = (void *)(uintptr_t)id;
  return 0;
}
static int stop(void *handle) {
  struct entry *e = next();
  e->id = (uint64_t)(uintptr_t)handle;
  e->a = 0;
  e->t = now();
  return 0;
}
static int record(void *handle, int state, void *args) {
  struct entry *e = next();
  e->id = (uint64_t)(uintptr_t)handle;
  e->a = (uint64_t)state;
  e->b = (uint64_t)(uintptr_t)args;
  e->t = now();
  return 0;
}
static int finalize(void *ctx) { return (void)ctx, 0; }

struct table {
  const char *name;
  void *init, *start, *stop, *record, *finalize;
};
const struct table ncclProfiler_v5 = {"floorprof", init, start, stop, record, finalize};
const struct table ncclProfiler_v6 = {"floorprof", init, start, stop, record, finalize};
const struct table ncclProfiler_v7 = {"floorprof", init, start, stop, record, finalize};
