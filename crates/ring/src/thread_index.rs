//! A small, dense, process-wide index per live thread.
//!
//! Each slab keeps one shard of per-thread state (free-slot cache, insert and
//! retire counts) per index, so a thread touches only its own cache lines on
//! the fast path. Indices are claimed from a bitmap on a thread's first slab
//! call and given back when the thread exits, so a long-running process that
//! keeps spawning threads reuses them; the next owner of an index inherits the
//! shard's cached free slots and counts, which stay correct.
//!
//! A thread that finds every index taken, or calls in while its thread-local
//! storage is being torn down, gets `None` and takes the shared (slower) path.
//!
//! [`borrow_unheld`] lets a thread hold, for a moment, an index no thread
//! holds (its thread exited), the way a new thread would claim it: the slab's
//! steal path takes the free slots an exited thread left in its cache.

use crate::sync::{AtomicU64, AtomicUsize, Ordering};

#[cfg(not(evring_loom))]
mod statics {
    use super::*;

    /// Threads that can hold an index at once; more fall back to the shared path.
    pub const MAX_THREADS: usize = 256;

    static USED: [AtomicU64; MAX_THREADS / 64] = [const { AtomicU64::new(0) }; MAX_THREADS / 64];
    /// One past the highest index ever handed out: sums stop there.
    static HIGH: AtomicUsize = AtomicUsize::new(0);

    pub(super) fn used() -> &'static [AtomicU64] {
        &USED
    }

    pub(super) fn high() -> &'static AtomicUsize {
        &HIGH
    }

    thread_local! {
        /// This thread's index: [`super::UNCLAIMED`] before its first call,
        /// [`super::NONE`] when it has none. Const-initialised and without a
        /// destructor, so reading it is a plain thread-local load (no lazy
        /// initialisation or destructor-state check on every call). Where
        /// the thread-pointer table knows the thread, that answers first.
        pub(super) static INDEX: core::cell::Cell<usize> =
            const { core::cell::Cell::new(super::UNCLAIMED) };
        /// Gives the index back when the thread exits. Touched once, when the
        /// index is claimed (that registers its destructor).
        pub(super) static GUARD: super::Guard = const { super::Guard };
    }
}

/// Under loom: statics are fresh in every model execution; four indices.
#[cfg(evring_loom)]
mod statics {
    use super::*;

    /// Threads that can hold an index at once (loom: four).
    pub const MAX_THREADS: usize = 4;

    /// Behind an `Arc` that each registration keeps a clone of: the main
    /// thread's registration is dropped after loom has torn down its lazy
    /// statics.
    pub(super) type Bitmap = loom::sync::Arc<[AtomicU64; 1]>;

    loom::lazy_static! {
        static ref USED: Bitmap = loom::sync::Arc::new([AtomicU64::new(0)]);
        static ref HIGH: AtomicUsize = AtomicUsize::new(0);
    }

    pub(super) fn used() -> &'static [AtomicU64] {
        &USED[..]
    }

    pub(super) fn bitmap() -> Bitmap {
        USED.clone()
    }

    pub(super) fn high() -> &'static AtomicUsize {
        &HIGH
    }

    loom::thread_local! {
        pub(super) static MINE: super::Registration = super::Registration::claim();
    }
}

pub use statics::MAX_THREADS;
#[cfg(evring_loom)]
use statics::MINE;

/// `INDEX` before the thread's first call.
#[cfg(not(evring_loom))]
const UNCLAIMED: usize = usize::MAX - 1;
/// `INDEX` of a thread without an index (all taken, or given back at exit).
#[cfg(not(evring_loom))]
const NONE: usize = usize::MAX;

/// Releases the thread's index from its thread-local destructor.
#[cfg(not(evring_loom))]
struct Guard;

