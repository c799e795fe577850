//! A bounded multi-producer multi-consumer FIFO (Vyukov's array queue).
//!
//! Public for callers that want one shared FIFO (the shim's call recorder;
//! the benches, as the record ring's former single queue). Written here
//! rather than taken from crossbeam-queue so that loom can model it through
//! `crate::sync`.
//!
//! Invariants:
//! * `head` and `tail` are `lap | index`, where `lap` is a multiple of
//!   `one_lap` (the next power of two above the capacity) and `index < cap`.
//! * A cell whose stamp equals `tail` is empty and writable by the producer
//!   that moves `tail` past it; a cell whose stamp equals `head + 1` is full and
//!   readable by the consumer that moves `head` past it.

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};
use core::mem::MaybeUninit;
use crossbeam_utils::CachePadded;

struct Cell<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Bounded MPMC queue; `push` on a full queue fails at once instead of waiting.
pub struct BoundedQueue<T> {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    buffer: Box<[Cell<T>]>,
    cap: usize,
    one_lap: usize,
}

// SAFETY: values move between threads through the queue (needs `T: Send`); the
// cells are only accessed by the one thread that won the head/tail CAS for them.
unsafe impl<T: Send> Send for BoundedQueue<T> {}
// SAFETY: as above; shared access never hands out references to `T`.
unsafe impl<T: Send> Sync for BoundedQueue<T> {}

impl<T> BoundedQueue<T> {
    /// A queue holding at most `cap` (≥ 1) values.
    pub fn new(cap: usize) -> Self {
        assert!(cap > 0, "capacity must be non-zero");
        let buffer = (0..cap)
            .map(|i| Cell {
                stamp: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Self {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            buffer,
            cap,
            one_lap: (cap + 1).next_power_of_two(),
        }
    }

    /// Capacity given at construction.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Next position after `pos` (same lap, or the start of the next lap).
    #[inline(always)]
    fn advance(&self, pos: usize) -> usize {
        let index = pos & (self.one_lap - 1);
        let lap = pos & !(self.one_lap - 1);
        if index + 1 < self.cap {
            pos + 1
        } else {
            lap.wrapping_add(self.one_lap)
        }
    }

    /// Appends `value`, or gives it back if the queue is full. Never waits.
    pub fn push(&self, value: T) -> Result<(), T> {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.buffer[tail & (self.one_lap - 1)];
            let stamp = cell.stamp.load(Ordering::Acquire);
            if stamp == tail {
                let next = self.advance(tail);
                match self.tail.compare_exchange_weak(
                    tail,
                    next,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS on `tail` while the stamp said
                        // "empty at this lap" gives this thread sole access to the cell
                        // until it publishes the new stamp below.
                        cell.value.with_mut(|p| unsafe { (*p).write(value) });
                        cell.stamp.store(tail + 1, Ordering::Release);
                        return Ok(());
                    }
                    Err(t) => tail = t,
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                // The cell still holds last lap's value: full, unless a consumer
                // has moved head since we looked.
                crate::sync::fence(Ordering::SeqCst);
                let head = self.head.load(Ordering::Relaxed);
                if head.wrapping_add(self.one_lap) == tail {
                    return Err(value);
                }
                spin_hint();
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                spin_hint();
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest value, or `None` if the queue is empty. Never waits.
    pub fn pop(&self) -> Option<T> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.buffer[head & (self.one_lap - 1)];
            let stamp = cell.stamp.load(Ordering::Acquire);
            if stamp == head + 1 {
                let next = self.advance(head);
                match self.head.compare_exchange_weak(
                    head,
                    next,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the stamp said "full at this lap" and this thread
                        // won the CAS on `head`, so it alone reads the value, which
                        // the producer initialised before its Release store.
                        let value = cell.value.with(|p| unsafe { (*p).assume_init_read() });
                        cell.stamp
                            .store(head.wrapping_add(self.one_lap), Ordering::Release);
                        return Some(value);
                    }
                    Err(h) => head = h,
                }
            } else if stamp == head {
                crate::sync::fence(Ordering::SeqCst);
                let tail = self.tail.load(Ordering::Relaxed);
                if tail == head {
                    return None;
                }
                spin_hint();
                head = self.head.load(Ordering::Relaxed);
            } else {
                spin_hint();
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Number of values at the moment of the call (exact only when quiescent).
    pub fn len(&self) -> usize {
        loop {
            let tail = self.tail.load(Ordering::SeqCst);
            let head = self.head.load(Ordering::SeqCst);
            if self.tail.load(Ordering::SeqCst) == tail {
                let hix = head & (self.one_lap - 1);
                let tix = tail & (self.one_lap - 1);
                return if hix < tix {
                    tix - hix
                } else if hix > tix {
                    self.cap - hix + tix
                } else if tail == head {
                    0
                } else {
                    self.cap
                };
            }
        }
    }

    /// True if the queue held no value at the moment of the call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for BoundedQueue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[inline(always)]
fn spin_hint() {
    #[cfg(evring_loom)]
    loom::thread::yield_now();
    #[cfg(not(evring_loom))]
    core::hint::spin_loop();
}

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fifo_and_full() {
        let q = BoundedQueue::new(3);
        assert_eq!(q.pop(), None);
        for i in 0..3 {
            q.push(i).unwrap();
        }
        assert_eq!(q.push(9), Err(9));
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop(), Some(0));
        q.push(3).unwrap();
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(1), Some(2), Some(3), None)
        );
        assert!(q.is_empty());
    }

    #[test]
    fn many_laps_keep_order() {
        let q = BoundedQueue::new(5);
        for i in 0..10_000u32 {
            q.push(i).unwrap();
            assert_eq!(q.pop(), Some(i));
        }
    }

    #[test]
    fn drops_remaining_values() {
        let token = Arc::new(());
        let q = BoundedQueue::new(4);
        q.push(token.clone()).unwrap();
        q.push(token.clone()).unwrap();
        drop(q);
        assert_eq!(Arc::strong_count(&token), 1);
    }

    #[test]
    fn concurrent_transfer_is_lossless() {
        let q = Arc::new(BoundedQueue::new(64));
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..50_000u64 {
                        let mut v = p << 32 | i;
                        while let Err(back) = q.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut last = [None::<u64>; 2];
        let mut got = 0;
        while got < 100_000 {
            if let Some(v) = q.pop() {
                let (p, i) = ((v >> 32) as usize, v & 0xFFFF_FFFF);
                assert!(last[p].is_none_or(|l| l < i), "per-producer FIFO order");
                last[p] = Some(i);
                got += 1;
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(q.pop(), None);
    }
}
