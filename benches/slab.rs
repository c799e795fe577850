//! `TaggedSlab` against `sharded_slab::Slab` (0.1.7) and `Mutex<slab::Slab>`.
//!
//! Every scenario is one criterion group holding the three implementations
//! (`evring`, `sharded_slab`, `mutex_slab`, plus evring variants where useful),
//! so one run compares them under the same machine conditions.
//!
//! * Payload: `u64`.
//! * Capacity: 4096 slots for evring and `slab::Slab`; sharded-slab uses its
//!   default config (it grows by pages and has no fixed capacity).
//! * Steady state: every slab holds [`LIVE`] entries before measuring, so
//!   neither free lists nor pages start out empty.
//!
//! Timings are set on the `Criterion` config, not on the groups, so the
//! command line (`-- --warm-up-time 0.2 --measurement-time 0.5`) overrides them.
//!
//! ```text
//! cargo bench --bench slab
//! cargo bench --bench slab -- --warm-up-time 0.2 --measurement-time 0.5
//! ```

use criterion::{criterion_group, criterion_main, Criterion};
use evring::{EventId, TaggedSlab};
use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// Slots for evring and `slab::Slab`.
const CAPACITY: usize = 4096;
/// Entries kept live in every slab while measuring.
const LIVE: u64 = 1000;

type Evring = TaggedSlab<u64>;
type Sharded = sharded_slab::Slab<u64>;
type Locked = Mutex<slab::Slab<u64>>;

/// Builds the three slabs, each pre-filled with `LIVE` entries; returns one
/// live key of each (the last inserted).
fn filled() -> ((Evring, EventId), (Sharded, usize), (Locked, usize)) {
    let ev = Evring::new(CAPACITY);
    let sh = Sharded::new();
    let mut mx = slab::Slab::with_capacity(CAPACITY);
    let (mut ev_id, mut sh_key, mut mx_key) = (None, 0, 0);
    for i in 0..LIVE {
        ev_id = Some(ev.insert(i).expect("evring has room"));
        sh_key = sh.insert(i).expect("sharded-slab has room");
        mx_key = mx.insert(i);
    }
    (
        (ev, ev_id.expect("LIVE > 0")),
        (sh, sh_key),
        (Mutex::new(mx), mx_key),
    )
}

/// `TaggedSlab::insert`, retried (after a yield) while the slab reports `Full`.
///
/// With two threads, a slab of 4096 can run dry while retired slots wait for
/// the epoch to advance; such waits are part of the measured time and are
/// counted in `SlabStats::full`, which [`report_full`] prints.
fn ev_insert(ev: &Evring, value: u64) -> EventId {
    loop {
        match ev.insert(value) {
            Ok(id) => return id,
            Err(_) => std::thread::yield_now(),
        }
    }
}

/// Prints how many evring inserts found the slab full during a scenario.
fn report_full(scenario: &str, ev: &Evring) {
    let full = ev.stats().full;
    if full > 0 {
        eprintln!("note: {scenario}/evring: {full} inserts found the slab full and were retried");
    }
}

/// Insert a value, then retire/remove the same key, on one thread.
fn insert_retire_1t(c: &mut Criterion) {
    let ((ev, _), (sh, _), (mx, _)) = filled();
    let mut g = c.benchmark_group("insert_retire_1t");
    g.bench_function("evring", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i = i.wrapping_add(1);
            let id = ev_insert(&ev, black_box(i));
            black_box(ev.retire_with(id, |v| *v))
        })
    });
    g.bench_function("sharded_slab", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i = i.wrapping_add(1);
            let key = sh.insert(black_box(i)).expect("sharded-slab full");
            black_box(sh.remove(key))
        })
    });
    g.bench_function("mutex_slab", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i = i.wrapping_add(1);
            // One lock per operation, as callers inserting and retiring at
            // different times would take it.
            let key = mx.lock().unwrap().insert(black_box(i));
            black_box(mx.lock().unwrap().try_remove(key))
        })
    });
    g.finish();
    report_full("insert_retire_1t", &ev);
}

