//! Loom models of the record ring's owned lanes (`ring/owned_lane.rs`): a
//! record published by the lane's one producer (a plain write and a Release
//! store of the tail), a slot reused only after the consumer read it (the
//! consumer's Release of the head, the producer's Acquire refresh of its
//! cached head), the lane passing with its thread index to the next thread,
//! and consumers taking turns.
//!
//! Under loom there are four thread indices and each owns a lane here, so
//! every pushing thread pushes into an owned lane first. Racing sides run on
//! spawned threads (see `loom_ring.rs`).

use crate::sync::{AtomicBool, Ordering};
use crate::thread_index::{self, MAX_THREADS};
use crate::RecordRing;
use loom::sync::Arc;
use loom::thread;

/// Every index owns a lane of `per_owned` records; one shared lane of
/// `shared` records takes the overflow.
fn ring(per_owned: usize, shared: usize) -> Arc<RecordRing<u32>> {
    Arc::new(RecordRing::with_lanes(
        MAX_THREADS * per_owned + shared,
        MAX_THREADS,
        per_owned,
        1,
    ))
}

fn drain(r: &RecordRing<u32>) -> Vec<u32> {
    std::iter::from_fn(|| r.pop()).collect()
}

/// How a model's producer pushes a record: by value, or written in place by
/// `push_with` (first a smaller value, then changed through the `Written`,
/// so that a consumer reading the slot before the lane's Release store
/// could see either value).
type Push = fn(&RecordRing<u32>, u32) -> bool;

fn by_value(r: &RecordRing<u32>, v: u32) -> bool {
    r.push(v)
}

fn in_place(r: &RecordRing<u32>, v: u32) -> bool {
    r.push_with(|slot| {
        let mut w = slot.write(v - 1);
        *w += 1;
        w
    })
}

/// The producer pushes two records (`push`) into its owned lane while the
/// consumer pops: each record is taken once, intact, in order.
fn publishes_to_the_consumer(push: Push) {
    loom::model(move || {
        let r = ring(2, 1);
        let producer = {
            let r = r.clone();
            thread::spawn(move || [push(&r, 1), push(&r, 2)])
        };
        let consumer = {
            let r = r.clone();
            thread::spawn(move || r.pop())
        };
        assert_eq!(producer.join().unwrap(), [true, true]);
        let got: Vec<u32> = consumer
            .join()
            .unwrap()
            .into_iter()
            .chain(drain(&r))
            .collect();
        assert_eq!(got, [1, 2]);
        assert_eq!((r.pushed(), r.dropped()), (2, 0));
    });
}

/// A one-slot owned lane: the second record (`push`) may reuse the slot only
/// after the consumer has read the first one out of it, else it overflows
/// into the shared lane. The producer waits for a Relaxed flag the consumer
/// sets after its pop: it orders nothing, it only makes loom run the second
/// push after the take (without it loom never schedules the consumer
/// between the two pushes).
fn slot_reused_only_after_take(push: Push) {
    loom::model(move || {
        let r = ring(1, 1);
        let popped = Arc::new(AtomicBool::new(false));
        let producer = {
            let (r, popped) = (r.clone(), popped.clone());
            thread::spawn(move || {
                let first = push(&r, 10);
                while !popped.load(Ordering::Relaxed) {
                    thread::yield_now();
                }
                [first, push(&r, 20)]
            })
        };
        let consumer = {
            let (r, popped) = (r.clone(), popped.clone());
            thread::spawn(move || {
                let v = loop {
                    if let Some(v) = r.pop() {
                        break v;
                    }
                    thread::yield_now();
                };
                popped.store(true, Ordering::Relaxed);
                v
            })
        };
        assert_eq!(producer.join().unwrap(), [true, true]);
        assert_eq!(consumer.join().unwrap(), 10);
        assert_eq!(drain(&r), [20]);
        assert_eq!((r.pushed(), r.dropped()), (2, 0));
    });
}

/// `publishes_to_the_consumer` with `push`. Fails if the tail store is
/// weakened to Relaxed, or the consumer's read of the tail (`observe`) is:
/// the consumer would read a cell the producer is still writing.
#[test]
fn owned_lane_publishes_to_the_consumer() {
    publishes_to_the_consumer(by_value);
}

/// `slot_reused_only_after_take` with `push`. Fails if the consumer's store
/// of the head is weakened to Relaxed, or the producer's refresh of its
/// cached head is: the producer would overwrite a value being read.
#[test]
fn owned_slot_reused_only_after_take() {
    slot_reused_only_after_take(by_value);
}

/// The producer's view of the head is a cache: once the consumer has taken
/// the one record of a full one-slot lane (and said so through a flag), the
/// ring has room for five more (its own slot, the shared one, the three
/// lanes of unheld indices), so five pushes must all go in. Fails if the
/// producer never refreshes its cached head (its lane would stay full, the
/// fifth push dropped).
#[test]
fn owned_lane_refreshes_its_view_of_the_head() {
    loom::model(|| {
        let r = ring(1, 1);
        let taken = Arc::new(AtomicBool::new(false));
        let producer = {
            let (r, taken) = (r.clone(), taken.clone());
            thread::spawn(move || {
                assert!(r.push(1));
                while !taken.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                [2, 3, 4, 5, 6].map(|v| r.push(v))
            })
        };
        let consumer = {
            let (r, taken) = (r.clone(), taken.clone());
            thread::spawn(move || {
                let v = loop {
                    match r.pop() {
                        Some(v) => break v,
                        None => thread::yield_now(),
                    }
                };
                taken.store(true, Ordering::Release);
                v
            })
        };
        assert_eq!(consumer.join().unwrap(), 1);
        assert_eq!(producer.join().unwrap(), [true; 5], "room for five");
        let mut rest = drain(&r);
        rest.sort_unstable();
        assert_eq!(rest, [2, 3, 4, 5, 6]);
    });
}

