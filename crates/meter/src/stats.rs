//! Per-thread accumulators and the report built from them.
//!
//! Every thread that calls the meter gets a [`Block`] on its first call: one [`Cell`] per
//! (function, event type), written by that thread only (relaxed loads and stores, no
//! read-modify-write), read by whoever writes the report. Blocks are kept in a global
//! list, so the calls of threads that have exited still count.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// The five functions of a profiler table, in table order.
pub const FNS: [&str; 5] = ["init", "start", "stop", "record", "finalize"];
/// Index of `init` in [`FNS`].
pub const F_INIT: usize = 0;
/// Index of `startEvent`.
pub const F_START: usize = 1;
/// Index of `stopEvent`.
pub const F_STOP: usize = 2;
/// Index of `recordEventState`.
pub const F_RECORD: usize = 3;
/// Index of `finalize`.
pub const F_FINALIZE: usize = 4;

/// Names of the event-type bits 0 to 15 (`ncclProfile*` without the prefix).
pub use evring_abi::ty::NAMES as TYPE_NAMES;
/// Type slot of a stop/record whose handle's start type is not known (see docs/meter.md),
/// or of a start whose `type` is not one of the 16 known bits.
pub const T_UNKNOWN: usize = 16;
/// Type slot of init and finalize, which have no event type.
pub const T_NONE: usize = 17;
/// Type slots per function.
pub const TYPES: usize = 18;

/// The name of type slot `t` in the report.
pub fn type_name(t: usize) -> &'static str {
    match t {
        0..=15 => TYPE_NAMES[t],
        T_UNKNOWN => "unknown",
        _ => "-",
    }
}

/// The type slot of a descriptor's `type` value: its bit number if exactly one of bits
/// 0..15 is set, else [`T_UNKNOWN`].
#[inline]
pub fn type_slot(ty: u64) -> usize {
    if ty.is_power_of_two() && ty < (1 << 16) {
        ty.trailing_zeros() as usize
    } else {
        T_UNKNOWN
    }
}

/// Histogram buckets: bucket 0 holds calls of 0 ns, bucket `i` calls of `2^(i-1)` to
/// `2^i - 1` ns; the last bucket holds everything above.
pub const BUCKETS: usize = 32;

/// Calls of at least this many ns are "slow" (the first of bucket 13): page faults,
/// system calls, preemption. Their time is also kept apart (`slow_ns`), so that the
/// tables can show a plugin's cost with and without them (`benches/meter.py --body`).
pub const SLOW_NS: u64 = 4096;

