//! `evring-sim`: runs NCCL's profiler call sequences through a plugin and reports what
//! it lost or leaked. Each run goes to a child process of its own
//! ([`evring_sim::isolate`]); its table row is printed as soon as it ends.
//!
//! Exit status: 0 every run `ok`, 1 a run failed (leak, loss, memory growth, crash),
//! 2 bad input (the one-line message says which), 3 nothing failed but some run could
//! not be checked (`unverified`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use evring_sim::isolate::{self, Job};
use evring_sim::report::{self, Outcome, Verdict};
use evring_sim::scenario::lane::Mode;
use evring_sim::scenario::nccl::Transport;
use evring_sim::scenario::{nofin, Params, Scenario};

#[derive(Parser)]
#[command(
    name = "evring-sim",
    version,
    about = "Replays NCCL profiler call sequences through a profiler plugin and proves it leaks and loses nothing"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every scenario, then the four recorded NCCL logs, against our shim (found next to
    /// this executable unless --plugin is given)
    All {
        #[command(flatten)]
        opts: Opts,
        /// Skip the recorded logs
        #[arg(long)]
        no_fixtures: bool,
    },
    /// One scenario (see `list`)
    Run {
        scenario: String,
        #[command(flatten)]
        opts: Opts,
    },
    /// Replay recorded call logs (format: tests/fixtures/nccl-2.28.9/README.md)
    Replay {
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        #[command(flatten)]
        opts: Opts,
    },
    /// The scenarios and what they exercise
    List,
    /// The child process of the no-finalize scenario (internal)
    #[command(name = "__child-no-finalize", hide = true)]
    Child { dir: PathBuf, params: String },
    /// The child process of one run (internal)
    #[command(name = "__run", hide = true)]
    RunChild {
        job: String,
        dir: PathBuf,
        params: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Threads {
    /// NCCL's threads: user, proxy, CUDA callback, async group, socket helpers
    Real,
    /// Everything on one thread (measures the plugin alone)
    Single,
}

#[derive(Args)]
struct Opts {
    /// Profiler plugin library (default: our shim, next to this executable)
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Use this ncclProfiler_vN table (1 to 7) instead of the newest exported
    /// (NCCL probes v7, v6, ... v1)
    #[arg(long, value_name = "N")]
    abi: Option<u32>,
    /// startEvent calls per scenario
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    events: u64,
    /// startEvent calls per second per simulated process (default: 2x the busiest
    /// 10 ms of a real NCCL process, docs/sim.md "Pace"); 0: unpaced stress, where
    /// records lost to a full ring are expected (counted and noted, not a failure)
    #[arg(long, default_value_t = evring_sim::DEFAULT_RATE, value_name = "PER_SEC")]
    rate: u64,
    #[arg(long, value_enum, default_value = "real")]
    threads: Threads,
    /// Ranks (communicators) per simulated process
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    ranks: u32,
    /// Channels per collective/p2p (NCCL has at most 64)
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=64))]
    channels: u8,
    /// Network steps per proxy op
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Collectives per group
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    ops_per_group: u32,
    /// Activation mask (decimal or 0x hex) instead of the scenario's
    #[arg(long, value_parser = parse_mask)]
    mask: Option<i32>,
    /// shm, p2p, socket or ib instead of the scenario's transport
    #[arg(long, value_parser = parse_transport)]
    transport: Option<Transport>,
    /// Graph replays per capture
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    replays: u32,
    /// Operations per communicator before an abort (abort scenario)
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    ops_per_comm: u32,
    /// IB queue pairs per request
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    qps: u32,
    /// Socket helper threads per proxy (eth)
    #[arg(long, default_value_t = 1)]
    helpers: u32,
    /// Our shim's call log, in entries (EVRING_RING; default: the shim's own, 65536)
    #[arg(long)]
    ring: Option<usize>,
    /// Our shim's event slots (EVRING_CAPACITY)
    #[arg(long)]
    capacity: Option<usize>,
    /// Keep the trace files (printed at the end)
    #[arg(long)]
    keep: bool,
    /// Where to put trace directories (default: the system temp dir)
    #[arg(long)]
    trace_dir: Option<PathBuf>,
    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
    /// Our shim writes no trace files (records are still made and counted): measures
    /// the hot path without the writer thread's formatting
    #[arg(long)]
    no_output: bool,
    /// Judge the plugin from what it returns and writes only, as a third-party one,
    /// even if it exports evring_stats
    #[arg(long)]
    opaque: bool,
    /// Print every non-zero counter of our shim after each run
    #[arg(long, short)]
    verbose: bool,
    /// Seconds a run may take before its process is killed and the run fails
    /// (0: no limit)
    #[arg(long, default_value_t = 1800, value_name = "SECS")]
    timeout: u64,
}

/// The ranges our shim accepts for `EVRING_RING` and `EVRING_CAPACITY`
/// (crates/plugin-shim/src/config.rs clamps to them).
const RING_RANGE: (usize, usize) = (16, 1 << 22);
const CAPACITY_RANGE: (usize, usize) = (64, 1 << 20);

