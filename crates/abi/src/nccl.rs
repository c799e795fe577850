//! `#[repr(C)]` mirrors of NCCL's profiler-plugin ABI, versions 1 to 7, for x86_64 (LP64).
//!
//! The layouts are those of NCCL's own headers (`src/include/plugin/nccl_profiler.h`,
//! `src/include/plugin/profiler/profiler_v1.h` … `profiler_v7.h`, `net_ib_v1.h`,
//! `net_socket_v1.h`), as tabulated with offsets in `docs/nccl-profiler-abi.md` §2. Every
//! size, alignment and field offset is asserted at compile time at the bottom of this file,
//! with the numbers written as the doc gives them, so a slip breaks the build instead of a run.
//!
//! Event types and states stay plain integers on purpose. NCCL hands plugins values a given
//! plugin may not know (states 19–24 reach v6 plugins; a v4 `type` byte sits next to garbage
//! padding), and turning an unknown value into a Rust `enum` is undefined behaviour. Never
//! transmute a `type` or a state into an enum: compare against the constants in [`ty`] and
//! [`state`].
//!
//! Union member structs are named after the first version whose layout they match
//! (`CollV5` serves v5 and v6, `KernelChV4` v4 to v7). Offsets inside a member struct are
//! relative to the union, i.e. the doc's absolute offset minus 24.

// Field names are NCCL's, in snake case; what each one means is NCCL's documentation, so
// per-field docs here would only repeat the headers.
#![allow(missing_docs)]

use core::ffi::{c_char, c_int, c_ulong, c_void};
use core::mem::{align_of, offset_of, size_of};

