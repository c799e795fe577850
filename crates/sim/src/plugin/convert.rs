//! The per-version conversions NCCL's adapters (`src/plugin/profiler/profiler_vN.cc`)
//! apply to every call for an older table: descriptors (`startEvent`), the numeric codes
//! v1 gets instead of strings, and state args (`recordEventState`).
//!
//! NCCL's core speaks v7 (2.31 and later): [`descr_to_v6`] and [`args_to_v6`] are its v6
//! adapter; the older versions are converted from that v6 descriptor, as they were when
//! the core spoke v6 (what the v7 fields hold never reaches them).

use std::ffi::{c_char, CStr};
use std::ptr;

use evring_abi::{
    state, ty, CeCollV6, CollApiV5, CollApiV7, CollV5, CollV7, DescrV1, DescrV2, DescrV3, DescrV4,
    DescrV6, DescrV7, P2pApiV5, P2pApiV7, P2pV5, P2pV7, State, StateArgsV1, StateArgsV4,
};

// ---------------------------------------------------------------------------------------
// Descriptor conversions (NCCL's `ncclProfiler_startEvent` of each shim).
// ---------------------------------------------------------------------------------------

/// The header every shim copies before looking at the type; v1–v4 keep only the low byte.
macro_rules! copy_header {
    ($src:expr, $dst:expr) => {{
        $dst.ty = $src.ty as _;
        $dst.parent_obj = $src.parent_obj;
        $dst.rank = $src.rank;
    }};
}

/// v7 → v6 (`profiler_v6.cc` of NCCL 2.31): a zeroed v6 descriptor with the header and
/// the fields of the member `src.ty` selects copied; the v7-only fields (`userTag`,
/// `kernelVariant`, `isSymColl`) are dropped. Returns `false` (not passed: NCCL's adapter
/// sets `*eHandle = NULL`) for KernelPhase. `dst` should start zeroed, as NCCL's does.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised.
pub unsafe fn descr_to_v6(src: &DescrV7, dst: &mut DescrV6) -> bool {
    if src.ty == ty::KERNEL_PHASE {
        return false;
    }
    copy_header!(src, dst);
    // SAFETY: only the member selected by `src.ty` is read (caller); writes into a union
    // of plain data are plain.
    unsafe {
        match src.ty {
            ty::GROUP_API => dst.u.group_api = src.u.group_api,
            ty::COLL_API => {
                let s = src.u.coll_api;
                dst.u.coll_api = CollApiV5 {
                    func: s.func,
                    count: s.count,
                    datatype: s.datatype,
                    root: s.root,
                    stream: s.stream,
                    graph_captured: s.graph_captured,
                };
            }
            ty::P2P_API => {
                let s = src.u.p2p_api;
                dst.u.p2p_api = P2pApiV5 {
                    func: s.func,
                    count: s.count,
                    datatype: s.datatype,
                    stream: s.stream,
                    graph_captured: s.graph_captured,
                };
            }
            ty::KERNEL_LAUNCH => dst.u.kernel_launch = src.u.kernel_launch,
            ty::COLL => {
                let s = src.u.coll;
                dst.u.coll = CollV5 {
                    seq_number: s.seq_number,
                    func: s.func,
                    send_buff: s.send_buff,
                    recv_buff: s.recv_buff,
                    count: s.count,
                    root: s.root,
                    datatype: s.datatype,
                    n_channels: s.n_channels,
                    n_warps: s.n_warps,
                    algo: s.algo,
                    proto: s.proto,
                    parent_group: s.parent_group,
                };
            }
            ty::P2P => {
                let s = src.u.p2p;
                dst.u.p2p = P2pV5 {
                    func: s.func,
                    buff: s.buff,
                    datatype: s.datatype,
                    count: s.count,
                    peer: s.peer,
                    n_channels: s.n_channels,
                    parent_group: s.parent_group,
                };
            }
            ty::PROXY_OP => copy_proxy_op(&src.u.proxy_op, &mut dst.u.proxy_op),
            ty::PROXY_STEP => dst.u.proxy_step = src.u.proxy_step,
            ty::KERNEL_CH => dst.u.kernel_ch = src.u.kernel_ch,
            ty::NET_PLUGIN => dst.u.net_plugin = src.u.net_plugin,
            ty::CE_COLL => {
                let s = src.u.ce_coll;
                dst.u.ce_coll = CeCollV6 {
                    seq_number: s.seq_number,
                    func: s.func,
                    send_buff: s.send_buff,
                    recv_buff: s.recv_buff,
                    count: s.count,
                    root: s.root,
                    datatype: s.datatype,
                    sync_strategy: s.sync_strategy,
                    intra_batch_sync: s.intra_batch_sync,
                    batch_size: s.batch_size,
                    num_batches: s.num_batches,
                    ce_seq_num: s.ce_seq_num,
                    stream: s.stream,
                };
            }
            ty::CE_SYNC => dst.u.ce_sync = src.u.ce_sync,
            ty::CE_BATCH => dst.u.ce_batch = src.u.ce_batch,
            // Group, ProxyCtrl and unknown types: the header only (NCCL's `default`).
            _ => {}
        }
    }
    true
}

