//! Encoder → prost decoder round trips: records, tracks, flows, names, cuts.

use super::decode;
use super::Encoder;
use crate::format::fields;
use crate::record::flag;
use crate::record::Record;
use evring_perfetto::proto::{clock, Trace as TraceMsg};
use evring_perfetto::trace::{Trace, Value};
use prost::Message;
use std::collections::{HashMap, HashSet};

use crate::test_records::{anchor, info, records, HIGH};

/// A slice with the record it maps back to.
struct Joined {
    record: Record,
    name: String,
    category: String,
    track: u64,
    begin: u64,
    end: u64,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

struct Read {
    trace: Trace,
    slices: Vec<Joined>,
}

impl std::ops::Deref for Read {
    type Target = Trace;
    fn deref(&self) -> &Trace {
        &self.trace
    }
}

fn read(bytes: &[u8]) -> Read {
    let (trace, recs) = decode::read(bytes);
    assert_eq!(
        recs.len(),
        trace.slices.len(),
        "every slice maps to a record"
    );
    let slices = trace
        .slices
        .iter()
        .zip(recs)
        .map(|(s, record)| Joined {
            record,
            name: s.name.clone(),
            category: s.category.clone(),
            track: s.track,
            begin: s.begin,
            end: s.end,
            flows_out: s.flows_out.clone(),
            flows_in: s.flows_in.clone(),
        })
        .collect();
    Read { trace, slices }
}

fn encode(recs: &[Record]) -> Vec<u8> {
    let mut e = Encoder::new(info(), &anchor(1));
    let mut out = Vec::new();
    e.header(&mut out, &anchor(1));
    for r in recs {
        e.record(&mut out, r);
    }
    e.footer(
        &mut out,
        &anchor(2),
        &fields(
            &[("finalized", true)],
            &[
                ("stream_records", recs.len() as u64 + 1),
                ("drop_ring_full", 0),
            ],
        ),
    );
    out
}

fn same(a: &Record, b: &Record) -> bool {
    let mut a = *a;
    a.ctx = 0;
    format!("{a:?}") == format!("{b:?}")
}

#[test]
fn every_record_round_trips_with_exact_fields() {
    let recs = records();
    let bytes = encode(&recs);
    let t = read(&bytes);
    assert_eq!(t.stop, None);
    assert_eq!(t.unterminated, 0);
    assert_eq!(t.malformed, 0);
    assert_eq!(t.slices.len(), recs.len());
    for (r, s) in recs.iter().zip(&t.slices) {
        assert!(same(r, &s.record), "\nwrote {r:?}\nread  {:?}", s.record);
    }
    // The whole file is also one valid `Trace` message for prost.
    let whole = TraceMsg::decode(bytes.as_slice()).expect("a Trace message");
    assert_eq!(whole.packet.len(), t.packets);
}

#[test]
fn names_categories_and_states_are_readable() {
    let t = read(&encode(&records()));
    let by_id: HashMap<u64, _> = t.slices.iter().map(|s| (s.record.id, s)).collect();
    let coll = by_id[&(HIGH + 5)];
    assert_eq!(
        (coll.name.as_str(), coll.category.as_str()),
        ("AllReduce", "Coll")
    );
    let api = by_id[&(HIGH + 4)];
    assert_eq!(
        (api.name.as_str(), api.category.as_str()),
        ("AllReduce", "CollApi")
    );
    let step = by_id[&(HIGH + 10)];
    assert_eq!(
        (step.name.as_str(), step.category.as_str()),
        ("ProxyStep", "ProxyStep")
    );
    // The state names as NCCL spells them, in the order they happened.
    let bytes = encode(&records());
    let raw = TraceMsg::decode(bytes.as_slice()).unwrap();
    let names: HashSet<String> = raw
        .packet
        .iter()
        .filter_map(|p| p.interned_data.as_ref())
        .flat_map(|i| {
            i.debug_annotation_names
                .iter()
                .filter_map(|n| n.name.clone())
        })
        .collect();
    for n in [
        "SendGPUWait",
        "SendWait",
        "SendPeerWait",
        "Active",
        "AppendEnd",
        "KernelChStop",
        "id",
        "parent",
    ] {
        assert!(names.contains(n), "{n} interned");
    }
    assert_eq!(
        &step.record.states[..3],
        &[
            (8, step.begin),
            (9, step.begin + 50),
            (20, step.begin + 100)
        ]
    );
}

#[test]
fn one_named_track_per_lane_under_the_rank_process() {
    let t = read(&encode(&records()));
    let process: Vec<_> = t.tracks.iter().filter(|(_, tr)| tr.pid.is_some()).collect();
    assert_eq!(process.len(), 1);
    let (puuid, p) = process[0];
    assert_eq!(p.pid, Some(4242));
    assert!(
        p.name.contains("rank 3") && p.name.contains("node-07"),
        "{}",
        p.name
    );
    assert!(p.labels.contains(&"host=node-07".to_string()));
    let lanes: HashMap<u64, &str> = t
        .tracks
        .iter()
        .filter(|(_, tr)| tr.parent == Some(*puuid))
        .map(|(u, tr)| (*u, tr.name.as_str()))
        .collect();
    let lane_of = |id: u64| {
        lanes[&t
            .slices
            .iter()
            .find(|s| s.record.id == HIGH + id)
            .unwrap()
            .track]
    };
    assert_eq!(lane_of(1), "Groups");
    assert_eq!(lane_of(22), "Groups");
    assert_eq!(lane_of(4), "API");
    assert_eq!(lane_of(2), "API");
    assert_eq!(lane_of(5), "Coll/P2p");
    assert_eq!(lane_of(23), "Coll/P2p");
    assert_eq!(lane_of(8), "Kernel ch2");
    assert_eq!(lane_of(29), "Kernel ch1 phases");
    assert_eq!(lane_of(30), "Kernel ch1");
    assert_eq!(lane_of(9), "Proxy ch1 send peer 3");
    assert_eq!(lane_of(10), "Proxy steps");
    assert_eq!(lane_of(20), "Proxy ctrl");
    assert_eq!(lane_of(21), "Network");
    assert_eq!(lane_of(28), "rank 5 Proxy ch0 recv peer 0");
    // Every track a slice uses is described and belongs to the process.
    for s in &t.slices {
        assert!(
            lanes.contains_key(&s.track),
            "slice on an undescribed track"
        );
    }
}

#[test]
fn overlapping_events_never_share_a_track() {
    let t = read(&encode(&records()));
    let mut per_track: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for s in &t.slices {
        per_track.entry(s.track).or_default().push((s.begin, s.end));
    }
    for (track, mut v) in per_track {
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "track {track:#x}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    // The two collectives overlap: two "Coll/P2p" tracks; of the four
    // pipelined steps each overlaps the next two: three tracks.
    let named = |n: &str| t.tracks.values().filter(|tr| tr.name == n).count();
    assert_eq!(named("Coll/P2p"), 2);
    assert_eq!(named("Proxy steps"), 3);
}

#[test]
fn flows_link_each_parent_to_its_children() {
    let recs = records();
    let t = read(&encode(&recs));
    let by_id: HashMap<u64, _> = t.slices.iter().map(|s| (s.record.id, s)).collect();
    let mut linked = 0;
    for s in &t.slices {
        let r = &s.record;
        let Some(parent) = by_id.get(&r.parent) else {
            assert!(
                s.flows_in.is_empty() || r.parent != 0,
                "no parent, no arrow in"
            );
            continue;
        };
        if r.flags & flag::LATE_CHILD != 0 {
            assert!(s.flows_in.is_empty(), "a late child gets no arrow");
            continue;
        }
        assert_eq!(s.flows_in.len(), 1, "{:#x}", r.id);
        assert!(
            parent.flows_out.contains(&s.flows_in[0]),
            "arrow {:#x} -> {:#x}",
            r.parent,
            r.id
        );
        linked += 1;
    }
    // Children of a present parent: 4 steps, net, op, kernel ch, 2 colls,
    // api, launch, p2p (the late child of another rank gets none); v7: a
    // KernelPhase and its KernelCh.
    assert_eq!(linked, 14);
    let out: usize = t.slices.iter().map(|s| s.flows_out.len()).sum();
    assert_eq!(out, linked, "no arrow leaves without arriving");
    assert_eq!(t.summary_value("perfetto_flows"), Some(&Value::Uint(14)));
}

#[test]
fn header_and_footer_carry_identity_counters_and_clock_anchors() {
    let t = read(&encode(&records()));
    assert_eq!(
        t.stream_value("comm_id"),
        Some(&Value::Uint(0xFEDC_BA98_7654_3210))
    );
    assert_eq!(t.stream_value("host"), Some(&Value::Str("node-07".into())));
    assert_eq!(t.stream_value("pid"), Some(&Value::Int(4242)));
    assert_eq!(
        t.stream_value("realtime_ns"),
        Some(&Value::Uint(anchor(1).realtime_ns))
    );
    assert_eq!(t.summary_value("finalized"), Some(&Value::Bool(true)));
    assert_eq!(
        t.summary_value("stream_records"),
        Some(&Value::Uint(records().len() as u64 + 1))
    );
    assert_eq!(t.clocks.len(), 2, "one anchor at open, one at the footer");
    for (c, a) in t.clocks.iter().zip([anchor(1), anchor(2)]) {
        assert!(c.contains(&(clock::MONOTONIC, a.monotonic_ns)));
        assert!(c.contains(&(clock::REALTIME, a.realtime_ns)));
        assert!(c.contains(&(clock::BOOTTIME, a.boottime_ns)));
    }
}

#[test]
fn a_cut_file_reads_every_record_before_the_cut() {
    let recs = records();
    let bytes = encode(&recs);
    let full = read(&bytes);
    let mut last = 0;
    for cut in (0..bytes.len()).step_by(7) {
        let t = read(&bytes[..cut]);
        assert!(
            t.slices.len() >= last,
            "records never disappear as the cut moves on"
        );
        last = t.slices.len();
        for (a, b) in t.slices.iter().zip(&full.slices) {
            assert!(same(&b.record, &a.record));
        }
        assert!(t.summary.is_none() || cut > bytes.len() - 300);
    }
    assert_eq!(last, recs.len());
}

#[test]
fn streams_merged_into_one_file_use_distinct_flow_ids_and_keep_exact_ids() {
    // `evring merge` writes each stream on a sequence of its own
    // (Encoder::with_ids); arrows of two streams must never join, and every
    // id must still read back exactly from the arrow that replaces it.
    let mut bytes = encode(&records());
    let mut other = info();
    other.rank = 4;
    let mut e = Encoder::with_ids(other, &anchor(1), 2, 1 << 24);
    e.header(&mut bytes, &anchor(1));
    for r in records() {
        e.record(&mut bytes, &r);
    }
    let t = read(&bytes);
    let n = records().len();
    assert_eq!(t.slices.len(), 2 * n);
    let flows = |range: std::ops::Range<usize>| -> HashSet<u64> {
        t.slices[range]
            .iter()
            .flat_map(|s| s.flows_in.iter().copied())
            .collect()
    };
    let (fa, fb) = (flows(0..n), flows(n..2 * n));
    assert!(!fa.is_empty());
    assert!(fa.is_disjoint(&fb));
    for (r, s) in records().iter().chain(&records()).zip(&t.slices) {
        assert_eq!((s.record.id, s.record.parent), (r.id, r.parent));
    }
}

#[test]
fn ids_are_compact_and_an_arrow_in_replaces_the_id() {
    let t = read(&encode(&records()));
    let mut arrows = 0;
    for (s, raw) in t.slices.iter().zip(&t.trace.slices) {
        match raw.arg("id") {
            Some(v) => {
                assert!(s.flows_in.is_empty(), "id written beside an arrow in");
                assert_eq!(
                    v.as_u64(),
                    Some(s.record.id.rotate_left(8)),
                    "trace form: tag byte last"
                );
            }
            None => {
                assert_eq!(s.flows_in.len(), 1, "no id and no arrow");
                arrows += 1;
            }
        }
    }
    assert_eq!(arrows, 14);
}

#[test]
fn timestamps_are_deltas_on_the_sequence_incremental_clock() {
    let recs = records();
    let bytes = encode(&recs);
    let raw = TraceMsg::decode(bytes.as_slice()).unwrap();
    let defaults = raw
        .packet
        .iter()
        .find_map(|p| p.trace_packet_defaults.as_ref())
        .unwrap();
    assert_eq!(defaults.timestamp_clock_id, Some(clock::EVRING_DELTA));
    let snapshot = raw.packet[0].clock_snapshot.as_ref().unwrap();
    let delta = snapshot
        .clocks
        .iter()
        .find(|c| c.clock_id == Some(clock::EVRING_DELTA))
        .unwrap();
    assert_eq!(delta.is_incremental, Some(true));
    assert_eq!(delta.timestamp, Some(anchor(1).monotonic_ns));
    // Every slice end is its begin plus the duration: a small number, where
    // the absolute CLOCK_MONOTONIC times are around 2^50.
    let ends = raw
        .packet
        .iter()
        .filter(|p| p.track_event.as_ref().and_then(|e| e.r#type) == Some(2));
    for p in ends {
        assert!(p.timestamp.unwrap() < 1 << 32, "{:?}", p.timestamp);
    }
    // Pipelined steps begin before the previous step ends: on the second clock.
    assert!(raw
        .packet
        .iter()
        .any(|p| p.timestamp_clock_id == Some(clock::EVRING_DELTA_BACK)));
    // And the reader adds them up to the exact absolute times.
    let t = read(&bytes);
    for (r, s) in recs.iter().zip(&t.slices) {
        assert_eq!(s.record.start_ns, r.start_ns);
        assert_eq!(s.record.end_ns, r.end_ns);
    }
}

#[test]
fn trace_reads_as_one_merged_trace_when_concatenated() {
    // Perfetto accepts concatenated trace files; so does the reader.
    let mut bytes = encode(&records());
    bytes.extend(encode(&records()));
    let t = read(&bytes);
    assert_eq!(t.slices.len(), 2 * records().len());
    assert_eq!(t.stop, None);
}

/// v7: the user tag, kernel variant and symmetric flag are arguments of the
/// Coll slice (the tag only where non-zero), and the KernelPhase slice
/// carries its phase name and GPU times.
#[test]
fn v7_fields_are_slice_arguments() {
    let t = read(&encode(&records()));
    let raw = |id: u64| {
        let i = t
            .slices
            .iter()
            .position(|s| s.record.id == HIGH + id)
            .unwrap_or_else(|| panic!("slice {id}"));
        (&t.trace.slices[i], &t.slices[i])
    };
    let (coll, _) = raw(31);
    assert_eq!(
        coll.arg("user_tag"),
        Some(&Value::Uint(0xC0DE_0000_0000_0042))
    );
    assert_eq!(
        coll.arg("kernel_variant"),
        Some(&Value::Str("AllReduce_ST".into()))
    );
    assert_eq!(coll.arg("sym_coll"), Some(&Value::Bool(true)));
    // An untagged, pre-v7 collective names none of them.
    let (old, _) = raw(5);
    assert_eq!(old.category, "Coll");
    for k in ["user_tag", "kernel_variant", "sym_coll"] {
        assert_eq!(old.arg(k), None, "{k}");
    }
    let (phase, joined) = raw(29);
    assert_eq!(phase.category, "KernelPhase");
    assert_eq!(phase.arg("phase"), Some(&Value::Str("compute".into())));
    assert_eq!(
        (joined.record.gpu_start, joined.record.gpu_end),
        (5_000_000_100, 5_000_000_900)
    );
}

/// Record packets are written by hand (`wire.rs`), the rest by prost: the
/// file must be the bytes prost writes for the same messages. Decoding it
/// and encoding it again with prost gives it back exactly (fields in tag
/// order, shortest varints, nothing unknown), for records of every kind
/// with every optional annotation, negative values, a state beyond the
/// named ones, interned strings and flag sets, and arrows out and in.
#[test]
fn record_packets_are_what_prost_writes() {
    use crate::model::Kind;
    use crate::record::Timing;
    let mut recs = Vec::new();
    for (i, r) in records().into_iter().enumerate() {
        recs.push(r);
        let mut v = r;
        v.id ^= 1 << 40;
        v.rank = -7;
        v.timing = [Timing::Host, Timing::Children, Timing::Gpu, Timing::Forced][i % 4];
        v.flags |= flag::FORCED_AGE | flag::CHILDREN_INCOMPLETE | (i as u32 & flag::LATE_CHILD);
        v.stop_ns = v.end_ns.saturating_sub(3);
        v.gpu_start = u64::MAX - i as u64;
        v.gpu_end = 1 << 63;
        v.states = [(200, v.start_ns - 5), (0, 0), (31, u64::MAX), (9, 1)];
        v.n_states = 4;
        v.state_arg = u64::MAX >> i;
        recs.push(v);
    }
    // A parent written after 600 children: 600 arrows out of one slice.
    let t = recs.last().map_or(0, |r| r.end_ns);
    let parent = |i| HIGH - 1000 + i;
    for i in 1..=600 {
        let info = crate::model::Info::ProxyStep { step: i as i32 };
        let r = Record::stopped(
            parent(i),
            parent(0),
            Kind::ProxyStep,
            info,
            t + i,
            t + i + 5,
        );
        recs.push(r);
    }
    let info = crate::model::Info::None;
    recs.push(Record::stopped(
        parent(0),
        0,
        Kind::ProxyCtrl,
        info,
        t,
        t + 700,
    ));
    let bytes = encode(&recs);
    let whole = TraceMsg::decode(bytes.as_slice()).expect("a Trace message");
    assert!(whole.packet.len() > 2 * recs.len());
    let last = whole.packet.iter().rev().find_map(|p| {
        let e = p.track_event.as_ref()?;
        (e.r#type == Some(1)).then_some(e.flow_ids.len())
    });
    assert_eq!(last, Some(600));
    assert!(bytes == whole.encode_to_vec(), "prost writes other bytes");
}
