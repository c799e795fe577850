//! Reading an evring Perfetto trace back into records: the converter's and
//! the tests' way in. Uses prost's decoder through `evring_perfetto::read`,
//! so a cut file yields every record before the cut.

use super::keys::{state_from_name, Key, EVRING_CATEGORY, STREAM_EVENT, SUMMARY_EVENT};
use crate::model::{Info, Kind};
use crate::node::{flag, STATES};
use crate::record::{Record, Timing};
use crate::strings::Str16;
use evring_perfetto::proto::{DebugAnnotation, EventType, TracePacket};
use evring_perfetto::read::{packets, Stop};
use std::collections::HashMap;

/// A debug-annotation value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Uint(u64),
    Int(i64),
    Bool(bool),
    Str(String),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            Value::Bool(b) => Some(b as u64),
            Value::Str(_) => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Uint(v) => i64::try_from(v).ok(),
            Value::Int(v) => Some(v),
            Value::Bool(b) => Some(b as i64),
            Value::Str(_) => None,
        }
    }
}

/// One record's slice as read back.
#[derive(Debug, Clone)]
pub struct Slice {
    pub record: Record,
    /// Event name and category as the UI shows them.
    pub name: String,
    pub category: String,
    pub track: u64,
    /// Slice begin and end timestamps (CLOCK_MONOTONIC ns).
    pub begin: u64,
    pub end: u64,
    /// Flow ids leaving this slice (to children) and ending in it (from its parent).
    pub flows_out: Vec<u64>,
    pub flows_in: Vec<u64>,
}

/// A track descriptor as read back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Track {
    pub name: String,
    pub parent: Option<u64>,
    pub pid: Option<i32>,
    pub labels: Vec<String>,
}

/// Everything read from one file.
#[derive(Debug, Default)]
pub struct Trace {
    pub packets: usize,
    /// Fields of the `evring.stream` instant (host, pid, comm_id, rank, clocks...).
    pub stream: Vec<(String, Value)>,
    /// Fields of the `evring.summary` instant (absent when the file was cut).
    pub summary: Option<Vec<(String, Value)>>,
    pub slices: Vec<Slice>,
    pub tracks: HashMap<u64, Track>,
    /// Every `ClockSnapshot`, as (clock id, timestamp) pairs.
    pub clocks: Vec<Vec<(u32, u64)>>,
    /// Why reading stopped early (cut or garbage), if it did.
    pub stop: Option<Stop>,
    /// Slice begins never ended (the file was cut between the two packets).
    pub unterminated: usize,
    /// Events that did not decode into a record (unknown category, no id...).
    pub malformed: usize,
}

impl Trace {
    pub fn stream_value(&self, key: &str) -> Option<&Value> {
        self.stream.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn summary_value(&self, key: &str) -> Option<&Value> {
        self.summary
            .as_ref()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.slices.iter().map(|s| &s.record)
    }
}

#[derive(Default)]
struct Interned {
    categories: HashMap<u64, String>,
    names: HashMap<u64, String>,
    keys: HashMap<u64, String>,
    strings: HashMap<u64, Vec<u8>>,
}

/// Reads a whole (or cut) trace file.
pub fn read(bytes: &[u8]) -> Trace {
    let mut t = Trace::default();
    let mut seqs: HashMap<u32, Interned> = HashMap::new();
    let mut open: HashMap<u64, Slice> = HashMap::new();
    let mut stream_rank = 0i32;
    let mut it = packets(bytes);
    for p in it.by_ref() {
        t.packets += 1;
        let seq = p.trusted_packet_sequence_id.unwrap_or(0);
        if p.sequence_flags.unwrap_or(0)
            & evring_perfetto::proto::seq_flags::INCREMENTAL_STATE_CLEARED
            != 0
        {
            seqs.insert(seq, Interned::default());
        }
        let st = seqs.entry(seq).or_default();
        learn(st, &p);
        if let Some(c) = &p.clock_snapshot {
            t.clocks.push(
                c.clocks
                    .iter()
                    .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
                    .collect(),
            );
        }
        if let Some(d) = &p.track_descriptor {
            t.tracks.insert(
                d.uuid.unwrap_or(0),
                Track {
                    name: d
                        .name
                        .clone()
                        .or_else(|| d.process.as_ref().and_then(|p| p.process_name.clone()))
                        .unwrap_or_default(),
                    parent: d.parent_uuid,
                    pid: d.process.as_ref().and_then(|p| p.pid),
                    labels: d
                        .process
                        .as_ref()
                        .map(|p| p.process_labels.clone())
                        .unwrap_or_default(),
                },
            );
        }
        let Some(ev) = &p.track_event else { continue };
        let ts = p.timestamp.unwrap_or(0);
        let track = ev.track_uuid.unwrap_or(0);
        match ev.r#type.and_then(|v| EventType::try_from(v).ok()) {
            Some(EventType::Instant) => {
                let fields: Vec<(String, Value)> = ev
                    .debug_annotations
                    .iter()
                    .filter_map(|a| annotation(st, a))
                    .collect();
                let is_evring = ev.categories.iter().any(|c| c == EVRING_CATEGORY);
                match ev.name.as_deref() {
                    Some(STREAM_EVENT) if is_evring => {
                        if let Some(r) = fields.iter().find(|(k, _)| k == "rank") {
                            stream_rank = r.1.as_i64().unwrap_or(0) as i32;
                        }
                        t.stream = fields;
                    }
                    Some(SUMMARY_EVENT) if is_evring => t.summary = Some(fields),
                    _ => {}
                }
            }
            Some(EventType::SliceBegin) => match slice(st, &p, stream_rank) {
                Some(s) => {
                    if open.insert(track, s).is_some() {
                        t.unterminated += 1;
                    }
                }
                None => t.malformed += 1,
            },
            Some(EventType::SliceEnd) => {
                if let Some(mut s) = open.remove(&track) {
                    s.end = ts;
                    finish(&mut s);
                    t.slices.push(s);
                }
            }
            _ => {}
        }
    }
    t.unterminated += open.len();
    t.stop = it.stop().cloned();
    t
}

