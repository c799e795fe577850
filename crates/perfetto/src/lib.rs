//! # evring-perfetto
//!
//! The part of Perfetto's trace format (`protos/perfetto/trace/*.proto`) that
//! evring's traces use: `TracePacket`s carrying `TrackDescriptor`s,
//! `TrackEvent` slices and instants, interned names, flows and a
//! `ClockSnapshot`. The messages are [`prost`] structs whose field numbers
//! and types are Perfetto's (each message names its `.proto`), so
//! encoding and decoding are prost's; fields evring never writes are left
//! out (a decoder skips them as unknown fields).
//!
//! A trace file is a `Trace` message: a sequence of `packet` (field 1)
//! records, each length-delimited. [`read`] splits a file into packets and
//! stops cleanly at a cut (a killed writer leaves a torn last packet);
//! [`trace::read`] resolves a file into tracks, slices and annotations.

pub mod ids;
pub mod proto;
pub mod read;
pub mod trace;

pub use read::{packets, Packets};
