//! The plugin workloads shared by the criterion bench (`benches/shim.rs`) and
//! the instruction-count driver (`examples/shim_paths.rs`): the release `.so`
//! loaded by dlopen like NCCL does, and the call sequences each path makes.

#![allow(dead_code)] // each user takes what it needs

use evring_shim::abi::*;
use evring_sim::plugin::Plugin;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The plugin under test: `EVRING_PLUGIN`, else this checkout's release build
/// (built first).
pub fn plugin() -> Plugin {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let so = match std::env::var_os("EVRING_PLUGIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let ok = std::process::Command::new(cargo)
                .current_dir(root)
                .args(["build", "--release", "-q", "-p", "evring-shim", "--lib"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "building the plugin failed");
            root.join("target/release/libevring_shim.so")
        }
    };
    // Counters only: the writer thread still drains the ring, but writes no file.
    std::env::set_var("NCCL_PROFILE_DUMP_FILE", "");
    // A ring size given by the caller wins (e.g. `EVRING_RING=4194304` keeps
    // every push in the thread's own lane under callgrind, whose slowed
    // writer thread otherwise lets the lane fill).
    if std::env::var_os("EVRING_RING").is_none() {
        std::env::set_var("EVRING_RING", "65536");
    }
    Plugin::open(&so, None).expect("open plugin")
}

pub struct Drv {
    pub p: Plugin,
    pub ctx: *mut c_void,
}

// SAFETY: the context and handles are opaque IDs the plugin validates; the
// plugin's entry points are thread-safe (that is what is measured).
unsafe impl Send for Drv {}
// SAFETY: as above.
unsafe impl Sync for Drv {}

impl Drv {
    /// Has the plugin's writer thread take every record completed so far
    /// (`evring_flush_wait`), waiting up to 1 s; false if the plugin has no
    /// such export or the writer did not finish in time.
    pub fn drain(&self) -> bool {
        let Some(f) = self.p.symbol(c"evring_flush_wait") else {
            return false;
        };
        // SAFETY: evring's export of that name has this signature.
        let f: extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(f) };
        f(1000) == 1
    }

    pub fn new(mask: &str) -> Drv {
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", mask);
        let p = plugin();
        let ctx = init_comm(&p, 42);
        Drv { p, ctx }
    }

    #[inline]
    pub fn start(&self, d: &DescrV6) -> *mut c_void {
        self.start_in(self.ctx, d)
    }

    #[inline]
    pub fn start_in(&self, ctx: *mut c_void, d: &DescrV6) -> *mut c_void {
        let mut h = std::ptr::null_mut();
        // SAFETY: valid out-pointer and descriptor.
        unsafe { self.p.start(ctx, &mut h, d) };
        h
    }
}

/// One more communicator on the plugin: its context.
pub fn init_comm(p: &Plugin, comm_id: u64) -> *mut c_void {
    let mask: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer, leaked mask, static name.
    unsafe {
        p.init(
            &mut ctx,
            comm_id,
            mask.as_ptr(),
            c"bench".as_ptr(),
            1,
            2,
            0,
            None,
        )
    };
    ctx
}

/// A raw handle that may cross threads (the plugin validates it).
#[derive(Clone, Copy)]
pub struct H(pub *mut c_void);
// SAFETY: an opaque ID, never dereferenced by the bench.
unsafe impl Send for H {}
// SAFETY: as above.
unsafe impl Sync for H {}

impl H {
    /// The pointer (a method, so closures capture the whole `H`).
    pub fn p(self) -> *mut c_void {
        self.0
    }
}

pub fn descr(ty: u64, parent: *mut c_void) -> DescrV6 {
    let mut d = DescrV6::zeroed();
    d.ty = ty;
    d.parent_obj = parent;
    d
}

pub fn coll_api_descr(parent: *mut c_void) -> DescrV6 {
    let mut d = descr(ty::COLL_API, parent);
    d.u.coll_api = CollApiV5 {
        func: c"AllReduce".as_ptr(),
        count: 1 << 20,
        datatype: c"ncclFloat32".as_ptr(),
        root: 0,
        stream: std::ptr::null_mut(),
        graph_captured: false,
    };
    d
}