/// The bucket of a call of `ns` nanoseconds.
#[inline]
pub fn bucket(ns: u64) -> usize {
    ((64 - ns.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// The accumulators of one (thread, function, type).
pub struct Cell {
    calls: AtomicU64,
    ns: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
    hist: [AtomicU64; BUCKETS],
    /// Total ns of the calls of at least [`SLOW_NS`] (their count: the histogram's
    /// buckets from 13 on).
    slow_ns: AtomicU64,
}

impl Cell {
    fn new() -> Cell {
        Cell {
            calls: AtomicU64::new(0),
            ns: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
            hist: std::array::from_fn(|_| AtomicU64::new(0)),
            slow_ns: AtomicU64::new(0),
        }
    }

    /// Adds one call. Only the owning thread calls this, so plain load+store suffices.
    #[inline]
    fn add(&self, ns: u64) {
        self.calls.store(self.calls.load(Relaxed) + 1, Relaxed);
        self.ns
            .store(self.ns.load(Relaxed).wrapping_add(ns), Relaxed);
        if ns < self.min.load(Relaxed) {
            self.min.store(ns, Relaxed);
        }
        if ns > self.max.load(Relaxed) {
            self.max.store(ns, Relaxed);
        }
        let b = &self.hist[bucket(ns)];
        b.store(b.load(Relaxed) + 1, Relaxed);
        if ns >= SLOW_NS {
            self.slow_ns
                .store(self.slow_ns.load(Relaxed).wrapping_add(ns), Relaxed);
        }
    }
}

/// One thread's accumulators.
pub struct Block {
    tid: i64,
    /// `comm` as read at the thread's first call.
    name: Mutex<String>,
    alive: AtomicBool,
    cells: Vec<Cell>,
}

/// Every block ever made, in order of creation.
static BLOCKS: Mutex<Vec<Arc<Block>>> = Mutex::new(Vec::new());

/// Calls that could not be accounted to a thread (made while the thread's locals were
/// being destroyed).
pub static UNATTRIBUTED: AtomicU64 = AtomicU64::new(0);

/// The owner of this thread's block: marks it dead when the thread exits.
struct Local(Arc<Block>);

impl Drop for Local {
    fn drop(&mut self) {
        self.0.alive.store(false, Relaxed);
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

fn gettid() -> i64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// `/proc/self/task/<tid>/comm` without its newline, or "".
pub fn thread_name(tid: i64) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_default()
}

impl Local {
    fn new() -> Local {
        let tid = gettid();
        let block = Arc::new(Block {
            tid,
            name: Mutex::new(thread_name(tid)),
            alive: AtomicBool::new(true),
            cells: (0..FNS.len() * TYPES).map(|_| Cell::new()).collect(),
        });
        if let Ok(mut v) = BLOCKS.lock() {
            v.push(Arc::clone(&block));
        }
        Local(block)
    }
}

/// Accounts one call of function `f` on event type slot `t` that took `ns`.
#[inline]
pub fn add(f: usize, t: usize, ns: u64) {
    let done = LOCAL.try_with(|l| l.0.cells[f * TYPES + t].add(ns));
    if done.is_err() {
        UNATTRIBUTED.fetch_add(1, Relaxed);
    }
}

/// Registers the calling thread's block now (outside any timed window), so that the
/// first timed call does not pay for it.
pub fn touch() {
    let _ = LOCAL.try_with(|_| ());
}

/// A copy of one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub f: usize,
    pub t: usize,
    pub calls: u64,
    pub ns: u64,
    pub min: u64,
    pub max: u64,
    /// Trimmed after the last non-zero bucket.
    pub hist: Vec<u64>,
    /// Total ns of the calls of at least [`SLOW_NS`].
    pub slow_ns: u64,
}

/// A copy of one thread's block, without its empty cells.
#[derive(Clone, Debug)]
pub struct ThreadSnap {
    pub tid: i64,
    pub name: String,
    pub alive: bool,
    pub rows: Vec<Row>,
}

/// Copies every block with at least one call.
pub fn snapshot() -> Vec<ThreadSnap> {
    let blocks: Vec<Arc<Block>> = match BLOCKS.lock() {
        Ok(v) => v.clone(),
        Err(p) => p.into_inner().clone(),
    };
    let mut out = Vec::new();
    for b in blocks {
        let alive = b.alive.load(Relaxed);
        let mut name = b.name.lock().map(|n| n.clone()).unwrap_or_default();
        if alive {
            // Threads may be named after their first call; a dead thread's tid may be
            // someone else's by now, so only the living are asked again.
            let now = thread_name(b.tid);
            if !now.is_empty() {
                name = now;
            }
        }
        let mut rows = Vec::new();
        for (i, c) in b.cells.iter().enumerate() {
            let calls = c.calls.load(Relaxed);
            if calls == 0 {
                continue;
            }
            let mut hist: Vec<u64> = c.hist.iter().map(|h| h.load(Relaxed)).collect();
            while hist.last() == Some(&0) {
                hist.pop();
            }
            rows.push(Row {
                f: i / TYPES,
                t: i % TYPES,
                calls,
                ns: c.ns.load(Relaxed),
                min: c.min.load(Relaxed).min(c.max.load(Relaxed)),
                max: c.max.load(Relaxed),
                hist,
                slow_ns: c.slow_ns.load(Relaxed),
            });
        }
        if !rows.is_empty() {
            out.push(ThreadSnap {
                tid: b.tid,
                name,
                alive,
                rows,
            });
        }
    }
    out
}

/// Calls in a snapshot, all threads and cells together.
pub fn total_calls(s: &[ThreadSnap]) -> u64 {
    s.iter().flat_map(|t| &t.rows).map(|r| r.calls).sum()
}

/// What the report says about the run besides the threads.
#[derive(Clone, Debug, Default)]
pub struct Meta {
    pub host: String,
    pub pid: i64,
    /// `EVRING_METER_PLUGIN` as given, or "null".
    pub plugin: String,
    /// The inner table's `name`.
    pub plugin_name: String,
    /// The `ncclProfiler_vN` version NCCL called the meter through.
    pub abi: u32,
    /// The activation mask as the inner plugin left it after its last init.
    pub mask: i64,
    pub ns_per_tick: f64,
    /// "finalize" (the last finalize) or "exit" (atexit).
    pub reason: String,
    pub inits: u64,
    pub finalizes: u64,
    pub unattributed: u64,
    /// How stop/record calls were given a type: "handle" (the null plugin's handles carry
    /// it) or "map" (handle to type, recorded at start).
    pub attribution: String,
}

/// Appends `s` as a JSON string.
pub fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The report as one JSON object (docs/meter.md "Output").
pub fn render_json(m: &Meta, threads: &[ThreadSnap]) -> String {
    let mut o = String::with_capacity(4096);
    o.push_str("{\"meter\":\"evring-meter\",\"format\":1,\"host\":");
    json_str(&mut o, &m.host);
    let _ = write!(o, ",\"pid\":{},\"plugin\":", m.pid);
    json_str(&mut o, &m.plugin);
    o.push_str(",\"plugin_name\":");
    json_str(&mut o, &m.plugin_name);
    let npt = if m.ns_per_tick.is_finite() {
        m.ns_per_tick
    } else {
        0.0
    };
    let _ = write!(
        o,
        ",\"abi\":{},\"mask\":{},\"ns_per_tick\":{npt:.6},\"reason\":",
        m.abi, m.mask
    );
    json_str(&mut o, &m.reason);
    let _ = write!(
        o,
        ",\"inits\":{},\"finalizes\":{},\"unattributed\":{},\"attribution\":",
        m.inits, m.finalizes, m.unattributed
    );
    json_str(&mut o, &m.attribution);
    o.push_str(",\"threads\":[");
    for (i, t) in threads.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "\n{{\"tid\":{},\"name\":", t.tid);
        json_str(&mut o, &t.name);
        let _ = write!(o, ",\"alive\":{},\"rows\":[", t.alive);
        for (j, r) in t.rows.iter().enumerate() {
            if j > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "\n {{\"fn\":\"{}\",\"type\":\"{}\",\"calls\":{},\"ns\":{},\"min\":{},\"max\":{},\"slow_ns\":{},\"hist\":[",
                FNS[r.f],
                type_name(r.t),
                r.calls,
                r.ns,
                r.min,
                r.max,
                r.slow_ns
            );
            for (k, h) in r.hist.iter().enumerate() {
                if k > 0 {
                    o.push(',');
                }
                let _ = write!(o, "{h}");
            }
            o.push_str("]}");
        }
        o.push_str("]}");
    }
    o.push_str("]}\n");
    o
}

