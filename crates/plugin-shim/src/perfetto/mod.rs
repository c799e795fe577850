//! Perfetto-native traces: completed records as `TrackEvent` slices, one
//! encoder per file.
//!
//! Layout of a file (every packet on one sequence; timestamps are
//! CLOCK_MONOTONIC as deltas, on the sequence's incremental clock 64 named
//! by the sequence's defaults):
//! 1. a `ClockSnapshot` pairing CLOCK_MONOTONIC with CLOCK_REALTIME,
//!    CLOCK_BOOTTIME (the wall-clock anchor) and the incremental clock
//!    (its starting value; repeated before the footer);
//! 2. the sequence start: defaults, every fixed interned name ([`keys`]),
//!    and the rank's process track;
//! 3. an `evring.stream` instant with the stream's identity (host, pid,
//!    communicator, rank, ABI version, clocks);
//! 4. per record, a slice begin and a slice end on its lane's track
//!    ([`crate::lanes`]), with its fields as debug annotations and a flow from its
//!    parent's slice (ids in their compact trace form, [`evring_perfetto::ids`]);
//! 5. an `evring.summary` instant with every counter (the footer).
//!
//! docs/shim.md describes what this looks like in the Perfetto UI.

pub mod decode;
pub mod keys;
mod wire;

use crate::flows::Flows;
use crate::format::Field;
use crate::lanes::{span, Lane, Lanes, NewTrack};
use crate::model::{Info, Kind};
use crate::record::flag;
use crate::record::{Record, Timing};
use crate::strings::Str16;
use evring_perfetto::ids;
use evring_perfetto::proto::{
    clock, seq_flags, Clock, ClockSnapshot, DebugAnnotation, EventType, InternedData, InternedName,
    InternedString, ProcessDescriptor, TracePacket, TracePacketDefaults, TrackDescriptor,
    TrackEvent, CHILD_ORDERING_EXPLICIT, TRACE_PACKET_FIELD,
};
use keys::{kind_iid, state_name, Key, EVRING_CATEGORY, FUNC_IID_BASE, STATE_IID_BASE};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;
use rustc_hash::FxHashMap;
use wire::Wr;

/// Who wrote a file: enough to line up files of many hosts and ranks.
#[derive(Debug, Clone, Default)]
pub struct StreamInfo {
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub nnodes: i32,
    pub abi: u32,
    pub name: Option<String>,
    pub pid: i32,
    pub host: String,
    /// The writer's key for the stream (context), to keep ids of two files apart.
    pub ctx: u64,
}

/// The same instant on three clocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anchor {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
    pub boottime_ns: u64,
}

