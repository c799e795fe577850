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
//! handles per start at steady state), resident memory, and which Coll/P2p reach its
//! Chrome trace, if it writes one.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use evring_abi::StatsV1;

use crate::driver::Counts;
use crate::trace::TraceSummary;

/// One plugin instance after the run.
#[derive(Clone, Debug, Default)]
pub struct ProcOutcome {
    pub label: String,
    pub counts: Counts,
    /// Our shim's counters, read after the last finalize (or flush).
    pub stats: Option<StatsV1>,
    pub trace: TraceSummary,
    /// Whether every communicator was finalized (false: process-exit scenario).
    pub finalized: bool,
}

/// One scenario or replay.
#[derive(Clone, Debug, Default)]
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
    /// Failures: leaks, uncounted losses, broken links.
    pub problems: Vec<String>,
    /// Things worth knowing that are not failures (counted drops, late children…).
    pub notes: Vec<String>,
    /// Where the traces are, if kept.
    pub trace_dir: Option<PathBuf>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
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

    /// Fills `problems` and `notes` from the counts, counters and traces.
    pub fn judge(&mut self) {
        let mut problems = Vec::new();
        let mut notes = Vec::new();
        for p in &self.procs {
            judge_proc(p, &mut problems, &mut notes);
        }
        self.problems.extend(problems);
        self.notes.extend(notes);
    }
}

/// Start drops by reason, from our counters.
pub fn start_drops(s: &StatsV1) -> Vec<(&'static str, u64)> {
    vec![
        ("slab_full", s.drop_slab_full),
        ("unknown_type", s.drop_unknown_type),
        ("null_context", s.drop_null_context),
        ("after_finalize", s.drop_after_finalize),
        ("null_descr", s.drop_null_descr),
    ]
}

fn judge_proc(p: &ProcOutcome, problems: &mut Vec<String>, notes: &mut Vec<String>) {
    let l = &p.label;
    let c = &p.counts;
    let t = &p.trace;
    let Some(s) = p.stats else {
        judge_foreign(p, problems, notes);
        return;
    };
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
    } else if issued > seen {
        notes.push(format!(
            "{l}: {} Coll/P2p not in the trace, counted ({} ring full, {} unwritten)",
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
    if s.drop_ring_full > 0 {
        notes.push(format!(
            "{l}: {} records lost to a full ring (counted)",
            s.drop_ring_full
        ));
    }
}

fn judge_foreign(p: &ProcOutcome, problems: &mut Vec<String>, notes: &mut Vec<String>) {
    let l = &p.label;
    let c = &p.counts;
    let acc = acceptance(c);
    if acc < 1.0 {
        problems.push(format!(
            "{l}: the plugin returned NULL for {:.2}% of starts at steady state (lost, uncounted as far as we can see)",
            100.0 * (1.0 - acc)
        ));
    }
    let issued = c.coll_p2p();
    let seen = p.trace.coll_p2p();
    if p.trace.files > 0 && seen < issued {
        problems.push(format!(
            "{l}: only {seen} of {issued} issued Coll/P2p ({:.2}%) are in its trace",
            100.0 * seen as f64 / issued.max(1) as f64
        ));
    } else if p.trace.files == 0 {
        notes.push(format!(
            "{l}: no Chrome trace found; completeness not measured"
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

/// The final table, one row per outcome.
pub fn table(outcomes: &[Outcome]) -> String {
    let header = [
        "scenario",
        "calls/s",
        "issued",
        "recorded",
        "dropped",
        "late",
        "live",
        "RSS MiB",
        "Coll/P2p in trace",
        "result",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for o in outcomes {
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
        rows.push(vec![
            o.name.clone(),
            rate(o.calls_per_sec()),
            c.total_starts().to_string(),
            recorded,
            dropped,
            late,
            live,
            mib(o.rss_growth()),
            format!("{}/{}", t.coll_p2p(), c.coll_p2p()),
            if o.ok() { "ok".into() } else { "FAIL".into() },
        ]);
    }
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, cell) in r.iter().enumerate() {
            w[i] = w[i].max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 0 || i == cells.len() - 1 || i == 4 {
                let _ = write!(s, "{:<width$}  ", c, width = w[i]);
            } else {
                let _ = write!(s, "{:>width$}  ", c, width = w[i]);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(header.iter().map(|s| s.to_string()).collect(), &mut out);
    for r in rows {
        line(r, &mut out);
    }
    out
}

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
        let mut s = ours(10, 10, 0);
        s.drop_ring_full = 1;
        let o = judged(proc(s, 10, 3, 2));
        assert!(o.ok(), "{:?}", o.problems);
        assert!(o.notes.iter().any(|n| n.contains("ring")));
        let o = judged(proc(ours(9, 9, 0), 10, 3, 3));
        assert!(o.problems.iter().any(|p| p.contains("issued 10 starts")));
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
