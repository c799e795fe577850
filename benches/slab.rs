//! `TaggedSlab` against `sharded_slab::Slab` (0.1.7) and `Mutex<slab::Slab>`.
//!
//! Every scenario is one criterion group holding the three implementations
//! (`evring`, `sharded_slab`, `mutex_slab`, plus evring variants where useful),
//! so one run compares them under the same machine conditions.
//!
//! * Payload: `u64`.
//! * Capacity: 4096 slots for evring (default per-thread cache: 32 free
//!   slots) and `slab::Slab`; sharded-slab uses its default config (it grows
//!   by pages and has no fixed capacity).
//! * Steady state: every slab holds [`LIVE`] entries before measuring, so
//!   neither free lists nor pages start out empty.
//! * Multi-thread groups report time per operation group *per thread*
//!   (`iter_custom`: every thread runs `iters` groups, the slowest thread's
//!   time counts), so perfect scaling keeps the figure flat as threads grow.
//!
//! Groups (compute ratios within a group: evring / sharded_slab, evring /
//! mutex_slab; and `mixed_8t/evring` / `mixed_1t/evring` for scaling):
//!
//! | group | what one iteration is |
//! |---|---|
//! | `insert_retire_1t` | insert then retire, one thread |
//! | `lookup_hit`, `lookup_stale` | one lookup of a live / retired key |
//! | `mixed_{1,2,4,8}t` | insert, get, retire on each of N threads sharing one slab |
//! | `handoff_2t` | insert on thread A, retire on thread B (IDs passed through a queue), per item |
//!
//! Timings are set on the `Criterion` config, not on the groups, so the
//! command line (`-- --warm-up-time 0.2 --measurement-time 0.5`) overrides them.
//!
//! `EVRING_BENCH_CLOCK=thread-cpu` measures each thread's CPU time instead of
//! wall time (for a shared, oversubscribed machine: time spent preempted is
//! left out; waiting for the other thread in `handoff_2t` is then left out
//! too). Use wall time (the default) on a quiet machine.
//!
//! ```text
//! cargo bench --bench slab
//! cargo bench --bench slab -- 'mixed_|handoff'
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use evring::{BoundedQueue, EventId, TaggedSlab};
use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::time::Duration;

#[path = "clock.rs"]
mod clock;
use clock::now;

/// Slots for evring and `slab::Slab`.
const CAPACITY: usize = 4096;
/// Entries kept live in every slab while measuring.
const LIVE: u64 = 1000;

type Evring = TaggedSlab<u64>;
type Sharded = sharded_slab::Slab<u64>;
type Locked = Mutex<slab::Slab<u64>>;

