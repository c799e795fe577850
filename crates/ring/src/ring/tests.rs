//! Unit and stress tests of the record ring (owned and shared lanes).

use super::*;
use crate::thread_index::MAX_THREADS;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};

/// A ring where every thread index owns a lane of `per_owned` records, plus
/// `shared` records in one shared lane.
fn every_index_owns<R: Send>(per_owned: usize, shared: usize) -> RecordRing<R> {
    RecordRing::with_lanes(MAX_THREADS * per_owned + shared, MAX_THREADS, per_owned, 1)
}

fn drain<R: Send>(r: &RecordRing<R>) -> Vec<R> {
    std::iter::from_fn(|| r.pop()).collect()
}

#[test]
fn full_ring_counts_drops() {
    let r = RecordRing::new(2);
    assert_eq!((r.owned_lanes(), r.shared_lanes()), (0, 1));
    assert!(r.push(1) && r.push(2));
    assert!(!r.push(3));
    assert_eq!((r.pushed(), r.dropped(), r.len()), (2, 1, 2));
    assert_eq!(r.pop(), Some(1));
    assert!(r.push(4));
    assert_eq!((r.pop(), r.pop(), r.pop()), (Some(2), Some(4), None));
}

#[test]
fn push_in_is_push_with_the_callers_index() {
    let r = every_index_owns(1, 1);
    let me = thread_index::current().unwrap();
    assert!(crate::with_thread(|t| r.push_in(t, 1u8)));
    // Its owned lane (of one record) is full now: the next goes to the shared lane.
    assert_eq!(r.owned[me].len(), 1);
    assert!(r.push(2));
    assert_eq!(r.shared[0].len(), 1);
    assert_eq!((r.pushed(), r.dropped()), (2, 0));
}

/// `push_with` writes into the owned lane's slot, then (lane full) builds
/// on the stack and goes to the shared lane, then counts a drop; the
/// closure runs exactly once every time and the record may be changed
/// after the write.
#[test]
fn push_with_writes_in_place_then_overflows_then_drops() {
    let r = every_index_owns::<[u64; 4]>(1, 1);
    let me = thread_index::current().unwrap();
    let mut calls = 0;
    let mut push = |v: u64| {
        r.push_with(|slot| {
            calls += 1;
            let mut rec = slot.write([v; 4]);
            rec[3] = v + 100;
            rec
        })
    };
    assert!(push(1));
    assert_eq!(r.owned[me].len(), 1, "into the owned lane");
    assert!(push(2));
    assert_eq!(r.shared[0].len(), 1, "owned lane full: shared lane");
    // Unheld indices lend their lanes (how many: other tests' threads hold
    // some), then a drop.
    let mut v = 2;
    loop {
        v += 1;
        assert!(v <= MAX_THREADS as u64 + 2, "a drop by now");
        if !push(v) {
            break;
        }
    }
    assert_eq!(calls as u64, v, "one call per push");
    assert_eq!((r.pushed(), r.dropped()), (v - 1, 1));
    let mut got = drain(&r);
    got.sort_unstable();
    let want: Vec<[u64; 4]> = (1..v).map(|v| [v, v, v, v + 100]).collect();
    assert_eq!(got, want);
}

/// A push made from inside a `push_with` closure on the same thread must
/// not go into the slot the closure is writing: the busy mark makes the
/// owned lane look full, so it goes to the shared lane. Both records come
/// out intact, and the lane takes pushes again afterwards (the mark is
/// taken off, also after a closure that panicked).
#[test]
fn push_inside_push_with_goes_elsewhere() {
    let r = every_index_owns::<u64>(4, 4);
    let me = thread_index::current().unwrap();
    assert!(r.push_with(|slot| {
        assert!(r.push(2), "the nested push");
        let w = slot.write(1);
        assert!(r.push_with(|inner| inner.write(3)), "a nested push_with");
        w
    }));
    assert_eq!(r.owned[me].len(), 1, "only the outer record");
    assert_eq!(
        r.shared[0].len(),
        2,
        "the nested ones went to the shared lane"
    );
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        r.push_with(|_slot| -> Written<'_, u64> { panic!("closure fails") })
    }));
    assert!(panicked.is_err());
    assert_eq!(r.pushed(), 3, "nothing published by the panicking closure");
    assert!(r.push(4) && r.push_with(|slot| slot.write(5)));
    assert_eq!(r.owned[me].len(), 3, "the lane takes pushes again");
    let mut got = drain(&r);
    got.sort_unstable();
    assert_eq!(got, [1, 2, 3, 4, 5]);
}

