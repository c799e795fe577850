//! `TaggedSlab<T>`: fixed-capacity storage addressed by generation-tagged IDs.
//!
//! Lifecycle of one slot (the whole design is in docs/ring.md):
//!
//! ```text
//!   free --insert--> LIVE(g) --retire (one CAS winner)--> retired(g+1)
//!    ^                                                        |
//!    |                               last reference dropped   |
//!    +------------- drop value, index to a free cache <-------+
//! ```
//!
//! * A slot's state word (`state.rs`) holds its generation, the number of
//!   [`Ref`]s held on it, and LIVE. Lookups compare the generation and LIVE
//!   with the ID's, so a stale ID (older generation), a foreign ID (other
//!   tag) or a malformed one is refused without touching the value.
//! * Reading takes a reference in the same CAS that validates the ID; retire
//!   bumps the generation in the same CAS that clears LIVE, so exactly one
//!   caller wins and every older ID is dead from that instant.
//! * The value stays in place until the retire and every reference taken
//!   before it are gone: the grace period is per slot. A reader that is
//!   preempted while holding a [`Ref`] delays the reuse of that one slot,
//!   nothing else.
//! * A generation that would wrap retires the slot for good (dead), so a
//!   generation never repeats within a slot and a stale ID is never accepted.
//! * Free slots live in per-thread caches and a shared stack of chains
//!   (`free.rs`).

mod free;
mod state;

use crate::id::{Config, DefaultConfig, EventId, Layout};
use crate::sync::{AtomicU64, Ordering, UnsafeCell};
use crate::thread_index;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::Deref;
use free::LinkTable;
pub(crate) use free::{FreeSlots, Links};
use state::LIVE;

/// Returned by [`TaggedSlab::insert`] when no slot is free; gives the value back.
#[derive(PartialEq, Eq)]
pub struct Full<T>(pub T);

/// Hands a popped index back to the free list if the value for its slot
/// could not be made (`make` panicked); forgotten once the value is in.
struct GiveBack<'a, T> {
    free: &'a FreeSlots,
    slots: &'a [Slot<T>],
    me: Option<usize>,
    index: u32,
}

impl<T> Drop for GiveBack<'_, T> {
    #[cold]
    fn drop(&mut self) {
        self.free.push(self.slots, self.me, self.index);
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("slab is full")
    }
}

impl<T> std::error::Error for Full<T> {}

/// Why a lookup found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Minted by this slab, but its slot has been retired since.
    Stale,
    /// Not minted by this slab: other tag, index out of range, or malformed.
    Foreign,
    /// Live, but 2^24 - 2 references to it are held at once (only reachable
    /// by leaking [`Ref`]s, e.g. with `mem::forget`).
    Busy,
}

/// A snapshot of a slab's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlabStats {
    /// Slots the slab was built with.
    pub capacity: usize,
    /// Values inserted and not yet retired (exact when no thread is inside the slab).
    pub live: u64,
    /// Inserts refused because no slot was free.
    pub full: u64,
    /// Slots retired for good because their generation space was spent.
    pub dead_slots: u64,
    /// Free slots held in per-thread caches (a snapshot).
    pub cached: u64,
    /// Most free slots one thread caches (see [`TaggedSlab::with_cache`]).
    pub cache_per_thread: u32,
}

// `align(16)`: the state word and the link an insert reads (`next`) share
// the slot's first 16 bytes, never split by a line boundary.
#[repr(C, align(16))]
struct Slot<T> {
    state: AtomicU64,
    /// The free list's links, beside the state word: an insert that takes
    /// the slot reads them on the line it writes anyway.
    links: Links,
    value: UnsafeCell<MaybeUninit<T>>,
}

// A slot of a slab of `()` (the shim's event IDs): four to a line (loom's
// atomics are bigger).
#[cfg(not(evring_loom))]
const _: () = assert!(core::mem::size_of::<Slot<()>>() == 16);

