//! Loading one rank's trace file for the report: its stream identity, its
//! footer, whether it was cut, and its collective and p2p operations. Both
//! formats (binary Perfetto and JSON); only Coll, P2p and CeColl records are
//! kept, so memory grows with the operations, not with the file. KernelPhase
//! records (v7) are summed into one histogram per phase as they are read.

use crate::BadInput;
use evring_perfetto::read::Stop;
use evring_perfetto::trace::{Trace, Value};
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::decode;
use evring_shim::record::Record;
use evring_shim::strings::Str16;
use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};

/// Which format a file was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Perfetto,
    Json,
}

/// Collective or point-to-point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Coll,
    P2p,
}

/// One collective (Coll/CeColl) or p2p operation of a rank.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub kind: OpKind,
    pub func: Str16,
    /// Collective sequence number within the communicator (0 for p2p).
    pub seq: u64,
    pub count: u64,
    pub datatype: Str16,
    pub algo: Str16,
    pub proto: Str16,
    /// Peer rank of a p2p operation (-1 for collectives).
    pub peer: i32,
    pub rank: i32,
    /// Enqueue (NCCL's startEvent) and completion (GPU end when timed,
    /// else the latest of its children's ends and its stop), CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    pub end_ns: u64,
    /// v7 `userTag` (0: untagged).
    pub user_tag: u64,
}

/// GPU time of one KernelPhase phase over a file's records.
#[derive(Debug, Clone)]
pub struct PhaseTimes {
    pub hist: Histogram<u64>,
    pub sum_ns: u64,
}

impl Default for PhaseTimes {
    fn default() -> PhaseTimes {
        PhaseTimes {
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            sum_ns: 0,
        }
    }
}

impl PhaseTimes {
    pub fn add(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    pub fn merge(&mut self, o: &PhaseTimes) {
        let _ = self.hist.add(&o.hist);
        self.sum_ns = self.sum_ns.saturating_add(o.sum_ns);
    }
}

/// KernelPhase `phaseId`s the report names (0 initial_sync, 1 compute, 2 final_sync).
pub const PHASES: usize = 3;

/// Adds one KernelPhase record's GPU time (`gpu_end - gpu_start`) to `phases`.
pub fn add_phase(phases: &mut [PhaseTimes; PHASES], phase: u8, gpu_start: u64, gpu_end: u64) {
    if let Some(p) = phases.get_mut(phase as usize) {
        if gpu_start != 0 && gpu_end > gpu_start {
            p.add(gpu_end - gpu_start);
        }
    }
}

impl Op {
    pub fn latency_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    fn of(r: &Record) -> Option<Op> {
        let (kind, func, seq, count, datatype, algo, proto, peer) = match r.info {
            Info::Coll {
                seq,
                func,
                count,
                datatype,
                algo,
                proto,
                ..
            } => (OpKind::Coll, func, seq, count, datatype, algo, proto, -1),
            Info::CeColl {
                seq,
                func,
                count,
                datatype,
                ..
            } => (
                OpKind::Coll,
                func,
                seq,
                count,
                datatype,
                Str16::from_bytes(b"CE"),
                Str16::EMPTY,
                -1,
            ),
            Info::P2p {
                func,
                datatype,
                count,
                peer,
                ..
            } => (
                OpKind::P2p,
                func,
                0,
                count,
                datatype,
                Str16::EMPTY,
                Str16::EMPTY,
                peer,
            ),
            _ => return None,
        };
        Some(Op {
            kind,
            func,
            seq,
            count,
            datatype,
            algo,
            proto,
            peer,
            rank: r.rank,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            user_tag: r.info.user_tag(),
        })
    }
}

/// A clock anchor: the same instant on CLOCK_MONOTONIC and CLOCK_REALTIME.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anchor {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
}

/// Everything the report needs of one file.
#[derive(Debug, Clone)]
pub struct RankTrace {
    pub path: PathBuf,
    pub format: Format,
    pub host: String,
    pub pid: i64,
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub abi: u64,
    pub open: Anchor,
    /// The footer's anchor (none when the file has no footer).
    pub close: Option<Anchor>,
    /// The footer's fields; `None` when the file ends without one.
    pub footer: Option<Vec<(String, Value)>>,
    /// The file ends inside a packet or a JSON line (a killed writer).
    pub cut: bool,
    pub ops: Vec<Op>,
    /// GPU time per KernelPhase phase (v7; empty histograms without phases).
    pub phases: [PhaseTimes; PHASES],
    /// Files joined into this stream (rotated parts; 1 for a single file).
    pub parts: usize,
}

