//! Recording mode (`EVRING_RECORD=<prefix>`): a log of every profiler call NCCL
//! makes, for the simulator to replay.
//!
//! The log has exactly the line format of the recorded fixtures
//! (`tests/fixtures/nccl-2.28.9/README.md`), so the simulator's parser and
//! replayer read it unchanged; `docs/validation.md` lists the differences in
//! content (our handles and contexts, names printed for P2p and CeColl too).
//! That parser rejects extra fields, so the time of each call goes to a
//! sidecar file instead, one line per log line, which older readers ignore.
//!
//! * Files: `<prefix><pid>.log` and `<prefix><pid>.times`.
//! * Off (the default), each entry point pays one relaxed load of the
//!   switch, which shares its cache line with the engine pointer and the
//!   clock (`hotline.rs`).
//! * On, NCCL's threads push fixed-size binary entries into a bounded
//!   lock-free queue and return; a background thread formats and writes them.
//!   A full queue drops the call (`record_dropped`); past
//!   `EVRING_RECORD_LIMIT` bytes (default 64 MiB) nothing more is logged
//!   (`record_over_limit`), so a log is always a prefix of the call sequence
//!   in whole lines (only a failed write, e.g. a full disk, can cut the last
//!   one; recording then stops). `record_lines` counts lines written.
//! * The queue order is the call order as the queue linearised it. A START
//!   is pushed before its handle is handed to NCCL, and STOP/REC/FIN on
//!   entry, so whatever NCCL does with a handle is logged after its START.
//! * Finalize, `evring_flush` and process exit drain the queue and flush
//!   both files.

use crate::abi::{
    CeBatchV6, CeCollV6, CeSyncV6, CollApiV5, CollV5, DescrUnionV6, DescrV1, DescrV2, DescrV3,
    DescrV4, DescrV6, GroupApiV5, KernelChV4, KernelLaunchV5, NetPluginD, P2pApiV5, P2pV5,
    ProxyOpD, ProxyStepD,
};
use crate::clock::now_ns;
use crate::engine::Engine;
use crate::model::{Info, StartArg};
use crate::strings::Str16;
use evring::BoundedQueue;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Eight-byte words of the v5/v6 descriptor union, as in the fixture logs.
pub const WORDS: usize = 11;
const _: () = assert!(WORDS * 8 == std::mem::size_of::<DescrUnionV6>());

/// Default `EVRING_RECORD_LIMIT`.
pub const DEFAULT_LIMIT: u64 = 64 << 20;
/// Default `EVRING_RECORD_QUEUE` (entries of [`Entry`]'s size, 160 bytes).
pub const DEFAULT_QUEUE: usize = 1 << 16;

const BATCH: usize = 4096;
const IDLE: Duration = Duration::from_millis(2);

/// Whether recording is on; the only thing an entry point reads when it is off.
use crate::hotline::line;
static REC: OnceLock<Option<Recorder>> = OnceLock::new();

/// One call, as NCCL made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Init {
        ctx: u64,
        comm_id: u64,
        rank: i32,
        mask_ptr: u64,
    },
    Start {
        handle: u64,
        ctx: u64,
        ty: u64,
        parent: u64,
        rank: i32,
        name: Str16,
        words: [u64; WORDS],
    },
    Stop {
        handle: u64,
    },
    /// `arg` is the first word of the state args, `None` for a NULL pointer.
    Rec {
        handle: u64,
        state: i32,
        arg: Option<u64>,
    },
    Fin {
        ctx: u64,
    },
}

/// A queued call: fixed size, no heap, no text.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// `pthread_self()` of the caller, as the fixture recorder printed it.
    pub tid: u64,
    /// Host time, CLOCK_MONOTONIC ns (the traces' clock).
    pub ts: u64,
    pub call: Call,
}

/// Settings, read at the first `init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordConfig {
    pub prefix: String,
    pub limit: u64,
    pub queue: usize,
}