impl<T> LinkTable for [Slot<T>] {
    #[inline(always)]
    fn link(&self, i: u32) -> &Links {
        &self[i as usize].links
    }
}

/// A lock-free slab whose handles are [`EventId`]s. Any thread may insert, read
/// and retire. `T` is immutable once inserted except through its own interior
/// mutability (atomics), because several threads may read it at once.
///
/// ```
/// use evring::{Miss, TaggedSlab};
///
/// let slab: TaggedSlab<String> = TaggedSlab::new(1024);
/// let id = slab.insert("all-reduce".to_string()).unwrap();
///
/// // Any thread can read through the ID; the reference keeps the value alive.
/// assert_eq!(slab.with(id, |s| s.len()), Ok(10));
///
/// // Exactly one retire wins; afterwards the ID is stale, forever.
/// assert_eq!(slab.retire_with(id, |s| s.clone()).as_deref(), Some("all-reduce"));
/// assert!(slab.retire(id).is_none());
/// assert_eq!(slab.check(id), Err(Miss::Stale));
/// ```
// `repr(C)`: everything an insert or a check reads of the slab itself fits
// in 48 bytes (the rest of the free list is behind a pointer), so that a
// caller can keep it on one line with what it reads beside it (with cold
// caches each line read is a miss).
#[repr(C)]
pub struct TaggedSlab<T, C: Config = DefaultConfig> {
    slots: Box<[Slot<T>]>,
    tag: u64,
    free: FreeSlots,
    _config: PhantomData<C>,
}

// SAFETY: values are shared between threads through `&T` (needs `Sync`) and
// dropped by whichever thread releases them last (needs `Send`). Slot access
// rules are upheld by the state machine above.
unsafe impl<T: Send + Sync, C: Config> Send for TaggedSlab<T, C> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync, C: Config> Sync for TaggedSlab<T, C> {}

/// A counted reference to a value in a [`TaggedSlab`]: the value is not
/// dropped, nor its slot reused, while a `Ref` to it exists. Dropping the last
/// `Ref` of a retired value drops the value (on the dropping thread).
///
/// A `Ref` borrows its slab, so it cannot outlive it:
///
/// ```compile_fail
/// use evring::TaggedSlab;
/// let slab: TaggedSlab<u32> = TaggedSlab::new(4);
/// let id = slab.insert(1).unwrap();
/// let r = slab.get(id).unwrap();
/// drop(slab); // error: `slab` is still borrowed by `r`
/// assert_eq!(*r, 1);
/// ```
///
/// and a reference obtained through it cannot outlive the `Ref`:
///
/// ```compile_fail
/// use evring::TaggedSlab;
/// let slab: TaggedSlab<u32> = TaggedSlab::new(4);
/// let id = slab.insert(1).unwrap();
/// let value: &u32 = {
///     let r = slab.get(id).unwrap();
///     &*r // error: `r` does not live long enough
/// };
/// slab.retire(id);
/// assert_eq!(*value, 1);
/// ```
#[must_use = "a Ref keeps its slot from being reused until dropped"]
pub struct Ref<'a, T, C: Config = DefaultConfig> {
    slab: &'a TaggedSlab<T, C>,
    /// The slot itself (not its index): reading the value is one pointer
    /// step, no bounds check; the index is derived only to free the slot.
    slot: &'a Slot<T>,
}

impl<'a, T, C: Config> Ref<'a, T, C> {
    /// Retires the value `this` refers to, if it is still live: the same as
    /// [`TaggedSlab::retire`] with the ID the reference was taken through,
    /// one read-modify-write cheaper (no second reference is taken). Of all
    /// concurrent retires of that value exactly one wins and gets `Ok` (the
    /// same reference, now to a retired value); the others get their
    /// reference back in `Err`.
    ///
    /// ```
    /// use evring::{Ref, TaggedSlab};
    /// let slab: TaggedSlab<u32> = TaggedSlab::new(4);
    /// let id = slab.insert(7).unwrap();
    /// let r = slab.get(id).unwrap();
    /// let last = Ref::retire(r).ok().unwrap();
    /// assert!(slab.check(id).is_err());
    /// assert_eq!(*last, 7); // readable until dropped
    /// ```
    #[inline]
    pub fn retire(this: Self) -> Result<Self, Self> {
        Self::retire_as(this, thread_index::current())
    }

