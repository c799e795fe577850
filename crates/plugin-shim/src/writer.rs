//! The writer: drains the completed-record ring and streams Chrome trace JSON,
//! one file per communicator and rank.
//!
//! Files use the JSON-array form of the Chrome trace format. Each record
//! becomes an async begin/end pair keyed by its ID, and the file is flushed
//! every 200 ms, so a killed job leaves a trace that Perfetto and
//! chrome://tracing still load (both accept a missing closing `]`). Finalize
//! appends a summary event with every counter and closes the array.
//!
//! The ring has one consumer at a time: whoever holds the state lock (the
//! writer thread, or a finalizing thread flushing its communicator).

use crate::clock::{gpu_offset, gpu_to_host, now_ns};
use crate::engine::{Engine, DETACHED};
use crate::model::{Info, Kind};
use crate::node::flag;
use crate::record::Record;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

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
    meta: StreamMeta,
    path: String,
    out: Option<BufWriter<File>>,
    records: u64,
    warned: bool,
}

#[derive(Default)]
struct State {
    streams: HashMap<u64, Stream>,
    /// Files finished this process (a second open of the same name gets a suffix).
    used_paths: HashMap<String, u32>,
    /// Streams already closed: a record that still arrives for one (an event
    /// that raced its communicator's finalize) is counted, not written.
    closed: std::collections::HashSet<u64>,
    last_flush: u64,
}

pub struct Writer {
    prefix: Option<String>,
    state: Mutex<State>,
    thread: OnceLock<Thread>,
    enabled: AtomicBool,
}

const FLUSH_EVERY_NS: u64 = 200_000_000;
const SWEEP_EVERY_NS: u64 = 50_000_000;
/// Records drained per lock hold, so a finalizing thread never waits long.
const BATCH: usize = 4096;

impl Writer {
    pub fn new(prefix: Option<String>) -> Writer {
        Writer {
            prefix,
            state: Mutex::new(State::default()),
            thread: OnceLock::new(),
            enabled: AtomicBool::new(true),
        }
    }

    /// Turns trace output on or off at run time (records are still counted).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn ensure_started(&'static self) {
        self.thread.get_or_init(|| {
            match std::thread::Builder::new()
                .name("evring-writer".into())
                .spawn(run)
            {
                Ok(h) => h.thread().clone(),
                // No thread: finalize and exit still drain; sweeps only run there.
                Err(_) => std::thread::current(),
            }
        });
    }

    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn open(&self, ctx: u64, meta: StreamMeta) {
        if self.prefix.is_none() {
            return;
        }
        let path = self.path_for(ctx, &meta);
        let mut st = self.lock();
        let path = unique(&mut st.used_paths, path);
        st.streams.insert(
            ctx,
            Stream {
                meta,
                path,
                out: None,
                records: 0,
                warned: false,
            },
        );
    }

    fn path_for(&self, ctx: u64, meta: &StreamMeta) -> String {
        let prefix = self.prefix.as_deref().unwrap_or("evring");
        if ctx == DETACHED {
            // SAFETY: getpid has no preconditions.
            format!("{prefix}_detached_{}.json", unsafe { libc::getpid() })
        } else if meta.abi >= 4 {
            format!("{prefix}_{}_{}.json", meta.comm_id, meta.rank)
        } else {
            // v1-v3 init carries no communicator identity.
            // SAFETY: as above.
            format!("{prefix}_pid{}_ctx{ctx:x}.json", unsafe { libc::getpid() })
        }
    }

    /// Drains the ring, writes the footer of `ctx` and closes its file.
    pub fn close(&self, ctx: u64, engine: &Engine) {
        let mut st = self.lock();
        while drain(&mut st, engine, self, usize::MAX) > 0 {}
        if let Some(s) = st.streams.remove(&ctx) {
            finish(s, engine, true);
        }
        if ctx != DETACHED {
            st.closed.insert(ctx);
        }
    }

    /// Forgets which streams were closed, once every context has been retired
    /// (after the last finalize nothing can still complete for them), so the
    /// set does not grow with every communicator a long job creates.
    pub fn forget_closed(&self) {
        self.lock().closed.clear();
    }

    /// Process exit: drain and close every stream, marked not finalized.
    pub fn close_all(&self, engine: &Engine) {
        let mut st = self.lock();
        while drain(&mut st, engine, self, usize::MAX) > 0 {}
        let streams: Vec<_> = st.streams.drain().map(|(_, s)| s).collect();
        for s in streams {
            finish(s, engine, false);
        }
    }

    /// Drains the ring and flushes every file now (exported as `evring_flush`).
    pub fn flush(&self, engine: &Engine) {
        let mut st = self.lock();
        while drain(&mut st, engine, self, usize::MAX) > 0 {}
        flush_all(&mut st, engine);
    }
}