impl Anchor {
    pub fn now() -> Anchor {
        let read = |id| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec into our local.
            unsafe { libc::clock_gettime(id, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        // Monotonic read twice around the others; the midpoint pairs best.
        let m0 = read(libc::CLOCK_MONOTONIC);
        let realtime_ns = read(libc::CLOCK_REALTIME);
        let boottime_ns = read(libc::CLOCK_BOOTTIME);
        let m1 = read(libc::CLOCK_MONOTONIC);
        Anchor {
            monotonic_ns: m0 + m1.saturating_sub(m0) / 2,
            realtime_ns,
            boottime_ns,
        }
    }
}

/// What an encoder counted (goes into the footer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncoderStats {
    pub records: u64,
    pub tracks: u64,
    /// Events drawn over another on a lane at its track limit.
    pub overlaps: u64,
    /// Parent→child flows written (both ends).
    pub flows: u64,
    /// Children whose parent never came (or came before them): no arrow.
    pub flows_unmatched: u64,
}

/// The one packet sequence of a file.
const SEQUENCE: u32 = 1;

/// Encodes one file's packets. Not thread-safe: one per stream, on the writer thread.
pub struct Encoder {
    seq: u32,
    info: StreamInfo,
    process_uuid: u64,
    lanes: Lanes,
    funcs: FxHashMap<Str16, u64>,
    strings: FxHashMap<Str16, u64>,
    /// Flag sets already interned as strings (`late_child,detached`).
    flag_sets: FxHashMap<u32, u64>,
    /// Next id of the annotation-string table (shared by both maps above).
    next_string: u64,
    flows: Flows,
    /// Keeps this stream's arrows apart from other streams' in one file.
    flow_key: u64,
    /// The incremental clocks' values: the last timestamp written on each.
    last_ts: u64,
    last_back: u64,
    records: u64,
    pkt: TracePacket,
    interned: InternedData,
    /// Where a record's packets are put together (`record_span`).
    scratch: Vec<u8>,
}

/// Room before a packet's `TrackEvent` body in the scratch buffer, for the
/// bytes that precede it (packet key and length, timestamp, sequence id,
/// track event key and length: at most 1 + 5 + 11 + 6 + 1 + 5).
const HEAD: usize = 32;
/// Most annotations `annotate` writes: 9 record fields, at most 12 of an
/// `Info` (a v7 Coll), the states, the state argument and the flags.
const MAX_ANNOTATIONS: usize = 9 + 12 + crate::record::STATES + 2;
/// Most bytes of a begin's `TrackEvent` without its arrows out: the
/// annotations, at most 25 bytes each (`Wr::annotation`), and 5 fields of
/// at most 11.
const MAX_BEGIN: usize = MAX_ANNOTATIONS * 25 + 5 * 11;
/// Bytes of an arrow out (`flow_ids`: a 2-byte key and a fixed64).
const FLOW_BYTES: usize = 10;
/// Most bytes after a begin's `TrackEvent`, interned data aside (its clock
/// id: 3), and of a whole end packet (first bytes 29, `TrackEvent` 23, clock
/// id 3).
const MAX_END: usize = 3 + 29 + 23 + 3;

impl Encoder {
    /// An encoder for a new file of `info`. Track uuids, the sequence id and
    /// flow ids are small (short varints on every packet) and unique within
    /// the file only: tools that merge files renumber them.
    pub fn new(info: StreamInfo, anchor: &Anchor) -> Encoder {
        Encoder::with_ids(info, anchor, SEQUENCE, 1)
    }

    /// As [`new`](Self::new), for one of several streams written into one
    /// file (`evring merge`): its packets on sequence `seq`, its process
    /// track `uuid_base` and its lane tracks the uuids just above, its
    /// arrows keyed by `seq` (the first sequence's key is 0).
    pub fn with_ids(info: StreamInfo, anchor: &Anchor, seq: u32, uuid_base: u64) -> Encoder {
        let flow_key = u64::from(seq.saturating_sub(1)).rotate_right(8);
        let process_uuid = uuid_base;
        Encoder {
            seq,
            info,
            process_uuid,
            lanes: Lanes::new(process_uuid + 1),
            funcs: FxHashMap::default(),
            strings: FxHashMap::default(),
            flag_sets: FxHashMap::default(),
            next_string: 1,
            flows: Flows::new(flow_key),
            flow_key,
            last_ts: anchor.monotonic_ns,
            last_back: anchor.monotonic_ns,
            records: 0,
            pkt: TracePacket::default(),
            interned: InternedData::default(),
            scratch: Vec::new(),
        }
    }

    pub fn stats(&self) -> EncoderStats {
        EncoderStats {
            records: self.records,
            tracks: self.lanes.tracks() as u64 + 1,
            overlaps: self.lanes.overlaps,
            flows: self.flows.linked,
            flows_unmatched: self.flows.unmatched(),
        }
    }

    /// Appends `self.pkt` as one `Trace.packet` field. Encoded into a
    /// pre-sized slice: prost's per-byte writes into a `Vec` check capacity
    /// every time, into a slice they do not.
    fn emit(&mut self, out: &mut Vec<u8>) {
        let body = self.pkt.encoded_len();
        let start = out.len();
        out.resize(start + 1 + encoded_len_varint(body as u64) + body, 0);
        let mut buf = &mut out[start..];
        encode_key(TRACE_PACKET_FIELD, WireType::LengthDelimited, &mut buf);
        encode_varint(body as u64, &mut buf);
        if self.pkt.encode(&mut buf).is_err() {
            // Cannot happen (the slice is sized by encoded_len); never write a torn packet.
            out.truncate(start);
        }
    }

