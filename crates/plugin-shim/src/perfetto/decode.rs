//! Slices of an evring Perfetto trace back into records: the converter's
//! and the tests' way in. `evring_perfetto::trace::read` does the decoding
//! (prost) and tolerates cut files; this maps one slice to one [`Record`].

use super::keys::{state_from_name, Key};
use crate::model::{Info, Kind};
use crate::record::{flag, STATES};
use crate::record::{Record, Timing};
use crate::strings::Str16;
use evring_perfetto::ids;
use evring_perfetto::trace::{Slice, Trace, Value};
use std::collections::HashMap;

/// The rank of the file's stream (records of that rank carry no `rank`).
pub fn stream_rank(t: &Trace) -> i32 {
    t.stream_value("rank").and_then(Value::as_i64).unwrap_or(0) as i32
}

/// What a slice's record needs from the header of the stream it belongs to.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamOf {
    /// Records of this rank carry no `rank` annotation.
    pub rank: i32,
    /// Ids of arrows into slices (`evring_perfetto::ids`).
    pub flow_key: u64,
}

impl StreamOf {
    /// The stream slice `s` was written in (by its packet sequence).
    pub fn of(t: &Trace, s: &Slice) -> StreamOf {
        StreamOf {
            rank: t
                .seq_stream_value(s.seq, "rank")
                .and_then(Value::as_i64)
                .unwrap_or(0) as i32,
            flow_key: ids::flow_key(t, s.seq),
        }
    }
}

/// The records of a whole (or cut) trace file, in file order, and the trace.
pub fn read(bytes: &[u8]) -> (Trace, Vec<Record>) {
    let t = evring_perfetto::trace::read(bytes);
    let recs = t
        .slices
        .iter()
        .filter_map(|s| to_record(s, StreamOf::of(&t, s)))
        .collect();
    (t, recs)
}

/// As [`read`], streaming: the records of the kinds in `kinds` are handed to
/// `each` (in the order their slices end in the file) and nothing else is
/// decoded past its packet, so a reader's memory does not grow with the file.
pub fn read_each(bytes: &[u8], kinds: &[Kind], mut each: impl FnMut(Record)) -> Trace {
    let keep = |cat: &str| kinds.iter().any(|k| k.name() == cat);
    evring_perfetto::trace::read_each(bytes, keep, |t, s| {
        if let Some(r) = to_record(&s, StreamOf::of(t, &s)) {
            each(r)
        }
    })
}

