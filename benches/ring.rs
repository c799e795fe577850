//! `RecordRing` (owned lanes for the first 16 thread indices, shared lanes
//! for the rest and for overflow) against the single shared queue that came
//! before the lanes (one `BoundedQueue` plus the same drop counters), with
//! N producer threads and one consumer thread popping all the time.
//!
//! * Record: 256 bytes (the shim's ring record was 260 bytes, 248 with
//!   interned strings, later 128; the ring now carries the hot path's log
//!   entries, at most 128 bytes each).
//! * Capacity: 16384 records (the shim's default `EVRING_RING`).
//! * Time per push *per producer thread* (every producer does `iters`
//!   pushes; the slowest producer's time counts), so perfect scaling keeps
//!   the figure flat as producers are added. The consumer is not timed.
//! * A push into a full ring is a counted drop, as in the plugin; drops are
//!   printed after each group (a drop costs more on the lanes: it tries
//!   every lane first).
//!
//! | group | one iteration, on each of N producer threads |
//! |---|---|
//! | `ring_{1,2,4,8}p` | one push, back to back |
//! | `ring_spaced_{1,2,4,8}p` | one push, then ~100 ns of the producer's own work (the plugin pushes one record per event, between NCCL calls) |
//! | `ring_local_1p` | one push; after each 256 pushes (untimed) the same thread pops them all: the push's own instructions, no line crosses cores |
//! | `ring_drained_1p` | one push; after each 256 pushes (untimed) the producer waits until the consumer has taken them all: no push finds the ring full, and the consumer has read the lines the producer writes next (the regime of a plugin whose writer keeps up) |
//!
//! On a machine where the consumer cannot keep up (the 2-core dev box) the
//! first two groups mostly measure the full-ring path (the drop share is
//! printed); `ring_drained_1p` measures the push itself there too.
//!
//! Functions in each group: `single_queue` (before), `lanes` (now).
//! Ratio of interest: `ring_4p/lanes` / `ring_1p/lanes` (scaling), and
//! `lanes` / `single_queue` within a group.
//!
//! ```text
//! cargo bench --bench ring
//! ./ring-<hash> --bench --noplot 'ring_'
//! EVRING_BENCH_CLOCK=thread-cpu cargo bench --bench ring   # shared machine
//! ```

use criterion::{criterion_group, criterion_main, Criterion};
use evring::{BoundedQueue, Counter, RecordRing};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

#[path = "clock.rs"]
mod clock;
use clock::now;

const CAPACITY: usize = 16384;

type Record = [u64; 32];

/// The ring as it was before the lanes: one MPMC queue for all producers.
struct SingleQueue {
    queue: BoundedQueue<Record>,
    pushed: Counter,
    dropped: Counter,
}

impl SingleQueue {
    fn push(&self, r: Record) -> bool {
        match self.queue.push(r) {
            Ok(()) => {
                self.pushed.incr();
                true
            }
            Err(_) => {
                self.dropped.incr();
                false
            }
        }
    }
}

trait Ring: Sync {
    fn push(&self, r: Record) -> bool;
    fn pop(&self) -> Option<Record>;
    fn dropped(&self) -> u64;
}

impl Ring for SingleQueue {
    fn push(&self, r: Record) -> bool {
        SingleQueue::push(self, r)
    }
    fn pop(&self) -> Option<Record> {
        self.queue.pop()
    }
    fn dropped(&self) -> u64 {
        self.dropped.get()
    }
}

impl Ring for RecordRing<Record> {
    fn push(&self, r: Record) -> bool {
        RecordRing::push(self, r)
    }
    fn pop(&self) -> Option<Record> {
        RecordRing::pop(self)
    }
    fn dropped(&self) -> u64 {
        RecordRing::dropped(self)
    }
}

/// About 100 ns of work that touches no shared memory.
#[inline(never)]
fn own_work(seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..64 {
        x = black_box(x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(7));
    }
    x
}

/// `iters` pushes on each of `producers` threads while one more thread pops
/// until they are done; the slowest producer's time.
fn run(ring: &dyn Ring, producers: usize, iters: u64, spaced: bool) -> Duration {
    let start = Barrier::new(producers + 1);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let consumer = s.spawn(|| {
            start.wait();
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                match ring.pop() {
                    Some(r) => n = n.wrapping_add(r[0]),
                    None => std::hint::spin_loop(),
                }
            }
            while ring.pop().is_some() {}
            black_box(n);
        });
        let producers: Vec<_> = (0..producers)
            .map(|p| {
                let start = &start;
                s.spawn(move || {
                    let mut r = [p as u64; 32];
                    start.wait();
                    let t = now();
                    for i in 0..iters {
                        r[0] = i;
                        black_box(ring.push(r));
                        if spaced {
                            black_box(own_work(i));
                        }
                    }
                    now() - t
                })
            })
            .collect();
        let slowest = producers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(Duration::ZERO, Duration::max);
        done.store(true, Ordering::Relaxed);
        consumer.join().unwrap();
        slowest
    })
}

