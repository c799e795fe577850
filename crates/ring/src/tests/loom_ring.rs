//! Loom models of the record ring's shared lanes (`ring/shared_lane.rs`):
//! publication of a record to the consumer, reuse of a slot after the
//! consumer took it, the spill into another lane, and "what `len` counted
//! comes out first". The owned lanes have theirs in `loom_owned_lane.rs`.
//!
//! The racing sides run on spawned threads: with loom 0.7 a model whose
//! main thread only reads (a pop on an empty ring) while one spawned thread
//! writes completes in one iteration, exploring nothing.

use crate::RecordRing;
use loom::sync::Arc;
use loom::thread;

/// A producer fills its one-slot shared lane and spills into the other one
/// while the consumer pops: each record is taken at most once, intact, and
/// taken + dropped = pushed. Fails if the producer's publication (Release)
/// or the consumer's check of it (Acquire) is weakened: the consumer would
/// read a cell the producer is still writing.
#[test]
fn ring_spill_publishes_to_the_consumer() {
    loom::model(|| {
        let r = Arc::new(RecordRing::with_lanes(2, 0, 0, 2));
        let producer = {
            let r = r.clone();
            thread::spawn(move || [r.push(1u32), r.push(2u32)])
        };
        let consumer = {
            let r = r.clone();
            thread::spawn(move || r.pop())
        };
        let accepted = producer.join().unwrap();
        let first = consumer.join().unwrap();
        let mut got: Vec<u32> = first.into_iter().collect();
        while let Some(v) = r.pop() {
            got.push(v);
        }
        got.sort_unstable();
        assert_eq!(accepted, [true, true], "two records fit in two lanes");
        assert_eq!(got, [1, 2]);
        assert_eq!((r.pushed(), r.dropped()), (2, 0));
    });
}

/// A one-slot ring: the producer's second push may reuse the slot only
/// after the consumer has read the first record out of it. Fails if the
/// consumer's release of the slot (Release) or the producer's check of it
/// (Acquire) is weakened: the producer would overwrite a value being read.
#[test]
fn ring_slot_reused_only_after_take() {
    loom::model(|| {
        let r = Arc::new(RecordRing::with_lanes(1, 0, 0, 1));
        let producer = {
            let r = r.clone();
            thread::spawn(move || {
                let a = r.push(10u32);
                let b = r.push(20u32);
                (a, b)
            })
        };
        let consumer = {
            let r = r.clone();
            thread::spawn(move || r.pop())
        };
        let (a, b) = producer.join().unwrap();
        let first = consumer.join().unwrap();
        assert!(a);
        let rest: Vec<u32> = std::iter::from_fn(|| r.pop()).collect();
        let all: Vec<u32> = first.into_iter().chain(rest).collect();
        if b {
            assert_eq!(all, [10, 20], "FIFO, both intact");
        } else {
            assert_eq!(all, [10]);
            assert_eq!(r.dropped(), 1);
        }
    });
}

/// The shim's writer closes a stream with "n = len(); pop n times", and
/// every record pushed before the `len()` call must be among those n, even
/// when another producer of the same lane reserved the slot before it and
/// is still writing (the consumer waits for that one rather than serve
/// records it has not counted).
#[test]
fn ring_len_counts_what_pop_serves_first() {
    loom::model(|| {
        let r = Arc::new(RecordRing::with_lanes(2, 0, 0, 1));
        let noise = {
            let r = r.clone();
            thread::spawn(move || {
                r.push(0u32);
            })
        };
        let marker = {
            let r = r.clone();
            thread::spawn(move || r.push(7u32))
        };
        let pushed = marker.join().unwrap();
        let n = r.len();
        let served: Vec<u32> = (0..n).filter_map(|_| r.pop()).collect();
        assert_eq!(served.contains(&7), pushed, "{served:?} of {n}");
        noise.join().unwrap();
    });
}
