//! A completed event: [`Record`], as the writer thread's assembler builds it
//! for the sinks and as tools read it back, with its flags ([`flag`]) and
//! its states (packed as the assembler keeps them: [`pack_state`]).

use crate::model::{Info, Kind};

/// How many state transitions an event keeps (ProxyStep has three; repeats of
/// the same state are folded, so four is enough for every NCCL sequence).
pub const STATES: usize = 4;

/// Event flags, stored in records.
pub mod flag {
    /// The event was stopped by NCCL.
    pub const STOPPED: u32 = 1 << 0;
    /// Its parent had already completed when it started.
    pub const LATE_CHILD: u32 = 1 << 1;
    /// Its parent was not one of our IDs (PXN or garbage).
    pub const FOREIGN_PARENT: u32 = 1 << 2;
    /// Its context was not one of ours; written to the detached stream.
    pub const DETACHED: u32 = 1 << 3;
    /// Completed while expected or started children were still outstanding.
    pub const CHILDREN_INCOMPLETE: u32 = 1 << 4;
    /// Completed by the pressure sweep.
    pub const FORCED_PRESSURE: u32 = 1 << 5;
    /// Completed by the age limit.
    pub const FORCED_AGE: u32 = 1 << 6;
    /// Completed by finalize or process exit.
    pub const FORCED_FINALIZE: u32 = 1 << 7;
    /// More distinct states than the record keeps.
    pub const STATES_OVERFLOW: u32 = 1 << 8;
    /// A string in its descriptor pointed at unreadable memory.
    pub const BAD_STRING: u32 = 1 << 9;
    /// Its end time comes from GPU timers (KernelCh).
    pub const GPU_TIMED: u32 = 1 << 10;
    /// A child ended after the parent's own stop and extended its end.
    pub const CHILD_EXTENDED: u32 = 1 << 11;
    /// Stopped more than once.
    pub const DOUBLE_STOP: u32 = 1 << 12;

    pub const NAMES: [(u32, &str); 13] = [
        (STOPPED, "stopped"),
        (LATE_CHILD, "late_child"),
        (FOREIGN_PARENT, "foreign_parent"),
        (DETACHED, "detached"),
        (CHILDREN_INCOMPLETE, "children_incomplete"),
        (FORCED_PRESSURE, "forced_pressure"),
        (FORCED_AGE, "forced_age"),
        (FORCED_FINALIZE, "forced_finalize"),
        (STATES_OVERFLOW, "states_overflow"),
        (BAD_STRING, "bad_string"),
        (GPU_TIMED, "gpu_timed"),
        (CHILD_EXTENDED, "child_extended"),
        (DOUBLE_STOP, "double_stop"),
    ];
}

const TS_MASK: u64 = (1 << 56) - 1;

/// One state word: `state << 56 | host ns` (ns truncated to 56 bits).
#[inline]
pub fn pack_state(state: u8, ns: u64) -> u64 {
    (state as u64) << 56 | (ns & TS_MASK)
}

/// The (state, host ns) of a [`pack_state`] word.
#[inline]
pub fn unpack_state(w: u64) -> (u8, u64) {
    ((w >> 56) as u8, w & TS_MASK)
}

/// Where an event's end time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Timing {
    /// NCCL's stopEvent on the host.
    Host,
    /// The latest end among its children (later than its own stop).
    Children,
    /// GPU timers of KernelCh events, mapped to the host clock.
    Gpu,
    /// Never stopped: completed by finalize, exit, age or pressure.
    Forced,
}

impl Timing {
    pub fn name(self) -> &'static str {
        match self {
            Timing::Host => "host",
            Timing::Children => "children",
            Timing::Gpu => "gpu",
            Timing::Forced => "forced",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    pub id: u64,
    pub parent: u64,
    pub ctx: u64,
    pub kind: Kind,
    pub rank: i32,
    pub info: Info,
    pub start_ns: u64,
    /// 0 if NCCL never stopped it.
    pub stop_ns: u64,
    /// Effective end: the latest of its stop, its children's ends and its GPU end.
    pub end_ns: u64,
    pub timing: Timing,
    /// Raw GPU globaltimer values (0 = none).
    pub gpu_start: u64,
    pub gpu_end: u64,
    pub states: [(u8, u64); STATES],
    pub n_states: u8,
    pub state_arg: u64,
    pub flags: u32,
}

impl Record {
    /// A record of an event NCCL started at `start_ns` and stopped at `end_ns`,
    /// with no children, GPU times or states, on context 0 and rank 0: the base
    /// that tests, benches and tools build records from (set other fields with
    /// struct update syntax).
    pub fn stopped(
        id: u64,
        parent: u64,
        kind: Kind,
        info: Info,
        start_ns: u64,
        end_ns: u64,
    ) -> Record {
        Record {
            id,
            parent,
            ctx: 0,
            kind,
            rank: 0,
            info,
            start_ns,
            stop_ns: end_ns,
            end_ns,
            timing: Timing::Host,
            gpu_start: 0,
            gpu_end: 0,
            states: [(0, 0); STATES],
            n_states: 0,
            state_arg: 0,
            flags: flag::STOPPED,
        }
    }
}