/// Asserts, at compile time, the size, alignment and listed field offsets of a type.
macro_rules! assert_layout {
    ($t:ty, size = $size:expr, align = $align:expr $(, $field:ident = $off:expr)* $(,)?) => {
        const _: () = {
            assert!(size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
            assert!(align_of::<$t>() == $align, concat!("alignment of ", stringify!($t)));
            $(assert!(
                offset_of!($t, $field) == $off,
                concat!("offset of ", stringify!($t), ".", stringify!($field))
            );)*
        };
    };
}

/// `ncclResult_t`. A C enum, kept as `c_int` because plugins may return values this crate
/// does not name.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: NcclResult = 0;
/// `ncclUnhandledCudaError`.
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
/// `ncclSystemError`.
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
/// `ncclInternalError`.
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
/// `ncclInvalidArgument`.
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
/// `ncclInvalidUsage`.
pub const NCCL_INVALID_USAGE: NcclResult = 5;
/// `ncclRemoteError`.
pub const NCCL_REMOTE_ERROR: NcclResult = 6;
/// `ncclInProgress`.
pub const NCCL_IN_PROGRESS: NcclResult = 7;
/// `ncclTimeout` (NCCL 2.30 and later; older cores never return it).
pub const NCCL_TIMEOUT: NcclResult = 8;

/// `ncclDebugLogLevel`.
pub type LogLevel = c_int;
/// `NCCL_LOG_NONE`.
pub const LOG_NONE: LogLevel = 0;
/// `NCCL_LOG_VERSION`.
pub const LOG_VERSION: LogLevel = 1;
/// `NCCL_LOG_WARN`.
pub const LOG_WARN: LogLevel = 2;
/// `NCCL_LOG_INFO`.
pub const LOG_INFO: LogLevel = 3;
/// `NCCL_LOG_ABORT`.
pub const LOG_ABORT: LogLevel = 4;
/// `NCCL_LOG_TRACE`.
pub const LOG_TRACE: LogLevel = 5;

/// `ncclDebugLogSubSys` flags, passed as the logger's `unsigned long flags`.
pub const NCCL_INIT: c_ulong = 0x1;
/// Subsystem flag `NCCL_COLL`.
pub const NCCL_COLL: c_ulong = 0x2;
/// Subsystem flag `NCCL_P2P`.
pub const NCCL_P2P: c_ulong = 0x4;
/// Subsystem flag `NCCL_SHM`.
pub const NCCL_SHM: c_ulong = 0x8;
/// Subsystem flag `NCCL_NET`.
pub const NCCL_NET: c_ulong = 0x10;
/// Subsystem flag `NCCL_GRAPH`.
pub const NCCL_GRAPH: c_ulong = 0x20;
/// Subsystem flag `NCCL_TUNING`.
pub const NCCL_TUNING: c_ulong = 0x40;
/// Subsystem flag `NCCL_ENV`.
pub const NCCL_ENV: c_ulong = 0x80;
/// Subsystem flag `NCCL_ALLOC`.
pub const NCCL_ALLOC: c_ulong = 0x100;
/// Subsystem flag `NCCL_CALL`.
pub const NCCL_CALL: c_ulong = 0x200;
/// Subsystem flag `NCCL_PROXY`.
pub const NCCL_PROXY: c_ulong = 0x400;
/// Subsystem flag `NCCL_NVLS`.
pub const NCCL_NVLS: c_ulong = 0x800;
/// Subsystem flag `NCCL_BOOTSTRAP`.
pub const NCCL_BOOTSTRAP: c_ulong = 0x1000;
/// Subsystem flag `NCCL_REG`.
pub const NCCL_REG: c_ulong = 0x2000;
/// Subsystem flag `NCCL_PROFILE`: the one a profiler plugin should log under.
pub const NCCL_PROFILE: c_ulong = 0x4000;
/// Subsystem flag `NCCL_RAS`.
pub const NCCL_RAS: c_ulong = 0x8000;
/// Subsystem flag `NCCL_DESTROY`.
pub const NCCL_DESTROY: c_ulong = 0x10000;
/// Subsystem flag `NCCL_ALLOC_HOST`.
pub const NCCL_ALLOC_HOST: c_ulong = 0x20000;
/// Subsystem flag `NCCL_ALL`.
pub const NCCL_ALL: c_ulong = !0;

/// `ncclDebugLogger_t`: `(level, flags, filefunc, line, fmt, ...)`.
///
/// `fmt` is a printf format, so pass messages as `c"%s"` plus the text, never as `fmt`.
pub type Logger =
    Option<unsafe extern "C" fn(LogLevel, c_ulong, *const c_char, c_int, *const c_char, ...)>;

/// `ncclProfilerEventState_t` (all versions). Values outside [`state`] do arrive.
pub type State = c_int;

/// `ncclPid_t`: `pid_t` on Linux.
pub type Pid = i32;

/// Event-type bits (`ncclProfile*`). The descriptor's `type` holds exactly one of them; the
/// activation mask is an OR of them.
pub mod ty {
    /// `ncclProfileGroup` (v1).
    pub const GROUP: u64 = 1 << 0;
    /// `ncclProfileColl` (v1).
    pub const COLL: u64 = 1 << 1;
    /// `ncclProfileP2p` (v1).
    pub const P2P: u64 = 1 << 2;
    /// `ncclProfileProxyOp` (v1).
    pub const PROXY_OP: u64 = 1 << 3;
    /// `ncclProfileProxyStep` (v1).
    pub const PROXY_STEP: u64 = 1 << 4;
    /// `ncclProfileProxyCtrl` (v1).
    pub const PROXY_CTRL: u64 = 1 << 5;
    /// `ncclProfileKernelCh` (v3).
    pub const KERNEL_CH: u64 = 1 << 6;
    /// `ncclProfileNetPlugin` (v3).
    pub const NET_PLUGIN: u64 = 1 << 7;
    /// `ncclProfileGroupApi` (v5).
    pub const GROUP_API: u64 = 1 << 8;
    /// `ncclProfileCollApi` (v5).
    pub const COLL_API: u64 = 1 << 9;
    /// `ncclProfileP2pApi` (v5).
    pub const P2P_API: u64 = 1 << 10;
    /// `ncclProfileKernelLaunch` (v5).
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
    /// `ncclProfileCeColl` (v6).
    pub const CE_COLL: u64 = 1 << 12;
    /// `ncclProfileCeSync` (v6).
    pub const CE_SYNC: u64 = 1 << 13;
    /// `ncclProfileCeBatch` (v6).
    pub const CE_BATCH: u64 = 1 << 14;
    /// `ncclProfileKernelPhase` (v7): a kernel barrier phase, child of a KernelCh. NCCL
    /// turns [`KERNEL_CH`] on whenever this bit is set.
    pub const KERNEL_PHASE: u64 = 1 << 15;

    /// Every type a v1/v2 plugin knows.
    pub const ALL_V1: u64 = 0x3F;
    /// Every type a v3/v4 plugin knows.
    pub const ALL_V3: u64 = 0xFF;
    /// Every type a v5 plugin knows.
    pub const ALL_V5: u64 = 0xFFF;
    /// Every type a v6 plugin knows.
    pub const ALL_V6: u64 = 0x7FFF;
    /// Every type a v7 plugin knows.
    pub const ALL_V7: u64 = 0xFFFF;
    /// The copy-engine types, which the v5 shim drops and clears from the mask.
    pub const CE: u64 = CE_COLL | CE_SYNC | CE_BATCH;

    /// The name of each type bit, 0 to 15: NCCL's `ncclProfile…` without the
    /// prefix (how traces, the simulator and the meter spell them).
    pub const NAMES: [&str; 16] = [
        "Group",
        "Coll",
        "P2p",
        "ProxyOp",
        "ProxyStep",
        "ProxyCtrl",
        "KernelCh",
        "NetPlugin",
        "GroupApi",
        "CollApi",
        "P2pApi",
        "KernelLaunch",
        "CeColl",
        "CeSync",
        "CeBatch",
        "KernelPhase",
    ];

    const _: () = {
        assert!(ALL_V1 == GROUP | COLL | P2P | PROXY_OP | PROXY_STEP | PROXY_CTRL);
        assert!(ALL_V3 == ALL_V1 | KERNEL_CH | NET_PLUGIN);
        assert!(ALL_V5 == ALL_V3 | GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH);
        assert!(ALL_V6 == ALL_V5 | CE);
        assert!(ALL_V7 == ALL_V6 | KERNEL_PHASE);
    };
}

/// `ncclProfilerEventState_t` values (one enum shared by every version; v4 made the values
/// explicit without changing 0–18).
pub mod state {
    use core::ffi::c_int;

    /// `ncclProfilerProxyOpSendPosted` (deprecated in v4, no longer emitted).
    pub const PROXY_OP_SEND_POSTED: c_int = 0;
    /// `ncclProfilerProxyOpSendRemFifoWait` (deprecated in v4).
    pub const PROXY_OP_SEND_REM_FIFO_WAIT: c_int = 1;
    /// `ncclProfilerProxyOpSendTransmitted` (deprecated in v4).
    pub const PROXY_OP_SEND_TRANSMITTED: c_int = 2;
    /// `ncclProfilerProxyOpSendDone` (deprecated in v4).
    pub const PROXY_OP_SEND_DONE: c_int = 3;
    /// `ncclProfilerProxyOpRecvPosted` (deprecated in v4).
    pub const PROXY_OP_RECV_POSTED: c_int = 4;
    /// `ncclProfilerProxyOpRecvReceived` (deprecated in v4).
    pub const PROXY_OP_RECV_RECEIVED: c_int = 5;
    /// `ncclProfilerProxyOpRecvTransmitted` (deprecated in v4).
    pub const PROXY_OP_RECV_TRANSMITTED: c_int = 6;
    /// `ncclProfilerProxyOpRecvDone` (deprecated in v4).
    pub const PROXY_OP_RECV_DONE: c_int = 7;
    /// `ncclProfilerProxyStepSendGPUWait`.
    pub const PROXY_STEP_SEND_GPU_WAIT: c_int = 8;
    /// `ncclProfilerProxyStepSendWait`: `transSize` is the size handed to `isend`.
    pub const PROXY_STEP_SEND_WAIT: c_int = 9;
    /// `ncclProfilerProxyStepRecvWait`.
    pub const PROXY_STEP_RECV_WAIT: c_int = 10;
    /// `ncclProfilerProxyStepRecvFlushWait`: `transSize` is the size received.
    pub const PROXY_STEP_RECV_FLUSH_WAIT: c_int = 11;
    /// `ncclProfilerProxyStepRecvGPUWait`.
    pub const PROXY_STEP_RECV_GPU_WAIT: c_int = 12;
    /// `ncclProfilerProxyCtrlIdle`.
    pub const PROXY_CTRL_IDLE: c_int = 13;
    /// `ncclProfilerProxyCtrlActive`.
    pub const PROXY_CTRL_ACTIVE: c_int = 14;
    /// `ncclProfilerProxyCtrlSleep`.
    pub const PROXY_CTRL_SLEEP: c_int = 15;
    /// `ncclProfilerProxyCtrlWakeup`.
    pub const PROXY_CTRL_WAKEUP: c_int = 16;
    /// `ncclProfilerProxyCtrlAppend`.
    pub const PROXY_CTRL_APPEND: c_int = 17;
    /// `ncclProfilerProxyCtrlAppendEnd`: `appendedProxyOps` is meaningful.
    pub const PROXY_CTRL_APPEND_END: c_int = 18;
    /// `ncclProfilerProxyOpInProgress_v4`.
    pub const PROXY_OP_IN_PROGRESS_V4: c_int = 19;
    /// `ncclProfilerProxyStepSendPeerWait_v4` (may repeat within one step).
    pub const PROXY_STEP_SEND_PEER_WAIT_V4: c_int = 20;
    /// `ncclProfilerNetPluginUpdate`.
    pub const NET_PLUGIN_UPDATE: c_int = 21;
    /// `ncclProfilerKernelChStop`: `pTimer` is the GPU end time.
    pub const KERNEL_CH_STOP: c_int = 22;
    /// `ncclProfilerGroupStartApiStop` (args pointer is NULL from a v6 core).
    pub const GROUP_START_API_STOP: c_int = 23;
    /// `ncclProfilerGroupEndApiStart` (args pointer is NULL from a v6 core).
    pub const GROUP_END_API_START: c_int = 24;
    /// `ncclProfilerCeCollStart` (declared, never emitted by the core).
    pub const CE_COLL_START: c_int = 25;
    /// `ncclProfilerCeCollComplete` (never emitted).
    pub const CE_COLL_COMPLETE: c_int = 26;
    /// `ncclProfilerCeSyncStart` (never emitted).
    pub const CE_SYNC_START: c_int = 27;
    /// `ncclProfilerCeSyncComplete` (never emitted).
    pub const CE_SYNC_COMPLETE: c_int = 28;
    /// `ncclProfilerCeBatchStart` (never emitted).
    pub const CE_BATCH_START: c_int = 29;
    /// `ncclProfilerCeBatchComplete` (never emitted).
    pub const CE_BATCH_COMPLETE: c_int = 30;
    /// `ncclProfilerKernelPhaseStop` (v7): on a KernelPhase handle, the args' `kernelCh`
    /// member ([`KernelChArgs`](super::KernelChArgs)) carries the phase's GPU end time.
    pub const KERNEL_PHASE_STOP: c_int = 31;
}

/// Network-plugin event ids (`netPlugin.id`: version in the low 16 bits, type above) and the
/// net plugins' own event-type values.
pub mod net {
    use core::ffi::c_int;

    /// `NCCL_PROFILER_NET_VER_BITS`.
    pub const VER_BITS: u32 = 16;
    /// `NCCL_PROFILER_NET_VER_MASK` (`~0U >> 16`).
    pub const VER_MASK: u32 = !0u32 >> VER_BITS;
    /// `NCCL_PROFILER_NET_TYPE_MASK` (`~0U << 16`).
    pub const TYPE_MASK: u32 = !0u32 << VER_BITS;
    /// `NCCL_PROFILER_NET_TYPE_IB`.
    pub const TYPE_IB: u32 = 1 << VER_BITS;
    /// `NCCL_PROFILER_NET_TYPE_SOCK`.
    pub const TYPE_SOCK: u32 = 2 << VER_BITS;
    /// `NCCL_PROFILER_NET_IB_VER`: `data` points to a [`NetIbDescrV1`](super::NetIbDescrV1).
    pub const IB_VER: u32 = 1;
    /// `ncclProfileQp`, the IB descriptor's `type`.
    pub const PROFILE_QP: u8 = 1;
    /// `NCCL_PROFILER_NET_SOCKET_VER`: `data` points to a
    /// [`NetSockDescrV1`](super::NetSockDescrV1).
    pub const SOCKET_VER: u32 = 1;
    /// `ncclProfileSocket`, the socket descriptor's `type`.
    pub const PROFILE_SOCKET: u8 = 1;

    /// `ncclProfilerNetEventStart`: the `type` argument of the net plugins' callback.
    pub const EVENT_START: c_int = 0;
    /// `ncclProfilerNetEventStop`.
    pub const EVENT_STOP: c_int = 1;
    /// `ncclProfilerNetEventUpdate`.
    pub const EVENT_UPDATE: c_int = 2;
    /// `ncclProfilerNetEventUpdateAndStop`.
    pub const EVENT_UPDATE_AND_STOP: c_int = 3;

    const _: () = {
        assert!(VER_MASK == 0x0000_FFFF && TYPE_MASK == 0xFFFF_0000);
        assert!(TYPE_IB == 0x1_0000 && TYPE_SOCK == 0x2_0000);
    };
}

/// `ncclProfilerCallback_t`, the callback NCCL gives network plugins:
/// `(eHandle, type, pHandle, pluginId, extData)`.
pub type NetProfilerCallback = Option<
    unsafe extern "C" fn(*mut *mut c_void, c_int, *mut c_void, i64, *mut c_void) -> NcclResult,
>;

// ---------------------------------------------------------------------------------------
// Union members shared by several versions.
// ---------------------------------------------------------------------------------------

/// `proxyOp` member, identical in v1–v7.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOpD {
    /// Pid of the process that created the op; differs from ours under PXN.
    pub pid: Pid,
    pub channel_id: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub chunk_size: c_int,
    pub is_send: c_int,
}

