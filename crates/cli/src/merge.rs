//! `evring merge`: every rank's binary trace into one Perfetto file, one
//! process per rank (grouped by host in the process names), on one clock.
//!
//! Clock alignment (docs/report.md, "Merging"):
//! 1. Files of one host share CLOCK_MONOTONIC: their timestamps are kept.
//! 2. Another host's timestamps are moved by the difference of the hosts'
//!    wall-clock anchors: each header pairs CLOCK_MONOTONIC with
//!    CLOCK_REALTIME at open, so `mono + (realtime − mono)_host` is wall time,
//!    and the reference host (the first, by name) is kept as it is.
//! 3. That is only as good as the hosts' clock sync, so it is refined by
//!    the collectives both hosts took part in: the ranks of a collective
//!    finish together (the last data lands everywhere within a few
//!    microseconds), so the median difference of their completion times,
//!    over every collective matched by (communicator, func, seq) between a rank of
//!    the host and a rank of the reference host, is the residual offset. The
//!    spread of those differences after the correction (median absolute
//!    deviation) is reported as the alignment's error.

use crate::BadInput;
use evring_perfetto::read::Stop;
use evring_perfetto::trace::{Trace, Value};
use evring_shim::format::Field;
use evring_shim::model::Info;
use evring_shim::perfetto::{decode, Anchor, Encoder, StreamInfo};
use evring_shim::record::Record;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One input file, decoded.
pub struct Input {
    pub path: PathBuf,
    pub trace: Trace,
    /// Each record with its slice's begin and end as the file placed it.
    pub records: Vec<(u64, u64, Record)>,
    pub host: String,
    pub comm_id: u64,
    pub rank: i32,
    pub pid: i32,
    pub open: Anchor,
}

/// How one host was put on the reference clock.
#[derive(Debug, Clone, PartialEq)]
pub struct HostShift {
    pub host: String,
    /// Added to every timestamp of the host's files.
    pub offset_ns: i64,
    /// From the wall-clock anchors alone.
    pub wall_offset_ns: i64,
    /// Collectives matched with the reference host (0: anchors only).
    pub matched: usize,
    /// Median absolute deviation of the matched completions after the
    /// correction (None without matches).
    pub error_ns: Option<u64>,
}

fn val<'a>(fields: &'a [(String, Value)], k: &str) -> Option<&'a Value> {
    fields.iter().find(|(n, _)| n == k).map(|(_, v)| v)
}

fn anchor(fields: &[(String, Value)]) -> Anchor {
    let u = |k| val(fields, k).and_then(Value::as_u64).unwrap_or(0);
    Anchor {
        monotonic_ns: u("monotonic_ns"),
        realtime_ns: u("realtime_ns"),
        boottime_ns: u("boottime_ns"),
    }
}

/// Reads one binary trace for merging (whole or cut; JSON is refused: merge
/// writes the binary format from binary inputs).
pub fn read(path: &Path) -> Result<Input, BadInput> {
    let bad = |m: String| BadInput(format!("{}: {m}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(bad(
            "a JSON trace: merge reads binary traces (EVRING_FORMAT=perfetto)".into(),
        ));
    }
    let (trace, _) = crate::read(&bytes).map_err(|e| bad(e.0))?;
    let records = trace
        .slices
        .iter()
        .filter_map(|s| {
            let r = decode::to_record(s, decode::StreamOf::of(&trace, s))?;
            Some((s.begin, s.end, r))
        })
        .collect();
    if let Some(Stop::Garbage { offset, why }) = &trace.stop {
        return Err(bad(format!("garbage at byte {offset} ({why})")));
    }
    let s = &trace.stream;
    let host = match val(s, "host") {
        Some(Value::Str(h)) => h.clone(),
        _ => String::new(),
    };
    Ok(Input {
        path: path.to_path_buf(),
        host,
        comm_id: val(s, "comm_id").and_then(Value::as_u64).unwrap_or(0),
        rank: val(s, "rank").and_then(Value::as_i64).unwrap_or(0) as i32,
        pid: val(s, "pid").and_then(Value::as_i64).unwrap_or(0) as i32,
        open: anchor(s),
        trace,
        records,
    })
}

