//! Per-version conversion of NCCL descriptors and state arguments into the
//! internal model. Only the union member selected by a *known* type is read;
//! strings are read through `strings::read_sym_with` (never trusted) and
//! carried as symbols.

use crate::abi::*;
use crate::model::{Info, Kind, StartArg, StateArg};
use crate::record::flag;
use crate::strings::{read_sym_with, Memo, Memoed, Slot, Str16};
use crate::symbols::{self, Sym};
use std::ffi::c_char;

/// Reads a descriptor's strings (through the calling thread's [`Memo`], which
/// also makes the re-read decision: no thread-local access here) and collects
/// the bad-string flag and whether the symbol table was full.
struct Strs<'a> {
    memo: Option<&'a Memo>,
    flags: u32,
    full: bool,
}

impl<'a> Strs<'a> {
    #[inline]
    fn new(memo: Option<&'a Memo>) -> Strs<'a> {
        Strs {
            memo,
            flags: 0,
            full: false,
        }
    }

    /// The symbols of a descriptor's `N` strings: the memo's when the
    /// pointers are the slot's last ones, else read (cache, or memory when
    /// the re-read is due or the thread has no memo).
    #[inline(always)]
    fn get<const N: usize>(&mut self, slot: Slot, ptrs: [*const c_char; N]) -> [Sym; N] {
        let addrs = ptrs.map(|p| p as usize);
        let reread = match self.memo.map(|m| m.lookup(slot, addrs)) {
            Some(Memoed::Hit(syms)) => return syms,
            Some(Memoed::Miss) => false,
            // No thread-local storage (thread exit): always from memory.
            Some(Memoed::Reread) | None => true,
        };
        // A copy made here, on the miss path only: the caller's pointers
        // stay in registers on the hit path.
        let copy: [usize; N] = std::array::from_fn(|i| addrs[i]);
        let (syms, flags, full) = read(self.memo, slot, &copy, reread);
        self.flags |= flags;
        self.full |= full;
        syms
    }

    /// A string built here (v1's numeric codes).
    fn intern(&mut self, s: &str) -> Sym {
        let s = symbols::intern(Str16::from_bytes(s.as_bytes()));
        self.full |= s == Sym::FULL;
        s
    }
}

/// A memo miss: reads `addrs` through the cache (from memory if `reread`)
/// and memoizes clean reads. Returns the symbols, the flags found and
/// whether the table was full (by value: the caller's `Strs` stays in
/// registers on the memo-hit path).
#[inline(never)]
fn read<const N: usize>(
    memo: Option<&Memo>,
    slot: Slot,
    addrs: &[usize; N],
    reread: bool,
) -> ([Sym; N], u32, bool) {
    let (mut flags, mut full) = (0, false);
    let syms = addrs.map(|a| {
        let (s, bad) = read_sym_with(a as *const c_char, reread);
        if bad {
            flags |= flag::BAD_STRING;
        }
        full |= s == Sym::FULL;
        s
    });
    if let (0, false, Some(m)) = (flags, full, memo) {
        m.keep(slot, *addrs, syms);
    }
    (syms, flags, full)
}

/// An event with a string the full symbol table could not take (shown as
/// `"?"`): counted (`symbols_full`), and said once.
#[cold]
fn count_full() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Some(e) = crate::engine::Engine::try_get() {
        e.counters.symbols_full.incr();
        if !WARNED.swap(true, Ordering::Relaxed) {
            crate::log::warn(
                e,
                &format!(
                    "string table full ({} distinct names); new names are written as \"?\" (symbols_full)",
                    symbols::CAPACITY - 2
                ),
            );
        }
    }
}

