//! Cost of the plugin's hot paths through its real C ABI (the release `.so`,
//! loaded by dlopen like NCCL does). Target: ≤ 100 ns per event pair.

use criterion::{criterion_group, criterion_main, Criterion};
use evring_shim::abi::*;
use evring_sim::plugin::Plugin;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI32;

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

impl Drv {
    fn new(mask: &str) -> Drv {
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", mask);
        let p = plugin();
        let mask: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid out-pointer, leaked mask, static name.
        unsafe {
            p.init(
                &mut ctx,
                42,
                mask.as_ptr(),
                c"bench".as_ptr(),
                1,
                2,
                0,
                None,
            )
        };
        Drv { p, ctx }
    }

    #[inline]
    fn start(&self, d: &DescrV6) -> *mut c_void {
        let mut h = std::ptr::null_mut();
        // SAFETY: valid out-pointer and descriptor.
        unsafe { self.p.start(self.ctx, &mut h, d) };
        h
    }
}

fn descr(ty: u64, parent: *mut c_void) -> DescrV6 {
    let mut d = DescrV6::zeroed();
    d.ty = ty;
    d.parent_obj = parent;
    d
}

fn benches(c: &mut Criterion) {
    let drv = Drv::new("6");
    let ga = drv.start(&descr(ty::GROUP_API, std::ptr::null_mut()));
    let mut ca_d = descr(ty::COLL_API, ga);
    ca_d.u.coll_api = CollApiV5 {
        func: c"AllReduce".as_ptr(),
        count: 1 << 20,
        datatype: c"ncclFloat32".as_ptr(),
        root: 0,
        stream: std::ptr::null_mut(),
        graph_captured: false,
    };
    let ca = drv.start(&ca_d);
    let mut coll = descr(ty::COLL, ca);
    coll.u.coll = CollV5 {
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
    let mut g = c.benchmark_group("shim");
    g.bench_function("coll_start_stop_under_live_collapi", |b| {
        b.iter(|| {
            let h = drv.start(&coll);
            // SAFETY: a handle the plugin returned.
            unsafe { drv.p.stop(h) };
        })
    });
    let mut op_d = descr(ty::PROXY_OP, coll_parent(&drv, &coll));
    op_d.u.proxy_op = ProxyOpD {
        pid: std::process::id() as i32,
        channel_id: 0,
        peer: 1,
        n_steps: 8,
        chunk_size: 1 << 20,
        is_send: 1,
    };
    let op = drv.start(&op_d);
    let step_d = descr(ty::PROXY_STEP, op);
    let args = StateArgsV4 {
        proxy_step: ProxyStepArgs {
            trans_size: 1 << 20,
        },
    };
    g.bench_function("proxystep_start_3_records_stop", |b| {
        b.iter(|| {
            let h = drv.start(&step_d);
            // SAFETY: a handle the plugin returned; args on our stack.
            unsafe {
                drv.p.record(h, state::PROXY_STEP_SEND_GPU_WAIT, &args);
                drv.p.record(h, state::PROXY_STEP_SEND_PEER_WAIT_V4, &args);
                drv.p.record(h, state::PROXY_STEP_SEND_WAIT, &args);
                drv.p.stop(h);
            }
        })
    });
    g.bench_function("allreduce_user_thread_sequence", |b| {
        let gd = descr(ty::GROUP, std::ptr::null_mut());
        b.iter(|| {
            let ga = drv.start(&descr(ty::GROUP_API, std::ptr::null_mut()));
            let mut cad = ca_d;
            cad.parent_obj = ga;
            let ca = drv.start(&cad);
            // SAFETY: handles the plugin returned.
            unsafe {
                drv.p
                    .record(ga, state::GROUP_START_API_STOP, std::ptr::null());
                drv.p.stop(ca);
                drv.p
                    .record(ga, state::GROUP_END_API_START, std::ptr::null());
                let grp = drv.start(&gd);
                let mut cd = coll;
                cd.parent_obj = ca;
                let c = drv.start(&cd);
                drv.p.stop(c);
                drv.p.stop(grp);
                drv.p.stop(ga);
            }
        })
    });
    g.finish();
}

/// A Coll that stays live (never stopped) to parent the proxy ops.
fn coll_parent(drv: &Drv, coll: &DescrV6) -> *mut c_void {
    drv.start(coll)
}

criterion_group!(shim, benches);
criterion_main!(shim);