/// A thread without an index (here: `push_with_in` with a `Me` of none is
/// not constructible, so a ring without owned lanes) builds on the stack.
#[test]
fn push_with_without_an_owned_lane_uses_the_shared_lanes() {
    let r = RecordRing::<u32>::with_lanes(4, 0, 64, 2);
    assert!(crate::with_thread(
        |t| r.push_with_in(t, |slot| slot.write(7))
    ));
    assert_eq!(r.shared.iter().map(|l| l.len()).sum::<u64>(), 1);
    assert_eq!(r.pop(), Some(7));
}

#[test]
fn default_split_keeps_the_capacity_asked_for() {
    // (capacity, owned lanes, records per owned lane, shared lanes)
    for (cap, owned, per, shared) in [
        (1, 0, 64, 1),
        (100, 0, 64, 1),
        (127, 0, 64, 1),
        (128, 1, 64, 1),
        (1024, 8, 64, 8),
        (10_000, 16, 256, 8),
        (16384, 16, 512, 8),
        (1 << 22, 16, 1 << 17, 8),
    ] {
        let r = RecordRing::<u8>::new(cap);
        assert_eq!(
            (r.capacity(), r.owned_lanes(), r.shared_lanes()),
            (cap, owned, shared),
            "capacity {cap}"
        );
        assert!(
            r.owned.iter().all(|l| l.capacity() == per),
            "capacity {cap}"
        );
        let sum: usize = r.owned.iter().map(|l| l.capacity()).sum::<usize>()
            + r.shared.iter().map(|l| l.capacity()).sum::<usize>();
        assert_eq!(sum, cap);
        assert!(2 * owned * per <= cap, "owned lanes hold at most half");
    }
    let r = RecordRing::<u8>::with_lanes(10, 1, 2, 7);
    assert_eq!(r.shared_lanes(), 4, "rounded down to a power of two");
    let caps: Vec<usize> = r.shared.iter().map(|l| l.capacity()).collect();
    assert_eq!(caps, [2, 2, 2, 2]);
    let r = RecordRing::<u8>::with_lanes(3, 0, 64, 64);
    assert_eq!(r.shared_lanes(), 2, "at most the records left");
}

/// One thread alone fills its owned lane, every shared lane and the owned
/// lanes of indices no thread holds before it counts a drop, and gets every
/// record back; a thread without an owned lane likewise. Laps later every
/// lane still works. (Which indices other tests' threads hold at that
/// moment varies: `tests/ring_burst.rs` checks the exact room alone in its
/// process.)
#[test]
fn one_thread_fills_its_lane_every_shared_lane_and_unheld_lanes() {
    let me = thread_index::current().expect("an index is free");
    // Owned lanes of 8 records for every index, 1000 records in 4 shared lanes.
    let r = RecordRing::with_lanes(MAX_THREADS * 8 + 1000, MAX_THREADS, 8, 4);
    // Only the indices below `me`: this thread has no owned lane.
    let unowned = RecordRing::with_lanes(me * 8 + 1000, me, 8, 4);
    for (ring, least) in [(&r, 1008u32), (&unowned, 1000)] {
        let mut attempts = 0u64;
        for lap in 0..5u32 {
            let mut room = 0u32;
            loop {
                attempts += 1;
                if !ring.push(lap << 16 | room) {
                    break;
                }
                room += 1;
            }
            assert!(room >= least, "lap {lap}: {room} records before a drop");
            assert!(room as usize <= ring.capacity());
            assert_eq!(ring.len(), room as usize);
            let mut got = drain(ring);
            got.sort_unstable();
            assert!(got.iter().copied().eq((0..room).map(|i| lap << 16 | i)));
            assert!(ring.is_empty());
        }
        assert_eq!(ring.pushed() + ring.dropped(), attempts);
        assert_eq!(ring.dropped(), 5);
    }
    // The shim's default ring: at least the owned lane plus every shared
    // lane (the owned lanes of other live indices aside, all of it).
    let r = RecordRing::new(16384);
    let least = if me < r.owned_lanes() {
        512 + 8192
    } else {
        8192
    };
    let accepted = (0..20_000u32).filter(|&i| r.push(i)).count();
    assert!(accepted >= least, "{accepted}");
    assert_eq!(
        (r.pushed(), r.dropped()),
        (accepted as u64, 20_000 - accepted as u64)
    );
}

/// Records still in the ring are dropped with it, in both kinds of lane.
#[test]
fn remaining_records_are_dropped_with_the_ring() {
    let token = Arc::new(());
    let r = every_index_owns(2, 8);
    for _ in 0..6 {
        assert!(r.push(token.clone()));
    }
    drop(r.pop());
    assert_eq!(Arc::strong_count(&token), 6);
    drop(r);
    assert_eq!(Arc::strong_count(&token), 1);
}