impl RankTrace {
    pub fn footer_u64(&self, key: &str) -> Option<u64> {
        self.footer
            .as_ref()?
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_u64())
    }

    pub fn footer_bool(&self, key: &str) -> Option<bool> {
        match self.footer.as_ref()?.iter().find(|(k, _)| k == key)?.1 {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// Reads the file at `path` (either format, whole or cut).
pub fn load(path: &Path) -> Result<RankTrace, BadInput> {
    let bytes = std::fs::read(path).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
    load_bytes(path, &bytes).map_err(|e| BadInput(format!("{}: {e}", path.display())))
}

/// As [`load`], from the file's bytes.
pub fn load_bytes(path: &Path, bytes: &[u8]) -> Result<RankTrace, BadInput> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => Err(BadInput("empty file".into())),
        Some(b'[') => crate::load_json::load(path, bytes),
        Some(_) => load_perfetto(path, bytes),
    }
}

fn value_u64(fields: &[(String, Value)], key: &str) -> Option<u64> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_u64())
}

fn value_i64(fields: &[(String, Value)], key: &str) -> Option<i64> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_i64())
}

/// Builds the identity part of a [`RankTrace`] from a header's and a
/// footer's fields (the same keys in both formats).
pub(crate) fn identity(
    path: &Path,
    format: Format,
    stream: &[(String, Value)],
    footer: Option<Vec<(String, Value)>>,
) -> Result<RankTrace, BadInput> {
    let need = |k: &str| {
        value_i64(stream, k)
            .ok_or_else(|| BadInput(format!("the evring.stream header has no `{k}`")))
    };
    let anchor = |f: &[(String, Value)]| {
        Some(Anchor {
            monotonic_ns: value_u64(f, "monotonic_ns")?,
            realtime_ns: value_u64(f, "realtime_ns")?,
        })
    };
    let host = match stream.iter().find(|(k, _)| k == "host") {
        Some((_, Value::Str(h))) => h.clone(),
        _ => String::new(),
    };
    Ok(RankTrace {
        path: path.to_path_buf(),
        format,
        host,
        pid: value_i64(stream, "pid").unwrap_or(0),
        comm_id: value_u64(stream, "comm_id")
            .ok_or_else(|| BadInput("the evring.stream header has no `comm_id`".into()))?,
        rank: need("rank")? as i32,
        nranks: need("nranks")? as i32,
        abi: value_u64(stream, "abi").unwrap_or(0),
        open: anchor(stream).unwrap_or_default(),
        close: footer.as_deref().and_then(anchor),
        footer,
        cut: false,
        ops: Vec::new(),
        phases: Default::default(),
        parts: 1,
    })
}

fn load_perfetto(path: &Path, bytes: &[u8]) -> Result<RankTrace, BadInput> {
    let mut ops = Vec::new();
    let mut phases: [PhaseTimes; PHASES] = Default::default();
    let kinds = [Kind::Coll, Kind::P2p, Kind::CeColl, Kind::KernelPhase];
    let t: Trace = decode::read_each(bytes, &kinds, |r| {
        if let Info::KernelPhase { phase, .. } = r.info {
            add_phase(&mut phases, phase, r.gpu_start, r.gpu_end);
        } else if let Some(op) = Op::of(&r) {
            ops.push(op);
        }
    });
    if t.stream.is_empty() {
        return Err(BadInput(match &t.stop {
            Some(Stop::Garbage { offset, why }) => {
                format!("not a Perfetto trace (byte {offset}: {why})")
            }
            Some(Stop::Cut { .. }) => "cut before its evring.stream header".into(),
            None => "no evring.stream header: not a trace evring wrote".into(),
        }));
    }
    if let Some(Stop::Garbage { offset, why }) = &t.stop {
        return Err(BadInput(format!("garbage at byte {offset} ({why})")));
    }
    let mut rt = identity(path, Format::Perfetto, &t.stream, t.summary.clone())?;
    rt.cut = matches!(t.stop, Some(Stop::Cut { .. }));
    rt.ops = ops;
    rt.phases = phases;
    Ok(rt)
}