    /// [`retire`](Self::retire) with the calling thread's index already
    /// looked up ([`with_thread`](crate::with_thread)).
    #[inline]
    pub fn retire_in(this: Self, me: crate::Me<'_>) -> Result<Self, Self> {
        Self::retire_as(this, me.index)
    }

    #[inline(always)]
    fn retire_as(this: Self, me: Option<usize>) -> Result<Self, Self> {
        if Self::try_retire_as(&this, me) {
            Ok(this)
        } else {
            Err(this)
        }
    }

    /// Drops this reference (as `drop` does) with the calling thread's index
    /// already looked up: if it is the last one of a retired value, the
    /// value is dropped and the slot goes to this thread's free cache.
    #[inline]
    pub fn release_in(self, me: crate::Me<'_>) {
        let this = core::mem::ManuallyDrop::new(self);
        let slab = this.slab;
        slab.release_as(this.slot, |slot, s| slab.reclaim(me.index, slot, s));
    }

    /// Like [`retire`](Self::retire), keeping the reference in place: true
    /// for the one winning retire of the value. The value stays readable
    /// through `this` either way.
    ///
    /// ```
    /// use evring::{Ref, TaggedSlab};
    /// let slab: TaggedSlab<u32> = TaggedSlab::new(4);
    /// let id = slab.insert(7).unwrap();
    /// let r = slab.get(id).unwrap();
    /// assert!(Ref::try_retire(&r));
    /// assert!(!Ref::try_retire(&r), "one winner");
    /// assert_eq!(*r, 7);
    /// ```
    #[inline]
    pub fn try_retire(this: &Self) -> bool {
        Self::try_retire_as(this, thread_index::current())
    }

    #[inline(always)]
    fn try_retire_as(this: &Self, me: Option<usize>) -> bool {
        let slot = this.slot;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            // While this reference is held the slot cannot be freed, so a
            // LIVE word still carries the generation the reference was taken
            // with.
            if s & LIVE == 0 {
                return false;
            }
            let new = state::retired(state::generation(s), Layout::<C>::GEN_MASK, state::refs(s));
            match slot
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        this.slab.free.count_retire(me);
        true
    }
}

impl<T, C: Config> Deref for Ref<'_, T, C> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        let slot = self.slot;
        // SAFETY: this Ref holds a reference on the slot, taken while the slot
        // was live; the value is dropped only after the count reaches zero,
        // and nobody writes the cell while the slot is referenced.
        slot.value.with(|p| unsafe { &*(*p).as_ptr() })
    }
}

impl<T, C: Config> Drop for Ref<'_, T, C> {
    #[inline]
    fn drop(&mut self) {
        self.slab.release(self.slot);
    }
}

impl<T: fmt::Debug, C: Config> fmt::Debug for Ref<'_, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Default per-thread cache of free slots for a slab of `capacity` slots: 1/64
/// of the capacity, at most 32; none below 128 slots.
fn default_cache(capacity: usize) -> u32 {
    match capacity / 64 {
        0 | 1 => 0,
        n => n.min(32) as u32,
    }
}

impl<T, C: Config> TaggedSlab<T, C> {
    /// A slab of `capacity` slots with a random tag.
    pub fn new(capacity: usize) -> Self {
        Self::with_tag(capacity, random_tag())
    }

