//! The verdict on one run and the table that shows it.
//!
//! For our shim the counters are exact, so the checks are equalities (after the last
//! finalize):
//!
//! * no leak: `live == 0`;
//! * nothing uncounted: the shim saw every start the simulator made
//!   (`start_calls == issued`) and each one either completed or was dropped with a
//!   reason (`start_calls == completed + start drops`);
//! * every issued Coll/P2p that got a handle is in the trace, except for records the
//!   shim counted as lost on the way (ring full, unwritten); those are reported;
//! * every KernelCh/ProxyOp record names a Coll/P2p of its own trace as parent.
//!
//! Any other plugin only reveals what it returns and writes: acceptance (non-NULL
//! handles per start at steady state), and which Coll/P2p reach its trace when the
//! trace is in a format the simulator reads (ours, or NCCL's example plugin's JSON).
//! Without such a trace the run is `unverified`, never `ok`.
//!
//! Every plugin, ours included, is judged on resident memory when the run had its
//! process to itself ([`Memory`]): after a warm-up of a quarter of the starts, RSS may
//! not keep growing with the event count.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use evring_abi::StatsV1;
use serde::{Deserialize, Serialize};

use crate::driver::Counts;
use crate::trace::TraceSummary;

/// One plugin instance after the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProcOutcome {
    pub label: String,
    pub counts: Counts,
    /// Our shim's counters, read after the last finalize (or flush).
    #[serde(with = "stats_serde")]
    pub stats: Option<StatsV1>,
    pub trace: TraceSummary,
    /// Whether every communicator was finalized (false: process-exit scenario).
    pub finalized: bool,
    /// The profiler ABI version the instance was driven at (0: not known here).
    #[serde(default)]
    pub abi: u32,
}

/// Resident memory around the warm-up point of a run that had its process to itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// RSS when a quarter of the target starts had been issued.
    pub rss_warm: u64,
    /// Starts issued at that moment.
    pub starts_warm: u64,
    /// Highest RSS seen after it, up to the end of the run (before finalize).
    pub rss_late: u64,
    /// Starts issued by the end of the run.
    pub starts_end: u64,
}

/// Growth after warm-up below this is never judged (allocator noise, thread stacks,
/// lazily touched fixed buffers).
pub const MEMORY_SLACK: u64 = 32 << 20;
/// Growth after warm-up above this many bytes per start is growth with the event
/// count: a plugin that keeps a bounded amount of state stays far below it (ours:
/// nothing after its first init; NCCL's example: fixed pools).
pub const MEMORY_PER_START: u64 = 256;

impl Memory {
    pub fn growth(&self) -> u64 {
        self.rss_late.saturating_sub(self.rss_warm)
    }

    pub fn starts(&self) -> u64 {
        self.starts_end.saturating_sub(self.starts_warm)
    }

    /// The failure, if RSS grew with the event count after warm-up.
    pub fn problem(&self) -> Option<String> {
        let (g, n) = (self.growth(), self.starts());
        (g > MEMORY_SLACK && g > MEMORY_PER_START.saturating_mul(n)).then(|| {
            format!(
                "memory: RSS grew {:.1} MiB over the {n} starts after warm-up ({} B per start; bounded state stays under {MEMORY_PER_START} B)",
                g as f64 / (1 << 20) as f64,
                g / n.max(1)
            )
        })
    }
}

/// The result column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every check ran and passed.
    Ok,
    /// Nothing failed, but something the verdict needs could not be checked.
    Unverified,
    Fail,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Unverified => "unverified",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One scenario or replay.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    pub name: String,
    pub procs: Vec<ProcOutcome>,
    /// From the first `init` to the last `finalize`.
    pub wall: Duration,
    pub rss_before: u64,
    pub rss_peak: u64,
    pub rss_after: u64,
    /// Most events live at once in our shim (sampled every 50 ms).
    pub live_peak: u64,
    /// RSS after warm-up, when the run had its process to itself.
    pub memory: Option<Memory>,
    /// Failures: leaks, uncounted losses, broken links, crashes.
    pub problems: Vec<String>,
    /// What could not be checked (e.g. a trace in an unknown format).
    pub unverified: Vec<String>,
    /// Things worth knowing that are not failures (counted drops, late children…).
    pub notes: Vec<String>,
    /// Where the traces are, if kept.
    pub trace_dir: Option<PathBuf>,
    /// The run was unpaced stress (`--rate 0`): records lost to a full ring are
    /// expected there (counted, noted); in a paced run they fail it.
    #[serde(default)]
    pub unpaced: bool,
}

