//! Every counter the shim keeps, declared once: the struct, the exported C
//! stats layout, the trace footer and the NCCL log line all derive from it.

use evring::Counter;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Process-wide counters (striped; exact when summed at a quiet point).
        #[derive(Default)]
        pub struct Counters { $($(#[doc = $doc])* pub $name: Counter,)* }

        /// Snapshot exported through `evring_stats` (C layout, append-only).
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct StatsV1 {
            /// Layout version (1).
            pub version: u32,
            /// Size of this struct in bytes, for forward compatibility.
            pub size: u32,
            /// Events started and not yet completed.
            pub live: u64,
            /// Events given an ID (start_calls minus start drops).
            pub started: u64,
            /// Events completed normally or forced (each produced one record).
            pub completed: u64,
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            /// `completed` is passed in: the record ring counts it (pushed + dropped).
            pub fn snapshot(&self, live: u64, completed: u64) -> StatsV1 {
                StatsV1 {
                    version: 1,
                    size: core::mem::size_of::<StatsV1>() as u32,
                    live,
                    started: self.start_calls.get().saturating_sub(self.start_drops()),
                    completed,
                    $($name: self.$name.get(),)*
                }
            }
        }

        impl StatsV1 {
            /// (name, value) of every counter, `live` first.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![("live", self.live), ("started", self.started), ("completed", self.completed), $((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// startEvent calls.
    start_calls,
    /// Starts dropped because the slab was full.
    drop_slab_full,
    /// Starts dropped because the type was not a known event bit.
    drop_unknown_type,
    /// Starts dropped for a NULL context (plugin disabled for that comm).
    drop_null_context,
    /// Starts dropped because the context had been finalized.
    drop_after_finalize,
    /// Starts dropped because the descriptor pointer was NULL.
    drop_null_descr,
    /// Records dropped because the completed-record ring was full.
    drop_ring_full,
    /// Records taken off the ring by the writer.
    records_consumed,
    /// Records written to a trace file.
    records_written,
    /// Records not written because output is off or failed.
    records_unwritten,
    /// Trace write errors (each also logged once per file).
    write_errors,
    /// Children whose parent had already completed (recorded with the parent's ID).
    late_children,
    /// Children with a parent this process did not mint (PXN), recorded detached.
    foreign_parents,
    /// Events whose context was not one of ours (PXN), recorded detached.
    foreign_contexts,
    /// stop/record on an ID of ours that is no longer live.
    stale_handles,
    /// stop/record on a value that is not one of our IDs.
    unknown_handles,
    /// stop/record with a NULL handle.
    null_handles,
    /// Second stop of a live event.
    double_stops,
    /// recordEventState on an event already stopped.
    record_after_stop,
    /// recordEventState with a state that does not belong to the event's kind.
    unknown_states,
    /// Descriptor strings that pointed at unreadable memory.
    bad_strings,
    /// Events completed by the pressure sweep (slab above its high-water mark).
    forced_pressure,
    /// Events completed because they waited longer than the age limit.
    forced_age,
    /// Events completed by finalize or process exit while still open.
    forced_finalize,
    /// Events completed while children they expected had not all ended.
    children_incomplete,
    /// init calls.
    inits,
    /// finalize calls that matched a live context.
    finalizes,
    /// finalize (or other) calls with a context that is not ours or already finalized.
    bad_contexts,
    /// init calls that could not get a context slot (routed to the shared stream).
    context_full,
    /// Panics caught at the C boundary.
    panics,
    /// Recording mode (`EVRING_RECORD`): calls written to the call log.
    record_lines,
    /// Recording mode: calls not logged because the queue was full or a write failed.
    record_dropped,
    /// Recording mode: calls not logged because `EVRING_RECORD_LIMIT` was reached.
    record_over_limit,
    /// ProxyCtrl events on a finalized context (a proxy shared by split
    /// communicators outliving its creator), recorded on the detached stream.
    late_context_events,
}

impl Counters {
    /// Drops of any kind: starts refused plus records lost.
    pub fn start_drops(&self) -> u64 {
        self.drop_slab_full.get()
            + self.drop_unknown_type.get()
            + self.drop_null_context.get()
            + self.drop_after_finalize.get()
            + self.drop_null_descr.get()
    }
}
