//! Test harness: builds the release plugin once, loads isolated copies of it
//! through the C ABI (as NCCL does), and builds descriptors.
#![allow(dead_code)]

use evring_shim::abi::*;
use evring_shim::StatsV1;
use evring_sim::plugin::Plugin;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The release `.so` that `cargo build --release -p evring-shim` produces
/// (built once per test binary), or `EVRING_PLUGIN` if set.
pub fn plugin_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        evring_sim::locate::build_release_plugin(root).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Env is read by a plugin instance at its first init; tests that set env
/// serialize on this lock until that init has happened.
static ENV_LOCK: Mutex<()> = Mutex::new(());

/// One plugin instance with its own engine (a private copy of the `.so`:
/// glibc shares one instance per file, and the library is `-z nodelete`).
pub struct Inst {
    pub p: Plugin,
    pub mask: &'static AtomicI32,
    pub dir: PathBuf,
    /// Leave `dir` in place on drop (for tests that reopen the same file).
    pub keep: bool,
    /// Environment for the first init (taken by it).
    env: Mutex<Option<Vec<(String, String)>>>,
}

impl Drop for Inst {
    /// Test directories hold a copy of the plugin and its traces; remove them
    /// (the mapping of a loaded library survives its file's removal).
    fn drop(&mut self) {
        if !self.keep && std::env::var_os("EVRING_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn tempdir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "evring-test-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

impl Inst {
    /// Opens a fresh instance with `env` (plus a dump prefix in a temp dir)
    /// and initialises `comms` communicators `(comm_id, rank)`. The plugin
    /// reads its settings at its first init, which `init` runs under `env`.
    pub fn new(
        tag: &str,
        version: Option<u32>,
        env: &[(&str, &str)],
        comms: &[(u64, i32)],
    ) -> (Inst, Vec<u64>) {
        let dir = tempdir(tag);
        let copy = dir.join("libnccl-profiler-evring.so");
        std::fs::copy(plugin_so(), &copy).unwrap();
        let p = Plugin::open(&copy, version).expect("open plugin");
        let mask: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
        let prefix = dir.join("trace").to_string_lossy().into_owned();
        // These tests read the JSON format (tests/trace_formats.rs and the
        // simulator's checks cover the binary one); a test's own env wins.
        let mut all: Vec<(String, String)> = vec![
            ("NCCL_PROFILE_DUMP_FILE".into(), prefix),
            ("EVRING_FORMAT".into(), "json".into()),
        ];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let inst = Inst {
            p,
            mask,
            dir,
            keep: false,
            env: Mutex::new(Some(all)),
        };
        let ctxs = comms
            .iter()
            .map(|&(id, rank)| inst.init(id, rank))
            .collect();
        (inst, ctxs)
    }

    /// Opens `path` again (the same file: the same instance when it is still
    /// loaded or `-z nodelete`), with no environment of its own.
    pub fn reopen(path: &Path, mask: &'static AtomicI32, keep: bool) -> Inst {
        Inst {
            p: Plugin::open(path, None).expect("reopen"),
            mask,
            dir: path.parent().unwrap().into(),
            keep,
            env: Mutex::new(None),
        }
    }

    /// NCCL's init; the first one runs with this instance's environment.
    pub fn init(&self, comm_id: u64, rank: i32) -> u64 {
        let mut env = self.env.lock().unwrap_or_else(|e| e.into_inner());
        let Some(vars) = env.take() else {
            drop(env);
            return self.raw_init(comm_id, rank);
        };
        let _g = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for (k, v) in &vars {
            std::env::set_var(k, v);
        }
        let ctx = self.raw_init(comm_id, rank);
        for (k, _) in &vars {
            std::env::remove_var(k);
        }
        ctx
    }

    fn raw_init(&self, comm_id: u64, rank: i32) -> u64 {
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer, a leaked mask int, a static name.
        let rc = unsafe {
            self.p.init(
                &mut ctx,
                comm_id,
                self.mask.as_ptr(),
                c"test-comm".as_ptr(),
                1,
                2,
                rank,
                None,
            )
        };
        assert_eq!(rc, 0);
        ctx as u64
    }

    pub fn start(&self, ctx: u64, d: &DescrV6) -> u64 {
        let mut h: *mut c_void = 0xBAD as *mut c_void;
        // SAFETY: valid out-pointer; descriptors built by this module.
        let rc = unsafe { self.p.start(ctx as *mut c_void, &mut h, d) };
        assert_eq!(rc, 0);
        h as u64
    }

    pub fn stop(&self, h: u64) {
        // SAFETY: any value is acceptable to the plugin under test.
        assert_eq!(unsafe { self.p.stop(h as *mut c_void) }, 0);
    }

    pub fn rec(&self, h: u64, state: c_int, arg: Option<u64>) {
        let args = StateArgsV4 {
            kernel_ch: KernelChArgs {
                p_timer: arg.unwrap_or(0),
            },
        };
        let ptr = if arg.is_some() {
            &args as *const StateArgsV4
        } else {
            std::ptr::null()
        };
        // SAFETY: args NULL or a valid union on our stack.
        assert_eq!(unsafe { self.p.record(h as *mut c_void, state, ptr) }, 0);
    }

    /// NCCL's finalize, then waits until the writer has written what it
    /// asked for (finalize itself waits only briefly for its footer).
    pub fn fin(&self, ctx: u64) {
        self.raw_fin(ctx);
        self.settle();
    }

    pub fn raw_fin(&self, ctx: u64) {
        // SAFETY: any value is acceptable to the plugin under test.
        assert_eq!(unsafe { self.p.finalize(ctx as *mut c_void) }, 0);
    }

    /// `evring_flush_wait(10 s)`: everything completed so far is in the files.
    pub fn settle(&self) {
        let Some(f) = self.p.symbol(c"evring_flush_wait") else {
            // An older plugin (its finalize and flush were synchronous).
            return self.call_void(c"evring_flush");
        };
        // SAFETY: exported `extern "C" fn(c_int) -> c_int`.
        let f: extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(f) };
        assert_eq!(f(10_000), 1, "the writer did not finish within 10 s");
    }

    /// The counters once the writer has applied every call made so far
    /// (the plugin counts some outcomes on the writer thread: completions,
    /// late children, double stops, stops of events a sweep completed).
    pub fn settled(&self) -> StatsV1 {
        self.settle();
        self.stats()
    }

    pub fn stats(&self) -> StatsV1 {
        let f = self
            .p
            .symbol(c"evring_stats")
            .expect("evring_stats exported");
        // SAFETY: the exported symbol has this signature (exports.rs).
        let f: unsafe extern "C" fn(*mut StatsV1, usize) -> usize =
            unsafe { std::mem::transmute(f) };
        let mut s = StatsV1::default();
        // SAFETY: `s` is a writable StatsV1.
        let n = unsafe { f(&mut s, std::mem::size_of::<StatsV1>()) };
        assert_eq!(n, std::mem::size_of::<StatsV1>());
        s
    }

    pub fn call_void(&self, name: &CStr) {
        let f = self.p.symbol(name).expect("symbol");
        // SAFETY: exported `extern "C" fn()`.
        let f: extern "C" fn() = unsafe { std::mem::transmute(f) };
        f()
    }

    pub fn set_mask(&self, m: i32) {
        let f = self.p.symbol(c"evring_set_mask").expect("symbol");
        // SAFETY: exported `extern "C" fn(c_int)`.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(f) };
        f(m)
    }

    /// Every trace file written so far, parsed (tolerating a missing `]`).
    pub fn traces(&self) -> Vec<(PathBuf, Vec<serde_json::Value>)> {
        self.settle();
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, parse_trace(&text)));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// All records (complete events) of all traces.
    pub fn begins(&self) -> Vec<serde_json::Value> {
        self.traces()
            .into_iter()
            .flat_map(|(_, evs)| evs)
            .filter(|e| e["ph"] == "X")
            .collect()
    }
}

/// Parses a Chrome JSON-array trace, accepting a missing closing `]` (as
/// Perfetto does for a killed process) and a torn last line.
pub fn parse_trace(text: &str) -> Vec<serde_json::Value> {
    // Records are written whole, one per line, but a SIGKILL landing inside the
    // write() of a buffer can tear the last one: keep complete lines only.
    let text = if text.ends_with('\n') {
        text
    } else {
        &text[..text.rfind('\n').map_or(0, |i| i + 1)]
    };
    let t = text.trim_end();
    let fixed = if t.ends_with(']') {
        t.to_string()
    } else {
        format!("{}]", t.trim_end_matches(','))
    };
    serde_json::from_str::<Vec<serde_json::Value>>(&fixed).unwrap_or_else(|e| {
        panic!(
            "trace does not parse: {e}\n{}",
            &text[..text.len().min(2000)]
        )
    })
}

pub fn count_cat(evs: &[serde_json::Value], cat: &str) -> usize {
    evs.iter().filter(|e| e["cat"] == cat).count()
}

/// Checks the accounting identity and the no-leak property after finalize.
pub fn assert_balanced(s: &StatsV1) {
    assert_eq!(s.live, 0, "live events after the last finalize: {s:?}");
    let drops = s.drop_slab_full
        + s.drop_unknown_type
        + s.drop_null_context
        + s.drop_after_finalize
        + s.drop_null_descr
        + s.masked_starts;
    assert_eq!(s.start_calls, s.started + drops, "start accounting: {s:?}");
    assert_eq!(
        s.started, s.completed,
        "every started event completes: {s:?}"
    );
    assert_eq!(
        s.completed,
        s.records_consumed + s.drop_ring_full,
        "ring accounting: {s:?}"
    );
    assert_eq!(s.panics, 0);
}

// ---- descriptors ------------------------------------------------------

pub const F_ALLREDUCE: *const c_char = c"AllReduce".as_ptr();
pub const F_SEND: *const c_char = c"Send".as_ptr();
pub const F_RECV: *const c_char = c"Recv".as_ptr();
pub const DT_F32: *const c_char = c"ncclFloat32".as_ptr();
pub const ALGO: *const c_char = c"RING".as_ptr();
pub const PROTO: *const c_char = c"SIMPLE".as_ptr();

pub fn d(ty: u64, parent: u64, rank: i32) -> DescrV6 {
    let mut x = DescrV6::zeroed();
    x.ty = ty;
    x.parent_obj = parent as *mut c_void;
    x.rank = rank;
    x
}

pub fn group_api(depth: i32) -> DescrV6 {
    let mut x = d(ty::GROUP_API, 0, 0);
    x.u.group_api = GroupApiV5 {
        graph_captured: false,
        group_depth: depth,
    };
    x
}

pub fn coll_api(parent: u64) -> DescrV6 {
    let mut x = d(ty::COLL_API, parent, 0);
    x.u.coll_api = CollApiV5 {
        func: F_ALLREDUCE,
        count: 1 << 20,
        datatype: DT_F32,
        root: 0,
        stream: 0x1234 as *mut c_void,
        graph_captured: false,
    };
    x
}

pub fn p2p_api(parent: u64, send: bool) -> DescrV6 {
    let mut x = d(ty::P2P_API, parent, 0);
    x.u.p2p_api = P2pApiV5 {
        func: if send { F_SEND } else { F_RECV },
        count: 4096,
        datatype: DT_F32,
        stream: std::ptr::null_mut(),
        graph_captured: false,
    };
    x
}

pub fn coll(parent: u64, group: u64, seq: u64, nch: u8) -> DescrV6 {
    let mut x = d(ty::COLL, parent, 0);
    x.u.coll = CollV5 {
        seq_number: seq,
        func: F_ALLREDUCE,
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 1 << 20,
        root: 0,
        datatype: DT_F32,
        n_channels: nch,
        n_warps: 16,
        algo: ALGO,
        proto: PROTO,
        parent_group: group as *mut c_void,
    };
    x
}

pub fn p2p(parent: u64, group: u64, send: bool, peer: i32, nch: u8) -> DescrV6 {
    let mut x = d(ty::P2P, parent, 0);
    x.u.p2p = P2pV5 {
        func: if send { F_SEND } else { F_RECV },
        buff: std::ptr::null_mut(),
        datatype: DT_F32,
        count: 4096,
        peer,
        n_channels: nch,
        parent_group: group as *mut c_void,
    };
    x
}

pub fn kernel_ch(parent: u64, ch: u8, t: u64) -> DescrV6 {
    let mut x = d(ty::KERNEL_CH, parent, 0);
    x.u.kernel_ch = KernelChV4 {
        channel_id: ch,
        p_timer: t,
    };
    x
}

pub fn proxy_op(parent: u64, pid: i32, ch: u8, send: bool) -> DescrV6 {
    let mut x = d(ty::PROXY_OP, parent, 0);
    x.u.proxy_op = ProxyOpD {
        pid,
        channel_id: ch,
        peer: 1,
        n_steps: 4,
        chunk_size: 1 << 20,
        is_send: send as c_int,
    };
    x
}

pub fn proxy_step(parent: u64, step: i32) -> DescrV6 {
    let mut x = d(ty::PROXY_STEP, parent, 0);
    x.u.proxy_step = ProxyStepD { step };
    x
}

pub fn simple(ty: u64, parent: u64) -> DescrV6 {
    d(ty, parent, 0)
}

pub fn pid() -> i32 {
    std::process::id() as i32
}

/// One all-reduce as NCCL 2.28 issues it on the user thread (ABI doc §3.3);
/// returns the Coll handle so callers can add proxy-thread children.
pub fn allreduce_user_thread(i: &Inst, ctx: u64, seq: u64, nch: u8) -> u64 {
    let ga = i.start(ctx, &group_api(1));
    i.rec(ga, state::GROUP_START_API_STOP, None);
    let ca = i.start(ctx, &coll_api(ga));
    i.stop(ca);
    i.rec(ga, state::GROUP_END_API_START, None);
    let g = i.start(ctx, &simple(ty::GROUP, 0));
    let c = i.start(ctx, &coll(ca, g, seq, nch));
    i.stop(c);
    i.stop(g);
    i.stop(ga);
    c
}

// ---- reading a run's trace files (docs/shim.md, "Reading a trace") -----

/// What the trace files of one process say about how it ended.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Ending {
    /// Every communicator finalized: the identities hold in the last footer.
    Finalized,
    /// The exit handler wrote every footer (no finalize).
    Exited,
    /// The process was cut (signal, `_exit`): a file lacks its footer, or
    /// lines were written after the last footer.
    Cut,
}