    /// A slab with a chosen tag (masked to `C::TAG_BITS`); for tests and for
    /// callers that derive tags themselves.
    pub fn with_tag(capacity: usize, tag: u64) -> Self {
        Self::with_cache(capacity, tag, default_cache(capacity))
    }

    /// A slab whose threads each cache up to `cache` free slots (0: none).
    ///
    /// A larger cache touches the shared free stack less often; in exchange
    /// up to `cache` free slots per live thread that has used the slab are
    /// out of reach of other threads, so [`insert`](Self::insert) may report
    /// [`Full`] with up to `live threads x cache` slots free. Size the
    /// capacity with that headroom (docs/ring.md). Caches of threads that
    /// have exited are not lost: an insert that finds its own cache and the
    /// shared stack empty takes them before it reports `Full`.
    pub fn with_cache(capacity: usize, tag: u64, cache: u32) -> Self {
        let () = Layout::<C>::VALID;
        assert!(
            C::GEN_BITS <= state::MAX_GEN_BITS,
            "GEN_BITS above {}",
            state::MAX_GEN_BITS
        );
        assert!(capacity > 0, "capacity must be non-zero");
        assert!(
            capacity as u64 <= Layout::<C>::INDEX_MASK + 1,
            "capacity {capacity} exceeds 2^{} slots",
            C::INDEX_BITS
        );
        let slots: Box<[Slot<T>]> = (0..capacity)
            .map(|_| Slot {
                state: AtomicU64::new(state::free(1)),
                links: Links::new(),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Self {
            free: FreeSlots::new(&*slots, capacity as u32, cache),
            slots,
            tag: tag & Layout::<C>::TAG_MASK,
            _config: PhantomData,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// This slab's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Values inserted and not yet retired (exact when no thread is inside
    /// the slab; summed over per-thread counts).
    pub fn live(&self) -> u64 {
        self.free.live()
    }

    /// Values ever inserted (exact when no thread is inside the slab;
    /// summed over per-thread counts, which inserts keep anyway: a caller
    /// that counts its inserts needs no counter of its own).
    ///
    /// ```
    /// use evring::TaggedSlab;
    /// let slab: TaggedSlab<u8> = TaggedSlab::new(4);
    /// let id = slab.insert(1).unwrap();
    /// slab.retire(id);
    /// slab.insert(2).unwrap();
    /// assert_eq!((slab.inserted(), slab.live()), (2, 1));
    /// ```
    pub fn inserted(&self) -> u64 {
        self.free.inserted()
    }

    /// Counters.
    pub fn stats(&self) -> SlabStats {
        SlabStats {
            capacity: self.capacity(),
            live: self.live(),
            full: self.free.full().get(),
            dead_slots: self.free.dead().get(),
            cached: self.free.cached(),
            cache_per_thread: self.free.cache(),
        }
    }

    /// Stores `value` and returns its ID, or gives the value back if no slot
    /// is free. Never waits.
    ///
    /// ```
    /// use evring::TaggedSlab;
    /// let slab: TaggedSlab<u64> = TaggedSlab::new(1);
    /// let id = slab.insert(1).unwrap();
    /// assert_eq!(slab.insert(2).unwrap_err().0, 2); // full: the value comes back
    /// slab.retire(id);
    /// assert!(slab.insert(3).is_ok()); // the slot is free again
    /// ```
    #[inline]
    pub fn insert(&self, value: T) -> Result<EventId, Full<T>> {
        self.insert_with_refs(thread_index::current(), value, |v| v, 0)
            .map(|(id, _)| id)
    }

    /// [`insert`](Self::insert) with the calling thread's index already
    /// looked up ([`with_thread`](crate::with_thread)): the slot comes from
    /// that thread's free cache, and no reference is taken.
    ///
    /// ```
    /// use evring::{with_thread, TaggedSlab};
    /// let slab: TaggedSlab<()> = TaggedSlab::new(2);
    /// let id = with_thread(|me| slab.insert_in(me, ()).unwrap());
    /// assert_eq!(slab.check(id), Ok(()));
    /// ```
    #[inline]
    pub fn insert_in(&self, me: crate::Me<'_>, value: T) -> Result<EventId, Full<T>> {
        self.insert_with_refs(me.index, value, |v| v, 0)
            .map(|(id, _)| id)
    }

    /// Like [`insert`](Self::insert), also returning a reference to the new
    /// value: cheaper than `insert` followed by `get` (the reference is
    /// part of the word that publishes the value).
    ///
    /// ```
    /// use evring::TaggedSlab;
    /// let slab: TaggedSlab<u64> = TaggedSlab::new(4);
    /// let (id, r) = slab.insert_and_get(5).unwrap();
    /// assert_eq!(*r, 5);
    /// assert_eq!(slab.with(id, |v| *v), Ok(5));
    /// ```
    #[inline]
    pub fn insert_and_get(&self, value: T) -> Result<(EventId, Ref<'_, T, C>), Full<T>> {
        self.insert_with_refs(thread_index::current(), value, |v| v, 1)
            .map(|(id, index)| (id, self.make_ref(index as usize)))
    }

    /// [`insert_and_get`](Self::insert_and_get) with the calling thread's
    /// index already looked up ([`with_thread`](crate::with_thread)).
    #[inline]
    pub fn insert_and_get_in(
        &self,
        me: crate::Me<'_>,
        value: T,
    ) -> Result<(EventId, Ref<'_, T, C>), Full<T>> {
        self.insert_with_refs(me.index, value, |v| v, 1)
            .map(|(id, index)| (id, self.make_ref(index as usize)))
    }

    /// [`insert_and_get_in`](Self::insert_and_get_in) with the value made by
    /// `make` once a slot is taken (not called when the slab is full): an
    /// inlined `make` builds the value in the slot itself, where a value
    /// passed in is built first and then copied in.
    ///
    /// ```
    /// use evring::{with_thread, TaggedSlab};
    /// let slab: TaggedSlab<[u64; 8]> = TaggedSlab::new(1);
    /// let id = with_thread(|me| slab.insert_and_get_with_in(me, || [7; 8]).unwrap().0);
    /// assert_eq!(slab.with(id, |v| v[7]), Ok(7));
    /// let full = with_thread(|me| slab.insert_and_get_with_in(me, || unreachable!()).is_err());
    /// assert!(full); // `make` is not called when no slot is free
    /// ```
    #[inline]
    pub fn insert_and_get_with_in(
        &self,
        me: crate::Me<'_>,
        make: impl FnOnce() -> T,
    ) -> Result<(EventId, Ref<'_, T, C>), Full<()>> {
        self.insert_with_refs(me.index, (), |()| make(), 1)
            .map(|(id, index)| (id, self.make_ref(index as usize)))
    }

    /// Takes a free slot, stores `make(value)` in it with `refs` references
    /// already taken; `value` comes back when no slot is free.
    #[inline(always)]
    fn insert_with_refs<V>(
        &self,
        me: Option<usize>,
        value: V,
        make: impl FnOnce(V) -> T,
        refs: u64,
    ) -> Result<(EventId, u32), Full<V>> {
        let Some(index) = self.free.pop(&*self.slots, me) else {
            self.free.full().add_as(me, 1);
            return Err(Full(value));
        };
        let slot = &self.slots[index as usize];
        // The free list hands the index over with acquire/release (or on this
        // thread), so the last release's writes to the word are visible.
        let generation = state::generation(slot.state.load(Ordering::Relaxed));
        debug_assert_ne!(generation, 0, "dead slot on the free list");
        // A `make` that panics hands the index back (the slot was never
        // published, so it is as free as it was).
        let give_back = GiveBack {
            free: &self.free,
            slots: &self.slots,
            me,
            index,
        };
        // SAFETY: a free index is owned by the thread that popped it, and its
        // previous value was dropped before the index was freed, so no one
        // else can access this cell now (`make` cannot reach it: the slot's
        // ID does not exist yet).
        slot.value.with_mut(|p| unsafe { (*p).write(make(value)) });
        core::mem::forget(give_back);
        // Release: publishes the value before the ID can be validated anywhere.
        slot.state.store(
            state::live(generation) + refs * state::REF_ONE,
            Ordering::Release,
        );
        self.free.count_insert(me);
        // The slot the next insert on this thread takes (its state word and
        // links): often freed by another thread (NCCL's proxy thread
        // completes what the user thread started), its line in that core's
        // cache. Fetched now, while NCCL runs, rather than by the next insert.
        if let Some(next) = self.free.next_cached(me) {
            crate::hint::prefetch_write(&self.slots[next as usize]);
        }
        let id = EventId::new_unchecked(Layout::<C>::pack(index, generation, self.tag));
        Ok((id, index))
    }

    #[inline(always)]
    fn decode(&self, id: EventId) -> Result<(usize, u64), Miss> {
        match Layout::<C>::unpack(id.get()) {
            Some((index, generation, tag))
                if tag == self.tag && (index as usize) < self.slots.len() =>
            {
                Ok((index as usize, generation))
            }
            _ => Err(Miss::Foreign),
        }
    }

    /// The index of the slot `id` names (whatever its generation), if it is
    /// an ID of this slab: a key for tables kept beside the slab.
    ///
    /// ```
    /// use evring::{EventId, TaggedSlab};
    /// let slab: TaggedSlab<u8> = TaggedSlab::new(4);
    /// let id = slab.insert(0).unwrap();
    /// assert!(slab.slot_index(id).is_some_and(|i| i < 4));
    /// assert_eq!(slab.slot_index(EventId::from_raw(0xdead).unwrap()), None);
    /// ```
    #[inline]
    pub fn slot_index(&self, id: EventId) -> Option<usize> {
        self.decode(id).ok().map(|(index, _)| index)
    }

    /// Classifies an ID without reading its value or taking a reference.
    ///
    /// ```
    /// use evring::{EventId, Miss, TaggedSlab};
    /// let slab: TaggedSlab<u8> = TaggedSlab::new(4);
    /// let id = slab.insert(0).unwrap();
    /// assert_eq!(slab.check(id), Ok(()));
    /// assert_eq!(slab.check(EventId::from_raw(0xdead).unwrap()), Err(Miss::Foreign));
    /// ```
    #[inline]
    pub fn check(&self, id: EventId) -> Result<(), Miss> {
        let (index, generation) = self.decode(id)?;
        let s = self.slots[index].state.load(Ordering::Acquire);
        if state::without_refs(s) == state::live(generation) {
            Ok(())
        } else {
            Err(Miss::Stale)
        }
    }

    /// A counted reference to the value behind `id` if it is live.
    ///
    /// ```
    /// use evring::{Miss, TaggedSlab};
    /// let slab: TaggedSlab<&str> = TaggedSlab::new(4);
    /// let id = slab.insert("send").unwrap();
    /// let r = slab.lookup(id).unwrap();
    /// // Retiring while a reference is held is fine: the value lives on
    /// // until `r` is dropped, and the ID is stale at once.
    /// assert!(slab.retire(id).is_some());
    /// assert_eq!(*r, "send");
    /// assert_eq!(slab.lookup(id).unwrap_err(), Miss::Stale);
    /// ```
    #[inline]
    pub fn lookup(&self, id: EventId) -> Result<Ref<'_, T, C>, Miss> {
        let (index, generation) = self.decode(id)?;
        let slot = &self.slots[index];
        let want = state::live(generation);
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if state::without_refs(s) != want {
                return Err(Miss::Stale);
            }
            if state::refs(s) >= state::LOOKUP_MAX_REFS {
                return Err(Miss::Busy);
            }
            // Acquire pairs with insert's Release: the value is fully written.
            match slot.state.compare_exchange_weak(
                s,
                s + state::REF_ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(Ref { slab: self, slot }),
                Err(now) => s = now,
            }
        }
    }

    /// Like [`lookup`](Self::lookup), discarding the reason for a miss.
    #[inline]
    pub fn get(&self, id: EventId) -> Option<Ref<'_, T, C>> {
        self.lookup(id).ok()
    }

    /// Runs `f` on the value behind `id` if it is live.
    ///
    /// ```
    /// use evring::TaggedSlab;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// let slab: TaggedSlab<AtomicU32> = TaggedSlab::new(4);
    /// let id = slab.insert(AtomicU32::new(0)).unwrap();
    /// slab.with(id, |n| n.fetch_add(1, Ordering::Relaxed)).unwrap();
    /// assert_eq!(slab.with(id, |n| n.load(Ordering::Relaxed)), Ok(1));
    /// ```
    #[inline]
    pub fn with<R>(&self, id: EventId, f: impl FnOnce(&T) -> R) -> Result<R, Miss> {
        self.lookup(id).map(|r| f(&r))
    }

    /// Retires `id`: of all concurrent callers with the same live ID, exactly
    /// one gets `Some`, with a reference to the value (dropped with the last
    /// reference). Stale, foreign and already retired IDs give `None`.
    ///
    /// ```
    /// use evring::TaggedSlab;
    /// let slab: TaggedSlab<Vec<u8>> = TaggedSlab::new(4);
    /// let id = slab.insert(vec![1, 2, 3]).unwrap();
    /// let last = slab.retire(id).unwrap();
    /// assert_eq!(last.len(), 3);
    /// assert!(slab.retire(id).is_none(), "one winner");
    /// drop(last); // the Vec is dropped here and the slot becomes free
    /// assert_eq!(slab.live(), 0);
    /// ```
    #[inline]
    pub fn retire(&self, id: EventId) -> Option<Ref<'_, T, C>> {
        let (index, generation) = self.decode(id).ok()?;
        let slot = &self.slots[index];
        let want = state::live(generation);
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if state::without_refs(s) != want {
                return None;
            }
            // One more reference, for the caller; lookups stop one short of
            // the field's maximum, so this never overflows.
            let new = state::retired(generation, Layout::<C>::GEN_MASK, state::refs(s) + 1);
            // Acquire: the winner sees the value's writes; losers and later
            // lookups see the new generation and refuse the old ID.
            match slot
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        self.free.count_retire(thread_index::current());
        Some(Ref { slab: self, slot })
    }