/// The Coll fields that every version since v2 names alike (v2/v3 call the
/// channel count `nMaxChannels`; v5+ add the Group handle).
macro_rules! coll_info {
    ($c:expr, $s:expr, $channels:ident, $group:expr) => {
        coll_info!($c, $s, $channels, $group, Sym::EMPTY, false, 0)
    };
    ($c:expr, $s:expr, $channels:ident, $group:expr, $variant:expr, $sym:expr, $tag:expr) => {{
        let c = $c;
        let [func, datatype, algo, proto] =
            $s.get(Slot::Coll, [c.func, c.datatype, c.algo, c.proto]);
        Info::Coll {
            seq: c.seq_number,
            func,
            count: c.count as u64,
            root: c.root,
            datatype,
            n_channels: c.$channels,
            n_warps: c.n_warps,
            algo,
            proto,
            parent_group: $group,
            kernel_variant: $variant,
            is_sym_coll: $sym,
            user_tag: $tag,
        }
    }};
}

#[inline(always)]
fn finish(
    kind: Kind,
    parent: *mut std::ffi::c_void,
    rank: i32,
    info: Info<Sym>,
    s: Strs,
) -> Option<StartArg> {
    if s.full {
        count_full();
    }
    let (children, children_gate) = info.children(rank);
    Some(StartArg {
        kind,
        parent: parent as u64,
        rank,
        info,
        flags: s.flags,
        children,
        children_gate,
    })
}

/// Builds one kind's [`StartArg`] in a function of its own (one instance per
/// `info` closure): each kind writes only its own fields, where one shared
/// tail after a `match` wrote every variant's words for every kind.
#[inline(never)]
fn build(
    kind: Kind,
    parent: *mut std::ffi::c_void,
    rank: i32,
    memo: Option<&Memo>,
    info: impl FnOnce(&mut Strs) -> Info<Sym>,
) -> Option<StartArg> {
    let mut s = Strs::new(memo);
    let info = info(&mut s);
    finish(kind, parent, rank, info, s)
}

/// v5 and v6 (same layout; v5 never sends the CE types). A KernelPhase type
/// (only v7 defines it) is refused here: v6's union has no such member.
///
/// # Safety
/// `d` must point to a readable `DescrV6` (NCCL's descriptor for this call).
#[inline]
pub unsafe fn start_v6(d: *const DescrV6, memo: Option<&Memo>) -> Option<StartArg> {
    // SAFETY: the caller guarantees `d` is readable for the size of DescrV6.
    let d = unsafe { &*d };
    if d.ty & !ty::ALL_V6 != 0 {
        return None;
    }
    let kind = Kind::from_type(d.ty)?;
    let (p, r) = (d.parent_obj, d.rank);
    let u = &d.u;
    // SAFETY: (every union read below) NCCL fills the member named by
    // `type`, and every member is plain integers/pointers valid for any bits.
    unsafe {
        match kind {
            Kind::GroupApi => build(kind, p, r, memo, |_| Info::GroupApi {
                graph_captured: bool_of(&u.group_api.graph_captured),
                depth: u.group_api.group_depth,
            }),
            Kind::CollApi => build(kind, p, r, memo, |s| {
                let a = &u.coll_api;
                let [func, datatype] = s.get(Slot::CollApi, [a.func, a.datatype]);
                Info::CollApi {
                    func,
                    count: a.count as u64,
                    datatype,
                    root: a.root,
                    stream: a.stream as u64,
                    graph_captured: bool_of(&a.graph_captured),
                    user_tag: 0,
                }
            }),
            Kind::P2pApi => build(kind, p, r, memo, |s| {
                let a = &u.p2p_api;
                let [func, datatype] = s.get(Slot::P2pApi, [a.func, a.datatype]);
                Info::P2pApi {
                    func,
                    count: a.count as u64,
                    datatype,
                    stream: a.stream as u64,
                    graph_captured: bool_of(&a.graph_captured),
                    user_tag: 0,
                }
            }),
            Kind::KernelLaunch => build(kind, p, r, memo, |_| Info::KernelLaunch {
                stream: u.kernel_launch.stream as u64,
            }),
            Kind::Coll => build(kind, p, r, memo, |s| {
                coll_info!(&u.coll, s, n_channels, u.coll.parent_group as u64)
            }),
            Kind::P2p => build(kind, p, r, memo, |s| {
                let q = &u.p2p;
                let [func, datatype] = s.get(Slot::P2p, [q.func, q.datatype]);
                Info::P2p {
                    func,
                    datatype,
                    count: q.count as u64,
                    peer: q.peer,
                    n_channels: q.n_channels,
                    parent_group: q.parent_group as u64,
                    user_tag: 0,
                }
            }),
            Kind::KernelCh => build(kind, p, r, memo, |_| Info::KernelCh {
                channel: u.kernel_ch.channel_id,
                gpu_start: u.kernel_ch.p_timer,
            }),
            Kind::CeColl => build(kind, p, r, memo, |s| {
                let c = &u.ce_coll;
                let [func, datatype, sync] =
                    s.get(Slot::CeColl, [c.func, c.datatype, c.sync_strategy]);
                Info::CeColl {
                    seq: c.seq_number,
                    func,
                    count: c.count as u64,
                    root: c.root,
                    datatype,
                    sync,
                    stream: c.stream as u64,
                    user_tag: 0,
                }
            }),
            Kind::CeSync => build(kind, p, r, memo, |_| Info::CeSync {
                complete: bool_of(&u.ce_sync.is_complete),
                n_ranks: u.ce_sync.n_ranks,
            }),
            Kind::CeBatch => build(kind, p, r, memo, |_| Info::CeBatch {
                num_ops: u.ce_batch.num_ops,
                total_bytes: u.ce_batch.total_bytes as u64,
                intra_sync: bool_of(&u.ce_batch.use_intra_sync),
            }),
            Kind::ProxyOp => build(kind, p, r, memo, |_| {
                common(kind, &u.proxy_op, &u.proxy_step, &u.net_plugin)
            }),
            Kind::ProxyStep => build(kind, p, r, memo, |_| Info::ProxyStep {
                step: u.proxy_step.step,
            }),
            _ => build(kind, p, r, memo, |_| {
                common(kind, &u.proxy_op, &u.proxy_step, &u.net_plugin)
            }),
        }
    }
}

