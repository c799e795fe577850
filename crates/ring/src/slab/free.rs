//! Free slot indices: one shared stack of chains, plus a small cache
//! ("magazine") per thread and per slab.
//!
//! * A thread takes free slots from its own cache and gives freed slots back
//!   to it, touching no shared cache line. When the cache is empty it takes a
//!   whole chain of up to `cache` slots from the shared stack (one CAS); when
//!   the cache is full it hands its whole content to the stack as one chain
//!   (one CAS). So the shared head is touched once per `cache` operations.
//! * A slot freed by a thread other than the one that took it (NCCL: the user
//!   thread starts, the proxy thread stops) goes to the freeing thread's
//!   cache; chains carry it back to the inserting thread. Nothing is sent to
//!   the owner, nothing waits.
//! * Each thread holds at most `cache` free slots, so at most
//!   `live threads x cache` free slots are out of reach of an inserting
//!   thread: the capacity headroom documented in docs/ring.md. The cache of
//!   a thread that exited is not out of reach: when its own cache and the
//!   shared stack are empty, an inserting thread takes such a cache whole
//!   (`steal`), holding the exited thread's index while it does.
//! * The stack head carries a 32-bit tag bumped on every push and pop, so a
//!   stalled pop cannot be fooled by the same chain head reappearing (ABA)
//!   unless exactly 2^32 head updates happen inside its load-to-CAS window.
//!
//! Counts of inserts and retires live in the same per-thread shards; the live
//! count is their difference summed over all shards.
//!
//! A thread without an index (more than `MAX_THREADS` threads at once, or a
//! call from a thread-local destructor) uses chains of one slot and shared
//! counters: slower, same guarantees.

use crate::counter::Counter;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::thread_index::{self, MAX_THREADS};
use crossbeam_utils::CachePadded;

/// The link every free slot has: in the slot itself ([`LinkTable`]), so
/// that taking a slot from a cache reads the line the insert writes anyway
/// instead of a line of its own (4 bytes: a slot of the shim's slab is 16).
pub(crate) struct Links {
    /// Next slot of the same chain (index + 1, 0 = end).
    next: AtomicU32,
}

impl Links {
    pub(crate) fn new() -> Self {
        Links {
            next: AtomicU32::new(0),
        }
    }
}

/// What a chain's first slot holds while the chain is on the shared stack
/// (touched once per chain, so kept apart from the slots, behind `cold`).
struct ChainLinks {
    /// The next chain's first slot + 1 (0 = bottom).
    chain_next: AtomicU32,
    /// The chain's length.
    chain_len: AtomicU32,
}

/// Where the links of slot `i` are: the slab's slots (or, for the loom
/// model of the free stack, a plain table of links).
pub(crate) trait LinkTable {
    fn link(&self, i: u32) -> &Links;
}

#[cfg(all(test, evring_loom))]
impl LinkTable for [Links] {
    #[inline(always)]
    fn link(&self, i: u32) -> &Links {
        &self[i as usize]
    }
}

/// One thread's state for one slab. Written only by the thread holding the
/// index (plain loads and stores, no read-modify-write), read by anyone for
/// the counts.
#[derive(Default)]
struct Shard {
    /// Cached free slots: first index + 1 (0 = empty), chained through `Links::next`.
    head: AtomicU32,
    len: AtomicU32,
    inserted: AtomicU64,
    retired: AtomicU64,
}

/// What every insert reads (never written after construction), in 24
/// bytes: the slab's header holds it beside its slots and tag, and the
/// shim puts its ring's lane table on the same line (with cold caches each
/// line read is a miss). What the common path never touches is behind
/// `cold`.
#[repr(C)]
pub(crate) struct FreeSlots {
    /// One per thread index: indexed through [`FreeSlots::shard`].
    shards: Box<[CachePadded<Shard>; MAX_THREADS]>,
    /// Most free slots a thread caches (0: every free goes to the stack).
    cache: u32,
    cold: Box<Cold>,
}

/// The shared parts: the stack of chains (touched once per `cache`
/// operations of a thread), the counts of threads without a shard, and the
/// slab's own rare counters.
struct Cold {
    /// `tag << 32 | (first slot of the top chain + 1)`.
    stack: CachePadded<AtomicU64>,
    /// One per slot: meaningful on a chain's first slot while the chain is
    /// on the stack.
    chains: Box<[ChainLinks]>,
    /// Counts of threads without a shard.
    shared_inserted: CachePadded<AtomicU64>,
    shared_retired: CachePadded<AtomicU64>,
    /// Inserts refused because no slot was free (the slab's).
    full: Counter,
    /// Slots retired for good (the slab's).
    dead: Counter,
}

