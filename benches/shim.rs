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
//! Scaling: `threads/4t_per_call` / `threads/1t_per_call` (target ≤ 1.3). On a
//! machine whose cores differ in speed (a VM's) that ratio also compares cores;
//! `examples/shim_paths.rs scaling` pins each workload to its own core and
//! compares it with itself (docs/performance.md, "Round 8").
//!
//! The groups `drained` and `threads_drained` time the same workloads in
//! chunks of at most [`CHUNK_RECORDS`] records per thread, with the plugin's
//! writer thread draining the ring (`evring_flush_wait`, not timed) before
//! each chunk. That is the regime of a real job, where events come far slower
//! than here and every record goes into its thread's own ring lane. The
//! groups above run flat out: millions of events a second, more than the
//! writer takes, so part of their pushes find the lane full and take the
//! overflow path (shared lanes, or a counted drop). Both are reported.
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

/// Records a thread completes per timed chunk of the drained groups: a
/// quarter of one owned ring lane at the bench's ring size (65536 records:
/// 2048 per owned lane), so no push of a chunk finds its lane full.
const CHUNK_RECORDS: u64 = 512;

/// Time of `iters` calls of `f`, which completes `records` records a call.
/// `drained`: in chunks of at most [`CHUNK_RECORDS`] records, the ring
/// drained (not timed) before each chunk; else in one run.
fn timed_in(drv: &Drv, drained: bool, records: u64, iters: u64, mut f: impl FnMut()) -> Duration {
    if !drained {
        return timed(iters, f);
    }
    let chunk = (CHUNK_RECORDS / records).max(1);
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(chunk);
        assert!(drv.drain(), "the plugin's writer did not drain the ring");
        total += timed(n, &mut f);
        left -= n;
    }
    total
}

fn benches(c: &mut Criterion) {
    let drv = Drv::new("6");
    let ga = drv.start(&descr(ty::GROUP_API, std::ptr::null_mut()));
    let ca = drv.start(&coll_api_descr(ga));
    let coll = coll_descr(ca);
    let op = live_proxy_op(&drv, drv.ctx);
    // Flat out, then the same with the ring drained before each chunk
    // (records per call: 1 for a Coll pair and a ProxyStep, 4 for an
    // all-reduce).
    for (name, drained) in [("shim", false), ("drained", true)] {
        let mut g = c.benchmark_group(name);
        g.bench_function("coll_start_stop_under_live_collapi", |b| {
            b.iter_custom(|iters| timed_in(&drv, drained, 1, iters, || coll_pair(&drv, &coll)))
        });
        g.bench_function("proxystep_start_3_records_stop", |b| {
            b.iter_custom(|iters| {
                timed_in(&drv, drained, 1, iters, || proxy_step(&drv, drv.ctx, op))
            })
        });
        g.bench_function("allreduce_user_thread_sequence", |b| {
            b.iter_custom(|iters| timed_in(&drv, drained, 4, iters, || allreduce(&drv, drv.ctx)))
        });
        g.finish();
    }

    // Four workloads: user and proxy thread of comm A, user threads of B and C.
    let (a, op_a) = (H(drv.ctx), op);
    let (b_ctx, c_ctx) = (H(init_comm(&drv.p, 43)), H(init_comm(&drv.p, 44)));
    let calls = 3 * ALLREDUCE_CALLS + PROXY_STEP_CALLS;
    let round = || {
        allreduce(&drv, a.p());
        proxy_step(&drv, a.p(), op_a);
        allreduce(&drv, b_ctx.p());
        allreduce(&drv, c_ctx.p());
    };
    let work = Four {
        drv: &drv,
        a,
        op_a,
        b_ctx,
        c_ctx,
    };
    for (name, drained) in [("threads", false), ("threads_drained", true)] {
        let mut g = c.benchmark_group(name);
        g.bench_function("1t_per_call", |b| {
            // 13 records per round.
            b.iter_custom(|iters| timed_in(&drv, drained, 13, iters, round) / calls)
        });
        g.bench_function("4t_per_call", |b| {
            b.iter_custom(|iters| work.four_threads(iters, drained))
        });
        g.finish();
    }
}

/// The four workloads of the `threads` groups.
struct Four<'a> {
    drv: &'a Drv,
    a: H,
    op_a: H,
    b_ctx: H,
    c_ctx: H,
}

impl Four<'_> {
    /// `iters` rounds of each workload on its own thread at once: the
    /// slowest thread's time per call. `drained`: in chunks of at most
    /// [`CHUNK_RECORDS`] records per thread, all threads waiting (untimed)
    /// while the ring is drained before each chunk.
    fn four_threads(&self, iters: u64, drained: bool) -> Duration {
        // Records per iteration: 4 for an all-reduce, so that is the chunk's bound.
        let chunk = if drained {
            CHUNK_RECORDS / 4
        } else {
            iters.max(1)
        };
        let (start, done) = (SpinBarrier::new(4), SpinBarrier::new(4));
        let (start, done, drv) = (&start, &done, self.drv);
        let per_call = |f: &(dyn Fn() + Sync), n: u32, lead: bool| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let k = left.min(chunk);
                if drained && lead {
                    assert!(drv.drain(), "the plugin's writer did not drain the ring");
                }
                start.wait();
                total += timed(k, f);
                done.wait();
                left -= k;
            }
            total / n
        };
        let Four {
            a,
            op_a,
            b_ctx,
            c_ctx,
            ..
        } = *self;
        std::thread::scope(|s| {
            let hs = [
                s.spawn(move || {
                    per_call(&|| proxy_step(drv, a.p(), op_a), PROXY_STEP_CALLS, false)
                }),
                s.spawn(move || per_call(&|| allreduce(drv, b_ctx.p()), ALLREDUCE_CALLS, false)),
                s.spawn(move || per_call(&|| allreduce(drv, c_ctx.p()), ALLREDUCE_CALLS, false)),
            ];
            let mine = per_call(&|| allreduce(drv, a.p()), ALLREDUCE_CALLS, true);
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .fold(mine, Duration::max)
        })
    }
}

criterion_group!(shim, benches);
criterion_main!(shim);