/// `proxyStep` member, identical in v1–v7.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStepD {
    pub step: c_int,
}

/// `netPlugin` member, identical in v3–v7.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPluginD {
    /// Net type and version, see [`net`].
    pub id: i64,
    /// The net plugin's own descriptor; valid only during the call.
    pub data: *mut c_void,
}

/// `kernelCh` member of v4–v7.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV4 {
    pub channel_id: u8,
    /// GPU `globaltimer` start time, ns.
    pub p_timer: u64,
}

// ---------------------------------------------------------------------------------------
// v5 / v6 descriptor.
// ---------------------------------------------------------------------------------------

/// `groupApi` member (v5 to v7).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApiV5 {
    pub graph_captured: bool,
    pub group_depth: c_int,
}

/// `collApi` member (v5, v6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV5 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

/// `p2pApi` member (v5, v6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV5 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

/// `kernelLaunch` member (v5 to v7).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelLaunchV5 {
    pub stream: *mut c_void,
}

/// `coll` member (v5, v6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV5 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    /// The Group handle; `parentObj` is the CollApi handle since v5.
    pub parent_group: *mut c_void,
}

/// `p2p` member (v5, v6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV5 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    /// The Group handle; `parentObj` is the P2pApi handle since v5.
    pub parent_group: *mut c_void,
}

