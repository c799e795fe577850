/* A correct plugin that reads NCCL_PROFILE_DUMP_FILE at every init (the environment is
 * the process's, so it may), writes one example-format begin event per Coll/P2p as it
 * starts, and closes its files at finalize or at process exit. Expected verdict: ok. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "profiler.h"

#define MAX_CTX 256

struct ctx {
  int fd;
  int closed;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ctx *own[MAX_CTX];
static int n_own;
static atomic_long next_id = 1;

/* Contexts of other processes (PXN) are never dereferenced. */
static struct ctx *ours(void *c) {
  struct ctx *found = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_own; i++) {
    if (own[i] == c) {
      found = c;
    }
  }
  pthread_mutex_unlock(&lock);
  return found;
}

static void close_ctx(struct ctx *x) {
  if (x->fd >= 0 && !x->closed) {
    x->closed = 1;
    (void)!write(x->fd, "{}]\n", 4);
    close(x->fd);
  }
}

static int init(void **c, uint64_t id, int *mask, const char *name, int nn, int nr, int r,
                nccl_logger_t log) {
  (void)name, (void)nn, (void)nr, (void)log;
  *mask = mask_from_env();
  *c = NULL;
  const char *prefix = getenv("NCCL_PROFILE_DUMP_FILE");
  struct ctx *x = calloc(1, sizeof *x);
  if (x == NULL) {
    return 0;
  }
  x->fd = -1;
  if (prefix != NULL && prefix[0] != '\0') {
    char path[640];
    snprintf(path, sizeof path, "%s_%lu_%d.json", prefix, (unsigned long)id, r);
    x->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (x->fd >= 0) {
      (void)!write(x->fd, "[\n", 2);
    }
  }
  pthread_mutex_lock(&lock);
  if (n_own < MAX_CTX) {
    own[n_own++] = x;
    *c = x;
  }
  pthread_mutex_unlock(&lock);
  if (*c == NULL) {
    free(x);
  }
  return 0;
}

static int start(void *c, void **h, struct descr *d) {
  long id = atomic_fetch_add(&next_id, 1);
  if (d->type == EV_COLL || d->type == EV_P2P) {
    struct ctx *x = ours(c);
    if (x != NULL && x->fd >= 0 && !x->closed) {
      char line[512];
      int n = example_event(line, sizeof line, task_name(d),
                            d->type == EV_COLL ? "COLL" : "P2P", 'b', id);
      /* One write per line, O_APPEND: lines from several threads never interleave. */
      (void)!write(x->fd, line, (size_t)n);
    }
  }
  *h = (void *)(uintptr_t)id;
  return 0;
}

static int stop(void *h) { return (void)h, 0; }
static int record(void *h, int s, void *a) { return (void)h, (void)s, (void)a, 0; }

static int finalize(void *c) {
  struct ctx *x = ours(c);
  if (x != NULL) {
    close_ctx(x);
  }
  return 0;
}

/* A process that exits without finalize still gets closed files. */
__attribute__((destructor)) static void at_exit(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_own; i++) {
    close_ctx(own[i]);
  }
  pthread_mutex_unlock(&lock);
}

const struct profiler_v5 ncclProfiler_v5 = {"every-init", init, start, stop, record,
                                            finalize};
