/* A profiler plugin that does nothing: the overhead benchmark's control.
 *
 * With it loaded NCCL pays for its own instrumentation at a given mask
 * (descriptors, profiler proxy ops, GPU timestamps for KernelCh) and for the
 * calls, but no plugin work. evring's cost is then evring minus this, and
 * this minus "no plugin" is NCCL's.
 *
 *   cc -O2 -shared -fPIC -o libnullprof.so nullprof.c
 *
 * Handles and contexts are the constant 1: NCCL never dereferences them.
 * nullprof_set_mask() changes the mask at run time, like evring_set_mask().
 */
#include <stdint.h>
#include <stdlib.h>

static int *mask_ptr;

static int init(void **ctx, uint64_t comm_id, int *mask, const char *name, int nnodes,
                int nranks, int rank, void *logfn) {
  (void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)logfn;
  const char *m = getenv("NCCL_PROFILE_EVENT_MASK");
  if (m) __atomic_store_n(mask, (int)strtol(m, 0, 0), __ATOMIC_RELAXED);
  __atomic_store_n(&mask_ptr, mask, __ATOMIC_RELEASE);
  *ctx = (void *)1;
  return 0;
}
static int start(void *ctx, void **handle, void *descr) {
  (void)ctx, (void)descr;
  *handle = (void *)1;
  return 0;
}
static int stop(void *handle) { return (void)handle, 0; }
static int record(void *handle, int state, void *args) { return (void)handle, (void)state, (void)args, 0; }
static int finalize(void *ctx) { return (void)ctx, 0; }

void nullprof_set_mask(int mask) {
  int *p = __atomic_load_n(&mask_ptr, __ATOMIC_ACQUIRE);
  if (p) __atomic_store_n(p, mask, __ATOMIC_RELAXED);
}

struct table {
  const char *name;
  void *init, *start, *stop, *record, *finalize;
};
const struct table ncclProfiler_v5 = {"nullprof", init, start, stop, record, finalize};
const struct table ncclProfiler_v6 = {"nullprof", init, start, stop, record, finalize};