/// Records of one thread come out in push order while they stay in its lane.
/// Lanes of 128 Ki records never fill here, not even when all three threads
/// use one lane (one after the other, each taking over the index of the one
/// that exited: 90 000 records in all): no spill.
#[test]
fn each_thread_keeps_its_order_in_its_lane() {
    const PER: u64 = 30_000;
    let r = Arc::new(RecordRing::with_lanes(24 << 17, 16, 1 << 17, 8));
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let r = r.clone();
            std::thread::spawn(move || (0..PER).filter(|i| !r.push(p << 32 | i)).count() as u64)
        })
        .collect();
    let mut last = [None::<u64>; 3];
    let mut got = 0u64;
    let mut check = |v: u64| {
        let (p, i) = ((v >> 32) as usize, v & 0xFFFF_FFFF);
        assert!(
            last[p].is_none_or(|l| l < i),
            "producer {p}: {i} after {last:?}"
        );
        last[p] = Some(i);
    };
    while producers.iter().any(|p| !p.is_finished()) {
        if let Some(v) = r.pop() {
            check(v);
            got += 1;
        }
    }
    let dropped: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    while let Some(v) = r.pop() {
        check(v);
        got += 1;
    }
    assert_eq!((got, dropped), (3 * PER, 0));
    assert_eq!((r.pushed(), r.dropped()), (got, dropped));
}

/// A small ring hammered by six producers, three with an owned lane and
/// three without (the ring is built once their indices are known), and two
/// consumers popping concurrently: no record lost or duplicated, every
/// failed push counted, owned lanes overflow into the shared ones.
#[test]
fn stress_owned_shared_and_overflow_no_loss_no_duplicate_exact_drops() {
    const THREADS: u64 = 6;
    const PER: u64 = 100_000;
    let (index_tx, index_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(THREADS as usize + 1));
    let (ring_txs, producers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|p| {
            let (index_tx, start) = (index_tx.clone(), start.clone());
            let (ring_tx, ring_rx) = mpsc::channel::<Arc<RecordRing<u64>>>();
            let t = std::thread::spawn(move || {
                index_tx.send(thread_index::current().unwrap()).unwrap();
                let r = ring_rx.recv().unwrap();
                start.wait();
                (0..PER).filter(|i| !r.push(p << 32 | i)).count() as u64
            });
            (ring_tx, t)
        })
        .unzip();
    let mut indices: Vec<usize> = (0..THREADS).map(|_| index_rx.recv().unwrap()).collect();
    indices.sort_unstable();
    // The three lowest indices own a lane (of 32 records); the others share.
    let owned = indices[2] + 1;
    let r = Arc::new(RecordRing::with_lanes(owned * 32 + 256, owned, 32, 4));
    for tx in ring_txs {
        tx.send(r.clone()).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (r, done) = (r.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = HashSet::new();
                loop {
                    let finished = done.load(Ordering::Acquire);
                    match r.pop() {
                        Some(v) => assert!(seen.insert(v), "{v:#x} popped twice"),
                        None if finished => break,
                        None => std::thread::yield_now(),
                    }
                }
                seen
            })
        })
        .collect();
    start.wait();
    let dropped: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    done.store(true, Ordering::Release);
    let mut all = HashSet::new();
    for c in consumers {
        for v in c.join().unwrap() {
            assert!(all.insert(v), "{v:#x} popped by both consumers");
        }
    }
    assert_eq!(all.len() as u64 + dropped, THREADS * PER);
    assert_eq!((r.pushed(), r.dropped()), (all.len() as u64, dropped));
    assert!(dropped > 0, "the test should overflow the ring");
    let shared: u64 = r.shared.iter().map(|l| l.pushed()).sum();
    let owned_pushed: u64 = r.owned.iter().map(|l| l.pushed()).sum();
    assert!(
        owned_pushed > 0 && shared > 0,
        "{owned_pushed} owned, {shared} shared"
    );
    assert_eq!((r.is_empty(), r.len()), (true, 0));
}

