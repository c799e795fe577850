//! The process-wide values every profiler call reads, in one cache line.
//!
//! Between two calls on one of NCCL's threads NCCL runs its own work, and
//! the plugin's lines leave the core's caches; each line a call reads is
//! then a miss of its own (docs/performance.md, Round 11). Three statics
//! that every call read used to sit on lines of their own (the engine
//! pointer, the call recorder's switch, the clock's calibration behind a
//! `OnceLock`): here they share one. Written rarely (the first init, a
//! fork, the recorder's first call), read by every call.

use crate::engine::Engine;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64};

#[repr(C, align(64))]
pub(crate) struct Line {
    /// The process's engine (`engine.rs`); null before the first init and
    /// in a forked child until its own first init.
    pub engine: AtomicPtr<Engine>,
    /// The call recorder is on (`recorder.rs`).
    pub recording: AtomicBool,
    /// The TSC clock's calibration below is set (`clock.rs`): raw0, mono0
    /// and scale are written before this flag (Release), read after it
    /// (Acquire).
    pub tsc: AtomicBool,
    pub raw0: AtomicU64,
    pub mono0: AtomicU64,
    pub scale: AtomicU64,
}

static LINE: Line = Line {
    engine: AtomicPtr::new(std::ptr::null_mut()),
    recording: AtomicBool::new(false),
    tsc: AtomicBool::new(false),
    raw0: AtomicU64::new(0),
    mono0: AtomicU64::new(0),
    scale: AtomicU64::new(0),
};

const _: () = assert!(std::mem::size_of::<Line>() == 64);

/// The line, its address computed from the instruction pointer (no GOT
/// line to miss first: `evring::direct_static!`).
#[inline(always)]
pub(crate) fn line() -> &'static Line {
    evring::direct_static!(LINE)
}
