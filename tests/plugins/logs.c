/* Calls NCCL's logger at every init without a NULL check, as NVIDIA's example plugin
 * does; otherwise does nothing. Expected: no crash (the simulator passes a real,
 * printf-style logger), the formatted message in the run's notes, verdict unverified. */
#include "profiler.h"

static int init(void **ctx, uint64_t id, int *mask, const char *name, int nn, int nr, int r,
                nccl_logger_t log) {
  (void)id, (void)name, (void)nn, (void)nr;
  *mask = mask_from_env();
  *ctx = (void *)1;
  log(2 /* WARN */, 0x4000 /* PROFILE */, __FILE__, __LINE__, "logs.c: init of rank %d (%s)",
      r, "formatted by the logger");
  return 0;
}
static int start(void *ctx, void **h, struct descr *d) {
  (void)ctx, (void)d;
  *h = (void *)1;
  return 0;
}
static int stop(void *h) { return (void)h, 0; }
static int record(void *h, int s, void *a) { return (void)h, (void)s, (void)a, 0; }
static int finalize(void *ctx) { return (void)ctx, 0; }

const struct profiler_v5 ncclProfiler_v5 = {"logs", init, start, stop, record, finalize};