/// The record a slice was written from; `None` for a slice evring did not write.
pub fn to_record(sl: &Slice, stream: StreamOf) -> Option<Record> {
    let kind = Kind::ALL.into_iter().find(|k| k.name() == sl.category)?;
    let name = &sl.name;
    let begin = sl.begin;
    let mut f: HashMap<Key, Value> = HashMap::new();
    let mut states = [(0u8, 0u64); STATES];
    let mut n_states = 0u8;
    let mut state_offsets = Vec::new();
    for (k, v) in &sl.args {
        if let Some(key) = Key::from_text(k) {
            f.insert(key, v.clone());
        } else if let Some(s) = state_from_name(k) {
            state_offsets.push((s, v.as_i64().unwrap_or(0)));
        }
    }
    let u = |k: Key| f.get(&k).and_then(Value::as_u64);
    let i = |k: Key| f.get(&k).and_then(Value::as_i64).unwrap_or(0);
    let b = |k: Key| matches!(f.get(&k), Some(Value::Bool(true)));
    let s = |k: Key| match f.get(&k) {
        Some(Value::Str(s)) => Str16::from_bytes(s.as_bytes()),
        _ => Str16::EMPTY,
    };
    let id = ids::event_id(sl, stream.flow_key)?;
    let event = |k: Key| ids::id_arg(sl, k.text());
    let start_ns = u(Key::StartNs).unwrap_or(begin);
    for (st_v, off) in state_offsets.into_iter().take(STATES) {
        states[n_states as usize] = (st_v, start_ns.wrapping_add(off as u64));
        n_states += 1;
    }
    let func = if name.as_str() != kind.name() {
        Str16::from_bytes(name.as_bytes())
    } else {
        Str16::EMPTY
    };
    let info = match kind {
        Kind::GroupApi => Info::GroupApi {
            graph_captured: b(Key::GraphCaptured),
            depth: i(Key::Depth) as i32,
        },
        Kind::CollApi => Info::CollApi {
            func,
            count: u(Key::Count).unwrap_or(0),
            datatype: s(Key::Datatype),
            root: i(Key::Root) as i32,
            stream: u(Key::Stream).unwrap_or(0),
            graph_captured: b(Key::GraphCaptured),
            user_tag: u(Key::UserTag).unwrap_or(0),
        },
        Kind::P2pApi => Info::P2pApi {
            func,
            count: u(Key::Count).unwrap_or(0),
            datatype: s(Key::Datatype),
            stream: u(Key::Stream).unwrap_or(0),
            graph_captured: b(Key::GraphCaptured),
            user_tag: u(Key::UserTag).unwrap_or(0),
        },
        Kind::KernelLaunch => Info::KernelLaunch {
            stream: u(Key::Stream).unwrap_or(0),
        },
        Kind::Coll => Info::Coll {
            seq: u(Key::Seq).unwrap_or(0),
            func,
            count: u(Key::Count).unwrap_or(0),
            root: i(Key::Root) as i32,
            datatype: s(Key::Datatype),
            n_channels: u(Key::Channels).unwrap_or(0) as u8,
            n_warps: u(Key::Warps).unwrap_or(0) as u8,
            algo: s(Key::Algo),
            proto: s(Key::Proto),
            parent_group: event(Key::Group),
            kernel_variant: s(Key::KernelVariant),
            is_sym_coll: b(Key::SymColl),
            user_tag: u(Key::UserTag).unwrap_or(0),
        },
        Kind::P2p => Info::P2p {
            func,
            datatype: s(Key::Datatype),
            count: u(Key::Count).unwrap_or(0),
            peer: i(Key::Peer) as i32,
            n_channels: u(Key::Channels).unwrap_or(0) as u8,
            parent_group: event(Key::Group),
            user_tag: u(Key::UserTag).unwrap_or(0),
        },
        Kind::ProxyOp => Info::ProxyOp {
            pid: i(Key::Pid) as i32,
            channel: u(Key::Channel).unwrap_or(0) as u8,
            peer: i(Key::Peer) as i32,
            n_steps: i(Key::Steps) as i32,
            chunk_size: i(Key::ChunkSize) as i32,
            is_send: b(Key::Send),
        },
        Kind::ProxyStep => Info::ProxyStep {
            step: i(Key::Step) as i32,
        },
        Kind::KernelCh => Info::KernelCh {
            channel: u(Key::Channel).unwrap_or(0) as u8,
            gpu_start: u(Key::GpuStart).unwrap_or(0),
        },
        Kind::NetPlugin => Info::NetPlugin { id: i(Key::NetId) },
        Kind::CeColl => Info::CeColl {
            seq: u(Key::Seq).unwrap_or(0),
            func,
            count: u(Key::Count).unwrap_or(0),
            root: i(Key::Root) as i32,
            datatype: s(Key::Datatype),
            sync: s(Key::Sync),
            stream: u(Key::Stream).unwrap_or(0),
            user_tag: u(Key::UserTag).unwrap_or(0),
        },
        Kind::CeSync => Info::CeSync {
            complete: b(Key::Complete),
            n_ranks: i(Key::Nranks) as i32,
        },
        Kind::CeBatch => Info::CeBatch {
            num_ops: i(Key::Ops) as i32,
            total_bytes: u(Key::Bytes).unwrap_or(0),
            intra_sync: b(Key::IntraSync),
        },
        Kind::KernelPhase => Info::KernelPhase {
            channel: u(Key::Channel).unwrap_or(0) as u8,
            phase: match f.get(&Key::Phase) {
                Some(Value::Str(p)) => (0..=u8::MAX)
                    .find(|&n| crate::model::phase_name(n) == p.as_str())
                    .unwrap_or(u8::MAX),
                _ => u(Key::Phase).unwrap_or(0) as u8,
            },
            gpu_start: u(Key::GpuStart).unwrap_or(0),
        },
        Kind::Group | Kind::ProxyCtrl => Info::None,
    };
    let timing = match f.get(&Key::Timing) {
        Some(Value::Str(t)) => match t.as_str() {
            "children" => Timing::Children,
            "gpu" => Timing::Gpu,
            "forced" => Timing::Forced,
            _ => Timing::Host,
        },
        _ => Timing::Host,
    };
    let mut flags = 0u32;
    if let Some(Value::Str(names)) = f.get(&Key::Flags) {
        for n in names.split(',') {
            if let Some((bit, _)) = flag::NAMES.iter().find(|(_, fname)| *fname == n) {
                flags |= bit;
            }
        }
    }
    let end_ns = u(Key::EndNs).unwrap_or(sl.end);
    let stop_ns = u(Key::StopNs).unwrap_or(end_ns);
    if stop_ns != 0 {
        flags |= flag::STOPPED;
    }
    Some(Record {
        id,
        parent: event(Key::Parent),
        ctx: 0,
        kind,
        rank: f
            .get(&Key::Rank)
            .and_then(Value::as_i64)
            .map_or(stream.rank, |r| r as i32),
        info,
        start_ns,
        stop_ns,
        end_ns,
        timing,
        gpu_start: u(Key::GpuStart).unwrap_or(0),
        gpu_end: u(Key::GpuEnd).unwrap_or(0),
        states,
        n_states,
        state_arg: u(Key::StateArg).unwrap_or(0),
        flags,
    })
}
