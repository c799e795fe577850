//! Each run of the CLI in a child process of its own, as a plugin lives in a training
//! process of its own:
//!
//! * the plugin's settings are the child's **process-wide** environment from its first
//!   instruction (`NCCL_PROFILE_DUMP_FILE`, `NCCL_PROFILE_EVENT_MASK`, `EVRING_*`), as
//!   under NCCL, so a plugin may read them whenever it likes (at every `init`, at
//!   `finalize`). Only a second simulated process inside the same child (PXN) gets its
//!   own values around its first `init`;
//! * a plugin that crashes the process is a verdict, `FAIL` with the signal, not the end
//!   of the simulator; the runs before and after it still count;
//! * resident memory belongs to that one run, so it is judged ([`crate::report::Memory`]);
//! * everything the run creates (plugin copies, traces) lives in one directory, which the
//!   parent removes whatever happened to the child (unless `--keep`).
//!
//! The child writes its [`Outcome`] as JSON to `outcome.json` in that directory, or a
//! one-line error to `error.txt` (bad input: exit status 2).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::report::Outcome;
use crate::scenario::{self, finish_dir, trace_dir, Params, Scenario};

/// The hidden subcommand a child runs.
pub const CHILD_COMMAND: &str = "__run";

const OUTCOME_FILE: &str = "outcome.json";
const ERROR_FILE: &str = "error.txt";

/// What one child runs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Job {
    /// A scenario (its in-process variant; no-finalize's exit variant is a child of
    /// its own already, see [`scenario::nofin`]).
    Scenario(String),
    /// One of the recorded NCCL logs compiled into the binary, by stem.
    Recorded(String),
    /// A log file.
    Log(PathBuf),
}

impl Job {
    /// The row name the run will have (used when the child leaves no outcome).
    pub fn name(&self) -> String {
        match self {
            Job::Scenario(s) => s.clone(),
            Job::Recorded(s) => format!("replay {s}"),
            Job::Log(p) => format!("replay {}", stem(p)),
        }
    }

    fn dir_name(&self) -> String {
        match self {
            Job::Scenario(s) => s.clone(),
            Job::Recorded(s) => format!("replay-{s}"),
            Job::Log(p) => format!("replay-{}", stem(p)),
        }
    }

    /// The environment of the child: the settings of its first plugin instance.
    fn env(&self, p: &Params, dir: &Path) -> Result<Vec<(&'static str, String)>, String> {
        Ok(match self {
            Job::Scenario(s) => scenario::settings(scenario_of(s)?, p, dir, 0).env(),
            Job::Recorded(_) | Job::Log(_) => crate::replay::settings(p, dir).env(),
        })
    }

    /// Runs the job in this process with its traces in `dir`.
    fn run_here(&self, p: &Params, dir: &Path) -> Result<Outcome, String> {
        match self {
            Job::Scenario(s) => scenario::run_in(scenario_of(s)?, p, dir, true),
            Job::Recorded(stem) => {
                let text = crate::RECORDED_LOGS
                    .iter()
                    .find(|(s, _)| s == stem)
                    .map(|(_, t)| *t)
                    .ok_or_else(|| format!("no recorded log {stem:?}"))?;
                let calls = crate::fixture::parse_log(text).map_err(|e| format!("{stem}: {e}"))?;
                crate::replay::replay_calls_in(stem, &calls, p, dir)
            }
            Job::Log(path) => {
                let calls = crate::fixture::parse_file(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                crate::replay::replay_calls_in(&stem(path), &calls, p, dir)
            }
        }
    }
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "log".into())
}

fn scenario_of(name: &str) -> Result<Scenario, String> {
    Scenario::parse(name).ok_or_else(|| format!("unknown scenario {name:?}"))
}

