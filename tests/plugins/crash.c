/* Dereferences NULL at its 1000th start. Expected verdict: FAIL, naming the signal. */
#include <stdatomic.h>
#include <stdlib.h>

#include "profiler.h"

static atomic_long starts;

static int init(void **ctx, uint64_t id, int *mask, const char *name, int nn, int nr, int r,
                nccl_logger_t log) {
  (void)id, (void)name, (void)nn, (void)nr, (void)r, (void)log;
  *mask = 0xFFF;
  *ctx = (void *)1;
  return 0;
}
static int start(void *ctx, void **h, struct descr *d) {
  (void)ctx, (void)d;
  if (atomic_fetch_add(&starts, 1) == 999) {
    volatile int *nowhere = NULL;
    *nowhere = 1;
  }
  *h = (void *)1;
  return 0;
}
static int stop(void *h) { return (void)h, 0; }
static int record(void *h, int s, void *a) { return (void)h, (void)s, (void)a, 0; }
static int finalize(void *ctx) { return (void)ctx, 0; }

const struct profiler_v5 ncclProfiler_v5 = {"crash", init, start, stop, record, finalize};