/// A short human table: one line per (thread, function, type).
pub fn render_table(m: &Meta, threads: &[ThreadSnap]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "evring-meter: inner {:?} ({}) via ncclProfiler_v{}, mask {}, at {} ({} inits, {} finalizes)",
        m.plugin_name, m.plugin, m.abi, m.mask, m.reason, m.inits, m.finalizes
    );
    let _ = writeln!(
        o,
        "evring-meter: {:>8} {:<16} {:<8} {:<12} {:>10} {:>9} {:>7} {:>9}",
        "tid", "thread", "fn", "type", "calls", "mean ns", "min", "max"
    );
    for t in threads {
        for r in &t.rows {
            let mean = r.ns as f64 / r.calls.max(1) as f64;
            let _ = writeln!(
                o,
                "evring-meter: {:>8} {:<16} {:<8} {:<12} {:>10} {:>9.1} {:>7} {:>9}",
                t.tid,
                t.name,
                FNS[r.f],
                type_name(r.t),
                r.calls,
                mean,
                r.min,
                r.max
            );
        }
    }
    if m.unattributed > 0 {
        let _ = writeln!(
            o,
            "evring-meter: {} calls made during thread teardown are not counted",
            m.unattributed
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_slots() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(1023), 10);
        assert_eq!(bucket(1024), 11);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(type_slot(1 << 1), 1);
        assert_eq!(type_slot(1 << 15), 15);
        assert_eq!(type_slot(0), T_UNKNOWN);
        assert_eq!(type_slot(3), T_UNKNOWN);
        assert_eq!(type_slot(1 << 16), T_UNKNOWN);
    }

    #[test]
    fn accumulates_per_thread() {
        add(F_START, 1, 100);
        add(F_START, 1, 300);
        add(F_START, 1, SLOW_NS);
        add(F_START, 1, 5000);
        add(F_STOP, T_UNKNOWN, 7);
        std::thread::spawn(|| add(F_RECORD, 4, 50)).join().unwrap();
        let me = gettid();
        let snap = snapshot();
        let mine = snap.iter().find(|t| t.tid == me).unwrap();
        let r = mine.rows.iter().find(|r| r.f == F_START).unwrap();
        assert_eq!((r.calls, r.ns, r.min, r.max), (4, 9496, 100, 5000));
        assert_eq!(r.hist.iter().sum::<u64>(), 4);
        // 4096 and 5000 ns are in bucket 13: the slow calls are the buckets from 13
        // on, and their time is kept apart.
        assert_eq!(r.hist.len(), 14);
        assert_eq!(r.hist[13], 2);
        assert_eq!(r.slow_ns, SLOW_NS + 5000);
        let dead = snap.iter().find(|t| !t.alive).expect("exited thread kept");
        assert_eq!(dead.rows[0].calls, 1);
        assert_eq!(type_name(dead.rows[0].t), "ProxyStep");
    }

    #[test]
    fn json_parses() {
        let m = Meta {
            host: "h\"o\\st".into(),
            pid: 42,
            plugin: "/x/lib\u{1}.so".into(),
            plugin_name: "evring".into(),
            abi: 6,
            mask: 4095,
            ns_per_tick: 0.3333,
            reason: "finalize".into(),
            inits: 2,
            finalizes: 2,
            unattributed: 0,
            attribution: "map".into(),
        };
        let threads = vec![
            ThreadSnap {
                tid: 7,
                name: "NCCL Progress 0\t".into(),
                alive: false,
                rows: vec![
                    Row {
                        f: F_START,
                        t: 1,
                        calls: 3,
                        ns: 90,
                        min: 20,
                        max: 40,
                        hist: vec![0, 0, 0, 0, 0, 2, 1],
                        slow_ns: 17,
                    },
                    Row {
                        f: F_INIT,
                        t: T_NONE,
                        calls: 1,
                        ns: 5,
                        min: 5,
                        max: 5,
                        hist: vec![],
                        slow_ns: 0,
                    },
                ],
            },
            ThreadSnap {
                tid: 8,
                name: String::new(),
                alive: true,
                rows: vec![],
            },
        ];
        let text = render_json(&m, &threads);
        let v: serde_json::Value = serde_json::from_str(&text).expect(&text);
        assert_eq!(v["host"], "h\"o\\st");
        assert_eq!(v["plugin"], "/x/lib\u{1}.so");
        assert_eq!(v["abi"], 6);
        assert_eq!(v["mask"], 4095);
        assert_eq!(v["threads"][0]["name"], "NCCL Progress 0\t");
        assert_eq!(v["threads"][0]["alive"], false);
        let r = &v["threads"][0]["rows"][0];
        assert_eq!(r["fn"], "start");
        assert_eq!(r["type"], "Coll");
        assert_eq!(r["calls"], 3);
        assert_eq!(r["hist"].as_array().unwrap().len(), 7);
        assert_eq!(r["slow_ns"], 17);
        assert_eq!(v["threads"][0]["rows"][1]["type"], "-");
        assert_eq!(v["threads"][1]["rows"].as_array().unwrap().len(), 0);
        assert!((v["ns_per_tick"].as_f64().unwrap() - 0.3333).abs() < 1e-9);
        let empty = render_json(&m, &[]);
        let v: serde_json::Value = serde_json::from_str(&empty).unwrap();
        assert!(v["threads"].as_array().unwrap().is_empty());
        assert!(render_table(&m, &threads).contains("NCCL Progress"));
    }
}