impl RecordConfig {
    /// `None` when `EVRING_RECORD` is unset or empty.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<RecordConfig> {
        let prefix = get("EVRING_RECORD").filter(|p| !p.is_empty())?;
        let limit = get("EVRING_RECORD_LIMIT")
            .and_then(|v| parse_size(&v))
            .unwrap_or(DEFAULT_LIMIT);
        let queue = get("EVRING_RECORD_QUEUE")
            .and_then(|v| parse_size(&v))
            .map(|q| q.clamp(16, 1 << 22) as usize)
            .unwrap_or(DEFAULT_QUEUE);
        Some(RecordConfig {
            prefix,
            limit,
            queue,
        })
    }

    /// The log and times paths for process `pid`.
    pub fn paths(&self, pid: i32) -> (String, String) {
        (
            format!("{}{pid}.log", self.prefix),
            format!("{}{pid}.times", self.prefix),
        )
    }
}

/// A byte count: decimal or 0x hex, optionally with a binary K/M/G suffix.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, shift) = match s.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => (&s[..s.len() - 1], 10),
        Some(b'M') => (&s[..s.len() - 1], 20),
        Some(b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let v = crate::config::parse_int(num)?;
    u64::try_from(v).ok()?.checked_mul(1 << shift)
}

struct Sink {
    log: BufWriter<File>,
    times: BufWriter<File>,
    bytes: u64,
    /// The limit was reached or a write failed: nothing more is written.
    stopped: bool,
    line: String,
}

struct Recorder {
    cfg: RecordConfig,
    queue: BoundedQueue<Entry>,
    sink: Mutex<Sink>,
    /// Set with `stopped`, read by producers so they stop queueing.
    over: AtomicBool,
    pid: i32,
}

fn counters() -> Option<&'static crate::counters::Counters> {
    Engine::try_get().map(|e| &e.counters)
}

impl Recorder {
    fn open(cfg: RecordConfig) -> Result<Recorder, String> {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let (log, times) = cfg.paths(pid);
        let create = |p: &str| {
            File::create(p)
                .map(|f| BufWriter::with_capacity(1 << 16, f))
                .map_err(|e| format!("cannot create {p}: {e}"))
        };
        Ok(Recorder {
            queue: BoundedQueue::new(cfg.queue),
            sink: Mutex::new(Sink {
                log: create(&log)?,
                times: create(&times)?,
                bytes: 0,
                stopped: false,
                line: String::with_capacity(512),
            }),
            over: AtomicBool::new(false),
            pid,
            cfg,
        })
    }

