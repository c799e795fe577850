//! `evring report`: what a set of rank traces says, per communicator: an
//! operation table (counts, bytes, latency quantiles, algbw/busbw per size
//! bucket), completeness per rank, and stragglers (who arrived last at each
//! collective); with NCCL 2.31+ (profiler v7) traces, a table per user tag
//! when operations carry one and the GPU time of each kernel barrier phase.
//! docs/report.md explains every column.

use crate::load::{Format, OpKind, RankTrace, PHASES};
use crate::BadInput;
use evring_shim::bandwidth::{bucket_label, gb_per_s, size_bucket, type_size, Shape};
use evring_shim::strings::Str16;
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashMap};

/// One row of the operation table: one operation in one size bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct OpRow {
    pub kind: OpKind,
    pub func: String,
    /// Size bucket (see `bandwidth::size_bucket`) and its label.
    pub bucket: u8,
    pub size: String,
    /// Records over all ranks (an operation on 8 ranks counts 8).
    pub count: u64,
    /// Bytes of those records, by the size rule of `bandwidth`.
    pub bytes: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Σ bytes / Σ latency (GB/s) and that times the bus factor.
    pub algbw: f64,
    pub busbw: f64,
    /// Records whose datatype has no known size (counted in bucket 0).
    pub unknown_type: u64,
}

/// One row of the tag table: the operations of one v7 user tag.
#[derive(Debug, Clone, PartialEq)]
pub struct TagRow {
    pub tag: u64,
    /// Records over all ranks.
    pub ops: u64,
    pub bytes: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// GPU time of one kernel barrier phase (v7 KernelPhase) over all ranks and channels.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseRow {
    pub phase: String,
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// What one rank's file says about its own completeness.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRow {
    pub rank: i32,
    pub host: String,
    pub pid: i64,
    pub file: String,
    /// Files of the stream (more than one when it was rotated).
    pub parts: usize,
    pub format: Format,
    /// Coll/P2p records read.
    pub ops: u64,
    pub footer: bool,
    /// The footer's verdicts (absent without a footer).
    pub complete: Option<bool>,
    pub end: Option<String>,
    /// Starts refused plus records lost or unwritten, per the footer.
    pub drops: Option<u64>,
    /// Events still open when the footer was written.
    pub live: Option<u64>,
    pub cut: bool,
}

