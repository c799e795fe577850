//! Loom models of the bounded queue: the free list and the record ring.

use crate::{BoundedQueue, RecordRing};
use loom::sync::Arc;
use loom::thread;

/// Two threads each pop an index and push it back (the free list's cycle).
/// Stamps must keep a recycled cell from being popped twice (no ABA): at the
/// end the queue holds each index exactly once.
#[test]
fn free_list_pop_push_no_aba() {
    loom::model(|| {
        let q = Arc::new(BoundedQueue::new(2));
        q.push(0u32).unwrap();
        q.push(1u32).unwrap();
        let ths: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                thread::spawn(move || {
                    if let Some(i) = q.pop() {
                        q.push(i).unwrap();
                    }
                })
            })
            .collect();
        for t in ths {
            t.join().unwrap();
        }
        let mut got = [q.pop(), q.pop(), q.pop()];
        got.sort();
        assert_eq!(got, [None, Some(0), Some(1)]);
    });
}

/// A producer racing a consumer on a one-record ring: every record is either
/// consumed or counted as dropped, never lost or duplicated.
#[test]
fn ring_push_pop_accounts_every_record() {
    loom::model(|| {
        let r = Arc::new(RecordRing::new(1));
        let producer = {
            let r = r.clone();
            thread::spawn(move || {
                r.push(1u32);
                r.push(2u32);
            })
        };
        // The consumer on a spawned thread too: see `loom_ring.rs`.
        let consumer = {
            let r = r.clone();
            thread::spawn(move || r.pop())
        };
        producer.join().unwrap();
        let mut seen: Vec<u32> = consumer.join().unwrap().into_iter().collect();
        while let Some(v) = r.pop() {
            seen.push(v);
        }
        assert_eq!(seen.len() as u64 + r.dropped(), 2);
        assert_eq!(r.pushed(), seen.len() as u64);
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "FIFO order");
    });
}