fn unique(used: &mut HashMap<String, u32>, path: String) -> String {
    let n = used.entry(path.clone()).or_insert(0);
    *n += 1;
    if *n == 1 {
        path
    } else {
        match path.strip_suffix(".json") {
            Some(stem) => format!("{stem}.{n}.json"),
            None => format!("{path}.{n}"),
        }
    }
}

fn run() {
    let Some(engine) = Engine::try_get() else {
        return;
    };
    let mut last_sweep = 0;
    loop {
        let drained = {
            let mut st = engine.writer.lock();
            let n = drain(&mut st, engine, &engine.writer, BATCH);
            let now = now_ns();
            if now - st.last_flush > FLUSH_EVERY_NS {
                flush_all(&mut st, engine);
                st.last_flush = now;
            }
            n
        };
        let now = now_ns();
        if now - last_sweep > SWEEP_EVERY_NS || engine.events.live() > engine.cfg.high_water {
            engine.sweep();
            last_sweep = now;
        }
        if drained == 0 {
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }
}

/// Pops up to `max` records and writes each to its stream; returns how many.
fn drain(st: &mut State, engine: &Engine, w: &Writer, max: usize) -> usize {
    let (mut n, mut written, mut unwritten) = (0usize, 0u64, 0u64);
    let enabled = w.enabled.load(Ordering::Relaxed) && w.prefix.is_some();
    let mut line = String::with_capacity(1024);
    while n < max {
        let Some(rec) = engine.ring.pop() else { break };
        n += 1;
        if !enabled {
            unwritten += 1;
            continue;
        }
        if st.closed.contains(&rec.ctx) {
            unwritten += 1;
            continue;
        }
        if !st.streams.contains_key(&rec.ctx) {
            let meta = StreamMeta::default();
            let path = unique(&mut st.used_paths, w.path_for(rec.ctx, &meta));
            st.streams.insert(
                rec.ctx,
                Stream {
                    meta,
                    path,
                    out: None,
                    records: 0,
                    warned: false,
                },
            );
        }
        let Some(s) = st.streams.get_mut(&rec.ctx) else {
            continue;
        };
        line.clear();
        format_record(&mut line, &rec, engine.pid);
        if write(s, engine, line.as_bytes()) {
            s.records += 1;
            written += 1;
        } else {
            unwritten += 1;
        }
    }
    // Counted once per batch: the writer is the ring's only consumer.
    let c = &engine.counters;
    c.records_consumed.add(n as u64);
    c.records_written.add(written);
    c.records_unwritten.add(unwritten);
    n
}

/// Writes bytes, opening the file (with its header) on first use. On any
/// error the stream stops writing, warns once, and counts.
fn write(s: &mut Stream, engine: &Engine, bytes: &[u8]) -> bool {
    if s.warned {
        return false;
    }
    if s.out.is_none() {
        match File::create(&s.path) {
            Ok(f) => {
                let mut out = BufWriter::with_capacity(1 << 16, f);
                let header = header(&s.meta, engine.pid);
                if out.write_all(header.as_bytes()).is_err() {
                    return fail(s, engine, "cannot write header");
                }
                s.out = Some(out);
            }
            Err(e) => return fail(s, engine, &format!("cannot create: {e}")),
        }
    }
    match s.out.as_mut().map(|o| o.write_all(bytes)) {
        Some(Ok(())) => true,
        Some(Err(e)) => fail(s, engine, &format!("write failed: {e}")),
        None => false,
    }
}

fn fail(s: &mut Stream, engine: &Engine, why: &str) -> bool {
    engine.counters.write_errors.incr();
    if !s.warned {
        s.warned = true;
        crate::log::warn(
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
    for s in st.streams.values_mut() {
        if let Some(Err(e)) = s.out.as_mut().map(|o| o.flush()) {
            fail(s, engine, &format!("flush failed: {e}"));
        }
    }
}

fn finish(mut s: Stream, engine: &Engine, finalized: bool) {
    let stats = engine.stats();
    let c = &engine.counters;
    let complete = finalized
        && c.start_drops() == 0
        && stats.drop_ring_full == 0
        && stats.write_errors == 0
        && stats.records_unwritten == 0
        && !s.warned;
    let mut footer = String::with_capacity(2048);
    let _ = write!(
        footer,
        "{{\"name\":\"evring.summary\",\"cat\":\"evring\",\"ph\":\"i\",\"s\":\"g\",\"pid\":{},\"tid\":0,\"ts\":{},\"args\":{{\"finalized\":{finalized},\"complete\":{complete},\"stream_records\":{}",
        engine.pid,
        us(now_ns()),
        s.records + 1
    );
    if let Some(off) = gpu_offset() {
        let _ = write!(footer, ",\"gpu_offset_ns\":{off}");
    }
    for (k, v) in stats.fields() {
        let _ = write!(footer, ",\"{k}\":{v}");
    }
    footer.push_str("}}\n]\n");
    if write(&mut s, engine, footer.as_bytes()) {
        engine.counters.records_written.incr();
    }
    if let Some(mut out) = s.out.take() {
        if let Err(e) = out.flush() {
            fail(&mut s, engine, &format!("flush failed: {e}"));
        }
    }
}

fn header(m: &StreamMeta, pid: i32) -> String {
    let mut h = String::from("[\n");
    let mut name = format!("evring rank {} comm {:#x}", m.rank, m.comm_id);
    if let Some(n) = &m.name {
        let _ = write!(name, " ({n})");
    }
    let _ = writeln!(
        h,
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"{}\"}}}},",
        escape(&name)
    );
    let _ = writeln!(
        h,
        "{{\"name\":\"evring.stream\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"comm_id\":{},\"rank\":{},\"nranks\":{},\"nnodes\":{},\"abi\":{},\"clock\":\"CLOCK_MONOTONIC us\"}}}},",
        m.comm_id, m.rank, m.nranks, m.nnodes, m.abi
    );
    for (tid, lane) in [
        (1, "API"),
        (2, "Tasks"),
        (3, "Proxy"),
        (4, "ProxyCtrl"),
        (5, "GPU"),
    ] {
        let _ = writeln!(
            h,
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"{lane}\"}}}},"
        );
    }
    h
}

fn lane(kind: Kind) -> u32 {
    match kind {
        Kind::GroupApi | Kind::CollApi | Kind::P2pApi | Kind::KernelLaunch => 1,
        Kind::Group | Kind::Coll | Kind::P2p | Kind::CeColl | Kind::CeSync | Kind::CeBatch => 2,
        Kind::ProxyOp | Kind::ProxyStep | Kind::NetPlugin => 3,
        Kind::ProxyCtrl => 4,
        Kind::KernelCh => 5,
    }
}

/// Microseconds with three decimals, the unit Chrome traces use.
struct Us(u64);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

fn us(ns: u64) -> Us {
    Us(ns)
}

fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One record as a Chrome-trace async begin/end pair.
pub fn format_record(out: &mut String, r: &Record, pid: i32) {
    let func = r.info.func().map(|f| f.as_str());
    let name = match &func {
        Some(f) if !f.is_empty() => escape(f),
        _ => std::borrow::Cow::Borrowed(r.kind.name()),
    };
    let (mut begin, mut end) = (r.start_ns, r.end_ns);
    if r.kind == Kind::KernelCh {
        // Device lane: GPU times mapped to the host clock when both are known.
        if let (Some(b), Some(e)) = (gpu_to_host(r.gpu_start), gpu_to_host(r.gpu_end)) {
            if e >= b {
                (begin, end) = (b, e);
            }
        }
    }
    let cat = r.kind.name();
    let tid = lane(r.kind);
    let _ = write!(
        out,
        "{{\"name\":\"{name}\",\"cat\":\"{cat}\",\"ph\":\"b\",\"id\":\"{:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"args\":{{\"id\":\"{:#x}\",\"parent\":\"{:#x}\",\"rank\":{},\"timing\":\"{}\",\"start_ns\":{},\"stop_ns\":{},\"end_ns\":{}",
        r.id,
        us(begin),
        r.id,
        r.parent,
        r.rank,
        r.timing.name(),
        r.start_ns,
        r.stop_ns,
        r.end_ns,
    );
    if r.gpu_end != 0 || r.gpu_start != 0 {
        let _ = write!(
            out,
            ",\"gpu_start\":{},\"gpu_end\":{}",
            r.gpu_start, r.gpu_end
        );
    }
    info_args(out, &r.info);
    if r.n_states > 0 {
        out.push_str(",\"states\":[");
        for (i, (s, t)) in r.states[..r.n_states as usize].iter().enumerate() {
            let _ = write!(out, "{}[{s},{t}]", if i > 0 { "," } else { "" });
        }
        out.push(']');
        if r.state_arg != 0 {
            let _ = write!(out, ",\"state_arg\":{}", r.state_arg);
        }
    }
    let flags = r.flags;
    if flags & !flag::STOPPED != 0 {
        out.push_str(",\"flags\":[");
        let mut first = true;
        for (bit, fname) in flag::NAMES {
            if flags & bit != 0 && bit != flag::STOPPED {
                let _ = write!(out, "{}\"{fname}\"", if first { "" } else { "," });
                first = false;
            }
        }
        out.push(']');
    }
    let _ = writeln!(
        out,
        "}}}},\n{{\"name\":\"{name}\",\"cat\":\"{cat}\",\"ph\":\"e\",\"id\":\"{:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{}}},",
        r.id,
        us(end.max(begin)),
    );
}

fn info_args(out: &mut String, info: &Info) {
    let s = |x: &crate::strings::Str16| escape(&x.as_str()).into_owned();
    let _ = match info {
        Info::None => Ok(()),
        Info::GroupApi { graph_captured, depth } => write!(out, ",\"graph_captured\":{graph_captured},\"depth\":{depth}"),
        Info::CollApi { count, datatype, root, stream, graph_captured, .. } => write!(
            out,
            ",\"count\":{count},\"datatype\":\"{}\",\"root\":{root},\"stream\":\"{stream:#x}\",\"graph_captured\":{graph_captured}",
            s(datatype)
        ),
        Info::P2pApi { count, datatype, stream, graph_captured, .. } => write!(
            out,
            ",\"count\":{count},\"datatype\":\"{}\",\"stream\":\"{stream:#x}\",\"graph_captured\":{graph_captured}",
            s(datatype)
        ),
        Info::KernelLaunch { stream } => write!(out, ",\"stream\":\"{stream:#x}\""),
        Info::Coll { seq, count, root, datatype, n_channels, n_warps, algo, proto, parent_group, .. } => write!(
            out,
            ",\"seq\":{seq},\"count\":{count},\"root\":{root},\"datatype\":\"{}\",\"channels\":{n_channels},\"warps\":{n_warps},\"algo\":\"{}\",\"proto\":\"{}\",\"group\":\"{parent_group:#x}\"",
            s(datatype),
            s(algo),
            s(proto)
        ),
        Info::P2p { datatype, count, peer, n_channels, parent_group, .. } => write!(
            out,
            ",\"count\":{count},\"datatype\":\"{}\",\"peer\":{peer},\"channels\":{n_channels},\"group\":\"{parent_group:#x}\"",
            s(datatype)
        ),
        Info::ProxyOp { pid, channel, peer, n_steps, chunk_size, is_send } => write!(
            out,
            ",\"pid\":{pid},\"channel\":{channel},\"peer\":{peer},\"steps\":{n_steps},\"chunk_size\":{chunk_size},\"send\":{is_send}"
        ),
        Info::ProxyStep { step } => write!(out, ",\"step\":{step}"),
        Info::KernelCh { channel, .. } => write!(out, ",\"channel\":{channel}"),
        Info::NetPlugin { id } => write!(out, ",\"net_id\":{id}"),
        Info::CeColl { seq, count, root, datatype, sync, stream, .. } => write!(
            out,
            ",\"seq\":{seq},\"count\":{count},\"root\":{root},\"datatype\":\"{}\",\"sync\":\"{}\",\"stream\":\"{stream:#x}\"",
            s(datatype),
            s(sync)
        ),
        Info::CeSync { complete, n_ranks } => write!(out, ",\"complete\":{complete},\"nranks\":{n_ranks}"),
        Info::CeBatch { num_ops, total_bytes, intra_sync } => write!(
            out,
            ",\"ops\":{num_ops},\"bytes\":{total_bytes},\"intra_sync\":{intra_sync}"
        ),
    };
}
