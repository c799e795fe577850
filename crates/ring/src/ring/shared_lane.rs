//! A shared lane of the record ring: a bounded multi-producer multi-consumer
//! array queue (Vyukov's, with 64-bit positions that never wrap) whose
//! consumers only take records the ring has *observed* (see `mod.rs`).
//! Threads without an owned lane push here, and so does a thread whose owned
//! lane is full. (The ring lets one consumer in at a time, so `take`'s CAS
//! always wins there; the lane itself would stay correct without that.)
//!
//! Invariants:
//! * `tail` is the next position a producer reserves, `head` the next one a
//!   consumer takes; position `p` lives in slot `p % cap`.
//! * A slot's `seq` is `2p` when it is free for position `p`, `2p + 1` once
//!   the record at `p` is published, and `2(p + cap)` once that record was
//!   taken (free for the next lap). `seq` only grows. (Doubling keeps
//!   "published at `p`" and "free for `p + 1`" apart in a one-slot lane.)
//! * `seen <= tail`: the largest tail a consumer-side observation read.
//!
//! A producer never waits: a slot that is not free at `tail` (last lap's
//! record not taken yet, or being taken at this instant) means "full".

use crate::sync::{AtomicU64, Ordering, UnsafeCell};
use core::mem::MaybeUninit;
use crossbeam_utils::CachePadded;

struct Slot<R> {
    seq: AtomicU64,
    value: UnsafeCell<MaybeUninit<R>>,
}

/// The consumer side's two positions, on one cache line of their own.
struct Ends {
    /// Next position to take.
    head: AtomicU64,
    /// Records below this position have been observed (counted by `len`,
    /// or seen by a `pop` that found nothing older to serve).
    seen: AtomicU64,
}

pub(super) struct SharedLane<R> {
    tail: CachePadded<AtomicU64>,
    ends: CachePadded<Ends>,
    slots: Box<[Slot<R>]>,
    /// `cap - 1` when `cap` is a power of two (index by mask), else 0.
    mask: u64,
}

/// What a consumer finds at a lane's head.
pub(super) enum Head {
    /// An observed record, published, at this position.
    Ready(u64),
    /// No observed record is waiting.
    Nothing,
    /// An observed position whose producer is still writing its record.
    InFlight,
}

// SAFETY: records move between threads through the lane (needs `R: Send`); a
// slot's value is touched only by the one thread that won the position for it
// (the tail CAS for writing, the head CAS for reading).
unsafe impl<R: Send> Send for SharedLane<R> {}
// SAFETY: as above; shared access never hands out references to `R`.
unsafe impl<R: Send> Sync for SharedLane<R> {}

impl<R> SharedLane<R> {
    pub(super) fn new(cap: usize) -> Self {
        assert!(cap > 0, "lane capacity must be non-zero");
        let slots = (0..cap as u64)
            .map(|p| Slot {
                seq: AtomicU64::new(2 * p),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Self {
            tail: CachePadded::new(AtomicU64::new(0)),
            ends: CachePadded::new(Ends {
                head: AtomicU64::new(0),
                seen: AtomicU64::new(0),
            }),
            slots,
            mask: if cap.is_power_of_two() {
                cap as u64 - 1
            } else {
                0
            },
        }
    }

    #[cfg(all(test, not(evring_loom)))]
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot<R> {
        let i = if self.mask != 0 || self.slots.len() == 1 {
            pos & self.mask
        } else {
            pos % self.slots.len() as u64
        };
        &self.slots[i as usize]
    }

    /// Appends `value`, or gives it back if the lane is full. Never waits.
    #[inline]
    pub(super) fn push(&self, value: R) -> Result<(), R> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(pos);
            // Acquire: pairs with the Release that freed the slot, so the
            // previous record's read is done before we overwrite it.
            let seq = slot.seq.load(Ordering::Acquire);
            if seq == 2 * pos {
                // AcqRel (free on x86, where the CAS is a full barrier): an
                // observer that reads this tail also sees what happened
                // before this push, so a record pushed before this one on
                // another thread is observed no later than this one.
                match self.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the slot was free for `pos` and this thread
                        // won `pos`: nobody else touches the cell until the
                        // Release store below publishes it.
                        slot.value.with_mut(|p| unsafe { (*p).write(value) });
                        slot.seq.store(2 * pos + 1, Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if seq < 2 * pos {
                // Last lap's record is still there (or is being taken right
                // now): full. A consumer frees it without our help.
                return Err(value);
            } else {
                // Another producer took `pos`.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Marks every record reserved so far as observed; true if that added any.
    #[inline]
    pub(super) fn observe(&self) -> bool {
        // Acquire: pairs with the producers' tail CAS (see `push`).
        let tail = self.tail.load(Ordering::Acquire);
        if tail <= self.ends.seen.load(Ordering::Relaxed) {
            return false;
        }
        self.ends.seen.fetch_max(tail, Ordering::Relaxed) < tail
    }

    /// Observed records not taken yet (reserved ones included).
    #[inline]
    pub(super) fn observed(&self) -> u64 {
        let seen = self.ends.seen.load(Ordering::Relaxed);
        seen.saturating_sub(self.ends.head.load(Ordering::Relaxed))
    }

    /// What the head holds for a consumer.
    #[inline]
    pub(super) fn head(&self) -> Head {
        let pos = self.ends.head.load(Ordering::Relaxed);
        if pos >= self.ends.seen.load(Ordering::Relaxed) {
            return Head::Nothing;
        }
        // Acquire: pairs with the producer's Release publication.
        if self.slot(pos).seq.load(Ordering::Acquire) == 2 * pos + 1 {
            Head::Ready(pos)
        } else {
            Head::InFlight
        }
    }

    /// Takes the record at `pos`, which `head` reported ready; `None` if
    /// another consumer took it first.
    #[inline]
    pub(super) fn take(&self, pos: u64) -> Option<R> {
        self.ends
            .head
            .compare_exchange(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        let slot = self.slot(pos);
        // SAFETY: `head` saw the record at `pos` published (Acquire) and this
        // thread won `pos` on `head`, so it alone reads the value; the slot
        // cannot be reused before the store below.
        let value = slot.value.with(|p| unsafe { (*p).assume_init_read() });
        // Release: our read of the value happens before the next producer's
        // write into this slot.
        slot.seq
            .store(2 * (pos + self.slots.len() as u64), Ordering::Release);
        Some(value)
    }

    /// Positions reserved so far: every reservation is a record written (the
    /// lane's share of `pushed`).
    pub(super) fn pushed(&self) -> u64 {
        self.tail.load(Ordering::Relaxed)
    }

    /// Records reserved and not taken (exact when no thread is inside).
    pub(super) fn len(&self) -> u64 {
        let tail = self.tail.load(Ordering::Acquire);
        tail.saturating_sub(self.ends.head.load(Ordering::Relaxed))
    }
}

impl<R> Drop for SharedLane<R> {
    fn drop(&mut self) {
        let head = self.ends.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        for pos in head..tail {
            let slot = self.slot(pos);
            if slot.seq.load(Ordering::Relaxed) == 2 * pos + 1 {
                // SAFETY: exclusive access in drop; a published, untaken
                // record is initialised.
                slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            }
        }
    }
}