impl Outcome {
    /// An outcome with nothing but a failure (e.g. the run's process crashed).
    pub fn failed(name: &str, problem: String) -> Outcome {
        Outcome {
            name: name.to_string(),
            problems: vec![problem],
            ..Default::default()
        }
    }

    pub fn verdict(&self) -> Verdict {
        if !self.problems.is_empty() {
            Verdict::Fail
        } else if !self.unverified.is_empty() {
            Verdict::Unverified
        } else {
            Verdict::Ok
        }
    }

    /// Every check ran and passed.
    pub fn ok(&self) -> bool {
        self.verdict() == Verdict::Ok
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for p in &self.procs {
            c.merge(&p.counts);
        }
        c
    }

    pub fn trace(&self) -> TraceSummary {
        let mut t = TraceSummary::default();
        for p in &self.procs {
            t.merge(p.trace.clone());
        }
        t
    }

    /// One of our shim's counters summed over the instances (None for other plugins).
    pub fn stat(&self, f: impl Fn(&StatsV1) -> u64) -> Option<u64> {
        self.procs.iter().map(|p| p.stats.as_ref().map(&f)).sum()
    }

    pub fn calls_per_sec(&self) -> f64 {
        self.counts().calls() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    pub fn rss_growth(&self) -> i64 {
        self.rss_peak.max(self.rss_after) as i64 - self.rss_before as i64
    }

    /// [`rss_growth`](Self::rss_growth) per plugin instance of the run.
    pub fn rss_growth_per_instance(&self) -> i64 {
        self.rss_growth() / self.procs.len().max(1) as i64
    }

    /// Fails the run if our shim, at its default sizes, grew the process by more
    /// than [`INSTANCE_BUDGET`] per instance (issue 13: always-on means small).
    pub fn judge_budget(&mut self) {
        let ours = !self.procs.is_empty() && self.procs.iter().all(|p| p.stats.is_some());
        let per = self.rss_growth_per_instance();
        if ours && per > INSTANCE_BUDGET as i64 {
            self.problems.push(format!(
                "{}: RSS grew by {} MiB per plugin instance at the shim's default sizes; the budget is {} MiB",
                self.name,
                per >> 20,
                INSTANCE_BUDGET >> 20
            ));
        }
    }

    /// Fills `problems`, `unverified` and `notes` from the counts, counters, traces
    /// and memory.
    pub fn judge(&mut self) {
        let mut j = Judgement::default();
        for p in &self.procs {
            judge_proc(p, self.unpaced, &mut j);
        }
        if let Some(m) = self.memory.and_then(|m| m.problem()) {
            j.problems.push(format!("{}: {m}", self.name));
        }
        self.problems.extend(j.problems);
        self.unverified.extend(j.unverified);
        self.notes.extend(j.notes);
    }
}

/// What judging found, by kind.
#[derive(Default)]
struct Judgement {
    problems: Vec<String>,
    unverified: Vec<String>,
    notes: Vec<String>,
}

/// Start drops by reason, from our counters.
pub fn start_drops(s: &StatsV1) -> Vec<(&'static str, u64)> {
    vec![
        ("slab_full", s.drop_slab_full),
        ("unknown_type", s.drop_unknown_type),
        ("null_context", s.drop_null_context),
        ("after_finalize", s.drop_after_finalize),
        ("null_descr", s.drop_null_descr),
        ("masked", s.masked_starts),
    ]
}

fn judge_proc(p: &ProcOutcome, unpaced: bool, j: &mut Judgement) {
    let l = &p.label;
    let c = &p.counts;
    let t = &p.trace;
    let Some(s) = p.stats else {
        judge_foreign(p, j);
        return;
    };
    let (problems, notes) = (&mut j.problems, &mut j.notes);
    let drops: u64 = start_drops(&s).iter().map(|(_, v)| v).sum();
    if s.start_calls != c.total_starts() {
        problems.push(format!(
            "{l}: uncounted: the simulator issued {} starts but the plugin counted {}",
            c.total_starts(),
            s.start_calls
        ));
    }
    if p.finalized {
        if s.live != 0 {
            problems.push(format!(
                "{l}: leak: {} events live after the last finalize",
                s.live
            ));
        }
        if s.start_calls != s.completed + drops {
            problems.push(format!(
                "{l}: uncounted loss: {} starts != {} completed + {} dropped",
                s.start_calls, s.completed, drops
            ));
        }
    } else {
        if s.live != c.left_open {
            problems.push(format!(
                "{l}: {} events live without finalize, but the simulator left {} open",
                s.live, c.left_open
            ));
        }
        if s.start_calls != s.completed + s.live + drops {
            problems.push(format!(
                "{l}: uncounted loss: {} starts != {} completed + {} live + {} dropped",
                s.start_calls, s.completed, s.live, drops
            ));
        }
    }
    if s.panics != 0 {
        problems.push(format!("{l}: {} panics caught inside the plugin", s.panics));
    }
    let issued = c.coll_p2p_accepted();
    let seen = t.coll_p2p();
    let lost = s.drop_ring_full + s.records_unwritten;
    if seen > issued {
        problems.push(format!(
            "{l}: {seen} Coll/P2p records in the trace but only {issued} accepted"
        ));
    } else if issued - seen > lost {
        problems.push(format!(
            "{l}: {} of {issued} Coll/P2p missing from the trace, only {lost} records counted lost",
            issued - seen
        ));
    } else if issued > seen && unpaced && s.records_unwritten == 0 {
        // Unpaced stress outruns one writer thread by design: counted, expected.
        notes.push(format!(
            "{l}: {} of {issued} Coll/P2p missing from the trace, all among the {} records lost to a full ring (counted; expected in unpaced stress, --rate 0)",
            issued - seen,
            s.drop_ring_full
        ));
    } else if issued > seen {
        // Counted, but the trace still lacks them: the run cannot be called clean.
        problems.push(format!(
            "{l}: {} of {issued} Coll/P2p missing from the trace (counted: {} records lost to a full ring, {} unwritten; a larger --ring keeps them)",
            issued - seen,
            s.drop_ring_full,
            s.records_unwritten
        ));
    }
    if c.coll_p2p() > issued {
        notes.push(format!(
            "{l}: {} Coll/P2p starts refused (counted)",
            c.coll_p2p() - issued
        ));
    }
    if t.link_errors > 0 && lost > 0 {
        // A parent record may be among the counted losses: not checkable, but shown.
        notes.push(format!(
            "{l}: {} of {} KernelCh/ProxyOp records name a parent missing from the trace; {lost} records were lost (counted), which may include those parents",
            t.link_errors, t.linked
        ));
    } else if t.link_errors > 0 {
        problems.push(format!(
            "{l}: {} of {} KernelCh/ProxyOp records not linked to a Coll/P2p of their trace, e.g. {}",
            t.link_errors,
            t.linked,
            t.link_examples.first().map(String::as_str).unwrap_or("?")
        ));
    }
    if t.duplicate_ids > 0 {
        problems.push(format!(
            "{l}: {} Coll/P2p IDs appear twice in one trace",
            t.duplicate_ids
        ));
    }
    if t.orphans > 0 && drops == 0 && lost == 0 {
        problems.push(format!(
            "{l}: {} KernelCh/ProxyOp records without a parent",
            t.orphans
        ));
    }
    if t.bad_lines > 0 && p.finalized {
        problems.push(format!("{l}: {} unreadable trace lines", t.bad_lines));
    }
    if p.finalized && t.unterminated > 0 {
        problems.push(format!(
            "{l}: {} trace files not closed after finalize",
            t.unterminated
        ));
    }
    for (why, n) in start_drops(&s) {
        if n > 0 {
            notes.push(format!("{l}: {n} starts dropped ({why})"));
        }
    }
    if s.drop_ring_full > 0 && unpaced {
        notes.push(format!(
            "{l}: {} records lost to a full ring (counted; expected in unpaced stress, --rate 0: the simulator issues events faster than one writer thread formats them)",
            s.drop_ring_full
        ));
    } else if s.drop_ring_full > 0 {
        problems.push(format!(
            "{l}: {} records lost to a full ring at a paced rate (counted): the writer did not keep up",
            s.drop_ring_full
        ));
    }
}

fn judge_foreign(p: &ProcOutcome, j: &mut Judgement) {
    let l = &p.label;
    let c = &p.counts;
    let t = &p.trace;
    let acc = acceptance(c);
    if acc < 1.0 {
        j.problems.push(format!(
            "{l}: the plugin returned NULL for {:.2}% of starts at steady state (lost, uncounted as far as we can see)",
            100.0 * (1.0 - acc)
        ));
    }
    let issued = c.coll_p2p();
    let seen = t.coll_p2p();
    if t.files == 0 {
        j.unverified.push(format!(
            "{l}: no trace file found (looked for *.json under NCCL_PROFILE_DUMP_FILE's directory): completeness not checked"
        ));
    } else if t.unknown_files > 0 {
        j.unverified.push(format!(
            "{l}: {} of {} trace files in a format the simulator does not read (it reads ours and NCCL's example plugin's): completeness not checked",
            t.unknown_files, t.files
        ));
    } else if t.known_files == 0 {
        j.unverified.push(format!(
            "{l}: its {} trace files hold no event in a format the simulator reads: completeness not checked",
            t.files
        ));
    } else if seen < issued {
        j.problems.push(format!(
            "{l}: only {seen} of {issued} issued Coll/P2p ({:.2}%) are in its trace",
            100.0 * seen as f64 / issued.max(1) as f64
        ));
    } else if seen > issued {
        j.problems.push(format!(
            "{l}: {seen} Coll/P2p in its trace but only {issued} were issued"
        ));
    }
    if p.finalized && t.unterminated > 0 {
        j.problems.push(format!(
            "{l}: {} trace files not closed after finalize",
            t.unterminated
        ));
    }
}

/// Fraction of starts given a handle once the run reached half its target.
pub fn acceptance(c: &Counts) -> f64 {
    if c.steady_starts == 0 {
        if c.total_starts() == 0 {
            return 1.0;
        }
        return c.total_accepted() as f64 / c.total_starts() as f64;
    }
    c.steady_accepted as f64 / c.steady_starts as f64
}

/// Resident memory one instance of our shim may add at its default sizes.
pub const INSTANCE_BUDGET: u64 = 64 << 20;

fn mib(b: i64) -> String {
    format!("{:+.1}", b as f64 / (1 << 20) as f64)
}

fn rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else {
        format!("{:.0}k", r / 1e3)
    }
}

