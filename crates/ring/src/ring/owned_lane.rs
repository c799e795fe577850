//! A lane with one producer at a time: the thread that holds the lane's
//! thread index (`thread_index.rs`). A single-producer array queue in the
//! manner of Lamport's, with cached indices on both sides.
//!
//! Invariants:
//! * `tail` is the next position the producer writes, `head` the next one a
//!   consumer takes; position `p` lives in slot `p & mask`. 64-bit positions
//!   never wrap. `head <= tail <= head + cap`.
//! * Only the holder of the lane's index writes `tail`, the cached head and
//!   the slots; only a consumer holding the ring's consumer turn (`mod.rs`)
//!   writes `head` and `seen`, and it never writes into a slot.
//! * `head <= seen <= tail`: `seen` is the largest tail a consumer read.
//!
//! Push: plain loads and stores on the producer's own line and the slot, one
//! Release store of `tail`; the shared `head` is read only when the cached
//! head says the lane is full. No read-modify-write, never a wait.
//! `push_with` writes the record in the slot itself (`slot.rs`); while its
//! closure runs, the cached head holds the busy mark `tail + 1` (a real head
//! is never past the tail), so a push re-entered from the closure finds the
//! lane full instead of writing the same slot.
//!
//! The index passes from an exited thread to the next thread that claims it
//! (the claim is Acquire, the give-back Release), which orders the last
//! owner's `tail`, cached head and slot writes before the new owner's first
//! access. A signal handler that pushed on the thread it interrupted, in the
//! middle of that thread's push, would break the one-producer rule; nothing
//! pushes from signal handlers (NCCL calls the profiler from normal threads).

use super::slot::{RecordSlot, Written};
use crate::sync::{AtomicU64, Ordering, UnsafeCell};
use core::mem::MaybeUninit;
use crossbeam_utils::CachePadded;

/// The producer's line: its two positions, and beside them what every push
/// reads to find its slot (never written after construction), so that a
/// push reads one line of the lane's own besides the slot.
struct Producer<R> {
    /// Next position to write.
    tail: AtomicU64,
    /// The producer's last read of `head` (producer-private).
    head: AtomicU64,
    slots: Box<[UnsafeCell<MaybeUninit<R>>]>,
    /// `cap - 1` (the capacity is a power of two).
    mask: u64,
}

/// The consumer's line.
struct Consumer {
    /// Next position to take.
    head: AtomicU64,
    /// Records below this position have been observed (consumer-private).
    seen: AtomicU64,
}

pub(super) struct OwnedLane<R> {
    producer: CachePadded<Producer<R>>,
    consumer: CachePadded<Consumer>,
}

// SAFETY: records move between threads through the lane (needs `R: Send`); a
// slot's value is written only by the one producer (the index holder) while
// it is free and read only by the consumer holding the turn while it is
// published (see the invariants); no reference to an `R` is shared.
unsafe impl<R: Send> Send for OwnedLane<R> {}
// SAFETY: as above.
unsafe impl<R: Send> Sync for OwnedLane<R> {}

impl<R> OwnedLane<R> {
    pub(super) fn new(cap: usize) -> Self {
        assert!(
            cap.is_power_of_two(),
            "an owned lane's capacity is a power of two"
        );
        Self {
            producer: CachePadded::new(Producer {
                tail: AtomicU64::new(0),
                head: AtomicU64::new(0),
                slots: (0..cap)
                    .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                    .collect(),
                mask: cap as u64 - 1,
            }),
            consumer: CachePadded::new(Consumer {
                head: AtomicU64::new(0),
                seen: AtomicU64::new(0),
            }),
        }
    }

    /// Writes one byte of every page of the lane's record memory, so that
    /// its pages are mapped now and not by the pushes that first reach them
    /// (the allocation is fresh: a first touch is a page fault, microseconds
    /// on the pushing thread). Only on a new lane: its slots hold no record.
    /// Nothing under loom, whose cells are not plain memory.
    pub(super) fn make_resident(&mut self) {
        #[cfg(not(evring_loom))]
        self.touch_pages();
    }

