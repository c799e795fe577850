//! The calling thread's index found through its thread pointer, without a
//! thread-local access.
//!
//! In a library loaded with `dlopen`, reading a thread-local is a call to
//! `__tls_get_addr`: the GOT entry of the module's TLS index, the thread's
//! DTV and the global TLS generation, a chain of dependent loads that a call
//! made after a pause (NCCL's proxy thread, milliseconds between profiler
//! calls) pays as cache misses one after the other. The thread pointer is a
//! register (on x86-64 the TCB's first word, `fs:0`, is the pointer itself,
//! by the ABI), so a table keyed by it gives the index in one line: each
//! 64-byte set holds four (thread pointer, index) ways.
//!
//! Why it is exact:
//! * No two live threads share a thread pointer, and a way is only ever
//!   matched by the thread whose pointer it holds: a thread reads back what
//!   it wrote itself.
//! * A thread registers right after claiming its index and unregisters in the
//!   destructor that gives the index back, before giving it back. A later
//!   thread can reuse an exited thread's thread pointer (glibc recycles
//!   stacks and their TCBs) only after that exit, so it finds the way empty,
//!   never the index another thread may hold by then.
//! * A thread that finds its set full, or runs on another architecture, or
//!   under loom, uses the thread-local index alone: slower, same answers.
//! * Two threads of one set never share a way, and a way's new owner never
//!   reads its last owner's index: a way is taken with a compare-and-swap
//!   from empty (Acquire), which pairs with the Release of the unregister
//!   (or `forget_others`) that emptied it, so the last owner's index store
//!   comes before the new owner's. The loom model (`tests/loom_tp_table.rs`)
//!   runs three threads through one set at once; it fails when the swap is a
//!   load and a store, or when either side of the pair is Relaxed (a thread
//!   then reads back the way's previous index). A lookup is Relaxed: it only
//!   ever matches a pointer its own thread wrote, and a thread reusing an
//!   exited thread's pointer starts after that exit (glibc orders it), so it
//!   sees the way emptied; the model passes with it Relaxed, as it should.
//! * In a forked child only the forking thread exists: [`forget_others`]
//!   empties the other threads' ways, so a thread of the child that reuses
//!   one of their thread pointers claims an index of its own (their indices
//!   stay held, as they did before this table: their shards may have been
//!   left half-written by the fork).

use crate::sync::{AtomicUsize, Ordering};

/// Ways per set: one 64-byte line of four pointers and four indices (two
/// under loom, so that a model with three threads can fill a set).
#[cfg(not(evring_loom))]
const WAYS: usize = 4;
#[cfg(evring_loom)]
const WAYS: usize = 2;
/// Sets of the process's table: 512 ways for at most `MAX_THREADS` (256)
/// registered threads.
#[cfg(not(evring_loom))]
const SETS: usize = 128;

#[repr(C, align(64))]
struct Set {
    /// Thread pointer of the way's thread (0: empty).
    tp: [AtomicUsize; WAYS],
    /// That thread's index.
    index: [AtomicUsize; WAYS],
}

/// A table of `N` sets (a power of two). The process has one ([`lookup`],
/// [`register`], [`unregister`], [`forget_others`] with the calling thread's
/// pointer); the loom model (`tests/loom_tp_table.rs`) builds small ones and
/// passes thread pointers of its own.
pub(crate) struct Table<const N: usize> {
    sets: [Set; N],
}

#[cfg(not(evring_loom))]
static TABLE: Table<SETS> = Table {
    sets: [const {
        Set {
            tp: [const { AtomicUsize::new(0) }; WAYS],
            index: [const { AtomicUsize::new(0) }; WAYS],
        }
    }; SETS],
};

impl<const N: usize> Table<N> {
    /// An empty table (loom's atomics are not `const`).
    #[cfg(evring_loom)]
    pub(crate) fn new() -> Self {
        Table {
            sets: core::array::from_fn(|_| Set {
                tp: core::array::from_fn(|_| AtomicUsize::new(0)),
                index: core::array::from_fn(|_| AtomicUsize::new(0)),
            }),
        }
    }

