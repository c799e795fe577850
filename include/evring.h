/*
 * evring.h: the control functions and counters of the evring NCCL profiler
 * plugin (libevring_shim.so / libnccl-profiler-evring.so).
 *
 * Resolve the functions with dlsym() on the plugin NCCL loaded, or link the
 * library directly. Every function is safe to call from any thread, at any
 * time, including before NCCL's first init (settings given then are applied
 * by that init; see docs/shim.md).
 */
#ifndef EVRING_H
#define EVRING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Counters, version 1. Append-only: later versions add fields at the end;
 * pass sizeof(struct evring_stats_v1) and read `size` for what was filled.
 */
struct evring_stats_v1 {
  uint32_t version; /* layout version (1) */
  uint32_t size;    /* bytes of this struct the plugin knows */
  uint64_t live;      /* events started and not yet completed */
  uint64_t started;   /* events given an ID (start_calls minus start drops) */
  uint64_t completed; /* events completed normally or forced (one record each) */
  uint64_t start_calls; /* startEvent calls. */
  uint64_t drop_slab_full; /* Starts dropped because the slab was full. */
  uint64_t drop_unknown_type; /* Starts dropped because the type was not a known event bit. */
  uint64_t drop_null_context; /* Starts dropped for a NULL context (plugin disabled for that comm). */
  uint64_t drop_after_finalize; /* Starts dropped because the context had been finalized. */
  uint64_t drop_null_descr; /* Starts dropped because the descriptor pointer was NULL. */
  uint64_t drop_ring_full; /* Records dropped because the completed-record ring was full. */
  uint64_t records_consumed; /* Records taken off the ring by the writer. */
  uint64_t records_written; /* Records written to a trace file. */
  uint64_t records_unwritten; /* Records not written because output is off or failed. */
  uint64_t write_errors; /* Trace write errors (each also logged once per file). */
  uint64_t late_children; /* Children whose parent had already completed (recorded with the parent's ID). */
  uint64_t foreign_parents; /* Children with a parent this process did not mint (PXN), recorded detached. */
  uint64_t foreign_contexts; /* Events whose context was not one of ours (PXN), recorded detached. */
  uint64_t stale_handles; /* stop/record on an ID of ours that is no longer live. */
  uint64_t unknown_handles; /* stop/record on a value that is not one of our IDs. */
  uint64_t null_handles; /* stop/record with a NULL handle. */
  uint64_t double_stops; /* Second stop of a live event. */
  uint64_t record_after_stop; /* recordEventState on an event already stopped. */
  uint64_t unknown_states; /* recordEventState with a state that does not belong to the event's kind. */
  uint64_t bad_strings; /* Descriptor strings that pointed at unreadable memory. */
  uint64_t forced_pressure; /* Events completed by the pressure sweep (slab above its high-water mark). */
  uint64_t forced_age; /* Events completed because they waited longer than the age limit. */
  uint64_t forced_finalize; /* Events completed by finalize or process exit while still open. */
  uint64_t children_incomplete; /* Events completed while children they expected had not all ended. */
  uint64_t inits; /* init calls. */
  uint64_t finalizes; /* finalize calls that matched a live context. */
  uint64_t bad_contexts; /* finalize (or other) calls with a context that is not ours or already finalized. */
  uint64_t context_full; /* init calls that could not get a context slot (routed to the shared stream). */
  uint64_t panics; /* Panics caught at the C boundary. */
  uint64_t record_lines; /* Recording mode (`EVRING_RECORD`): calls written to the call log. */
  uint64_t record_dropped; /* Recording mode: calls not logged because the queue was full or a write failed. */
  uint64_t record_over_limit; /* Recording mode: calls not logged because `EVRING_RECORD_LIMIT` was reached. */
  uint64_t late_context_events; /* ProxyCtrl events on a finalized context (a proxy shared by split communicators outliving its creator), recorded on the detached stream. */
  uint64_t trace_rotations; /* Trace files closed at `EVRING_TRACE_LIMIT` and continued in a new part. */
  uint64_t records_rotated_away; /* Records in old parts removed to keep `EVRING_TRACE_PARTS` (written, then deleted). */
  uint64_t symbols_full; /* Events with a descriptor string written as "?" because the string table was full. */
  uint64_t masked_starts; /* Starts answered NULL because their type is outside the mask (`EVRING_MASK_STRICT`). */
  uint64_t log_lost; /* Stop or state entries lost to a full log lane (the event is completed by the age limit). */
};

/* Copies at most `size` bytes of the counters into `out`; returns the bytes
 * written (0 if `out` is NULL). All zero before the first init. */
size_t evring_stats(struct evring_stats_v1 *out, size_t size);

/* Sets the activation mask (NCCL applies it to operations enqueued
 * afterwards). Before the first init it is kept and applied by that init. */
void evring_set_mask(int mask);

/* The activation mask in force (before the first init: the one it will use). */
int evring_get_mask(void);

/* 0 stops writing trace files, non-zero resumes; events are still counted. */
void evring_set_output(int enabled);

/* Has the writer thread write every completed record and flush every file;
 * waits while the writer makes progress (gives up after 1 s without any,
 * e.g. a stalled file system). */
void evring_flush(void);

/* As evring_flush, waiting at most `timeout_ms`. Returns 1 when everything
 * completed before the call is written and flushed, 0 on timeout. */
int evring_flush_wait(int timeout_ms);

/* "evring <version>". */
const char *evring_version(void);

#ifdef __cplusplus
}
#endif

#endif /* EVRING_H */