#[cfg(not(evring_loom))]
impl Drop for Guard {
    fn drop(&mut self) {
        // From now on (later destructors of this thread) the thread has no
        // index and takes the shared path.
        // The thread-pointer way first: once the index is given back, no
        // way may lead to it.
        fast::unregister();
        let index = statics::INDEX.try_with(|c| c.replace(NONE)).unwrap_or(NONE);
        release_index(index);
    }
}

/// Bits of `MAX_THREADS` that exist in a bitmap word (all 64, or fewer
/// under loom).
const fn word_bits() -> u32 {
    if MAX_THREADS < 64 {
        MAX_THREADS as u32
    } else {
        64
    }
}

#[cfg(evring_loom)]
struct Registration {
    /// `usize::MAX`: none (every index taken, or given back).
    index: core::cell::Cell<usize>,
    /// The bitmap, kept alive for `drop` (see `statics`).
    #[cfg(evring_loom)]
    bitmap: statics::Bitmap,
}

#[cfg(evring_loom)]
impl Registration {
    fn claim() -> Self {
        let index = claim_index();
        Self {
            index: core::cell::Cell::new(index),
            bitmap: statics::bitmap(),
        }
    }
}

/// Claims the lowest free index (`usize::MAX`: none free).
fn claim_index() -> usize {
    let full = if word_bits() == 64 {
        u64::MAX
    } else {
        (1 << word_bits()) - 1
    };
    for (w, word) in statics::used().iter().enumerate() {
        let mut bits = word.load(Ordering::Relaxed);
        while bits != full {
            let bit = (!bits).trailing_zeros();
            // Acquire: the previous holder's writes to the shards of
            // this index (released below) are visible to us.
            let prev = word.fetch_or(1 << bit, Ordering::AcqRel);
            if prev & (1 << bit) == 0 {
                let index = w * 64 + bit as usize;
                statics::high().fetch_max(index + 1, Ordering::AcqRel);
                return index;
            }
            bits = prev | 1 << bit;
        }
    }
    usize::MAX
}

/// Gives `index` back to the bitmap (`usize::MAX`: nothing to give).
fn release_in(used: &[AtomicU64], index: usize) {
    if index < MAX_THREADS {
        // Release: hands this thread's shard writes to the next holder.
        used[index / 64].fetch_and(!(1 << (index % 64)), Ordering::Release);
    }
}

#[cfg(not(evring_loom))]
fn release_index(index: usize) {
    release_in(statics::used(), index);
}

#[cfg(evring_loom)]
impl Drop for Registration {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(evring_loom)]
impl Registration {
    /// Gives the index back (once).
    fn release(&self) {
        release_in(&self.bitmap[..], self.index.replace(usize::MAX));
    }
}

/// For loom models: what the thread-local destructor does when the calling
/// thread exits (loom runs thread-local destructors, but its join does not
/// order them before what the joining thread does next).
#[cfg(all(test, evring_loom))]
pub(crate) fn exit_for_test() {
    MINE.with(Registration::release)
}

/// This thread's index, or `None` (shared path).
#[cfg(evring_loom)]
#[inline(always)]
pub(crate) fn current() -> Option<usize> {
    MINE.try_with(|r| r.index.get())
        .ok()
        .filter(|&i| i != usize::MAX)
}

/// This thread's index, or `None` (shared path).
#[cfg(not(evring_loom))]
#[inline(always)]
pub(crate) fn current() -> Option<usize> {
    if let Some(index) = fast::lookup() {
        return Some(index);
    }
    from_tls()
}

/// The index from the thread-local cell: where the thread-pointer table
/// exists, only for threads it does not know (out of line, off the code
/// lines of every caller's hot path); elsewhere the only way.
#[cfg(not(evring_loom))]
#[cfg_attr(all(target_arch = "x86_64", target_os = "linux"), inline(never))]
#[cfg_attr(not(all(target_arch = "x86_64", target_os = "linux")), inline(always))]
fn from_tls() -> Option<usize> {
    // A const thread-local without a destructor: always accessible.
    from_cell(statics::INDEX.with(core::cell::Cell::get))
}

