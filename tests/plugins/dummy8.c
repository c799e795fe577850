/* Keeps the first 8 collectives of each communicator and nothing else, but hands out a
 * non-NULL dummy handle for every start, so NCCL sees nothing wrong; at finalize it
 * writes what it kept in the example plugin's format, to the NCCL_PROFILE_DUMP_FILE of
 * that moment (as NVIDIA's example plugin does). Expected verdict: FAIL (the trace
 * misses almost every Coll/P2p). */
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include "profiler.h"

#define KEEP 8

struct ctx {
  uint64_t comm_id;
  int rank;
  int kept;
  const char *names[KEEP];
  const char *cats[KEEP];
  pthread_mutex_t lock;
};

static int init(void **c, uint64_t id, int *mask, const char *name, int nn, int nr, int r,
                nccl_logger_t log) {
  (void)name, (void)nn, (void)nr, (void)log;
  struct ctx *x = calloc(1, sizeof *x);
  if (x != NULL) {
    x->comm_id = id;
    x->rank = r;
    pthread_mutex_init(&x->lock, NULL);
  }
  *c = x;
  *mask = mask_from_env();
  return 0;
}

static int start(void *c, void **h, struct descr *d) {
  struct ctx *x = c;
  /* The simulator's contexts are ours except under PXN, which only sends proxy events. */
  if (x != NULL && (d->type == EV_COLL || d->type == EV_P2P)) {
    pthread_mutex_lock(&x->lock);
    if (x->kept < KEEP) {
      x->names[x->kept] = task_name(d);
      x->cats[x->kept] = d->type == EV_COLL ? "COLL" : "P2P";
      x->kept++;
    }
    pthread_mutex_unlock(&x->lock);
  }
  *h = (void *)0x8;
  return 0;
}

static int stop(void *h) { return (void)h, 0; }
static int record(void *h, int s, void *a) { return (void)h, (void)s, (void)a, 0; }

static int finalize(void *c) {
  struct ctx *x = c;
  const char *prefix = getenv("NCCL_PROFILE_DUMP_FILE");
  if (x == NULL || prefix == NULL || prefix[0] == '\0') {
    free(x);
    return 0;
  }
  char path[640], line[512];
  snprintf(path, sizeof path, "%s_%lu_%d.json", prefix, (unsigned long)x->comm_id, x->rank);
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fputs("[\n", f);
    for (int i = 0; i < x->kept; i++) {
      example_event(line, sizeof line, x->names[i], x->cats[i], 'b', i);
      fputs(line, f);
      example_event(line, sizeof line, x->names[i], x->cats[i], 'e', i);
      fputs(line, f);
    }
    fputs("{}]\n", f);
    fclose(f);
  }
  free(x);
  return 0;
}

const struct profiler_v5 ncclProfiler_v5 = {"dummy8", init, start, stop, record, finalize};
