/* Never returns from finalize (as a plugin blocked on a stuck output would). Expected
 * verdict: FAIL once the run's time limit (--timeout) kills its process. */
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
  *h = (void *)1;
  return 0;
}
static int stop(void *h) { return (void)h, 0; }
static int record(void *h, int s, void *a) { return (void)h, (void)s, (void)a, 0; }
static int finalize(void *ctx) {
  (void)ctx;
  for (;;) {
    pause();
  }
  return 0;
}

const struct profiler_v5 ncclProfiler_v5 = {"hang", init, start, stop, record, finalize};