/// Pushes between two waits for the consumer in [`run_drained`].
const DRAINED_BATCH: u64 = 256;

/// `iters` pushes on this thread, in batches of [`DRAINED_BATCH`]; after each
/// batch (untimed) it waits until the consumer thread has popped them all.
/// The time spent pushing.
fn run_drained(ring: &dyn Ring, iters: u64) -> Duration {
    let popped = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u64;
            loop {
                match ring.pop() {
                    Some(r) => {
                        n = n.wrapping_add(r[0]);
                        popped.fetch_add(1, Ordering::Release);
                    }
                    None if done.load(Ordering::Acquire) => break,
                    None => std::hint::spin_loop(),
                }
            }
            black_box(n);
        });
        let mut r = [7u64; 32];
        let (mut pushed, mut took) = (0u64, Duration::ZERO);
        while pushed < iters {
            let n = DRAINED_BATCH.min(iters - pushed);
            took += push_batch(ring, &mut r, n);
            pushed += n;
            while popped.load(Ordering::Acquire) + ring.dropped() < pushed {
                std::hint::spin_loop();
            }
        }
        done.store(true, Ordering::Release);
        took
    })
}

/// Time of `n` pushes of `r` (its first word numbered), back to back.
fn push_batch(ring: &dyn Ring, r: &mut [u64; 32], n: u64) -> Duration {
    let t = now();
    for i in 0..n {
        r[0] = i;
        black_box(ring.push(*r));
    }
    now() - t
}

/// `iters` pushes in batches of [`DRAINED_BATCH`], each batch popped (untimed)
/// by this same thread before the next. The time spent pushing.
fn run_local(ring: &dyn Ring, iters: u64) -> Duration {
    let mut r = [7u64; 32];
    let (mut pushed, mut took) = (0u64, Duration::ZERO);
    while pushed < iters {
        let n = DRAINED_BATCH.min(iters - pushed);
        took += push_batch(ring, &mut r, n);
        pushed += n;
        while let Some(v) = ring.pop() {
            black_box(v[0]);
        }
    }
    took
}

fn drained_group(c: &mut Criterion) {
    let single = SingleQueue {
        queue: BoundedQueue::new(CAPACITY),
        pushed: Counter::new(),
        dropped: Counter::new(),
    };
    let lanes = RecordRing::<Record>::new(CAPACITY);
    let mut g = c.benchmark_group("ring_local_1p");
    g.bench_function("single_queue", |b| {
        b.iter_custom(|iters| run_local(&single, iters))
    });
    g.bench_function("lanes", |b| b.iter_custom(|iters| run_local(&lanes, iters)));
    g.finish();
    let mut g = c.benchmark_group("ring_drained_1p");
    g.bench_function("single_queue", |b| {
        b.iter_custom(|iters| run_drained(&single, iters))
    });
    g.bench_function("lanes", |b| {
        b.iter_custom(|iters| run_drained(&lanes, iters))
    });
    g.finish();
    assert_eq!(
        (single.dropped.get(), lanes.dropped()),
        (0, 0),
        "a ring drained after every batch never drops"
    );
}

fn group(c: &mut Criterion, name: &str, producers: usize, spaced: bool) {
    let single = SingleQueue {
        queue: BoundedQueue::new(CAPACITY),
        pushed: Counter::new(),
        dropped: Counter::new(),
    };
    let lanes = RecordRing::<Record>::new(CAPACITY);
    let mut g = c.benchmark_group(name);
    g.bench_function("single_queue", |b| {
        b.iter_custom(|iters| run(&single, producers, iters, spaced))
    });
    g.bench_function("lanes", |b| {
        b.iter_custom(|iters| run(&lanes, producers, iters, spaced))
    });
    g.finish();
    for (f, ring, pushed) in [
        ("single_queue", &single as &dyn Ring, single.pushed.get()),
        ("lanes", &lanes as &dyn Ring, lanes.pushed()),
    ] {
        let dropped = ring.dropped();
        if dropped > 0 {
            let share = dropped as f64 / (dropped + pushed) as f64 * 100.0;
            eprintln!("note: {name}/{f}: {dropped} pushes found the ring full ({share:.1} %)");
        }
    }
}

fn benches(c: &mut Criterion) {
    drained_group(c);
    for spaced in [false, true] {
        for n in [1, 2, 4, 8] {
            let name = if spaced {
                format!("ring_spaced_{n}p")
            } else {
                format!("ring_{n}p")
            };
            group(c, &name, n, spaced);
        }
    }
}

criterion_group! {
    name = ring;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(ring);