/// v7 (NCCL 2.31 and later): v6's members plus `userTag` on the operation
/// members, `kernelVariant`/`isSymColl` on Coll, and KernelPhase.
///
/// # Safety
/// `d` must point to a readable `DescrV7` (NCCL's descriptor for this call).
#[inline]
pub unsafe fn start_v7(d: *const DescrV7, memo: Option<&Memo>) -> Option<StartArg> {
    // SAFETY: the caller guarantees `d` is readable for the size of DescrV7.
    let d = unsafe { &*d };
    let kind = Kind::from_type(d.ty)?;
    let (p, r) = (d.parent_obj, d.rank);
    let u = &d.u;
    // SAFETY: (every union read below) NCCL fills the member named by
    // `type`, and every member is plain integers/pointers valid for any bits.
    unsafe {
        match kind {
            Kind::GroupApi => build(kind, p, r, memo, |_| Info::GroupApi {
                graph_captured: bool_of(&u.group_api.graph_captured),
                depth: u.group_api.group_depth,
            }),
            Kind::CollApi => build(kind, p, r, memo, |s| {
                let a = &u.coll_api;
                let [func, datatype] = s.get(Slot::CollApi, [a.func, a.datatype]);
                Info::CollApi {
                    func,
                    count: a.count as u64,
                    datatype,
                    root: a.root,
                    stream: a.stream as u64,
                    graph_captured: bool_of(&a.graph_captured),
                    user_tag: a.user_tag,
                }
            }),
            Kind::P2pApi => build(kind, p, r, memo, |s| {
                let a = &u.p2p_api;
                let [func, datatype] = s.get(Slot::P2pApi, [a.func, a.datatype]);
                Info::P2pApi {
                    func,
                    count: a.count as u64,
                    datatype,
                    stream: a.stream as u64,
                    graph_captured: bool_of(&a.graph_captured),
                    user_tag: a.user_tag,
                }
            }),
            Kind::KernelLaunch => build(kind, p, r, memo, |_| Info::KernelLaunch {
                stream: u.kernel_launch.stream as u64,
            }),
            Kind::Coll => build(kind, p, r, memo, |s| {
                let c = &u.coll;
                // The variant has a slot of its own: the Coll slot's memo
                // keeps answering the four strings every version has.
                let [variant] = s.get(Slot::CollVariant, [c.kernel_variant]);
                coll_info!(
                    c,
                    s,
                    n_channels,
                    c.parent_group as u64,
                    variant,
                    bool_of(&c.is_sym_coll),
                    c.user_tag
                )
            }),
            Kind::P2p => build(kind, p, r, memo, |s| {
                let q = &u.p2p;
                let [func, datatype] = s.get(Slot::P2p, [q.func, q.datatype]);
                Info::P2p {
                    func,
                    datatype,
                    count: q.count as u64,
                    peer: q.peer,
                    n_channels: q.n_channels,
                    parent_group: q.parent_group as u64,
                    user_tag: q.user_tag,
                }
            }),
            Kind::KernelCh => build(kind, p, r, memo, |_| Info::KernelCh {
                channel: u.kernel_ch.channel_id,
                gpu_start: u.kernel_ch.p_timer,
            }),
            Kind::KernelPhase => build(kind, p, r, memo, |_| Info::KernelPhase {
                channel: u.kernel_phase.channel_id,
                phase: u.kernel_phase.phase_id,
                gpu_start: u.kernel_phase.p_timer,
            }),
            Kind::CeColl => build(kind, p, r, memo, |s| {
                let c = &u.ce_coll;
                let [func, datatype, sync] =
                    s.get(Slot::CeColl, [c.func, c.datatype, c.sync_strategy]);
                Info::CeColl {
                    seq: c.seq_number,
                    func,
                    count: c.count as u64,
                    root: c.root,
                    datatype,
                    sync,
                    stream: c.stream as u64,
                    user_tag: c.user_tag,
                }
            }),
            Kind::CeSync => build(kind, p, r, memo, |_| Info::CeSync {
                complete: bool_of(&u.ce_sync.is_complete),
                n_ranks: u.ce_sync.n_ranks,
            }),
            Kind::CeBatch => build(kind, p, r, memo, |_| Info::CeBatch {
                num_ops: u.ce_batch.num_ops,
                total_bytes: u.ce_batch.total_bytes as u64,
                intra_sync: bool_of(&u.ce_batch.use_intra_sync),
            }),
            Kind::ProxyStep => build(kind, p, r, memo, |_| Info::ProxyStep {
                step: u.proxy_step.step,
            }),
            _ => build(kind, p, r, memo, |_| {
                common(kind, &u.proxy_op, &u.proxy_step, &u.net_plugin)
            }),
        }
    }
}

