//! Scenario generators: NCCL's call orders (`nccl-profiler-abi.md` §3) on NCCL's thread
//! structure, at a configurable size, against any plugin.
//!
//! A run opens one private plugin instance per simulated process ([`Proc`]), initialises
//! one communicator per rank, starts the roles each rank needs (proxy thread, CUDA
//! callback thread, async group thread, socket helpers) and drives the user threads
//! until the plugin has been handed the target number of `startEvent` calls. It then
//! shuts the roles down the way `ncclCommDestroy` does, finalizes every communicator
//! (from the main thread, i.e. not the user threads, as NCCL's deferred free does),
//! reads the counters and the traces, and judges the run ([`crate::report`]).

pub mod lane;
pub mod nccl;
pub mod nofin;
pub mod user;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evring_abi::ty;

use crate::driver::{rss_bytes, Proc, Settings, Shared};
use crate::report::{Memory, Outcome, ProcOutcome};
use lane::{Lane, Mode, Topology};
use nccl::{
    Launcher, Launching, Plan, ProfWork, ProfilerThread, Proxy, ProxyEnd, ProxyWork, Shape,
    SockHelper, Transport,
};
use user::{Script, User, UserCfg};

/// The scenarios, in the order `evring-sim all` runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Shm,
    P2pKernel,
    Eth,
    Ib,
    Pxn,
    GroupP2p,
    Graph,
    Nonblocking,
    Split,
    Abort,
    NoFinalize,
}

/// Every NCCL event bit a v5 plugin can be given (`0xFFF`), and KernelPhase (v7), which
/// NCCL clears for older plugins after `init` (`0x8FFF`).
const ALL: i32 = (ty::ALL_V5 | ty::KERNEL_PHASE) as i32;

impl Scenario {
    pub const ALL: [Scenario; 11] = [
        Scenario::Shm,
        Scenario::P2pKernel,
        Scenario::Eth,
        Scenario::Ib,
        Scenario::Pxn,
        Scenario::GroupP2p,
        Scenario::Graph,
        Scenario::Nonblocking,
        Scenario::Split,
        Scenario::Abort,
        Scenario::NoFinalize,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Shm => "shm",
            Scenario::P2pKernel => "p2p-kernel",
            Scenario::Eth => "eth",
            Scenario::Ib => "ib",
            Scenario::Pxn => "pxn",
            Scenario::GroupP2p => "group-p2p",
            Scenario::Graph => "graph",
            Scenario::Nonblocking => "nonblocking",
            Scenario::Split => "split",
            Scenario::Abort => "abort",
            Scenario::NoFinalize => "no-finalize",
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Scenario::Shm => "SHM only: no proxy thread, no proxy ops; mask Coll|P2p (§3.3)",
            Scenario::P2pKernel => "CUDA P2P: KernelCh per channel from the proxy thread, ProxyCtrl (§3.3, §3.8)",
            Scenario::Eth => {
                "NET socket: ProxyOp (19), send steps 8/20/9, recv steps 10/11/12; NetPlugin from socket helper threads (§3.4)"
            }
            Scenario::Ib => {
                "NET IB: NetPlugin QP events with double stops and stops without start; NetPlugin bit toggled at run time (§3.4)"
            }
            Scenario::Pxn => {
                "two processes: every other NET op runs on the other process's proxy with a foreign context, parent and pid (§3.7)"
            }
            Scenario::GroupP2p => {
                "grouped send/recv, two plans per group, every other GroupApi stopped before the launch (§3.5)"
            }
            Scenario::Graph => {
                "CUDA graphs: capture, then replays from a callback thread whose Coll parent is the long-stopped CollApi (§3.6)"
            }
            Scenario::Nonblocking => {
                "non-blocking comms: GroupApi stopped before KernelLaunch/Group/Coll/P2p start on the async thread (§3.5)"
            }
            Scenario::Split => {
                "split comm sharing the parent's proxy: the parent is finalized half-way, ProxyCtrl keeps its context (§3.10)"
            }
            Scenario::Abort => "ncclCommAbort every few hundred ops with proxy events left open, then finalize (§3.10)",
            Scenario::NoFinalize => {
                "process exit without finalize: nothing lost in memory (flush + counters), and a child process's traces (§3.12)"
            }
        }
    }

    pub fn default_mask(self) -> i32 {
        match self {
            Scenario::Shm => (ty::COLL | ty::P2P) as i32,
            _ => ALL,
        }
    }

    pub fn default_transport(self) -> Transport {
        match self {
            Scenario::Shm => Transport::Shm,
            Scenario::P2pKernel | Scenario::GroupP2p | Scenario::Nonblocking => Transport::P2p,
            Scenario::Eth | Scenario::Graph | Scenario::Split | Scenario::NoFinalize => {
                Transport::Socket
            }
            Scenario::Ib | Scenario::Pxn | Scenario::Abort => Transport::Ib,
        }
    }

    fn script(self) -> Script {
        match self {
            Scenario::GroupP2p => Script::GroupP2p,
            Scenario::Graph => Script::Graph,
            _ => Script::Mix,
        }
    }

    fn processes(self) -> usize {
        if self == Scenario::Pxn {
            2
        } else {
            1
        }
    }
}