/// v6 → v7: the descriptor a v7 core would have built for the same event, with the v7
/// fields at their "not set" values (`userTag` 0, `kernelVariant` NULL, `isSymColl`
/// false). Used for the recorded NCCL 2.28.9 logs, whose descriptors are v6.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised.
pub unsafe fn descr_v6_to_v7(src: &DescrV6) -> DescrV7 {
    let mut d = DescrV7::zeroed();
    copy_header!(src, d);
    // SAFETY: only the member selected by `src.ty` is read (caller).
    unsafe {
        match src.ty {
            ty::GROUP_API => d.u.group_api = src.u.group_api,
            ty::COLL_API => {
                let s = src.u.coll_api;
                d.u.coll_api = CollApiV7 {
                    func: s.func,
                    count: s.count,
                    datatype: s.datatype,
                    root: s.root,
                    stream: s.stream,
                    graph_captured: s.graph_captured,
                    user_tag: 0,
                };
            }
            ty::P2P_API => {
                let s = src.u.p2p_api;
                d.u.p2p_api = P2pApiV7 {
                    func: s.func,
                    count: s.count,
                    datatype: s.datatype,
                    stream: s.stream,
                    graph_captured: s.graph_captured,
                    user_tag: 0,
                };
            }
            ty::KERNEL_LAUNCH => d.u.kernel_launch = src.u.kernel_launch,
            ty::COLL => {
                let s = src.u.coll;
                d.u.coll = CollV7 {
                    seq_number: s.seq_number,
                    func: s.func,
                    send_buff: s.send_buff,
                    recv_buff: s.recv_buff,
                    count: s.count,
                    root: s.root,
                    datatype: s.datatype,
                    n_channels: s.n_channels,
                    n_warps: s.n_warps,
                    algo: s.algo,
                    proto: s.proto,
                    parent_group: s.parent_group,
                    kernel_variant: ptr::null(),
                    is_sym_coll: false,
                    user_tag: 0,
                };
            }
            ty::P2P => {
                let s = src.u.p2p;
                d.u.p2p = P2pV7 {
                    func: s.func,
                    buff: s.buff,
                    datatype: s.datatype,
                    count: s.count,
                    peer: s.peer,
                    n_channels: s.n_channels,
                    parent_group: s.parent_group,
                    user_tag: 0,
                };
            }
            ty::PROXY_OP => d.u.proxy_op = src.u.proxy_op,
            ty::PROXY_STEP => d.u.proxy_step = src.u.proxy_step,
            ty::KERNEL_CH => d.u.kernel_ch = src.u.kernel_ch,
            ty::NET_PLUGIN => d.u.net_plugin = src.u.net_plugin,
            ty::CE_COLL => {
                let s = src.u.ce_coll;
                d.u.ce_coll = evring_abi::CeCollV7 {
                    seq_number: s.seq_number,
                    func: s.func,
                    send_buff: s.send_buff,
                    recv_buff: s.recv_buff,
                    count: s.count,
                    root: s.root,
                    datatype: s.datatype,
                    sync_strategy: s.sync_strategy,
                    intra_batch_sync: s.intra_batch_sync,
                    batch_size: s.batch_size,
                    num_batches: s.num_batches,
                    ce_seq_num: s.ce_seq_num,
                    stream: s.stream,
                    user_tag: 0,
                };
            }
            ty::CE_SYNC => d.u.ce_sync = src.u.ce_sync,
            ty::CE_BATCH => d.u.ce_batch = src.u.ce_batch,
            _ => {}
        }
    }
    d
}

/// v6 → v5 (`profiler_v5.cc`): same layout; copies only the fields of the member `src.ty`
/// selects, leaving the rest of `dst` as it was. Returns `false` (not passed) for CE and
/// unknown types.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised.
pub unsafe fn descr_to_v5(src: &DescrV6, dst: &mut DescrV6) -> bool {
    copy_header!(src, dst);
    // SAFETY: only the member selected by `src.ty` is read (caller). Writes into `dst.u`
    // store plain data into a union, which any bytes may occupy.
    unsafe {
        match src.ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::GROUP_API => {
                let s = src.u.group_api;
                dst.u.group_api.graph_captured = s.graph_captured;
                dst.u.group_api.group_depth = s.group_depth;
            }
            ty::COLL_API => {
                let s = src.u.coll_api;
                let d = &mut dst.u.coll_api;
                d.func = s.func;
                d.count = s.count;
                d.datatype = s.datatype;
                d.root = s.root;
                d.stream = s.stream;
                d.graph_captured = s.graph_captured;
            }
            ty::P2P_API => {
                let s = src.u.p2p_api;
                let d = &mut dst.u.p2p_api;
                d.func = s.func;
                d.count = s.count;
                d.datatype = s.datatype;
                d.stream = s.stream;
                d.graph_captured = s.graph_captured;
            }
            ty::KERNEL_LAUNCH => dst.u.kernel_launch.stream = src.u.kernel_launch.stream,
            ty::COLL => {
                let s = src.u.coll;
                let d = &mut dst.u.coll;
                d.seq_number = s.seq_number;
                d.func = s.func;
                d.send_buff = s.send_buff;
                d.recv_buff = s.recv_buff;
                d.count = s.count;
                d.root = s.root;
                d.datatype = s.datatype;
                d.n_channels = s.n_channels;
                d.n_warps = s.n_warps;
                d.algo = s.algo;
                d.proto = s.proto;
                d.parent_group = s.parent_group;
            }
            ty::P2P => {
                let s = src.u.p2p;
                let d = &mut dst.u.p2p;
                d.func = s.func;
                d.buff = s.buff;
                d.datatype = s.datatype;
                d.count = s.count;
                d.peer = s.peer;
                d.n_channels = s.n_channels;
                d.parent_group = s.parent_group;
            }
            ty::PROXY_OP => copy_proxy_op(&src.u.proxy_op, &mut dst.u.proxy_op),
            ty::PROXY_STEP => dst.u.proxy_step.step = src.u.proxy_step.step,
            ty::KERNEL_CH => {
                dst.u.kernel_ch.channel_id = src.u.kernel_ch.channel_id;
                dst.u.kernel_ch.p_timer = src.u.kernel_ch.p_timer;
            }
            ty::NET_PLUGIN => {
                dst.u.net_plugin.id = src.u.net_plugin.id;
                dst.u.net_plugin.data = src.u.net_plugin.data;
            }
            _ => return false,
        }
    }
    true
}