    #[inline]
    fn push(&self, call: Call) {
        if self.over.load(Ordering::Relaxed) {
            if let Some(c) = counters() {
                c.record_over_limit.incr();
            }
            return;
        }
        let e = Entry {
            // SAFETY: pthread_self has no preconditions.
            tid: unsafe { libc::pthread_self() } as u64,
            ts: now_ns(),
            call,
        };
        if self.queue.push(e).is_err() {
            if let Some(c) = counters() {
                c.record_dropped.incr();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes up to `max` queued calls; returns how many were taken.
    fn drain(&self, sink: &mut Sink, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(e) = self.queue.pop() else { break };
            n += 1;
            self.write(sink, &e);
        }
        n
    }

    fn write(&self, sink: &mut Sink, e: &Entry) {
        let c = counters();
        if sink.stopped {
            if let Some(c) = c {
                c.record_over_limit.incr();
            }
            return;
        }
        sink.line.clear();
        format_call(&mut sink.line, e.tid, &e.call);
        let at = sink.line.len();
        let _ = writeln!(sink.line, "{}", e.ts);
        let (text, time) = sink.line.split_at(at);
        let need = sink.line.len() as u64;
        if sink.bytes + need > self.cfg.limit {
            self.stop(sink, &format!(
                "recording reached EVRING_RECORD_LIMIT ({} bytes); later calls are counted (record_over_limit), not logged",
                self.cfg.limit
            ));
            if let Some(c) = c {
                c.record_over_limit.incr();
            }
            return;
        }
        let ok = sink.log.write_all(text.as_bytes()).is_ok()
            && sink.times.write_all(time.as_bytes()).is_ok();
        if ok {
            sink.bytes += need;
            if let Some(c) = c {
                c.record_lines.incr();
            }
        } else {
            if let Some(c) = c {
                c.write_errors.incr();
                c.record_dropped.incr();
            }
            self.stop(sink, "recording stopped: write failed");
        }
    }

    fn stop(&self, sink: &mut Sink, why: &str) {
        sink.stopped = true;
        self.over.store(true, Ordering::Relaxed);
        if let Some(e) = Engine::try_get() {
            crate::log::warn(e, why);
        }
    }

    fn flush_files(&self, sink: &mut Sink) {
        let ok = sink.log.flush().is_ok() && sink.times.flush().is_ok();
        if !ok && !sink.stopped {
            if let Some(c) = counters() {
                c.write_errors.incr();
            }
            self.stop(sink, "recording stopped: flush failed");
        }
    }

    /// Drains everything queued now and flushes both files.
    fn flush(&self) {
        // A forked child shares our file offsets; only the process that
        // opened the files writes them.
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != self.pid {
            return;
        }
        let mut sink = self.lock();
        // Bounded: producers may keep pushing while we drain.
        let mut left = self.queue.capacity() * 2;
        loop {
            let n = self.drain(&mut sink, left.min(BATCH));
            left -= n;
            if n == 0 || left == 0 {
                break;
            }
        }
        self.flush_files(&mut sink);
    }
}

fn run() {
    let Some(Some(r)) = REC.get() else { return };
    loop {
        let n = {
            let mut sink = r.lock();
            let n = r.drain(&mut sink, BATCH);
            if n > 0 && r.queue.is_empty() {
                r.flush_files(&mut sink);
            }
            n
        };
        if n == 0 {
            std::thread::park_timeout(IDLE);
        }
    }
}

extern "C" fn on_exit() {
    let _ = std::panic::catch_unwind(flush);
}

/// In a forked child (atfork handler): stop recording; the call log belongs
/// to the parent. Async-signal-safe (one atomic store).
pub(crate) fn forget_after_fork() {
    line().recording.store(false, Ordering::Release);
}

/// The recorder when recording is on.
#[inline]
fn active() -> Option<&'static Recorder> {
    if !line().recording.load(Ordering::Relaxed) {
        return None;
    }
    REC.get().and_then(Option::as_ref)
}

/// Sets recording up from the environment (first call only) and reports
/// whether it is on.
fn setup() -> Option<&'static Recorder> {
    REC.get_or_init(|| {
        let cfg = RecordConfig::from_lookup(|k| std::env::var(k).ok())?;
        match Recorder::open(cfg) {
            Ok(r) => Some(r),
            Err(why) => {
                if let Some(e) = Engine::try_get() {
                    crate::log::warn(e, &format!("recording off: {why}"));
                }
                None
            }
        }
    })
    .as_ref()
    .inspect(|_| {
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            // Without a thread the queue is still drained at finalize and exit.
            if let Ok(h) = std::thread::Builder::new()
                .name("evring-record".into())
                .spawn(run)
            {
                let _ = THREAD.set(h.thread().clone());
            }
            // SAFETY: `on_exit` is a plain extern "C" fn that never unwinds
            // (it catches panics), as atexit requires; the library is linked
            // `-z nodelete`, so it stays mapped until exit.
            unsafe { libc::atexit(on_exit) };
            line().recording.store(true, Ordering::Release);
        });
    })
}

// ---- hooks, one per entry point --------------------------------------------

/// `init` returned `ctx` (cold: also sets recording up on first use).
pub fn init(ctx: u64, comm_id: u64, rank: i32, mask_ptr: *mut std::ffi::c_int) {
    if let Some(r) = setup() {
        r.push(Call::Init {
            ctx,
            comm_id,
            rank,
            mask_ptr: mask_ptr as u64,
        });
    }
}

/// A descriptor of any ABI version, as the log records it.
pub trait Descr {
    /// `type`, `parentObj`, `rank`.
    fn header(&self) -> (u64, u64, i32);
    /// The 11 words of the v5/v6 union: NCCL's own bytes for v5/v6; for older
    /// versions the converted fields laid out as v6 (strings as NULL, the
    /// name field carries func).
    fn words(&self, arg: Option<&StartArg>) -> [u64; WORDS];
}

impl Descr for DescrV6 {
    fn header(&self) -> (u64, u64, i32) {
        (self.ty, self.parent_obj as u64, self.rank)
    }

