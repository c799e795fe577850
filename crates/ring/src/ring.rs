//! The completed-record ring: many producers (the threads that complete
//! events), one consumer (the writer). A full ring drops the record and counts
//! it; producers never wait.

use crate::counter::Counter;
use crate::queue::BoundedQueue;

/// Bounded queue of completed records with drop accounting.
pub struct RecordRing<R> {
    queue: BoundedQueue<R>,
    pushed: Counter,
    dropped: Counter,
}

impl<R: Send> RecordRing<R> {
    /// A ring holding at most `capacity` records.
    pub fn new(capacity: usize) -> Self {
        Self {
            queue: BoundedQueue::new(capacity),
            pushed: Counter::new(),
            dropped: Counter::new(),
        }
    }

    /// Queues `record`; returns false (and counts a drop) if the ring is full.
    #[inline]
    pub fn push(&self, record: R) -> bool {
        match self.queue.push(record) {
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

    /// Takes the oldest record.
    #[inline]
    pub fn pop(&self) -> Option<R> {
        self.queue.pop()
    }

    /// Records waiting to be consumed.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True if no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Records accepted so far.
    pub fn pushed(&self) -> u64 {
        self.pushed.get()
    }

    /// Records dropped because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }
}

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::*;

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
}