/// Brings `--ring`/`--capacity` into our shim's range, saying so on stderr: the run
/// then measures the value that is really used.
fn clamp_sizes(o: &mut Opts) {
    for (flag, v, (lo, hi)) in [
        ("--ring", &mut o.ring, RING_RANGE),
        ("--capacity", &mut o.capacity, CAPACITY_RANGE),
    ] {
        if let Some(n) = *v {
            let c = n.clamp(lo, hi);
            if c != n {
                eprintln!(
                    "evring-sim: note: {flag} {n} is outside our shim's range {lo}..={hi}; using {c}"
                );
                *v = Some(c);
            }
        }
    }
}

fn parse_mask(s: &str) -> Result<i32, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.ok()
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| format!("not a mask: {s:?}"))
}

fn parse_transport(s: &str) -> Result<Transport, String> {
    Transport::parse(s).ok_or_else(|| format!("unknown transport {s:?} (shm, p2p, socket, ib)"))
}

fn params(o: &Opts, plugin: PathBuf) -> Params {
    let mut p = Params::new(plugin);
    p.version = o.abi;
    p.events = o.events;
    p.rate = o.rate;
    p.mode = match o.threads {
        Threads::Real => Mode::Threads,
        Threads::Single => Mode::Single,
    };
    p.ranks = o.ranks;
    p.channels = o.channels;
    p.steps = o.steps;
    p.ops_per_group = o.ops_per_group;
    p.mask = o.mask;
    p.transport = o.transport;
    p.replays = o.replays;
    p.ops_per_comm = o.ops_per_comm;
    p.qps = o.qps;
    p.helpers = o.helpers;
    // Paced at a multiple of NCCL's real rate, the plugin runs at its own
    // defaults: what a user gets.
    p.ring = o.ring;
    p.capacity = o.capacity;
    p.keep = o.keep;
    p.trace_root = o.trace_dir.clone();
    p.progress = !o.quiet;
    p.self_exe = std::env::current_exe().ok();
    p.opaque = o.opaque;
    p.no_output = o.no_output;
    p.timeout_s = o.timeout;
    p
}

fn plugin_path(o: &Opts) -> Result<PathBuf, String> {
    match &o.plugin {
        Some(p) => Ok(p.clone()),
        None => evring_sim::locate::plugin_near_self(),
    }
}

/// Prints one run's findings as it ends.
fn show(o: &Outcome, verbose: bool) {
    if verbose {
        eprintln!("  {}: peak live events (sampled) {}", o.name, o.live_peak);
        if let Some(m) = &o.memory {
            eprintln!(
                "  {}: RSS after warm-up {:+.1} MiB over {} starts",
                o.name,
                m.growth() as f64 / (1 << 20) as f64,
                m.starts()
            );
        }
        for p in &o.procs {
            if let Some(s) = &p.stats {
                let f: Vec<String> = s
                    .fields()
                    .into_iter()
                    .filter(|(_, v)| *v != 0)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                eprintln!("  {}: {}", p.label, f.join(" "));
            }
        }
    }
    for n in &o.notes {
        eprintln!("  note: {n}");
    }
    for u in &o.unverified {
        eprintln!("  unverified: {u}");
    }
    for p in &o.problems {
        eprintln!("  FAIL: {p}");
    }
    if let Some(d) = &o.trace_dir {
        eprintln!("  traces: {}", d.display());
    }
}

/// The table as runs finish: header first, then one row per run, each printed (and
/// flushed) the moment its run ends, so that nothing finished is lost to a later error.
struct Table {
    verbose: bool,
    rate: Option<u64>,
    done: Vec<(String, Verdict)>,
    /// The profiler ABI versions the runs' instances were driven at.
    abis: std::collections::BTreeSet<u32>,
    /// `--abi`, if given.
    forced: Option<u32>,
}

impl Table {
    /// `rate`: the scenarios' pace, said at the end (`None`: replays, which keep
    /// the log's order).
    fn start(verbose: bool, rate: Option<u64>, forced: Option<u32>) -> Table {
        println!(
            "{}",
            report::line(&report::HEADER.map(String::from), &report::STREAM_WIDTHS)
        );
        Table {
            verbose,
            rate,
            done: Vec::new(),
            abis: Default::default(),
            forced,
        }
    }

    fn add(&mut self, o: Outcome) {
        println!("{}", report::line(&report::row(&o), &report::STREAM_WIDTHS));
        let _ = std::io::stdout().flush();
        show(&o, self.verbose);
        self.abis
            .extend(o.procs.iter().map(|p| p.abi).filter(|&v| v > 0));
        self.done.push((o.name.clone(), o.verdict()));
    }

    /// Runs `job` in a child process and adds its row.
    fn run(&mut self, exe: &Path, job: Job, p: &Params) -> Result<(), String> {
        let o = isolate::run(exe, &job, p)?;
        self.add(o);
        Ok(())
    }