/// Time of `iters` calls of `f` on this thread.
#[inline]
fn timed<R>(iters: u64, mut f: impl FnMut(u64) -> R) -> Duration {
    let t = now();
    for i in 0..iters {
        black_box(f(i));
    }
    now() - t
}

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
/// Full can only happen if slots sit in other threads' caches; such retries
/// are part of the measured time and are counted in `SlabStats::full`, which
/// [`report_full`] prints.
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
        b.iter_custom(|iters| {
            timed(iters, |i| {
                let id = ev_insert(&ev, black_box(i));
                ev.retire_with(id, |v| *v)
            })
        })
    });
    g.bench_function("sharded_slab", |b| {
        b.iter_custom(|iters| {
            timed(iters, |i| {
                let key = sh.insert(black_box(i)).expect("sharded-slab full");
                sh.remove(key)
            })
        })
    });
    g.bench_function("mutex_slab", |b| {
        b.iter_custom(|iters| {
            timed(iters, |i| {
                // One lock per operation, as callers inserting and retiring
                // at different times would take it.
                let key = mx.lock().unwrap().insert(black_box(i));
                mx.lock().unwrap().try_remove(key)
            })
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
        b.iter_custom(|iters| timed(iters, |_| ev.get(black_box(ev_id)).map(|v| *v)))
    });
    g.bench_function("evring_check", |b| {
        // Validates the ID without reading the value.
        b.iter_custom(|iters| timed(iters, |_| ev.check(black_box(ev_id)).is_ok()))
    });
    g.bench_function("sharded_slab", |b| {
        b.iter_custom(|iters| timed(iters, |_| sh.get(black_box(sh_key)).map(|e| *e)))
    });
    g.bench_function("mutex_slab", |b| {
        b.iter_custom(|iters| {
            timed(iters, |_| {
                mx.lock().unwrap().get(black_box(mx_key)).copied()
            })
        })
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
        b.iter_custom(|iters| timed(iters, |_| ev.get(black_box(ev_id)).map(|v| *v)))
    });
    g.bench_function("evring_check", |b| {
        b.iter_custom(|iters| timed(iters, |_| ev.check(black_box(ev_id)).is_ok()))
    });
    g.bench_function("sharded_slab", |b| {
        b.iter_custom(|iters| timed(iters, |_| sh.get(black_box(sh_key)).map(|e| *e)))
    });
    g.bench_function("mutex_slab", |b| {
        b.iter_custom(|iters| {
            timed(iters, |_| {
                mx.lock().unwrap().get(black_box(mx_key)).copied()
            })
        })
    });
    g.finish();
}

/// Runs `op(i)` for `i in 0..iters` on `n` threads started together; returns
/// the slowest thread's time, so the result is time per op per thread.
fn on_threads(n: usize, iters: u64, op: impl Fn(u64) + Sync) -> Duration {
    let start = Barrier::new(n);
    std::thread::scope(|s| {
        let run = || {
            start.wait();
            timed(iters, &op)
        };
        let others: Vec<_> = (1..n).map(|_| s.spawn(run)).collect();
        let mine = run();
        others
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(mine, Duration::max)
    })
}

/// N threads each loop insert -> get -> retire on one shared slab. Reported
/// time is per (insert + get + retire) triple per thread.
fn mixed(c: &mut Criterion) {
    for n in [1usize, 2, 4, 8] {
        let ((ev, _), (sh, _), (mx, _)) = filled();
        let name = format!("mixed_{n}t");
        let mut g = c.benchmark_group(&name);
        g.bench_function("evring", |b| {
            b.iter_custom(|iters| {
                on_threads(n, iters, |i| {
                    let id = ev_insert(&ev, i);
                    black_box(ev.get(id).map(|v| *v));
                    black_box(ev.retire_with(id, |v| *v));
                })
            })
        });
        g.bench_function("sharded_slab", |b| {
            b.iter_custom(|iters| {
                on_threads(n, iters, |i| {
                    let key = sh.insert(i).expect("sharded-slab full");
                    black_box(sh.get(key).map(|e| *e));
                    black_box(sh.remove(key));
                })
            })
        });
        g.bench_function("mutex_slab", |b| {
            b.iter_custom(|iters| {
                on_threads(n, iters, |i| {
                    let key = mx.lock().unwrap().insert(i);
                    black_box(mx.lock().unwrap().get(key).copied());
                    black_box(mx.lock().unwrap().try_remove(key));
                })
            })
        });
        g.finish();
        report_full(&name, &ev);
    }
}

/// NCCL's pattern: thread A inserts and hands each key to thread B through a
/// bounded queue (the same queue for all three); B retires/removes it. Time
/// per item, from A's first insert to B's last retire.
fn handoff(c: &mut Criterion) {
    /// Keys in flight between A and B at most.
    const IN_FLIGHT: usize = 256;
    fn run<K: Send + Copy>(
        iters: u64,
        insert: impl Fn(u64) -> K + Sync,
        retire: impl Fn(K) + Sync,
    ) -> Duration {
        let q = BoundedQueue::<K>::new(IN_FLIGHT);
        let start = Barrier::new(2);
        std::thread::scope(|s| {
            let consumer = s.spawn(|| {
                start.wait();
                let mut left = iters;
                while left > 0 {
                    match q.pop() {
                        Some(k) => {
                            retire(k);
                            left -= 1;
                        }
                        // Yield rather than spin: on a loaded machine a
                        // spinning waiter can keep the other side off the CPU.
                        None => std::thread::yield_now(),
                    }
                }
            });
            start.wait();
            let t = now();
            for i in 0..iters {
                let mut k = insert(i);
                while let Err(back) = q.push(k) {
                    k = back;
                    std::thread::yield_now();
                }
            }
            consumer.join().unwrap();
            now() - t
        })
    }
    let ((ev, _), (sh, _), (mx, _)) = filled();
    let mut g = c.benchmark_group("handoff_2t");
    g.bench_function(BenchmarkId::new("evring", IN_FLIGHT), |b| {
        b.iter_custom(|iters| {
            run(
                iters,
                |i| ev_insert(&ev, i),
                |id| {
                    black_box(ev.retire_with(id, |v| *v));
                },
            )
        })
    });
    g.bench_function(BenchmarkId::new("sharded_slab", IN_FLIGHT), |b| {
        b.iter_custom(|iters| {
            run(
                iters,
                |i| sh.insert(i).expect("sharded-slab full"),
                |k| {
                    black_box(sh.remove(k));
                },
            )
        })
    });
    g.bench_function(BenchmarkId::new("mutex_slab", IN_FLIGHT), |b| {
        b.iter_custom(|iters| {
            run(
                iters,
                |i| mx.lock().unwrap().insert(i),
                |k| {
                    black_box(mx.lock().unwrap().try_remove(k));
                },
            )
        })
    });
    g.finish();
    report_full("handoff_2t", &ev);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(1000))
        .measurement_time(Duration::from_secs(3))
        .sample_size(60);
    targets = insert_retire_1t, lookup_hit, lookup_stale, mixed, handoff
}
criterion_main!(benches);
