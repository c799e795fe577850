//! The completed-record ring: many producers (the threads that complete
//! events), one consumer at a time (the writer). A full ring drops the record
//! and counts it; producers never wait.
//!
//! # Lanes
//!
//! * **Owned lanes** (`owned_lane.rs`): the thread holding thread index `i`
//!   (`thread_index.rs`) is the only producer of owned lane `i`. Its push is
//!   plain loads and stores on its own lines plus one Release store of the
//!   lane's tail: no locked instruction, no line another producer writes.
//!   The consumer never writes into a slot (it moves the lane's head, a line
//!   of its own), so a slot line is at most shared, not modified, in the
//!   consumer's cache when the producer comes back to it.
//! * **Shared lanes** (`shared_lane.rs`, multi-producer): threads without an
//!   owned lane (index `>= owned`, no index, or inside a thread-local
//!   destructor) push there, starting at the lane of their index, and so
//!   does a thread whose owned lane is full. A producer whose shared lane is
//!   full tries the other shared lanes in turn before it counts a drop.
//!
//! The default split (`new`) gives up to 16 owned lanes half the capacity
//! and the shared lanes the other half, so one thread alone can fill its
//! owned lane plus every shared lane: about half the capacity (53 % at the
//! shim's default 32 768 records) before a burst drops.
//!
//! # What the consumer gets, in which order
//!
//! The consumer takes only records it has *observed*: `len` (and a `pop`
//! that finds nothing observed left) reads every lane's tail and marks what
//! it found. Among observed records it serves one lane's run, then the next
//! lane's. So:
//!
//! * records of one producer thread come out in push order while they go to
//!   the same lane (its owned lane, unless that was full);
//! * the records `len()` counted are exactly the next `len()` records `pop`
//!   returns: "drain what the ring holds now" still drains every record
//!   pushed before the call, however fast others keep pushing;
//! * records of different threads are *not* in one global order.
//!
//! Consumers take turns (`pop` and `len` hold the consumer turn, a flag
//! taken with a CAS; a second consumer waits, producers never do), so the
//! above holds with several consumers too, and a slot is read once.
//!
//! Counts are exact: `pushed + dropped` is the number of `push` calls, and
//! `len` is exact whenever no thread is pushing or popping.

mod owned_lane;
mod shared_lane;
mod slot;

use crate::counter::Counter;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::thread_index;
use crossbeam_utils::CachePadded;
use owned_lane::OwnedLane;
use shared_lane::{Head, SharedLane};
pub use slot::{RecordSlot, Written};

/// Owned lanes of the default split: thread indices below this own one.
const OWNED: usize = 16;
/// At most this many shared lanes in the default split.
const MAX_SHARED: usize = 8;
/// A lane of the default split holds at least this many records.
const MIN_LANE: usize = 64;

/// Bounded queue of completed records with drop accounting.
// `repr(C)`: the lane table every push reads comes first, and all the ring
// holds inline is 40 bytes (the rest is behind `cold`), so that a caller can
// keep it on one line with what it reads beside it (the shim: its slab's
// header; with cold caches each line read is a miss).
#[repr(C)]
pub struct RecordRing<R> {
    /// Lane `i` belongs to the thread holding index `i`.
    owned: Box<[OwnedLane<R>]>,
    /// A power of two of them, at least one.
    shared: Box<[SharedLane<R>]>,
    cold: Box<Cold>,
}

/// What a push into an owned lane with room never reads.
struct Cold {
    /// Set by a producer that found every shared lane full, cleared by the
    /// next `pop` that takes a record from a shared lane: while set, a
    /// producer whose owned lane is full drops at once, and one without an
    /// owned lane after trying only its home lane (a full ring must stay
    /// cheap for the threads that hit it).
    all_full: CachePadded<AtomicBool>,
    /// Set by a producer that found no owned lane of an unheld index with
    /// room (after the shared lanes), cleared by the next `pop` that takes
    /// a record from an owned lane: while set, such a producer drops
    /// without scanning them.
    unheld_full: CachePadded<AtomicBool>,
    consumer: CachePadded<ConsumerTurn>,
    capacity: usize,
    dropped: Counter,
}

/// The consumer side's own state.
struct ConsumerTurn {
    /// Held by the consumer inside `pop` or `len`.
    busy: AtomicBool,
    /// The lane the consumer serves next (owned lanes first, then shared).
    cursor: AtomicUsize,
}

/// `x` rounded down to a power of two (0 for 0).
fn floor_pow2(x: usize) -> usize {
    if x == 0 {
        0
    } else {
        1 << x.ilog2()
    }
}