pub fn coll_descr(parent: *mut c_void) -> DescrV6 {
    let mut d = descr(ty::COLL, parent);
    d.u.coll = CollV5 {
        seq_number: 1,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 1 << 20,
        root: 0,
        datatype: c"ncclFloat32".as_ptr(),
        n_channels: 8,
        n_warps: 16,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
        parent_group: std::ptr::null_mut(),
    };
    d
}

/// A live ProxyOp of `ctx` (under a Coll that is never stopped): the parent
/// of the ProxySteps the proxy workload starts.
pub fn live_proxy_op(drv: &Drv, ctx: *mut c_void) -> H {
    let coll = drv.start_in(ctx, &coll_descr(std::ptr::null_mut()));
    let mut op_d = descr(ty::PROXY_OP, coll);
    op_d.u.proxy_op = ProxyOpD {
        pid: std::process::id() as i32,
        channel_id: 0,
        peer: 1,
        n_steps: 8,
        chunk_size: 1 << 20,
        is_send: 1,
    };
    H(drv.start_in(ctx, &op_d))
}

/// Calls per [`allreduce`].
pub const ALLREDUCE_CALLS: u32 = 10;
/// The 10 calls of one all-reduce on the user thread (GroupApi, CollApi,
/// their state records, Group and Coll).
#[inline]
pub fn allreduce(drv: &Drv, ctx: *mut c_void) {
    let ga = drv.start_in(ctx, &descr(ty::GROUP_API, std::ptr::null_mut()));
    let ca = drv.start_in(ctx, &coll_api_descr(ga));
    // SAFETY: handles the plugin returned.
    unsafe {
        drv.p
            .record(ga, state::GROUP_START_API_STOP, std::ptr::null());
        drv.p.stop(ca);
        drv.p
            .record(ga, state::GROUP_END_API_START, std::ptr::null());
        let grp = drv.start_in(ctx, &descr(ty::GROUP, std::ptr::null_mut()));
        let c = drv.start_in(ctx, &coll_descr(ca));
        drv.p.stop(c);
        drv.p.stop(grp);
        drv.p.stop(ga);
    }
}

/// Calls per [`proxy_step`].
pub const PROXY_STEP_CALLS: u32 = 5;
/// A ProxyStep under `op`: start, three state records, stop.
#[inline]
pub fn proxy_step(drv: &Drv, ctx: *mut c_void, op: H) {
    let args = StateArgsV4 {
        proxy_step: ProxyStepArgs {
            trans_size: 1 << 20,
        },
    };
    let h = drv.start_in(ctx, &descr(ty::PROXY_STEP, op.0));
    // SAFETY: a handle the plugin returned; args on our stack.
    unsafe {
        drv.p.record(h, state::PROXY_STEP_SEND_GPU_WAIT, &args);
        drv.p.record(h, state::PROXY_STEP_SEND_PEER_WAIT_V4, &args);
        drv.p.record(h, state::PROXY_STEP_SEND_WAIT, &args);
        drv.p.stop(h);
    }
}

/// A Coll start and stop under a live CollApi (its descriptor: `coll`).
#[inline]
pub fn coll_pair(drv: &Drv, coll: &DescrV6) {
    let h = drv.start(std::hint::black_box(coll));
    // SAFETY: a handle the plugin returned.
    unsafe { drv.p.stop(h) };
}

/// A barrier whose waiters spin (yielding after a while): the four threads
/// leave it within about a microsecond of each other, so their timed chunks
/// (tens of microseconds in the drained group) run at the same time. A
/// parking barrier's wake-ups are spread over tens of microseconds.
pub struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    pub fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    pub fn wait(&self) {
        let g = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            // Reset before the release: a waiter of the next round counts anew.
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == g {
            if spins < 10_000 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}
