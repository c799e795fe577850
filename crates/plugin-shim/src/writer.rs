//! The writer: one thread that owns the assembler and every trace file. It
//! drains the call log's lanes into the assembler (`assemble.rs`), which
//! puts events together, and streams each completed record to the sinks
//! and its communicator's file through that stream's encoder (`format.rs`:
//! Perfetto protobuf or JSON; footer fields in `trace.rs`).
//!
//! NCCL's threads never wait on it. `init`, `finalize`, `evring_flush` and the
//! exit handler push a command onto a lock-free stack and wait for the answer
//! at most a bounded time (init not at all), so a
//! FIFO at the trace path, a stalled NFS server or a full disk can stall only
//! this thread; what it does not write stays counted (`drop_ring_full`,
//! `records_unwritten`).
//!
//! Files are flushed every 200 ms, so a killed job leaves a trace that loads
//! up to the kill (a binary trace is a sequence of packets; Perfetto and
//! chrome://tracing accept a JSON array without its closing `]`). Before a
//! footer is written every file is flushed, so the footer's `records_written`
//! equals the records the process's files hold at that moment.

use crate::assemble::Assembler;
use crate::clock::now_ns;
use crate::engine::{Engine, DETACHED};
use crate::format::StreamEncoder;
use crate::perfetto::{Anchor, StreamInfo};
use crate::record::flag;
use crate::sink::{Sink, Sinks};
use crate::trace::{footer, End};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// What a trace file says about its communicator.
#[derive(Debug, Clone, Default)]
pub struct StreamMeta {
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub nnodes: i32,
    pub name: Option<String>,
    /// ABI version NCCL drove us through.
    pub abi: u32,
}

struct Stream {
    /// Encodes this stream's header, records and footer in the chosen format.
    enc: StreamEncoder,
    /// Who the stream is (a new part gets a new encoder of the same stream).
    info: StreamInfo,
    /// The current file; `first_path` for the first part.
    path: String,
    first_path: String,
    /// Part number (1 = the first file; `EVRING_TRACE_LIMIT` starts the next).
    part: u32,
    /// Earlier parts still on disk, with the records (and footer) each holds.
    parts: VecDeque<(String, u64)>,
    out: Option<BufWriter<File>>,
    /// Records and bytes in the current file.
    records: u64,
    bytes: u64,
    warned: bool,
}

/// Room kept for the footer when deciding that a file is full.
const FOOTER_ROOM: u64 = 8 << 10;

/// `trace_5_0.pftrace`, part 3 → `trace_5_0.part3.pftrace`.
fn part_path(first: &str, part: u32) -> String {
    match first.rsplit_once('.') {
        Some((stem, ext)) if !stem.ends_with('/') => format!("{stem}.part{part}.{ext}"),
        _ => format!("{first}.part{part}"),
    }
}

enum Cmd {
    Open(u64, StreamMeta),
    /// Footer for the communicator (None: an overflow context, which has no
    /// file of its own); `last` also closes the detached stream.
    Close {
        ctx: Option<u64>,
        last: bool,
    },
    Flush,
    /// Process exit: footers on every stream, then nothing more.
    Exit,
    /// An `Open` already applied out of turn (see `absorb_opens`).
    Done,
    /// A queued command with its completion flag.
    Tracked(Box<Cmd>, Done),
}

/// Set by the writer thread when a command has been carried out.
#[derive(Clone, Default)]
struct Done(Arc<AtomicBool>);