    /// Retires `id` and runs `f` on its value if this call won.
    #[inline]
    pub fn retire_with<R>(&self, id: EventId, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.retire(id).map(|r| f(&r))
    }

    /// Every entry live at the moment its slot is visited, with a reference.
    ///
    /// ```
    /// use evring::TaggedSlab;
    /// let slab: TaggedSlab<u32> = TaggedSlab::new(8);
    /// for v in 0..3 {
    ///     slab.insert(v).unwrap();
    /// }
    /// let sum: u32 = slab.iter().map(|(_, v)| *v).sum();
    /// assert_eq!(sum, 3);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (EventId, Ref<'_, T, C>)> + '_ {
        (0..self.slots.len()).filter_map(move |index| {
            let s = self.slots[index].state.load(Ordering::Relaxed);
            if s & LIVE == 0 {
                return None;
            }
            let id = EventId::new_unchecked(Layout::<C>::pack(
                index as u32,
                state::generation(s),
                self.tag,
            ));
            self.lookup(id).ok().map(|r| (id, r))
        })
    }

    /// Drops one reference; the last one on a retired slot frees it.
    #[inline]
    fn release(&self, slot: &Slot<T>) {
        self.release_as(slot, |slot, s| self.reclaim_here(slot, s))
    }

    /// `reclaim` for a caller without its thread index: looked up here, in
    /// a call of its own, so that no caller pays for the thread-local
    /// access (a `__tls_get_addr` call in a dlopen'd library, which the
    /// compiler would otherwise hoist to the caller's entry) unless it frees.
    #[inline(never)]
    fn reclaim_here(&self, slot: &Slot<T>, s: u64) {
        self.reclaim(thread_index::current(), slot, s)
    }

    /// Drops one reference; `reclaim(slot, state)` frees the slot if it
    /// was the last one of a retired value.
    #[inline(always)]
    fn release_as(&self, slot: &Slot<T>, reclaim: impl FnOnce(&Slot<T>, u64)) {
        let s = slot.state.load(Ordering::Acquire);
        if s & LIVE == 0 && state::refs(s) == 1 {
            // Retired, and ours is the only reference: nobody else can change
            // the word (lookups and retires need LIVE), so no RMW is needed.
            // Acquire above: every other holder's release is visible.
            return reclaim(slot, s);
        }
        // AcqRel: our reads of the value happen before whoever frees it;
        // if that is us, everyone else's reads happen before our drop.
        let prev = slot.state.fetch_sub(state::REF_ONE, Ordering::AcqRel);
        if prev & LIVE == 0 && state::refs(prev) == 1 {
            reclaim(slot, prev);
        }
    }

    /// Drops the value of a retired, unreferenced slot and frees the slot
    /// (unless its generations are spent).
    #[inline]
    fn reclaim(&self, me: Option<usize>, slot: &Slot<T>, s: u64) {
        // SAFETY: the slot is retired and nobody holds a reference, so no
        // reader can reach the value, no new reference can be taken, and the
        // index is on no free list yet: this thread has the cell to itself.
        slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
        let generation = state::generation(s);
        if generation == 0 {
            self.count_dead(me);
            return;
        }
        slot.state.store(state::free(generation), Ordering::Relaxed);
        self.free.push(&*self.slots, me, self.index_of(slot));
    }
}