/// A rank that arrived last at collectives.
#[derive(Debug, Clone, PartialEq)]
pub struct Offender {
    pub rank: i32,
    pub host: String,
    /// Collectives at which it arrived last.
    pub last: u64,
    /// Waiting it caused: Σ over those collectives of (its arrival − each other rank's).
    pub wait_ns: u128,
    /// Its part of all the waiting of the communicator's matched collectives.
    pub share: f64,
    /// By how much it was last (its arrival − the second latest), mean and max.
    pub mean_late_ns: u64,
    pub max_late_ns: u64,
    pub worst_seq: u64,
    pub worst_func: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stragglers {
    /// Collectives seen on every rank present (at least two), by (comm, seq).
    pub matched: u64,
    /// Collectives seen on fewer ranks than present (dropped, cut, or not yet issued).
    pub partial: u64,
    /// Matched collectives whose last two ranks arrived at the same time
    /// (no single straggler; their waiting still counts in `wait_ns`).
    pub tied: u64,
    /// Σ of every matched collective's waiting.
    pub wait_ns: u128,
    pub offenders: Vec<Offender>,
}

/// How arrivals of different files were put on one clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// One host: CLOCK_MONOTONIC is shared, timestamps compare as they are.
    Monotonic,
    /// Several hosts: each file's timestamps moved to wall-clock time by its
    /// header's anchor (as good as the hosts' clock synchronisation).
    WallClock,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CommReport {
    pub comm_id: u64,
    pub nranks: i32,
    pub clock: Clock,
    pub ops: Vec<OpRow>,
    /// Per user tag (empty when no operation carries one).
    pub tags: Vec<TagRow>,
    /// Per KernelPhase phase (empty when the traces have none).
    pub phases: Vec<PhaseRow>,
    pub ranks: Vec<RankRow>,
    /// Ranks `0..nranks` with no file among the inputs.
    pub missing_ranks: Vec<i32>,
    pub stragglers: Stragglers,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub comms: Vec<CommReport>,
    /// Detached streams (records of no communicator of the process: PXN
    /// peers' events, late proxy events): listed, not in any table.
    pub detached: Vec<String>,
}

/// Builds the report of `traces` (any order, any number of communicators).
/// Inputs that cannot belong to one run are refused: a rank twice, or ranks
/// of one communicator that disagree on its size or the ABI version.
pub fn build(traces: &[RankTrace], top: usize) -> Result<Report, BadInput> {
    // The detached stream's header names no communicator (id 0, size 0).
    let (detached, traces): (Vec<RankTrace>, Vec<RankTrace>) = traces
        .iter()
        .cloned()
        .partition(|t| t.comm_id == 0 && t.nranks == 0);
    let detached = detached
        .iter()
        .map(|t| t.path.display().to_string())
        .collect();
    let streams = join_parts(&traces)?;
    let mut by_comm: BTreeMap<u64, Vec<&RankTrace>> = BTreeMap::new();
    for t in &streams {
        by_comm.entry(t.comm_id).or_default().push(t);
    }
    let mut comms = Vec::new();
    for (comm_id, mut files) in by_comm {
        files.sort_by_key(|t| t.rank);
        check_one_run(comm_id, &files)?;
        comms.push(comm(comm_id, &files, top));
    }
    Ok(Report { comms, detached })
}

/// Joins the parts of one stream (`EVRING_TRACE_LIMIT` rotation: the same
/// communicator, rank, host and pid, each part a whole trace) into one, in
/// the order they were opened: operations of every part, the footer of the
/// last, cut if any part was. The same part given twice is refused.
fn join_parts(traces: &[RankTrace]) -> Result<Vec<RankTrace>, BadInput> {
    let mut groups: BTreeMap<(u64, i32, &str, i64), Vec<&RankTrace>> = BTreeMap::new();
    for t in traces {
        groups
            .entry((t.comm_id, t.rank, t.host.as_str(), t.pid))
            .or_default()
            .push(t);
    }
    let mut out = Vec::with_capacity(groups.len());
    for (_, mut parts) in groups {
        parts.sort_by_key(|t| t.open.monotonic_ns);
        for w in parts.windows(2) {
            if w[0].open == w[1].open {
                return Err(BadInput(format!(
                    "{} and {}: the same trace given twice",
                    w[0].path.display(),
                    w[1].path.display()
                )));
            }
        }
        let mut joined = parts[parts.len() - 1].clone();
        if parts.len() > 1 {
            joined.ops = parts.iter().flat_map(|p| p.ops.iter().copied()).collect();
            for p in &parts[..parts.len() - 1] {
                for (j, o) in joined.phases.iter_mut().zip(&p.phases) {
                    j.merge(o);
                }
            }
            joined.cut = parts.iter().any(|p| p.cut);
            joined.open = parts[0].open;
            joined.parts = parts.len();
        }
        out.push(joined);
    }
    Ok(out)
}

fn check_one_run(comm_id: u64, files: &[&RankTrace]) -> Result<(), BadInput> {
    for w in files.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.rank == b.rank {
            return Err(BadInput(format!(
                "{} and {}: both are rank {} of communicator {comm_id:#x} (traces of two runs mixed?)",
                a.path.display(),
                b.path.display(),
                a.rank
            )));
        }
    }
    let first = files[0];
    for f in &files[1..] {
        if f.nranks != first.nranks || f.abi != first.abi {
            return Err(BadInput(format!(
                "{} (nranks {}, ABI v{}) and {} (nranks {}, ABI v{}): mixed versions or runs of communicator {comm_id:#x}",
                first.path.display(),
                first.nranks,
                first.abi,
                f.path.display(),
                f.nranks,
                f.abi
            )));
        }
    }
    Ok(())
}

fn comm(comm_id: u64, files: &[&RankTrace], top: usize) -> CommReport {
    let nranks = files[0].nranks;
    let n = nranks.max(1) as u32;
    let hosts: std::collections::BTreeSet<&str> = files.iter().map(|f| f.host.as_str()).collect();
    let clock = if hosts.len() <= 1 {
        Clock::Monotonic
    } else {
        Clock::WallClock
    };
    CommReport {
        comm_id,
        nranks,
        clock,
        ops: op_table(files, n),
        tags: tag_table(files, n),
        phases: phase_table(files),
        ranks: files.iter().map(|f| rank_row(f)).collect(),
        missing_ranks: (0..nranks)
            .filter(|r| files.iter().all(|f| f.rank != *r))
            .collect(),
        stragglers: stragglers(files, clock, top),
    }
}

