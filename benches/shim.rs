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
use std::sync::Barrier;
use std::time::Duration;

#[path = "common/shim_paths.rs"]
mod paths;
use paths::*;

#[path = "clock.rs"]
mod clock;
use clock::now;

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
        b.iter_custom(|iters| timed(iters, || coll_pair(&drv, &coll)))
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
