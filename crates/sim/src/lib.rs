//! evring-sim: replays recorded NCCL profiler call sequences through any profiler plugin,
//! calling it through its C ABI exactly as NCCL would.
//!
//! * [`fixture`] parses the call logs recorded from real NCCL runs and rebuilds the event
//!   descriptors from them.
//! * [`plugin`] loads a plugin library and drives whichever ABI version it exports, adapting
//!   v6-shaped calls the way NCCL's per-version shims do.

pub mod fixture;
pub mod plugin;