/// `ceColl` member (v6).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollV6 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    pub intra_batch_sync: bool,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
}

/// `ceCollSync` member (v6, v7).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeSyncV6 {
    pub is_complete: bool,
    pub n_ranks: c_int,
}

/// `ceCollBatch` member (v6, v7).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeBatchV6 {
    pub num_ops: c_int,
    pub total_bytes: usize,
    pub use_intra_sync: bool,
}

/// The anonymous union of `ncclProfilerEventDescr_v6_t` (88 bytes). Without the `ce_*`
/// members it is also v5's union, with the same size, because `coll` is the largest member.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV6 {
    pub group_api: GroupApiV5,
    pub coll_api: CollApiV5,
    pub p2p_api: P2pApiV5,
    pub kernel_launch: KernelLaunchV5,
    pub coll: CollV5,
    pub p2p: P2pV5,
    pub proxy_op: ProxyOpD,
    pub proxy_step: ProxyStepD,
    pub kernel_ch: KernelChV4,
    pub net_plugin: NetPluginD,
    pub ce_coll: CeCollV6,
    pub ce_sync: CeSyncV6,
    pub ce_batch: CeBatchV6,
}

/// `ncclProfilerEventDescr_v6_t` (112 bytes). Also serves as the v5 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV6 {
    /// One bit of [`ty`].
    pub ty: u64,
    pub parent_obj: *mut c_void,
    /// Only set for Coll, P2p, ProxyOp and ProxyStep (0 otherwise).
    pub rank: c_int,
    pub u: DescrUnionV6,
}

/// `ncclProfilerEventDescr_v5_t`: [`DescrV6`] minus the `ce_*` members, same layout.
pub type DescrV5 = DescrV6;

// ---------------------------------------------------------------------------------------
// v7 descriptor.
// ---------------------------------------------------------------------------------------

/// `collApi` member (v7): v5's plus `userTag`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
    /// The per-call user tag (0: untagged).
    pub user_tag: u64,
}

/// `p2pApi` member (v7): v5's plus `userTag`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
    /// The per-call user tag (0: untagged).
    pub user_tag: u64,
}

/// `coll` member (v7): v5's plus `kernelVariant`, `isSymColl` and `userTag`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV7 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    /// The Group handle; `parentObj` is the CollApi handle.
    pub parent_group: *mut c_void,
    /// Name of the launched kernel variant (may be NULL).
    pub kernel_variant: *const c_char,
    /// The kernel is a symmetric-memory collective.
    pub is_sym_coll: bool,
    /// The per-call user tag (0: untagged).
    pub user_tag: u64,
}

/// `p2p` member (v7): v5's plus `userTag`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV7 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    /// The Group handle; `parentObj` is the P2pApi handle.
    pub parent_group: *mut c_void,
    /// The per-call user tag (0: untagged).
    pub user_tag: u64,
}

/// `ceColl` member (v7): v6's plus `userTag`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollV7 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    pub intra_batch_sync: bool,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
    /// The per-call user tag (0: untagged).
    pub user_tag: u64,
}

/// `kernelPhase` member (v7): one barrier phase of one kernel channel.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelPhaseV7 {
    pub channel_id: u8,
    /// 0 `initial_sync`, 1 `compute`, 2 `final_sync` (see [`phase`]).
    pub phase_id: u8,
    /// NCCL's name for the phase (may be NULL).
    pub phase_name: *const c_char,
    /// GPU `globaltimer` start time, ns.
    pub p_timer: u64,
}

/// `kernelPhase.phaseId` values.
pub mod phase {
    /// `initial_sync`.
    pub const INITIAL_SYNC: u8 = 0;
    /// `compute`.
    pub const COMPUTE: u8 = 1;
    /// `final_sync`.
    pub const FINAL_SYNC: u8 = 2;
}

/// The anonymous union of `ncclProfilerEventDescr_v7_t` (112 bytes; `coll` is the largest
/// member).
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV7 {
    pub group_api: GroupApiV5,
    pub coll_api: CollApiV7,
    pub p2p_api: P2pApiV7,
    pub kernel_launch: KernelLaunchV5,
    pub coll: CollV7,
    pub p2p: P2pV7,
    pub proxy_op: ProxyOpD,
    pub proxy_step: ProxyStepD,
    pub kernel_ch: KernelChV4,
    pub net_plugin: NetPluginD,
    pub ce_coll: CeCollV7,
    pub ce_sync: CeSyncV6,
    pub ce_batch: CeBatchV6,
    pub kernel_phase: KernelPhaseV7,
}

/// `ncclProfilerEventDescr_v7_t` (136 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV7 {
    /// One bit of [`ty`].
    pub ty: u64,
    pub parent_obj: *mut c_void,
    /// Only set for Coll, P2p, ProxyOp and ProxyStep (0 otherwise).
    pub rank: c_int,
    pub u: DescrUnionV7,
}

// ---------------------------------------------------------------------------------------
// v4 descriptor.
// ---------------------------------------------------------------------------------------

/// `coll` member (v4).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV4 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// `p2p` member (v4).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV4 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
}

/// The anonymous union of `ncclProfilerEventDescr_v4_t` (80 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV4 {
    pub coll: CollV4,
    pub p2p: P2pV4,
    pub proxy_op: ProxyOpD,
    pub proxy_step: ProxyStepD,
    pub kernel_ch: KernelChV4,
    pub net_plugin: NetPluginD,
}

/// `ncclProfilerEventDescr_v4_t` (104 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV4 {
    /// One bit of [`ty`], narrowed to a byte; the 7 bytes after it are padding that the v4
    /// shim does not initialise.
    pub ty: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV4,
}

// ---------------------------------------------------------------------------------------
// v3 descriptor.
// ---------------------------------------------------------------------------------------

/// `coll` member (v3).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV3 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// `p2p` member of v2 and v3 (the two are identical).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
}

