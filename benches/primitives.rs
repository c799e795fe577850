//! What the machine charges for the operations the plugin's paths are made
//! of, to attribute a path's time on a CPU where it is not what the
//! instruction count predicts (docs/performance.md, "Round 4": on the GPU
//! machine's CPU a 36 % instruction cut moved the Coll pair 8–19 %).
//!
//! | bench | one iteration |
//! |---|---|
//! | `primitives/load_store` | a Relaxed load and store of a line this thread owns (the floor) |
//! | `primitives/fetch_add` | one uncontended locked add (a counter, a reference) |
//! | `primitives/compare_exchange` | one uncontended locked compare-and-swap (a slot's state, a node's word) |
//! | `primitives/rdtsc` | one time-stamp counter read (x86_64; what `now_ns` costs) |
//! | `primitives/instant_now` | `Instant::now` (the vDSO clock) |
//! | `primitives/line_round_trip` | one line written by this thread, then by another, and seen back here: two transfers between cores |
//!
//! ```text
//! cargo bench --bench primitives --no-run    # then, on the machine that measures:
//! taskset -c 2-9 ./primitives-<hash> --bench --noplot --warm-up-time 0.5 --measurement-time 1.5
//! ```

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Spins, and after a while yields: on a machine with fewer free cores than
/// spinning threads (the 2-core CI box) the partner must get to run.
#[inline]
fn pause(spins: &mut u32) {
    *spins += 1;
    if *spins < 1 << 12 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// An atomic on a line of its own.
#[repr(align(128))]
struct Line(AtomicU64);

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("primitives");
    let line = Line(AtomicU64::new(0));
    let a = black_box(&line.0);
    g.bench_function("load_store", |b| {
        b.iter(|| a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed))
    });
    g.bench_function("fetch_add", |b| {
        b.iter(|| a.fetch_add(1, Ordering::Relaxed))
    });
    g.bench_function("compare_exchange", |b| {
        b.iter(|| {
            let v = a.load(Ordering::Relaxed);
            a.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)
        })
    });
    #[cfg(target_arch = "x86_64")]
    g.bench_function("rdtsc", |b| {
        // SAFETY: RDTSC exists on every x86_64 CPU and has no preconditions.
        b.iter(|| unsafe { core::arch::x86_64::_rdtsc() })
    });
    g.bench_function("instant_now", |b| b.iter(Instant::now));
    g.bench_function("line_round_trip", |b| {
        // The partner waits for an odd value and answers with the next even
        // one; each iteration here writes odd and waits for the answer.
        let ball = Line(AtomicU64::new(0));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let (mut seen, mut spins) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let v = ball.0.load(Ordering::Acquire);
                    if v % 2 == 1 && v != seen {
                        seen = v;
                        spins = 0;
                        ball.0.store(v + 1, Ordering::Release);
                    } else {
                        pause(&mut spins);
                    }
                }
            });
            b.iter(|| {
                let v = ball.0.load(Ordering::Relaxed) + 1;
                ball.0.store(v, Ordering::Release);
                let mut spins = 0;
                while ball.0.load(Ordering::Acquire) != v + 1 {
                    pause(&mut spins);
                }
            });
            stop.store(true, Ordering::Relaxed);
        });
    });
    g.finish();
}

criterion_group!(primitives, benches);
criterion_main!(primitives);