    /// Sets `self.pkt`'s timestamp to `ts` (CLOCK_MONOTONIC) as a delta on
    /// an incremental clock. Records come in completion order, so most
    /// times are a little after the previous one: a short delta on the
    /// default clock. A begin before the previous end (pipelined steps)
    /// names the second clock (3 bytes), which follows those begins; a time
    /// before both (a parent's begin, written after its children) wraps to a
    /// 10-byte varint, which Perfetto adds as a negative int64.
    fn stamp(&mut self, ts: u64) {
        let (d, clock) = self.stamp_delta(ts);
        self.pkt.timestamp = Some(d);
        self.pkt.timestamp_clock_id = clock;
    }

    /// [`stamp`](Self::stamp)'s delta and clock (`None`: the default one).
    #[inline]
    fn stamp_delta(&mut self, ts: u64) -> (u64, Option<u32>) {
        if ts >= self.last_ts || ts < self.last_back {
            let d = ts.wrapping_sub(self.last_ts);
            self.last_ts = ts;
            (d, None)
        } else {
            let d = ts - self.last_back;
            self.last_back = ts;
            (d, Some(clock::EVRING_DELTA_BACK))
        }
    }

    fn clock_snapshot(&mut self, out: &mut Vec<u8>, a: &Anchor) {
        self.last_ts = a.monotonic_ns;
        self.last_back = a.monotonic_ns;
        self.pkt = TracePacket {
            trusted_packet_sequence_id: Some(self.seq),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    clock_at(clock::MONOTONIC, a.monotonic_ns),
                    clock_at(clock::REALTIME, a.realtime_ns),
                    clock_at(clock::BOOTTIME, a.boottime_ns),
                    Clock {
                        clock_id: Some(clock::EVRING_DELTA),
                        timestamp: Some(a.monotonic_ns),
                        is_incremental: Some(true),
                    },
                    Clock {
                        clock_id: Some(clock::EVRING_DELTA_BACK),
                        timestamp: Some(a.monotonic_ns),
                        is_incremental: Some(true),
                    },
                ],
                primary_trace_clock: None,
            }),
            ..TracePacket::default()
        };
        self.emit(out);
        self.pkt = TracePacket::default();
    }

    /// The file's first packets: clocks, interned vocabulary, process track
    /// and the `evring.stream` instant.
    pub fn header(&mut self, out: &mut Vec<u8>, a: &Anchor) {
        self.clock_snapshot(out, a);
        let named = |iid, name: &str| InternedName {
            iid: Some(iid),
            name: Some(name.to_string()),
        };
        let mut interned = InternedData::default();
        for k in Kind::ALL {
            interned.event_categories.push(named(kind_iid(k), k.name()));
            interned.event_names.push(named(kind_iid(k), k.name()));
        }
        for k in Key::ALL {
            interned
                .debug_annotation_names
                .push(named(k.iid(), k.text()));
        }
        for s in 0..=keys::LAST_STATE {
            interned
                .debug_annotation_names
                .push(named(STATE_IID_BASE + s as u64, state_name(s)));
        }
        let info = self.info.clone();
        let i = &info;
        let mut pname = format!("evring rank {} comm {:#x}", i.rank, i.comm_id);
        if let Some(n) = &i.name {
            pname.push_str(&format!(" ({n})"));
        }
        if !i.host.is_empty() {
            pname.push_str(&format!(" @{}", i.host));
        }
        self.pkt = TracePacket {
            trusted_packet_sequence_id: Some(self.seq),
            sequence_flags: Some(
                seq_flags::INCREMENTAL_STATE_CLEARED | seq_flags::NEEDS_INCREMENTAL_STATE,
            ),
            first_packet_on_sequence: Some(true),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(clock::EVRING_DELTA),
            }),
            interned_data: Some(interned),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(self.process_uuid),
                name: None,
                parent_uuid: None,
                process: Some(ProcessDescriptor {
                    pid: Some(i.pid),
                    process_name: Some(pname),
                    process_labels: vec![
                        format!("host={}", i.host),
                        format!("rank={}", i.rank),
                        format!("comm={:#x}", i.comm_id),
                    ],
                }),
                child_ordering: Some(CHILD_ORDERING_EXPLICIT),
                sibling_order_rank: None,
            }),
            ..TracePacket::default()
        };
        self.emit(out);
        let mut ann = vec![
            DebugAnnotation {
                name: Some("comm_id".into()),
                pointer_value: Some(i.comm_id),
                ..DebugAnnotation::default()
            },
            int_named("rank", i.rank as i64),
            int_named("nranks", i.nranks as i64),
            int_named("nnodes", i.nnodes as i64),
            uint_named("abi", i.abi as u64),
            int_named("pid", i.pid as i64),
            str_named("host", &i.host),
            uint_named("monotonic_ns", a.monotonic_ns),
            uint_named("realtime_ns", a.realtime_ns),
            uint_named("boottime_ns", a.boottime_ns),
            str_named("clock", "CLOCK_MONOTONIC ns"),
            uint_named(ids::FLOW_KEY, self.flow_key),
        ];
        if let Some(n) = &i.name {
            ann.push(str_named("name", n));
        }
        self.instant(out, a.monotonic_ns, keys::STREAM_EVENT, ann);
    }

    fn instant(&mut self, out: &mut Vec<u8>, ts: u64, name: &str, ann: Vec<DebugAnnotation>) {
        self.pkt = TracePacket {
            trusted_packet_sequence_id: Some(self.seq),
            sequence_flags: Some(seq_flags::NEEDS_INCREMENTAL_STATE),
            track_event: Some(TrackEvent {
                r#type: Some(EventType::Instant as i32),
                track_uuid: Some(self.process_uuid),
                name: Some(name.to_string()),
                // By name: these instants are rare, not worth interning.
                categories: vec![EVRING_CATEGORY.to_string()],
                debug_annotations: ann,
                ..TrackEvent::default()
            }),
            ..TracePacket::default()
        };
        self.stamp(ts);
        self.emit(out);
        self.pkt = TracePacket::default();
    }

    /// The footer: a fresh clock anchor and an `evring.summary` instant with
    /// `fields` (every counter, why the stream ended) and this encoder's own counts.
    pub fn footer(&mut self, out: &mut Vec<u8>, a: &Anchor, fields: &[(&str, Field)]) {
        self.clock_snapshot(out, a);
        let s = self.stats();
        let mut ann: Vec<DebugAnnotation> = Vec::with_capacity(fields.len() + 8);
        for (k, v) in fields {
            let mut d = DebugAnnotation {
                name: Some(k.to_string()),
                ..DebugAnnotation::default()
            };
            match v {
                Field::Bool(b) => d.bool_value = Some(*b),
                Field::U64(u) => d.uint_value = Some(*u),
                Field::I64(i) => d.int_value = Some(*i),
                Field::Str(t) => d.string_value = Some(t.clone()),
            }
            ann.push(d);
        }
        for (k, v) in [
            ("perfetto_tracks", s.tracks),
            ("perfetto_overlaps", s.overlaps),
            ("perfetto_flows", s.flows),
            ("perfetto_flows_unmatched", s.flows_unmatched),
            ("monotonic_ns", a.monotonic_ns),
            ("realtime_ns", a.realtime_ns),
            ("boottime_ns", a.boottime_ns),
        ] {
            ann.push(uint_named(k, v));
        }
        self.instant(out, a.monotonic_ns, keys::SUMMARY_EVENT, ann);
    }

    fn func_iid(&mut self, f: &Str16) -> u64 {
        if let Some(&iid) = self.funcs.get(f) {
            return iid;
        }
        let iid = FUNC_IID_BASE + self.funcs.len() as u64;
        self.funcs.insert(*f, iid);
        self.interned.event_names.push(InternedName {
            iid: Some(iid),
            name: Some(f.as_str().into_owned()),
        });
        iid
    }

    fn string_iid(&mut self, s: &Str16) -> u64 {
        if let Some(&iid) = self.strings.get(s) {
            return iid;
        }
        let iid = self.intern_string(s.as_bytes().to_vec());
        self.strings.insert(*s, iid);
        iid
    }

    /// A set of flags as one interned string (most events repeat one of a few sets).
    fn flags_iid(&mut self, flags: u32) -> u64 {
        if let Some(&iid) = self.flag_sets.get(&flags) {
            return iid;
        }
        let names: Vec<&str> = flag::NAMES
            .iter()
            .filter(|(bit, _)| flags & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        let iid = self.intern_string(names.join(",").into_bytes());
        self.flag_sets.insert(flags, iid);
        iid
    }

    fn intern_string(&mut self, bytes: Vec<u8>) -> u64 {
        let iid = self.next_string;
        self.next_string += 1;
        self.interned
            .debug_annotation_string_values
            .push(InternedString {
                iid: Some(iid),
                str: Some(bytes),
            });
        iid
    }

    fn describe(&mut self, out: &mut Vec<u8>, t: NewTrack) {
        let mut name = t.lane.name();
        if t.rank != self.info.rank {
            name = format!("rank {} {name}", t.rank);
        }
        self.pkt = TracePacket {
            trusted_packet_sequence_id: Some(self.seq),
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(t.uuid),
                parent_uuid: Some(self.process_uuid),
                name: Some(name),
                process: None,
                child_ordering: None,
                // Lanes in a fixed order; a lane's overlap tracks right below it.
                sibling_order_rank: Some(
                    t.lane
                        .order()
                        .saturating_mul(64)
                        .saturating_add(t.index as i32)
                        .saturating_add((t.rank & 0xFF) << 24),
                ),
            }),
            ..TracePacket::default()
        };
        self.emit(out);
        self.pkt = TracePacket::default();
    }

    /// Appends one record's slice (begin and end packets, and a track
    /// descriptor first when its lane needs a new track).
    pub fn record(&mut self, out: &mut Vec<u8>, r: &Record) {
        let (begin, end) = span(r);
        self.record_span(out, r, begin, end);
    }

    /// As [`record`](Self::record), with the slice's begin and end given (a
    /// tool re-encoding a trace passes the times the file already mapped).
    pub fn record_span(&mut self, out: &mut Vec<u8>, r: &Record, begin: u64, end: u64) {
        self.records += 1;
        let end = end.max(begin);
        let lane = Lane::of(r.kind, &r.info);
        let track = match self.lanes.place(r.rank, lane, begin, end) {
            Ok(uuid) => uuid,
            Err(new) => {
                let uuid = new.uuid;
                self.describe(out, new);
                uuid
            }
        };

        // Flows: out of this slice to children already written, and into it
        // from its parent (written later, as parents complete after children;
        // the arrow's end goes on this slice's end packet, below).
        let flows_out = self.flows.out_of(r.id);
        let n_out = flows_out.as_ref().map_or(0, Vec::len);
        let flow_in = self.flows.into_child(r);

        // Both packets are put together in `scratch`, then appended at once:
        // the begin's `TrackEvent` from `HEAD` on, its packet's first bytes
        // (which hold the length) just before it once it is known; the end
        // packet right after the begin's.
        let mut scratch = std::mem::take(&mut self.scratch);
        let need = HEAD + MAX_BEGIN + n_out * FLOW_BYTES + MAX_END;
        if scratch.len() < need {
            scratch.resize(need, 0);
        }
        let mut w = Wr {
            b: &mut scratch,
            n: HEAD,
        };
        // The begin's `TrackEvent`, fields in tag order.
        w.uint(wire::EV_CATEGORY_IID, kind_iid(r.kind));
        let name_iid = match r.info.func() {
            Some(f) if !f.is_empty() => self.func_iid(f),
            _ => kind_iid(r.kind),
        };
        // With an arrow in, the arrow's id is the event's id: no `id` annotation.
        self.annotate(&mut w, r, begin, end, flow_in.is_none());
        w.uint(wire::EV_TYPE, EventType::SliceBegin as u64);
        w.uint(wire::EV_NAME_IID, name_iid);
        w.uint(wire::EV_TRACK_UUID, track);
        if let Some(v) = flows_out {
            for &f in &v {
                w.fixed64(wire::EV_FLOW_ID, f);
            }
            self.flows.recycle(v);
        }
        let ev_len = w.n - HEAD;
        // The begin's packet fields after its track event: new interned
        // names (12), the clock when not the default (58).
        // No SEQ_NEEDS_INCREMENTAL_STATE: that flag only makes an importer
        // skip the packet while the sequence's state is invalid, which never
        // happens in a file written in one go (2 bytes on every record).
        if !self.interned.event_names.is_empty()
            || !self.interned.debug_annotation_string_values.is_empty()
        {
            let mut v = Vec::new();
            prost::encoding::message::encode(12, &self.interned, &mut v);
            self.interned.event_names.clear();
            self.interned.debug_annotation_string_values.clear();
            let n = w.n;
            if scratch.len() < n + v.len() + MAX_END {
                scratch.resize(n + v.len() + MAX_END, 0);
            }
            w = Wr { b: &mut scratch, n };
            w.bytes(&v);
        }
        let (ts, clock) = self.stamp_delta(begin);
        if let Some(c) = clock {
            w.uint(wire::PKT_CLOCK_ID, u64::from(c));
        }
        let after = w.n - HEAD - ev_len;
        let first = self.packet_head(&mut w, ts, ev_len, after);

        // The end: same track, no fields but the arrow in; it needs no
        // interned data (the clock comes from the sequence defaults). Perfetto
        // binds a flow where it imports the event that names it, in time
        // order: at the child's begin, the parent's begin (which starts the
        // arrow) may not have come yet (a kernel's GPU start mapped before its
        // collective's host start, or the same nanosecond with the child first
        // in the file), and the arrow would be dropped; at the child's end it
        // has.
        let (ts, clock) = self.stamp_delta(end);
        let ev_len = 2 + 1 + wire::varint_len(track) + flow_in.map_or(0, |_| 10);
        let clock_len = clock.map_or(0, |c| 2 + wire::varint_len(u64::from(c)));
        self.packet_head_at(&mut w, ts, ev_len, clock_len);
        w.uint(wire::EV_TYPE, EventType::SliceEnd as u64);
        w.uint(wire::EV_TRACK_UUID, track);
        if let Some(f) = flow_in {
            w.fixed64(wire::EV_TERMINATING_FLOW_ID, f);
        }
        if let Some(c) = clock {
            w.uint(wire::PKT_CLOCK_ID, u64::from(c));
        }
        let end_at = w.n;
        out.extend_from_slice(&scratch[first..end_at]);
        self.scratch = scratch;
    }

    /// Writes a record packet's first bytes (`Trace.packet` key and length,
    /// timestamp, sequence id, the track event's key and length) so that
    /// they end at `HEAD`, where its `TrackEvent` of `ev_len` bytes begins,
    /// followed by `after` bytes of the packet's later fields. Returns where
    /// the packet begins.
    #[inline(always)]
    fn packet_head(&self, w: &mut Wr, ts: u64, ev_len: usize, after: usize) -> usize {
        let head = self.head_len(ts, ev_len);
        let body = head + ev_len + after;
        let first = HEAD - (1 + wire::varint_len(body as u64) + head);
        let at = w.n;
        w.n = first;
        self.packet_head_body(w, body, ts, ev_len);
        w.n = at;
        first
    }

    /// Writes a packet's first bytes at `w` (see [`packet_head`](Self::packet_head)).
    #[inline(always)]
    fn packet_head_at(&self, w: &mut Wr, ts: u64, ev_len: usize, after: usize) {
        let body = self.head_len(ts, ev_len) + ev_len + after;
        self.packet_head_body(w, body, ts, ev_len);
    }

    /// Bytes of a record packet's fields before its `TrackEvent`'s body.
    #[inline(always)]
    fn head_len(&self, ts: u64, ev_len: usize) -> usize {
        1 + wire::varint_len(ts)
            + 1
            + wire::varint_len(u64::from(self.seq))
            + 1
            + wire::varint_len(ev_len as u64)
    }

    #[inline(always)]
    fn packet_head_body(&self, w: &mut Wr, body: usize, ts: u64, ev_len: usize) {
        w.key(wire::TRACE_PACKET);
        w.varint(body as u64);
        w.uint(wire::PKT_TIMESTAMP, ts);
        w.uint(wire::PKT_SEQUENCE_ID, u64::from(self.seq));
        w.key(wire::PKT_TRACK_EVENT);
        w.varint(ev_len as u64);
    }

    #[inline(always)]
    fn annotate(&mut self, w: &mut Wr, r: &Record, begin: u64, end: u64, with_id: bool) {
        if with_id {
            event_id(w, Key::Id, r.id);
        }
        if r.parent != 0 {
            event_id(w, Key::Parent, r.parent);
        }
        if r.rank != self.info.rank {
            int(w, Key::Rank, r.rank as i64);
        }
        if r.timing != Timing::Host {
            let t = Str16::from_bytes(r.timing.name().as_bytes());
            string(w, Key::Timing, self.string_iid(&t));
        }
        if begin != r.start_ns {
            uint(w, Key::StartNs, r.start_ns);
        }
        if r.stop_ns != r.end_ns {
            uint(w, Key::StopNs, r.stop_ns);
        }
        if end != r.end_ns {
            uint(w, Key::EndNs, r.end_ns);
        }
        if r.gpu_start != 0 {
            uint(w, Key::GpuStart, r.gpu_start);
        }
        if r.gpu_end != 0 {
            uint(w, Key::GpuEnd, r.gpu_end);
        }
        self.info_fields(w, &r.info);
        for &(s, t) in &r.states[..(r.n_states as usize).min(r.states.len())] {
            w.annotation(
                STATE_IID_BASE + s as u64,
                wire::ANN_INT,
                t.wrapping_sub(r.start_ns),
            );
        }
        if r.state_arg != 0 {
            uint(w, Key::StateArg, r.state_arg);
        }
        let extra = r.flags & !flag::STOPPED;
        if extra != 0 {
            string(w, Key::Flags, self.flags_iid(extra));
        }
    }

    #[inline(always)]
    fn info_fields(&mut self, w: &mut Wr, info: &Info) {
        match *info {
            Info::None => {}
            Info::GroupApi {
                graph_captured,
                depth,
            } => {
                boolean(w, Key::GraphCaptured, graph_captured);
                int(w, Key::Depth, depth as i64);
            }
            Info::CollApi {
                count,
                ref datatype,
                root,
                stream,
                graph_captured,
                user_tag,
                ..
            } => {
                uint(w, Key::Count, count);
                string(w, Key::Datatype, self.string_iid(datatype));
                int(w, Key::Root, root as i64);
                pointer(w, Key::Stream, stream);
                boolean(w, Key::GraphCaptured, graph_captured);
                tag_field(w, user_tag);
            }
            Info::P2pApi {
                count,
                ref datatype,
                stream,
                graph_captured,
                user_tag,
                ..
            } => {
                uint(w, Key::Count, count);
                string(w, Key::Datatype, self.string_iid(datatype));
                pointer(w, Key::Stream, stream);
                boolean(w, Key::GraphCaptured, graph_captured);
                tag_field(w, user_tag);
            }
            Info::KernelLaunch { stream } => pointer(w, Key::Stream, stream),
            Info::Coll {
                seq,
                count,
                root,
                ref datatype,
                n_channels,
                n_warps,
                ref algo,
                ref proto,
                parent_group,
                ref kernel_variant,
                is_sym_coll,
                user_tag,
                ..
            } => {
                uint(w, Key::Seq, seq);
                uint(w, Key::Count, count);
                int(w, Key::Root, root as i64);
                string(w, Key::Datatype, self.string_iid(datatype));
                uint(w, Key::Channels, n_channels as u64);
                uint(w, Key::Warps, n_warps as u64);
                string(w, Key::Algo, self.string_iid(algo));
                string(w, Key::Proto, self.string_iid(proto));
                event_id(w, Key::Group, parent_group);
                // v7 fields, only where a v7 core set them.
                if !kernel_variant.is_empty() {
                    let iid = self.string_iid(kernel_variant);
                    string(w, Key::KernelVariant, iid);
                }
                if is_sym_coll {
                    boolean(w, Key::SymColl, true);
                }
                tag_field(w, user_tag);
            }
            Info::P2p {
                ref datatype,
                count,
                peer,
                n_channels,
                parent_group,
                user_tag,
                ..
            } => {
                uint(w, Key::Count, count);
                string(w, Key::Datatype, self.string_iid(datatype));
                int(w, Key::Peer, peer as i64);
                uint(w, Key::Channels, n_channels as u64);
                event_id(w, Key::Group, parent_group);
                tag_field(w, user_tag);
            }
            Info::ProxyOp {
                pid,
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
            } => {
                int(w, Key::Pid, pid as i64);
                uint(w, Key::Channel, channel as u64);
                int(w, Key::Peer, peer as i64);
                int(w, Key::Steps, n_steps as i64);
                int(w, Key::ChunkSize, chunk_size as i64);
                boolean(w, Key::Send, is_send);
            }
            Info::ProxyStep { step } => int(w, Key::Step, step as i64),
            Info::KernelCh { channel, .. } => uint(w, Key::Channel, channel as u64),
            Info::KernelPhase { channel, phase, .. } => {
                uint(w, Key::Channel, channel as u64);
                let name = Str16::from_bytes(crate::model::phase_name(phase).as_bytes());
                string(w, Key::Phase, self.string_iid(&name));
            }
            Info::NetPlugin { id } => int(w, Key::NetId, id),
            Info::CeColl {
                seq,
                count,
                root,
                ref datatype,
                ref sync,
                stream,
                user_tag,
                ..
            } => {
                uint(w, Key::Seq, seq);
                uint(w, Key::Count, count);
                int(w, Key::Root, root as i64);
                string(w, Key::Datatype, self.string_iid(datatype));
                string(w, Key::Sync, self.string_iid(sync));
                pointer(w, Key::Stream, stream);
                tag_field(w, user_tag);
            }
            Info::CeSync { complete, n_ranks } => {
                boolean(w, Key::Complete, complete);
                int(w, Key::Nranks, n_ranks as i64);
            }
            Info::CeBatch {
                num_ops,
                total_bytes,
                intra_sync,
            } => {
                int(w, Key::Ops, num_ops as i64);
                uint(w, Key::Bytes, total_bytes);
                boolean(w, Key::IntraSync, intra_sync);
            }
        }
    }
}

