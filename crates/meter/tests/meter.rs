//! Loads the built meter library through the C ABI, as NCCL does, with the null inner
//! plugin, with evring's shim as the inner plugin, and with inner plugins it cannot use,
//! and checks the counts in the JSON it writes.
//!
//! Build order: `cargo test -p evring-meter --release` builds `libevring_meter.so` (this
//! crate's cdylib) and `libevring_shim.so` (a dev-dependency) into the target directory
//! before the tests run. `EVRING_PLUGIN=PATH` overrides the shim.

use evring_abi::*;
use std::ffi::{c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The meter reads its environment at init and at finalize: tests run one at a time.
static ENV_LOCK: Mutex<()> = Mutex::new(());

/// The newest of `names` next to this test executable (`target/<profile>/deps`) or one
/// directory up.
fn near_exe(names: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let dirs = [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()];
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("none of {names:?} next to {}", exe.display()))
}

fn meter_so() -> PathBuf {
    near_exe(&["libevring_meter.so"])
}

fn shim_so() -> PathBuf {
    match std::env::var_os("EVRING_PLUGIN") {
        Some(p) => PathBuf::from(p),
        None => near_exe(&["libevring_shim.so"]),
    }
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("evring-meter-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A private copy of the meter (one instance per copy: glibc shares one per file) and
/// its tables.
struct Meter {
    lib: *mut c_void,
}

impl Meter {
    fn open(dir: &Path) -> Meter {
        let copy = dir.join("libevring_meter_copy.so");
        std::fs::copy(meter_so(), &copy).unwrap();
        let c = CString::new(copy.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path of a library built by this workspace.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!lib.is_null(), "cannot dlopen {}", copy.display());
        Meter { lib }
    }

    fn sym(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).unwrap();
        // SAFETY: `lib` is open, `c` is NUL-terminated.
        let s = unsafe { libc::dlsym(self.lib, c.as_ptr()) };
        assert!(!s.is_null(), "no {name}");
        s
    }

    /// The table of version 5, 6 or 7 (same function shapes; v5 and v6 descriptors are
    /// the same, and a v7 one starts like them).
    fn v6(&self, version: u32) -> &'static ProfilerV6 {
        assert!((5..=7).contains(&version));
        // SAFETY: the meter's ncclProfiler_v5..v7 are 48-byte tables of this shape.
        unsafe { &*(self.sym(&format!("ncclProfiler_v{version}")) as *const ProfilerV6) }
    }

    fn v4(&self) -> &'static ProfilerV4 {
        // SAFETY: the meter's ncclProfiler_v4 is a v4 table.
        unsafe { &*(self.sym("ncclProfiler_v4") as *const ProfilerV4) }
    }
}