struct Acc {
    hist: Histogram<u64>,
    count: u64,
    bytes: u64,
    lat_sum: u64,
    unknown: u64,
    shape: Shape,
}

/// Latencies from 1 ns to an hour with 3 significant digits (quantiles
/// within 0.1 %); longer ones count as an hour.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn op_table(files: &[&RankTrace], n: u32) -> Vec<OpRow> {
    let mut acc: BTreeMap<(OpKind, String, u8), Acc> = BTreeMap::new();
    for f in files {
        for op in &f.ops {
            let func = op.func.as_str().into_owned();
            let shape = Shape::of(&func);
            let ts = type_size(&op.datatype.as_str());
            let bytes = shape.bytes(op.count, ts.unwrap_or(0), n);
            let bucket = size_bucket(bytes);
            let a = acc.entry((op.kind, func, bucket)).or_insert_with(|| Acc {
                hist: histogram(),
                count: 0,
                bytes: 0,
                lat_sum: 0,
                unknown: 0,
                shape,
            });
            let lat = op.latency_ns();
            a.hist.saturating_record(lat);
            a.count += 1;
            a.bytes += bytes;
            a.lat_sum += lat;
            a.unknown += ts.is_none() as u64;
        }
    }
    acc.into_iter()
        .map(|((kind, func, bucket), a)| {
            let algbw = gb_per_s(a.bytes, a.lat_sum);
            OpRow {
                kind,
                func,
                bucket,
                size: bucket_label(bucket),
                count: a.count,
                bytes: a.bytes,
                p50_ns: a.hist.value_at_quantile(0.5),
                p99_ns: a.hist.value_at_quantile(0.99),
                max_ns: a.hist.max(),
                algbw,
                busbw: algbw * a.shape.bus_factor(n),
                unknown_type: a.unknown,
            }
        })
        .collect()
}

/// The tag table: present only when some operation carries a user tag; the
/// untagged ones then make a row of tag 0.
fn tag_table(files: &[&RankTrace], n: u32) -> Vec<TagRow> {
    if !files.iter().any(|f| f.ops.iter().any(|o| o.user_tag != 0)) {
        return Vec::new();
    }
    let mut acc: BTreeMap<u64, (Histogram<u64>, u64, u64)> = BTreeMap::new();
    for f in files {
        for op in &f.ops {
            let shape = Shape::of(&op.func.as_str());
            let ts = type_size(&op.datatype.as_str()).unwrap_or(0);
            let a = acc
                .entry(op.user_tag)
                .or_insert_with(|| (histogram(), 0, 0));
            a.0.saturating_record(op.latency_ns());
            a.1 += 1;
            a.2 += shape.bytes(op.count, ts, n);
        }
    }
    acc.into_iter()
        .map(|(tag, (h, ops, bytes))| TagRow {
            tag,
            ops,
            bytes,
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        })
        .collect()
}

fn phase_table(files: &[&RankTrace]) -> Vec<PhaseRow> {
    (0..PHASES)
        .filter_map(|p| {
            let mut all = crate::load::PhaseTimes::default();
            for f in files {
                all.merge(&f.phases[p]);
            }
            let count = all.hist.len();
            (count > 0).then(|| PhaseRow {
                phase: evring_shim::model::phase_name(p as u8).into_owned(),
                count,
                mean_ns: all.sum_ns / count,
                p50_ns: all.hist.value_at_quantile(0.5),
                p99_ns: all.hist.value_at_quantile(0.99),
                max_ns: all.hist.max(),
            })
        })
        .collect()
}