/// v6 → v4 (`profiler_v4.cc`): `u8` type, Coll/P2p `parentObj` = `parentGroup`, P2p
/// `nChannels` not copied; only assigned fields are written. Returns `false` for API,
/// KernelLaunch, CE and unknown types.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised.
pub unsafe fn descr_to_v4(src: &DescrV6, dst: &mut DescrV4) -> bool {
    copy_header!(src, dst);
    // SAFETY: as in `descr_to_v5`.
    unsafe {
        match src.ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::COLL => {
                let s = src.u.coll;
                let d = &mut dst.u.coll;
                d.seq_number = s.seq_number;
                d.func = s.func;
                d.send_buff = s.send_buff;
                d.recv_buff = s.recv_buff;
                d.count = s.count;
                d.root = s.root;
                d.datatype = s.datatype;
                d.n_channels = s.n_channels;
                d.n_warps = s.n_warps;
                d.algo = s.algo;
                d.proto = s.proto;
                dst.parent_obj = s.parent_group;
            }
            ty::P2P => {
                let s = src.u.p2p;
                let d = &mut dst.u.p2p;
                d.func = s.func;
                d.buff = s.buff;
                d.count = s.count;
                d.datatype = s.datatype;
                d.peer = s.peer;
                dst.parent_obj = s.parent_group;
            }
            ty::PROXY_OP => copy_proxy_op(&src.u.proxy_op, &mut dst.u.proxy_op),
            ty::PROXY_STEP => dst.u.proxy_step.step = src.u.proxy_step.step,
            ty::KERNEL_CH => {
                dst.u.kernel_ch.channel_id = src.u.kernel_ch.channel_id;
                dst.u.kernel_ch.p_timer = src.u.kernel_ch.p_timer;
            }
            ty::NET_PLUGIN => {
                dst.u.net_plugin.id = src.u.net_plugin.id;
                dst.u.net_plugin.data = src.u.net_plugin.data;
            }
            _ => return false,
        }
    }
    true
}

/// v6 → v3 (`profiler_v3.cc`): as v4, plus `name = NULL`, `commHash = 0`,
/// `nMaxChannels = nChannels`, and KernelCh without `pTimer`. `dst` should start zeroed,
/// as NCCL's does.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised.
pub unsafe fn descr_to_v3(src: &DescrV6, dst: &mut DescrV3) -> bool {
    copy_header!(src, dst);
    // SAFETY: as in `descr_to_v5`.
    unsafe {
        match src.ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::COLL => {
                let s = src.u.coll;
                let d = &mut dst.u.coll;
                d.name = ptr::null();
                d.comm_hash = 0;
                d.seq_number = s.seq_number;
                d.func = s.func;
                d.send_buff = s.send_buff;
                d.recv_buff = s.recv_buff;
                d.count = s.count;
                d.root = s.root;
                d.datatype = s.datatype;
                d.n_max_channels = s.n_channels;
                d.n_warps = s.n_warps;
                d.algo = s.algo;
                d.proto = s.proto;
                dst.parent_obj = s.parent_group;
            }
            ty::P2P => {
                let s = src.u.p2p;
                let d = &mut dst.u.p2p;
                d.name = ptr::null();
                d.comm_hash = 0;
                d.func = s.func;
                d.buff = s.buff;
                d.count = s.count;
                d.datatype = s.datatype;
                d.peer = s.peer;
                dst.parent_obj = s.parent_group;
            }
            ty::PROXY_OP => copy_proxy_op(&src.u.proxy_op, &mut dst.u.proxy_op),
            ty::PROXY_STEP => dst.u.proxy_step.step = src.u.proxy_step.step,
            ty::KERNEL_CH => dst.u.kernel_ch.channel_id = src.u.kernel_ch.channel_id,
            ty::NET_PLUGIN => {
                dst.u.net_plugin.id = src.u.net_plugin.id;
                dst.u.net_plugin.data = src.u.net_plugin.data;
            }
            _ => return false,
        }
    }
    true
}

