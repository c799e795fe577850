//! Unit and stress tests of the lane-split record ring.

use super::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

#[test]
fn full_ring_counts_drops() {
    let r = RecordRing::new(2);
    assert!(r.push(1) && r.push(2));
    assert!(!r.push(3));
    assert_eq!((r.pushed(), r.dropped(), r.len()), (2, 1, 2));
    assert_eq!(r.pop(), Some(1));
    assert!(r.push(4));
    assert_eq!((r.pop(), r.pop(), r.pop()), (Some(2), Some(4), None));
}

#[test]
fn lane_split_keeps_the_capacity_asked_for() {
    for (cap, lanes) in [
        (1, 1),
        (63, 1),
        (64, 1),
        (100, 1),
        (128, 2),
        (16384, 16),
        (1 << 20, 16),
    ] {
        let r = RecordRing::<u8>::new(cap);
        assert_eq!((r.capacity(), r.lanes()), (cap, lanes), "capacity {cap}");
        let sum: usize = r.lanes.iter().map(|l| l.capacity()).sum();
        assert_eq!(sum, cap);
    }
    let r = RecordRing::<u8>::with_lanes(10, 7);
    assert_eq!(r.lanes(), 4, "rounded down to a power of two");
    let caps: Vec<usize> = r.lanes.iter().map(|l| l.capacity()).collect();
    assert_eq!(caps, [3, 3, 2, 2]);
    assert_eq!(
        RecordRing::<u8>::with_lanes(3, 64).lanes(),
        2,
        "at most the capacity"
    );
}

/// One thread alone fills every lane (its own, then the others in turn)
/// before it counts a drop, and gets every record back.
#[test]
fn one_thread_can_fill_the_whole_capacity() {
    let r = RecordRing::with_lanes(1000, 8);
    for i in 0..1000 {
        assert!(r.push(i), "push {i} dropped below capacity");
    }
    assert!(!r.push(1000));
    assert_eq!((r.pushed(), r.dropped(), r.len()), (1000, 1, 1000));
    let mut got: Vec<u32> = std::iter::from_fn(|| r.pop()).collect();
    assert_eq!(got.len(), 1000);
    got.sort_unstable();
    assert!(got.iter().copied().eq(0..1000));
    assert!(r.is_empty());
    // Laps later the lanes are all still usable.
    for lap in 0..5 {
        for i in 0..1000 {
            assert!(r.push(lap * 1000 + i));
        }
        assert_eq!(std::iter::from_fn(|| r.pop()).count(), 1000);
    }
}

#[test]
fn remaining_records_are_dropped_with_the_ring() {
    let token = Arc::new(());
    let r = RecordRing::with_lanes(8, 4);
    for _ in 0..6 {
        assert!(r.push(token.clone()));
    }
    drop(r.pop());
    drop(r);
    assert_eq!(Arc::strong_count(&token), 1);
}

/// Records of one thread come out in push order while they stay in its lane
/// (lanes of 64 Ki records never fill here, even if two of these threads
/// shared one: no spill).
#[test]
fn each_thread_keeps_its_order_in_its_lane() {
    const PER: u64 = 30_000;
    let r = Arc::new(RecordRing::with_lanes(1 << 20, 16));
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut dropped = 0;
                for i in 0..PER {
                    if !r.push(p << 32 | i) {
                        dropped += 1;
                    }
                }
                dropped
            })
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

/// A small ring hammered by more producers than lanes, with a concurrent
/// consumer: no record lost or duplicated, every failed push counted.
#[test]
fn stress_no_loss_no_duplicate_exact_drops() {
    const THREADS: u64 = 6;
    const PER: u64 = 100_000;
    let r = Arc::new(RecordRing::with_lanes(256, 4));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(THREADS as usize + 1));
    let producers: Vec<_> = (0..THREADS)
        .map(|p| {
            let (r, start) = (r.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                (0..PER).filter(|i| !r.push(p << 32 | i)).count() as u64
            })
        })
        .collect();
    let consumer = {
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
    };
    start.wait();
    let dropped: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    done.store(true, Ordering::Release);
    let seen = consumer.join().unwrap();
    assert_eq!(seen.len() as u64 + dropped, THREADS * PER);
    assert_eq!((r.pushed(), r.dropped()), (seen.len() as u64, dropped));
    assert!(dropped > 0, "the test should overflow the ring");
    assert_eq!((r.is_empty(), r.len()), (true, 0));
}

/// What the shim's writer relies on when it closes a stream: take `len()`,
/// pop that many, and every record pushed before the `len()` call is among
/// them, however fast other threads keep pushing.
#[test]
fn len_then_pop_drains_everything_pushed_before() {
    // Two lanes for three producers: lanes are shared, so a mark often sits
    // behind a noise record whose producer is still writing it.
    let r = Arc::new(RecordRing::with_lanes(1 << 16, 2));
    let stop = Arc::new(AtomicBool::new(false));
    let noise: Vec<_> = (0..2)
        .map(|_| {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    r.push(u64::MAX);
                }
            })
        })
        .collect();
    let mut checked = 0;
    for round in 0..1000u64 {
        // Marks pushed on another thread, handed over by join (happens-before).
        let r2 = r.clone();
        let accepted =
            std::thread::spawn(move || (0..3).filter(|&k| r2.push(round * 4 + k)).count())
                .join()
                .unwrap();
        let n = r.len();
        let found = (0..n)
            .filter_map(|_| r.pop())
            .filter(|&v| v != u64::MAX && v / 4 == round)
            .count();
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