    fn words(&self, _: Option<&StartArg>) -> [u64; WORDS] {
        // SAFETY: the union is 88 bytes inside a descriptor NCCL keeps
        // readable for the call; it is read as plain words (the fixture
        // recorder's view), never as a typed member.
        unsafe { std::ptr::read_unaligned(std::ptr::addr_of!(self.u).cast::<[u64; WORDS]>()) }
    }
}

impl Descr for crate::abi::DescrV7 {
    fn header(&self) -> (u64, u64, i32) {
        (self.ty, self.parent_obj as u64, self.rank)
    }

    /// v7's members begin as v6's (the v7 fields come after them), so the
    /// union's first 88 bytes are the v6 words; KernelPhase's own member
    /// fits in them too. The v7 fields past them are not logged.
    fn words(&self, _: Option<&StartArg>) -> [u64; WORDS] {
        // SAFETY: the union is 112 bytes inside a descriptor NCCL keeps
        // readable for the call; its first 88 are read as plain words.
        unsafe { std::ptr::read_unaligned(std::ptr::addr_of!(self.u).cast::<[u64; WORDS]>()) }
    }
}

macro_rules! old_descr {
    ($($t:ty),*) => {$(
        impl Descr for $t {
            fn header(&self) -> (u64, u64, i32) {
                (u64::from(self.ty), self.parent_obj as u64, self.rank)
            }

            fn words(&self, arg: Option<&StartArg>) -> [u64; WORDS] {
                arg.map(|a| encode(&a.info)).unwrap_or_default()
            }
        }
    )*};
}
old_descr!(DescrV4, DescrV3, DescrV2, DescrV1);

/// `startEvent` gave `handle` for `d` (`arg`: its conversion, `None` for an
/// unknown type). Call before the handle is written back to NCCL.
///
/// # Safety
/// `d` points to a readable descriptor for the duration of the call.
#[inline]
pub unsafe fn start<D: Descr>(ctx: u64, d: *const D, arg: Option<&StartArg>, handle: u64) {
    if let Some(r) = active() {
        // SAFETY: the caller guarantees `d` is readable.
        start_slow(r, ctx, unsafe { &*d }, arg, handle);
    }
}

#[cold]
fn start_slow<D: Descr>(r: &Recorder, ctx: u64, d: &D, arg: Option<&StartArg>, handle: u64) {
    let (ty, parent, rank) = d.header();
    r.push(Call::Start {
        handle,
        ctx,
        ty,
        parent,
        rank,
        name: arg
            .and_then(|a| a.info.func().copied())
            .map_or(Str16::EMPTY, crate::symbols::resolve),
        words: d.words(arg),
    });
}

/// `stopEvent(handle)`.
#[inline]
pub fn stop(handle: u64) {
    if let Some(r) = active() {
        r.push(Call::Stop { handle });
    }
}

/// `recordEventState(handle, state, args)`; `args` is NCCL's state-args
/// pointer of any version (each starts with an 8-byte word).
///
/// # Safety
/// `args` is NULL or points to at least 8 readable bytes.
#[inline]
pub unsafe fn rec(handle: u64, state: i32, args: *const u64) {
    if let Some(r) = active() {
        // SAFETY: the caller guarantees `args` is NULL or readable for 8 bytes.
        let arg = (!args.is_null()).then(|| unsafe { args.read_unaligned() });
        r.push(Call::Rec { handle, state, arg });
    }
}

/// `finalize(ctx)` (pushed on entry; [`flush`] follows at its end).
#[inline]
pub fn fin(ctx: u64) {
    if let Some(r) = active() {
        r.push(Call::Fin { ctx });
    }
}

/// The recording thread, if it could be started.
static THREAD: OnceLock<std::thread::Thread> = OnceLock::new();

/// At finalize: wakes the recording thread, which writes and flushes what is
/// queued; the finalizing (NCCL) thread neither writes nor waits for the log's
/// lock. Without a recording thread it drains the queue itself, as before.
pub fn nudge() {
    if active().is_none() {
        return;
    }
    match THREAD.get() {
        Some(t) => t.unpark(),
        None => flush(),
    }
}