/// v6 → v2 (`profiler_v2.cc`): Group, Coll, P2p, ProxyOp, ProxyStep and ProxyCtrl only;
/// Coll gets `trafficBytes = 0`. `dst` should start zeroed, as NCCL's does.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised.
pub unsafe fn descr_to_v2(src: &DescrV6, dst: &mut DescrV2) -> bool {
    copy_header!(src, dst);
    // SAFETY: as in `descr_to_v5`.
    unsafe {
        match src.ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::COLL => {
                let s = src.u.coll;
                let d = &mut dst.u.coll;
                d.name = ptr::null();
                d.comm_hash = 0;
                d.seq_number = s.seq_number;
                d.func = s.func;
                d.send_buff = s.send_buff;
                d.recv_buff = s.recv_buff;
                d.count = s.count;
                d.root = s.root;
                d.datatype = s.datatype;
                d.traffic_bytes = 0;
                d.n_max_channels = s.n_channels;
                d.n_warps = s.n_warps;
                d.algo = s.algo;
                d.proto = s.proto;
                dst.parent_obj = s.parent_group;
            }
            ty::P2P => {
                let s = src.u.p2p;
                let d = &mut dst.u.p2p;
                d.name = ptr::null();
                d.comm_hash = 0;
                d.func = s.func;
                d.buff = s.buff;
                d.count = s.count;
                d.datatype = s.datatype;
                d.peer = s.peer;
                dst.parent_obj = s.parent_group;
            }
            ty::PROXY_OP => copy_proxy_op(&src.u.proxy_op, &mut dst.u.proxy_op),
            ty::PROXY_STEP => dst.u.proxy_step.step = src.u.proxy_step.step,
            _ => return false,
        }
    }
    true
}

/// v6 → v1 (`profiler_v1.cc`): the v2 set of types, with func, datatype, algo and proto
/// turned back into numeric codes (see [`func_code`] and friends); `op`, `trafficBytes`,
/// `isCollnet`, `isNvls` stay 0. `dst` should start zeroed, as NCCL's does.
///
/// # Safety
///
/// The member of `src.u` selected by `src.ty` must be initialised, and for Coll and P2p its
/// string pointers must be NULL or NUL-terminated strings (NULL maps to the default code,
/// where NCCL would crash in `strcmp`).
pub unsafe fn descr_to_v1(src: &DescrV6, dst: &mut DescrV1) -> bool {
    copy_header!(src, dst);
    // SAFETY: as in `descr_to_v5`; strings are readable (caller).
    unsafe {
        match src.ty {
            ty::GROUP | ty::PROXY_CTRL => {}
            ty::COLL => {
                let s = src.u.coll;
                let d = &mut dst.u.coll;
                d.name = ptr::null();
                d.comm_hash = 0;
                d.seq_number = s.seq_number;
                d.func = func_code(c_bytes(s.func));
                d.send_buff = s.send_buff;
                d.recv_buff = s.recv_buff;
                d.count = s.count;
                d.root = s.root;
                d.datatype = datatype_code(c_bytes(s.datatype));
                d.op = 0;
                d.traffic_bytes = 0;
                d.n_max_channels = s.n_channels;
                d.n_warps = s.n_warps;
                d.algo = algo_code(c_bytes(s.algo));
                d.proto = proto_code(c_bytes(s.proto));
                dst.parent_obj = s.parent_group;
            }
            ty::P2P => {
                let s = src.u.p2p;
                let d = &mut dst.u.p2p;
                d.name = ptr::null();
                d.comm_hash = 0;
                d.func = func_code(c_bytes(s.func));
                d.buff = s.buff;
                d.count = s.count;
                d.datatype = datatype_code(c_bytes(s.datatype));
                d.peer = s.peer;
                dst.parent_obj = s.parent_group;
            }
            ty::PROXY_OP => copy_proxy_op(&src.u.proxy_op, &mut dst.u.proxy_op),
            ty::PROXY_STEP => dst.u.proxy_step.step = src.u.proxy_step.step,
            _ => return false,
        }
    }
    true
}

/// Field by field, like the shims, so padding in `dst` is left alone.
fn copy_proxy_op(s: &evring_abi::ProxyOpD, d: &mut evring_abi::ProxyOpD) {
    d.pid = s.pid;
    d.channel_id = s.channel_id;
    d.peer = s.peer;
    d.n_steps = s.n_steps;
    d.chunk_size = s.chunk_size;
    d.is_send = s.is_send;
}

/// # Safety
///
/// `p` must be NULL or a NUL-terminated string that outlives `'a`.
unsafe fn c_bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return b"";
    }
    // SAFETY: caller's contract.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

// ---------------------------------------------------------------------------------------
// v1 numeric codes (`profiler_v1.cc`'s string-to-enum tables, with NCCL's enum values).
// ---------------------------------------------------------------------------------------

/// `ncclFunc_t` values the v1 shim recognises; anything else becomes `ncclFuncSend`.
const FUNC_CODES: &[(&[u8], u8)] = &[
    (b"AllGather", 2),
    (b"AllReduce", 4),
    (b"Broadcast", 0),
    (b"Recv", 7),
    (b"Reduce", 1),
    (b"ReduceScatter", 3),
    (b"SendRecv", 5),
];
const FUNC_DEFAULT: u8 = 6;

/// `NCCL_ALGO_*`; anything else becomes `NCCL_ALGO_PAT`.
const ALGO_CODES: &[(&[u8], u8)] = &[
    (b"TREE", 0),
    (b"RING", 1),
    (b"COLLNET_DIRECT", 2),
    (b"COLLNET_CHAIN", 3),
    (b"NVLS", 4),
    (b"NVLS_TREE", 5),
];
const ALGO_DEFAULT: u8 = 6;

/// `NCCL_PROTO_*`; anything else becomes `NCCL_PROTO_SIMPLE`.
const PROTO_CODES: &[(&[u8], u8)] = &[(b"LL", 0), (b"LL128", 1)];
const PROTO_DEFAULT: u8 = 2;