/// Sizes and settings of a run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Params {
    /// The plugin library.
    pub plugin: PathBuf,
    /// Force an ABI version instead of the newest the library exports.
    pub version: Option<u32>,
    /// `startEvent` calls to issue (the run stops at the first operation boundary after).
    pub events: u64,
    /// `startEvent` calls per second per simulated process (plugin instance) the
    /// run's threads are held to (0: unpaced stress, as fast as they go).
    #[serde(default)]
    pub rate: u64,
    pub mode: Mode,
    /// Ranks (communicators) per process.
    pub ranks: u32,
    pub channels: u8,
    pub steps: u32,
    /// Collectives per group.
    pub ops_per_group: u32,
    /// Overrides the scenario's mask.
    pub mask: Option<i32>,
    /// Overrides the scenario's transport.
    pub transport: Option<Transport>,
    pub replays: u32,
    /// Abort scenario: operations per communicator.
    pub ops_per_comm: u32,
    pub qps: u32,
    /// Socket helper threads per proxy (eth; NetPlugin only if the mask has it).
    pub helpers: u32,
    pub window: usize,
    /// Our shim's ring and slab sizes (`EVRING_RING`, `EVRING_CAPACITY`).
    pub ring: Option<usize>,
    pub capacity: Option<usize>,
    /// Where trace directories go (default: the system temp dir).
    pub trace_root: Option<PathBuf>,
    /// Keep the trace directories.
    pub keep: bool,
    pub progress: bool,
    /// The `evring-sim` executable, for the no-finalize child process.
    pub self_exe: Option<PathBuf>,
    /// Judge the plugin as a third-party one (acceptance, RSS, trace) even if it
    /// exports our counters.
    pub opaque: bool,
    /// Our shim writes no trace (records are counted as unwritten).
    pub no_output: bool,
    /// Judge resident memory after warm-up. Only meaningful when the run has its
    /// process to itself (the CLI runs each in a child process); tests that run
    /// several scenarios at once in one process leave it off.
    #[serde(default)]
    pub judge_memory: bool,
    /// The process's environment holds the first plugin instance's settings
    /// (`Settings::process_env`): set when the run has a child process of its own.
    #[serde(default)]
    pub process_env: bool,
    /// A run in a child process that takes longer is killed and fails (0: no limit).
    #[serde(default)]
    pub timeout_s: u64,
}

impl Params {
    pub fn new(plugin: PathBuf) -> Params {
        Params {
            plugin,
            version: None,
            events: 100_000,
            rate: crate::DEFAULT_RATE,
            mode: Mode::Threads,
            ranks: 2,
            channels: 4,
            steps: 4,
            ops_per_group: 2,
            mask: None,
            transport: None,
            replays: 4,
            ops_per_comm: 200,
            qps: 2,
            helpers: 1,
            window: 4,
            ring: None,
            capacity: None,
            trace_root: None,
            keep: false,
            progress: false,
            self_exe: None,
            opaque: false,
            no_output: false,
            judge_memory: false,
            process_env: false,
            timeout_s: 0,
        }
    }

    /// [`Params::timeout_s`] as a duration (`None`: no limit).
    pub fn timeout(&self) -> Option<std::time::Duration> {
        (self.timeout_s > 0).then(|| std::time::Duration::from_secs(self.timeout_s))
    }
}