/// A thread pushes into its owned lane and exits; a thread running at the
/// same time claims the freed index (once it sees, through a Relaxed flag
/// that orders nothing, that the first one is gone) and pushes into the
/// same lane. The lane's tail passes with the index: the second thread
/// appends after the first one's record instead of overwriting it. Fails if
/// the index claim (`thread_index.rs`, `fetch_or` AcqRel) or the give-back
/// (`fetch_and` Release) is weakened to Relaxed: the second producer would
/// write the slot the first one wrote, unordered.
#[test]
fn a_reused_index_hands_its_lane_to_the_next_thread() {
    loom::model(|| {
        let r = ring(2, 1);
        let gone = Arc::new(AtomicBool::new(false));
        let first = {
            let (r, gone) = (r.clone(), gone.clone());
            thread::spawn(move || {
                assert!(r.push(1));
                let me = thread_index::current();
                thread_index::exit_for_test();
                gone.store(true, Ordering::Relaxed);
                me
            })
        };
        let second = {
            let (r, gone) = (r.clone(), gone.clone());
            thread::spawn(move || {
                while !gone.load(Ordering::Relaxed) {
                    thread::yield_now();
                }
                assert!(r.push(2));
                thread_index::current()
            })
        };
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        let got = drain(&r);
        if a == b {
            assert_eq!(got, [1, 2], "one lane, its holders in turn");
        } else {
            let mut got = got;
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
        }
    });
}

/// Two consumers pop at once (the shim has one, the ring allows more): each
/// record is taken by exactly one of them. Fails if the consumer turn's
/// claim (Acquire) or give-back (Release) is weakened to Relaxed: the second
/// consumer could read a stale head and take the record again.
#[test]
fn consumers_take_turns() {
    loom::model(|| {
        let r = ring(1, 1);
        assert!(r.push(5));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                thread::spawn(move || r.pop())
            })
            .collect();
        let got: Vec<u32> = consumers
            .into_iter()
            .filter_map(|c| c.join().unwrap())
            .collect();
        assert_eq!(got, [5]);
        assert!(r.pop().is_none());
    });
}

/// A thread whose owned lane and the shared lane are full pushes into the
/// owned lane of an unheld index, holding that index meanwhile, while a new
/// thread claims an index and pushes: every record is taken once, intact,
/// none dropped (four one-slot owned lanes and a one-slot shared lane hold
/// all four). Fails if the overflowing thread pushes into the lane without
/// holding its index (the new thread may claim it and write the same slot).
#[test]
fn overflow_borrows_the_lane_of_an_unheld_index() {
    loom::model(|| {
        let r = ring(1, 1);
        let bursty = {
            let r = r.clone();
            thread::spawn(move || [r.push(1), r.push(2), r.push(3)])
        };
        let newcomer = {
            let r = r.clone();
            thread::spawn(move || r.push(4))
        };
        assert_eq!(bursty.join().unwrap(), [true; 3]);
        assert!(newcomer.join().unwrap());
        let mut got = drain(&r);
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3, 4]);
        assert_eq!((r.pushed(), r.dropped()), (4, 0));
    });
}

/// `publishes_to_the_consumer` with `push_with`: each record is taken once,
/// with the change made after its write. Fails if the tail store is
/// weakened to Relaxed, or the consumer's read of the tail is: the consumer
/// would read the cell while the producer's closure writes it.
#[test]
fn owned_lane_push_with_publishes_in_place() {
    publishes_to_the_consumer(in_place);
}

/// `slot_reused_only_after_take` with `push_with`. Fails if the consumer's
/// store of the head or the producer's refresh of its cached head is
/// weakened to Relaxed: the closure would write a cell being read.
#[test]
fn owned_slot_rewritten_in_place_only_after_take() {
    slot_reused_only_after_take(in_place);
}

/// A push made from inside a `push_with` closure (same thread, same ring)
/// while the consumer pops: the busy mark sends it to the shared lane, so
/// the two never write one slot; both records are taken once, intact.
/// Fails without the busy mark (the nested push writes the cell the
/// closure holds, and publishes the slot before the closure's record).
#[test]
fn push_inside_push_with_never_shares_the_slot() {
    loom::model(|| {
        let r = ring(2, 1);
        let producer = {
            let r = r.clone();
            thread::spawn(move || {
                r.push_with(|slot| {
                    assert!(r.push(2));
                    slot.write(1)
                })
            })
        };
        let consumer = {
            let r = r.clone();
            thread::spawn(move || r.pop())
        };
        assert!(producer.join().unwrap());
        let mut got: Vec<u32> = consumer
            .join()
            .unwrap()
            .into_iter()
            .chain(drain(&r))
            .collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        assert_eq!((r.pushed(), r.dropped()), (2, 0));
    });
}
