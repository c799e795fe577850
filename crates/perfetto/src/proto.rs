//! Perfetto trace messages, as prost structs. Field numbers and wire types are
//! those of Perfetto's `.proto` files (path above each message, relative to
//! `protos/perfetto/trace/`); `optional`/`repeated` scalars of those proto2
//! files are unpacked, as declared there.

/// `trace.proto`: a whole trace file is one `Trace`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// Field number of `Trace.packet`: every packet in a file is this field.
pub const TRACE_PACKET_FIELD: u32 = 1;

/// `trace_packet.proto`. The `data` oneof is spread over optional fields
/// (the same bytes on the wire); at most one of them is set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(bool, optional, tag = "42")]
    pub previous_packet_dropped: Option<bool>,
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `TracePacket.SequenceFlags`.
pub mod seq_flags {
    /// `SEQ_INCREMENTAL_STATE_CLEARED`: interned data and defaults start over here.
    pub const INCREMENTAL_STATE_CLEARED: u32 = 1;
    /// `SEQ_NEEDS_INCREMENTAL_STATE`: the packet refers to interned data or defaults.
    pub const NEEDS_INCREMENTAL_STATE: u32 = 2;
}

/// `trace_packet_defaults.proto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
}

/// `clock_snapshot.proto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    #[prost(uint32, optional, tag = "2")]
    pub primary_trace_clock: Option<u32>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    /// Packets on this clock carry the time since the previous packet on it
    /// (of this sequence) instead of an absolute time. Only for
    /// sequence-scoped clocks (ids 64..128).
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
}

/// `ClockSnapshot.Clock.BuiltinClocks` values used here.
pub mod clock {
    /// `REALTIME` (CLOCK_REALTIME, wall clock).
    pub const REALTIME: u32 = 1;
    /// `MONOTONIC` (CLOCK_MONOTONIC): every evring timestamp.
    pub const MONOTONIC: u32 = 3;
    /// `BOOTTIME`: Perfetto's default trace clock.
    pub const BOOTTIME: u32 = 6;
    /// Clock ids from here to 127 are scoped to the sequence that
    /// snapshots them (Perfetto's `clock_synchronizer.h`, `IsSequenceClock`).
    pub const FIRST_SEQUENCE_CLOCK: u32 = 64;
    /// evring's incremental clock: CLOCK_MONOTONIC as deltas (docs/shim.md);
    /// the sequence default.
    pub const EVRING_DELTA: u32 = 64;
    /// evring's second incremental clock, named by the packets whose time is
    /// before [`EVRING_DELTA`]'s (a begin earlier than the previous end).
    pub const EVRING_DELTA_BACK: u32 = 65;

    /// Whether `id` is a sequence-scoped clock.
    pub fn is_sequence_clock(id: u32) -> bool {
        (FIRST_SEQUENCE_CLOCK..128).contains(&id)
    }
}

/// `track_event/track_descriptor.proto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// `ChildTracksOrdering` of this track's children.
    #[prost(int32, optional, tag = "11")]
    pub child_ordering: Option<i32>,
    #[prost(int32, optional, tag = "12")]
    pub sibling_order_rank: Option<i32>,
}

/// `TrackDescriptor.ChildTracksOrdering.EXPLICIT`: children sorted by `sibling_order_rank`.
pub const CHILD_ORDERING_EXPLICIT: i32 = 3;

/// `track_event/process_descriptor.proto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
    #[prost(string, repeated, tag = "8")]
    pub process_labels: Vec<String>,
}

/// `track_event/track_event.proto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(enumeration = "EventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(uint64, repeated, packed = "false", tag = "3")]
    pub category_iids: Vec<u64>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// `TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum EventType {
    Unspecified = 0,
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
}

/// `track_event/debug_annotation.proto` (the scalar values evring writes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    /// Shown as hex by Perfetto; evring writes 64-bit handles this way.
    #[prost(uint64, optional, tag = "7")]
    pub pointer_value: Option<u64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    #[prost(uint64, optional, tag = "17")]
    pub string_value_iid: Option<u64>,
}

/// `interned_data/interned_data.proto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "1")]
    pub event_categories: Vec<InternedName>,
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<InternedName>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<InternedName>,
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<InternedString>,
}

/// `EventCategory`, `EventName` and `DebugAnnotationName` share this shape
/// (`iid = 1`, `name = 2`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

/// `profiling/profile_common.proto` `InternedString` (`iid = 1`, `str = 2`, bytes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}