fn clock_at(id: u32, ts: u64) -> Clock {
    Clock {
        clock_id: Some(id),
        timestamp: Some(ts),
        is_incremental: None,
    }
}

/// An event id in its compact trace form (tag byte last: 5–6 varint bytes
/// instead of 10; [`ids::to_trace`]), shown in hex.
#[inline(always)]
fn event_id(w: &mut Wr, k: Key, id: u64) {
    pointer(w, k, ids::to_trace(id));
}

/// The v7 user tag, only when the operation has one.
#[inline(always)]
fn tag_field(w: &mut Wr, user_tag: u64) {
    if user_tag != 0 {
        uint(w, Key::UserTag, user_tag);
    }
}

#[inline(always)]
fn uint(w: &mut Wr, k: Key, v: u64) {
    w.annotation(k.iid(), wire::ANN_UINT, v);
}

/// 64-bit handles (event ids, streams): exact, and shown in hex like the JSON trace.
#[inline(always)]
fn pointer(w: &mut Wr, k: Key, v: u64) {
    w.annotation(k.iid(), wire::ANN_POINTER, v);
}

/// int64 on the wire: a negative value is its two's complement as a varint.
#[inline(always)]
fn int(w: &mut Wr, k: Key, v: i64) {
    w.annotation(k.iid(), wire::ANN_INT, v as u64);
}

#[inline(always)]
fn boolean(w: &mut Wr, k: Key, v: bool) {
    w.annotation(k.iid(), wire::ANN_BOOL, u64::from(v));
}

#[inline(always)]
fn string(w: &mut Wr, k: Key, iid: u64) {
    w.annotation(k.iid(), wire::ANN_STRING_IID, iid);
}

fn uint_named(k: &str, v: u64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(k.to_string()),
        uint_value: Some(v),
        ..DebugAnnotation::default()
    }
}

fn int_named(k: &str, v: i64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(k.to_string()),
        int_value: Some(v),
        ..DebugAnnotation::default()
    }
}

fn str_named(k: &str, v: &str) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(k.to_string()),
        string_value: Some(v.to_string()),
        ..DebugAnnotation::default()
    }
}

#[cfg(test)]
mod tests;
