//! The internal event model every ABI version converts into.
//!
//! NCCL's `type` and state values stay integers until they are matched here;
//! an unknown value becomes `None` and is counted, never transmuted.

use crate::strings::Str16;
use crate::symbols::{self, Sym};

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
    /// v7: one barrier phase of a kernel channel (child of its KernelCh).
    KernelPhase = 15,
}

impl Kind {
    pub const ALL: [Kind; 16] = [
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
        Kind::KernelPhase,
    ];

    /// The kind for an NCCL type value: exactly one known bit, else `None`.
    #[inline]
    pub fn from_type(ty: u64) -> Option<Kind> {
        if ty.count_ones() != 1 {
            return None;
        }
        // A match, not a table: the arms are the identity on the
        // discriminants, which the compiler turns into a range check (no
        // data line to read on a start).
        Some(match ty.trailing_zeros() {
            0 => Kind::Group,
            1 => Kind::Coll,
            2 => Kind::P2p,
            3 => Kind::ProxyOp,
            4 => Kind::ProxyStep,
            5 => Kind::ProxyCtrl,
            6 => Kind::KernelCh,
            7 => Kind::NetPlugin,
            8 => Kind::GroupApi,
            9 => Kind::CollApi,
            10 => Kind::P2pApi,
            11 => Kind::KernelLaunch,
            12 => Kind::CeColl,
            13 => Kind::CeSync,
            14 => Kind::CeBatch,
            15 => Kind::KernelPhase,
            _ => return None,
        })
    }

    /// The NCCL type bit.
    #[inline]
    pub fn bit(self) -> u64 {
        1 << self as u8
    }

    /// Name used in traces and counters (NCCL's spelling without the prefix).
    pub fn name(self) -> &'static str {
        // The discriminant is the bit index.
        crate::abi::ty::NAMES[self as usize]
    }

    /// Whether `state` belongs to this kind (NCCL's state table, ABI doc §2.3).
    pub fn accepts_state(self, state: i32) -> bool {
        // One bit per accepted state (all below 32), per kind: a load and a
        // shift on every recordEventState instead of a jump table.
        const fn bits(states: &[i32]) -> u32 {
            let mut m = 0;
            let mut i = 0;
            while i < states.len() {
                m |= 1 << states[i];
                i += 1;
            }
            m
        }
        const ACCEPTS: [u32; 16] = {
            let mut t = [0u32; 16];
            t[Kind::ProxyOp as usize] = bits(&[0, 1, 2, 3, 4, 5, 6, 7, 19]);
            t[Kind::ProxyStep as usize] = bits(&[8, 9, 10, 11, 12, 20]);
            t[Kind::ProxyCtrl as usize] = bits(&[13, 14, 15, 16, 17, 18]);
            t[Kind::NetPlugin as usize] = bits(&[21]);
            t[Kind::KernelCh as usize] = bits(&[22]);
            t[Kind::GroupApi as usize] = bits(&[23, 24]);
            t[Kind::CeColl as usize] = bits(&[25, 26]);
            t[Kind::CeSync as usize] = bits(&[27, 28]);
            t[Kind::CeBatch as usize] = bits(&[29, 30]);
            t[Kind::KernelPhase as usize] = bits(&[31]);
            t
        };
        (state as u32) < 32 && ACCEPTS[self as usize] >> state & 1 != 0
    }
}

/// Kind-specific descriptor fields, copied at start (plain data, no pointers
/// that could dangle: strings are copied, buffers and streams kept as numbers).
///
/// `S` is how a string is held: [`Str16`] in records (sinks, tools), a
/// 2-byte [`Sym`] on the hot path (descriptors, slab nodes, the record ring;
/// see `symbols.rs`), turned into `Str16` by [`Info::resolve`] on the writer
/// thread.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Info<S = Str16> {
    #[default]
    None,
    GroupApi {
        graph_captured: bool,
        depth: i32,
    },
    CollApi {
        func: S,
        count: u64,
        datatype: S,
        root: i32,
        stream: u64,
        graph_captured: bool,
        /// v7 `userTag` (0: untagged or older ABI).
        user_tag: u64,
    },
    P2pApi {
        func: S,
        count: u64,
        datatype: S,
        stream: u64,
        graph_captured: bool,
        user_tag: u64,
    },
    KernelLaunch {
        stream: u64,
    },
    Coll {
        seq: u64,
        func: S,
        count: u64,
        root: i32,
        datatype: S,
        n_channels: u8,
        n_warps: u8,
        algo: S,
        proto: S,
        parent_group: u64,
        /// v7 `kernelVariant` (empty before v7).
        kernel_variant: S,
        /// v7 `isSymColl`: a symmetric-memory kernel (`algo` then names the
        /// variant, `proto` is empty).
        is_sym_coll: bool,
        user_tag: u64,
    },
    P2p {
        func: S,
        datatype: S,
        count: u64,
        peer: i32,
        n_channels: u8,
        parent_group: u64,
        user_tag: u64,
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
        func: S,
        count: u64,
        root: i32,
        datatype: S,
        sync: S,
        stream: u64,
        user_tag: u64,
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
    /// v7: `phase` is NCCL's `phaseId` ([`crate::abi::phase`]); the GPU end
    /// comes with state 31 (`ncclProfilerKernelPhaseStop`).
    KernelPhase {
        channel: u8,
        phase: u8,
        gpu_start: u64,
    },
}