/// Reads a C++ `bool` as a byte: NCCL writes 0/1, garbage must not become UB.
fn bool_of(b: &bool) -> bool {
    // SAFETY: a `bool` field occupies one readable byte; reading it as u8 is
    // valid for any bit pattern, unlike reading it as `bool`.
    unsafe { *(b as *const bool as *const u8) != 0 }
}

fn common(kind: Kind, op: &ProxyOpD, step: &ProxyStepD, net: &NetPluginD) -> Info<Sym> {
    match kind {
        Kind::ProxyOp => Info::ProxyOp {
            pid: op.pid,
            channel: op.channel_id,
            peer: op.peer,
            n_steps: op.n_steps,
            chunk_size: op.chunk_size,
            is_send: op.is_send != 0,
        },
        Kind::ProxyStep => Info::ProxyStep { step: step.step },
        Kind::NetPlugin => Info::NetPlugin { id: net.id },
        _ => Info::None,
    }
}

/// Kinds a pre-v5 table can carry (the `type` is a byte there).
fn old_kind(ty: u8, max: u64) -> Option<Kind> {
    let ty = u64::from(ty);
    (ty & max == ty).then(|| Kind::from_type(ty)).flatten()
}

/// v4 (NCCL 2.27): u8 type, no API events, Coll/P2p parent is the Group.
///
/// # Safety
/// `d` must point to a readable `DescrV4`.
#[inline]
pub unsafe fn start_v4(d: *const DescrV4, memo: Option<&Memo>) -> Option<StartArg> {
    // SAFETY: caller guarantees readability.
    let d = unsafe { &*d };
    let kind = old_kind(d.ty, ty::ALL_V3)?;
    let (p, r) = (d.parent_obj, d.rank);
    let u = &d.u;
    // SAFETY: as in start_v6: the member named by `type`, plain data.
    unsafe {
        match kind {
            Kind::Coll => build(kind, p, r, memo, |s| coll_info!(&u.coll, s, n_channels, 0)),
            Kind::P2p => build(kind, p, r, memo, |s| {
                let q = &u.p2p;
                let [func, datatype] = s.get(Slot::P2p, [q.func, q.datatype]);
                Info::P2p {
                    func,
                    datatype,
                    count: q.count as u64,
                    peer: q.peer,
                    n_channels: q.n_channels,
                    parent_group: 0,
                    user_tag: 0,
                }
            }),
            Kind::KernelCh => build(kind, p, r, memo, |_| Info::KernelCh {
                channel: u.kernel_ch.channel_id,
                gpu_start: u.kernel_ch.p_timer,
            }),
            Kind::ProxyStep => build(kind, p, r, memo, |_| Info::ProxyStep {
                step: u.proxy_step.step,
            }),
            _ => build(kind, p, r, memo, |_| {
                common(kind, &u.proxy_op, &u.proxy_step, &u.net_plugin)
            }),
        }
    }
}