    fn finish(self) -> ExitCode {
        if let Some(&v) = self.abis.iter().next_back() {
            let how = match self.forced {
                Some(_) => "as --abi asked".to_string(),
                None if v < evring_sim::plugin::NEWEST => format!(
                    "the newest it exports; no ncclProfiler_v{} (v{}-only events skipped)",
                    evring_sim::plugin::NEWEST,
                    evring_sim::plugin::NEWEST
                ),
                None => "the newest it exports".to_string(),
            };
            eprintln!("evring-sim: plugin driven through ncclProfiler_v{v} ({how})");
        }
        match self.rate {
            Some(0) => eprintln!(
                "evring-sim: unpaced stress (--rate 0): records lost to a full ring are expected, counted and noted"
            ),
            Some(r) => eprintln!(
                "evring-sim: paced at {r} startEvent calls/s per simulated process (--rate; 0: unpaced stress); a record lost to a full ring fails the run"
            ),
            None => {}
        }
        let named = |v: Verdict| -> Vec<&str> {
            self.done
                .iter()
                .filter(|(_, x)| *x == v)
                .map(|(n, _)| n.as_str())
                .collect()
        };
        let failed = named(Verdict::Fail);
        let unverified = named(Verdict::Unverified);
        if !failed.is_empty() {
            eprintln!("evring-sim: failed: {}", failed.join(", "));
        }
        if !unverified.is_empty() {
            eprintln!(
                "evring-sim: unverified (could not be checked): {}",
                unverified.join(", ")
            );
        }
        if !failed.is_empty() {
            ExitCode::from(1)
        } else if !unverified.is_empty() {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        }
    }
}

fn self_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the evring-sim executable: {e}"))
}

/// The scenario's runs: the scenario, and for no-finalize also the variant whose
/// child process exits without finalizing.
fn run_scenario(t: &mut Table, exe: &Path, sc: Scenario, p: &Params) -> Result<(), String> {
    t.run(exe, Job::Scenario(sc.name().to_string()), p)?;
    if sc == Scenario::NoFinalize {
        t.add(nofin::run_subprocess(exe, p)?);
    }
    Ok(())
}

fn real_main(cli: Cli) -> Result<ExitCode, String> {
    match cli.cmd {
        Cmd::List => {
            for s in Scenario::ALL {
                println!("{:<12} {}", s.name(), s.describe());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { scenario, mut opts } => {
            let sc = Scenario::parse(&scenario).ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown scenario {scenario:?} (one of: {})",
                    names.join(", ")
                )
            })?;
            clamp_sizes(&mut opts);
            let p = params(&opts, plugin_path(&opts)?);
            let exe = self_exe()?;
            let mut t = Table::start(opts.verbose, Some(opts.rate), opts.abi);
            run_scenario(&mut t, &exe, sc, &p)?;
            Ok(t.finish())
        }
        Cmd::All {
            mut opts,
            no_fixtures,
        } => {
            clamp_sizes(&mut opts);
            let p = params(&opts, plugin_path(&opts)?);
            let exe = self_exe()?;
            let mut t = Table::start(opts.verbose, Some(opts.rate), opts.abi);
            for sc in Scenario::ALL {
                run_scenario(&mut t, &exe, sc, &p)?;
            }
            if !no_fixtures {
                for (stem, _) in evring_sim::RECORDED_LOGS {
                    t.run(&exe, Job::Recorded(stem.to_string()), &p)?;
                }
            }
            Ok(t.finish())
        }
        Cmd::Replay { logs, mut opts } => {
            // Bad logs are bad input: found before anything runs.
            for log in &logs {
                evring_sim::fixture::parse_file(log).map_err(|e| {
                    if e.line == 0 {
                        e.msg
                    } else {
                        format!("{}: {e}", log.display())
                    }
                })?;
            }
            clamp_sizes(&mut opts);
            let p = params(&opts, plugin_path(&opts)?);
            let exe = self_exe()?;
            let mut t = Table::start(opts.verbose, None, opts.abi);
            for log in logs {
                let log = std::path::absolute(&log).unwrap_or(log);
                t.run(&exe, Job::Log(log), &p)?;
            }
            Ok(t.finish())
        }
        Cmd::Child { dir, params } => {
            let p: Params =
                serde_json::from_str(&params).map_err(|e| format!("bad child parameters: {e}"))?;
            nofin::child_main(&p, &dir)
        }
        Cmd::RunChild { job, dir, params } => Ok(isolate::child_main(&job, &dir, &params)),
    }
}

fn main() -> ExitCode {
    // Bad input must read as one line, never as a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("evring-sim: internal error: {msg}{at}");
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // Help and version go to stdout as clap prints them.
        Err(e) if !e.use_stderr() => e.exit(),
        // Bad arguments: one line, exit status 2.
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            eprintln!(
                "evring-sim: {}",
                first
                    .strip_prefix("error: ")
                    .map_or(first.to_string(), |m| format!("error: {m}"))
            );
            return ExitCode::from(2);
        }
    };
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("evring-sim: error: {e}");
            ExitCode::from(2)
        }
    }
}