/// Name of a KernelPhase `phaseId`.
pub fn phase_name(phase: u8) -> std::borrow::Cow<'static, str> {
    match phase {
        crate::abi::phase::INITIAL_SYNC => "initial_sync".into(),
        crate::abi::phase::COMPUTE => "compute".into(),
        crate::abi::phase::FINAL_SYNC => "final_sync".into(),
        n => format!("phase{n}").into(),
    }
}

impl<S> Info<S> {
    /// Display name of an event: the collective/p2p function where there is one.
    pub fn func(&self) -> Option<&S> {
        match self {
            Info::CollApi { func, .. }
            | Info::P2pApi { func, .. }
            | Info::Coll { func, .. }
            | Info::P2p { func, .. }
            | Info::CeColl { func, .. } => Some(func),
            _ => None,
        }
    }

    /// The v7 user tag of an operation (0: none).
    pub fn user_tag(&self) -> u64 {
        match *self {
            Info::CollApi { user_tag, .. }
            | Info::P2pApi { user_tag, .. }
            | Info::Coll { user_tag, .. }
            | Info::P2p { user_tag, .. }
            | Info::CeColl { user_tag, .. } => user_tag,
            _ => 0,
        }
    }

    /// The same fields with every string mapped by `f`.
    pub fn map_strings<T>(self, mut f: impl FnMut(S) -> T) -> Info<T> {
        match self {
            Info::None => Info::None,
            Info::GroupApi {
                graph_captured,
                depth,
            } => Info::GroupApi {
                graph_captured,
                depth,
            },
            Info::CollApi {
                func,
                count,
                datatype,
                root,
                stream,
                graph_captured,
                user_tag,
            } => Info::CollApi {
                func: f(func),
                count,
                datatype: f(datatype),
                root,
                stream,
                graph_captured,
                user_tag,
            },
            Info::P2pApi {
                func,
                count,
                datatype,
                stream,
                graph_captured,
                user_tag,
            } => Info::P2pApi {
                func: f(func),
                count,
                datatype: f(datatype),
                stream,
                graph_captured,
                user_tag,
            },
            Info::KernelLaunch { stream } => Info::KernelLaunch { stream },
            Info::Coll {
                seq,
                func,
                count,
                root,
                datatype,
                n_channels,
                n_warps,
                algo,
                proto,
                parent_group,
                kernel_variant,
                is_sym_coll,
                user_tag,
            } => Info::Coll {
                seq,
                func: f(func),
                count,
                root,
                datatype: f(datatype),
                n_channels,
                n_warps,
                algo: f(algo),
                proto: f(proto),
                parent_group,
                kernel_variant: f(kernel_variant),
                is_sym_coll,
                user_tag,
            },
            Info::P2p {
                func,
                datatype,
                count,
                peer,
                n_channels,
                parent_group,
                user_tag,
            } => Info::P2p {
                func: f(func),
                datatype: f(datatype),
                count,
                peer,
                n_channels,
                parent_group,
                user_tag,
            },
            Info::ProxyOp {
                pid,
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
            } => Info::ProxyOp {
                pid,
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
            },
            Info::ProxyStep { step } => Info::ProxyStep { step },
            Info::KernelCh { channel, gpu_start } => Info::KernelCh { channel, gpu_start },
            Info::NetPlugin { id } => Info::NetPlugin { id },
            Info::CeColl {
                seq,
                func,
                count,
                root,
                datatype,
                sync,
                stream,
                user_tag,
            } => Info::CeColl {
                seq,
                func: f(func),
                count,
                root,
                datatype: f(datatype),
                sync: f(sync),
                stream,
                user_tag,
            },
            Info::CeSync { complete, n_ranks } => Info::CeSync { complete, n_ranks },
            Info::CeBatch {
                num_ops,
                total_bytes,
                intra_sync,
            } => Info::CeBatch {
                num_ops,
                total_bytes,
                intra_sync,
            },
            Info::KernelPhase {
                channel,
                phase,
                gpu_start,
            } => Info::KernelPhase {
                channel,
                phase,
                gpu_start,
            },
        }
    }
}

