//! `evring-sim`: runs NCCL's profiler call sequences through a plugin and reports what
//! it lost or leaked. Exit status: 0 all runs clean, 1 a leak or an uncounted loss,
//! 2 bad input (the one-line message says which).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use evring_sim::report::{table, Outcome};
use evring_sim::scenario::lane::Mode;
use evring_sim::scenario::nccl::Transport;
use evring_sim::scenario::{self, nofin, Params, Scenario};

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
    /// Use this ncclProfiler_vN table instead of the newest exported
    #[arg(long, value_name = "N")]
    abi: Option<u32>,
    /// startEvent calls per scenario
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    #[arg(long, value_enum, default_value = "real")]
    threads: Threads,
    /// Ranks (communicators) per simulated process
    #[arg(long, default_value_t = 2)]
    ranks: u32,
    /// Channels per collective/p2p
    #[arg(long, default_value_t = 4)]
    channels: u8,
    /// Network steps per proxy op
    #[arg(long, default_value_t = 4)]
    steps: u32,
    /// Collectives per group
    #[arg(long, default_value_t = 2)]
    ops_per_group: u32,
    /// Activation mask (decimal or 0x hex) instead of the scenario's
    #[arg(long, value_parser = parse_mask)]
    mask: Option<i32>,
    /// shm, p2p, socket or ib instead of the scenario's transport
    #[arg(long, value_parser = parse_transport)]
    transport: Option<Transport>,
    /// Graph replays per capture
    #[arg(long, default_value_t = 4)]
    replays: u32,
    /// Operations per communicator before an abort (abort scenario)
    #[arg(long, default_value_t = 200)]
    ops_per_comm: u32,
    /// IB queue pairs per request
    #[arg(long, default_value_t = 2)]
    qps: u32,
    /// Socket helper threads per proxy (eth)
    #[arg(long, default_value_t = 1)]
    helpers: u32,
    /// Our shim's completed-record ring (EVRING_RING; default 1048576)
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
}

/// `EVRING_RING` for our shim unless `--ring` says otherwise: 2^20 records
/// (about 270 MiB), enough for the default 1 M-event runs to write everything.
const DEFAULT_RING: usize = 1 << 20;

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
    // The simulator issues events far faster than NCCL can; without a ring
    // sized for a whole default run, the writer falls behind and most records
    // are dropped at the ring (counted, but the traces then say little).
    p.ring = o.ring.or(Some(DEFAULT_RING));
    p.capacity = o.capacity;
    p.keep = o.keep;
    p.trace_root = o.trace_dir.clone();
    p.progress = !o.quiet;
    p.self_exe = std::env::current_exe().ok();
    p.opaque = o.opaque;
    p.no_output = o.no_output;
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
    for p in &o.problems {
        eprintln!("  FAIL: {p}");
    }
    if let Some(d) = &o.trace_dir {
        eprintln!("  traces: {}", d.display());
    }
}

fn finish(outcomes: &[Outcome]) -> ExitCode {
    print!("{}", table(outcomes));
    if outcomes.iter().all(Outcome::ok) {
        ExitCode::SUCCESS
    } else {
        let bad: Vec<&str> = outcomes
            .iter()
            .filter(|o| !o.ok())
            .map(|o| o.name.as_str())
            .collect();
        eprintln!("evring-sim: leak or uncounted loss in: {}", bad.join(", "));
        ExitCode::from(1)
    }
}

fn real_main(cli: Cli) -> Result<ExitCode, String> {
    match cli.cmd {
        Cmd::List => {
            for s in Scenario::ALL {
                println!("{:<12} {}", s.name(), s.describe());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { scenario, opts } => {
            let sc = Scenario::parse(&scenario).ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown scenario {scenario:?} (one of: {})",
                    names.join(", ")
                )
            })?;
            let p = params(&opts, plugin_path(&opts)?);
            let mut outcomes = Vec::new();
            for o in scenario::run_all_variants(sc, &p) {
                let o = o?;
                show(&o, opts.verbose);
                outcomes.push(o);
            }
            Ok(finish(&outcomes))
        }
        Cmd::All { opts, no_fixtures } => {
            let p = params(&opts, plugin_path(&opts)?);
            let mut outcomes = Vec::new();
            for sc in Scenario::ALL {
                for o in scenario::run_all_variants(sc, &p) {
                    let o = o?;
                    show(&o, opts.verbose);
                    outcomes.push(o);
                }
            }
            if !no_fixtures {
                for (stem, text) in evring_sim::RECORDED_LOGS {
                    let o = evring_sim::replay::replay_text(stem, text, &p)?;
                    show(&o, opts.verbose);
                    outcomes.push(o);
                }
            }
            Ok(finish(&outcomes))
        }
        Cmd::Replay { logs, opts } => {
            let p = params(&opts, plugin_path(&opts)?);
            let mut outcomes = Vec::new();
            for log in &logs {
                let o = evring_sim::replay::replay(log, &p)?;
                show(&o, opts.verbose);
                outcomes.push(o);
            }
            Ok(finish(&outcomes))
        }
        Cmd::Child { dir, params } => {
            let p: Params =
                serde_json::from_str(&params).map_err(|e| format!("bad child parameters: {e}"))?;
            nofin::child_main(&p, &dir)
        }
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
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("evring-sim: error: {e}");
            ExitCode::from(2)
        }
    }
}