/// v3 (NCCL 2.26).
///
/// # Safety
/// `d` must point to a readable `DescrV3`.
#[inline]
pub unsafe fn start_v3(d: *const DescrV3, memo: Option<&Memo>) -> Option<StartArg> {
    // SAFETY: caller guarantees readability.
    let d = unsafe { &*d };
    let kind = old_kind(d.ty, ty::ALL_V3)?;
    let mut s = Strs::new(memo);
    // SAFETY: as in start_v6.
    let info = unsafe {
        match kind {
            Kind::Coll => coll_info!(&d.u.coll, s, n_max_channels, 0),
            Kind::P2p => p2p_v2(&d.u.p2p, &mut s),
            Kind::KernelCh => Info::KernelCh {
                channel: d.u.kernel_ch.channel_id,
                gpu_start: 0,
            },
            _ => common(kind, &d.u.proxy_op, &d.u.proxy_step, &d.u.net_plugin),
        }
    };
    // v3 P2p carries no channel count, so nothing waits for KernelCh there.
    finish(kind, d.parent_obj, d.rank, info, s)
}

fn p2p_v2(p: &P2pV2, s: &mut Strs) -> Info<Sym> {
    let [func, datatype] = s.get(Slot::P2p, [p.func, p.datatype]);
    Info::P2p {
        func,
        datatype,
        count: p.count as u64,
        peer: p.peer,
        n_channels: 0,
        parent_group: 0,
        user_tag: 0,
    }
}

const NO_NET: NetPluginD = NetPluginD {
    id: 0,
    data: std::ptr::null_mut(),
};

/// v2 (NCCL 2.24/2.25).
///
/// # Safety
/// `d` must point to a readable `DescrV2`.
#[inline]
pub unsafe fn start_v2(d: *const DescrV2, memo: Option<&Memo>) -> Option<StartArg> {
    // SAFETY: caller guarantees readability.
    let d = unsafe { &*d };
    let kind = old_kind(d.ty, ty::ALL_V1)?;
    let mut s = Strs::new(memo);
    // SAFETY: as in start_v6.
    let info = unsafe {
        match kind {
            Kind::Coll => coll_info!(&d.u.coll, s, n_max_channels, 0),
            Kind::P2p => p2p_v2(&d.u.p2p, &mut s),
            _ => common(kind, &d.u.proxy_op, &d.u.proxy_step, &NO_NET),
        }
    };
    finish(kind, d.parent_obj, d.rank, info, s)
}

