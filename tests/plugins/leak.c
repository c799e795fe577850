/* Keeps 4 KiB per event forever (touched, so it is resident) and writes no trace.
 * Expected verdict: FAIL (memory grows with the event count). */
#include <stdlib.h>
#include <string.h>

#include "profiler.h"

static int init(void **ctx, uint64_t id, int *mask, const char *name, int nn, int nr, int r,
                nccl_logger_t log) {
  (void)id, (void)name, (void)nn, (void)nr, (void)r, (void)log;
  *mask = mask_from_env();
  *ctx = (void *)1;
  return 0;
}
static int start(void *ctx, void **h, struct descr *d) {
  (void)ctx, (void)d;
  void *kept = malloc(4096);
  if (kept != NULL) {
    memset(kept, 0x5a, 4096);
  }
  *h = kept != NULL ? kept : (void *)1;
  return 0;
}
static int stop(void *h) { return (void)h, 0; }
static int record(void *h, int s, void *a) { return (void)h, (void)s, (void)a, 0; }
static int finalize(void *ctx) { return (void)ctx, 0; }

const struct profiler_v5 ncclProfiler_v5 = {"leak", init, start, stop, record, finalize};
