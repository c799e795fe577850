//! A whole evring trace file as plain data: tracks, slices with their
//! annotations and flows, the `evring.stream` header, the `evring.summary`
//! footer and the clock snapshots. Interned names are resolved; nothing here
//! knows evring's record types, so any tool can read a trace with this crate
//! alone.

use crate::proto::{
    clock, seq_flags, ClockSnapshot, DebugAnnotation, EventType, TracePacket, TrackEvent,
};
use crate::read::{packets, Stop};
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::Message;
use std::collections::HashMap;

/// The instant event at a file's start (stream identity and clock anchor).
pub const STREAM_EVENT: &str = "evring.stream";
/// The instant event at a file's end (every counter).
pub const SUMMARY_EVENT: &str = "evring.summary";
/// The category of both.
pub const EVRING_CATEGORY: &str = "evring";

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

/// One slice (a begin packet and its end).
#[derive(Debug, Clone, Default)]
pub struct Slice {
    pub name: String,
    pub category: String,
    pub track: u64,
    /// The packet sequence it was written on (one per stream).
    pub seq: u32,
    /// Begin and end timestamps, absolute (incremental clocks resolved), on
    /// CLOCK_MONOTONIC ns where the sequence's clocks are anchored to it.
    pub begin: u64,
    pub end: u64,
    /// Annotations in file order (names resolved; pointers read as `Uint`).
    pub args: Vec<(String, Value)>,
    /// Flow ids leaving this slice and ending in it (named by its begin or
    /// its end packet: evring puts the arrows out on the begin, the arrow in
    /// on the end).
    pub flows_out: Vec<u64>,
    pub flows_in: Vec<u64>,
}

