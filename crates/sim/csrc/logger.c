/* NCCL hands every profiler plugin a printf-style, variadic logger. Rust cannot
 * define a C-variadic function on stable, so this one formats the message and
 * passes the finished text to the simulator (evring_sim_log_sink). */
#include <stdarg.h>
#include <stdio.h>

typedef void (*evring_sim_sink_t)(int level, unsigned long flags, const char *file,
                                  int line, const char *msg);

static evring_sim_sink_t sink;

void evring_sim_set_log_sink(evring_sim_sink_t s) { sink = s; }

void evring_sim_nccl_logger(int level, unsigned long flags, const char *file, int line,
                            const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  if (fmt == NULL) {
    fmt = "(NULL format)";
  }
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (sink != NULL) {
    sink(level, flags, file, line, msg);
  }
}