/// The thread-pointer table (`tp_table.rs`) where there is one; elsewhere
/// every lookup misses and the thread-local index answers.
#[cfg(not(evring_loom))]
mod fast {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    pub(super) use crate::tp_table::{forget_others, lookup, populate, register, unregister};

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    mod none {
        #[inline(always)]
        pub(crate) fn lookup() -> Option<usize> {
            None
        }
        pub(crate) fn register(_: usize) {}
        pub(crate) fn unregister() {}
        pub(crate) fn forget_others() {}
        pub(crate) fn populate() {}
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    pub(super) use none::{forget_others, lookup, populate, register, unregister};
}

/// In a forked child, from an atfork handler or before any other thread
/// starts: the threads that did not survive the fork no longer lead to
/// their indices (a thread of the child that reuses one of their stacks
/// claims an index of its own). Their indices stay held: what they left in
/// their shards may be half-written. Async-signal-safe.
pub fn after_fork_in_child() {
    #[cfg(not(evring_loom))]
    fast::forget_others();
}

/// Maps the process-wide thread-pointer table's pages now ([`crate::populate`]),
/// so that no thread's first call takes a page fault registering in it.
/// Best effort; nothing where there is no such table.
pub fn populate_thread_table() {
    #[cfg(not(evring_loom))]
    fast::populate();
}

/// The index an `INDEX` value stands for (claimed on the thread's first call).
#[cfg(not(evring_loom))]
#[inline(always)]
fn from_cell(value: usize) -> Option<usize> {
    match value {
        NONE => None,
        UNCLAIMED => claim_current(),
        index => Some(index),
    }
}

/// The thread's first call: claims an index and registers its release at
/// thread exit. A thread whose thread-locals are being torn down (the
/// guard's destructor can no longer be registered) keeps no index.
#[cfg(not(evring_loom))]
#[cold]
fn claim_current() -> Option<usize> {
    if statics::GUARD.try_with(|_| ()).is_err() {
        statics::INDEX.with(|c| c.set(NONE));
        return None;
    }
    let index = claim_index();
    statics::INDEX.with(|c| c.set(index));
    if index == usize::MAX {
        return None;
    }
    // After the guard above: the way goes before the index at exit.
    fast::register(index);
    Some(index)
}

/// The calling thread's index, read once for the duration of a call (see
/// [`with_thread`]). Functions taking a `Me` skip their own thread-local
/// lookup: in a library loaded with `dlopen` each one is a call to
/// `__tls_get_addr`, and one plugin event made about five.
///
/// A `Me` cannot leave the closure it was given to (its lifetime is the
/// closure's) nor the thread (it is neither `Send` nor `Sync`), so it always
/// names the index the calling thread holds: a thread gives its index back
/// only when it exits, never during such a call.
#[derive(Clone, Copy)]
pub struct Me<'a> {
    pub(crate) index: Option<usize>,
    _scope: core::marker::PhantomData<(&'a (), *const ())>,
}

impl Me<'_> {
    /// The index the calling thread holds (below [`MAX_THREADS`]), or `None`
    /// (it holds none: every index taken, or given back at exit). For a
    /// caller's own per-thread state kept in a table of its own by index:
    /// while the index is held, its entry is this thread's alone; the next
    /// holder inherits what is left there (the claim is Acquire, the
    /// give-back Release), as the crate's own shards do.
    #[inline(always)]
    pub fn index(&self) -> Option<usize> {
        self.index
    }
}

impl core::fmt::Debug for Me<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Me({:?})", self.index)
    }
}