fn set_env(vars: &[(&str, &str)]) {
    for k in [
        "EVRING_METER_PLUGIN",
        "EVRING_METER_OUT",
        "EVRING_METER_QUIET",
        "EVRING_METER_ISOLATE",
        "NCCL_PROFILE_EVENT_MASK",
        "NCCL_PROFILE_DUMP_FILE",
    ] {
        std::env::remove_var(k);
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
}

fn init6(t: &ProfilerV6, comm_id: u64) -> (u64, c_int, NcclResult) {
    let mut ctx: *mut c_void = 0xdead as *mut c_void;
    let mut mask: c_int = 0;
    // SAFETY: valid out-pointers and a NUL-terminated comm name; no logger.
    let r = unsafe {
        (t.init)(
            &mut ctx,
            comm_id,
            &mut mask,
            c"meter-test".as_ptr(),
            1,
            2,
            0,
            None,
        )
    };
    (ctx as u64, mask, r)
}

fn start6(t: &ProfilerV6, ctx: u64, d: &mut DescrV6) -> u64 {
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live context, a writable handle slot and a complete descriptor.
    let r = unsafe { (t.start_event)(ctx as *mut c_void, &mut h, d) };
    assert_eq!(r, NCCL_SUCCESS);
    h as u64
}

fn stop6(t: &ProfilerV6, h: u64) {
    // SAFETY: a handle from start6 (or NULL).
    assert_eq!(unsafe { (t.stop_event)(h as *mut c_void) }, NCCL_SUCCESS);
}

fn record6(t: &ProfilerV6, h: u64, state: c_int) {
    let mut a = StateArgsV6::zeroed();
    // SAFETY: a handle from start6 and valid state arguments.
    let r = unsafe { (t.record_event_state)(h as *mut c_void, state, &mut a) };
    assert_eq!(r, NCCL_SUCCESS);
}

fn fin6(t: &ProfilerV6, ctx: u64) {
    // SAFETY: a context from init6.
    assert_eq!(unsafe { (t.finalize)(ctx as *mut c_void) }, NCCL_SUCCESS);
}

fn descr(ty: u64, parent: u64) -> DescrV6 {
    let mut d = DescrV6::zeroed();
    d.ty = ty;
    d.parent_obj = parent as *mut c_void;
    d
}

fn coll(parent: u64, seq: u64) -> DescrV6 {
    let mut d = descr(ty::COLL, parent);
    d.u.coll = CollV5 {
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 1024,
        root: 0,
        datatype: c"ncclFloat32".as_ptr(),
        n_channels: 1,
        n_warps: 16,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
        parent_group: std::ptr::null_mut(),
    };
    d
}

fn coll_api(parent: u64) -> DescrV6 {
    let mut d = descr(ty::COLL_API, parent);
    d.u.coll_api = CollApiV5 {
        func: c"AllReduce".as_ptr(),
        count: 1024,
        datatype: c"ncclFloat32".as_ptr(),
        root: 0,
        stream: std::ptr::null_mut(),
        graph_captured: false,
    };
    d
}

fn proxy_op(parent: u64) -> DescrV6 {
    let mut d = descr(ty::PROXY_OP, parent);
    d.u.proxy_op = ProxyOpD {
        pid: std::process::id() as i32,
        channel_id: 0,
        peer: 1,
        n_steps: 1,
        chunk_size: 4096,
        is_send: 1,
    };
    d
}

fn proxy_step(parent: u64, step: i32) -> DescrV6 {
    let mut d = descr(ty::PROXY_STEP, parent);
    d.u.proxy_step = ProxyStepD { step };
    d
}

/// One collective as NCCL issues it: Group API > Coll API > Coll on the calling thread,
/// ProxyOp > ProxyStep (with one state) on a "proxy" thread, stops in reverse.
fn one_collective(t: &'static ProfilerV6, ctx: u64, seq: u64) {
    let mut g = descr(ty::GROUP_API, 0);
    let hg = start6(t, ctx, &mut g);
    let hca = start6(t, ctx, &mut coll_api(hg));
    let hc = start6(t, ctx, &mut coll(hca, seq));
    std::thread::Builder::new()
        .name("meter-proxy".into())
        .spawn(move || {
            let ho = start6(t, ctx, &mut proxy_op(hc));
            let hs = start6(t, ctx, &mut proxy_step(ho, seq as i32));
            record6(t, hs, state::PROXY_STEP_SEND_WAIT);
            stop6(t, hs);
            stop6(t, ho);
        })
        .unwrap()
        .join()
        .unwrap();
    stop6(t, hc);
    stop6(t, hca);
    stop6(t, hg);
}

fn read_report(dir: &Path) -> serde_json::Value {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with("meter-") && n.ends_with(".json")
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Calls of `f` on `ty` summed over threads (those whose name satisfies `thread`).
fn calls(v: &serde_json::Value, f: &str, ty: &str, thread: impl Fn(&str) -> bool) -> u64 {
    v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| thread(t["name"].as_str().unwrap()))
        .flat_map(|t| t["rows"].as_array().unwrap())
        .filter(|r| r["fn"] == f && r["type"] == ty)
        .map(|r| r["calls"].as_u64().unwrap())
        .sum()
}

fn check_counts(v: &serde_json::Value, n: u64) {
    let any = |_: &str| true;
    let proxy = |s: &str| s == "meter-proxy";
    for ty in ["GroupApi", "CollApi", "Coll"] {
        assert_eq!(calls(v, "start", ty, any), n, "start {ty}");
        assert_eq!(calls(v, "stop", ty, any), n, "stop {ty}");
        assert_eq!(
            calls(v, "start", ty, proxy),
            0,
            "start {ty} on the proxy thread"
        );
    }
    for ty in ["ProxyOp", "ProxyStep"] {
        assert_eq!(calls(v, "start", ty, proxy), n, "start {ty}");
        assert_eq!(calls(v, "stop", ty, proxy), n, "stop {ty}");
    }
    assert_eq!(calls(v, "record", "ProxyStep", proxy), n);
    assert_eq!(calls(v, "stop", "unknown", any), 0);
    assert_eq!(calls(v, "init", "-", any), 1);
    assert_eq!(calls(v, "finalize", "-", any), 1);
    assert_eq!(v["inits"], 1);
    assert_eq!(v["finalizes"], 1);
    assert_eq!(v["reason"], "finalize");
    assert_eq!(v["pid"], std::process::id());
    for t in v["threads"].as_array().unwrap() {
        for r in t["rows"].as_array().unwrap() {
            let c = r["calls"].as_u64().unwrap();
            let hist: u64 = r["hist"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_u64().unwrap())
                .sum();
            assert_eq!(hist, c, "histogram of {r}");
            assert!(r["min"].as_u64().unwrap() <= r["max"].as_u64().unwrap());
            assert!(r["ns"].as_u64().unwrap() >= r["max"].as_u64().unwrap());
        }
    }
}

#[test]
fn null_inner_counts_every_call() {
    let _g = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempdir("null");
    let out = format!("{}/meter-", dir.display());
    set_env(&[
        ("EVRING_METER_PLUGIN", "null"),
        ("EVRING_METER_OUT", &out),
        ("EVRING_METER_QUIET", "1"),
        ("NCCL_PROFILE_EVENT_MASK", "0x1000"),
    ]);
    let m = Meter::open(&dir);
    let t = m.v6(6);
    let (ctx, mask, r) = init6(t, 7);
    assert_eq!((ctx, mask, r), (1, 0x1000, NCCL_SUCCESS));
    for seq in 0..20 {
        one_collective(t, ctx, seq);
    }
    fin6(t, ctx);
    let v = read_report(&dir);
    check_counts(&v, 20);
    assert_eq!(v["plugin"], "null");
    assert_eq!(v["plugin_name"], "null");
    assert_eq!(v["abi"], 6);
    assert_eq!(v["mask"], 0x1000);
    assert_eq!(v["attribution"], "handle");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shim_inner_counts_every_call() {
    let _g = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempdir("shim");
    let out = format!("{}/meter-", dir.display());
    let dump = format!("{}/trace", dir.display());
    let shim = shim_so();
    set_env(&[
        ("EVRING_METER_PLUGIN", shim.to_str().unwrap()),
        ("EVRING_METER_ISOLATE", "1"),
        ("EVRING_METER_OUT", &out),
        ("EVRING_METER_QUIET", "1"),
        ("NCCL_PROFILE_EVENT_MASK", "4095"),
        ("NCCL_PROFILE_DUMP_FILE", &dump),
    ]);
    let m = Meter::open(&dir);
    let t = m.v6(6);
    let (ctx, mask, r) = init6(t, 8);
    assert_eq!(r, NCCL_SUCCESS);
    assert!(ctx != 0 && ctx != 0xdead, "shim context {ctx:#x}");
    assert_eq!(mask, 4095);
    for seq in 0..20 {
        one_collective(t, ctx, seq);
    }
    fin6(t, ctx);
    let v = read_report(&dir);
    check_counts(&v, 20);
    assert_eq!(v["plugin"], shim.to_str().unwrap());
    assert_eq!(v["plugin_name"], "evring");
    assert_eq!(v["attribution"], "map");
    assert!(v["ns_per_tick"].as_f64().unwrap() > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An inner plugin that is missing, or lacks the table NCCL asked for: NULL context,
/// success, no report of calls that never happened, no crash.
#[test]
fn unusable_inner_gives_null_context() {
    let _g = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    for (tag, inner, version) in [
        ("missing", "/nonexistent/libnothing.so".to_string(), 6),
        // A library that loads but exports no profiler table.
        ("no-table", "libc.so.6".to_string(), 7),
    ] {
        let dir = tempdir(tag);
        let out = format!("{}/meter-", dir.display());
        set_env(&[
            ("EVRING_METER_PLUGIN", &inner),
            ("EVRING_METER_OUT", &out),
            ("EVRING_METER_QUIET", "1"),
        ]);
        let m = Meter::open(&dir);
        let t = m.v6(version);
        for _ in 0..2 {
            let (ctx, _, r) = init6(t, 9);
            assert_eq!((ctx, r), (0, NCCL_SUCCESS), "{tag}");
        }
        // NCCL would not call these with a NULL context; they must not crash either.
        let h = start6(t, 0, &mut descr(ty::COLL, 0));
        assert_eq!(h, 0);
        stop6(t, 0);
        record6(t, 0, state::PROXY_STEP_SEND_WAIT);
        fin6(t, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// v4 descriptors carry the type in a byte; the null plugin still attributes stops.
#[test]
fn v4_null_inner() {
    let _g = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempdir("v4");
    let out = format!("{}/meter-", dir.display());
    set_env(&[("EVRING_METER_OUT", &out), ("EVRING_METER_QUIET", "1")]);
    let m = Meter::open(&dir);
    let t = m.v4();
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // SAFETY: valid out-pointers; no name, no logger.
    let r = unsafe { (t.init)(&mut ctx, &mut mask, std::ptr::null(), 1, 1, 1, 0, None) };
    assert_eq!((r, ctx as usize), (NCCL_SUCCESS, 1));
    let mut d = DescrV4::zeroed();
    d.ty = ty::PROXY_CTRL as u8;
    for _ in 0..5 {
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: live context, writable slot, complete v4 descriptor.
        unsafe {
            assert_eq!((t.start_event)(ctx, &mut h, &mut d), NCCL_SUCCESS);
            assert_eq!((t.stop_event)(h), NCCL_SUCCESS);
        }
    }
    // SAFETY: the context from init.
    assert_eq!(unsafe { (t.finalize)(ctx) }, NCCL_SUCCESS);
    let v = read_report(&dir);
    assert_eq!(v["abi"], 4);
    assert_eq!(calls(&v, "start", "ProxyCtrl", |_| true), 5);
    assert_eq!(calls(&v, "stop", "ProxyCtrl", |_| true), 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through ncclProfiler_v7 (v6's function shapes, `type` still first in the descriptor).
#[test]
fn v7_null_inner() {
    let _g = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempdir("v7");
    let out = format!("{}/meter-", dir.display());
    set_env(&[
        ("EVRING_METER_PLUGIN", "null"),
        ("EVRING_METER_OUT", &out),
        ("EVRING_METER_QUIET", "1"),
    ]);
    let m = Meter::open(&dir);
    let t = m.v6(7);
    let (ctx, _, r) = init6(t, 10);
    assert_eq!((ctx, r), (1, NCCL_SUCCESS));
    for seq in 0..3 {
        one_collective(t, ctx, seq);
    }
    // A v7-only type (KernelPhase, bit 15) is named as such.
    let h = start6(t, ctx, &mut descr(1 << 15, 0));
    stop6(t, h);
    fin6(t, ctx);
    let v = read_report(&dir);
    check_counts(&v, 3);
    assert_eq!(v["abi"], 7);
    assert_eq!(calls(&v, "stop", "KernelPhase", |_| true), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