impl<S> Info<S> {
    /// Children an event waits for, and the mask bits under which NCCL sends
    /// them (none: 0). Only children NCCL is known to send are counted, so a
    /// shortfall is a real anomaly (flagged `children_incomplete` when the
    /// wait is cut short).
    ///
    /// A P2p whose peer is the rank itself (the self-copy inside all_to_all)
    /// is done without a channel: NCCL 2.28.9 reports one channel for it but
    /// sends neither KernelCh nor ProxyOp children (two-rank recordings in
    /// tests/fixtures/nccl-2.28.9-2rank-net), so it completes at stop.
    #[inline(always)]
    pub fn children(&self, rank: i32) -> (u8, u16) {
        use crate::abi::ty;
        const TASK_CHILDREN: u64 = ty::PROXY_OP | ty::PROXY_STEP | ty::KERNEL_CH | ty::NET_PLUGIN;
        const fn gate(bits: u64) -> u16 {
            assert!(bits <= u16::MAX as u64);
            bits as u16
        }
        match self {
            Info::CollApi { .. } => (1, const { gate(ty::COLL | TASK_CHILDREN) }),
            Info::P2pApi { .. } => (1, const { gate(ty::P2P | TASK_CHILDREN) }),
            Info::P2p { peer, .. } if *peer == rank => (0, 0),
            Info::Coll { n_channels, .. } | Info::P2p { n_channels, .. } => {
                (*n_channels, const { gate(ty::KERNEL_CH) })
            }
            _ => (0, 0),
        }
    }
}

impl Info<Sym> {
    /// The strings of the process-wide symbol table (writer thread).
    pub fn resolve(self) -> Info<Str16> {
        self.map_strings(symbols::resolve)
    }
}

impl Info<Str16> {
    /// The symbol form (interns every string: tests and tools, not the hot path).
    pub fn intern(self) -> Info<Sym> {
        self.map_strings(symbols::intern)
    }
}

/// What `startEvent` hands the engine, whatever the ABI version.
#[derive(Debug, Clone, Copy)]
pub struct StartArg {
    pub kind: Kind,
    /// `parentObj` as a number (0 = none); validated by the engine, never dereferenced.
    pub parent: u64,
    pub rank: i32,
    pub info: Info<Sym>,
    /// Flags found while converting (e.g. `record::flag::BAD_STRING`).
    pub flags: u32,
    /// The children the event waits for while one of the `children_gate`
    /// mask bits is on ([`Info::children`]; the engine applies the mask in
    /// force at the start).
    pub children: u8,
    pub children_gate: u16,
}

/// A state record, whatever the ABI version: the state value and the one
/// argument word that matters for it (transSize, appendedProxyOps, pTimer...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateArg {
    pub state: i32,
    pub arg: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::ty;

    #[test]
    fn accepted_states_per_kind() {
        // NCCL's state numbers per kind (profiler ABI v4+), written out.
        let spec = |k: Kind, s: i32| match k {
            Kind::ProxyOp => matches!(s, 0..=7 | 19),
            Kind::ProxyStep => matches!(s, 8..=12 | 20),
            Kind::ProxyCtrl => matches!(s, 13..=18),
            Kind::NetPlugin => s == 21,
            Kind::KernelCh => s == 22,
            Kind::GroupApi => matches!(s, 23 | 24),
            Kind::CeColl => matches!(s, 25 | 26),
            Kind::CeSync => matches!(s, 27 | 28),
            Kind::CeBatch => matches!(s, 29 | 30),
            Kind::KernelPhase => s == 31,
            _ => false,
        };
        let states = (-70..70).chain([i32::MIN, i32::MAX, 1 << 30, -1 << 30]);
        for k in Kind::ALL {
            for s in states.clone() {
                assert_eq!(k.accepts_state(s), spec(k, s), "{k:?} state {s}");
            }
        }
    }

    #[test]
    fn children_and_their_mask_gates() {
        let s = Sym::EMPTY;
        let coll = Info::Coll {
            seq: 1,
            func: s,
            count: 1,
            root: 0,
            datatype: s,
            n_channels: 8,
            n_warps: 16,
            algo: s,
            proto: s,
            parent_group: 0,
            kernel_variant: s,
            is_sym_coll: false,
            user_tag: 0,
        };
        assert_eq!(coll.children(0), (8, ty::KERNEL_CH as u16));
        let p2p = |peer| Info::<Sym>::P2p {
            func: s,
            datatype: s,
            count: 1,
            peer,
            n_channels: 2,
            parent_group: 0,
            user_tag: 0,
        };
        assert_eq!(p2p(1).children(0), (2, ty::KERNEL_CH as u16));
        assert_eq!(p2p(3).children(3), (0, 0), "self-copy: no children");
        let api = Info::<Sym>::CollApi {
            func: s,
            count: 1,
            datatype: s,
            root: 0,
            stream: 0,
            graph_captured: false,
            user_tag: 0,
        };
        let task = ty::PROXY_OP | ty::PROXY_STEP | ty::KERNEL_CH | ty::NET_PLUGIN;
        assert_eq!(api.children(0), (1, (ty::COLL | task) as u16));
        let p2p_api = Info::<Sym>::P2pApi {
            func: s,
            count: 1,
            datatype: s,
            stream: 0,
            graph_captured: false,
            user_tag: 0,
        };
        assert_eq!(p2p_api.children(0), (1, (ty::P2P | task) as u16));
        assert_eq!(Info::<Sym>::ProxyStep { step: 1 }.children(0), (0, 0));
        assert_eq!(Info::<Sym>::None.children(0), (0, 0));
    }
}