/// How a child ended, in words, if not normally: the signal that killed it.
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.signal(), status.code()) {
        (Some(sig), _) => {
            // SAFETY: strsignal returns a pointer to a static or thread-local string
            // (or NULL), which is copied at once.
            let name = unsafe {
                let s = libc::strsignal(sig);
                if s.is_null() {
                    String::new()
                } else {
                    std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned()
                }
            };
            let abbrev = signal_name(sig);
            if name.is_empty() {
                format!("killed by signal {sig} ({abbrev})")
            } else {
                format!("killed by signal {sig} ({abbrev}: {name})")
            }
        }
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "unknown end".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        _ => "signal",
    }
}

/// Runs `job` in a child `exe` (this binary) and returns its verdict. `Err` is bad
/// input (the child's one-line error); a crash or an exit without a verdict is a
/// failed [`Outcome`].
pub fn run(exe: &Path, job: &Job, p: &Params) -> Result<Outcome, String> {
    let dir = trace_dir(p.trace_root.as_deref(), &job.dir_name())?;
    let out = run_in(exe, job, p, &dir);
    finish_dir(out, &dir, p.keep)
}

fn run_in(exe: &Path, job: &Job, p: &Params, dir: &Path) -> Result<Outcome, String> {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut child_params = p.clone();
    child_params.judge_memory = true;
    child_params.process_env = true;
    child_params.trace_root = Some(dir.to_path_buf());
    child_params.keep = true;
    let params = serde_json::to_string(&child_params).map_err(|e| e.to_string())?;
    let job_json = serde_json::to_string(job).map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg(CHILD_COMMAND)
        .arg(&job_json)
        .arg(dir)
        .arg(&params)
        .envs(job.env(p, dir)?)
        // Plugin copies and anything else the child puts in the temp dir stay in the
        // run's directory, which the parent removes.
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        // A plugin printing to stdout must not break the table.
        .stdout(Stdio::from(std::io::stderr()))
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let Some(status) = wait_or_kill(&mut child, p.timeout())
        .map_err(|e| format!("cannot wait for {}: {e}", exe.display()))?
    else {
        return Ok(Outcome::failed(&job.name(), hung(&job.name(), p)));
    };
    if let Ok(msg) = std::fs::read_to_string(dir.join(ERROR_FILE)) {
        return Err(msg.trim().to_string());
    }
    let outcome = std::fs::read_to_string(dir.join(OUTCOME_FILE))
        .ok()
        .and_then(|s| serde_json::from_str::<Outcome>(&s).ok());
    match (outcome, status.success()) {
        (Some(o), true) => Ok(o),
        (Some(mut o), false) => {
            o.problems.push(format!(
                "{}: the run's process ended badly after its verdict: {}",
                o.name,
                describe(status)
            ));
            Ok(o)
        }
        (None, _) => Ok(Outcome::failed(
            &job.name(),
            format!(
                "{}: the run's process ended without a verdict: {}",
                job.name(),
                describe(status)
            ),
        )),
    }
}

/// Waits for `child`; past `timeout` kills it (SIGKILL) and returns `None`.
pub fn wait_or_kill(
    child: &mut Child,
    timeout: Option<Duration>,
) -> std::io::Result<Option<ExitStatus>> {
    let Some(limit) = timeout else {
        return child.wait().map(Some);
    };
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The failure of a run that did not end in time.
pub fn hung(name: &str, p: &Params) -> String {
    format!(
        "{name}: the run's process did not end within {} s (a hung plugin?) and was killed (--timeout)",
        p.timeout_s
    )
}

/// The child's side: run `job` here, leave the outcome (or the error) in `dir`.
pub fn child_main(job: &str, dir: &Path, params: &str) -> std::process::ExitCode {
    let result = (|| {
        let job: Job = serde_json::from_str(job).map_err(|e| format!("bad job: {e}"))?;
        let p: Params =
            serde_json::from_str(params).map_err(|e| format!("bad child parameters: {e}"))?;
        let o = job.run_here(&p, dir)?;
        let json = serde_json::to_string(&o).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(OUTCOME_FILE), json)
            .map_err(|e| format!("cannot write {}: {e}", dir.join(OUTCOME_FILE).display()))
    })();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::fs::write(dir.join(ERROR_FILE), &e);
            std::process::ExitCode::from(2)
        }
    }
}
