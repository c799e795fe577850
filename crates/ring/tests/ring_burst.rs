//! How much of the record ring one bursty thread can fill: its owned lane,
//! every shared lane and the owned lanes of indices no live thread holds
//! (`RecordRing::push`), not the lanes of other live threads.
//!
//! In a test binary of its own, and its tests one at a time: thread indices
//! are process-wide, so only here is it known which indices are held.

use evring::RecordRing;
use std::sync::{Barrier, Mutex};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shim's default ring size.
const CAP: usize = 16384;

/// Pushes on the calling thread until the first drop; how many went in.
fn burst(r: &RecordRing<u64>, tag: u64) -> usize {
    let mut n = 0;
    while r.push(tag << 32 | n as u64) {
        n += 1;
    }
    n
}

/// No other thread holds an index (this test's own thread never touches
/// the ring): one thread fills the whole capacity, and gets it all back.
#[test]
fn one_thread_alone_fills_the_whole_default_ring() {
    let _one = serial();
    let r = RecordRing::<u64>::new(CAP);
    assert_eq!((r.owned_lanes(), r.shared_lanes()), (16, 8));
    let n = std::thread::scope(|s| s.spawn(|| burst(&r, 1)).join().unwrap());
    assert_eq!(n, CAP, "every lane, the other threads' owned lanes too");
    assert_eq!((r.pushed(), r.dropped(), r.len()), (CAP as u64, 1, CAP));
    let mut got: Vec<u64> = std::iter::from_fn(|| r.pop()).collect();
    got.sort_unstable();
    assert!(got.into_iter().eq((0..CAP as u64).map(|i| 1 << 32 | i)));
}

/// A live thread's owned lane is its own: a burst on another thread fills
/// everything else and leaves it alone (the live thread's record comes back
/// untouched, its lane's other slots unused).
#[test]
fn a_burst_leaves_a_live_threads_lane_alone() {
    let _one = serial();
    let r = RecordRing::<u64>::new(CAP);
    let (parked, done) = (Barrier::new(2), Barrier::new(2));
    let n = std::thread::scope(|s| {
        s.spawn(|| {
            assert!(r.push(7));
            parked.wait();
            done.wait();
        });
        parked.wait();
        let n = s.spawn(|| burst(&r, 2)).join().unwrap();
        done.wait();
        n
    });
    assert_eq!(n, CAP - 512, "all but the live thread's lane of 512");
    let got: Vec<u64> = std::iter::from_fn(|| r.pop()).collect();
    assert_eq!(got.len(), CAP - 511);
    assert_eq!(got.iter().filter(|&&v| v == 7).count(), 1);
}
