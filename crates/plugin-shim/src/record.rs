//! A completed event: [`Compact`] as it crosses the record ring (built by the
//! thread that completes the event), [`Record`] as the writer thread expands
//! it for the sinks and as tools read it back.

use crate::clock;
use crate::model::{Info, Kind};
use crate::node::{flag, pack_state, unpack_state, Node, STATES};
use crate::symbols::Sym;
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

    /// Builds the record of a node that has just been completed.
    pub fn of(id: u64, n: &Node) -> Record {
        Compact::of(id, n).expand()
    }
}

/// A completed event as it travels the record ring: a [`Record`] with its
/// strings as symbols and its states packed as the node keeps them
/// (`state << 56 | ns`), no padding between fields. Every line of it is
/// written by the completing thread and read by the writer thread on
/// another core, so its size is a per-event cost (measured in
/// `docs/performance.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compact {
    pub id: u64,
    pub parent: u64,
    pub ctx: u64,
    pub start_ns: u64,
    pub stop_ns: u64,
    pub end_ns: u64,
    pub gpu_start: u64,
    pub gpu_end: u64,
    pub state_arg: u64,
    /// [`pack_state`] words; entries past `n_states` are 0.
    pub states: [u64; STATES],
    pub info: Info<Sym>,
    pub rank: i32,
    pub flags: u32,
    pub kind: Kind,
    pub timing: Timing,
    pub n_states: u8,
}

// What the ring carries per event (the `Record` it replaced was 260 bytes).
const _: () = assert!(std::mem::size_of::<Compact>() <= 160);

impl Compact {
    /// Builds the record of a node that has just been completed.
    pub fn of(id: u64, n: &Node) -> Compact {
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
        let gpu_start = match n.gpu_start.load(Ordering::Relaxed) {
            u64::MAX => 0,
            g => g,
        };
        let gpu_end = n.gpu_end.load(Ordering::Relaxed);
        let gpu_end_host = clock::gpu_to_host(gpu_end).unwrap_or(0);
        // Only events NCCL never stopped need the clock read here.
        let now = if stop_ns == 0 {
            clock::now_ns()
        } else {
            stop_ns
        };
        let base = now;
        let (end_ns, timing) = if gpu_end_host > 0 && flags & flag::GPU_TIMED != 0 {
            (base.max(gpu_end_host).max(child_end), Timing::Gpu)
        } else if child_end > base {
            (child_end, Timing::Children)
        } else if stop_ns == 0 {
            (now, Timing::Forced)
        } else {
            (stop_ns, Timing::Host)
        };
        let (states, n_states) = n.packed_states();
        Compact {
            id,
            parent: n.parent,
            ctx: n.ctx,
            kind: n.kind,
            rank: n.rank,
            info: n.info,
            start_ns: n.start_ns,
            stop_ns,
            end_ns: end_ns.max(n.start_ns),
            timing,
            gpu_start,
            gpu_end,
            states,
            n_states,
            state_arg: n.state_arg.load(Ordering::Relaxed),
            flags,
        }
    }

    /// The full record (writer thread: strings from the symbol table).
    pub fn expand(&self) -> Record {
        Record {
            id: self.id,
            parent: self.parent,
            ctx: self.ctx,
            kind: self.kind,
            rank: self.rank,
            info: self.info.resolve(),
            start_ns: self.start_ns,
            stop_ns: self.stop_ns,
            end_ns: self.end_ns,
            timing: self.timing,
            gpu_start: self.gpu_start,
            gpu_end: self.gpu_end,
            states: self.states.map(unpack_state),
            n_states: self.n_states,
            state_arg: self.state_arg,
            flags: self.flags,
        }
    }