impl Done {
    fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

struct CmdNode {
    cmd: Cmd,
    done: Done,
    next: *mut CmdNode,
}

/// State of the writer thread; no other thread touches it.
#[derive(Default)]
struct State {
    /// By context: looked up for every record written (rustc-hash: std's
    /// SipHash costs more than the lookup itself).
    streams: FxHashMap<u64, Stream>,
    /// Files opened this process (a second open of the same name gets a suffix).
    used_paths: HashMap<String, u32>,
    /// Commands taken off the shared queue, in order.
    backlog: VecDeque<Cmd>,
    last_flush: u64,
    /// After the exit footers: every record is counted, none written.
    sealed: bool,
    /// Consumers of every record beside the files (`Writer::add_sink`).
    sinks: Sinks,
    /// Events between their first log entry and their completion.
    asm: Assembler,
    /// The write order of one drain's records (kept for reuse).
    order: Vec<(u64, u32)>,
    /// One record's encoded bytes (kept for reuse: a fresh 1 KiB buffer per
    /// batch was a large-bin request, and each one made glibc consolidate
    /// every fast bin of the writer's arena).
    buf: Vec<u8>,
}

pub struct Writer {
    /// Sinks added but not yet taken by the writer thread.
    new_sinks: Mutex<Vec<Box<dyn Sink>>>,
    has_new_sinks: AtomicBool,
    /// A sink was ever added: streams are opened and closed for it even
    /// with trace files off (metrics-only mode).
    has_sinks: AtomicBool,
    prefix: Option<String>,
    /// This engine belongs to a forked child: its file names carry its pid,
    /// so it never opens (and truncates) a file of its parent's.
    forked: bool,
    enabled: AtomicBool,
    /// Commands, newest first: a lock-free stack that producers push onto
    /// and the writer takes whole (so no NCCL thread ever waits for a lock the
    /// writer holds, even while the writer is preempted).
    cmds: AtomicPtr<CmdNode>,
    /// Bumped by the writer thread after every pass, so a waiter can tell a
    /// busy writer from a stuck one.
    progress: AtomicU64,
    thread: OnceLock<Thread>,
    spawn: Mutex<()>,
    spawn_warned: AtomicBool,
}

const FLUSH_EVERY_NS: u64 = 200_000_000;
/// How long the writer sleeps with nothing to do, unless woken. An event's
/// slot is held until the writer has read its entries, so this bounds how
/// long a completed event stays live: 2 ms (at NCCL's real rates, about
/// 10 000 events per second, some 20 events) costs ~500 wake-ups a second
/// of an idle writer; short (0.5 ms) when the last busy spell drained more
/// than 1/[`BUSY_FRACTION`] of the log (1 024 entries of the default
/// 65 536), so that a sustained high rate keeps nearly the whole log as
/// slack for a writer that gets descheduled.
const IDLE_SLEEP: Duration = Duration::from_millis(2);
const BUSY_SLEEP: Duration = Duration::from_micros(500);
const BUSY_FRACTION: usize = 64;
const SWEEP_EVERY_NS: u64 = 50_000_000;
/// How often the writer compares the slab's live count with the high-water
/// mark (a thread that sees the mark passed also wakes the writer).
const PRESSURE_CHECK_NS: u64 = 1_000_000;
/// Entries drained per pass between looks at the command queue, at least: a
/// pass takes everything the log holds when it starts (`take_log`), since
/// only a pass that read every lane may apply what it read.
const BATCH: usize = 4096;
/// A pass reads every entry pushed before it began; an entry whose clock was
/// read this much earlier still may not be pushed yet (its thread preempted
/// in between). Entries read later wait for the next pass (`Assembler::advance`).
const PREEMPT_MARGIN_NS: u64 = 500_000;
/// Reads of the log at exit while other threads still write to it.
const EXIT_ROUNDS: usize = 8;
/// Entries applied between two writes of the records they complete.
const CHUNK: usize = 8192;
/// How long `finalize` waits for its footer before returning anyway.
pub const FINALIZE_WAIT: Duration = Duration::from_millis(2);
/// The exit handler waits while the writer makes progress, but gives up after
/// this long without any (a stalled disk) or `EXIT_WAIT_MAX` in all.
pub const EXIT_STALL: Duration = Duration::from_secs(1);
pub const EXIT_WAIT_MAX: Duration = Duration::from_secs(10);

impl Writer {
    pub fn new(prefix: Option<String>, forked: bool, enabled: bool) -> Writer {
        Writer {
            new_sinks: Mutex::new(Vec::new()),
            has_new_sinks: AtomicBool::new(false),
            has_sinks: AtomicBool::new(false),
            prefix,
            forked,
            enabled: AtomicBool::new(enabled),
            cmds: AtomicPtr::new(std::ptr::null_mut()),
            progress: AtomicU64::new(0),
            thread: OnceLock::new(),
            spawn: Mutex::new(()),
            spawn_warned: AtomicBool::new(false),
        }
    }