/// `p2p` member of v3: the same as v2's.
pub type P2pV3 = P2pV2;

/// `kernelCh` member (v3): no timestamp yet.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV3 {
    pub channel_id: u8,
}

/// The anonymous union of `ncclProfilerEventDescr_v3_t` (96 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV3 {
    pub coll: CollV3,
    pub p2p: P2pV3,
    pub proxy_op: ProxyOpD,
    pub proxy_step: ProxyStepD,
    pub kernel_ch: KernelChV3,
    pub net_plugin: NetPluginD,
}

/// `ncclProfilerEventDescr_v3_t` (120 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV3 {
    pub ty: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV3,
}

// ---------------------------------------------------------------------------------------
// v2 descriptor.
// ---------------------------------------------------------------------------------------

/// `coll` member (v2).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// The anonymous union of `ncclProfilerEventDescr_v2_t` (104 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV2 {
    pub coll: CollV2,
    pub p2p: P2pV2,
    pub proxy_op: ProxyOpD,
    pub proxy_step: ProxyStepD,
}

/// `ncclProfilerEventDescr_v2_t` (128 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV2 {
    pub ty: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV2,
}

// ---------------------------------------------------------------------------------------
// v1 descriptor.
// ---------------------------------------------------------------------------------------

/// `coll` member (v1): func, datatype, algo and proto are numeric codes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: u8,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: u8,
    pub op: u32,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: u8,
    pub proto: u8,
    pub is_collnet: c_int,
    pub is_nvls: c_int,
}

/// `p2p` member (v1): func and datatype are numeric codes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: u8,
    pub buff: *mut c_void,
    pub datatype: u8,
    pub count: usize,
    pub peer: c_int,
}

/// The anonymous union of `ncclProfilerEventDescr_v1_t` (96 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV1 {
    pub coll: CollV1,
    pub p2p: P2pV1,
    pub proxy_op: ProxyOpD,
    pub proxy_step: ProxyStepD,
}

/// `ncclProfilerEventDescr_v1_t` (120 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DescrV1 {
    pub ty: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV1,
}

// ---------------------------------------------------------------------------------------
// State arguments.
// ---------------------------------------------------------------------------------------

/// `proxyOp` member of the v1–v3 state args.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOpArgsV1 {
    pub trans_size: usize,
    pub steps: c_int,
}

/// `proxyCtrl` member of every version's state args.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyCtrlArgs {
    pub appended_proxy_ops: c_int,
}

/// `ncclProfilerEventStateArgs_v1_t` (16 bytes); v2 and v3 are identical.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV1 {
    pub proxy_op: ProxyOpArgsV1,
    pub proxy_ctrl: ProxyCtrlArgs,
}

/// `ncclProfilerEventStateArgs_v2_t`.
pub type StateArgsV2 = StateArgsV1;
/// `ncclProfilerEventStateArgs_v3_t`.
pub type StateArgsV3 = StateArgsV1;

/// `proxyStep` member of the v4–v7 state args.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStepArgs {
    /// Only fresh in states 9 and 11; stale from the previous step otherwise.
    pub trans_size: usize,
}

/// `netPlugin` member of the v4–v7 state args.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPluginArgs {
    pub data: *mut c_void,
}

/// `kernelCh` member of the v4–v7 state args. In v7 the KernelPhase stop (state
/// [`state::KERNEL_PHASE_STOP`]) reuses it: there is no `kernelPhase` member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChArgs {
    /// GPU `globaltimer` end time, ns (of the channel, or of the phase in state 31).
    pub p_timer: u64,
}

/// `ncclProfilerEventStateArgs_v4_t` (8 bytes); v5, v6 and v7 have the same layout.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV4 {
    pub proxy_step: ProxyStepArgs,
    pub proxy_ctrl: ProxyCtrlArgs,
    pub net_plugin: NetPluginArgs,
    pub kernel_ch: KernelChArgs,
}

/// `ncclProfilerEventStateArgs_v5_t`.
pub type StateArgsV5 = StateArgsV4;
/// `ncclProfilerEventStateArgs_v6_t`.
pub type StateArgsV6 = StateArgsV4;
/// `ncclProfilerEventStateArgs_v7_t`: the same four members as v4, the `kernelCh` one also
/// serving the KernelPhase stop.
pub type StateArgsV7 = StateArgsV4;

// ---------------------------------------------------------------------------------------
// Network-plugin descriptors (what `netPlugin.data` points to).
// ---------------------------------------------------------------------------------------

/// `qp` member of the IB net descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetIbQpV1 {
    pub device: c_int,
    pub wr_id: u64,
    pub opcode: c_int,
    pub qp_num: c_int,
    pub length: usize,
}

/// `ncclProfilerNetIbDescr_v1_t` (40 bytes). The C type wraps `qp` in a one-member union,
/// which has the same layout as the plain field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetIbDescrV1 {
    /// [`net::PROFILE_QP`].
    pub ty: u8,
    pub qp: NetIbQpV1,
}

/// `sock` member of the socket net descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetSockV1 {
    pub fd: c_int,
    pub op: c_int,
    pub length: usize,
}

/// `ncclProfilerNetSockDescr_v1_t` (24 bytes); `sock` sits in a one-member union in C.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetSockDescrV1 {
    /// [`net::PROFILE_SOCKET`].
    pub ty: u8,
    pub sock: NetSockV1,
}

macro_rules! impl_zeroed {
    ($($t:ty),* $(,)?) => {$(
        impl $t {
            /// All bytes zero: null pointers, `false`, 0. The same value as C's `= {0}`.
            pub fn zeroed() -> Self {
                // SAFETY: every field of this type, recursively, is an integer, a raw
                // pointer, a `bool` or a union of those, and the all-zero bit pattern is a
                // valid value for each of them.
                unsafe { core::mem::zeroed() }
            }
        }
    )*};
}