impl<T, C: Config> TaggedSlab<T, C> {
    /// A reference to slot `index` (the caller has counted it in the slot's
    /// state word).
    #[inline(always)]
    fn make_ref(&self, index: usize) -> Ref<'_, T, C> {
        Ref {
            slab: self,
            slot: &self.slots[index],
        }
    }

    /// A slot retired for good (out of line: rare, and nothing of it is
    /// computed on the reclaim path unless it happens).
    #[cold]
    #[inline(never)]
    fn count_dead(&self, me: Option<usize>) {
        self.free.dead().add_as(me, 1);
    }

    /// The index of `slot`, one of this slab's.
    #[inline(always)]
    fn index_of(&self, slot: &Slot<T>) -> u32 {
        let offset = slot as *const Slot<T> as usize - self.slots.as_ptr() as usize;
        (offset / core::mem::size_of::<Slot<T>>()) as u32
    }
}

impl<T, C: Config> Drop for TaggedSlab<T, C> {
    fn drop(&mut self) {
        // No Ref exists (each borrows the slab), so every retired value has
        // been dropped; live ones are dropped here.
        for slot in self.slots.iter() {
            if slot.state.load(Ordering::Relaxed) & LIVE != 0 {
                // SAFETY: exclusive access in drop; live slots hold a value.
                slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            }
        }
    }
}

impl<T, C: Config> fmt::Debug for TaggedSlab<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaggedSlab")
            .field("tag", &self.tag())
            .field("stats", &self.stats())
            .finish()
    }
}

fn random_tag() -> u64 {
    #[cfg(not(evring_loom))]
    {
        use std::hash::BuildHasher;
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::collections::hash_map::RandomState::new().hash_one((seq, std::process::id()))
    }
    #[cfg(evring_loom)]
    {
        1
    }
}