/// Writes out everything queued so far (`evring_flush`, exit).
pub fn flush() {
    if let Some(r) = active() {
        r.flush();
    }
}

// ---- text ------------------------------------------------------------------

/// `%p`: `0x…`, `(nil)` for NULL.
fn ptr(out: &mut String, v: u64) {
    if v == 0 {
        out.push_str("(nil)");
    } else {
        let _ = write!(out, "{v:#x}");
    }
}

/// The name field: one token of printable ASCII, `-` when there is none.
fn name(out: &mut String, s: &Str16) {
    let b = s.as_bytes();
    if b.is_empty() {
        out.push('-');
        return;
    }
    out.extend(
        b.iter()
            .map(|&c| if c.is_ascii_graphic() { c as char } else { '?' }),
    );
}

/// One log line (with its newline), in the fixture recorder's format.
pub fn format_call(out: &mut String, tid: u64, call: &Call) {
    let _ = write!(out, "{tid:x} ");
    match call {
        Call::Init {
            ctx,
            comm_id,
            rank,
            mask_ptr,
        } => {
            out.push_str("INIT ");
            ptr(out, *ctx);
            let _ = write!(out, " {comm_id:x} {rank} ");
            ptr(out, *mask_ptr);
        }
        Call::Start {
            handle,
            ctx,
            ty,
            parent,
            rank,
            name: n,
            words,
        } => {
            out.push_str("START ");
            ptr(out, *handle);
            out.push(' ');
            ptr(out, *ctx);
            let _ = write!(out, " {ty} ");
            ptr(out, *parent);
            let _ = write!(out, " {rank} ");
            name(out, n);
            for w in words {
                let _ = write!(out, " {w:x}");
            }
        }
        Call::Stop { handle } => {
            out.push_str("STOP ");
            ptr(out, *handle);
        }
        Call::Rec { handle, state, arg } => {
            out.push_str("REC ");
            ptr(out, *handle);
            let _ = write!(out, " {state} ");
            match arg {
                None => out.push_str("dead"),
                // The fixture format reads a bare `dead` as NULL.
                Some(0xdead) => out.push_str("0xdead"),
                Some(v) => {
                    let _ = write!(out, "{v:x}");
                }
            }
        }
        Call::Fin { ctx } => {
            out.push_str("FIN ");
            ptr(out, *ctx);
        }
    }
    out.push('\n');
}

// ---- pre-v5 descriptors laid out as v6 -------------------------------------

struct Bytes([u8; WORDS * 8]);

impl Bytes {
    fn put(&mut self, off: usize, b: &[u8]) {
        self.0[off..off + b.len()].copy_from_slice(b);
    }
    fn u8(&mut self, off: usize, v: u8) {
        self.put(off, &[v]);
    }
    fn i32(&mut self, off: usize, v: i32) {
        self.put(off, &v.to_le_bytes());
    }
    fn u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_le_bytes());
    }
}

