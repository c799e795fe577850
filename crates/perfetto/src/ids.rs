//! How evring writes 64-bit event ids into a binary trace, compactly and
//! exactly (docs/shim.md, "Ids and flows").
//!
//! An evring event id carries a random per-process tag in its top byte, so
//! as a protobuf varint it takes 9–10 bytes. In a trace every id is written
//! *rotated left by 8 bits* (the tag becomes the low byte, the high bytes are
//! zero): 5–6 bytes for the same information. [`to_trace`] and
//! [`from_trace`] are the two directions; both are bijections.
//!
//! The flow arrow into a child slice has the id `to_trace(child) ^ flow_key`
//! (`flow_key` is in the stream's `evring.stream` header; 0 for a file of one
//! stream, distinct per stream of a merged file so arrows never join across
//! streams). A child with such an arrow carries no `id` annotation: its id is
//! [`from_flow`] of the arrow, so one value serves both.

use crate::trace::{Slice, Trace, Value};

/// The trace form of an event id.
pub fn to_trace(id: u64) -> u64 {
    id.rotate_left(8)
}

/// The event id of a trace form.
pub fn from_trace(v: u64) -> u64 {
    v.rotate_right(8)
}

/// The id of the flow arrow into the slice of event `child`.
pub fn flow(child: u64, flow_key: u64) -> u64 {
    to_trace(child) ^ flow_key
}

/// The event id of the slice a flow arrow `f` ends in.
pub fn from_flow(f: u64, flow_key: u64) -> u64 {
    from_trace(f ^ flow_key)
}

/// The stream header field holding a stream's flow key.
pub const FLOW_KEY: &str = "flow_key";

/// The flow key of the stream written on sequence `seq` (0 without one).
pub fn flow_key(t: &Trace, seq: u32) -> u64 {
    t.seq_stream_value(seq, FLOW_KEY)
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The exact id of the event a slice shows: its `id` annotation, else the
/// arrow into it; `None` for a slice evring did not write.
pub fn event_id(s: &Slice, flow_key: u64) -> Option<u64> {
    match s.arg("id").and_then(Value::as_u64) {
        Some(v) => Some(from_trace(v)),
        None => s.flows_in.first().map(|&f| from_flow(f, flow_key)),
    }
}

/// The exact id a slice's annotation `key` (`parent`, `group`) holds; 0 without one.
pub fn id_arg(s: &Slice, key: &str) -> u64 {
    s.arg(key).and_then(Value::as_u64).map_or(0, from_trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_short_for_tagged_ids() {
        for id in [
            1u64,
            0xA5 << 56 | 1 << 20 | 7,
            u64::MAX,
            0x9a00_0000_0010_0043,
        ] {
            assert_eq!(from_trace(to_trace(id)), id);
            for key in [0, 1 << 56, 0xdead_beef] {
                assert_eq!(from_flow(flow(id, key), key), id);
            }
        }
        // A slab id: tag 0x9a, generation 1, index 0x43.
        let id = 0x9a00_0000_0010_0043u64;
        assert_eq!(to_trace(id), 0x1000_439a);
        assert!(to_trace(id) < 1 << 35, "a 5-byte varint, not 10");
    }
}