/// Read a live key.
fn lookup_hit(c: &mut Criterion) {
    let ((ev, ev_id), (sh, sh_key), (mx, mx_key)) = filled();
    let mut g = c.benchmark_group("lookup_hit");
    g.bench_function("evring", |b| {
        // Takes and drops a counted reference on every call.
        b.iter(|| ev.get(black_box(ev_id)).map(|v| *v))
    });
    g.bench_function("evring_check", |b| {
        // Validates the ID without reading the value.
        b.iter(|| ev.check(black_box(ev_id)).is_ok())
    });
    g.bench_function("sharded_slab", |b| {
        b.iter(|| sh.get(black_box(sh_key)).map(|e| *e))
    });
    g.bench_function("mutex_slab", |b| {
        b.iter(|| mx.lock().unwrap().get(black_box(mx_key)).copied())
    });
    g.finish();
}

/// Read a key whose entry has been retired/removed (and not reused).
fn lookup_stale(c: &mut Criterion) {
    let ((ev, _), (sh, _), (mx, _)) = filled();
    let ev_id = ev.insert(7).expect("evring has room");
    assert!(ev.retire_with(ev_id, |_| ()).is_some());
    let sh_key = sh.insert(7).expect("sharded-slab has room");
    assert!(sh.remove(sh_key));
    // `slab::Slab` keys carry no generation: this one reads as stale only
    // because its slot stays vacant (nothing is inserted afterwards).
    let mx_key = mx.lock().unwrap().insert(7);
    mx.lock().unwrap().remove(mx_key);

    let mut g = c.benchmark_group("lookup_stale");
    g.bench_function("evring", |b| {
        b.iter(|| ev.get(black_box(ev_id)).map(|v| *v))
    });
    g.bench_function("evring_check", |b| {
        b.iter(|| ev.check(black_box(ev_id)).is_ok())
    });
    g.bench_function("sharded_slab", |b| {
        b.iter(|| sh.get(black_box(sh_key)).map(|e| *e))
    });
    g.bench_function("mutex_slab", |b| {
        b.iter(|| mx.lock().unwrap().get(black_box(mx_key)).copied())
    });
    g.finish();
}

/// Runs `op(i)` for `i in 0..iters` on two threads started together; returns
/// the slower thread's time, so the result is time per op per thread.
fn two_threads(iters: u64, op: impl Fn(u64) + Sync) -> Duration {
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let run = || {
            start.wait();
            let t = Instant::now();
            for i in 0..iters {
                op(i);
            }
            t.elapsed()
        };
        let other = s.spawn(run);
        let mine = run();
        mine.max(other.join().unwrap())
    })
}

/// Two threads each loop insert -> get -> retire on one shared slab. Reported
/// time is per (insert + get + retire) triple per thread.
fn mixed_2t(c: &mut Criterion) {
    let ((ev, _), (sh, _), (mx, _)) = filled();
    let mut g = c.benchmark_group("mixed_2t");
    g.bench_function("evring", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                let id = ev_insert(&ev, i);
                black_box(ev.get(id).map(|v| *v));
                black_box(ev.retire_with(id, |v| *v));
            })
        })
    });
    g.bench_function("sharded_slab", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                let key = sh.insert(i).expect("sharded-slab full");
                black_box(sh.get(key).map(|e| *e));
                black_box(sh.remove(key));
            })
        })
    });
    g.bench_function("mutex_slab", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                let key = mx.lock().unwrap().insert(i);
                black_box(mx.lock().unwrap().get(key).copied());
                black_box(mx.lock().unwrap().try_remove(key));
            })
        })
    });
    g.finish();
    report_full("mixed_2t", &ev);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(1000))
        .measurement_time(Duration::from_secs(3))
        .sample_size(60);
    targets = insert_retire_1t, lookup_hit, lookup_stale, mixed_2t
}
criterion_main!(benches);