/// `ncclDataType_t`; anything else (including `ncclUint8` and the fp8 types, which the shim
/// does not list) becomes `ncclFloat64`. `ncclBfloat16` assumes a CUDA build with bf16.
const DATATYPE_CODES: &[(&[u8], u8)] = &[
    (b"ncclInt8", 0),
    (b"ncclInt32", 2),
    (b"ncclUint32", 3),
    (b"ncclInt64", 4),
    (b"ncclUint64", 5),
    (b"ncclFloat16", 6),
    (b"ncclFloat32", 7),
    (b"ncclBfloat16", 9),
];
const DATATYPE_DEFAULT: u8 = 8;

fn lookup(table: &[(&[u8], u8)], default: u8, s: &[u8]) -> u8 {
    table
        .iter()
        .find(|(name, _)| *name == s)
        .map_or(default, |&(_, code)| code)
}

/// The v1 `func` code of a func string.
pub fn func_code(s: &[u8]) -> u8 {
    lookup(FUNC_CODES, FUNC_DEFAULT, s)
}

/// The v1 `algo` code of an algo string.
pub fn algo_code(s: &[u8]) -> u8 {
    lookup(ALGO_CODES, ALGO_DEFAULT, s)
}

/// The v1 `proto` code of a proto string.
pub fn proto_code(s: &[u8]) -> u8 {
    lookup(PROTO_CODES, PROTO_DEFAULT, s)
}

/// The v1 `datatype` code of a datatype string.
pub fn datatype_code(s: &[u8]) -> u8 {
    lookup(DATATYPE_CODES, DATATYPE_DEFAULT, s)
}

// ---------------------------------------------------------------------------------------
// State-args conversions (NCCL's `ncclProfiler_recordEventState` of each shim).
// ---------------------------------------------------------------------------------------

fn is_proxy_ctrl(s: State) -> bool {
    (state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END).contains(&s)
}

/// ProxyStep states that carry a transfer size from v4 on.
fn is_proxy_step_v4(s: State) -> bool {
    matches!(
        s,
        state::PROXY_STEP_SEND_GPU_WAIT
            | state::PROXY_STEP_SEND_PEER_WAIT_V4
            | state::PROXY_STEP_SEND_WAIT
            | state::PROXY_STEP_RECV_WAIT
            | state::PROXY_STEP_RECV_FLUSH_WAIT
            | state::PROXY_STEP_RECV_GPU_WAIT
    )
}

/// Copies the member of `src` that `state` selects into `dst` for the states the v4 and v5
/// shims share; `None` for states they drop.
///
/// # Safety
///
/// See [`args_to_v4`].
unsafe fn args_v4_common(
    state: State,
    src: Option<&StateArgsV4>,
    dst: &mut StateArgsV4,
) -> Option<()> {
    // A missing `src` leaves `dst` as it is: NCCL never sends NULL with these states, so
    // there is nothing faithful to copy.
    // SAFETY: only the member `state` selects is read (caller); writes to a union are plain.
    unsafe {
        match state {
            s if is_proxy_step_v4(s) => {
                if let Some(a) = src {
                    dst.proxy_step.trans_size = a.proxy_step.trans_size;
                }
            }
            s if is_proxy_ctrl(s) => {
                if let Some(a) = src {
                    dst.proxy_ctrl.appended_proxy_ops = a.proxy_ctrl.appended_proxy_ops;
                }
            }
            state::NET_PLUGIN_UPDATE => {
                if let Some(a) = src {
                    dst.net_plugin.data = a.net_plugin.data;
                }
            }
            state::KERNEL_CH_STOP => {
                if let Some(a) = src {
                    dst.kernel_ch.p_timer = a.kernel_ch.p_timer;
                }
            }
            state::PROXY_OP_IN_PROGRESS_V4 => {}
            _ => return None,
        }
    }
    Some(())
}

/// v7 → v6 args (`profiler_v6.cc` of NCCL 2.31): state 31 (KernelPhaseStop) is dropped
/// (`false`); otherwise `dst` (zeroed, and always passed: the adapter hands the plugin its
/// own args even when NCCL passed NULL) gets the member the state uses.
///
/// # Safety
///
/// The member of `src` that `state` selects must be initialised.
pub unsafe fn args_to_v6(state: State, src: Option<&StateArgsV4>, dst: &mut StateArgsV4) -> bool {
    if state == state::KERNEL_PHASE_STOP {
        return false;
    }
    let Some(a) = src else { return true };
    // SAFETY: only the member `state` selects is read (caller).
    unsafe {
        match state {
            s if is_proxy_step_v4(s) => dst.proxy_step.trans_size = a.proxy_step.trans_size,
            s if is_proxy_ctrl(s) => {
                dst.proxy_ctrl.appended_proxy_ops = a.proxy_ctrl.appended_proxy_ops
            }
            state::NET_PLUGIN_UPDATE => dst.net_plugin.data = a.net_plugin.data,
            state::KERNEL_CH_STOP => dst.kernel_ch.p_timer = a.kernel_ch.p_timer,
            _ => {}
        }
    }
    true
}

/// v6 → v5 args (`profiler_v5.cc`): states 8–24 are passed, the member each one uses is
/// copied, and nothing is copied for 19, 23 and 24; CE states (25–30), the deprecated
/// ProxyOp states 0–7 and unknown states are dropped (`false`).
///
/// # Safety
///
/// The member of `src` that `state` selects must be initialised.
pub unsafe fn args_to_v5(state: State, src: Option<&StateArgsV4>, dst: &mut StateArgsV4) -> bool {
    if matches!(
        state,
        state::GROUP_START_API_STOP | state::GROUP_END_API_START
    ) {
        return true;
    }
    // SAFETY: caller's contract.
    unsafe { args_v4_common(state, src, dst) }.is_some()
}