impl_zeroed!(
    ProxyOpD,
    ProxyStepD,
    NetPluginD,
    KernelChV4,
    GroupApiV5,
    CollApiV5,
    P2pApiV5,
    KernelLaunchV5,
    CollV5,
    P2pV5,
    CeCollV6,
    CeSyncV6,
    CeBatchV6,
    DescrUnionV6,
    DescrV6,
    CollApiV7,
    P2pApiV7,
    CollV7,
    P2pV7,
    CeCollV7,
    KernelPhaseV7,
    DescrUnionV7,
    DescrV7,
    CollV4,
    P2pV4,
    DescrUnionV4,
    DescrV4,
    CollV3,
    P2pV2,
    KernelChV3,
    DescrUnionV3,
    DescrV3,
    CollV2,
    DescrUnionV2,
    DescrV2,
    CollV1,
    P2pV1,
    DescrUnionV1,
    DescrV1,
    ProxyOpArgsV1,
    ProxyCtrlArgs,
    StateArgsV1,
    ProxyStepArgs,
    NetPluginArgs,
    KernelChArgs,
    StateArgsV4,
    NetIbQpV1,
    NetIbDescrV1,
    NetSockV1,
    NetSockDescrV1,
);

// ---------------------------------------------------------------------------------------
// Function tables.
// ---------------------------------------------------------------------------------------

/// `init` of v1–v3: `(void** context, int* eActivationMask)`.
pub type InitV1 =
    unsafe extern "C" fn(context: *mut *mut c_void, e_activation_mask: *mut c_int) -> NcclResult;

/// `init` of v4: `(context, eActivationMask, commName, commHash, nNodes, nranks, rank, logfn)`.
pub type InitV4 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    e_activation_mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: Logger,
) -> NcclResult;

/// `init` of v5, v6 and v7: the comm id moved in front of the mask.
pub type InitV5 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    comm_id: u64,
    e_activation_mask: *mut c_int,
    comm_name: *const c_char,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: Logger,
) -> NcclResult;