    /// The compact form of `r` (interns its strings; state times keep their
    /// low 56 bits, as the node keeps them). Tests and tools.
    pub fn from_record(r: &Record) -> Compact {
        Compact {
            id: r.id,
            parent: r.parent,
            ctx: r.ctx,
            kind: r.kind,
            rank: r.rank,
            info: r.info.intern(),
            start_ns: r.start_ns,
            stop_ns: r.stop_ns,
            end_ns: r.end_ns,
            timing: r.timing,
            gpu_start: r.gpu_start,
            gpu_end: r.gpu_end,
            states: r.states.map(|(s, ns)| pack_state(s, ns)),
            n_states: r.n_states,
            state_arg: r.state_arg,
            flags: r.flags,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Info;
    use crate::node::{flag, Node};
    use crate::strings::Str16;

    fn s(t: &str) -> Str16 {
        Str16::from_bytes(t.as_bytes())
    }

    /// One info of every variant, every field set (strings of full length).
    fn infos() -> Vec<(Kind, Info)> {
        vec![
            (Kind::Group, Info::None),
            (
                Kind::GroupApi,
                Info::GroupApi {
                    graph_captured: true,
                    depth: -3,
                },
            ),
            (
                Kind::CollApi,
                Info::CollApi {
                    func: s("AllReduce"),
                    count: u64::MAX,
                    datatype: s("ncclBfloat16-xyz"),
                    root: i32::MIN,
                    stream: 0xdead_beef_0000,
                    graph_captured: true,
                },
            ),
            (
                Kind::P2pApi,
                Info::P2pApi {
                    func: s("Send"),
                    count: 7,
                    datatype: s("ncclInt8"),
                    stream: 9,
                    graph_captured: false,
                },
            ),
            (Kind::KernelLaunch, Info::KernelLaunch { stream: u64::MAX }),
            (
                Kind::Coll,
                Info::Coll {
                    seq: u64::MAX - 1,
                    func: s("ReduceScatter"),
                    count: 1 << 40,
                    root: -1,
                    datatype: s("ncclFloat32"),
                    n_channels: 255,
                    n_warps: 16,
                    algo: s("NVLS_TREE"),
                    proto: s("LL128"),
                    parent_group: 0xFFFF_FFFF_FFFF_0001,
                },
            ),
            (
                Kind::P2p,
                Info::P2p {
                    func: s("Recv"),
                    datatype: s(""),
                    count: 3,
                    peer: 7,
                    n_channels: 4,
                    parent_group: 11,
                },
            ),
            (
                Kind::ProxyOp,
                Info::ProxyOp {
                    pid: 4242,
                    channel: 31,
                    peer: -2,
                    n_steps: 8,
                    chunk_size: 1 << 20,
                    is_send: true,
                },
            ),
            (Kind::ProxyStep, Info::ProxyStep { step: i32::MAX }),
            (Kind::ProxyCtrl, Info::None),
            (
                Kind::KernelCh,
                Info::KernelCh {
                    channel: 63,
                    gpu_start: 1 << 62,
                },
            ),
            (Kind::NetPlugin, Info::NetPlugin { id: i64::MIN }),
            (
                Kind::CeColl,
                Info::CeColl {
                    seq: 5,
                    func: s("AllGather"),
                    count: 6,
                    root: 0,
                    datatype: s("ncclUint64"),
                    sync: s("?"),
                    stream: 8,
                },
            ),
            (
                Kind::CeSync,
                Info::CeSync {
                    complete: true,
                    n_ranks: 8,
                },
            ),
            (
                Kind::CeBatch,
                Info::CeBatch {
                    num_ops: 3,
                    total_bytes: u64::MAX,
                    intra_sync: true,
                },
            ),
        ]
    }

    fn all_flags() -> u32 {
        flag::NAMES.iter().fold(0, |a, (f, _)| a | f)
    }

    #[test]
    fn compact_round_trips_every_kind_and_field() {
        let mut recs = crate::test_records::records();
        let timings = [Timing::Host, Timing::Children, Timing::Gpu, Timing::Forced];
        for (i, (kind, info)) in infos().into_iter().enumerate() {
            let base = Record::stopped(i as u64 + 1, 99, kind, info, 1_000 + i as u64, 5_000);
            // Plain; states full and overflowed with every flag set; forced.
            recs.push(base);
            recs.push(Record {
                ctx: u64::MAX,
                rank: -1,
                stop_ns: 4_000,
                end_ns: u64::MAX,
                timing: timings[i % 4],
                gpu_start: 1,
                gpu_end: u64::MAX,
                states: [(0, 1), (30, (1 << 56) - 1), (255, 0), (22, 12_345)],
                n_states: 4,
                state_arg: u64::MAX,
                flags: all_flags(),
                ..base
            });
            recs.push(Record {
                stop_ns: 0,
                timing: Timing::Forced,
                flags: flag::FORCED_FINALIZE | flag::CHILDREN_INCOMPLETE,
                states: [(8, 77), (0, 0), (0, 0), (0, 0)],
                n_states: 1,
                ..base
            });
        }
        let kinds: std::collections::HashSet<_> = recs.iter().map(|r| r.kind).collect();
        assert_eq!(kinds.len(), Kind::ALL.len(), "every kind covered");
        for r in &recs {
            let c = Compact::from_record(r);
            assert_eq!(c.expand(), *r, "{c:?}");
        }
    }

    #[test]
    fn compact_of_a_node_matches_its_record() {
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
        let n = Node::new(Kind::ProxyOp, 7, 5, 2, info.intern(), flag::BAD_STRING);
        for st in [0, 1, 2, 3, 4, 5] {
            n.record(
                crate::model::StateArg {
                    state: st,
                    arg: Some(100 + st as u64),
                },
                n.start_ns + 10 * st as u64,
            );
        }
        n.stop(n.start_ns + 100);
        let r = Compact::of(42, &n).expand();
        assert_eq!(r.info, info);
        assert_eq!((r.id, r.parent, r.ctx, r.rank), (42, 5, 7, 2));
        assert_eq!(r.n_states, 4);
        assert_eq!(r.states[3], (3, (n.start_ns + 30) & ((1 << 56) - 1)));
        assert_eq!(r.state_arg, 105);
        assert_eq!(r.stop_ns, n.start_ns + 100);
        assert_eq!((r.end_ns, r.timing), (n.start_ns + 100, Timing::Host));
        let want = flag::BAD_STRING | flag::STOPPED | flag::STATES_OVERFLOW;
        assert_eq!(r.flags, want);
    }

    #[test]
    fn compact_is_small() {
        let size = std::mem::size_of::<Compact>();
        assert!(size <= 160, "{size}");
        assert!(size < std::mem::size_of::<Record>() * 2 / 3, "{size}");
    }
}