fn learn(st: &mut Interned, p: &TracePacket) {
    let Some(i) = &p.interned_data else { return };
    for (map, list) in [
        (&mut st.categories, &i.event_categories),
        (&mut st.names, &i.event_names),
        (&mut st.keys, &i.debug_annotation_names),
    ] {
        for n in list {
            map.insert(n.iid.unwrap_or(0), n.name.clone().unwrap_or_default());
        }
    }
    for s in &i.debug_annotation_string_values {
        st.strings
            .insert(s.iid.unwrap_or(0), s.str.clone().unwrap_or_default());
    }
}

fn annotation(st: &Interned, a: &DebugAnnotation) -> Option<(String, Value)> {
    let key = match (&a.name, a.name_iid) {
        (Some(n), _) => n.clone(),
        (None, Some(iid)) => st.keys.get(&iid)?.clone(),
        (None, None) => return None,
    };
    let v = if let Some(v) = a.uint_value.or(a.pointer_value) {
        Value::Uint(v)
    } else if let Some(v) = a.int_value {
        Value::Int(v)
    } else if let Some(v) = a.bool_value {
        Value::Bool(v)
    } else if let Some(v) = &a.string_value {
        Value::Str(v.clone())
    } else if let Some(iid) = a.string_value_iid {
        Value::Str(String::from_utf8_lossy(st.strings.get(&iid)?).into_owned())
    } else {
        return None;
    };
    Some((key, v))
}

/// The begin packet of a record: everything but its end.
fn slice(st: &Interned, p: &TracePacket, stream_rank: i32) -> Option<Slice> {
    let ev = p.track_event.as_ref()?;
    let category = st.categories.get(ev.category_iids.first()?)?.clone();
    let kind = Kind::ALL.into_iter().find(|k| k.name() == category)?;
    let name = match (ev.name_iid, &ev.name) {
        (Some(iid), _) => st.names.get(&iid)?.clone(),
        (None, Some(n)) => n.clone(),
        (None, None) => return None,
    };
    let begin = p.timestamp.unwrap_or(0);
    let mut f: HashMap<Key, Value> = HashMap::new();
    let mut states = [(0u8, 0u64); STATES];
    let mut n_states = 0u8;
    let mut state_offsets = Vec::new();
    for a in &ev.debug_annotations {
        let Some((k, v)) = annotation(st, a) else {
            continue;
        };
        if let Some(key) = Key::from_text(&k) {
            f.insert(key, v);
        } else if let Some(s) = state_from_name(&k) {
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
    let id = u(Key::Id)?;
    let start_ns = u(Key::StartNs).unwrap_or(begin);
    for (st_v, off) in state_offsets.into_iter().take(STATES) {
        states[n_states as usize] = (st_v, start_ns.wrapping_add(off as u64));
        n_states += 1;
    }
    let func = if name != kind.name() {
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
        },
        Kind::P2pApi => Info::P2pApi {
            func,
            count: u(Key::Count).unwrap_or(0),
            datatype: s(Key::Datatype),
            stream: u(Key::Stream).unwrap_or(0),
            graph_captured: b(Key::GraphCaptured),
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
            parent_group: u(Key::Group).unwrap_or(0),
        },
        Kind::P2p => Info::P2p {
            func,
            datatype: s(Key::Datatype),
            count: u(Key::Count).unwrap_or(0),
            peer: i(Key::Peer) as i32,
            n_channels: u(Key::Channels).unwrap_or(0) as u8,
            parent_group: u(Key::Group).unwrap_or(0),
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
    let record = Record {
        id,
        parent: u(Key::Parent).unwrap_or(0),
        ctx: 0,
        kind,
        rank: f
            .get(&Key::Rank)
            .and_then(Value::as_i64)
            .map_or(stream_rank, |r| r as i32),
        info,
        start_ns,
        // Filled in by `finish` once the end is known.
        stop_ns: u(Key::StopNs).unwrap_or(u64::MAX),
        end_ns: u(Key::EndNs).unwrap_or(u64::MAX),
        timing,
        gpu_start: u(Key::GpuStart).unwrap_or(0),
        gpu_end: u(Key::GpuEnd).unwrap_or(0),
        states,
        n_states,
        state_arg: u(Key::StateArg).unwrap_or(0),
        flags,
    };
    Some(Slice {
        record,
        name,
        category,
        track: ev.track_uuid.unwrap_or(0),
        begin,
        end: begin,
        flows_out: ev.flow_ids.clone(),
        flows_in: ev.terminating_flow_ids.clone(),
    })
}

/// Fills the fields that default to the slice's end.
fn finish(s: &mut Slice) {
    let r = &mut s.record;
    if r.end_ns == u64::MAX {
        r.end_ns = s.end;
    }
    if r.stop_ns == u64::MAX {
        r.stop_ns = r.end_ns;
    }
    if r.stop_ns != 0 {
        r.flags |= flag::STOPPED;
    }
}