fn median(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// A collective: (communicator, func, seq); NCCL numbers collectives per
/// function (`comm->seqNumber[func]`).
type Key = (u64, evring_shim::strings::Str16, u64);

/// Completion time of each collective of `inp`.
fn ends(inp: &Input) -> HashMap<Key, u64> {
    inp.records
        .iter()
        .filter_map(|(_, _, r)| match r.info {
            Info::Coll { seq, func, .. } => Some(((inp.comm_id, func, seq), r.end_ns)),
            _ => None,
        })
        .collect()
}

/// The shift of every host (the first host by name is the reference).
pub fn align(inputs: &[Input]) -> Vec<HostShift> {
    let mut hosts: BTreeMap<&str, Vec<&Input>> = BTreeMap::new();
    for i in inputs {
        hosts.entry(i.host.as_str()).or_default().push(i);
    }
    let wall = |files: &[&Input]| {
        let mut v: Vec<i64> = files
            .iter()
            .filter(|f| f.open.realtime_ns != 0)
            .map(|f| f.open.realtime_ns as i64 - f.open.monotonic_ns as i64)
            .collect();
        median(&mut v).unwrap_or(0)
    };
    let mut it = hosts.iter();
    let Some((ref_host, ref_files)) = it.next() else {
        return Vec::new();
    };
    let ref_wall = wall(ref_files);
    let ref_ends: Vec<HashMap<Key, u64>> = ref_files.iter().map(|f| ends(f)).collect();
    let mut out = vec![HostShift {
        host: ref_host.to_string(),
        offset_ns: 0,
        wall_offset_ns: 0,
        matched: 0,
        error_ns: None,
    }];
    for (host, files) in it {
        let wall_offset = wall(files) - ref_wall;
        let mut residual = Vec::new();
        for f in files {
            for (key, end) in ends(f) {
                for r in &ref_ends {
                    if let Some(&re) = r.get(&key) {
                        residual.push(re as i64 - (end as i64 + wall_offset));
                    }
                }
            }
        }
        let matched = residual.len();
        let fix = median(&mut residual).unwrap_or(0);
        let mut dev: Vec<i64> = residual.iter().map(|r| (r - fix).abs()).collect();
        out.push(HostShift {
            host: host.to_string(),
            offset_ns: wall_offset + fix,
            wall_offset_ns: wall_offset,
            matched,
            error_ns: median(&mut dev).map(|d| d as u64),
        });
    }
    out
}

fn shift(t: u64, by: i64) -> u64 {
    if t == 0 {
        0
    } else {
        (t as i64).saturating_add(by).max(0) as u64
    }
}

fn to_field(v: &Value) -> Field {
    match v {
        Value::Bool(b) => Field::Bool(*b),
        Value::Uint(u) => Field::U64(*u),
        Value::Int(i) => Field::I64(*i),
        Value::Str(s) => Field::Str(s.clone()),
    }
}

/// Writes `inputs` as one trace into `out`; returns each host's shift.
pub fn merge(inputs: &[Input], out: &mut Vec<u8>) -> Vec<HostShift> {
    let shifts = align(inputs);
    let offset: HashMap<&str, i64> = shifts
        .iter()
        .map(|s| (s.host.as_str(), s.offset_ns))
        .collect();
    let mut order: Vec<&Input> = inputs.iter().collect();
    order.sort_by(|a, b| (&a.host, a.comm_id, a.rank).cmp(&(&b.host, b.comm_id, b.rank)));
    // Perfetto groups tracks into processes by pid: a pid already taken (by
    // another host, or another rank of the same process) gets a fresh one
    // above any real pid, so every rank is a process group of its own; the
    // process name and labels still say host, rank and communicator.
    let mut taken = std::collections::HashSet::new();
    let mut next_pid = 1 << 22;
    for (i, inp) in order.iter().enumerate() {
        let by = offset.get(inp.host.as_str()).copied().unwrap_or(0);
        let pid = if taken.insert(inp.pid) {
            inp.pid
        } else {
            while !taken.insert(next_pid) {
                next_pid += 1;
            }
            next_pid
        };
        let s = &inp.trace.stream;
        let str_of = |k| match val(s, k) {
            Some(Value::Str(v)) => Some(v.clone()),
            _ => None,
        };
        let info = StreamInfo {
            comm_id: inp.comm_id,
            rank: inp.rank,
            nranks: val(s, "nranks").and_then(Value::as_i64).unwrap_or(0) as i32,
            nnodes: val(s, "nnodes").and_then(Value::as_i64).unwrap_or(0) as i32,
            abi: val(s, "abi").and_then(Value::as_u64).unwrap_or(0) as u32,
            name: str_of("name"),
            pid,
            host: inp.host.clone(),
            ctx: i as u64,
        };
        let moved = |a: Anchor| Anchor {
            monotonic_ns: shift(a.monotonic_ns, by),
            ..a
        };
        let open = moved(inp.open);
        let mut e = Encoder::with_ids(info, &open, i as u32 + 1, (i as u64 + 1) << 24);
        e.header(out, &open);
        for &(begin, end, r) in &inp.records {
            let mut r = r;
            r.start_ns = shift(r.start_ns, by);
            r.stop_ns = shift(r.stop_ns, by);
            r.end_ns = shift(r.end_ns, by);
            for st in r.states.iter_mut().take(r.n_states as usize) {
                st.1 = shift(st.1, by);
            }
            e.record_span(out, &r, shift(begin, by), shift(end, by));
        }
        if let Some(summary) = &inp.trace.summary {
            let close = moved(anchor(summary));
            let mut fields: Vec<(&str, Field)> = summary
                .iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "monotonic_ns" | "realtime_ns" | "boottime_ns")
                        && !k.starts_with("perfetto_")
                })
                .map(|(k, v)| (k.as_str(), to_field(v)))
                .collect();
            fields.push(("merge_offset_ns", Field::I64(by)));
            e.footer(out, &close, &fields);
        }
    }
    shifts
}
