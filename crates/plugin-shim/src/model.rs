//! The internal event model every ABI version converts into.
//!
//! NCCL's `type` and state values stay integers until they are matched here;
//! an unknown value becomes `None` and is counted, never transmuted.

use crate::strings::Str16;

/// Event kinds, one per NCCL type bit (the discriminant is the bit index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Group = 0,
    Coll = 1,
    P2p = 2,
    ProxyOp = 3,
    ProxyStep = 4,
    ProxyCtrl = 5,
    KernelCh = 6,
    NetPlugin = 7,
    GroupApi = 8,
    CollApi = 9,
    P2pApi = 10,
    KernelLaunch = 11,
    CeColl = 12,
    CeSync = 13,
    CeBatch = 14,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Group,
        Kind::Coll,
        Kind::P2p,
        Kind::ProxyOp,
        Kind::ProxyStep,
        Kind::ProxyCtrl,
        Kind::KernelCh,
        Kind::NetPlugin,
        Kind::GroupApi,
        Kind::CollApi,
        Kind::P2pApi,
        Kind::KernelLaunch,
        Kind::CeColl,
        Kind::CeSync,
        Kind::CeBatch,
    ];

    /// The kind for an NCCL type value: exactly one known bit, else `None`.
    #[inline]
    pub fn from_type(ty: u64) -> Option<Kind> {
        if ty.count_ones() != 1 {
            return None;
        }
        Kind::ALL.get(ty.trailing_zeros() as usize).copied()
    }

    /// The NCCL type bit.
    #[inline]
    pub fn bit(self) -> u64 {
        1 << self as u8
    }

    /// Name used in traces and counters (NCCL's spelling without the prefix).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Group => "Group",
            Kind::Coll => "Coll",
            Kind::P2p => "P2p",
            Kind::ProxyOp => "ProxyOp",
            Kind::ProxyStep => "ProxyStep",
            Kind::ProxyCtrl => "ProxyCtrl",
            Kind::KernelCh => "KernelCh",
            Kind::NetPlugin => "NetPlugin",
            Kind::GroupApi => "GroupApi",
            Kind::CollApi => "CollApi",
            Kind::P2pApi => "P2pApi",
            Kind::KernelLaunch => "KernelLaunch",
            Kind::CeColl => "CeColl",
            Kind::CeSync => "CeSync",
            Kind::CeBatch => "CeBatch",
        }
    }

    /// Whether `state` belongs to this kind (NCCL's state table, ABI doc §2.3).
    pub fn accepts_state(self, state: i32) -> bool {
        match self {
            Kind::ProxyOp => matches!(state, 0..=7 | 19),
            Kind::ProxyStep => matches!(state, 8..=12 | 20),
            Kind::ProxyCtrl => matches!(state, 13..=18),
            Kind::NetPlugin => state == 21,
            Kind::KernelCh => state == 22,
            Kind::GroupApi => matches!(state, 23 | 24),
            Kind::CeColl => matches!(state, 25 | 26),
            Kind::CeSync => matches!(state, 27 | 28),
            Kind::CeBatch => matches!(state, 29 | 30),
            _ => false,
        }
    }
}

/// Kind-specific descriptor fields, copied at start (plain data, no pointers
/// that could dangle: strings are copied, buffers and streams kept as numbers).
#[derive(Debug, Clone, Copy, Default)]
pub enum Info {
    #[default]
    None,
    GroupApi {
        graph_captured: bool,
        depth: i32,
    },
    CollApi {
        func: Str16,
        count: u64,
        datatype: Str16,
        root: i32,
        stream: u64,
        graph_captured: bool,
    },
    P2pApi {
        func: Str16,
        count: u64,
        datatype: Str16,
        stream: u64,
        graph_captured: bool,
    },
    KernelLaunch {
        stream: u64,
    },
    Coll {
        seq: u64,
        func: Str16,
        count: u64,
        root: i32,
        datatype: Str16,
        n_channels: u8,
        n_warps: u8,
        algo: Str16,
        proto: Str16,
        parent_group: u64,
    },
    P2p {
        func: Str16,
        datatype: Str16,
        count: u64,
        peer: i32,
        n_channels: u8,
        parent_group: u64,
    },
    ProxyOp {
        pid: i32,
        channel: u8,
        peer: i32,
        n_steps: i32,
        chunk_size: i32,
        is_send: bool,
    },
    ProxyStep {
        step: i32,
    },
    KernelCh {
        channel: u8,
        gpu_start: u64,
    },
    NetPlugin {
        id: i64,
    },
    CeColl {
        seq: u64,
        func: Str16,
        count: u64,
        root: i32,
        datatype: Str16,
        sync: Str16,
        stream: u64,
    },
    CeSync {
        complete: bool,
        n_ranks: i32,
    },
    CeBatch {
        num_ops: i32,
        total_bytes: u64,
        intra_sync: bool,
    },
}

impl Info {
    /// Display name of an event: the collective/p2p function where there is one.
    pub fn func(&self) -> Option<&Str16> {
        match self {
            Info::CollApi { func, .. }
            | Info::P2pApi { func, .. }
            | Info::Coll { func, .. }
            | Info::P2p { func, .. }
            | Info::CeColl { func, .. } => Some(func),
            _ => None,
        }
    }
}

/// What `startEvent` hands the engine, whatever the ABI version.
#[derive(Debug, Clone, Copy)]
pub struct StartArg {
    pub kind: Kind,
    /// `parentObj` as a number (0 = none); validated by the engine, never dereferenced.
    pub parent: u64,
    pub rank: i32,
    pub info: Info,
    /// Flags found while converting (e.g. `node::flag::BAD_STRING`).
    pub flags: u32,
}

/// A state record, whatever the ABI version: the state value and the one
/// argument word that matters for it (transSize, appendedProxyOps, pTimer...).
#[derive(Debug, Clone, Copy)]
pub struct StateArg {
    pub state: i32,
    pub arg: Option<u64>,
}