/// Shared lanes for `records`: one per `MIN_LANE` records, a power of two,
/// at most `MAX_SHARED`, at least one.
fn default_shared(records: usize) -> usize {
    floor_pow2(records / MIN_LANE).clamp(1, MAX_SHARED)
}

/// The default split of `capacity`: (owned lanes, records per owned lane,
/// shared lanes).
fn default_split(capacity: usize) -> (usize, usize, usize) {
    let per_owned = floor_pow2(capacity / (2 * OWNED)).max(MIN_LANE);
    let owned = (capacity / 2 / per_owned).min(OWNED);
    let shared = default_shared(capacity - owned * per_owned);
    (owned, per_owned, shared)
}

impl<R: Send> RecordRing<R> {
    /// A ring holding at most `capacity` records: up to 16 owned lanes
    /// (a power of two of at least 64 records each) hold up to half of it,
    /// up to 8 shared lanes the rest.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "capacity must be non-zero");
        let (owned, per_owned, shared) = default_split(capacity);
        Self::with_lanes(capacity, owned, per_owned, shared)
    }

    /// [`new`](Self::new), with the memory of the owned lanes made resident
    /// now: one byte of each of their pages written, so that no push pays a
    /// page fault for a page it is the first to reach. An owned lane's
    /// records are otherwise mapped lazily by the allocator, one page fault
    /// (microseconds, more under a hypervisor) per page on the pushing
    /// thread, until the lane has wrapped once; shared lanes are written
    /// when made (their sequence words) and need nothing. Costs the memset
    /// of those pages here, and their memory from now on instead of from
    /// the first wrap.
    ///
    /// ```
    /// use evring::RecordRing;
    /// let ring: RecordRing<[u64; 12]> = RecordRing::new_resident(1 << 12);
    /// assert!(ring.push([7; 12]));
    /// assert_eq!(ring.pop(), Some([7; 12]));
    /// ```
    pub fn new_resident(capacity: usize) -> Self {
        let mut ring = Self::new(capacity);
        for lane in ring.owned.iter_mut() {
            lane.make_resident();
        }
        ring
    }

    /// A ring holding at most `capacity` records: `owned` owned lanes
    /// (thread indices `0..owned`, at most the number of indices) of
    /// `per_owned` records each (a power of two), and the rest of the
    /// capacity in `shared` shared lanes (rounded down to a power of two,
    /// at least one, at most the records left; split as evenly as it
    /// divides).
    pub fn with_lanes(capacity: usize, owned: usize, per_owned: usize, shared: usize) -> Self {
        let owned = owned.min(thread_index::MAX_THREADS);
        let owned_total = owned * per_owned;
        assert!(
            owned_total < capacity,
            "owned lanes must leave room for a shared lane"
        );
        let rest = capacity - owned_total;
        let n = floor_pow2(shared.clamp(1, rest));
        Self {
            owned: (0..owned).map(|_| OwnedLane::new(per_owned)).collect(),
            shared: (0..n)
                .map(|i| SharedLane::new(rest / n + usize::from(i < rest % n)))
                .collect(),
            cold: Box::new(Cold {
                all_full: CachePadded::new(AtomicBool::new(false)),
                unheld_full: CachePadded::new(AtomicBool::new(false)),
                consumer: CachePadded::new(ConsumerTurn {
                    busy: AtomicBool::new(false),
                    cursor: AtomicUsize::new(0),
                }),
                capacity,
                dropped: Counter::new(),
            }),
        }
    }

    /// Queues `record`; returns false (and counts a drop) if the ring is full.
    #[inline]
    pub fn push(&self, record: R) -> bool {
        self.push_as(thread_index::current(), record)
    }

    /// [`push`](Self::push) for a caller that already holds its
    /// [`Me`](crate::Me) (one thread-local access saved).
    #[inline]
    pub fn push_in(&self, me: crate::Me<'_>, record: R) -> bool {
        self.push_as(me.index, record)
    }

    /// Queues the record `f` writes: into the slot itself when the calling
    /// thread's owned lane has room (the record is written once, not built
    /// elsewhere and copied in), else built on the stack and pushed as
    /// [`push`](Self::push) does. Returns false (and counts a drop) if the
    /// ring is full; `f` is called either way, exactly once.
    ///
    /// `f` gets the slot and returns what [`RecordSlot::write`] gave it,
    /// which it may still change: the record is published when `f` returns.
    ///
    /// ```
    /// use evring::RecordRing;
    /// let ring: RecordRing<[u64; 16]> = RecordRing::new(1024);
    /// assert!(ring.push_with(|slot| {
    ///     let mut rec = slot.write([0; 16]);
    ///     rec[3] = 7; // in place
    ///     rec
    /// }));
    /// assert_eq!(ring.pop().map(|r| r[3]), Some(7));
    /// ```
    #[inline]
    pub fn push_with<F>(&self, f: F) -> bool
    where
        F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
    {
        self.push_with_as(thread_index::current(), f)
    }

    /// [`push_with`](Self::push_with) for a caller that already holds its
    /// [`Me`](crate::Me).
    #[inline]
    pub fn push_with_in<F>(&self, me: crate::Me<'_>, f: F) -> bool
    where
        F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
    {
        self.push_with_as(me.index, f)
    }

    #[inline(always)]
    fn push_with_as<F>(&self, me: Option<usize>, f: F) -> bool
    where
        F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
    {
        match me.and_then(|i| self.owned.get(i)) {
            // The lane of the index this thread holds: its only producer.
            Some(lane) => match lane.push_with(f) {
                Ok(()) => true,
                Err(f) => self.overflow_with(me, f),
            },
            None => self.push_shared_with(me, f),
        }
    }

    /// `push_with` whose owned lane is full: the record built on the stack.
    #[cold]
    #[inline(never)]
    fn overflow_with<F>(&self, me: Option<usize>, f: F) -> bool
    where
        F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
    {
        self.overflow(me, slot::build(f))
    }

    /// `push_with` from a thread without an owned lane.
    #[inline(never)]
    fn push_shared_with<F>(&self, me: Option<usize>, f: F) -> bool
    where
        F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
    {
        self.push_shared(me, slot::build(f))
    }

    /// `me` is the calling thread's index (`thread_index::current()` or a
    /// `Me`): the owned lane it names has no other producer.
    #[inline(always)]
    fn push_as(&self, me: Option<usize>, record: R) -> bool {
        match me.and_then(|i| self.owned.get(i)) {
            // The lane of the index this thread holds: its only producer.
            Some(lane) => match lane.push(record) {
                Ok(()) => true,
                Err(back) => self.overflow(me, back),
            },
            None => self.push_shared(me, record),
        }
    }

    /// A record whose owned lane is full: into a shared lane, unless the
    /// last producer to try found them all full (then straight to the
    /// lanes of unheld indices, see `push_borrowed`).
    #[cold]
    fn overflow(&self, me: Option<usize>, record: R) -> bool {
        if !self.cold.all_full.load(Ordering::Relaxed) {
            return self.push_shared(me, record);
        }
        if self.cold.unheld_full.load(Ordering::Relaxed) {
            // Everything full as last seen: the drop, without another call.
            drop(record);
            self.cold.dropped.add_as(me, 1);
            return false;
        }
        self.push_borrowed(me, record)
    }

    /// The shared lanes: the one of `me`'s index first (the last one for
    /// a thread without an index), then the others.
    fn push_shared(&self, me: Option<usize>, mut record: R) -> bool {
        let mask = self.shared.len() - 1;
        let home = me.unwrap_or(mask) & mask;
        match self.shared[home].push(record) {
            Ok(()) => return true,
            Err(back) => record = back,
        }
        if !self.cold.all_full.load(Ordering::Relaxed) {
            for k in 1..self.shared.len() {
                match self.shared[(home + k) & mask].push(record) {
                    Ok(()) => return true,
                    Err(back) => record = back,
                }
            }
            self.cold.all_full.store(true, Ordering::Relaxed);
        }
        self.push_borrowed(me, record)
    }

    /// The last resort before a drop: the owned lane of an index no thread
    /// holds (its thread exited, or there were never that many threads).
    /// The caller holds that index for the push, as a new thread would
    /// claim it (`thread_index::borrow_unheld`), so it is the lane's only
    /// producer meanwhile and the lane's state passes to the index's next
    /// holder. Two locked instructions on the index bitmap per record: only
    /// once the shared lanes are full. So one bursty thread can fill every
    /// lane but those of the other live threads with an owned lane.
    #[cold]
    fn push_borrowed(&self, me: Option<usize>, record: R) -> bool {
        if !self.owned.is_empty() && !self.cold.unheld_full.load(Ordering::Relaxed) {
            let mut record = Some(record);
            let pushed = thread_index::borrow_unheld(
                self.owned.len(),
                |j| self.owned[j].may_have_room(),
                |j| match self.owned[j].push(record.take()?) {
                    Ok(()) => Some(()),
                    Err(back) => {
                        record = Some(back);
                        None
                    }
                },
            );
            if pushed.is_some() {
                return true;
            }
            self.cold.unheld_full.store(true, Ordering::Relaxed);
        }
        self.cold.dropped.add_as(me, 1);
        false
    }

    /// Takes the next record: one of those already observed (see the module
    /// docs), or, if none is left, one of the records pushed since.
    #[inline]
    pub fn pop(&self) -> Option<R> {
        let _turn = self.consumer_turn();
        let n = self.owned.len() + self.shared.len();
        let cursor = &self.cold.consumer.cursor;
        'scan: loop {
            let start = cursor.load(Ordering::Relaxed);
            let mut in_flight = false;
            for k in 0..n {
                // `start < n`: wrap without a division.
                let i = if start + k < n {
                    start + k
                } else {
                    start + k - n
                };
                let got = match i.checked_sub(self.owned.len()) {
                    None => {
                        let v = self.owned[i].take();
                        if v.is_some() && self.cold.unheld_full.load(Ordering::Relaxed) {
                            self.cold.unheld_full.store(false, Ordering::Relaxed);
                        }
                        v
                    }
                    Some(s) => {
                        let lane = &self.shared[s];
                        match lane.head() {
                            Head::Ready(pos) => {
                                let Some(v) = lane.take(pos) else {
                                    // Another consumer took it (cannot
                                    // happen under the turn): look again.
                                    continue 'scan;
                                };
                                if self.cold.all_full.load(Ordering::Relaxed) {
                                    self.cold.all_full.store(false, Ordering::Relaxed);
                                }
                                Some(v)
                            }
                            Head::InFlight => {
                                in_flight = true;
                                None
                            }
                            Head::Nothing => None,
                        }
                    }
                };
                if let Some(v) = got {
                    if k != 0 {
                        cursor.store(i, Ordering::Relaxed);
                    }
                    return Some(v);
                }
            }
            if in_flight {
                // An observed record whose producer is still writing it
                // (perhaps preempted mid-push) holds up its shared lane.
                // Wait for it rather than serve newer records first: the
                // records `len` counted must come out first (the consumer
                // may wait; only producers never do).
                spin_hint();
                continue;
            }
            // Nothing observed is left: look for records pushed since.
            if !self.observe() {
                return None;
            }
        }
    }

    /// Holds the consumer turn until the guard drops; waits (yielding) while
    /// another consumer holds it.
    fn consumer_turn(&self) -> TurnGuard<'_> {
        let busy = &self.cold.consumer.busy;
        // Acquire: the previous consumer's head and `seen` updates (released
        // when it gave the turn back) are visible to us.
        while busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_hint();
        }
        TurnGuard(busy)
    }

    /// Marks every published (owned) or reserved (shared) record as
    /// observed; true if any lane had new records. Needs the turn.
    fn observe(&self) -> bool {
        let mut new = false;
        for lane in self.owned.iter() {
            new |= lane.observe();
        }
        for lane in self.shared.iter() {
            new |= lane.observe();
        }
        new
    }

    /// Records waiting to be consumed. Also marks them observed: they are
    /// the next ones `pop` returns.
    pub fn len(&self) -> usize {
        let _turn = self.consumer_turn();
        self.observe();
        let owned: u64 = self.owned.iter().map(|lane| lane.observed()).sum();
        let shared: u64 = self.shared.iter().map(|lane| lane.observed()).sum();
        ((owned + shared) as usize).min(self.cold.capacity)
    }

    /// True if no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.owned.iter().all(|lane| lane.len() == 0)
            && self.shared.iter().all(|lane| lane.len() == 0)
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.cold.capacity
    }

    /// Number of owned lanes (thread indices `0..owned_lanes()` own one).
    pub fn owned_lanes(&self) -> usize {
        self.owned.len()
    }

    /// Number of shared lanes.
    pub fn shared_lanes(&self) -> usize {
        self.shared.len()
    }

    /// Records accepted so far (the sum of the lanes' tails: every push
    /// moves one tail, so no separate count is bumped on the push path).
    pub fn pushed(&self) -> u64 {
        let owned: u64 = self.owned.iter().map(|lane| lane.pushed()).sum();
        let shared: u64 = self.shared.iter().map(|lane| lane.pushed()).sum();
        owned + shared
    }

    /// Records dropped because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.cold.dropped.get()
    }
}

/// Gives the consumer turn back on drop.
struct TurnGuard<'a>(&'a AtomicBool);

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        // Release: hands our head and `seen` updates to the next consumer.
        self.0.store(false, Ordering::Release);
    }
}

/// Lets the thread being waited for run (under loom: lets the model
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