/// A fresh directory for one run's traces.
pub fn trace_dir(root: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = root
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("evring-sim-{}-{n}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create trace directory {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Samples resident memory and moves the progress bar while a run goes on.
pub struct Watch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    /// Peak RSS sampled after the warm-up point.
    late_peak: Arc<AtomicU64>,
    live_peak: Arc<AtomicU64>,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// `procs`: instances whose live-event count (our shim's `live`) is sampled too.
    pub fn start(name: &str, shared: Arc<Shared>, progress: bool, procs: Vec<Arc<Proc>>) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_bytes()));
        let late_peak = Arc::new(AtomicU64::new(0));
        let live_peak = Arc::new(AtomicU64::new(0));
        let watched = Arc::clone(&shared);
        let bar = if progress {
            let b = indicatif::ProgressBar::new(shared.target);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix:>12} [{bar:30}] {pos}/{len} starts {per_sec} {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_prefix(name.to_string());
            b
        } else {
            indicatif::ProgressBar::hidden()
        };
        let (s, p, lp) = (Arc::clone(&stop), Arc::clone(&peak), Arc::clone(&live_peak));
        let late = Arc::clone(&late_peak);
        let thread = std::thread::Builder::new()
            .name("evring-sim-watch".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let rss = rss_bytes();
                    p.fetch_max(rss, Ordering::Relaxed);
                    if shared.warm() {
                        late.fetch_max(rss, Ordering::Relaxed);
                    }
                    let live: u64 = procs
                        .iter()
                        .filter_map(|x| x.stats())
                        .map(|st| st.live)
                        .sum();
                    lp.fetch_max(live, Ordering::Relaxed);
                    bar.set_position(shared.issued.load(Ordering::Relaxed).min(shared.target));
                    std::thread::park_timeout(Duration::from_millis(50));
                }
                bar.finish_and_clear();
            })
            .ok();
        Watch {
            stop,
            peak,
            late_peak,
            live_peak,
            shared: watched,
            thread,
        }
    }

    /// RSS after warm-up, sampled now (call at the end of the run, before finalize):
    /// `None` if the run never reached its warm-up point.
    pub fn memory(&self) -> Option<Memory> {
        let sh = &self.shared;
        if !sh.warm() {
            return None;
        }
        Some(Memory {
            rss_warm: sh.warm_rss.load(Ordering::Acquire),
            starts_warm: sh.warm_starts.load(Ordering::Relaxed),
            rss_late: self.late_peak.load(Ordering::Relaxed).max(rss_bytes()),
            starts_end: sh.issued.load(Ordering::Relaxed),
        })
    }

    /// Stops sampling; returns the peak resident size and the peak number of live
    /// events seen (sampled every 50 ms).
    pub fn finish(mut self) -> (u64, u64) {
        self.stop_thread();
        (
            self.peak.load(Ordering::Relaxed).max(rss_bytes()),
            self.live_peak.load(Ordering::Relaxed),
        )
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Watch {
    /// A run that fails half-way must not leave its sampler running.
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// The id (NCCL's `commId` hash) of a scenario's communicator: one per
/// (scenario, process), shared by every rank of the process, as the ranks
/// of one communicator share it in NCCL (each rank's file is then named by
/// it and its rank, and `evring report` sees one communicator of `--ranks`
/// ranks). PXN's two processes are two communicators (their ranks carry the
/// same numbers). The split's child is `id ^ 0x5151`, an abort's replacement
/// `id + k` (every rank aborts after the same number of operations, so the
/// ranks agree on it too).
pub fn comm_id(sc: Scenario, proc: usize) -> u64 {
    // The eight zero bytes keep the ids rank 0 had when every rank had its own.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in sc
        .name()
        .bytes()
        .chain((proc as u64).to_le_bytes())
        .chain(0u64.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Runs one scenario in this process. For no-finalize, the communicators are
/// finalized after the checks (so that the plugin's exit handler has nothing left to
/// write into a removed directory), and that late finalize must leave nothing live.
pub fn run(sc: Scenario, p: &Params) -> Result<Outcome, String> {
    let dir = trace_dir(p.trace_root.as_deref(), sc.name())?;
    let out = run_in(sc, p, &dir, true);
    finish_dir(out, &dir, p.keep)
}

/// Runs one scenario, and for no-finalize also the child-process variant when
/// `p.self_exe` names the `evring-sim` binary.
pub fn run_all_variants(sc: Scenario, p: &Params) -> Vec<Result<Outcome, String>> {
    let mut v = vec![run(sc, p)];
    if sc == Scenario::NoFinalize {
        if let Some(exe) = &p.self_exe {
            v.push(nofin::run_subprocess(exe, p));
        }
    }
    v
}

/// Removes (or keeps) a run's trace directory and records where it is.
pub fn finish_dir(out: Result<Outcome, String>, dir: &Path, keep: bool) -> Result<Outcome, String> {
    if keep {
        out.map(|mut o| {
            o.trace_dir = Some(dir.to_path_buf());
            o
        })
    } else {
        let _ = std::fs::remove_dir_all(dir);
        out
    }
}

/// The settings of simulated process `i`'s plugin instance when `sc` runs in `dir`.
pub fn settings(sc: Scenario, p: &Params, dir: &Path, i: usize) -> Settings {
    Settings {
        mask: Some(p.mask.unwrap_or_else(|| sc.default_mask())),
        trace_dir: dir.join(format!("proc{i}")),
        ring: p.ring,
        capacity: p.capacity,
        no_output: p.no_output,
        process_env: p.process_env && i == 0,
    }
}

/// Runs `sc` writing traces under `dir`. `cleanup`: finalize what a no-finalize run
/// left (after judging it); a child process that is about to exit passes false.
pub fn run_in(sc: Scenario, p: &Params, dir: &Path, cleanup: bool) -> Result<Outcome, String> {
    let transport = p.transport.unwrap_or_else(|| sc.default_transport());
    let finalize = sc != Scenario::NoFinalize;
    let shared = Shared::paced(p.events, p.rate.saturating_mul(sc.processes() as u64));
    let rss_before = rss_bytes();
    let warnings_before = crate::logger::logged().0;
    let mut procs = Vec::new();
    for i in 0..sc.processes() {
        let settings = settings(sc, p, dir, i);
        std::fs::create_dir_all(&settings.trace_dir)
            .map_err(|e| format!("cannot create {}: {e}", settings.trace_dir.display()))?;
        procs.push(Proc::open(
            &format!("{}/proc{i}", sc.name()),
            &p.plugin,
            p.version,
            settings,
            Arc::clone(&shared),
        )?);
    }
    let watch = Watch::start(sc.name(), Arc::clone(&shared), p.progress, procs.clone());
    let t0 = Instant::now();

    // Communicators first: `init` precedes the proxy thread (init.cc:1519-1530).
    let ranks = p.ranks.max(1) as i32;
    let mut comms = Vec::new(); // (proc, rank, comm_id, ctx, parent ctx)
    for (pi, proc) in procs.iter().enumerate() {
        for r in 0..ranks {
            let id = comm_id(sc, pi);
            let (ctx, parent) = if sc == Scenario::Split {
                let parent = proc.init(id, r, ranks);
                let child = proc.init(id ^ 0x5151, r, ranks);
                (child, Some(parent))
            } else {
                (proc.init(id, r, ranks), None)
            };
            comms.push((pi, r, id, ctx, parent));
        }
    }
    if procs.iter().any(|pr| pr.mask() == 0) {
        // NCCL would call nothing but init and finalize: nothing to judge.
        for proc in &procs {
            proc.finalize_all();
        }
        let mut o = Outcome {
            name: sc.name().to_string(),
            ..Default::default()
        };
        o.unverified.push(format!(
            "{}: the plugin left the activation mask at 0 after init, so NCCL would emit no events (set NCCL_PROFILE_EVENT_MASK, or pass --mask)",
            sc.name()
        ));
        return Ok(o);
    }
    let run_mask = procs[0].mask();
    let shape = Shape {
        channels: p.channels.max(1),
        steps: p.steps.max(1),
        qps: p.qps.max(1),
        window: p.window.max(1),
        transport,
    };
    let has_proxy = transport.net() || run_mask & ty::KERNEL_CH != 0;
    let end = if finalize {
        ProxyEnd::Clean
    } else {
        ProxyEnd::LeaveSleep
    };

    let mut topo = Topology::new(p.mode);
    // Downstream first: helpers, proxies, then the threads that post to proxies.
    let mut proxies: Vec<Option<Lane<ProxyWork>>> = Vec::new();
    for &(pi, r, _, ctx, parent) in &comms {
        let proc = &procs[pi];
        if !has_proxy {
            proxies.push(None);
            continue;
        }
        let helper = (transport == Transport::Socket && p.helpers > 0).then(|| {
            topo.spawn(
                &format!("sock-helper-{pi}-{r}"),
                SockHelper {
                    c: proc.caller(),
                    fd: 10 + r,
                },
            )
        });
        let ctrl_ctx = parent.unwrap_or(ctx);
        let proxy = Proxy::new(proc.caller(), ctrl_ctx, shape, end, helper);
        proxies.push(Some(topo.spawn(&format!("nccl-proxy-{pi}-{r}"), proxy)));
    }
    // NCCL 2.31+ (ABI v7): KernelCh and KernelPhase come from a profiler thread, one per
    // communicator (a split's child shares its parent's, as it shares the proxy).
    let abi7 = procs[0].version() >= 7;
    let mut profs: Vec<Option<Lane<ProfWork>>> = Vec::new();
    for &(pi, r, _, _, _) in &comms {
        let prof = (abi7 && run_mask & ty::KERNEL_CH != 0).then(|| {
            topo.spawn(
                &format!("nccl-profiler-{pi}-{r}"),
                ProfilerThread::new(procs[pi].caller()),
            )
        });
        profs.push(prof);
    }
    let mut users = Vec::new();
    for (i, &(pi, r, id, ctx, parent)) in comms.iter().enumerate() {
        let proc = &procs[pi];
        // PXN: the other process's proxy serving the same rank.
        let remote = if sc == Scenario::Pxn {
            let other = comms.iter().position(|c| c.0 != pi && c.1 == r);
            other.and_then(|o| proxies[o].clone())
        } else {
            None
        };
        let launcher = || {
            let mut l = Launcher::new(proxies[i].clone(), remote.clone(), shape);
            l.prof = profs[i].clone();
            l
        };
        let async_lane: Option<Lane<Plan>> = (sc == Scenario::Nonblocking).then(|| {
            topo.spawn(
                &format!("nccl-async-{pi}-{r}"),
                Launching {
                    c: proc.caller(),
                    launcher: launcher(),
                    replay: false,
                },
            )
        });
        let cb_lane: Option<Lane<Plan>> = (sc == Scenario::Graph).then(|| {
            topo.spawn(
                &format!("cuda-callback-{pi}-{r}"),
                Launching {
                    c: proc.caller(),
                    launcher: launcher(),
                    replay: true,
                },
            )
        });
        let cfg = UserCfg {
            script: sc.script(),
            ops_per_group: p.ops_per_group.max(1),
            replays: p.replays.max(1),
            count: 1 << 20,
            abort_every: (sc == Scenario::Abort).then_some(p.ops_per_comm.max(1)),
            toggle_net_every: (sc == Scenario::Ib).then_some(256),
            abi7,
        };
        users.push(User::new(
            proc.caller(),
            r,
            ranks,
            id,
            ctx,
            parent,
            launcher(),
            async_lane,
            cb_lane,
            proxies[i].clone(),
            cfg,
        ));
    }
    drop(proxies);
    drop(profs);

    match p.mode {
        Mode::Single => {
            while !shared.done() {
                for u in &mut users {
                    u.op();
                    topo.pump();
                }
            }
            drop(users);
        }
        Mode::Threads => {
            let threads: Vec<_> = users
                .into_iter()
                .enumerate()
                .map(|(i, mut u)| {
                    std::thread::Builder::new()
                        .name(format!("nccl-user-{i}"))
                        .spawn(move || {
                            while !u.done() {
                                u.op();
                            }
                        })
                        .map_err(|e| format!("cannot start a user thread: {e}"))
                })
                .collect::<Result<_, _>>()?;
            for t in threads {
                t.join()
                    .map_err(|_| "a simulated user thread panicked".to_string())?;
            }
        }
    }
    // ncclCommDestroy: the proxy finishes its ops and exits before the comm is freed.
    topo.join();
    let memory = watch.memory().filter(|_| p.judge_memory);
    if finalize {
        for proc in &procs {
            proc.finalize_all();
        }
    } else {
        for proc in &procs {
            proc.flush();
        }
    }
    let wall = t0.elapsed();
    let (rss_peak, live_peak) = watch.finish();
    let rss_after = rss_bytes();
    let mut outcome = Outcome {
        name: sc.name().to_string(),
        wall,
        rss_before,
        rss_peak,
        rss_after,
        live_peak,
        memory,
        unpaced: p.rate == 0,
        ..Default::default()
    };
    for proc in &procs {
        outcome.procs.push(ProcOutcome {
            label: proc.label.clone(),
            counts: proc.counts(),
            stats: proc.stats().filter(|_| !p.opaque),
            trace: crate::trace::read_dir(proc.trace_dir())?,
            finalized: finalize,
            abi: proc.version(),
        });
    }
    outcome.judge();
    if p.judge_memory && p.ring.is_none() && p.capacity.is_none() && !p.opaque {
        outcome.judge_budget();
    }
    crate::logger::note_warnings(&mut outcome, warnings_before);
    if !finalize && cleanup {
        for (proc, po) in procs.iter().zip(&outcome.procs) {
            proc.finalize_all();
            if let (Some(s), true) = (proc.stats(), po.stats.is_some()) {
                if s.live != 0 {
                    outcome.problems.push(format!(
                        "{}: {} events live after a late finalize",
                        proc.label, s.live
                    ));
                }
            }
        }
    }
    Ok(outcome)
}