    /// The set `tp` falls in: a multiplicative hash (thread pointers are
    /// spaced by stack sizes, a power of two apart, so their low bits say
    /// little).
    #[inline(always)]
    fn set_of(&self, tp: usize) -> &Set {
        const { assert!(N.is_power_of_two()) };
        let h = (tp as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // The top bits (`& 63`: a one-set table shifts by 0, not 64).
        let i = h >> ((64 - N.trailing_zeros()) & 63);
        &self.sets[i as usize % N]
    }

    /// The index registered for `tp`, if any: only the thread whose pointer
    /// `tp` is asks (see the module comment).
    #[inline(always)]
    pub(crate) fn lookup_for(&self, tp: usize) -> Option<usize> {
        let set = self.set_of(tp);
        for w in 0..WAYS {
            // Relaxed: see the module comment (only this thread's own
            // pointer matches; a reused pointer's thread starts after the
            // exit that emptied the way).
            if set.tp[w].load(Ordering::Relaxed) == tp {
                return Some(set.index[w].load(Ordering::Relaxed));
            }
        }
        None
    }

    /// Registers `index` (just claimed) for `tp`; returns false when the set
    /// is full (the thread then takes the thread-local path).
    pub(crate) fn register_for(&self, tp: usize, index: usize) -> bool {
        let set = self.set_of(tp);
        for w in 0..WAYS {
            // The compare-and-swap keeps two threads of one set out of one
            // way; Acquire pairs with the Release of the unregister that
            // emptied the way, so the last owner's index store comes before
            // ours in the index's modification order (else our lookup may
            // read the last owner's index: the loom model fails).
            if set.tp[w]
                .compare_exchange(0, tp, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // Read only by this thread (it alone matches `tp`), after this.
                set.index[w].store(index, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Empties `tp`'s way, before its index is given back.
    pub(crate) fn unregister_for(&self, tp: usize) {
        let set = self.set_of(tp);
        for w in 0..WAYS {
            if set.tp[w].load(Ordering::Relaxed) == tp {
                set.tp[w].store(0, Ordering::Release);
            }
        }
    }

    /// Empties every way but `me`'s (a forked child's one thread).
    /// Async-signal-safe: atomic loads and stores only.
    pub(crate) fn forget_others_of(&self, me: usize) {
        for set in &self.sets {
            for w in 0..WAYS {
                let tp = set.tp[w].load(Ordering::Relaxed);
                if tp != 0 && tp != me {
                    set.tp[w].store(0, Ordering::Release);
                }
            }
        }
    }
}

/// The calling thread's thread pointer (never 0).
#[cfg(not(evring_loom))]
#[inline(always)]
fn tp() -> usize {
    let tp: usize;
    // SAFETY: on x86-64 Linux `fs` addresses the thread's TCB, whose first
    // word is the TCB's own address (the psABI's TLS rules; glibc and musl
    // both keep it). A load of that word from the calling thread's own TCB:
    // no side effect, no stack use.
    unsafe {
        core::arch::asm!(
            "mov {}, qword ptr fs:[0]",
            out(reg) tp,
            options(nostack, readonly, preserves_flags, pure)
        );
    }
    tp
}

/// The index the calling thread registered, if it did.
#[cfg(not(evring_loom))]
#[inline(always)]
pub(crate) fn lookup() -> Option<usize> {
    crate::direct_static!(TABLE).lookup_for(tp())
}

/// Registers `index` as the calling thread's (just claimed). A full set
/// leaves the thread to the thread-local path.
#[cfg(not(evring_loom))]
pub(crate) fn register(index: usize) {
    crate::direct_static!(TABLE).register_for(tp(), index);
}

/// Empties the calling thread's way, before its index is given back.
#[cfg(not(evring_loom))]
pub(crate) fn unregister() {
    crate::direct_static!(TABLE).unregister_for(tp());
}

/// Maps the table's pages now (`thread_index::populate_thread_table`).
#[cfg(not(evring_loom))]
pub(crate) fn populate() {
    crate::populate(&TABLE);
}

/// In a forked child: empties every way but the calling thread's (see the
/// module comment). Async-signal-safe: atomic loads and stores only.
#[cfg(not(evring_loom))]
pub(crate) fn forget_others() {
    crate::direct_static!(TABLE).forget_others_of(tp());
}

#[cfg(all(test, not(evring_loom)))]
pub(crate) fn current_tp() -> usize {
    tp()
}