/// v1 (NCCL 2.23): numeric codes for func/datatype/algo/proto.
///
/// # Safety
/// `d` must point to a readable `DescrV1`.
#[inline]
pub unsafe fn start_v1(d: *const DescrV1, memo: Option<&Memo>) -> Option<StartArg> {
    // SAFETY: caller guarantees readability.
    let d = unsafe { &*d };
    let kind = old_kind(d.ty, ty::ALL_V1)?;
    let mut s = Strs::new(memo);
    let mut name = |text: String| s.intern(&text);
    // SAFETY: as in start_v6.
    let info = unsafe {
        match kind {
            Kind::Coll => {
                let c = &d.u.coll;
                Info::Coll {
                    seq: c.seq_number,
                    func: name(v1_func(c.func)),
                    count: c.count as u64,
                    root: c.root,
                    datatype: name(format!("dt{}", c.datatype)),
                    n_channels: c.n_max_channels,
                    n_warps: c.n_warps,
                    algo: name(format!("algo{}", c.algo)),
                    proto: name(format!("proto{}", c.proto)),
                    parent_group: 0,
                    kernel_variant: Sym::EMPTY,
                    is_sym_coll: false,
                    user_tag: 0,
                }
            }
            Kind::P2p => {
                let p = &d.u.p2p;
                Info::P2p {
                    func: name(v1_func(p.func)),
                    datatype: name(format!("dt{}", p.datatype)),
                    count: p.count as u64,
                    peer: p.peer,
                    n_channels: 0,
                    parent_group: 0,
                    user_tag: 0,
                }
            }
            _ => common(kind, &d.u.proxy_op, &d.u.proxy_step, &NO_NET),
        }
    };
    finish(kind, d.parent_obj, d.rank, info, s)
}

/// NCCL 2.23's `ncclFunc_t` order.
fn v1_func(code: u8) -> String {
    const NAMES: [&str; 8] = [
        "Broadcast",
        "Reduce",
        "AllGather",
        "ReduceScatter",
        "AllReduce",
        "SendRecv",
        "Send",
        "Recv",
    ];
    NAMES
        .get(code as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("func{code}"))
}

/// State arguments of v4-v6 (8-byte union): the word that matters per state.
///
/// # Safety
/// `a` is NULL or points to a readable `StateArgsV4`.
pub unsafe fn state_v4(state: State, a: *const StateArgsV4) -> StateArg {
    let arg = if a.is_null() || !carries_arg(state) {
        None
    } else {
        // SAFETY: non-null args point to NCCL's 8-byte union; any bits are a
        // valid u64 (the pTimer/transSize/appended member all start at 0).
        Some(unsafe { (*a).kernel_ch.p_timer })
    };
    StateArg {
        state,
        arg: arg.map(|v| narrow(state, v)),
    }
}

/// State arguments of v1-v3 (16-byte union).
///
/// # Safety
/// `a` is NULL or points to a readable `StateArgsV1`.
pub unsafe fn state_v1(state: State, a: *const StateArgsV1) -> StateArg {
    let arg = if a.is_null() || !carries_arg(state) {
        None
    } else {
        // SAFETY: as above; transSize (size_t) is the first word.
        Some(unsafe { (*a).proxy_op.trans_size as u64 })
    };
    StateArg {
        state,
        arg: arg.map(|v| narrow(state, v)),
    }
}

/// States whose argument is meaningful: transSize after 9 and 11, the
/// appended count of AppendEnd, the GPU end of KernelChStop and (v7)
/// KernelPhaseStop.
fn carries_arg(state: State) -> bool {
    matches!(
        state,
        state::PROXY_STEP_SEND_WAIT
            | state::PROXY_STEP_RECV_FLUSH_WAIT
            | state::PROXY_CTRL_APPEND_END
            | state::KERNEL_CH_STOP
            | state::KERNEL_PHASE_STOP
    )
}