/// The v6 union words of a converted descriptor. Strings are left NULL (the
/// log's name field carries func); everything else is the converted value.
pub fn encode<S>(info: &Info<S>) -> [u64; WORDS] {
    let mut b = Bytes([0; WORDS * 8]);
    match *info {
        Info::None => {}
        Info::GroupApi {
            graph_captured,
            depth,
        } => {
            b.u8(
                offset_of!(GroupApiV5, graph_captured),
                graph_captured.into(),
            );
            b.i32(offset_of!(GroupApiV5, group_depth), depth);
        }
        Info::CollApi {
            count,
            root,
            stream,
            graph_captured,
            ..
        } => {
            b.u64(offset_of!(CollApiV5, count), count);
            b.i32(offset_of!(CollApiV5, root), root);
            b.u64(offset_of!(CollApiV5, stream), stream);
            b.u8(offset_of!(CollApiV5, graph_captured), graph_captured.into());
        }
        Info::P2pApi {
            count,
            stream,
            graph_captured,
            ..
        } => {
            b.u64(offset_of!(P2pApiV5, count), count);
            b.u64(offset_of!(P2pApiV5, stream), stream);
            b.u8(offset_of!(P2pApiV5, graph_captured), graph_captured.into());
        }
        Info::KernelLaunch { stream } => b.u64(offset_of!(KernelLaunchV5, stream), stream),
        Info::Coll {
            seq,
            count,
            root,
            n_channels,
            n_warps,
            parent_group,
            ..
        } => {
            b.u64(offset_of!(CollV5, seq_number), seq);
            b.u64(offset_of!(CollV5, count), count);
            b.i32(offset_of!(CollV5, root), root);
            b.u8(offset_of!(CollV5, n_channels), n_channels);
            b.u8(offset_of!(CollV5, n_warps), n_warps);
            b.u64(offset_of!(CollV5, parent_group), parent_group);
        }
        Info::P2p {
            count,
            peer,
            n_channels,
            parent_group,
            ..
        } => {
            b.u64(offset_of!(P2pV5, count), count);
            b.i32(offset_of!(P2pV5, peer), peer);
            b.u8(offset_of!(P2pV5, n_channels), n_channels);
            b.u64(offset_of!(P2pV5, parent_group), parent_group);
        }
        Info::ProxyOp {
            pid,
            channel,
            peer,
            n_steps,
            chunk_size,
            is_send,
        } => {
            b.i32(offset_of!(ProxyOpD, pid), pid);
            b.u8(offset_of!(ProxyOpD, channel_id), channel);
            b.i32(offset_of!(ProxyOpD, peer), peer);
            b.i32(offset_of!(ProxyOpD, n_steps), n_steps);
            b.i32(offset_of!(ProxyOpD, chunk_size), chunk_size);
            b.i32(offset_of!(ProxyOpD, is_send), is_send.into());
        }
        Info::ProxyStep { step } => b.i32(offset_of!(ProxyStepD, step), step),
        Info::KernelCh { channel, gpu_start } => {
            b.u8(offset_of!(KernelChV4, channel_id), channel);
            b.u64(offset_of!(KernelChV4, p_timer), gpu_start);
        }
        Info::NetPlugin { id } => b.u64(offset_of!(NetPluginD, id), id as u64),
        // v7 only; its member fits v6's union (the log keeps v6's words).
        Info::KernelPhase {
            channel,
            phase,
            gpu_start,
        } => {
            b.u8(offset_of!(crate::abi::KernelPhaseV7, channel_id), channel);
            b.u8(offset_of!(crate::abi::KernelPhaseV7, phase_id), phase);
            b.u64(offset_of!(crate::abi::KernelPhaseV7, p_timer), gpu_start);
        }
        Info::CeColl {
            seq,
            count,
            root,
            stream,
            ..
        } => {
            b.u64(offset_of!(CeCollV6, seq_number), seq);
            b.u64(offset_of!(CeCollV6, count), count);
            b.i32(offset_of!(CeCollV6, root), root);
            b.u64(offset_of!(CeCollV6, stream), stream);
        }
        Info::CeSync { complete, n_ranks } => {
            b.u8(offset_of!(CeSyncV6, is_complete), complete.into());
            b.i32(offset_of!(CeSyncV6, n_ranks), n_ranks);
        }
        Info::CeBatch {
            num_ops,
            total_bytes,
            intra_sync,
        } => {
            b.i32(offset_of!(CeBatchV6, num_ops), num_ops);
            b.u64(offset_of!(CeBatchV6, total_bytes), total_bytes);
            b.u8(offset_of!(CeBatchV6, use_intra_sync), intra_sync.into());
        }
    }
    let mut w = [0u64; WORDS];
    for (w, c) in w.iter_mut().zip(b.0.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        *w = u64::from_le_bytes(a);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::ty;

    fn line(call: Call) -> String {
        let mut s = String::new();
        format_call(&mut s, 0x7f00, &call);
        s
    }

    #[test]
    fn lines_match_the_fixture_format() {
        assert_eq!(
            line(Call::Init {
                ctx: 0x10001,
                comm_id: 0xe03c,
                rank: 1,
                mask_ptr: 0x7faf
            }),
            "7f00 INIT 0x10001 e03c 1 0x7faf\n"
        );
        let mut words = [0u64; WORDS];
        words[0] = 0x7faf_6fe0;
        words[1] = 0x40_0000;
        assert_eq!(
            line(Call::Start {
                handle: 3,
                ctx: 0x10001,
                ty: ty::COLL_API,
                parent: 2,
                rank: 0,
                name: Str16::from_bytes(b"AllReduce"),
                words
            }),
            "7f00 START 0x3 0x10001 512 0x2 0 AllReduce 7faf6fe0 400000 0 0 0 0 0 0 0 0 0\n"
        );
        assert_eq!(
            line(Call::Start {
                handle: 0,
                ctx: 0,
                ty: ty::GROUP,
                parent: 0,
                rank: -1,
                name: Str16::from_bytes(b"a b\x01"),
                words: [0; WORDS]
            }),
            "7f00 START (nil) (nil) 1 (nil) -1 a?b? 0 0 0 0 0 0 0 0 0 0 0\n"
        );
        assert_eq!(line(Call::Stop { handle: 0x2a }), "7f00 STOP 0x2a\n");
        let rec = |arg| {
            line(Call::Rec {
                handle: 2,
                state: 23,
                arg,
            })
        };
        assert_eq!(rec(None), "7f00 REC 0x2 23 dead\n");
        assert_eq!(rec(Some(0x18)), "7f00 REC 0x2 23 18\n");
        assert_eq!(rec(Some(0xdead)), "7f00 REC 0x2 23 0xdead\n");
        assert_eq!(line(Call::Fin { ctx: 0x10001 }), "7f00 FIN 0x10001\n");
    }

    #[test]
    fn sizes_and_config() {
        assert!(std::mem::size_of::<Entry>() <= 160);
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("0x10k"), Some(16 << 10));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("x"), None);
        assert_eq!(RecordConfig::from_lookup(|_| None), None);
        let c = RecordConfig::from_lookup(|k| match k {
            "EVRING_RECORD" => Some("/tmp/r-".into()),
            "EVRING_RECORD_QUEUE" => Some("1".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((c.limit, c.queue), (DEFAULT_LIMIT, 16));
        assert_eq!(
            c.paths(42),
            ("/tmp/r-42.log".to_string(), "/tmp/r-42.times".to_string())
        );
    }

    /// Converting a v6 descriptor and laying it out again gives NCCL's own
    /// words wherever the field is not a string pointer. Fields are written
    /// one by one so that padding keeps the zeroed descriptor's bytes.
    #[test]
    fn encode_inverts_convert() {
        let mut d = DescrV6::zeroed();
        d.ty = ty::COLL;
        d.u.coll.seq_number = 7;
        d.u.coll.count = 1 << 20;
        d.u.coll.root = 3;
        d.u.coll.n_channels = 24;
        d.u.coll.n_warps = 17;
        d.u.coll.parent_group = 0x55 as *mut _;
        check(&d);
        let mut d = DescrV6::zeroed();
        d.ty = ty::PROXY_OP;
        d.u.proxy_op.pid = 861;
        d.u.proxy_op.channel_id = 5;
        d.u.proxy_op.peer = 1;
        d.u.proxy_op.n_steps = 8;
        d.u.proxy_op.chunk_size = 4 << 20;
        d.u.proxy_op.is_send = 1;
        check(&d);
        let mut d = DescrV6::zeroed();
        d.ty = ty::KERNEL_CH;
        d.u.kernel_ch.channel_id = 9;
        d.u.kernel_ch.p_timer = 0x18ec_87e6_4040_54a0;
        check(&d);
        let mut d = DescrV6::zeroed();
        d.ty = ty::GROUP_API;
        d.u.group_api.graph_captured = true;
        d.u.group_api.group_depth = 3;
        check(&d);
        let mut d = DescrV6::zeroed();
        d.ty = ty::CE_BATCH;
        d.u.ce_batch.num_ops = 4;
        d.u.ce_batch.total_bytes = 1 << 30;
        d.u.ce_batch.use_intra_sync = true;
        check(&d);
    }

    fn check(d: &DescrV6) {
        // SAFETY: `d` is a valid descriptor on our stack.
        let arg = unsafe { crate::convert::start_v6(d, None) }.unwrap();
        assert_eq!(encode(&arg.info), d.words(Some(&arg)), "type {}", d.ty);
    }
}