fn rank_row(f: &RankTrace) -> RankRow {
    let drops = f.footer.as_ref().map(|_| {
        [
            "drop_slab_full",
            "drop_unknown_type",
            "drop_null_context",
            "drop_after_finalize",
            "drop_null_descr",
            "drop_ring_full",
            "records_unwritten",
        ]
        .iter()
        .filter_map(|k| f.footer_u64(k))
        .sum()
    });
    let end = f.footer.as_ref().and_then(|fs| {
        fs.iter()
            .find(|(k, _)| k == "end")
            .and_then(|(_, v)| match v {
                evring_perfetto::trace::Value::Str(s) => Some(s.clone()),
                _ => None,
            })
    });
    RankRow {
        rank: f.rank,
        host: f.host.clone(),
        pid: f.pid,
        file: f.path.display().to_string(),
        parts: f.parts,
        format: f.format,
        ops: f.ops.len() as u64,
        footer: f.footer.is_some(),
        complete: f.footer_bool("complete"),
        end,
        drops,
        live: f.footer_u64("live"),
        cut: f.cut,
    }
}

/// An arrival: (rank, time on the common clock, func).
type Arrival = (i32, i128, Str16);

fn stragglers(files: &[&RankTrace], clock: Clock, top: usize) -> Stragglers {
    // NCCL numbers collectives per function (`comm->seqNumber[func]`), so a
    // collective is (func, seq).
    let mut by_seq: HashMap<(u64, Str16), Vec<Arrival>> = HashMap::new();
    let mut present = std::collections::BTreeSet::new();
    for f in files {
        let offset = match clock {
            Clock::Monotonic => 0,
            Clock::WallClock => f.open.realtime_ns as i128 - f.open.monotonic_ns as i128,
        };
        for op in f.ops.iter().filter(|o| o.kind == OpKind::Coll) {
            present.insert(op.rank);
            by_seq.entry((op.seq, op.func)).or_default().push((
                op.rank,
                op.start_ns as i128 + offset,
                op.func,
            ));
        }
    }
    let mut s = Stragglers::default();
    if present.len() < 2 {
        // One rank's collectives: nothing to match them with.
        return s;
    }
    struct Per {
        last: u64,
        wait: u128,
        late_sum: u128,
        late_max: u64,
        worst: (u64, String),
    }
    let mut per: BTreeMap<i32, Per> = BTreeMap::new();
    let mut by_seq: Vec<((u64, Str16), Vec<Arrival>)> = by_seq.into_iter().collect();
    by_seq.sort_unstable_by_key(|(key, _)| *key);
    for ((seq, _), mut arr) in by_seq {
        arr.sort_by_key(|a| (a.0, a.1));
        arr.dedup_by_key(|a| a.0); // one arrival per rank (its first record)
        if arr.len() < 2 || arr.len() < present.len() {
            s.partial += 1;
            continue;
        }
        s.matched += 1;
        arr.sort_by_key(|a| a.1);
        let (rank, at, func) = arr[arr.len() - 1];
        let late = (at - arr[arr.len() - 2].1) as u64;
        let wait: u128 = arr.iter().map(|a| (at - a.1) as u128).sum();
        s.wait_ns += wait;
        if late == 0 {
            // Two ranks arrived last together: nobody held the others up alone.
            s.tied += 1;
            continue;
        }
        let p = per.entry(rank).or_insert(Per {
            last: 0,
            wait: 0,
            late_sum: 0,
            late_max: 0,
            worst: (0, String::new()),
        });
        p.last += 1;
        p.wait += wait;
        p.late_sum += late as u128;
        if late > p.late_max {
            p.late_max = late;
            p.worst = (seq, func.as_str().into_owned());
        }
    }
    let host_of = |r: i32| {
        files
            .iter()
            .find(|f| f.rank == r)
            .map(|f| f.host.clone())
            .unwrap_or_default()
    };
    let mut offenders: Vec<Offender> = per
        .into_iter()
        .map(|(rank, p)| Offender {
            rank,
            host: host_of(rank),
            last: p.last,
            wait_ns: p.wait,
            share: if s.wait_ns == 0 {
                0.0
            } else {
                p.wait as f64 / s.wait_ns as f64
            },
            mean_late_ns: (p.late_sum / p.last.max(1) as u128) as u64,
            max_late_ns: p.late_max,
            worst_seq: p.worst.0,
            worst_func: p.worst.1,
        })
        .collect();
    offenders.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.rank.cmp(&b.rank)));
    offenders.truncate(top);
    s.offenders = offenders;
    s
}
