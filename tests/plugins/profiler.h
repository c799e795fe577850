/* The part of NCCL's profiler ABI (v5 table) the test plugins need, from the layouts in
 * docs/nccl-profiler-abi.md §2.4-2.6. Each plugin is a deliberately small C library that
 * evring-sim must judge correctly (crates/sim/tests/judge_plugins.rs). */
#ifndef EVRING_TEST_PROFILER_H
#define EVRING_TEST_PROFILER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EV_COLL 0x2
#define EV_P2P 0x4

typedef void (*nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
                              const char *fmt, ...);

/* v5/v6 event descriptor: 112 bytes, the union at offset 24. */
struct descr {
  uint64_t type;
  void *parent;
  int rank;
  union {
    struct {
      uint64_t seq;
      const char *func;
    } coll;
    struct {
      const char *func;
    } p2p;
    char bytes[88];
  } u;
};

struct profiler_v5 {
  const char *name;
  int (*init)(void **ctx, uint64_t comm_id, int *mask, const char *comm_name, int n_nodes,
              int n_ranks, int rank, nccl_logger_t log);
  int (*start)(void *ctx, void **handle, struct descr *d);
  int (*stop)(void *handle);
  int (*record)(void *handle, int state, void *args);
  int (*finalize)(void *ctx);
};

/* The mask from NCCL_PROFILE_EVENT_MASK (default: every v5 event). */
static inline int mask_from_env(void) {
  const char *m = getenv("NCCL_PROFILE_EVENT_MASK");
  return m != NULL ? (int)strtol(m, NULL, 0) : 0xFFF;
}

/* The function name of a Coll or P2p descriptor. */
static inline const char *task_name(const struct descr *d) {
  const char *f = d->type == EV_COLL ? d->u.coll.func : d->u.p2p.func;
  return f != NULL ? f : "?";
}

/* One begin or end event in the JSON format of NCCL's example plugin (one line). */
static inline int example_event(char *buf, size_t n, const char *name, const char *cat,
                                char ph, long id) {
  return snprintf(buf, n,
                  "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"%c\", \"id\": %ld, "
                  "\"pid\": %d, \"tid\": 1, \"ts\": 0.0},\n",
                  name, cat, ph, id, (int)getpid());
}

#endif
