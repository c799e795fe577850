//! A completed event as the sinks and tools see it: built by the writer
//! thread from the event's slot (engine.rs, `Done`).

use crate::clock;
use crate::model::{Info, Kind};
use crate::node::{flag, Node, STATES};
use std::sync::atomic::Ordering;

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

    /// Builds the record of a node that has been completed.
    pub fn of(id: u64, n: &Node) -> Record {
        let Ends {
            flags,
            stop_ns,
            end_ns,
            timing,
        } = Ends::of(n);
        let gpu_start = match n.gpu_start.load(Ordering::Relaxed) {
            u64::MAX => 0,
            g => g,
        };
        let gpu_end = n.gpu_end.load(Ordering::Relaxed);
        let (states, n_states) = n.states();
        Record {
            id,
            parent: n.parent,
            ctx: n.ctx,
            kind: n.kind,
            rank: n.rank,
            info: n.info.resolve(),
            start_ns: n.start_ns,
            stop_ns,
            end_ns,
            timing,
            gpu_start,
            gpu_end,
            states,
            n_states,
            state_arg: n.state_arg.load(Ordering::Relaxed),
            flags,
        }
    }
}

/// When a completed event ended, and how that was decided.
struct Ends {
    flags: u32,
    stop_ns: u64,
    end_ns: u64,
    timing: Timing,
}

impl Ends {
    fn of(n: &Node) -> Ends {
        let mut flags = n.flags();
        let stop_ns = if flags & flag::STOPPED != 0 {
            n.stop_ns.load(Ordering::Relaxed)
        } else {
            0
        };
        let child_end = n.child_end_ns();
        // Derived here rather than set by each child (one locked `or` fewer
        // per completion): a child ended after this event's own stop.
        if stop_ns != 0 && child_end > stop_ns {
            flags |= flag::CHILD_EXTENDED;
        }
        let gpu_end = n.gpu_end.load(Ordering::Relaxed);
        let gpu_end_host = clock::gpu_to_host(gpu_end).unwrap_or(0);
        // An event NCCL never stopped ends when it was forced (the time
        // `Node::force` kept), or now if it has not been forced yet.
        let base = if stop_ns == 0 {
            match n.stop_ns.load(Ordering::Relaxed) {
                0 => clock::now_ns(),
                forced => forced,
            }
        } else {
            stop_ns
        };
        let (end_ns, timing) = if gpu_end_host > 0 && flags & flag::GPU_TIMED != 0 {
            (base.max(gpu_end_host).max(child_end), Timing::Gpu)
        } else if child_end > base {
            (child_end, Timing::Children)
        } else if stop_ns == 0 {
            (base, Timing::Forced)
        } else {
            (stop_ns, Timing::Host)
        };
        Ends {
            flags,
            stop_ns,
            end_ns: end_ns.max(n.start_ns),
            timing,
        }
    }
}

/// When a completed event ended, as its record will say (what its parent
/// folds in).
pub fn end_of(n: &Node) -> u64 {
    Ends::of(n).end_ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strings::Str16;

    fn s(x: &str) -> Str16 {
        Str16::from_bytes(x.as_bytes())
    }

    #[test]
    fn the_record_of_a_node_has_its_fields_strings_states_and_end() {
        let info = Info::Coll {
            seq: 3,
            func: s("AllReduce"),
            count: 10,
            root: 0,
            datatype: s("ncclFloat32"),
            n_channels: 2,
            n_warps: 8,
            algo: s("RING"),
            proto: s("SIMPLE"),
            parent_group: 0,
        };
        let n = Node::new(Kind::Coll, 7, 5, 2, info.intern(), flag::BAD_STRING);
        n.stop(n.start_ns + 100);
        let r = Record::of(42, &n);
        assert_eq!(r.info, info);
        assert_eq!((r.id, r.parent, r.ctx, r.rank), (42, 5, 7, 2));
        assert_eq!(r.stop_ns, n.start_ns + 100);
        assert_eq!((r.end_ns, r.timing), (n.start_ns + 100, Timing::Host));
        assert_eq!(r.flags, flag::BAD_STRING | flag::STOPPED);

        // Six states on a ProxyOp: the node keeps four and flags the rest.
        let op = Info::ProxyOp {
            pid: 1,
            channel: 2,
            peer: 3,
            n_steps: 4,
            chunk_size: 5,
            is_send: false,
        };
        let n = Node::new(Kind::ProxyOp, 7, 5, 2, op, 0);
        for st in 0..6 {
            n.record(
                crate::model::StateArg {
                    state: st,
                    arg: Some(100 + st as u64),
                },
                n.start_ns + 10 * st as u64,
            );
        }
        let r = Record::of(43, &n);
        assert_eq!(r.info, op.resolve());
        assert_eq!(r.n_states, 4);
        assert_eq!(r.states[3], (3, (n.start_ns + 30) & ((1 << 56) - 1)));
        assert_eq!(r.state_arg, 105);
        assert_eq!((r.stop_ns, r.timing), (0, Timing::Forced));
        assert_eq!(r.flags, flag::STATES_OVERFLOW);
    }

    #[test]
    fn a_forced_event_ends_when_it_was_forced_not_when_its_record_is_built() {
        let n = Node::new(Kind::Group, 1, 0, 0, Info::None, 0);
        assert!(n.force(flag::FORCED_AGE));
        let forced = Record::of(1, &n).end_ns;
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later = Record::of(1, &n);
        assert_eq!(later.end_ns, forced, "the writer may build it later");
        assert_eq!((later.stop_ns, later.timing), (0, Timing::Forced));
        assert_eq!(end_of(&n), forced);
    }
}