/// The table's columns.
pub const HEADER: [&str; 10] = [
    "scenario",
    "calls/s",
    "issued",
    "recorded",
    "dropped",
    "late",
    "live",
    "MiB/inst",
    "Coll/P2p in trace",
    "result",
];

/// Column widths of the streamed table: wide enough for the usual rows, so that rows
/// printed as runs finish line up without knowing the later ones.
pub const STREAM_WIDTHS: [usize; 10] = [17, 7, 8, 8, 19, 7, 4, 8, 17, 10];

/// One table line: left-aligned name, dropped and result, the rest right-aligned.
pub fn line(cells: &[String], widths: &[usize]) -> String {
    let mut s = String::new();
    for (i, c) in cells.iter().enumerate() {
        let w = widths.get(i).copied().unwrap_or(0);
        if i == 0 || i == cells.len() - 1 || i == 4 {
            let _ = write!(s, "{c:<w$}  ");
        } else {
            let _ = write!(s, "{c:>w$}  ");
        }
    }
    s.trim_end().to_string()
}

/// The table, one row per outcome, columns as wide as their widest cell.
pub fn table(outcomes: &[Outcome]) -> String {
    let rows: Vec<Vec<String>> = outcomes.iter().map(row).collect();
    let mut w: Vec<usize> = HEADER.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, cell) in r.iter().enumerate() {
            w[i] = w[i].max(cell.len());
        }
    }
    let mut out = line(&HEADER.map(String::from), &w) + "\n";
    for r in rows {
        out.push_str(&line(&r, &w));
        out.push('\n');
    }
    out
}

