//! A completed event: [`Compact`] as it crosses the record ring (built by the
//! thread that completes the event), [`Record`] as the writer thread expands
//! it for the sinks and as tools read it back.

pub use crate::compact::{Compact, Folded};
use crate::model::{Info, Kind};
use crate::node::{flag, Node, STATES};

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

    /// Builds the record of a node that has just been completed.
    pub fn of(id: u64, n: &Node) -> Record {
        Compact::of(id, n).expand()
    }
}