impl FreeSlots {
    /// All of the `capacity` slots of `t` free, in chains of `cache` (index
    /// 0 on top).
    pub(crate) fn new<L: LinkTable + ?Sized>(t: &L, capacity: u32, cache: u32) -> Self {
        let this = Self {
            shards: (0..MAX_THREADS)
                .map(|_| CachePadded::default())
                .collect::<Box<[_]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("MAX_THREADS shards")),
            cache,
            cold: Box::new(Cold {
                stack: CachePadded::new(AtomicU64::new(0)),
                chains: (0..capacity)
                    .map(|_| ChainLinks {
                        chain_next: AtomicU32::new(0),
                        chain_len: AtomicU32::new(0),
                    })
                    .collect(),
                shared_inserted: CachePadded::new(AtomicU64::new(0)),
                shared_retired: CachePadded::new(AtomicU64::new(0)),
                full: Counter::new(),
                dead: Counter::new(),
            }),
        };
        let chain = cache.max(1);
        let starts: Vec<u32> = (0..capacity).step_by(chain as usize).collect();
        for &first in starts.iter().rev() {
            let end = (first + chain).min(capacity);
            for i in first..end {
                let next = if i + 1 < end { i + 2 } else { 0 };
                t.link(i).next.store(next, Ordering::Relaxed);
            }
            this.push_chain(first, end - first);
        }
        this
    }

    /// The slab's count of inserts refused because no slot was free.
    pub(crate) fn full(&self) -> &Counter {
        &self.cold.full
    }

    /// The slab's count of slots retired for good.
    pub(crate) fn dead(&self) -> &Counter {
        &self.cold.dead
    }

    /// The shard of thread index `me` (always below `MAX_THREADS`, a power
    /// of two: the mask is a no-op that spares a bounds check).
    #[inline(always)]
    fn shard(&self, me: usize) -> &Shard {
        const { assert!(MAX_THREADS.is_power_of_two()) };
        &self.shards[me % MAX_THREADS]
    }

    /// Takes a free slot, or `None` if the caller's cache and the shared
    /// stack are both empty. The common case (a slot in the caller's cache)
    /// is inlined into the insert: a load of the cache's head and length and
    /// of the slot's link, two stores.
    #[inline(always)]
    pub(crate) fn pop<L: LinkTable + ?Sized>(&self, t: &L, me: Option<usize>) -> Option<u32> {
        if let Some(shard) = me.map(|me| self.shard(me)) {
            let head = shard.head.load(Ordering::Relaxed);
            if head != 0 {
                let first = head - 1;
                let next = t.link(first).next.load(Ordering::Relaxed);
                shard.head.store(next, Ordering::Relaxed);
                shard
                    .len
                    .store(shard.len.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
                return Some(first);
            }
        }
        self.pop_refill(t, me)
    }

    /// `pop` when the caller's cache is empty (or it has none): a chain
    /// from the shared stack (or a stolen cache), whose first slot is taken
    /// and the rest cached.
    #[inline(never)]
    fn pop_refill<L: LinkTable + ?Sized>(&self, t: &L, me: Option<usize>) -> Option<u32> {
        let Some(me) = me else {
            let (first, len) = self.pop_chain().or_else(|| self.steal())?;
            if len > 1 {
                let rest = t.link(first).next.load(Ordering::Relaxed) - 1;
                self.push_chain(rest, len - 1);
            }
            return Some(first);
        };
        let shard = self.shard(me);
        let (first, len) = self.pop_chain().or_else(|| self.steal())?;
        let next = t.link(first).next.load(Ordering::Relaxed);
        shard.head.store(next, Ordering::Relaxed);
        shard.len.store(len - 1, Ordering::Relaxed);
        Some(first)
    }

    /// The slot the caller's next `pop` takes, if its cache holds one.
    /// Nothing is taken.
    #[inline(always)]
    pub(crate) fn next_cached(&self, me: Option<usize>) -> Option<u32> {
        self.shard(me?).head.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Gives back a free slot (its value already dropped).
    #[inline]
    pub(crate) fn push<L: LinkTable + ?Sized>(&self, t: &L, me: Option<usize>, index: u32) {
        let link = t.link(index);
        let Some(me) = me.filter(|_| self.cache > 0) else {
            link.next.store(0, Ordering::Relaxed);
            return self.push_chain(index, 1);
        };
        let shard = self.shard(me);
        let mut head = shard.head.load(Ordering::Relaxed);
        let mut len = shard.len.load(Ordering::Relaxed);
        if len >= self.cache {
            self.push_chain(head - 1, len);
            (head, len) = (0, 0);
        }
        link.next.store(head, Ordering::Relaxed);
        shard.head.store(index + 1, Ordering::Relaxed);
        shard.len.store(len + 1, Ordering::Relaxed);
    }

    /// The steal path, for when the caller's cache and the shared stack are
    /// empty: takes the whole cache of a thread index that no thread holds
    /// (its thread exited and no thread has claimed the index since), as a
    /// chain. The index is held meanwhile, exactly as a new thread holds it
    /// (`thread_index::borrow_unheld`), so the cache has one owner at every
    /// instant: no slot goes to two owners, and the chain's links and the
    /// slots' states (written by the exited thread before it gave the index
    /// back) are visible here. Caches of live threads are never touched:
    /// their owners use plain loads and stores.
    #[cold]
    fn steal(&self) -> Option<(u32, u32)> {
        let limit = thread_index::high().min(self.shards.len());
        thread_index::borrow_unheld(
            limit,
            |i| self.shards[i].len.load(Ordering::Relaxed) > 0,
            |i| {
                let shard = &self.shards[i];
                let head = shard.head.load(Ordering::Relaxed);
                if head == 0 {
                    return None;
                }
                let len = shard.len.load(Ordering::Relaxed);
                shard.head.store(0, Ordering::Relaxed);
                shard.len.store(0, Ordering::Relaxed);
                Some((head - 1, len))
            },
        )
    }

    fn push_chain(&self, first: u32, len: u32) {
        let link = &self.cold.chains[first as usize];
        link.chain_len.store(len, Ordering::Relaxed);
        let stack = &self.cold.stack;
        let mut head = stack.load(Ordering::Relaxed);
        loop {
            link.chain_next.store(head as u32, Ordering::Relaxed);
            let new = (head >> 32).wrapping_add(1) << 32 | u64::from(first + 1);
            // Release: the chain's links, and everything its freeing threads
            // did to its slots (values dropped, generations bumped), are
            // visible to whoever pops it.
            match stack.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    fn pop_chain(&self) -> Option<(u32, u32)> {
        let stack = &self.cold.stack;
        let mut head = stack.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == 0 {
                return None;
            }
            // May read a link that a concurrent pop already reused; the tag
            // then differs and the CAS below fails.
            let next = self.cold.chains[top as usize - 1]
                .chain_next
                .load(Ordering::Relaxed);
            let new = (head >> 32).wrapping_add(1) << 32 | u64::from(next);
            match stack.compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let len = self.cold.chains[top as usize - 1]
                        .chain_len
                        .load(Ordering::Relaxed);
                    return Some((top - 1, len));
                }
                Err(h) => head = h,
            }
        }
    }

    #[inline]
    pub(crate) fn count_insert(&self, me: Option<usize>) {
        match me {
            Some(me) => bump(&self.shard(me).inserted),
            None => {
                self.cold.shared_inserted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    #[inline]
    pub(crate) fn count_retire(&self, me: Option<usize>) {
        match me {
            Some(me) => bump(&self.shard(me).retired),
            None => {
                self.cold.shared_retired.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The shards of every index a thread has held so far (the rest are
    /// untouched: their counts are zero and their caches empty).
    fn used_shards(&self) -> &[CachePadded<Shard>] {
        &self.shards[..thread_index::high().min(self.shards.len())]
    }

    /// Inserts ever made (exact when no thread is inserting).
    pub(crate) fn inserted(&self) -> u64 {
        self.used_shards()
            .iter()
            .fold(self.cold.shared_inserted.load(Ordering::Relaxed), |n, s| {
                n.wrapping_add(s.inserted.load(Ordering::Relaxed))
            })
    }

    /// Inserted minus retired over all threads; exact when no thread is
    /// inside the slab, never negative.
    pub(crate) fn live(&self) -> u64 {
        let mut sum = self
            .cold
            .shared_inserted
            .load(Ordering::Relaxed)
            .wrapping_sub(self.cold.shared_retired.load(Ordering::Relaxed));
        for s in self.used_shards() {
            sum = sum
                .wrapping_add(s.inserted.load(Ordering::Relaxed))
                .wrapping_sub(s.retired.load(Ordering::Relaxed));
        }
        (sum as i64).max(0) as u64
    }

    /// Free slots sitting in per-thread caches (a snapshot).
    pub(crate) fn cached(&self) -> u64 {
        self.used_shards()
            .iter()
            .map(|s| u64::from(s.len.load(Ordering::Relaxed)))
            .sum()
    }

    /// Most free slots one thread caches.
    pub(crate) fn cache(&self) -> u32 {
        self.cache
    }

    /// Takes and gives back slots on their own, for the loom models.
    #[cfg(all(test, evring_loom))]
    pub(crate) fn pop_chain_for_test(&self) -> Option<(u32, u32)> {
        self.pop_chain()
    }

    #[cfg(all(test, evring_loom))]
    pub(crate) fn push_chain_for_test(&self, first: u32, len: u32) {
        self.push_chain(first, len)
    }
}

/// Adds one to a counter only this thread writes: a load and a store, no
/// read-modify-write.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}