/// A thread exits with records in its owned lane; the next thread to claim
/// its index becomes the lane's producer and appends after them (the lane's
/// tail and cached head pass with the index). Pairs of threads run one
/// after the other, the ring drained after each pair: when both held the
/// same index, the lane gives the first thread's records, then the second's.
#[test]
fn a_reused_index_takes_over_its_lane_with_records_in_it() {
    let r = Arc::new(every_index_owns::<u64>(8, 64));
    let mut same = 0;
    for pair in 0..300u64 {
        let indices: Vec<usize> = (0..2u64)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for k in 0..3 {
                        assert!(r.push(pair << 8 | t << 4 | k));
                    }
                    thread_index::current().unwrap()
                })
                .join()
                .unwrap()
            })
            .collect();
        let got = drain(&r);
        let expect: Vec<u64> = (0..6).map(|i| pair << 8 | (i / 3) << 4 | (i % 3)).collect();
        if indices[0] == indices[1] {
            same += 1;
            assert_eq!(got, expect, "pair {pair}: one lane, two holders in turn");
        } else {
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, expect, "pair {pair}");
        }
    }
    assert!(same > 0, "no thread reused its predecessor's index");
    assert_eq!((r.pushed(), r.dropped(), r.len()), (1800, 0, 0));
}

/// What the shim's writer relies on when it closes a stream: take `len()`,
/// pop that many, and every record pushed before the `len()` call is among
/// them, however fast other threads keep pushing. Checked with shared lanes
/// only (a mark often sits behind a noise record whose producer is still
/// writing it) and with an owned lane for every thread (each round's marks
/// come from a new thread, often on its predecessor's index).
#[test]
fn len_then_pop_drains_everything_pushed_before() {
    const NOISE_LIMIT: usize = 32;
    for r in [
        RecordRing::with_lanes(1 << 16, 0, 0, 2),
        RecordRing::with_lanes(1 << 16, MAX_THREADS, 64, 2),
    ] {
        let r = Arc::new(r);
        let stop = Arc::new(AtomicBool::new(false));
        // Noise records in the ring and not yet popped. The noise threads
        // keep this below a lane's size: a ring kept full would drop most
        // marks (CI's two cores met "too few marks" below even with a
        // yield on a full ring).
        let outstanding = Arc::new(AtomicUsize::new(0));
        let noise: Vec<_> = (0..2)
            .map(|_| {
                let (r, stop, outstanding) = (r.clone(), stop.clone(), outstanding.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if outstanding.load(Ordering::Relaxed) >= NOISE_LIMIT {
                            std::thread::yield_now();
                            continue;
                        }
                        outstanding.fetch_add(1, Ordering::Relaxed);
                        if !r.push(u64::MAX) {
                            outstanding.fetch_sub(1, Ordering::Relaxed);
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut checked = 0;
        for round in 0..1000u64 {
            // Marks pushed on another thread, handed over by join
            // (happens-before).
            let r2 = r.clone();
            let accepted =
                std::thread::spawn(move || (0..3).filter(|&k| r2.push(round * 4 + k)).count())
                    .join()
                    .unwrap();
            let n = r.len();
            let mut found = 0;
            for v in (0..n).filter_map(|_| r.pop()) {
                if v == u64::MAX {
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                } else if v / 4 == round {
                    found += 1;
                }
            }
            assert_eq!(
                found, accepted,
                "round {round}: a mark pushed before len() was not among the first {n} pops"
            );
            checked += accepted;
        }
        stop.store(true, Ordering::Relaxed);
        for t in noise {
            t.join().unwrap();
        }
        assert!(checked > 500, "too few marks got into the ring: {checked}");
    }
}

/// `new_resident` maps the owned lanes' pages when the ring is made; `new`
/// leaves them to the first pushes (the shared lanes are written either
/// way). Measured as the process's resident set: 32 MiB of owned lanes, so
/// what other tests allocate meanwhile is small beside it.
#[cfg(target_os = "linux")]
#[test]
fn new_resident_maps_the_owned_lanes_and_new_does_not() {
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }
    type Rec = [u64; 16];
    // The default split of 2^19 records: 16 owned lanes of 2^14 (32 MiB of
    // 128-byte records), the rest in shared lanes.
    let cap = 1 << 19;
    let owned_bytes = 16 * (1u64 << 14) * 128;
    let r0 = resident_bytes();
    let lazy: RecordRing<Rec> = RecordRing::new(cap);
    let r1 = resident_bytes();
    let resident: RecordRing<Rec> = RecordRing::new_resident(cap);
    let r2 = resident_bytes();
    let (lazy_growth, resident_growth) = (r1.saturating_sub(r0), r2.saturating_sub(r1));
    assert!(
        resident_growth >= lazy_growth + owned_bytes * 3 / 4,
        "new_resident grew the resident set by {resident_growth} bytes, new by {lazy_growth}"
    );
    // Both work as rings.
    for ring in [&lazy, &resident] {
        assert!(ring.push([3; 16]));
        assert_eq!(ring.pop(), Some([3; 16]));
    }
}