/// One process's trace files, checked line by line.
#[derive(Debug)]
pub struct Run {
    pub files: usize,
    pub records: usize,
    pub footers: Vec<serde_json::Value>,
    pub ending: Ending,
}

/// A JSON `ts`/`dur` (µs with three decimals) in integer nanoseconds.
fn json_ns(v: &serde_json::Value) -> u64 {
    let s = v.to_string();
    let (whole, frac) = s.split_once('.').unwrap_or((&s, ""));
    let frac = format!("{frac:0<3}");
    whole.parse::<u64>().unwrap() * 1000 + frac[..3].parse::<u64>().unwrap()
}

/// Perfetto draws a thread's complete events as a stack: on every lane
/// track (`tid`) they must not overlap (the writer opens a new track instead).
fn assert_tracks_nest(evs: &[serde_json::Value], path: &Path) {
    let mut per_tid: std::collections::HashMap<u64, Vec<(u64, u64)>> = Default::default();
    for e in evs.iter().filter(|e| e["ph"] == "X") {
        let b = json_ns(&e["ts"]);
        per_tid
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((b, b + json_ns(&e["dur"])));
    }
    for (tid, mut v) in per_tid {
        v.sort_unstable();
        for w in v.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{}: tid {tid}: {:?} overlaps {:?}",
                path.display(),
                w[0],
                w[1]
            );
        }
    }
}

