//! The plugin's own C extension: the counter snapshot `evring_stats` fills.
//!
//! The counter list is declared once, in [`with_stats_v1_counters`]; [`StatsV1`] is built
//! from it here, and the shim builds its live counters from the same list, so the two can
//! never disagree. The layout is append-only: new counters go at the end, and also into
//! `struct evring_stats_v1` in `include/evring.h` (`tests/c_header.rs` fails otherwise).

use alloc::{vec, vec::Vec};

/// Calls macro `$m` with every counter of [`StatsV1`] after `completed`, in layout order,
/// each with its doc comment, as `$m! { #[doc = "..."] name, ... }`.
#[macro_export]
macro_rules! with_stats_v1_counters {
    ($m:ident) => {
        $m! {
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
            /// Trace files closed at `EVRING_TRACE_LIMIT` and continued in a new part.
            trace_rotations,
            /// Records in old parts removed to keep `EVRING_TRACE_PARTS` (written, then deleted).
            records_rotated_away,
            /// Events with a descriptor string written as "?" because the string table was full.
            symbols_full,
            /// Starts answered NULL because their type is outside the mask (`EVRING_MASK_STRICT`).
            masked_starts,
            /// Stop or state entries lost to a full log lane (the event is completed by the age limit).
            log_lost,
        }
    };
}

macro_rules! stats_v1 {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Snapshot of the plugin's counters, exported through `evring_stats` (C layout,
        /// append-only: a reader passes its own `size` and gets that prefix).
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

        impl StatsV1 {
            /// (name, value) of every counter, `live` first.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![
                    ("live", self.live),
                    ("started", self.started),
                    ("completed", self.completed),
                    $((stringify!($name), self.$name),)*
                ]
            }
        }
    };
}

with_stats_v1_counters!(stats_v1);

// The header and the first counters never move (readers of older layouts rely on them);
// every field after the header is a u64.
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(offset_of!(StatsV1, version) == 0);
    assert!(offset_of!(StatsV1, size) == 4);
    assert!(offset_of!(StatsV1, live) == 8);
    assert!(offset_of!(StatsV1, started) == 16);
    assert!(offset_of!(StatsV1, completed) == 24);
    assert!(offset_of!(StatsV1, start_calls) == 32);
    assert!(align_of::<StatsV1>() == 8);
    assert!(size_of::<StatsV1>().is_multiple_of(8));
};

#[cfg(test)]
mod tests {
    use super::StatsV1;

    #[test]
    fn fields_cover_every_u64_in_layout_order() {
        let n = (core::mem::size_of::<StatsV1>() - 8) / 8;
        // Give every u64 field a distinct value through the C layout, then read it back
        // through `fields`: a field missing from the list, or out of order, breaks this.
        let mut s = StatsV1::default();
        // SAFETY: StatsV1 is repr(C): two u32 then `n` u64 fields, 8-aligned, no padding.
        let words = unsafe {
            core::slice::from_raw_parts_mut(
                (&mut s as *mut StatsV1).cast::<u8>().add(8).cast::<u64>(),
                n,
            )
        };
        for (i, w) in words.iter_mut().enumerate() {
            *w = 100 + i as u64;
        }
        let f = s.fields();
        assert_eq!(f.len(), n);
        for (i, (_, v)) in f.iter().enumerate() {
            assert_eq!(*v, 100 + i as u64, "field {i} ({})", f[i].0);
        }
        assert_eq!(f[0].0, "live");
        assert_eq!(f[3].0, "start_calls");
    }
}