    /// Turns trace output on or off at run time (records are still counted).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Adds a consumer of every completed record (see `sink.rs`); the writer
    /// thread takes it before its next batch.
    pub fn add_sink(&self, sink: Box<dyn Sink>) {
        self.new_sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sink);
        self.has_new_sinks.store(true, Ordering::Release);
        self.has_sinks.store(true, Ordering::Release);
    }

    /// Streams are tracked when there are trace files or sinks to tell.
    fn streams_wanted(&self) -> bool {
        self.prefix.is_some() || self.has_sinks.load(Ordering::Acquire)
    }

    /// Starts the writer thread if it is not running. If it cannot be
    /// created, says so once (records then wait in the ring and are counted
    /// as `drop_ring_full` when it fills); the next init tries again.
    pub fn ensure_started(&self, engine: &'static Engine) {
        if self.thread.get().is_some() {
            return;
        }
        let _one = self.spawn.lock().unwrap_or_else(|p| p.into_inner());
        if self.thread.get().is_some() {
            return;
        }
        match std::thread::Builder::new()
            .name("evring-writer".into())
            .spawn(move || run(engine))
        {
            Ok(h) => {
                let _ = self.thread.set(h.thread().clone());
            }
            Err(e) => {
                if !self.spawn_warned.swap(true, Ordering::Relaxed) {
                    crate::log::warn_loud(
                        engine,
                        &format!(
                            "cannot start the writer thread ({e}); no trace is written, records are counted (drop_ring_full); retried at the next init"
                        ),
                    );
                }
            }
        }
    }

    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Queues a command; returns its completion flag.
    fn send(&self, cmd: Cmd) -> Done {
        let done = Done::default();
        let node = Box::into_raw(Box::new(CmdNode {
            cmd,
            done: done.clone(),
            next: std::ptr::null_mut(),
        }));
        let mut head = self.cmds.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the exchange below publishes it.
            unsafe { (*node).next = head };
            match self
                .cmds
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        self.wake();
        done
    }

    /// Takes every queued command, oldest first.
    fn take(&self) -> Vec<Cmd> {
        let mut p = self.cmds.swap(std::ptr::null_mut(), Ordering::Acquire);
        let mut out = Vec::new();
        while !p.is_null() {
            // SAFETY: every node was made by `Box::into_raw` in `send` and
            // published once; the swap above made this thread its only owner.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
            out.push((node.cmd, node.done));
        }
        out.reverse();
        out.into_iter()
            .map(|(cmd, done)| Cmd::Tracked(Box::new(cmd), done))
            .collect()
    }

