//! `TaggedSlab<T>`: fixed-capacity storage addressed by generation-tagged IDs.
//!
//! Lifecycle of one slot (the whole design is in docs/ring.md):
//!
//! ```text
//!   free list --insert--> LIVE(g) --retire (one CAS winner)--> retired(g+1)
//!       ^                                                         |
//!       |                                                  limbo batch
//!       +---- reclaim: drop value, push index <-- epoch grace period
//! ```
//!
//! * A slot's state word is `generation << 1 | LIVE`. Lookups compare the whole
//!   word with the ID's generation, so a stale ID (older generation), a foreign
//!   ID (other tag) or a malformed one is refused without touching the value.
//! * Retire bumps the generation in the same CAS that clears LIVE, so exactly
//!   one caller wins and every older ID is dead from that instant.
//! * The value stays in place until every thread that could have read it has
//!   unpinned its epoch guard; only then is it dropped and the index reused.
//!   Storage is inline: nothing is allocated per insert.
//! * A generation that would wrap retires the slot for good (`DEAD`), so a
//!   generation never repeats within a slot and a stale ID is never accepted.
//! * Free slots form a LIFO stack (the most recently reclaimed slot is reused
//!   first, while its cache lines are still warm). The head carries a 32-bit
//!   tag bumped on every push and pop, so a stalled pop cannot be fooled by
//!   the same index reappearing (ABA) unless exactly 2^32 head updates
//!   happen inside its load-to-CAS window.

use crate::counter::Counter;
use crate::id::{Config, DefaultConfig, EventId, Layout};
use crate::sync::{Arc, AtomicU32, AtomicU64, Ordering, UnsafeCell};
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use crossbeam_epoch::{self as epoch, Guard};
use crossbeam_utils::CachePadded;

const LIVE: u64 = 1;
/// Epoch nudges before `insert` reports Full (few under loom, where each one
/// multiplies the explored interleavings).
const RECLAIM_ATTEMPTS: usize = if cfg!(evring_loom) { 2 } else { 16 };
/// State of a slot whose generation space is spent; never reused.
const DEAD: u64 = 0;

/// Returned by [`TaggedSlab::insert`] when no slot is free; gives the value back.
#[derive(PartialEq, Eq)]
pub struct Full<T>(pub T);

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
    /// Indices waiting in the current limbo batch (not yet handed to the epoch).
    pub limbo: u64,
}

struct Slot<T> {
    state: AtomicU64,
    /// Link to the next slot (index + 1, 0 = end) while this one waits in
    /// limbo or on the free stack; a slot is never on both.
    next: AtomicU32,
    value: UnsafeCell<MaybeUninit<T>>,
}

struct Inner<T, C: Config> {
    slots: Box<[Slot<T>]>,
    /// Free stack head: `tag << 32 | (top index + 1)`.
    free: CachePadded<AtomicU64>,
    /// Retired slots not yet handed to the epoch: `count << 32 | (top index + 1)`.
    limbo: CachePadded<AtomicU64>,
    tag: u64,
    live: Counter,
    full: Counter,
    dead: Counter,
    _config: PhantomData<C>,
}

// SAFETY: values are shared between threads through `&T` (needs `Sync`) and
// dropped by whichever thread reclaims them (needs `Send`). Slot access rules
// are upheld by the state machine above.
unsafe impl<T: Send + Sync, C: Config> Send for Inner<T, C> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync, C: Config> Sync for Inner<T, C> {}

/// A lock-free slab whose handles are [`EventId`]s. Any thread may insert, read
/// and retire. `T` is immutable once inserted except through its own interior
/// mutability (atomics), because several threads may read it at once.
pub struct TaggedSlab<T, C: Config = DefaultConfig> {
    inner: Arc<Inner<T, C>>,
}

