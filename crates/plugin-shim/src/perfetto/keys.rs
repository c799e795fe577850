//! The fixed vocabulary of a Perfetto trace: annotation keys, state names,
//! categories. Each has a fixed interned id, written once in a file's header,
//! so records refer to them without any lookup.

use crate::model::Kind;

macro_rules! keys {
    ($($name:ident = $text:literal,)*) => {
        /// A debug-annotation key (its interned id is its index + 1).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Key { $($name,)* }

        impl Key {
            pub const ALL: &'static [Key] = &[$(Key::$name,)*];

            pub fn text(self) -> &'static str {
                match self { $(Key::$name => $text,)* }
            }

            pub fn iid(self) -> u64 {
                self as u64 + 1
            }

            pub fn from_text(text: &str) -> Option<Key> {
                match text { $($text => Some(Key::$name),)* _ => None }
            }
        }
    };
}

keys! {
    Id = "id",
    Parent = "parent",
    Rank = "rank",
    Timing = "timing",
    StartNs = "start_ns",
    StopNs = "stop_ns",
    EndNs = "end_ns",
    GpuStart = "gpu_start",
    GpuEnd = "gpu_end",
    StateArg = "state_arg",
    Flags = "flags",
    GraphCaptured = "graph_captured",
    Depth = "depth",
    Count = "count",
    Datatype = "datatype",
    Root = "root",
    Stream = "stream",
    Seq = "seq",
    Channels = "channels",
    Warps = "warps",
    Algo = "algo",
    Proto = "proto",
    Group = "group",
    Peer = "peer",
    Pid = "pid",
    Channel = "channel",
    Steps = "steps",
    ChunkSize = "chunk_size",
    Send = "send",
    Step = "step",
    NetId = "net_id",
    Sync = "sync",
    Complete = "complete",
    Nranks = "nranks",
    Ops = "ops",
    Bytes = "bytes",
    IntraSync = "intra_sync",
    UserTag = "user_tag",
    KernelVariant = "kernel_variant",
    SymColl = "sym_coll",
    Phase = "phase",
}

/// Interned ids of state-name annotation keys start here (id = base + state).
pub const STATE_IID_BASE: u64 = 64;

/// NCCL's name of a `ncclProfilerEventState_t` value, without the
/// `ncclProfiler`/kind prefix and the `_v4` suffix.
pub fn state_name(state: u8) -> &'static str {
    match state {
        0 => "SendPosted",
        1 => "SendRemFifoWait",
        2 => "SendTransmitted",
        3 => "SendDone",
        4 => "RecvPosted",
        5 => "RecvReceived",
        6 => "RecvTransmitted",
        7 => "RecvDone",
        8 => "SendGPUWait",
        9 => "SendWait",
        10 => "RecvWait",
        11 => "RecvFlushWait",
        12 => "RecvGPUWait",
        13 => "Idle",
        14 => "Active",
        15 => "Sleep",
        16 => "Wakeup",
        17 => "Append",
        18 => "AppendEnd",
        19 => "InProgress",
        20 => "SendPeerWait",
        21 => "NetPluginUpdate",
        22 => "KernelChStop",
        23 => "GroupStartApiStop",
        24 => "GroupEndApiStart",
        25 => "CeCollStart",
        26 => "CeCollComplete",
        27 => "CeSyncStart",
        28 => "CeSyncComplete",
        29 => "CeBatchStart",
        30 => "CeBatchComplete",
        31 => "KernelPhaseStop",
        _ => "UnknownState",
    }
}

/// Highest state value with a name.
pub const LAST_STATE: u8 = 31;

/// The state value of an annotation key written by [`state_name`].
pub fn state_from_name(name: &str) -> Option<u8> {
    (0..=LAST_STATE).find(|&s| state_name(s) == name)
}

/// Interned id of a kind's category and of its default event name.
pub fn kind_iid(kind: Kind) -> u64 {
    kind as u64 + 1
}

/// Interned ids of function names (`AllReduce`, `Send`...) start here.
pub const FUNC_IID_BASE: u64 = 32;

pub use evring_perfetto::trace::{EVRING_CATEGORY, STREAM_EVENT, SUMMARY_EVENT};
