//! Process exit without finalize, for real: a child `evring-sim` runs the no-finalize
//! scenario and exits, so the plugin's exit path (ours: an `atexit` handler) is all
//! that writes the traces. The parent then checks what the child left on disk: every
//! file parses, every Coll/P2p the child issued is there, children link to parents,
//! and the footers say `finalized: false` with nothing live and nothing uncounted.

use std::path::Path;
use std::process::Command;

use super::{finish_dir, run_in, trace_dir, Params, Scenario};
use crate::driver::Counts;
use crate::report::{Outcome, ProcOutcome};

/// The hidden subcommand the child runs.
pub const CHILD_COMMAND: &str = "__child-no-finalize";

/// The row of the variant whose child exits.
const NAME: &str = "no-finalize/exit";

/// What the child reports on its last stdout line.
#[derive(serde::Serialize, serde::Deserialize)]
struct ChildReport {
    counts: Counts,
    wall_ns: u64,
    rss_before: u64,
    rss_peak: u64,
    problems: Vec<String>,
    /// The plugin is our shim (exports its counters).
    #[serde(default)]
    ours: bool,
}

/// The child's side: run, report, exit without finalizing anything.
pub fn child_main(p: &Params, dir: &Path) -> ! {
    let code = match run_in(Scenario::NoFinalize, p, dir, false) {
        Ok(o) => {
            let report = ChildReport {
                counts: o.counts(),
                wall_ns: o.wall.as_nanos() as u64,
                rss_before: o.rss_before,
                rss_peak: o.rss_peak,
                problems: o.problems.clone(),
                ours: o.procs.iter().any(|p| p.stats.is_some()),
            };
            match serde_json::to_string(&report) {
                Ok(s) => {
                    println!("{s}");
                    0
                }
                Err(e) => {
                    eprintln!("evring-sim: {e}");
                    2
                }
            }
        }
        Err(e) => {
            eprintln!("evring-sim: {e}");
            2
        }
    };
    // `exit` runs the plugin's exit handlers: that is the point of the child.
    std::process::exit(code)
}

/// The parent's side.
pub fn run_subprocess(exe: &Path, p: &Params) -> Result<Outcome, String> {
    let dir = trace_dir(p.trace_root.as_deref(), "no-finalize-exit")?;
    let out = subprocess_in(exe, p, &dir);
    finish_dir(out, &dir, p.keep)
}

fn subprocess_in(exe: &Path, p: &Params, dir: &Path) -> Result<Outcome, String> {
    let mut child_params = p.clone();
    child_params.progress = false;
    child_params.self_exe = None;
    child_params.process_env = true;
    let json = serde_json::to_string(&child_params).map_err(|e| e.to_string())?;
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    // The child's output goes to files in the run directory, so that waiting for it
    // (with a time limit) cannot block on a full pipe.
    let file = |name: &str| {
        std::fs::File::create(dir.join(name))
            .map_err(|e| format!("cannot create {}: {e}", dir.join(name).display()))
    };
    let mut child = Command::new(exe)
        .arg(CHILD_COMMAND)
        .arg(dir)
        .arg(json)
        // The plugin's settings are the child's process-wide environment, as under
        // NCCL; its plugin copy goes to the run's directory.
        .envs(super::settings(Scenario::NoFinalize, p, dir, 0).env())
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(file("child.stdout")?)
        .stderr(file("child.stderr")?)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let status = crate::isolate::wait_or_kill(&mut child, p.timeout())
        .map_err(|e| format!("cannot wait for {}: {e}", exe.display()))?;
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let Some(status) = status else {
        return Ok(Outcome::failed(NAME, crate::isolate::hung(NAME, p)));
    };
    let stdout = read("child.stdout");
    if !status.success() {
        // A crash of the plugin's process is a verdict, not an error of the simulator.
        let err = read("child.stderr");
        let last = err.lines().last().unwrap_or("").trim();
        return Ok(Outcome::failed(
            NAME,
            format!(
                "{NAME}: the child process ended without a verdict: {}{}",
                crate::isolate::describe(status),
                if last.is_empty() {
                    String::new()
                } else {
                    format!(" ({last})")
                }
            ),
        ));
    }
    let line = stdout.lines().last().unwrap_or("");
    let report: ChildReport = serde_json::from_str(line)
        .map_err(|e| format!("no-finalize child printed no report ({e}): {line:?}"))?;
    let trace = crate::trace::read_dir(&dir.join("proc0"))?;
    let mut outcome = Outcome {
        name: NAME.into(),
        wall: std::time::Duration::from_nanos(report.wall_ns),
        rss_before: report.rss_before,
        rss_peak: report.rss_peak,
        rss_after: report.rss_peak,
        problems: report
            .problems
            .iter()
            .map(|p| format!("child: {p}"))
            .collect(),
        unpaced: p.rate == 0,
        ..Default::default()
    };
    let mut problems = Vec::new();
    for f in &trace.footers {
        if f.finalized {
            problems.push(format!(
                "{}: footer says finalized although the child never finalized",
                f.file.display()
            ));
        }
    }
    let files_with_footer = trace.footers.len();
    // Footers are our format's; another plugin's files are judged like any trace.
    let ours = !p.opaque && files_with_footer > 0;
    if trace.files == 0 && report.ours {
        problems.push("the child left no trace files".to_string());
    }
    if ours && files_with_footer < trace.files {
        problems.push(format!(
            "{} of {} trace files have no footer: the exit handler did not close them",
            trace.files - files_with_footer,
            trace.files
        ));
    }
    // Every footer holds the process-wide counters; the last one written is the latest.
    let last = trace
        .footers
        .iter()
        .max_by_key(|f| (f.get("completed"), f.get("records_written")))
        .cloned();
    let stats = last
        .map(|f| crate::report::stats_from(&|k| f.get(k)))
        .filter(|_| !p.opaque);
    outcome.procs.push(ProcOutcome {
        label: NAME.into(),
        counts: report.counts,
        stats,
        trace,
        // After the exit handler everything must be complete, as after a finalize.
        finalized: true,
        // The child's table is the parent's (same plugin, same `--abi`).
        abi: 0,
    });
    outcome.judge();
    outcome.problems.extend(problems);
    Ok(outcome)
}
