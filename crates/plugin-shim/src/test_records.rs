//! Records of every kind, shaped like one NCCL collective's tree (children
//! completing before parents), shared by the trace-format tests.

use crate::model::{Info, Kind};
use crate::perfetto::{Anchor, StreamInfo};
use crate::record::flag;
use crate::record::{Record, Timing};
use crate::strings::Str16;

fn s(t: &str) -> Str16 {
    Str16::from_bytes(t.as_bytes())
}

pub const HIGH: u64 = 0xFFFF_FFFF_FFFF_0000;

fn rec(id: u64, parent: u64, kind: Kind, info: Info, start: u64, end: u64) -> Record {
    Record {
        rank: 3,
        ..Record::stopped(
            HIGH + id,
            if parent == 0 { 0 } else { HIGH + parent },
            kind,
            info,
            start,
            end,
        )
    }
}

/// One v5-shaped collective with its whole tree, children completing first,
/// plus an overlapping second collective and one event of every other kind.
pub fn records() -> Vec<Record> {
    let t = 1_000_000_000_000u64;
    let mut v = Vec::new();
    let coll = |seq, func: &str| Info::Coll {
        seq,
        func: s(func),
        count: 1 << 40,
        root: -1,
        datatype: s("ncclFloat32"),
        n_channels: 2,
        n_warps: 16,
        algo: s("RING"),
        proto: s("SIMPLE"),
        parent_group: HIGH + 1,
        kernel_variant: Default::default(),
        is_sym_coll: false,
        user_tag: 0,
    };
    v.push(rec(
        21,
        10,
        Kind::NetPlugin,
        Info::NetPlugin { id: -5 },
        t + 310,
        t + 320,
    ));
    // Proxy steps 10..13 (pipelined: they overlap), their op 9.
    for k in 0..4u64 {
        let mut r = rec(
            10 + k,
            9,
            Kind::ProxyStep,
            Info::ProxyStep { step: k as i32 },
            t + 300 + 50 * k,
            t + 420 + 50 * k,
        );
        r.states[0] = (8, t + 300 + 50 * k);
        r.states[1] = (9, t + 350 + 50 * k);
        r.states[2] = (20, t + 400 + 50 * k);
        r.n_states = 3;
        r.state_arg = 4096 * (k + 1);
        v.push(r);
    }
    v.push(rec(
        9,
        5,
        Kind::ProxyOp,
        Info::ProxyOp {
            pid: 4242,
            channel: 1,
            peer: 3,
            n_steps: 4,
            chunk_size: 4096,
            is_send: true,
        },
        t + 250,
        t + 700,
    ));
    let mut kc = rec(
        8,
        5,
        Kind::KernelCh,
        Info::KernelCh {
            channel: 2,
            gpu_start: 77_000,
        },
        t + 200,
        t + 800,
    );
    kc.gpu_start = 77_000;
    kc.gpu_end = 78_000;
    kc.timing = Timing::Gpu;
    kc.flags |= flag::GPU_TIMED;
    kc.states[0] = (22, t + 790);
    kc.n_states = 1;
    v.push(kc);
    let mut c = rec(5, 4, Kind::Coll, coll(17, "AllReduce"), t + 150, t + 800);
    c.stop_ns = t + 600;
    c.timing = Timing::Children;
    c.flags |= flag::CHILD_EXTENDED;
    v.push(c);
    // A second collective overlapping the first (in flight at the same time).
    v.push(rec(
        6,
        4,
        Kind::Coll,
        coll(18, "AllGather"),
        t + 500,
        t + 900,
    ));
    v.push(rec(
        4,
        1,
        Kind::CollApi,
        Info::CollApi {
            func: s("AllReduce"),
            count: 1 << 40,
            datatype: s("ncclFloat32"),
            root: 0,
            stream: 0xdead_beef_0000,
            graph_captured: false,
            user_tag: 0,
        },
        t + 100,
        t + 140,
    ));
    v.push(rec(
        2,
        1,
        Kind::KernelLaunch,
        Info::KernelLaunch {
            stream: 0xdead_beef_0000,
        },
        t + 145,
        t + 148,
    ));
    v.push(rec(
        1,
        0,
        Kind::GroupApi,
        Info::GroupApi {
            graph_captured: true,
            depth: 1,
        },
        t + 90,
        t + 950,
    ));
    // Kinds without a tree here.
    let mut ctrl = rec(20, 0, Kind::ProxyCtrl, Info::None, t + 10, t + 20);
    ctrl.states[0] = (14, t + 11);
    ctrl.states[1] = (18, t + 19);
    ctrl.n_states = 2;
    ctrl.state_arg = 3;
    v.push(ctrl);
    v.push(rec(
        23,
        22,
        Kind::P2p,
        Info::P2p {
            func: s("Send"),
            datatype: s("ncclInt8"),
            count: 12,
            peer: 7,
            n_channels: 1,
            parent_group: HIGH + 22,
            user_tag: 0,
        },
        t + 1010,
        t + 1090,
    ));
    v.push(rec(22, 0, Kind::Group, Info::None, t + 1000, t + 1100));
    v.push(rec(
        24,
        0,
        Kind::P2pApi,
        Info::P2pApi {
            func: s("Recv"),
            count: 12,
            datatype: s("ncclInt8"),
            stream: 1,
            graph_captured: false,
            user_tag: 0,
        },
        t + 1000,
        t + 1001,
    ));
    let mut forced = rec(
        25,
        0,
        Kind::CeColl,
        Info::CeColl {
            seq: 1,
            func: s("AllGather"),
            count: 3,
            root: 0,
            datatype: s("ncclBfloat16"),
            sync: s("x"),
            stream: 9,
            user_tag: 0,
        },
        t + 1200,
        t + 1300,
    );
    forced.stop_ns = 0;
    forced.flags = flag::FORCED_FINALIZE | flag::CHILDREN_INCOMPLETE;
    forced.timing = Timing::Forced;
    v.push(forced);
    v.push(rec(
        26,
        0,
        Kind::CeSync,
        Info::CeSync {
            complete: true,
            n_ranks: 8,
        },
        t + 1300,
        t + 1310,
    ));
    v.push(rec(
        27,
        0,
        Kind::CeBatch,
        Info::CeBatch {
            num_ops: 2,
            total_bytes: 1 << 33,
            intra_sync: true,
        },
        t + 1310,
        t + 1320,
    ));
    // Another rank's event (the detached stream mixes ranks), a late child.
    let mut other = rec(
        28,
        5,
        Kind::ProxyOp,
        Info::ProxyOp {
            pid: 1,
            channel: 0,
            peer: 0,
            n_steps: 1,
            chunk_size: 1,
            is_send: false,
        },
        t + 2000,
        t + 2100,
    );
    other.rank = 5;
    other.flags |= flag::LATE_CHILD;
    v.push(other);
    // v7: a tagged symmetric-kernel collective 31, its KernelCh 30 and that
    // channel's compute phase 29 (GPU times, stop state 31), children first.
    let g = 5_000_000_000u64;
    let mut phase = rec(
        29,
        30,
        Kind::KernelPhase,
        Info::KernelPhase {
            channel: 1,
            phase: crate::abi::phase::COMPUTE,
            gpu_start: g + 100,
        },
        t + 3000,
        t + 3010,
    );
    (phase.gpu_start, phase.gpu_end) = (g + 100, g + 900);
    phase.states[0] = (crate::abi::state::KERNEL_PHASE_STOP as u8, t + 3005);
    phase.n_states = 1;
    phase.state_arg = g + 900;
    phase.flags |= flag::GPU_TIMED;
    v.push(phase);
    let mut ch = rec(
        30,
        31,
        Kind::KernelCh,
        Info::KernelCh {
            channel: 1,
            gpu_start: g,
        },
        t + 2990,
        t + 3020,
    );
    (ch.gpu_start, ch.gpu_end) = (g, g + 1000);
    ch.flags |= flag::GPU_TIMED;
    v.push(ch);
    v.push(rec(
        31,
        0,
        Kind::Coll,
        Info::Coll {
            seq: 3,
            func: s("AllReduce"),
            count: 1 << 20,
            root: -1,
            datatype: s("ncclBfloat16"),
            n_channels: 1,
            n_warps: 16,
            algo: s("sym_ring"),
            proto: s(""),
            parent_group: 0,
            kernel_variant: s("AllReduce_ST"),
            is_sym_coll: true,
            user_tag: 0xC0DE_0000_0000_0042,
        },
        t + 2980,
        t + 3030,
    ));
    v
}

pub fn info() -> StreamInfo {
    StreamInfo {
        comm_id: 0xFEDC_BA98_7654_3210,
        rank: 3,
        nranks: 8,
        nnodes: 2,
        abi: 6,
        name: Some("tp".into()),
        pid: 4242,
        host: "node-07".into(),
        ctx: 0x55,
    }
}

pub fn anchor(m: u64) -> Anchor {
    Anchor {
        monotonic_ns: m,
        realtime_ns: 1_764_000_000_000_000_000 + m,
        boottime_ns: m + 5,
    }
}
