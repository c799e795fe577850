//! The completed-record ring: many producers (the threads that complete
//! events), one consumer (the writer). A full ring drops the record and counts
//! it; producers never wait.
//!
//! # Lanes
//!
//! One shared queue made every producer fight over one tail (and the cells
//! next to it): with four threads completing events the plugin's cost per
//! call grew 3.9x. The ring is therefore split into *lanes*, each a bounded
//! queue with its own cache-padded ends (`lane.rs`). A producer pushes into
//! the lane of its dense thread index (`thread_index.rs`), so with up to
//! `lanes` producer threads no two share a lane and the push touches no line
//! another producer writes. A producer whose lane is full tries the other
//! lanes in turn before it counts a drop, so one bursty thread can still fill
//! the whole capacity; a full ring is still a counted drop, never a wait.
//!
//! # What the consumer gets, in which order
//!
//! The consumer takes only records it has *observed*: `len` (and a `pop`
//! that finds nothing observed left) reads every lane's tail and marks what
//! it found. Among observed records it serves one lane's run, then the next
//! lane's. So:
//!
//! * records of one producer thread come out in push order while they go to
//!   the same lane (its own lane, unless that lane was full);
//! * the records `len()` counted are exactly the next `len()` records `pop`
//!   returns (one consumer): "drain what the ring holds now" still drains
//!   every record pushed before the call, however fast others keep pushing;
//! * records of different threads are *not* in one global order: a record
//!   pushed on thread A before (happens-before) a record pushed on thread B
//!   may come out after it when both were observed together.
//!
//! Counts are exact: `pushed + dropped` is the number of `push` calls, and
//! `len` is exact whenever no thread is pushing or popping.

mod lane;

use crate::counter::Counter;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::thread_index;
use crossbeam_utils::CachePadded;
use lane::{Head, Lane};

/// At most this many lanes (thread indices beyond share them, modulo).
const MAX_LANES: usize = 16;
/// A lane of the default split holds at least this many records.
const MIN_LANE: usize = 64;

/// Bounded queue of completed records with drop accounting.
pub struct RecordRing<R> {
    lanes: Box<[Lane<R>]>,
    /// The lane the consumer serves next (a hint).
    cursor: CachePadded<AtomicUsize>,
    /// Set by a producer that found every lane full, cleared by the next
    /// `pop` that takes a record: while set, a producer whose own lane is
    /// full drops at once instead of trying every other lane (a full ring
    /// must stay cheap for the threads that hit it).
    all_full: CachePadded<AtomicBool>,
    capacity: usize,
    pushed: Counter,
    dropped: Counter,
}

/// Lanes for a ring of `capacity` records: one per `MIN_LANE` records, a
/// power of two, at most `MAX_LANES`.
fn default_lanes(capacity: usize) -> usize {
    let by_size = (capacity / MIN_LANE).max(1);
    let lanes = if by_size.is_power_of_two() {
        by_size
    } else {
        by_size.next_power_of_two() / 2
    };
    lanes.min(MAX_LANES)
}

impl<R: Send> RecordRing<R> {
    /// A ring holding at most `capacity` records, split into lanes by size
    /// (up to 16 lanes of at least 64 records each).
    pub fn new(capacity: usize) -> Self {
        Self::with_lanes(capacity, default_lanes(capacity))
    }

    /// A ring holding at most `capacity` records in `lanes` lanes (rounded
    /// down to a power of two, at most `capacity`; 1 gives a single shared
    /// FIFO). The capacity is split as evenly as it divides.
    pub fn with_lanes(capacity: usize, lanes: usize) -> Self {
        assert!(capacity > 0, "capacity must be non-zero");
        let mut n = lanes.clamp(1, capacity);
        if !n.is_power_of_two() {
            n = n.next_power_of_two() / 2;
        }
        let lanes = (0..n)
            .map(|i| Lane::new(capacity / n + usize::from(i < capacity % n)))
            .collect();
        Self {
            lanes,
            cursor: CachePadded::new(AtomicUsize::new(0)),
            all_full: CachePadded::new(AtomicBool::new(false)),
            capacity,
            pushed: Counter::new(),
            dropped: Counter::new(),
        }
    }

    /// Queues `record`; returns false (and counts a drop) if the ring is full.
    #[inline]
    pub fn push(&self, record: R) -> bool {
        let mask = self.lanes.len() - 1;
        // Threads without an index (more than 256 at once, or inside a
        // thread-local destructor) start at the last lane.
        let me = thread_index::current();
        let home = me.unwrap_or(mask) & mask;
        let mut record = match self.lanes[home].push(record) {
            Ok(()) => {
                self.pushed.add_as(me, 1);
                return true;
            }
            Err(back) => back,
        };
        if !self.all_full.load(Ordering::Relaxed) {
            for k in 1..self.lanes.len() {
                match self.lanes[(home + k) & mask].push(record) {
                    Ok(()) => {
                        self.pushed.add_as(me, 1);
                        return true;
                    }
                    Err(back) => record = back,
                }
            }
            if self.lanes.len() > 1 {
                self.all_full.store(true, Ordering::Relaxed);
            }
        }
        self.dropped.add_as(me, 1);
        false
    }

    /// Takes the next record: one of those already observed (see the module
    /// docs), or, if none is left, one of the records pushed since.
    #[inline]
    pub fn pop(&self) -> Option<R> {
        let n = self.lanes.len();
        'scan: loop {
            let start = self.cursor.load(Ordering::Relaxed);
            let mut in_flight = false;
            for k in 0..n {
                let i = (start + k) & (n - 1);
                let lane = &self.lanes[i];
                match lane.head() {
                    Head::Ready(pos) => {
                        let Some(v) = lane.take(pos) else {
                            // Another consumer took it: look again.
                            continue 'scan;
                        };
                        if k != 0 {
                            self.cursor.store(i, Ordering::Relaxed);
                        }
                        if self.all_full.load(Ordering::Relaxed) {
                            self.all_full.store(false, Ordering::Relaxed);
                        }
                        return Some(v);
                    }
                    Head::InFlight => in_flight = true,
                    Head::Nothing => {}
                }
            }
            if in_flight {
                // An observed record whose producer is still writing it
                // (perhaps preempted mid-push) holds up its lane. Wait for it
                // rather than serve newer records first: the records `len`
                // counted must come out first (the consumer may wait; only
                // producers never do).
                spin_hint();
                continue;
            }
            // Nothing observed is left: look for records pushed since.
            if !self.observe() {
                return None;
            }
        }
    }

    /// Marks every reserved record of every lane as observed; true if any
    /// lane had new records.
    fn observe(&self) -> bool {
        let mut new = false;
        for lane in self.lanes.iter() {
            new |= lane.observe();
        }
        new
    }

    /// Records waiting to be consumed. Also marks them observed: they are
    /// the next ones `pop` returns.
    pub fn len(&self) -> usize {
        self.observe();
        let n: u64 = self.lanes.iter().map(|lane| lane.observed()).sum();
        (n as usize).min(self.capacity)
    }

    /// True if no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.lanes.iter().all(|lane| lane.len() == 0)
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of lanes.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
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

/// Lets the producer being waited for run (under loom: lets the model
/// schedule it).
#[inline(always)]
fn spin_hint() {
    #[cfg(evring_loom)]
    loom::thread::yield_now();
    #[cfg(not(evring_loom))]
    std::thread::yield_now();
}

#[cfg(all(test, not(evring_loom)))]
mod tests;