/// AppendEnd's argument is an `int`; the upper half of the word is not ours.
fn narrow(state: State, v: u64) -> u64 {
    if state == state::PROXY_CTRL_APPEND_END {
        v as u32 as u64
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strings::Memo;

    fn coll(func: *const c_char, algo: *const c_char) -> DescrV6 {
        let mut d = DescrV6::zeroed();
        d.ty = ty::COLL;
        d.u.coll.func = func;
        d.u.coll.datatype = c"convtest-f32".as_ptr();
        d.u.coll.algo = algo;
        d.u.coll.proto = std::ptr::null();
        d
    }

    fn names(a: &StartArg) -> Vec<String> {
        let Info::Coll {
            func,
            datatype,
            algo,
            proto,
            ..
        } = a.info.resolve()
        else {
            panic!("not a Coll: {:?}", a.info)
        };
        [func, datatype, algo, proto]
            .iter()
            .map(|s| s.as_str().into_owned())
            .collect()
    }

    fn start(d: &DescrV6, memo: &Memo) -> StartArg {
        // SAFETY: a descriptor on the caller's stack.
        unsafe { start_v6(d, Some(memo)) }.unwrap()
    }

    #[test]
    fn memo_answers_repeated_pointers_and_follows_new_ones() {
        let memo = Memo::new();
        let a = coll(c"ct-AllReduce".as_ptr(), c"convtest-RING".as_ptr());
        let want = ["ct-AllReduce", "convtest-f32", "convtest-RING", ""];
        for _ in 0..3 {
            let arg = start(&a, &memo);
            assert_eq!(names(&arg), want);
            assert_eq!(arg.flags, 0);
        }
        // Another pointer in one place: a miss, read and memoized.
        let b = coll(c"ct-AllReduce".as_ptr(), c"convtest-TREE".as_ptr());
        assert_eq!(names(&start(&b, &memo))[2], "convtest-TREE");
        assert_eq!(names(&start(&a, &memo))[2], "convtest-RING");
        // The Coll slot is not the CollApi slot.
        let mut api = DescrV6::zeroed();
        api.ty = ty::COLL_API;
        api.u.coll_api.func = c"convtest-Bcast".as_ptr();
        // SAFETY: a descriptor on our stack (as below).
        let got = unsafe { start_v6(&api, Some(&memo)) }
            .unwrap()
            .info
            .resolve();
        assert_eq!(got.func().unwrap().as_str(), "convtest-Bcast");
        assert_eq!(names(&start(&a, &memo)), want);
    }

    #[test]
    fn a_string_changed_in_place_shows_within_one_reread_period() {
        let memo = Memo::new();
        let mut buf = *b"convtest-one\0\0\0\0";
        let d = coll(buf.as_ptr().cast(), c"convtest-RING".as_ptr());
        assert_eq!(names(&start(&d, &memo))[0], "convtest-one");
        buf[9..12].copy_from_slice(b"two");
        let d = coll(
            std::hint::black_box(buf.as_ptr()).cast(),
            c"convtest-RING".as_ptr(),
        );
        // Memo hits (the same pointer) until this thread's re-read.
        assert_eq!(names(&start(&d, &memo))[0], "convtest-one");
        let period = crate::strings::REREAD_EVERY as usize + 1;
        let seen = (0..period)
            .map(|_| names(&start(&d, &memo))[0].clone())
            .position(|n| n == "convtest-two");
        assert!(seen.is_some(), "not re-read within {period} descriptors");
        // The re-read refreshed the memo: it stays.
        assert_eq!(names(&start(&d, &memo))[0], "convtest-two");
    }

    #[test]
    fn v7_fields_convert_and_v6_refuses_kernel_phase() {
        let memo = Memo::new();
        let mut d = DescrV7::zeroed();
        d.ty = ty::COLL;
        d.u.coll.func = c"ct-AllReduce".as_ptr();
        d.u.coll.kernel_variant = c"convtest-variant".as_ptr();
        d.u.coll.is_sym_coll = true;
        d.u.coll.user_tag = 42;
        d.u.coll.n_channels = 3;
        // SAFETY: descriptors on our stack (as below).
        let a = unsafe { start_v7(&d, Some(&memo)) }.unwrap();
        assert_eq!((a.kind, a.children), (Kind::Coll, 3));
        let Info::Coll {
            kernel_variant,
            is_sym_coll,
            user_tag,
            ..
        } = a.info.resolve()
        else {
            panic!("{:?}", a.info)
        };
        assert_eq!(kernel_variant.as_str(), "convtest-variant");
        assert!(is_sym_coll);
        assert_eq!(user_tag, 42);
        for (t, tag) in [
            (ty::COLL_API, 1u64),
            (ty::P2P_API, 2),
            (ty::P2P, 3),
            (ty::CE_COLL, 4),
        ] {
            let mut d = DescrV7::zeroed();
            d.ty = t;
            // Writes into the member `t` names (a union write is safe).
            match t {
                ty::COLL_API => d.u.coll_api.user_tag = tag,
                ty::P2P_API => d.u.p2p_api.user_tag = tag,
                ty::P2P => d.u.p2p.user_tag = tag,
                _ => d.u.ce_coll.user_tag = tag,
            }
            // SAFETY: as above.
            let a = unsafe { start_v7(&d, Some(&memo)) }.unwrap();
            assert_eq!(a.info.user_tag(), tag, "{t:#x}");
        }
        let mut p = DescrV7::zeroed();
        p.ty = ty::KERNEL_PHASE;
        p.parent_obj = 0x1234 as *mut std::ffi::c_void;
        p.u.kernel_phase = KernelPhaseV7 {
            channel_id: 5,
            phase_id: 2,
            phase_name: c"final_sync".as_ptr(),
            p_timer: 777,
        };
        // SAFETY: as above.
        let a = unsafe { start_v7(&p, Some(&memo)) }.unwrap();
        assert_eq!(
            (a.kind, a.parent, a.children),
            (Kind::KernelPhase, 0x1234, 0)
        );
        assert_eq!(
            a.info,
            Info::KernelPhase {
                channel: 5,
                phase: 2,
                gpu_start: 777
            }
        );
        // The v6 table knows no KernelPhase, alone or with another bit.
        for t in [ty::KERNEL_PHASE, ty::KERNEL_PHASE | ty::COLL] {
            let mut d = DescrV6::zeroed();
            d.ty = t;
            // SAFETY: as above.
            assert!(unsafe { start_v6(&d, Some(&memo)) }.is_none());
        }
        // State 31 carries its GPU end; other states keep theirs.
        let args = StateArgsV7 {
            kernel_ch: KernelChArgs { p_timer: 99 },
        };
        // SAFETY: args on our stack.
        let s = unsafe { state_v4(state::KERNEL_PHASE_STOP, &args) };
        assert_eq!(s.arg, Some(99));
    }

    #[test]
    fn a_bad_pointer_is_flagged_on_every_descriptor() {
        let memo = Memo::new();
        let d = coll(8 as *const c_char, c"convtest-RING".as_ptr());
        for _ in 0..3 {
            let arg = start(&d, &memo);
            assert_eq!(arg.flags & flag::BAD_STRING, flag::BAD_STRING);
            assert_eq!(names(&arg)[0], "?");
        }
        // Without a memo (thread exit): read from memory, the same answers.
        // SAFETY: descriptors on our stack (as below).
        let arg = unsafe { start_v6(&d, None) }.unwrap();
        assert_eq!(arg.flags & flag::BAD_STRING, flag::BAD_STRING);
        let ok = coll(c"ct-AllReduce".as_ptr(), c"convtest-RING".as_ptr());
        // SAFETY: as above.
        let arg = unsafe { start_v6(&ok, None) }.unwrap();
        assert_eq!(names(&arg)[0], "ct-AllReduce");
    }
}