    #[cfg(not(evring_loom))]
    fn touch_pages(&mut self) {
        /// The smallest page size: a write every this many bytes reaches
        /// every page.
        const PAGE: usize = 4096;
        let slots = &mut self.producer.slots;
        let len = core::mem::size_of_val(&**slots);
        let base = slots.as_mut_ptr().cast::<u8>();
        for off in (0..len).step_by(PAGE) {
            // SAFETY: `off < len`, so a byte of this lane's own slot memory,
            // which `&mut self` gives to this thread alone; no slot holds a
            // record yet, and any byte is valid in a `MaybeUninit`. Volatile:
            // the write is the point, though nothing reads it.
            unsafe { base.add(off).write_volatile(0) };
        }
    }

    #[cfg(all(test, not(evring_loom)))]
    pub(super) fn capacity(&self) -> usize {
        self.producer.slots.len()
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &UnsafeCell<MaybeUninit<R>> {
        &self.producer.slots[(pos & self.producer.mask) as usize]
    }

    /// The position the producer writes next and the cached head, if the
    /// lane has room (the slot at that position is then free). Never waits.
    ///
    /// Only the thread holding the lane's index may call this (its owner,
    /// or a thread that borrowed the index of an exited one).
    #[inline(always)]
    fn reserve(&self) -> Option<(u64, u64)> {
        let p = &*self.producer;
        // Relaxed: this thread's own last stores, or the previous holder's,
        // handed over by the index claim (Acquire).
        let tail = p.tail.load(Ordering::Relaxed);
        let cached = p.head.load(Ordering::Relaxed);
        if tail.wrapping_sub(cached) <= self.producer.mask {
            return Some((tail, cached));
        }
        if cached > tail {
            // The busy mark of `push_with` (a head past the tail, which no
            // consumer can set): this thread is inside a `push_with` of
            // this lane, writing the slot at `tail` (its closure pushed
            // again). The lane counts as full, the record goes elsewhere.
            return None;
        }
        // Full as far as we last looked: look again. Acquire: pairs with
        // the consumer's Release of `head`, so its reads of the slots below
        // `head` are done before we overwrite one.
        let head = self.consumer.head.load(Ordering::Acquire);
        if tail - head > self.producer.mask {
            // Still full: the cached head is current, leave the line clean
            // (the consumer reads the tail beside it).
            return None;
        }
        p.head.store(head, Ordering::Relaxed);
        Some((tail, head))
    }

    /// Publishes the record written at `tail` (from `reserve`).
    #[inline(always)]
    fn commit(&self, tail: u64) {
        // Release: publishes the record to a consumer that reads this tail.
        self.producer.tail.store(tail + 1, Ordering::Release);
        // The next record's lines, fetched while the caller goes on (the
        // writer thread read them a lap ago, or they were evicted since).
        crate::hint::prefetch_write(self.slot(tail + 1));
    }

    /// Appends `value`, or gives it back if the lane is full. Never waits.
    ///
    /// Only the thread holding the lane's index may call this (its owner,
    /// or a thread that borrowed the index of an exited one).
    #[inline(always)]
    pub(super) fn push(&self, value: R) -> Result<(), R> {
        let Some((tail, _)) = self.reserve() else {
            return Err(value);
        };
        // SAFETY: `reserve`: the slot at `tail` holds no record a consumer
        // may still read (they stopped at `head`, read with Acquire there or
        // at an earlier refresh), and this thread is the lane's only
        // producer, not inside a `push_with` of this lane (`reserve` refuses
        // then): nobody else touches the cell until `commit` publishes it.
        self.slot(tail).with_mut(|c| unsafe { (*c).write(value) });
        self.commit(tail);
        Ok(())
    }

    /// Appends the record `f` writes into the slot itself (no copy), or
    /// gives `f` back, not called, if the lane is full. Never waits.
    ///
    /// While `f` runs the cached head carries the busy mark (one past the
    /// tail), so a push that `f` makes on this thread finds this lane full
    /// and goes elsewhere instead of writing the same slot. If `f` panics,
    /// nothing is published (a record it wrote is leaked, not dropped).
    ///
    /// Only the thread holding the lane's index may call this.
    #[inline(always)]
    pub(super) fn push_with<F>(&self, f: F) -> Result<(), F>
    where
        F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
    {
        let Some((tail, cached)) = self.reserve() else {
            return Err(f);
        };
        let busy = Busy {
            head: &self.producer.head,
            cached,
        };
        busy.head.store(tail + 1, Ordering::Relaxed);
        self.slot(tail).with_mut(|c| {
            // SAFETY: as in `push`; the busy mark keeps any push this thread
            // makes from `f` out of this lane, so this `&mut` is the only
            // access to the cell until `commit`.
            let cell = unsafe { &mut *c };
            // The `Written` proves the whole record is in the cell.
            let _: Written<'_, R> = f(RecordSlot::new(cell));
        });
        drop(busy);
        self.commit(tail);
        Ok(())
    }

    /// A hint, read by a thread that does not hold the lane's index: false
    /// if the lane was full when last looked at.
    pub(super) fn may_have_room(&self) -> bool {
        // Wrapping: the three words are read at different moments.
        let tail = self.producer.tail.load(Ordering::Relaxed);
        tail.wrapping_sub(self.producer.head.load(Ordering::Relaxed)) <= self.producer.mask
            || tail.wrapping_sub(self.consumer.head.load(Ordering::Relaxed)) <= self.producer.mask
    }

    /// Records written so far (the lane's share of `pushed`).
    pub(super) fn pushed(&self) -> u64 {
        self.producer.tail.load(Ordering::Relaxed)
    }

    // ---- consumer side: the caller holds the ring's consumer turn ----------

    /// Marks every published record as observed; true if that added any.
    #[inline]
    pub(super) fn observe(&self) -> bool {
        // Acquire: pairs with the producer's Release of `tail`: the records
        // below it are written.
        let tail = self.producer.tail.load(Ordering::Acquire);
        let c = &*self.consumer;
        if tail > c.seen.load(Ordering::Relaxed) {
            c.seen.store(tail, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Observed records not taken yet.
    #[inline]
    pub(super) fn observed(&self) -> u64 {
        let c = &*self.consumer;
        c.seen.load(Ordering::Relaxed) - c.head.load(Ordering::Relaxed)
    }

    /// Takes the oldest observed record, if any.
    #[inline]
    pub(super) fn take(&self) -> Option<R> {
        let c = &*self.consumer;
        let head = c.head.load(Ordering::Relaxed);
        if head == c.seen.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: `head < seen`: the record at `head` was published (the
        // Acquire read of `tail` in `observe`), the producer does not
        // overwrite it before `head` moves past it, and this thread holds the
        // consumer turn, so it alone reads it, once.
        let value = self.slot(head).with(|c| unsafe { (*c).assume_init_read() });
        // Release: our read of the value happens before the producer's next
        // write into this slot (its Acquire refresh of `head`).
        c.head.store(head + 1, Ordering::Release);
        Some(value)
    }

    /// Records published and not taken (exact when no thread is inside).
    pub(super) fn len(&self) -> u64 {
        let tail = self.producer.tail.load(Ordering::Acquire);
        tail.saturating_sub(self.consumer.head.load(Ordering::Relaxed))
    }
}

/// Takes the busy mark off the cached head (also if the closure panics).
struct Busy<'a> {
    head: &'a AtomicU64,
    cached: u64,
}

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.head.store(self.cached, Ordering::Relaxed);
    }
}

impl<R> Drop for OwnedLane<R> {
    fn drop(&mut self) {
        let head = self.consumer.head.load(Ordering::Relaxed);
        let tail = self.producer.tail.load(Ordering::Relaxed);
        for pos in head..tail {
            // SAFETY: exclusive access in drop; records between head and
            // tail are published and not taken.
            self.slot(pos)
                .with_mut(|c| unsafe { (*c).assume_init_drop() });
        }
    }
}