impl<T: Send + Sync + 'static, C: Config> TaggedSlab<T, C> {
    /// A slab of `capacity` slots with a random tag.
    pub fn new(capacity: usize) -> Self {
        Self::with_tag(capacity, random_tag())
    }

    /// A slab with a chosen tag (masked to `C::TAG_BITS`); for tests and for
    /// callers that derive tags themselves.
    pub fn with_tag(capacity: usize, tag: u64) -> Self {
        let () = Layout::<C>::VALID;
        assert!(capacity > 0, "capacity must be non-zero");
        assert!(
            capacity as u64 <= Layout::<C>::INDEX_MASK + 1,
            "capacity {capacity} exceeds 2^{} slots",
            C::INDEX_BITS
        );
        let slots: Box<[Slot<T>]> = (0..capacity)
            .map(|_| Slot {
                state: AtomicU64::new(1 << 1),
                next: AtomicU32::new(0),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        // Slot i links to i + 1, so index 0 is handed out first.
        for (i, slot) in slots.iter().enumerate() {
            let next = if i + 1 < capacity { i as u32 + 2 } else { 0 };
            slot.next.store(next, Ordering::Relaxed);
        }
        let free = CachePadded::new(AtomicU64::new(1));
        Self {
            inner: Arc::new(Inner {
                slots,
                free,
                limbo: CachePadded::new(AtomicU64::new(0)),
                tag: tag & Layout::<C>::TAG_MASK,
                live: Counter::new(),
                full: Counter::new(),
                dead: Counter::new(),
                _config: PhantomData,
            }),
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.inner.slots.len()
    }

    /// This slab's tag.
    pub fn tag(&self) -> u64 {
        self.inner.tag
    }

    /// Values inserted and not yet retired.
    pub fn live(&self) -> u64 {
        self.inner.live.get()
    }

    /// Counters.
    pub fn stats(&self) -> SlabStats {
        SlabStats {
            capacity: self.capacity(),
            live: self.inner.live.get(),
            full: self.inner.full.get(),
            dead_slots: self.inner.dead.get(),
            limbo: self.inner.limbo.load(Ordering::Relaxed) >> 32,
        }
    }

    /// Stores `value` and returns its ID, or gives the value back if every slot
    /// is taken (after first trying to reclaim retired slots). Never waits.
    ///
    /// Call it without holding a [`Guard`]: a pinned caller keeps the epoch from
    /// advancing, so retired slots cannot be reclaimed on its behalf.
    pub fn insert(&self, value: T) -> Result<EventId, Full<T>> {
        let index = match self.inner.pop_free() {
            Some(i) => i,
            None => match self.reclaim_and_pop() {
                Some(i) => i,
                None => {
                    self.inner.full.incr();
                    return Err(Full(value));
                }
            },
        };
        let slot = &self.inner.slots[index as usize];
        // The free stack's Acquire pop orders this after the retire that set it.
        let state = slot.state.load(Ordering::Relaxed);
        debug_assert!(state & LIVE == 0 && state != DEAD);
        // SAFETY: an index on the free list is owned by the thread that pops it,
        // and reclaim dropped the previous value only after every reader of it
        // had unpinned, so no one else can access this cell now.
        slot.value.with_mut(|p| unsafe { (*p).write(value) });
        // Release: publishes the value before the ID can be validated anywhere.
        slot.state.store(state | LIVE, Ordering::Release);
        self.inner.live.incr();
        Ok(EventId::new_unchecked(Layout::<C>::pack(
            index,
            state >> 1,
            self.inner.tag,
        )))
    }

    /// The free stack on its own, for the loom model of its ABA safety.
    #[cfg(all(test, evring_loom))]
    pub(crate) fn free_stack(&self) -> (impl Fn() -> Option<u32> + '_, impl Fn(u32) + '_) {
        (|| self.inner.pop_free(), |i| self.inner.push_free(i))
    }

    /// Drains limbo into the epoch and nudges the epoch forward a few times,
    /// then tries the free list again.
    #[cold]
    fn reclaim_and_pop(&self) -> Option<u32> {
        {
            let guard = epoch::pin();
            let head = self.inner.limbo.swap(0, Ordering::AcqRel);
            if head as u32 != 0 {
                self.defer_chain(head as u32 - 1, &guard);
            }
            guard.flush();
        }
        // Each flush advances the global epoch at most one step, and a bag is
        // freed two steps after it was sealed.
        for attempt in 0..RECLAIM_ATTEMPTS {
            if let Some(i) = self.inner.pop_free() {
                return Some(i);
            }
            if attempt >= 4 {
                // Another thread may be pinned briefly; let it run.
                yield_now();
            }
            epoch::pin().flush();
        }
        self.inner.pop_free()
    }

    #[inline(always)]
    fn decode(&self, id: EventId) -> Result<(usize, u64), Miss> {
        match Layout::<C>::unpack(id.get()) {
            Some((index, generation, tag))
                if tag == self.inner.tag && (index as usize) < self.inner.slots.len() =>
            {
                Ok((index as usize, generation))
            }
            _ => Err(Miss::Foreign),
        }
    }

    /// Classifies a raw ID without reading any value.
    pub fn check(&self, id: EventId) -> Result<(), Miss> {
        let (index, generation) = self.decode(id)?;
        let state = self.inner.slots[index].state.load(Ordering::Acquire);
        if state == generation << 1 | LIVE {
            Ok(())
        } else {
            Err(Miss::Stale)
        }
    }

    /// The value behind `id` if it is live, for as long as `guard` is pinned.
    #[inline]
    pub fn lookup<'g>(&'g self, id: EventId, guard: &'g Guard) -> Result<&'g T, Miss> {
        let _ = guard;
        let (index, generation) = self.decode(id)?;
        let slot = &self.inner.slots[index];
        // Acquire pairs with insert's Release: the value is fully written.
        if slot.state.load(Ordering::Acquire) != generation << 1 | LIVE {
            return Err(Miss::Stale);
        }
        // SAFETY: the slot was live under `guard`; reclaim drops the value only
        // after every guard pinned before its retirement is gone, so the
        // reference stays valid for `'g`, and nobody writes the cell meanwhile.
        Ok(slot.value.with(|p| unsafe { &*(*p).as_ptr() }))
    }

    /// Like [`lookup`](Self::lookup), discarding the reason for a miss.
    #[inline]
    pub fn get<'g>(&'g self, id: EventId, guard: &'g Guard) -> Option<&'g T> {
        self.lookup(id, guard).ok()
    }

    /// Runs `f` on the value behind `id` if it is live (pins for the call).
    #[inline]
    pub fn with<R>(&self, id: EventId, f: impl FnOnce(&T) -> R) -> Result<R, Miss> {
        let guard = epoch::pin();
        self.lookup(id, &guard).map(f)
    }

    /// Retires `id`: of all concurrent callers with the same live ID, exactly
    /// one gets `Some`, with the value, readable until `guard` unpins. Stale,
    /// foreign and already retired IDs give `None`.
    pub fn retire<'g>(&'g self, id: EventId, guard: &'g Guard) -> Option<&'g T> {
        let (index, generation) = self.decode(id).ok()?;
        let slot = &self.inner.slots[index];
        let next = if generation < Layout::<C>::GEN_MASK {
            (generation + 1) << 1
        } else {
            DEAD
        };
        // AcqRel: the winner sees the value's writes; losers and later lookups
        // see the new generation and refuse the old ID.
        slot.state
            .compare_exchange(
                generation << 1 | LIVE,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .ok()?;
        self.inner.live.decr();
        self.push_limbo(index as u32, guard);
        // SAFETY: the value is dropped only by reclaim, which runs after
        // `guard` (pinned before the CAS above) is gone.
        Some(slot.value.with(|p| unsafe { &*(*p).as_ptr() }))
    }

    /// Retires `id` and runs `f` on its value if this call won.
    pub fn retire_with<R>(&self, id: EventId, f: impl FnOnce(&T) -> R) -> Option<R> {
        let guard = epoch::pin();
        self.retire(id, &guard).map(f)
    }

    /// Every live entry at the moment each slot is visited.
    pub fn iter<'g>(&'g self, guard: &'g Guard) -> impl Iterator<Item = (EventId, &'g T)> + 'g {
        let _ = guard;
        let tag = self.inner.tag;
        self.inner
            .slots
            .iter()
            .enumerate()
            .filter_map(move |(index, slot)| {
                let state = slot.state.load(Ordering::Acquire);
                if state & LIVE == 0 {
                    return None;
                }
                let id = EventId::new_unchecked(Layout::<C>::pack(index as u32, state >> 1, tag));
                // SAFETY: as in `lookup`: live under `guard`, so the value outlives 'g.
                Some((id, slot.value.with(|p| unsafe { &*(*p).as_ptr() })))
            })
    }

    /// Hands `index` to the current limbo batch; the push that fills the batch
    /// takes the whole chain and defers its reclamation to the epoch.
    fn push_limbo(&self, index: u32, guard: &Guard) {
        let slot = &self.inner.slots[index as usize];
        let mut head = self.inner.limbo.load(Ordering::Relaxed);
        loop {
            // Push-only stack drained by CAS: a recycled top is harmless (no ABA),
            // because the link is rewritten from the head we CAS against.
            slot.next.store(head as u32, Ordering::Relaxed);
            let count = (head >> 32) + 1;
            let new = if count >= u64::from(C::RECLAIM_BATCH) {
                0
            } else {
                count << 32 | u64::from(index + 1)
            };
            match self.inner.limbo.compare_exchange_weak(
                head,
                new,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) if new == 0 => return self.defer_chain(index, guard),
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    fn defer_chain(&self, first: u32, guard: &Guard) {
        let inner = Arc::clone(&self.inner);
        guard.defer(move || inner.reclaim_chain(first));
        // Hand the batch to the global queue now rather than when this thread's
        // bag fills, so retired slots never pile up behind a thread that stops
        // retiring; this also runs one collection step.
        guard.flush();
    }
}

impl<T, C: Config> Inner<T, C> {
    fn pop_free(&self) -> Option<u32> {
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == 0 {
                return None;
            }
            // May read a link that a concurrent pop already reused; the tag
            // then differs and the CAS below fails.
            let next = self.slots[top as usize - 1].next.load(Ordering::Relaxed);
            let new = (head >> 32).wrapping_add(1) << 32 | u64::from(next);
            match self
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(top - 1),
                Err(h) => head = h,
            }
        }
    }

    fn push_free(&self, index: u32) {
        let slot = &self.slots[index as usize];
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            slot.next.store(head as u32, Ordering::Relaxed);
            let new = (head >> 32).wrapping_add(1) << 32 | u64::from(index + 1);
            // Release: the link, the dropped value and the bumped generation
            // are visible to whoever pops this index.
            match self
                .free
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Runs after the grace period of a limbo batch: drops each value and
    /// returns live-able slots to the free list.
    fn reclaim_chain(&self, first: u32) {
        let mut index = first;
        loop {
            let slot = &self.slots[index as usize];
            // Read the link before the index can be reused by someone else.
            let next = slot.next.load(Ordering::Acquire);
            // SAFETY: the slot was retired before this batch was deferred, and the
            // epoch guarantees no guard that could have read it is still pinned;
            // the index is not on the free list yet, so no one else touches it.
            slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            if slot.state.load(Ordering::Relaxed) == DEAD {
                self.dead.incr();
            } else {
                self.push_free(index);
            }
            if next == 0 {
                return;
            }
            index = next - 1;
        }
    }
}

impl<T, C: Config> Drop for Inner<T, C> {
    fn drop(&mut self) {
        // No deferred batch can be pending: each holds an `Arc` to us.
        for slot in self.slots.iter() {
            if slot.state.load(Ordering::Relaxed) & LIVE != 0 {
                // SAFETY: exclusive access in drop; live slots hold a value.
                slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            }
        }
        let mut top = self.limbo.load(Ordering::Relaxed) as u32;
        while top != 0 {
            let slot = &self.slots[top as usize - 1];
            top = slot.next.load(Ordering::Relaxed);
            // SAFETY: slots in limbo were retired but not reclaimed: they hold a value.
            slot.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
        }
    }
}

impl<T: Send + Sync + 'static, C: Config> fmt::Debug for TaggedSlab<T, C> {
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

#[inline]
fn yield_now() {
    #[cfg(evring_loom)]
    loom::thread::yield_now();
    #[cfg(not(evring_loom))]
    std::thread::yield_now();
}