/// Reads every `*.json` under `dir` as the trace of one process and checks
/// what a reader may rely on, whatever the ending: every complete line is an
/// intact record; a file has at most one footer, as its last event, whose
/// `stream_records` counts the records before it (plus itself); no footer's
/// `records_written` exceeds the lines the files hold.
pub fn read_run(dir: &Path) -> Run {
    let (mut files, mut records, mut footers, mut unfooted) = (0, 0, Vec::new(), 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("[\n"), "array form: {}", path.display());
        let evs = parse_trace(&text);
        let begins = evs.iter().filter(|e| e["ph"] == "X").count();
        assert!(
            evs.iter()
                .filter(|e| e["ph"] == "X")
                .all(|e| e["dur"].is_number() && e["args"]["id"].is_string()),
            "every record is a complete event with its id: {}",
            path.display()
        );
        records += begins;
        let foot: Vec<_> = evs
            .iter()
            .enumerate()
            .filter(|(_, e)| e["name"] == "evring.summary")
            .collect();
        assert!(foot.len() <= 1, "one footer per file: {}", path.display());
        match foot.first() {
            Some((at, f)) => {
                assert_eq!(*at, evs.len() - 1, "footer last: {}", path.display());
                assert!(text.trim_end().ends_with(']'), "closed: {}", path.display());
                assert_eq!(
                    f["args"]["stream_records"].as_u64(),
                    Some(begins as u64 + 1),
                    "stream_records: {}",
                    path.display()
                );
                if f["args"]["json_overlaps"] == 0 {
                    assert_tracks_nest(&evs, &path);
                }
                footers.push((*f).clone());
            }
            None => unfooted += 1,
        }
    }
    let in_files = (records + footers.len()) as u64;
    for f in &footers {
        let w = f["args"]["records_written"].as_u64().unwrap();
        assert!(
            w < in_files,
            "footer counts more than the files hold ({in_files}): {f}"
        );
    }
    let last = footers
        .iter()
        .max_by_key(|f| f["args"]["records_written"].as_u64().unwrap_or(0));
    let ending = match last {
        Some(f) if unfooted == 0 && f["args"]["records_written"].as_u64() == Some(in_files - 1) => {
            match f["args"]["end"].as_str() {
                Some("last_finalize") => Ending::Finalized,
                Some("exit") => Ending::Exited,
                _ => Ending::Cut,
            }
        }
        _ => Ending::Cut,
    };
    Run {
        files,
        records,
        footers,
        ending,
    }
}

/// Runs the C compiler (`cc`) with `args`; panics with its messages if it fails.
pub fn cc(args: &[&std::ffi::OsStr]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs this test binary again as a child in `mode` (env `EVRING_TEST_CHILD`)
/// for one test; returns the child.
pub fn spawn_child(test: &str, mode: &str, env: &[(&str, &str)]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("EVRING_TEST_CHILD", mode)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// The child mode this process runs in, if it is a child of `spawn_child`.
pub fn child_mode() -> Option<String> {
    std::env::var("EVRING_TEST_CHILD").ok()
}

/// Waits for `child` at most `limit`; kills it and panics if it is still
/// running then (a hang fails the test instead of hanging CI).
pub fn wait_or_kill(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::ExitStatus {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?} (hang)");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Reads the child's stdout until its `DIR <path>` line.
pub fn child_dir(child: &mut std::process::Child) -> PathBuf {
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child said nothing");
        // libtest may print "test <name> ... " before it on the same line.
        if let Some(at) = line.find("DIR ") {
            // Keep draining stdout so the child never blocks on a full pipe.
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            return PathBuf::from(line[at + 4..].trim());
        }
    }
}