/// v6 → v4 args (`profiler_v4.cc`): as v5 but GroupApi states 23 and 24 are dropped too.
///
/// # Safety
///
/// The member of `src` that `state` selects must be initialised.
pub unsafe fn args_to_v4(state: State, src: Option<&StateArgsV4>, dst: &mut StateArgsV4) -> bool {
    // SAFETY: caller's contract.
    unsafe { args_v4_common(state, src, dst) }.is_some()
}

/// v6 → v1/v2/v3 args (`profiler_v1.cc` … `v3.cc`): ProxyCtrl states 13–18 with
/// `appendedProxyOps`, and ProxyStep states 8–12 with no data at all (`transSize` stays 0);
/// everything else is dropped (`false`). `dst` should start zeroed, as NCCL's does.
///
/// # Safety
///
/// The member of `src` that `state` selects must be initialised.
pub unsafe fn args_to_v1(state: State, src: Option<&StateArgsV4>, dst: &mut StateArgsV1) -> bool {
    match state {
        s if is_proxy_ctrl(s) => {
            if let Some(a) = src {
                // SAFETY: ProxyCtrl states select `proxy_ctrl` (caller).
                dst.proxy_ctrl.appended_proxy_ops = unsafe { a.proxy_ctrl.appended_proxy_ops };
            }
            true
        }
        state::PROXY_STEP_SEND_GPU_WAIT..=state::PROXY_STEP_RECV_GPU_WAIT => true,
        _ => false,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::plugin::{AnyBits, Garbage, SHIM_GARBAGE};
    use evring_abi::{CollV5, KernelChV4, P2pV5, ProxyCtrlArgs, ProxyStepArgs};
    use std::ffi::c_void;
    use std::mem::size_of;

    pub(in crate::plugin) fn addr(a: usize) -> *mut c_void {
        a as *mut c_void
    }

    pub(in crate::plugin) fn coll_v6() -> DescrV6 {
        let mut d = DescrV6::zeroed();
        d.ty = ty::COLL;
        d.parent_obj = addr(0x55);
        d.rank = 1;
        d.u.coll = CollV5 {
            seq_number: 7,
            func: c"AllReduce".as_ptr(),
            send_buff: addr(0x1000),
            recv_buff: addr(0x2000),
            count: 42,
            root: 3,
            datatype: c"ncclFloat32".as_ptr(),
            n_channels: 24,
            n_warps: 17,
            algo: c"RING".as_ptr(),
            proto: c"LL128".as_ptr(),
            parent_group: addr(0x77),
        };
        d
    }

    pub(in crate::plugin) fn p2p_v6(func: &'static CStr) -> DescrV6 {
        let mut d = DescrV6::zeroed();
        d.ty = ty::P2P;
        d.parent_obj = addr(0x55);
        d.rank = 1;
        d.u.p2p = P2pV5 {
            func: func.as_ptr(),
            buff: addr(0x3000),
            datatype: c"ncclInt8".as_ptr(),
            count: 9,
            peer: 5,
            n_channels: 4,
            parent_group: addr(0x66),
        };
        d
    }

    pub(in crate::plugin) fn of_type(t: u64) -> DescrV6 {
        let mut d = DescrV6::zeroed();
        d.ty = t;
        d
    }

    fn bytes_of<T: AnyBits>(g: &mut Garbage<T>) -> &[u8] {
        // SAFETY: every byte of the storage is initialised (`Garbage::new`).
        unsafe { std::slice::from_raw_parts(g.as_mut_ptr().cast::<u8>(), size_of::<T>()) }
    }

    #[test]
    fn v5_is_a_field_copy_without_ce() {
        let mut g = Garbage::<DescrV6>::new();
        // SAFETY: the Coll member is initialised.
        assert!(unsafe { descr_to_v5(&coll_v6(), g.get()) });
        let d = *g.get();
        assert_eq!((d.ty, d.parent_obj, d.rank), (ty::COLL, addr(0x55), 1));
        // SAFETY: `descr_to_v5` wrote every Coll field.
        let c = unsafe { d.u.coll };
        assert_eq!((c.seq_number, c.count, c.root), (7, 42, 3));
        assert_eq!(
            (c.n_channels, c.n_warps, c.parent_group),
            (24, 17, addr(0x77))
        );

        let mut g = Garbage::<DescrV6>::new();
        // SAFETY: the P2p member is initialised.
        assert!(unsafe { descr_to_v5(&p2p_v6(c"Send"), g.get()) });
        // SAFETY: `descr_to_v5` wrote every P2p field.
        assert_eq!(unsafe { g.get().u.p2p.n_channels }, 4);

        for t in [ty::CE_COLL, ty::CE_SYNC, ty::CE_BATCH, 1 << 20] {
            let mut g = Garbage::<DescrV6>::new();
            // SAFETY: these types read no member.
            assert!(!unsafe { descr_to_v5(&of_type(t), g.get()) }, "type {t:#x}");
        }
    }

    #[test]
    fn v4_coll_takes_parent_group_and_a_type_byte() {
        let mut g = Garbage::<DescrV4>::new();
        // SAFETY: the Coll member is initialised.
        assert!(unsafe { descr_to_v4(&coll_v6(), g.get()) });
        let d = *g.get();
        assert_eq!((d.ty, d.parent_obj, d.rank), (2, addr(0x77), 1));
        // SAFETY: `descr_to_v4` wrote every v4 Coll field.
        let c = unsafe { d.u.coll };
        assert_eq!(
            (c.seq_number, c.count, c.root, c.n_channels, c.n_warps),
            (7, 42, 3, 24, 17)
        );
        assert_eq!(
            (c.send_buff, c.recv_buff),
            (addr(0x1000).cast_const(), addr(0x2000))
        );
        // SAFETY: the pointers are the static strings of `coll_v6`.
        let algo = unsafe { CStr::from_ptr(c.algo) };
        assert_eq!(algo, c"RING");
        let bytes = bytes_of(&mut g);
        assert_eq!(bytes[0], 2);
        assert!(
            bytes[1..8].iter().all(|&b| b == SHIM_GARBAGE),
            "padding stays garbage"
        );
    }

    #[test]
    fn v4_p2p_never_copies_n_channels() {
        let mut g = Garbage::<DescrV4>::new();
        // SAFETY: the P2p member is initialised.
        assert!(unsafe { descr_to_v4(&p2p_v6(c"Recv"), g.get()) });
        let d = *g.get();
        assert_eq!((d.ty, d.parent_obj), (4, addr(0x66)));
        // SAFETY: `descr_to_v4` wrote these P2p fields.
        let p = unsafe { d.u.p2p };
        assert_eq!((p.buff, p.count, p.peer), (addr(0x3000), 9, 5));
        assert_eq!(p.n_channels, SHIM_GARBAGE);
    }

    #[test]
    fn v4_gets_no_api_launch_or_ce_events() {
        for t in [
            ty::GROUP_API,
            ty::COLL_API,
            ty::P2P_API,
            ty::KERNEL_LAUNCH,
            ty::CE_COLL,
        ] {
            let mut g = Garbage::<DescrV4>::new();
            // SAFETY: filtered types read no member.
            assert!(!unsafe { descr_to_v4(&of_type(t), g.get()) }, "type {t:#x}");
        }
        let mut k = of_type(ty::KERNEL_CH);
        k.u.kernel_ch = KernelChV4 {
            channel_id: 3,
            p_timer: 99,
        };
        let mut g = Garbage::<DescrV4>::new();
        // SAFETY: the KernelCh member is initialised.
        assert!(unsafe { descr_to_v4(&k, g.get()) });
        // SAFETY: written by `descr_to_v4`.
        let kc = unsafe { g.get().u.kernel_ch };
        assert_eq!((kc.channel_id, kc.p_timer), (3, 99));
    }

    #[test]
    fn v3_renames_channels_and_drops_the_kernel_timer() {
        let mut d = DescrV3::zeroed();
        // SAFETY: the Coll member is initialised.
        assert!(unsafe { descr_to_v3(&coll_v6(), &mut d) });
        assert_eq!((d.ty, d.parent_obj), (2, addr(0x77)));
        // SAFETY: written by `descr_to_v3`.
        let c = unsafe { d.u.coll };
        assert!(c.name.is_null());
        assert_eq!(
            (c.comm_hash, c.seq_number, c.n_max_channels, c.n_warps),
            (0, 7, 24, 17)
        );

        let mut k = of_type(ty::KERNEL_CH);
        k.u.kernel_ch = KernelChV4 {
            channel_id: 3,
            p_timer: 99,
        };
        let mut d = DescrV3::zeroed();
        // SAFETY: the KernelCh member is initialised.
        assert!(unsafe { descr_to_v3(&k, &mut d) });
        // SAFETY: written by `descr_to_v3`.
        assert_eq!(unsafe { d.u.kernel_ch.channel_id }, 3);
        let mut d = DescrV3::zeroed();
        // SAFETY: filtered types read no member.
        assert!(!unsafe { descr_to_v3(&of_type(ty::COLL_API), &mut d) });
    }

    #[test]
    fn v2_has_traffic_bytes_and_no_kernel_or_net_events() {
        let mut d = DescrV2::zeroed();
        // SAFETY: the Coll member is initialised.
        assert!(unsafe { descr_to_v2(&coll_v6(), &mut d) });
        // SAFETY: written by `descr_to_v2`.
        let c = unsafe { d.u.coll };
        assert_eq!((c.traffic_bytes, c.n_max_channels, c.n_warps), (0, 24, 17));
        // SAFETY: the pointer is the static string of `coll_v6`.
        assert_eq!(unsafe { CStr::from_ptr(c.proto) }, c"LL128");
        for t in [ty::KERNEL_CH, ty::NET_PLUGIN, ty::GROUP_API] {
            let mut d = DescrV2::zeroed();
            // SAFETY: filtered types read no member.
            assert!(!unsafe { descr_to_v2(&of_type(t), &mut d) }, "type {t:#x}");
        }
        for t in [ty::GROUP, ty::PROXY_CTRL, ty::PROXY_STEP, ty::PROXY_OP] {
            let mut d = DescrV2::zeroed();
            // SAFETY: zeroed members are initialised.
            assert!(unsafe { descr_to_v2(&of_type(t), &mut d) }, "type {t:#x}");
        }
    }

    #[test]
    fn v1_turns_strings_into_codes() {
        let mut d = DescrV1::zeroed();
        // SAFETY: the Coll member is initialised with static strings.
        assert!(unsafe { descr_to_v1(&coll_v6(), &mut d) });
        assert_eq!((d.ty, d.parent_obj, d.rank), (2, addr(0x77), 1));
        // SAFETY: written by `descr_to_v1`.
        let c = unsafe { d.u.coll };
        assert_eq!((c.func, c.datatype, c.algo, c.proto), (4, 7, 1, 1));
        assert_eq!(
            (c.op, c.traffic_bytes, c.is_collnet, c.is_nvls),
            (0, 0, 0, 0)
        );
        assert_eq!(
            (c.seq_number, c.count, c.root, c.n_max_channels),
            (7, 42, 3, 24)
        );

        let mut d = DescrV1::zeroed();
        // SAFETY: the P2p member is initialised with static strings.
        assert!(unsafe { descr_to_v1(&p2p_v6(c"Recv"), &mut d) });
        // SAFETY: written by `descr_to_v1`.
        let p = unsafe { d.u.p2p };
        assert_eq!((p.func, p.datatype, p.peer, p.count), (7, 0, 5, 9));
        assert_eq!(d.parent_obj, addr(0x66));

        assert_eq!(func_code(b"AllReduce"), 4);
        assert_eq!(func_code(b"Send"), 6);
        assert_eq!(
            func_code(b"AllGatherV"),
            6,
            "unknown funcs fall through to Send"
        );
        assert_eq!(algo_code(b"NVLS_TREE"), 5);
        assert_eq!(
            algo_code(b"Ring"),
            6,
            "names are case-sensitive; default is PAT"
        );
        assert_eq!(proto_code(b"SIMPLE"), 2);
        assert_eq!(datatype_code(b"ncclBfloat16"), 9);
        assert_eq!(
            datatype_code(b"ncclUint8"),
            8,
            "not in NCCL's table: Float64"
        );

        let mut null_strings = coll_v6();
        null_strings.u.coll.func = ptr::null();
        let mut d = DescrV1::zeroed();
        // SAFETY: NULL strings are allowed.
        assert!(unsafe { descr_to_v1(&null_strings, &mut d) });
        // SAFETY: written by `descr_to_v1`.
        assert_eq!(unsafe { d.u.coll.func }, 6);
    }

    /// Which states each version's args conversion passes on.
    #[test]
    fn state_filters_per_version() {
        let src = StateArgsV4 {
            proxy_step: ProxyStepArgs { trans_size: 1 },
        };
        let passed = |f: unsafe fn(State, Option<&StateArgsV4>, &mut StateArgsV4) -> bool| {
            (0..=31)
                .filter(|&s| {
                    let mut g = Garbage::<StateArgsV4>::new();
                    // SAFETY: all 8 bytes of `src` are initialised.
                    unsafe { f(s, Some(&src), g.get()) }
                })
                .collect::<Vec<State>>()
        };
        let v4: Vec<State> = (8..=22).collect();
        let v5: Vec<State> = (8..=24).collect();
        assert_eq!(passed(args_to_v4), v4);
        assert_eq!(passed(args_to_v5), v5);
        let v1: Vec<State> = (0..=31)
            .filter(|&s| {
                let mut d = StateArgsV1::zeroed();
                // SAFETY: all 8 bytes of `src` are initialised.
                unsafe { args_to_v1(s, Some(&src), &mut d) }
            })
            .collect();
        assert_eq!(v1, (8..=18).collect::<Vec<_>>());
    }

    #[test]
    fn state_args_copy_the_member_the_state_uses() {
        let size = StateArgsV4 {
            proxy_step: ProxyStepArgs {
                trans_size: 0x10_0000,
            },
        };
        let mut g = Garbage::<StateArgsV4>::new();
        // SAFETY: `proxy_step` is initialised.
        assert!(unsafe { args_to_v4(state::PROXY_STEP_SEND_WAIT, Some(&size), g.get()) });
        // SAFETY: written by `args_to_v4`.
        assert_eq!(unsafe { g.get().proxy_step.trans_size }, 0x10_0000);

        let ops = StateArgsV4 {
            proxy_ctrl: ProxyCtrlArgs {
                appended_proxy_ops: 6,
            },
        };
        let mut g = Garbage::<StateArgsV4>::new();
        // SAFETY: `proxy_ctrl` is initialised.
        assert!(unsafe { args_to_v5(state::PROXY_CTRL_APPEND_END, Some(&ops), g.get()) });
        assert_eq!(&bytes_of(&mut g)[..4], &6i32.to_ne_bytes());
        assert!(bytes_of(&mut g)[4..].iter().all(|&b| b == SHIM_GARBAGE));

        // v5 passes GroupApi states with its own, never-written args.
        let mut g = Garbage::<StateArgsV4>::new();
        // SAFETY: nothing is read for state 23.
        assert!(unsafe { args_to_v5(state::GROUP_START_API_STOP, None, g.get()) });
        assert!(bytes_of(&mut g).iter().all(|&b| b == SHIM_GARBAGE));

        // v1-v3 never see a transfer size.
        let mut d = StateArgsV1::zeroed();
        // SAFETY: `proxy_step` is initialised.
        assert!(unsafe { args_to_v1(state::PROXY_STEP_SEND_WAIT, Some(&size), &mut d) });
        // SAFETY: zeroed and never written.
        assert_eq!(unsafe { d.proxy_op.trans_size }, 0);
        let mut d = StateArgsV1::zeroed();
        // SAFETY: `proxy_ctrl` is initialised.
        assert!(unsafe { args_to_v1(state::PROXY_CTRL_APPEND_END, Some(&ops), &mut d) });
        // SAFETY: written by `args_to_v1`.
        assert_eq!(unsafe { d.proxy_ctrl.appended_proxy_ops }, 6);
    }
}