    /// Waits until `done` is set or `budget` has passed.
    fn wait(&self, done: &Done, budget: Duration) -> bool {
        let t0 = Instant::now();
        while !done.is_set() {
            if self.thread.get().is_none() || t0.elapsed() >= budget {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }

    /// Waits for command `seq` while the writer keeps making progress.
    fn wait_progress(&self, done: &Done, stall: Duration, max: Duration) -> bool {
        let t0 = Instant::now();
        let (mut seen, mut since) = (self.progress.load(Ordering::Acquire), Instant::now());
        while !done.is_set() {
            if self.thread.get().is_none() || t0.elapsed() >= max {
                return false;
            }
            let p = self.progress.load(Ordering::Acquire);
            if p != seen {
                (seen, since) = (p, Instant::now());
            } else if since.elapsed() >= stall {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        true
    }

    /// A communicator's file (created when its first record or its footer is
    /// written, by the writer thread).
    pub fn open(&self, ctx: u64, meta: StreamMeta) {
        if self.streams_wanted() {
            self.send(Cmd::Open(ctx, meta));
        }
    }

    /// Asks the writer to complete the open events of `ctx` (all of them
    /// if `last`) and write its footer (and the detached stream's if
    /// `last`); waits for it at most `FINALIZE_WAIT` (the last: while the
    /// writer makes progress). Sent even with no file or sink: the
    /// assembler lives on the writer thread.
    pub fn close(&self, ctx: Option<u64>, last: bool, _engine: &Engine) {
        let done = self.send(Cmd::Close { ctx, last });
        if last {
            // Nothing may stay live once no communicator is open: the
            // writer completes it, and the last finalize waits for that
            // while the writer makes progress.
            self.wait_progress(&done, EXIT_STALL, EXIT_WAIT_MAX);
        } else {
            self.wait(&done, FINALIZE_WAIT);
        }
    }

    /// Process exit: every stream gets its footer (`finalized: false`), then
    /// the writer writes nothing more. Bounded: see `EXIT_STALL`.
    pub fn exit(&self, _engine: &Engine) {
        let done = self.send(Cmd::Exit);
        self.wait_progress(&done, EXIT_STALL, EXIT_WAIT_MAX);
    }

    /// Asks the writer to write every record completed so far and flush every
    /// file (`evring_flush_wait`); waits at most `budget`. True if done.
    pub fn flush(&self, budget: Duration) -> bool {
        let done = self.send(Cmd::Flush);
        self.wait(&done, budget)
    }

    /// As `flush`, waiting while the writer makes progress (`evring_flush`):
    /// a long backlog is written, a stalled output is given up on after
    /// `EXIT_STALL`.
    pub fn flush_progress(&self) -> bool {
        let done = self.send(Cmd::Flush);
        self.wait_progress(&done, EXIT_STALL, EXIT_WAIT_MAX)
    }

    /// The file of a stream. Communicator files are named by communicator
    /// id and rank, unique across a job's hosts; names that rest on a pid
    /// (the detached stream, v1–v3 contexts, forked children) also carry the
    /// host name, as pids repeat across hosts and containers.
    fn path_for(&self, ctx: u64, meta: &StreamMeta, pid: i32, ext: &str) -> String {
        let prefix = self.prefix.as_deref().unwrap_or("evring");
        let host = crate::host::file_part();
        if ctx == DETACHED {
            format!("{prefix}_detached_{pid}_{host}.{ext}")
        } else if meta.abi >= 4 && !self.forked {
            format!("{prefix}_{}_{}.{ext}", meta.comm_id, meta.rank)
        } else if meta.abi >= 4 {
            format!(
                "{prefix}_{}_{}_pid{pid}_{host}.{ext}",
                meta.comm_id, meta.rank
            )
        } else {
            // v1-v3 init carries no communicator identity.
            format!("{prefix}_pid{pid}_{host}_ctx{ctx:x}.{ext}")
        }
    }
}

fn unique(used: &mut HashMap<String, u32>, path: String) -> String {
    let n = used.entry(path.clone()).or_insert(0);
    *n += 1;
    if *n == 1 {
        path
    } else {
        match path.rsplit_once('.') {
            Some((stem, ext)) if !stem.ends_with('/') => format!("{stem}.{n}.{ext}"),
            _ => format!("{path}.{n}"),
        }
    }
}

/// Lowers the calling thread's scheduling priority to nice `n` (Linux: a
/// thread's own nice value; raising it needs no privilege). So a writer that
/// wakes up to drain and write never takes a core from NCCL's busy threads
/// ahead of them. False if the kernel refused.
fn lower_priority(n: i32) -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: plain syscall on this thread's id; no memory is passed.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, n) == 0 }
}

fn run(engine: &'static Engine) {
    let w = &engine.writer;
    let nice = engine.cfg.writer_nice;
    if nice > 0 && !lower_priority(nice) {
        crate::log::warn(
            engine,
            &format!(
                "EVRING_WRITER_NICE={nice}: the kernel refused; the writer keeps its priority"
            ),
        );
    }
    let mut st = State {
        asm: Assembler::new(engine.events.capacity()),
        ..State::default()
    };
    let mut last_sweep = 0;
    let mut last_pressure_check = 0;
    // Records drained since the writer last slept.
    let mut spell = 0;
    loop {
        let cmds = commands(&mut st, engine);
        let drained = drain(&mut st, engine, BATCH);
        spell += drained;
        let now = now_ns();
        if now - st.last_flush > FLUSH_EVERY_NS {
            flush_all(&mut st, engine);
            st.last_flush = now;
        }
        // The live count sums every thread's slab shard, cache lines that
        // NCCL's threads write on each insert and retire: read it at most
        // every PRESSURE_CHECK_NS, not on every pass of this loop.
        let pressure = now - last_pressure_check > PRESSURE_CHECK_NS && {
            last_pressure_check = now;
            engine.events.live() > engine.cfg.high_water
        };
        if now - last_sweep > SWEEP_EVERY_NS || pressure {
            sweep(&mut st, engine);
            last_sweep = now;
        }
        w.progress.fetch_add(1, Ordering::Release);
        if drained == 0 && cmds == 0 {
            let busy = spell >= engine.log.capacity() / BUSY_FRACTION;
            std::thread::park_timeout(if busy { BUSY_SLEEP } else { IDLE_SLEEP });
            spell = 0;
        }
    }
}

/// Moves the queued commands into the backlog.
fn take_cmds(st: &mut State, w: &Writer) {
    st.backlog.extend(w.take());
}

/// Moves sinks added since the last look into the writer's state.
fn take_sinks(st: &mut State, w: &Writer) {
    if w.has_new_sinks.swap(false, Ordering::Acquire) {
        let new = std::mem::take(&mut *w.new_sinks.lock().unwrap_or_else(|p| p.into_inner()));
        for s in new {
            st.sinks.add(s);
        }
    }
}

/// Runs every queued command in order; returns how many.
fn commands(st: &mut State, engine: &Engine) -> usize {
    take_sinks(st, &engine.writer);
    let w = &engine.writer;
    take_cmds(st, w);
    let mut n = 0;
    while let Some(cmd) = st.backlog.pop_front() {
        n += 1;
        let Cmd::Tracked(cmd, done) = cmd else {
            continue;
        };
        match *cmd {
            Cmd::Open(ctx, meta) => open_stream(st, engine, ctx, meta),
            Cmd::Close { ctx, last } => {
                // Everything logged before the finalize is in the lanes now.
                assemble_all(st, engine);
                force(st, engine, ctx, last);
                write_ready(st, engine);
                flush_all(st, engine);
                let end = if last {
                    End::LastFinalize
                } else {
                    End::Finalize
                };
                if let Some((c, s)) = ctx.and_then(|c| Some((c, st.streams.remove(&c)?))) {
                    finish(st, c, s, engine, end);
                }
                if last {
                    if let Some(s) = st.streams.remove(&DETACHED) {
                        finish(st, DETACHED, s, engine, end);
                    }
                }
            }
            Cmd::Flush => {
                assemble_all(st, engine);
                flush_all(st, engine);
            }
            Cmd::Exit => {
                // Threads may still be inside the plugin while the process
                // exits: what they log while the log is being read counts
                // too, for a few rounds (nothing is written after the
                // footers below).
                for _ in 0..EXIT_ROUNDS {
                    assemble_all(st, engine);
                    if engine.log.is_empty() {
                        break;
                    }
                }
                force(st, engine, None, true);
                write_ready(st, engine);
                flush_all(st, engine);
                let mut ctxs: Vec<u64> = st.streams.keys().copied().collect();
                // The detached stream last, so its footer is the last line.
                ctxs.sort_unstable_by_key(|&c| (c == DETACHED, c));
                for c in ctxs {
                    if let Some(s) = st.streams.remove(&c) {
                        finish(st, c, s, engine, End::Exit);
                    }
                }
                st.sealed = true;
            }
            Cmd::Done | Cmd::Tracked(..) => {}
        }
        done.set();
        w.progress.fetch_add(1, Ordering::Release);
    }
    n
}

fn open_stream(st: &mut State, engine: &Engine, ctx: u64, meta: StreamMeta) {
    if st.sealed {
        return;
    }
    let format = engine.cfg.format;
    let path = unique(
        &mut st.used_paths,
        engine.writer.path_for(ctx, &meta, engine.pid, format.ext()),
    );
    let info = StreamInfo {
        comm_id: meta.comm_id,
        rank: meta.rank,
        nranks: meta.nranks,
        nnodes: meta.nnodes,
        abi: meta.abi,
        name: meta.name,
        pid: engine.pid,
        host: crate::host::name().to_string(),
        ctx,
    };
    st.sinks.open(ctx, &info);
    st.streams.insert(
        ctx,
        Stream {
            enc: StreamEncoder::new(format, info.clone(), &Anchor::now()),
            info,
            first_path: path.clone(),
            part: 1,
            parts: VecDeque::new(),
            bytes: 0,
            path,
            out: None,
            records: 0,
            warned: false,
        },
    );
}

/// A record for a context with no stream: its `Open` may still be queued
/// (commands are taken between batches). Applies queued opens now and leaves
/// the rest of the commands for their turn.
fn absorb_opens(st: &mut State, engine: &Engine) {
    take_cmds(st, &engine.writer);
    let mut opens = Vec::new();
    for cmd in st.backlog.iter_mut() {
        if let Cmd::Tracked(inner, _) = cmd {
            if matches!(**inner, Cmd::Open(..)) {
                if let Cmd::Open(ctx, meta) = std::mem::replace(&mut **inner, Cmd::Done) {
                    opens.push((ctx, meta));
                }
            }
        }
    }
    for (ctx, meta) in opens {
        open_stream(st, engine, ctx, meta);
    }
}

/// Entries the log holds now (observed: `pop` returns them first).
fn held_now(engine: &Engine) -> usize {
    engine.log.len().min(engine.log.capacity())
}

/// One pass: at least every entry pushed so far into the assembler, those
/// read before `read_to` applied, a chunk at a time, each chunk's records
/// written before the next is applied (so the records waiting at once stay
/// few). Returns the entries taken.
fn drain_to(st: &mut State, engine: &Engine, max: usize, read_to: u64) -> usize {
    let n = take_log(st, engine, max);
    loop {
        let k = st
            .asm
            .advance(read_to, CHUNK, &engine.events, &engine.counters);
        write_ready(st, engine);
        if k == 0 {
            return n;
        }
    }
}

/// Pops up to `max` entries (at least all those observed now: every entry
/// pushed before this call, as `pop` returns the observed ones first) into
/// the assembler.
fn take_log(st: &mut State, engine: &Engine, max: usize) -> usize {
    let max = max.max(held_now(engine));
    let mut n = 0;
    while n < max {
        let Some(e) = engine.log.pop() else { break };
        st.asm.push(e);
        n += 1;
    }
    n
}

/// Every lane drained and every entry applied and written: what a
/// finalize, a flush or the exit handler asked for is all there. Takes
/// what the log holds now only (not what producers keep pushing while it
/// runs, so a command's answer never waits on other communicators' traffic).
fn assemble_all(st: &mut State, engine: &Engine) {
    drain_to(st, engine, 0, u64::MAX);
}

/// Completes what is still open: one context's events (finalize), or
/// everything (`all`: the last finalize, exit).
fn force(st: &mut State, engine: &Engine, ctx: Option<u64>, all: bool) {
    let pick = |c: u64| all || Some(c) == ctx;
    st.asm.force_where(
        pick,
        all,
        flag::FORCED_FINALIZE,
        now_ns(),
        &engine.events,
        &engine.counters,
    );
}

/// Bounded waiting: the age limit, and the high-water mark.
fn sweep(st: &mut State, engine: &Engine) {
    let live = engine.events.live();
    let excess = if live > engine.cfg.high_water {
        live.saturating_sub(engine.cfg.low_water) as usize
    } else {
        0
    };
    st.asm.sweep(
        now_ns(),
        engine.cfg.max_age_ns,
        excess,
        &engine.events,
        &engine.counters,
    );
}

/// One pass: up to `max` log entries into the assembler, then every record
/// it completed to the sinks and files.
fn drain(st: &mut State, engine: &Engine, max: usize) -> usize {
    drain_to(st, engine, max, now_ns().saturating_sub(PREEMPT_MARGIN_NS))
}

/// Writes every record the assembler completed to the sinks and its
/// stream; returns how many.
///
/// The assembler completes a child before the parent it completes, but a
/// batch also holds events forced together and events of many threads; a
/// parent's arrows can only be written if its children are written first
/// (`flows.rs`). A child always ends no later than its parent (the
/// parent's end includes its children's), so the batch is written in order
/// of end time, completion order among equals.
fn write_ready(st: &mut State, engine: &Engine) -> usize {
    let w = &engine.writer;
    let (mut n, mut written, mut unwritten) = (0usize, 0u64, 0u64);
    let enabled = w.enabled.load(Ordering::Relaxed) && w.prefix.is_some() && !st.sealed;
    take_sinks(st, w);
    let mut batch = Vec::new();
    let mut order = std::mem::take(&mut st.order);
    order.clear();
    st.asm.take(&mut batch);
    order.extend(batch.iter().enumerate().map(|(i, r)| (r.end_ns, i as u32)));
    order.sort_unstable();
    let mut buf = std::mem::take(&mut st.buf);
    for &(_, i) in &order {
        let rec = &batch[i as usize];
        n += 1;
        st.sinks.record(rec.ctx, rec);
        if n % 1024 == 0 {
            // A long drain is progress too (see `wait_progress`).
            w.progress.fetch_add(1, Ordering::Release);
        }
        if !enabled {
            unwritten += 1;
            continue;
        }
        if !st.streams.contains_key(&rec.ctx) {
            if rec.ctx == DETACHED {
                open_stream(st, engine, DETACHED, StreamMeta::default());
            } else {
                absorb_opens(st, engine);
            }
        }
        // No stream: a context already closed (an event that raced its
        // finalize) or never opened. Counted, never a file of its own.
        let Some(s) = st.streams.get_mut(&rec.ctx) else {
            unwritten += 1;
            continue;
        };
        // The file and its header first: the binary encoder's timestamps are
        // deltas from the header's clock snapshot, so nothing may be encoded
        // before it.
        if !open_file(s, engine) {
            unwritten += 1;
            continue;
        }
        buf.clear();
        s.enc.record(&mut buf, rec);
        let limit = engine.cfg.trace_limit;
        if limit > 0 && s.records > 0 && s.bytes + buf.len() as u64 + FOOTER_ROOM > limit {
            rotate(s, engine);
            // The record was encoded for the old file's state: again, in the
            // next part, after its header.
            if !open_file(s, engine) {
                unwritten += 1;
                continue;
            }
            buf.clear();
            s.enc.record(&mut buf, rec);
        }
        if write(s, engine, &buf) {
            s.records += 1;
            written += 1;
        } else {
            unwritten += 1;
        }
    }
    st.asm.recycle(batch);
    st.order = order;
    st.buf = buf;
    // Counted once per batch: the writer is the ring's only consumer.
    let c = &engine.counters;
    c.records_consumed.add(n as u64);
    c.records_written.add(written);
    c.records_unwritten.add(unwritten);
    n
}

/// Opens a trace file without ever blocking: `O_NONBLOCK` (a FIFO with no
/// reader fails at once) and only regular files are accepted. Creates the
/// directory if it is missing.
fn create(path: &str) -> std::io::Result<File> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            let _ = std::fs::create_dir_all(dir);
        }
    }
    if let Ok(m) = std::fs::metadata(path) {
        if !m.file_type().is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
    }
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// Opens the stream's file and writes its header, once; false if the stream
/// cannot write. Called before anything is encoded for the file.
fn open_file(s: &mut Stream, engine: &Engine) -> bool {
    if s.warned {
        return false;
    }
    if s.out.is_none() {
        match create(&s.path) {
            Ok(f) => {
                let mut out = BufWriter::with_capacity(1 << 16, f);
                let mut header = Vec::with_capacity(4096);
                s.enc.header(&mut header, &Anchor::now());
                if out.write_all(&header).is_err() {
                    return fail(s, engine, "cannot write header");
                }
                s.bytes += header.len() as u64;
                s.out = Some(out);
            }
            Err(e) => return fail(s, engine, &format!("cannot create: {e}")),
        }
    }
    true
}

/// Writes bytes, opening the file (with its header) on first use. On any
/// error the stream stops writing, warns once, and counts.
fn write(s: &mut Stream, engine: &Engine, bytes: &[u8]) -> bool {
    if !open_file(s, engine) {
        return false;
    }
    match s.out.as_mut().map(|o| o.write_all(bytes)) {
        Some(Ok(())) => {
            s.bytes += bytes.len() as u64;
            true
        }
        Some(Err(e)) => fail(s, engine, &format!("write failed: {e}")),
        None => false,
    }
}

fn fail(s: &mut Stream, engine: &Engine, why: &str) -> bool {
    engine.counters.write_errors.incr();
    if !s.warned {
        s.warned = true;
        crate::log::warn_loud(
            engine,
            &format!(
                "trace {} disabled ({why}); events are still counted",
                s.path
            ),
        );
    }
    s.out = None;
    false
}

fn flush_all(st: &mut State, engine: &Engine) {
    st.sinks.flush();
    for s in st.streams.values_mut() {
        if let Some(Err(e)) = s.out.as_mut().map(|o| o.flush()) {
            fail(s, engine, &format!("flush failed: {e}"));
        }
    }
}

/// The current file reached `EVRING_TRACE_LIMIT`: it gets its footer (`end`
/// "rotated") and the stream goes on in the next part, with a new header.
/// With `EVRING_TRACE_PARTS`, the oldest parts beyond it are removed and
/// their records counted (`records_rotated_away`).
fn rotate(s: &mut Stream, engine: &Engine) {
    let fields = footer(engine, End::Rotated, s.records + 1, s.warned);
    let mut text = Vec::with_capacity(4096);
    open_file(s, engine);
    s.enc.footer(&mut text, &Anchor::now(), &fields);
    if write(s, engine, &text) {
        engine.counters.records_written.incr();
    }
    if let Some(mut out) = s.out.take() {
        if let Err(e) = out.flush() {
            fail(s, engine, &format!("flush failed: {e}"));
            return;
        }
    }
    engine.counters.trace_rotations.incr();
    let keep = engine.cfg.trace_parts as usize;
    if keep > 0 {
        s.parts.push_back((s.path.clone(), s.records + 1));
    }
    // The part about to start counts as one of those kept.
    while keep > 0 && s.parts.len() >= keep {
        let Some((old, n)) = s.parts.pop_front() else {
            break;
        };
        if std::fs::remove_file(&old).is_ok() {
            engine.counters.records_rotated_away.add(n);
        }
    }
    s.part += 1;
    s.path = part_path(&s.first_path, s.part);
    s.records = 0;
    s.bytes = 0;
    s.enc = StreamEncoder::new(engine.cfg.format, s.info.clone(), &Anchor::now());
}

/// Writes the footer (every other file was flushed just before, so its
/// counters describe what the files hold) and closes the file.
fn finish(st: &mut State, ctx: u64, mut s: Stream, engine: &Engine, end: End) {
    if st.sealed {
        return;
    }
    if engine.writer.prefix.is_none() {
        // Metrics-only: no file, the sinks still learn that the stream ended.
        st.sinks.close(ctx, end);
        return;
    }
    let ours = footer(engine, end, s.records + 1, s.warned);
    let theirs = st.sinks.footer(ctx);
    let fields: Vec<(&str, crate::format::Field)> = ours
        .into_iter()
        .chain(theirs.iter().map(|(k, v)| (k.as_str(), v.clone())))
        .collect();
    let mut text = Vec::with_capacity(4096);
    open_file(&mut s, engine);
    s.enc.footer(&mut text, &Anchor::now(), &fields);
    if write(&mut s, engine, &text) {
        engine.counters.records_written.incr();
    }
    if let Some(mut out) = s.out.take() {
        if let Err(e) = out.flush() {
            fail(&mut s, engine, &format!("flush failed: {e}"));
        }
    }
    st.sinks.close(ctx, end);
}