impl Slice {
    pub fn arg(&self, key: &str) -> Option<&Value> {
        self.args.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// A track descriptor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Track {
    pub name: String,
    pub parent: Option<u64>,
    /// Set on process tracks.
    pub pid: Option<i32>,
    pub labels: Vec<String>,
}

/// Everything read from one file (or several concatenated).
#[derive(Debug, Default)]
pub struct Trace {
    pub packets: usize,
    /// Fields of the `evring.stream` instant (host, pid, comm_id, rank, clocks...);
    /// the last one read where a file holds several streams.
    pub stream: Vec<(String, Value)>,
    /// The `evring.stream` fields of each packet sequence that had one.
    pub seq_streams: HashMap<u32, Vec<(String, Value)>>,
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
    /// Slice begins without a category or a resolvable name.
    pub malformed: usize,
}

impl Trace {
    pub fn stream_value(&self, key: &str) -> Option<&Value> {
        self.stream.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A field of the `evring.stream` header of sequence `seq` (of the
    /// file's last header where that sequence had none).
    pub fn seq_stream_value(&self, seq: u32, key: &str) -> Option<&Value> {
        match self.seq_streams.get(&seq) {
            Some(f) => f.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            None => self.stream_value(key),
        }
    }

    pub fn summary_value(&self, key: &str) -> Option<&Value> {
        self.summary
            .as_ref()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// A sequence's clocks: which one packets use by default, and the state of
/// its sequence-scoped clocks (Perfetto's `ClockSnapshot`, `is_incremental`,
/// `TracePacketDefaults.timestamp_clock_id`).
#[derive(Default)]
struct Timer {
    default_clock: Option<u32>,
    clocks: HashMap<u32, SeqClock>,
}

struct SeqClock {
    incremental: bool,
    /// The clock's latest absolute value (incremental clocks add to it).
    last: u64,
    /// CLOCK_MONOTONIC minus this clock at its snapshot (wrapping).
    to_monotonic: u64,
}

impl Timer {
    fn snapshot(&mut self, c: &ClockSnapshot) {
        let mono = c
            .clocks
            .iter()
            .find(|c| c.clock_id == Some(clock::MONOTONIC))
            .and_then(|c| c.timestamp);
        for k in &c.clocks {
            let id = k.clock_id.unwrap_or(0);
            if !clock::is_sequence_clock(id) {
                continue;
            }
            let ts = k.timestamp.unwrap_or(0);
            self.clocks.insert(
                id,
                SeqClock {
                    incremental: k.is_incremental.unwrap_or(false),
                    last: ts,
                    to_monotonic: mono.map_or(0, |m| m.wrapping_sub(ts)),
                },
            );
        }
    }

    /// The absolute time of a packet's `timestamp` on `clock` (the packet's
    /// own, else the sequence default). Every timestamped packet must pass
    /// here in file order: an incremental clock moves with each of them.
    fn resolve(&mut self, clock: Option<u32>, raw: u64) -> u64 {
        let id = clock.or(self.default_clock).unwrap_or(0);
        match self.clocks.get_mut(&id) {
            Some(c) if c.incremental => {
                c.last = c.last.wrapping_add(raw);
                c.last.wrapping_add(c.to_monotonic)
            }
            Some(c) => raw.wrapping_add(c.to_monotonic),
            None => raw,
        }
    }
}

#[derive(Default)]
struct Interned {
    categories: HashMap<u64, String>,
    names: HashMap<u64, String>,
    keys: HashMap<u64, String>,
    strings: HashMap<u64, Vec<u8>>,
}

/// Reads a whole, cut or concatenated trace file.
pub fn read(bytes: &[u8]) -> Trace {
    let mut slices = Vec::new();
    let mut t = read_each(bytes, |_| true, |_, s| slices.push(s));
    t.slices = slices;
    t
}

/// As [`read`], streaming: each ended slice whose category `keep` accepts is
/// handed to `each` (in file order of their ends), with the trace read so
/// far (its `stream` header is there once the file had one), instead of being kept, and
/// the slices of other categories are skipped without resolving their
/// annotations. The returned trace has no `slices`. Memory stays bounded by
/// the open slices, so files of any size can be read.
pub fn read_each(
    bytes: &[u8],
    mut keep: impl FnMut(&str) -> bool,
    mut each: impl FnMut(&Trace, Slice),
) -> Trace {
    let mut t = Trace::default();
    let mut seqs: HashMap<u32, Interned> = HashMap::new();
    let mut timers: HashMap<u32, Timer> = HashMap::new();
    // `None`: a slice begun in a category `keep` refused.
    let mut open: HashMap<u64, Option<Slice>> = HashMap::new();
    let mut it = packets(bytes);
    while let Some((at, body)) = it.next_bytes() {
        t.packets += 1;
        // Most packets are slice begins and ends; those that need nothing
        // decoded beyond a few varints are handled from their bytes.
        match skim(body) {
            Some(Skim::End {
                seq,
                track,
                ts,
                flow_in,
            }) => {
                let ts = ts.map(|ts| timers.entry(seq).or_default().resolve(None, ts));
                if let Some(Some(mut s)) = open.remove(&track) {
                    s.end = ts.unwrap_or(0);
                    s.flows_in.extend(flow_in);
                    each(&t, s);
                }
                continue;
            }
            Some(Skim::Begin {
                seq,
                track,
                cat,
                ts,
            }) => {
                let refused = seqs
                    .get(&seq)
                    .and_then(|st| st.categories.get(&cat))
                    .is_some_and(|c| !keep(c));
                if refused {
                    if let Some(ts) = ts {
                        timers.entry(seq).or_default().resolve(None, ts);
                    }
                    if open.insert(track, None).is_some() {
                        t.unterminated += 1;
                    }
                    continue;
                }
            }
            None => {}
        }
        let p = match TracePacket::decode(body) {
            Ok(p) => p,
            Err(e) => {
                it.reject(at, e.to_string());
                break;
            }
        };
        let seq = p.trusted_packet_sequence_id.unwrap_or(0);
        let timer = timers.entry(seq).or_default();
        if p.sequence_flags.unwrap_or(0) & seq_flags::INCREMENTAL_STATE_CLEARED != 0 {
            seqs.insert(seq, Interned::default());
            timer.default_clock = None;
        }
        // Defaults first: they decide the clock of this packet's own timestamp.
        if let Some(d) = &p.trace_packet_defaults {
            timer.default_clock = d.timestamp_clock_id;
        }
        let st = seqs.entry(seq).or_default();
        learn(st, &p);
        if let Some(c) = &p.clock_snapshot {
            timer.snapshot(c);
            t.clocks.push(
                c.clocks
                    .iter()
                    .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
                    .collect(),
            );
        }
        if let Some(d) = &p.track_descriptor {
            let process = d.process.as_ref();
            t.tracks.insert(
                d.uuid.unwrap_or(0),
                Track {
                    name: d
                        .name
                        .clone()
                        .or_else(|| process.and_then(|p| p.process_name.clone()))
                        .unwrap_or_default(),
                    parent: d.parent_uuid,
                    pid: process.and_then(|p| p.pid),
                    labels: process
                        .map(|p| p.process_labels.clone())
                        .unwrap_or_default(),
                },
            );
        }
        let ts = p
            .timestamp
            .map_or(0, |raw| timer.resolve(p.timestamp_clock_id, raw));
        let Some(ev) = &p.track_event else { continue };
        let track = ev.track_uuid.unwrap_or(0);
        match ev.r#type.and_then(|v| EventType::try_from(v).ok()) {
            Some(EventType::Instant) => {
                let fields: Vec<(String, Value)> = ev
                    .debug_annotations
                    .iter()
                    .filter_map(|a| annotation(st, a))
                    .collect();
                let ours = ev.categories.iter().any(|c| c == EVRING_CATEGORY);
                match ev.name.as_deref() {
                    Some(STREAM_EVENT) if ours => {
                        t.seq_streams.insert(seq, fields.clone());
                        t.stream = fields;
                    }
                    Some(SUMMARY_EVENT) if ours => t.summary = Some(fields),
                    _ => {}
                }
            }
            Some(EventType::SliceBegin) => {
                let kept = match category(st, ev) {
                    Some(c) if !keep(c) => Some(None),
                    _ => slice(st, &p, seq, ts).map(Some),
                };
                match kept {
                    Some(s) => {
                        if open.insert(track, s).is_some() {
                            t.unterminated += 1;
                        }
                    }
                    None => t.malformed += 1,
                }
            }
            Some(EventType::SliceEnd) => {
                if let Some(Some(mut s)) = open.remove(&track) {
                    s.end = ts;
                    s.flows_in.extend_from_slice(&ev.terminating_flow_ids);
                    s.flows_out.extend_from_slice(&ev.flow_ids);
                    each(&t, s);
                }
            }
            _ => {}
        }
    }
    t.unterminated += open.len();
    t.stop = it.stop().cloned();
    t
}

/// What a packet holding only a slice begin or end says, read from its bytes.
enum Skim {
    Begin {
        seq: u32,
        track: u64,
        cat: u64,
        ts: Option<u64>,
    },
    End {
        seq: u32,
        track: u64,
        ts: Option<u64>,
        /// The one arrow ending here (a packet with more goes to the full decoder).
        flow_in: Option<u64>,
    },
}

/// Reads a packet that carries nothing but a timestamp, a sequence id,
/// sequence flags (not a reset) and a slice begin (category by interned id)
/// or end; `None` for anything else, which the full decoder then reads.
fn skim(mut b: &[u8]) -> Option<Skim> {
    let (mut ts, mut seq, mut ev) = (None, 0, None);
    while !b.is_empty() {
        let (field, wire) = decode_key(&mut b).ok()?;
        match (field, wire) {
            (8, WireType::Varint) => ts = Some(decode_varint(&mut b).ok()?),
            (10, WireType::Varint) => seq = decode_varint(&mut b).ok()? as u32,
            (13, WireType::Varint) => {
                let flags = decode_varint(&mut b).ok()?;
                if flags & seq_flags::INCREMENTAL_STATE_CLEARED as u64 != 0 {
                    return None;
                }
            }
            (11, WireType::LengthDelimited) => {
                let len = usize::try_from(decode_varint(&mut b).ok()?).ok()?;
                if len > b.len() {
                    return None;
                }
                ev = Some(&b[..len]);
                b = &b[len..];
            }
            _ => return None,
        }
    }
    let mut e = ev?;
    let (mut ty, mut track, mut cat, mut flow_in) = (None, 0, None, None);
    while !e.is_empty() {
        let (field, wire) = decode_key(&mut e).ok()?;
        match (field, wire) {
            (48, WireType::SixtyFourBit) if flow_in.is_none() && e.len() >= 8 => {
                let (v, rest) = e.split_at(8);
                flow_in = Some(u64::from_le_bytes(v.try_into().ok()?));
                e = rest;
            }
            // More than one arrow in: the full decoder.
            (48, _) => return None,
            (9, WireType::Varint) => ty = Some(decode_varint(&mut e).ok()?),
            (11, WireType::Varint) => track = decode_varint(&mut e).ok()?,
            (3, WireType::Varint) => {
                let c = decode_varint(&mut e).ok()?;
                cat.get_or_insert(c);
            }
            // Packed category ids or categories by name: the full decoder.
            (3, _) | (22, _) => return None,
            _ => skip_field(wire, field, &mut e, DecodeContext::default()).ok()?,
        }
    }
    match ty? {
        t if t == EventType::SliceEnd as u64 => Some(Skim::End {
            seq,
            track,
            ts,
            flow_in,
        }),
        t if t == EventType::SliceBegin as u64 => Some(Skim::Begin {
            seq,
            track,
            cat: cat?,
            ts,
        }),
        _ => None,
    }
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

fn category<'a>(st: &'a Interned, ev: &'a TrackEvent) -> Option<&'a str> {
    match ev.category_iids.first() {
        Some(iid) => st.categories.get(iid).map(String::as_str),
        None => ev.categories.first().map(String::as_str),
    }
}

fn slice(st: &Interned, p: &TracePacket, seq: u32, begin: u64) -> Option<Slice> {
    let ev = p.track_event.as_ref()?;
    let category = category(st, ev)?.to_string();
    let name = match (ev.name_iid, &ev.name) {
        (Some(iid), _) => st.names.get(&iid)?.clone(),
        (None, Some(n)) => n.clone(),
        (None, None) => return None,
    };
    Some(Slice {
        name,
        category,
        track: ev.track_uuid.unwrap_or(0),
        seq,
        begin,
        end: begin,
        args: ev
            .debug_annotations
            .iter()
            .filter_map(|a| annotation(st, a))
            .collect(),
        flows_out: ev.flow_ids.clone(),
        flows_in: ev.terminating_flow_ids.clone(),
    })
}
