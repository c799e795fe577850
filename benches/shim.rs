//! Cost of the plugin's hot paths through its real C ABI (the release `.so`,
//! loaded by dlopen like NCCL does).
//!
//! | bench | one iteration |
//! |---|---|
//! | `shim/coll_start_stop_under_live_collapi` | start + stop of a Coll whose CollApi parent stays live |
//! | `shim/proxystep_start_3_records_stop` | ProxyStep start, 3 state records, stop |
//! | `shim/allreduce_user_thread_sequence` | the 10 calls of one all-reduce on the user thread |
//! | `threads/1t_per_call` | one call, averaged over a round of: all-reduce on comm A, ProxyStep on comm A, all-reduce on comms B and C, all on one thread |
//! | `threads/4t_per_call` | one call, the same four workloads each on its own thread at once (user and proxy of A, users of B and C); the slowest thread's time per call |
//!
//! Scaling: `threads/4t_per_call` / `threads/1t_per_call` (target ≤ 1.3).
//!
//! `EVRING_BENCH_CLOCK=thread-cpu` measures each thread's CPU time instead of
//! wall time: on a shared, oversubscribed machine that leaves out the time a
//! thread spends preempted (cache effects of the other load remain). Use
//! wall time (the default) on a quiet machine.
//!
//! ```text
//! cargo bench --bench shim
//! EVRING_PLUGIN=path/to/libevring_shim.so ./shim-<hash> --bench
//! ```

use criterion::{criterion_group, criterion_main, Criterion};
use evring_shim::abi::*;
use evring_sim::plugin::Plugin;
use std::ffi::c_void;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI32;
use std::sync::Barrier;
use std::time::Duration;

#[path = "clock.rs"]
mod clock;
use clock::now;

fn plugin() -> Plugin {
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
    std::env::set_var("EVRING_RING", "65536");
    Plugin::open(&so, None).expect("open plugin")
}

struct Drv {
    p: Plugin,
    ctx: *mut c_void,
}

// SAFETY: the context and handles are opaque IDs the plugin validates; the
// plugin's entry points are thread-safe (that is what is measured).
unsafe impl Send for Drv {}
// SAFETY: as above.
unsafe impl Sync for Drv {}

impl Drv {
    fn new(mask: &str) -> Drv {
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", mask);
        let p = plugin();
        let ctx = init_comm(&p, 42);
        Drv { p, ctx }
    }

    #[inline]
    fn start(&self, d: &DescrV6) -> *mut c_void {
        self.start_in(self.ctx, d)
    }

    #[inline]
    fn start_in(&self, ctx: *mut c_void, d: &DescrV6) -> *mut c_void {
        let mut h = std::ptr::null_mut();
        // SAFETY: valid out-pointer and descriptor.
        unsafe { self.p.start(ctx, &mut h, d) };
        h
    }
}

/// One more communicator on the plugin: its context.
fn init_comm(p: &Plugin, comm_id: u64) -> *mut c_void {
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
struct H(*mut c_void);
// SAFETY: an opaque ID, never dereferenced by the bench.
unsafe impl Send for H {}
// SAFETY: as above.
unsafe impl Sync for H {}

impl H {
    /// The pointer (a method, so closures capture the whole `H`).
    fn p(self) -> *mut c_void {
        self.0
    }
}

fn descr(ty: u64, parent: *mut c_void) -> DescrV6 {
    let mut d = DescrV6::zeroed();
    d.ty = ty;
    d.parent_obj = parent;
    d
}

fn coll_api_descr(parent: *mut c_void) -> DescrV6 {
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

fn coll_descr(parent: *mut c_void) -> DescrV6 {
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
fn live_proxy_op(drv: &Drv, ctx: *mut c_void) -> H {
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
const ALLREDUCE_CALLS: u32 = 10;
/// The 10 calls of one all-reduce on the user thread (GroupApi, CollApi,
/// their state records, Group and Coll).
#[inline]
fn allreduce(drv: &Drv, ctx: *mut c_void) {
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
const PROXY_STEP_CALLS: u32 = 5;
/// A ProxyStep under `op`: start, three state records, stop.
#[inline]
fn proxy_step(drv: &Drv, ctx: *mut c_void, op: H) {
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

/// Time of `iters` calls of `f` on this thread.
#[inline]
fn timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let t = now();
    for _ in 0..iters {
        f();
    }
    now() - t
}

fn benches(c: &mut Criterion) {
    let drv = Drv::new("6");
    let ga = drv.start(&descr(ty::GROUP_API, std::ptr::null_mut()));
    let ca = drv.start(&coll_api_descr(ga));
    let coll = coll_descr(ca);
    let mut g = c.benchmark_group("shim");
    g.bench_function("coll_start_stop_under_live_collapi", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                let h = drv.start(black_box(&coll));
                // SAFETY: a handle the plugin returned.
                unsafe { drv.p.stop(h) };
            })
        })
    });
    let op = live_proxy_op(&drv, drv.ctx);
    g.bench_function("proxystep_start_3_records_stop", |b| {
        b.iter_custom(|iters| timed(iters, || proxy_step(&drv, drv.ctx, op)))
    });
    g.bench_function("allreduce_user_thread_sequence", |b| {
        b.iter_custom(|iters| timed(iters, || allreduce(&drv, drv.ctx)))
    });
    g.finish();

    // Four workloads: user and proxy thread of comm A, user threads of B and C.
    let (a, op_a) = (H(drv.ctx), op);
    let (b_ctx, c_ctx) = (H(init_comm(&drv.p, 43)), H(init_comm(&drv.p, 44)));
    let calls = 3 * ALLREDUCE_CALLS + PROXY_STEP_CALLS;
    let mut g = c.benchmark_group("threads");
    g.bench_function("1t_per_call", |b| {
        b.iter_custom(|iters| {
            timed(iters, || {
                allreduce(&drv, a.p());
                proxy_step(&drv, a.p(), op_a);
                allreduce(&drv, b_ctx.p());
                allreduce(&drv, c_ctx.p());
            }) / calls
        })
    });
    g.bench_function("4t_per_call", |b| {
        b.iter_custom(|iters| {
            let start = Barrier::new(4);
            let drv = &drv;
            let start = &start;
            let per_call = |f: &(dyn Fn() + Sync), n: u32| {
                start.wait();
                timed(iters, f) / n
            };
            std::thread::scope(|s| {
                let hs = [
                    s.spawn(move || per_call(&|| proxy_step(drv, a.p(), op_a), PROXY_STEP_CALLS)),
                    s.spawn(move || per_call(&|| allreduce(drv, b_ctx.p()), ALLREDUCE_CALLS)),
                    s.spawn(move || per_call(&|| allreduce(drv, c_ctx.p()), ALLREDUCE_CALLS)),
                ];
                let mine = per_call(&|| allreduce(drv, a.p()), ALLREDUCE_CALLS);
                hs.into_iter()
                    .map(|h| h.join().unwrap())
                    .fold(mine, Duration::max)
            })
        })
    });
    g.finish();
}

criterion_group!(shim, benches);
criterion_main!(shim);