/// Runs `f` with the calling thread's [`Me`] (one thread-local access).
///
/// ```
/// use evring::{with_thread, Counter, TaggedSlab};
/// let slab: TaggedSlab<u32> = TaggedSlab::new(256);
/// let calls = Counter::new();
/// let id = with_thread(|me| {
///     calls.incr_in(me);
///     let (id, r) = slab.insert_and_get_in(me, 7).unwrap();
///     r.release_in(me);
///     id
/// });
/// assert_eq!((calls.get(), slab.with(id, |v| *v)), (1, Ok(7)));
/// ```
///
/// The token cannot escape the closure:
///
/// ```compile_fail
/// let me = evring::with_thread(|me| me);
/// ```
///
/// nor cross to another thread:
///
/// ```compile_fail
/// evring::with_thread(|me| std::thread::scope(|s| {
///     s.spawn(move || drop(me));
/// }));
/// ```
#[inline(always)]
pub fn with_thread<R>(f: impl for<'a> FnOnce(Me<'a>) -> R) -> R {
    f(Me {
        index: current(),
        _scope: core::marker::PhantomData,
    })
}

/// A caller's cache of the way to its thread's index, kept in a thread-local
/// block of the caller's own: [`ThreadCache::with`] is [`with_thread`]
/// without a thread-local access of its own (in a library loaded with
/// `dlopen` each one is a `__tls_get_addr` call; a caller that reaches its own
/// block anyway saves one per call).
///
/// Where the thread-pointer table knows the thread (x86-64 Linux), that
/// answers first, as for [`with_thread`]; otherwise the cache remembers
/// where the calling thread's index lives (filled on first
/// use) and reads the index from there on every call, so it sees what
/// [`with_thread`] sees: the index claimed on the first call, and none once
/// the thread has given it back at exit. A `ThreadCache` is neither `Send`
/// nor `Sync` (it can be neither moved nor shared across threads), so the
/// thread that uses it is the thread that filled it.
///
/// ```
/// use evring::{Counter, ThreadCache};
/// thread_local! {
///     static MINE: ThreadCache = const { ThreadCache::new() };
/// }
/// let calls = Counter::new();
/// MINE.with(|t| t.with(|me| calls.incr_in(me)));
/// MINE.with(|t| t.with(|me| calls.incr_in(me)));
/// assert_eq!(calls.get(), 2);
/// ```
///
/// ```compile_fail
/// let cache = evring::ThreadCache::new();
/// std::thread::spawn(move || cache.with(|_| ()));
/// ```
pub struct ThreadCache {
    /// The calling thread's index cell once looked up (null before).
    #[cfg(not(evring_loom))]
    cell: core::cell::Cell<*const core::cell::Cell<usize>>,
    #[cfg(evring_loom)]
    _not_send: core::marker::PhantomData<*const ()>,
}

impl Default for ThreadCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadCache {
    /// An empty cache (filled by the first [`with`](Self::with)).
    pub const fn new() -> Self {
        ThreadCache {
            #[cfg(not(evring_loom))]
            cell: core::cell::Cell::new(core::ptr::null()),
            #[cfg(evring_loom)]
            _not_send: core::marker::PhantomData,
        }
    }

    /// Runs `f` with the calling thread's [`Me`], as [`with_thread`] does.
    #[inline(always)]
    pub fn with<R>(&self, f: impl for<'a> FnOnce(Me<'a>) -> R) -> R {
        f(Me {
            index: self.current(),
            _scope: core::marker::PhantomData,
        })
    }

    #[cfg(not(evring_loom))]
    #[inline(always)]
    fn current(&self) -> Option<usize> {
        if let Some(index) = fast::lookup() {
            return Some(index);
        }
        let p = self.cell.get();
        if p.is_null() {
            return self.fill();
        }
        // SAFETY: `p` was stored by `fill` on the thread that filled this
        // cache, which is the calling thread (a `ThreadCache` is neither
        // `Send` nor `Sync`), and points to that thread's `INDEX`: a
        // const-initialised thread-local without a destructor, whose storage
        // lives as long as the thread (past its thread-local destructors; a
        // forked child's thread has it at the same address). Only this
        // thread writes it, never during this read.
        from_cell(unsafe { (*p).get() })
    }

    /// First use on this thread: the index as [`current`] gives it (claimed
    /// if need be), and where it lives.
    #[cfg(not(evring_loom))]
    #[cold]
    #[inline(never)]
    fn fill(&self) -> Option<usize> {
        let index = current();
        statics::INDEX.with(|c| self.cell.set(c));
        index
    }

    #[cfg(evring_loom)]
    #[inline(always)]
    fn current(&self) -> Option<usize> {
        current()
    }
}