macro_rules! profiler_table {
    ($(#[$doc:meta])* $name:ident, init: $init:ty, descr: $descr:ty, args: $args:ty) => {
        $(#[$doc])*
        ///
        /// 48 bytes: `name` and five function pointers, at the same offsets in every version.
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct $name {
            pub name: *const c_char,
            pub init: $init,
            pub start_event: unsafe extern "C" fn(
                context: *mut c_void,
                e_handle: *mut *mut c_void,
                e_descr: *mut $descr,
            ) -> NcclResult,
            pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
            pub record_event_state: unsafe extern "C" fn(
                e_handle: *mut c_void,
                e_state: State,
                e_state_args: *mut $args,
            ) -> NcclResult,
            pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
        }

        // SAFETY: `name` is the only field that is not `Sync`. Tables are immutable once
        // built and `name` points at a string literal, which any thread may read; the
        // function pointers themselves are `Sync`.
        unsafe impl Sync for $name {}

        assert_layout!($name, size = 48, align = 8,
            name = 0, init = 8, start_event = 16, stop_event = 24, record_event_state = 32,
            finalize = 40);
    };
}

profiler_table!(
    /// `ncclProfiler_v1_t`, exported as `ncclProfiler_v1` (NCCL 2.23).
    ProfilerV1, init: InitV1, descr: DescrV1, args: StateArgsV1
);
profiler_table!(
    /// `ncclProfiler_v2_t`, exported as `ncclProfiler_v2` (NCCL 2.24, 2.25).
    ProfilerV2, init: InitV1, descr: DescrV2, args: StateArgsV2
);
profiler_table!(
    /// `ncclProfiler_v3_t`, exported as `ncclProfiler_v3` (NCCL 2.26).
    ProfilerV3, init: InitV1, descr: DescrV3, args: StateArgsV3
);
profiler_table!(
    /// `ncclProfiler_v4_t`, exported as `ncclProfiler_v4` (NCCL 2.27).
    ProfilerV4, init: InitV4, descr: DescrV4, args: StateArgsV4
);
profiler_table!(
    /// `ncclProfiler_v5_t`, exported as `ncclProfiler_v5` (NCCL 2.28).
    ProfilerV5, init: InitV5, descr: DescrV5, args: StateArgsV5
);
profiler_table!(
    /// `ncclProfiler_v6_t`, exported as `ncclProfiler_v6` (NCCL 2.29, 2.30).
    ProfilerV6, init: InitV5, descr: DescrV6, args: StateArgsV6
);
profiler_table!(
    /// `ncclProfiler_v7_t`, exported as `ncclProfiler_v7` (NCCL 2.31 and later).
    ProfilerV7, init: InitV5, descr: DescrV7, args: StateArgsV7
);

// ---------------------------------------------------------------------------------------
// Layout checks. Member-struct offsets are written as the doc's absolute offset minus the
// union's offset `U`, so each line can be compared with the doc's tables directly.
// ---------------------------------------------------------------------------------------

/// Offset of the anonymous union in every descriptor version.
const U: usize = 24;

assert_layout!(
    ProxyOpD,
    size = 24,
    align = 4,
    pid = 24 - U,
    channel_id = 28 - U,
    peer = 32 - U,
    n_steps = 36 - U,
    chunk_size = 40 - U,
    is_send = 44 - U
);
assert_layout!(ProxyStepD, size = 4, align = 4, step = 24 - U);
assert_layout!(NetPluginD, size = 16, align = 8, id = 24 - U, data = 32 - U);
assert_layout!(
    KernelChV4,
    size = 16,
    align = 8,
    channel_id = 24 - U,
    p_timer = 32 - U
);

assert_layout!(
    GroupApiV5,
    size = 8,
    align = 4,
    graph_captured = 24 - U,
    group_depth = 28 - U
);
assert_layout!(
    CollApiV5,
    size = 48,
    align = 8,
    func = 24 - U,
    count = 32 - U,
    datatype = 40 - U,
    root = 48 - U,
    stream = 56 - U,
    graph_captured = 64 - U
);
assert_layout!(
    P2pApiV5,
    size = 40,
    align = 8,
    func = 24 - U,
    count = 32 - U,
    datatype = 40 - U,
    stream = 48 - U,
    graph_captured = 56 - U
);
assert_layout!(KernelLaunchV5, size = 8, align = 8, stream = 24 - U);
assert_layout!(
    CollV5,
    size = 88,
    align = 8,
    seq_number = 24 - U,
    func = 32 - U,
    send_buff = 40 - U,
    recv_buff = 48 - U,
    count = 56 - U,
    root = 64 - U,
    datatype = 72 - U,
    n_channels = 80 - U,
    n_warps = 81 - U,
    algo = 88 - U,
    proto = 96 - U,
    parent_group = 104 - U
);
assert_layout!(
    P2pV5,
    size = 48,
    align = 8,
    func = 24 - U,
    buff = 32 - U,
    datatype = 40 - U,
    count = 48 - U,
    peer = 56 - U,
    n_channels = 60 - U,
    parent_group = 64 - U
);
assert_layout!(
    CeCollV6,
    size = 88,
    align = 8,
    seq_number = 24 - U,
    func = 32 - U,
    send_buff = 40 - U,
    recv_buff = 48 - U,
    count = 56 - U,
    root = 64 - U,
    datatype = 72 - U,
    sync_strategy = 80 - U,
    intra_batch_sync = 88 - U,
    batch_size = 92 - U,
    num_batches = 96 - U,
    ce_seq_num = 100 - U,
    stream = 104 - U
);
assert_layout!(
    CeSyncV6,
    size = 8,
    align = 4,
    is_complete = 24 - U,
    n_ranks = 28 - U
);
assert_layout!(
    CeBatchV6,
    size = 24,
    align = 8,
    num_ops = 24 - U,
    total_bytes = 32 - U,
    use_intra_sync = 40 - U
);
assert_layout!(
    DescrUnionV6,
    size = 88,
    align = 8,
    group_api = 0,
    coll_api = 0,
    p2p_api = 0,
    kernel_launch = 0,
    coll = 0,
    p2p = 0,
    proxy_op = 0,
    proxy_step = 0,
    kernel_ch = 0,
    net_plugin = 0,
    ce_coll = 0,
    ce_sync = 0,
    ce_batch = 0
);
assert_layout!(
    DescrV6,
    size = 112,
    align = 8,
    ty = 0,
    parent_obj = 8,
    rank = 16,
    u = U
);

assert_layout!(
    CollApiV7,
    size = 56,
    align = 8,
    func = 24 - U,
    count = 32 - U,
    datatype = 40 - U,
    root = 48 - U,
    stream = 56 - U,
    graph_captured = 64 - U,
    user_tag = 72 - U
);
assert_layout!(
    P2pApiV7,
    size = 48,
    align = 8,
    func = 24 - U,
    count = 32 - U,
    datatype = 40 - U,
    stream = 48 - U,
    graph_captured = 56 - U,
    user_tag = 64 - U
);
assert_layout!(
    CollV7,
    size = 112,
    align = 8,
    seq_number = 24 - U,
    func = 32 - U,
    send_buff = 40 - U,
    recv_buff = 48 - U,
    count = 56 - U,
    root = 64 - U,
    datatype = 72 - U,
    n_channels = 80 - U,
    n_warps = 81 - U,
    algo = 88 - U,
    proto = 96 - U,
    parent_group = 104 - U,
    kernel_variant = 112 - U,
    is_sym_coll = 120 - U,
    user_tag = 128 - U
);
assert_layout!(
    P2pV7,
    size = 56,
    align = 8,
    func = 24 - U,
    buff = 32 - U,
    datatype = 40 - U,
    count = 48 - U,
    peer = 56 - U,
    n_channels = 60 - U,
    parent_group = 64 - U,
    user_tag = 72 - U
);
assert_layout!(
    CeCollV7,
    size = 96,
    align = 8,
    seq_number = 24 - U,
    func = 32 - U,
    send_buff = 40 - U,
    recv_buff = 48 - U,
    count = 56 - U,
    root = 64 - U,
    datatype = 72 - U,
    sync_strategy = 80 - U,
    intra_batch_sync = 88 - U,
    batch_size = 92 - U,
    num_batches = 96 - U,
    ce_seq_num = 100 - U,
    stream = 104 - U,
    user_tag = 112 - U
);
assert_layout!(
    KernelPhaseV7,
    size = 24,
    align = 8,
    channel_id = 24 - U,
    phase_id = 25 - U,
    phase_name = 32 - U,
    p_timer = 40 - U
);
assert_layout!(
    DescrUnionV7,
    size = 112,
    align = 8,
    group_api = 0,
    coll_api = 0,
    p2p_api = 0,
    kernel_launch = 0,
    coll = 0,
    p2p = 0,
    proxy_op = 0,
    proxy_step = 0,
    kernel_ch = 0,
    net_plugin = 0,
    ce_coll = 0,
    ce_sync = 0,
    ce_batch = 0,
    kernel_phase = 0
);
assert_layout!(
    DescrV7,
    size = 136,
    align = 8,
    ty = 0,
    parent_obj = 8,
    rank = 16,
    u = U
);

assert_layout!(
    CollV4,
    size = 80,
    align = 8,
    seq_number = 24 - U,
    func = 32 - U,
    send_buff = 40 - U,
    recv_buff = 48 - U,
    count = 56 - U,
    root = 64 - U,
    datatype = 72 - U,
    n_channels = 80 - U,
    n_warps = 81 - U,
    algo = 88 - U,
    proto = 96 - U
);
assert_layout!(
    P2pV4,
    size = 40,
    align = 8,
    func = 24 - U,
    buff = 32 - U,
    datatype = 40 - U,
    count = 48 - U,
    peer = 56 - U,
    n_channels = 60 - U
);
assert_layout!(
    DescrUnionV4,
    size = 80,
    align = 8,
    coll = 0,
    p2p = 0,
    proxy_op = 0,
    proxy_step = 0,
    kernel_ch = 0,
    net_plugin = 0
);
assert_layout!(
    DescrV4,
    size = 104,
    align = 8,
    ty = 0,
    parent_obj = 8,
    rank = 16,
    u = U
);

assert_layout!(
    CollV3,
    size = 96,
    align = 8,
    name = 24 - U,
    comm_hash = 32 - U,
    seq_number = 40 - U,
    func = 48 - U,
    send_buff = 56 - U,
    recv_buff = 64 - U,
    count = 72 - U,
    root = 80 - U,
    datatype = 88 - U,
    n_max_channels = 96 - U,
    n_warps = 97 - U,
    algo = 104 - U,
    proto = 112 - U
);
assert_layout!(
    P2pV2,
    size = 56,
    align = 8,
    name = 24 - U,
    comm_hash = 32 - U,
    func = 40 - U,
    buff = 48 - U,
    datatype = 56 - U,
    count = 64 - U,
    peer = 72 - U
);
assert_layout!(KernelChV3, size = 1, align = 1, channel_id = 24 - U);
assert_layout!(
    DescrUnionV3,
    size = 96,
    align = 8,
    coll = 0,
    p2p = 0,
    proxy_op = 0,
    proxy_step = 0,
    kernel_ch = 0,
    net_plugin = 0
);
assert_layout!(
    DescrV3,
    size = 120,
    align = 8,
    ty = 0,
    parent_obj = 8,
    rank = 16,
    u = U
);

assert_layout!(
    CollV2,
    size = 104,
    align = 8,
    name = 24 - U,
    comm_hash = 32 - U,
    seq_number = 40 - U,
    func = 48 - U,
    send_buff = 56 - U,
    recv_buff = 64 - U,
    count = 72 - U,
    root = 80 - U,
    datatype = 88 - U,
    traffic_bytes = 96 - U,
    n_max_channels = 104 - U,
    n_warps = 105 - U,
    algo = 112 - U,
    proto = 120 - U
);
assert_layout!(
    DescrUnionV2,
    size = 104,
    align = 8,
    coll = 0,
    p2p = 0,
    proxy_op = 0,
    proxy_step = 0
);
assert_layout!(
    DescrV2,
    size = 128,
    align = 8,
    ty = 0,
    parent_obj = 8,
    rank = 16,
    u = U
);

assert_layout!(
    CollV1,
    size = 96,
    align = 8,
    name = 24 - U,
    comm_hash = 32 - U,
    seq_number = 40 - U,
    func = 48 - U,
    send_buff = 56 - U,
    recv_buff = 64 - U,
    count = 72 - U,
    root = 80 - U,
    datatype = 84 - U,
    op = 88 - U,
    traffic_bytes = 96 - U,
    n_max_channels = 104 - U,
    n_warps = 105 - U,
    algo = 106 - U,
    proto = 107 - U,
    is_collnet = 108 - U,
    is_nvls = 112 - U
);
assert_layout!(
    P2pV1,
    size = 56,
    align = 8,
    name = 24 - U,
    comm_hash = 32 - U,
    func = 40 - U,
    buff = 48 - U,
    datatype = 56 - U,
    count = 64 - U,
    peer = 72 - U
);
assert_layout!(
    DescrUnionV1,
    size = 96,
    align = 8,
    coll = 0,
    p2p = 0,
    proxy_op = 0,
    proxy_step = 0
);
assert_layout!(
    DescrV1,
    size = 120,
    align = 8,
    ty = 0,
    parent_obj = 8,
    rank = 16,
    u = U
);

assert_layout!(
    ProxyOpArgsV1,
    size = 16,
    align = 8,
    trans_size = 0,
    steps = 8
);
assert_layout!(ProxyCtrlArgs, size = 4, align = 4, appended_proxy_ops = 0);
assert_layout!(
    StateArgsV1,
    size = 16,
    align = 8,
    proxy_op = 0,
    proxy_ctrl = 0
);
assert_layout!(ProxyStepArgs, size = 8, align = 8, trans_size = 0);
assert_layout!(NetPluginArgs, size = 8, align = 8, data = 0);
assert_layout!(KernelChArgs, size = 8, align = 8, p_timer = 0);
assert_layout!(
    StateArgsV4,
    size = 8,
    align = 8,
    proxy_step = 0,
    proxy_ctrl = 0,
    net_plugin = 0,
    kernel_ch = 0
);

/// Offset of the one-member union in both net descriptors.
const NET_U: usize = 8;

assert_layout!(
    NetIbQpV1,
    size = 32,
    align = 8,
    device = 8 - NET_U,
    wr_id = 16 - NET_U,
    opcode = 24 - NET_U,
    qp_num = 28 - NET_U,
    length = 32 - NET_U
);
assert_layout!(NetIbDescrV1, size = 40, align = 8, ty = 0, qp = NET_U);
assert_layout!(
    NetSockV1,
    size = 16,
    align = 8,
    fd = 8 - NET_U,
    op = 12 - NET_U,
    length = 16 - NET_U
);
assert_layout!(NetSockDescrV1, size = 24, align = 8, ty = 0, sock = NET_U);

// The logger and callback are single nullable code pointers.
assert_layout!(Logger, size = 8, align = 8);
assert_layout!(NetProfilerCallback, size = 8, align = 8);

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte offset of `field` inside `whole`, from their addresses.
    fn at<T, F>(whole: &T, field: &F) -> usize {
        field as *const F as usize - whole as *const T as usize
    }

    #[test]
    fn v7_fields_land_where_the_header_puts_them() {
        let mut d = DescrV7::zeroed();
        d.ty = ty::COLL;
        d.u.coll = CollV7::zeroed();
        // SAFETY: the union was just given a `coll` value, and only fields are addressed.
        unsafe {
            d.u.coll.user_tag = 0x1122_3344_5566_7788;
            d.u.coll.is_sym_coll = true;
            assert_eq!(at(&d, &d.u.coll.kernel_variant), 112);
            assert_eq!(at(&d, &d.u.coll.is_sym_coll), 120);
            assert_eq!(at(&d, &d.u.coll.user_tag), 128);
            assert_eq!(at(&d, &d.u.coll_api.user_tag), 72);
            assert_eq!(at(&d, &d.u.p2p_api.user_tag), 64);
            assert_eq!(at(&d, &d.u.p2p.user_tag), 72);
            assert_eq!(at(&d, &d.u.ce_coll.user_tag), 112);
            assert_eq!(at(&d, &d.u.kernel_phase.phase_id), 25);
            assert_eq!(at(&d, &d.u.kernel_phase.p_timer), 40);
        }
        // SAFETY: `DescrV7` is plain old data of `size_of` bytes, read as bytes.
        let bytes: &[u8] = unsafe {
            core::slice::from_raw_parts(&d as *const DescrV7 as *const u8, size_of::<DescrV7>())
        };
        assert_eq!(bytes.len(), 136);
        assert_eq!(bytes[120], 1);
        assert_eq!(&bytes[128..136], &0x1122_3344_5566_7788u64.to_le_bytes());
    }

    #[test]
    fn v7_adds_one_type_and_one_state() {
        assert_eq!(ty::KERNEL_PHASE, 0x8000);
        assert_eq!(ty::ALL_V7 & !ty::ALL_V6, ty::KERNEL_PHASE);
        assert_eq!(state::KERNEL_PHASE_STOP, 31);
        assert_eq!(size_of::<StateArgsV7>(), 8);
        assert_eq!(size_of::<ProfilerV7>(), 48);
    }
}