/// The cells of one outcome's row.
pub fn row(o: &Outcome) -> Vec<String> {
    if o.procs.is_empty() {
        // No measurement at all (e.g. the run's process crashed).
        let mut cells = vec!["-".to_string(); HEADER.len()];
        cells[0] = o.name.clone();
        cells[HEADER.len() - 1] = o.verdict().as_str().to_string();
        return cells;
    }
    let c = o.counts();
    let t = o.trace();
    let (recorded, dropped, late, live) = match o.stat(|s| s.completed) {
        Some(completed) => {
            let reasons = [
                "slab_full",
                "unknown_type",
                "null_context",
                "after_finalize",
                "null_descr",
                "masked",
                "ring",
            ];
            let d: Vec<String> = reasons
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let n = o
                        .stat(|s| {
                            start_drops(s)
                                .into_iter()
                                .chain([("ring", s.drop_ring_full)])
                                .nth(i)
                                .map_or(0, |x| x.1)
                        })
                        .unwrap_or(0);
                    (k, n)
                })
                .filter(|(_, n)| *n > 0)
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            (
                completed.to_string(),
                if d.is_empty() {
                    "0".into()
                } else {
                    d.join(" ")
                },
                o.stat(|s| s.late_children).unwrap_or(0).to_string(),
                o.stat(|s| s.live).unwrap_or(0).to_string(),
            )
        }
        None => (
            format!("{:.2}% acc", 100.0 * acceptance(&c)),
            "?".into(),
            "?".into(),
            "?".into(),
        ),
    };
    vec![
        o.name.clone(),
        rate(o.calls_per_sec()),
        c.total_starts().to_string(),
        recorded,
        dropped,
        late,
        live,
        mib(o.rss_growth_per_instance()),
        format!("{}/{}", t.coll_p2p(), c.coll_p2p()),
        o.verdict().as_str().to_string(),
    ]
}