/// One past the highest index any thread has held.
#[inline]
pub(crate) fn high() -> usize {
    statics::high().load(Ordering::Acquire)
}

/// For each index below `limit` that no thread holds and for which
/// `wanted(index)` says so (a cheap hint, read without holding it): holds
/// the index as a new thread would (so no thread can claim it meanwhile),
/// runs `f(index)`, and gives the index back. Stops at the first `Some`.
///
/// While `f` runs the caller is the index's only holder: it may read and
/// write that index's shards like their owner, and what it leaves there is
/// handed to the index's next holder (Acquire on claim, Release on return,
/// as for a thread's own index). Never waits: an index another thread takes
/// first is skipped.
pub(crate) fn borrow_unheld<T>(
    limit: usize,
    wanted: impl Fn(usize) -> bool,
    mut f: impl FnMut(usize) -> Option<T>,
) -> Option<T> {
    let limit = limit.min(MAX_THREADS);
    for (w, word) in statics::used().iter().enumerate() {
        let first = w * 64;
        if first >= limit {
            break;
        }
        let bits = word.load(Ordering::Relaxed);
        for bit in 0..(limit - first).min(word_bits() as usize) {
            let mask = 1u64 << bit;
            if bits & mask != 0 || !wanted(first + bit) {
                continue;
            }
            // Acquire: the last holder's shard writes are visible to us.
            if word.fetch_or(mask, Ordering::AcqRel) & mask != 0 {
                continue;
            }
            let got = f(first + bit);
            // Release: what we did to the shards goes to the next holder.
            word.fetch_and(!mask, Ordering::Release);
            if got.is_some() {
                return got;
            }
        }
    }
    None
}

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::*;

    #[test]
    fn live_threads_hold_distinct_indices_and_exited_ones_are_reused() {
        let here = current().expect("an index is free");
        let (tx, rx) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let tx = tx.clone();
                let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
                let t = std::thread::spawn(move || {
                    tx.send(current()).unwrap();
                    go_rx.recv().unwrap();
                });
                (t, go_tx)
            })
            .collect();
        let mut seen: Vec<usize> = (0..8).map(|_| rx.recv().unwrap().unwrap()).collect();
        seen.push(here);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 9, "two live threads shared an index");
        assert!(seen.iter().all(|&i| i < high()));
        // A held index is never lent.
        let lent = borrow_unheld(high(), |i| seen.contains(&i), Some);
        assert_eq!(lent, None, "a live thread's index was lent");
        for (t, go) in threads {
            go.send(()).unwrap();
            t.join().unwrap();
        }
        // Sequential threads far beyond MAX_THREADS all get an index: exited
        // threads give theirs back.
        for _ in 0..(MAX_THREADS * 2) {
            let got = std::thread::spawn(current).join().unwrap();
            assert!(got.is_some(), "indices of exited threads are not reused");
        }
    }

    #[test]
    fn thread_cache_sees_what_with_thread_sees_from_first_use_to_thread_exit() {
        use std::cell::RefCell;
        use std::sync::mpsc::{channel, Sender};

        /// Reports, from a destructor that runs while the thread exits,
        /// what a fresh lookup and the cache each say then.
        struct Late {
            cache: ThreadCache,
            tx: Sender<(Option<usize>, Option<usize>)>,
        }
        impl Drop for Late {
            fn drop(&mut self) {
                let fresh = with_thread(|me| me.index);
                let cached = self.cache.with(|me| me.index);
                self.tx.send((fresh, cached)).unwrap();
            }
        }
        thread_local! {
            static LATE: RefCell<Option<Late>> = const { RefCell::new(None) };
        }

        for cache_first in [true, false] {
            let (tx, rx) = channel();
            let during = std::thread::spawn(move || {
                // Registered before the index's own guard: with glibc's
                // last-in-first-out order its destructor runs after the
                // index was given back.
                LATE.with(|l| {
                    *l.borrow_mut() = Some(Late {
                        cache: ThreadCache::new(),
                        tx,
                    })
                });
                LATE.with(|l| {
                    let l = l.borrow();
                    let cache = &l.as_ref().unwrap().cache;
                    // Either may claim the index first: both see the same.
                    let (a, b) = if cache_first {
                        let b = cache.with(|me| me.index);
                        (with_thread(|me| me.index), b)
                    } else {
                        let a = with_thread(|me| me.index);
                        (a, cache.with(|me| me.index))
                    };
                    assert!(a.is_some(), "an index is free");
                    assert_eq!(a, b);
                    a
                })
            })
            .join()
            .unwrap();
            let (fresh, cached) = rx.recv().unwrap();
            assert_eq!(
                cached, fresh,
                "at exit the cache must not keep an index the thread gave back"
            );
            // The index went back when the thread exited (glibc's order):
            // a cache that kept its copy would have read `during` here.
            assert_eq!(
                fresh, None,
                "index {during:?} still held in a late destructor"
            );
        }
    }

    /// Whether `index` is marked held in the bitmap.
    fn held(index: usize) -> bool {
        statics::used()[index / 64].load(Ordering::Acquire) & (1 << (index % 64)) != 0
    }

    #[test]
    fn a_thread_that_reuses_an_exited_threads_stack_holds_the_index_it_uses() {
        // Threads run one after the other reuse each other's stacks, and with
        // them the thread pointer the fast path is keyed by: each must find
        // the way of the one before it emptied and hold what it uses.
        let mut seen = std::collections::HashSet::new();
        let mut reused = 0;
        for _ in 0..200 {
            let (index, tp, is_held, again) = std::thread::spawn(|| {
                let index = current().expect("an index is free");
                (index, fast_tp(), held(index), current())
            })
            .join()
            .unwrap();
            assert!(is_held, "index {index} used but not held");
            assert_eq!(again, Some(index), "a thread's index changed");
            reused += usize::from(!seen.insert(tp));
        }
        if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            assert!(
                reused > 0,
                "no thread pointer was reused: the test saw nothing"
            );
        }
    }

    #[test]
    fn threads_that_come_and_go_at_once_never_share_an_index() {
        // Waves of threads that start and exit while others do, so stacks
        // (and thread pointers) are recycled while the table is in use: no
        // two live threads may ever use one index, and each holds its own.
        use std::sync::{Barrier, Mutex};
        let live = Mutex::new(std::collections::HashSet::new());
        for _ in 0..40 {
            let barrier = Barrier::new(12);
            std::thread::scope(|s| {
                for _ in 0..12 {
                    s.spawn(|| {
                        let index = current().expect("an index is free");
                        assert!(held(index), "index {index} used but not held");
                        assert!(live.lock().unwrap().insert(index), "index {index} shared");
                        barrier.wait();
                        assert_eq!(current(), Some(index));
                        live.lock().unwrap().remove(&index);
                    });
                }
            });
        }
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn fast_tp() -> usize {
        crate::tp_table::current_tp()
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    fn fast_tp() -> usize {
        0
    }

    #[test]
    fn a_lent_index_is_not_claimed_until_given_back() {
        // Find an unheld index and, while holding it, start a thread: it
        // must get another index.
        let other = borrow_unheld(
            high() + 1,
            |_| true,
            |i| Some((i, std::thread::spawn(current).join().unwrap())),
        );
        let (lent, theirs) = other.expect("some index is free");
        assert_ne!(Some(lent), theirs);
    }
}