/// Our shim's counters as a map of named fields, so that an outcome can cross a
/// process boundary as JSON.
mod stats_serde {
    use std::collections::BTreeMap;

    use evring_abi::StatsV1;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(s: &Option<StatsV1>, ser: S) -> Result<S::Ok, S::Error> {
        s.map(|s| {
            s.fields()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect::<BTreeMap<String, u64>>()
        })
        .serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Option<StatsV1>, D::Error> {
        let m = Option::<BTreeMap<String, u64>>::deserialize(de)?;
        Ok(m.map(|m| super::stats_from(&|k| m.get(k).copied().unwrap_or(0))))
    }
}

macro_rules! stats_from_fields {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Our shim's counters rebuilt from named values (a footer, or JSON); missing
        /// names read as 0.
        pub fn stats_from(get: &dyn Fn(&str) -> u64) -> StatsV1 {
            StatsV1 {
                version: 1,
                size: std::mem::size_of::<StatsV1>() as u32,
                live: get("live"),
                started: get("started"),
                completed: get("completed"),
                $($name: get(stringify!($name)),)*
            }
        }
    };
}

evring_abi::with_stats_v1_counters!(stats_from_fields);

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(start_calls: u64, completed: u64, live: u64) -> StatsV1 {
        StatsV1 {
            start_calls,
            started: start_calls,
            completed,
            live,
            ..Default::default()
        }
    }

    fn proc(stats: StatsV1, starts: u64, coll: u64, trace_coll: u64) -> ProcOutcome {
        let mut counts = Counts::default();
        counts.starts[0] = starts - coll;
        counts.starts[1] = coll;
        counts.accepted[1] = coll;
        let mut trace = TraceSummary::default();
        trace.by_cat.insert("Coll".into(), trace_coll);
        ProcOutcome {
            label: "p".into(),
            counts,
            stats: Some(stats),
            trace,
            finalized: true,
            abi: 6,
        }
    }

    fn judged(p: ProcOutcome) -> Outcome {
        let mut o = Outcome {
            name: "t".into(),
            procs: vec![p],
            ..Default::default()
        };
        o.judge();
        o
    }

    #[test]
    fn clean_run_passes() {
        let o = judged(proc(ours(10, 10, 0), 10, 3, 3));
        assert!(o.ok(), "{:?}", o.problems);
        assert!(table(&[o]).contains(" ok"));
    }

    #[test]
    fn leak_and_losses_fail() {
        let o = judged(proc(ours(10, 9, 1), 10, 3, 3));
        assert!(
            o.problems.iter().any(|p| p.contains("leak")),
            "{:?}",
            o.problems
        );
        assert!(o.problems.iter().any(|p| p.contains("uncounted loss")));
        let o = judged(proc(ours(10, 10, 0), 10, 3, 2));
        assert!(o
            .problems
            .iter()
            .any(|p| p.contains("missing from the trace")));
        // Counted losses still leave the trace short: a failure, with the cause.
        let mut s = ours(10, 10, 0);
        s.drop_ring_full = 1;
        let o = judged(proc(s, 10, 3, 2));
        assert!(
            o.problems
                .iter()
                .any(|p| p.contains("1 of 3 Coll/P2p missing") && p.contains("full ring")),
            "{:?}",
            o.problems
        );
        let o = judged(proc(ours(9, 9, 0), 10, 3, 3));
        assert!(o.problems.iter().any(|p| p.contains("issued 10 starts")));
    }

    #[test]
    fn ring_drops_fail_a_paced_run_and_are_noted_in_unpaced_stress() {
        let mut s = ours(10, 10, 0);
        s.drop_ring_full = 4;
        // Paced (the default): counted, but the writer fell behind NCCL-like rates.
        let o = judged(proc(s, 10, 3, 3));
        assert!(
            o.problems
                .iter()
                .any(|p| p.contains("4 records lost to a full ring at a paced rate")),
            "{:?}",
            o.problems
        );
        // Unpaced (--rate 0): expected, counted, said so; the run passes.
        let mut o = Outcome {
            name: "t".into(),
            procs: vec![proc(s, 10, 3, 1)],
            unpaced: true,
            ..Default::default()
        };
        o.judge();
        assert!(o.ok(), "{:?}", o.problems);
        assert!(
            o.notes.iter().any(|n| n.contains("unpaced stress")),
            "{:?}",
            o.notes
        );
        assert!(o
            .notes
            .iter()
            .any(|n| n.contains("2 of 3 Coll/P2p missing")));
        // Losses beyond what was counted still fail, paced or not.
        let mut o = Outcome {
            name: "t".into(),
            procs: vec![proc(ours(10, 10, 0), 10, 3, 1)],
            unpaced: true,
            ..Default::default()
        };
        o.judge();
        assert!(!o.ok());
    }

    fn foreign(starts: u64, coll: u64, trace: TraceSummary) -> Outcome {
        let mut p = proc(ours(0, 0, 0), starts, coll, 0);
        p.stats = None;
        p.counts.accepted[0] = starts - coll;
        p.trace = trace;
        judged(p)
    }

    #[test]
    fn other_plugins_without_a_readable_trace_are_unverified() {
        let o = foreign(10, 3, TraceSummary::default());
        assert_eq!(o.verdict(), Verdict::Unverified, "{:?}", o.problems);
        assert!(table(&[o]).contains("unverified"));
        let unknown = TraceSummary {
            files: 1,
            unknown_files: 1,
            ..Default::default()
        };
        assert_eq!(foreign(10, 3, unknown).verdict(), Verdict::Unverified);
        let mut short = TraceSummary {
            files: 2,
            known_files: 1,
            ..Default::default()
        };
        short.by_cat.insert("COLL".into(), 2);
        assert_eq!(foreign(10, 3, short.clone()).verdict(), Verdict::Fail);
        short.by_cat.insert("COLL".into(), 3);
        assert_eq!(foreign(10, 3, short).verdict(), Verdict::Ok);
    }

    #[test]
    fn memory_growing_with_events_fails() {
        let m = |late: u64, starts: u64| Memory {
            rss_warm: 100 << 20,
            starts_warm: 1000,
            rss_late: (100 << 20) + late,
            starts_end: 1000 + starts,
        };
        // 4 KiB per start: growth with the event count.
        assert!(m(4096 * 100_000, 100_000).problem().is_some());
        // Bounded: a fixed buffer touched after warm-up, or small growth per start.
        assert!(m(20 << 20, 100_000).problem().is_none());
        assert!(m(100 * 1_000_000, 1_000_000).problem().is_none());
        let mut o = judged(proc(ours(10, 10, 0), 10, 3, 3));
        o.memory = Some(m(4096 * 100_000, 100_000));
        o.judge();
        assert_eq!(o.verdict(), Verdict::Fail);
    }

    #[test]
    fn outcome_crosses_a_process_boundary_as_json() {
        let mut o = judged(proc(ours(10, 9, 1), 10, 3, 3));
        o.procs[0].stats.as_mut().unwrap().late_children = 7;
        o.memory = Some(Memory::default());
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        let fields = |x: &Outcome| x.procs[0].stats.map(|s| s.fields());
        assert_eq!(fields(&back), fields(&o));
        assert_eq!(back.problems, o.problems);
        assert_eq!(back.memory, o.memory);
        assert_eq!(table(&[back]), table(&[o]));
    }

    #[test]
    fn stats_sum_field_by_field() {
        let mut o = Outcome::default();
        o.procs.push(proc(ours(10, 10, 0), 10, 3, 3));
        o.procs.push(proc(ours(5, 4, 1), 5, 1, 1));
        assert_eq!(o.stat(|s| s.start_calls), Some(15));
        assert_eq!(o.stat(|s| s.live), Some(1));
        o.procs[1].stats = None;
        assert_eq!(o.stat(|s| s.start_calls), None);
    }
}
