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
//!   destructor that gives the index back, before giving it back (Release).
//!   A later thread can reuse an exited thread's thread pointer (glibc
//!   recycles stacks and their TCBs) only after that exit, so it finds the
//!   way empty (Acquire), never the index another thread may hold by then.
//! * A thread that finds its set full, or runs on another architecture, or
//!   under loom, uses the thread-local index alone: slower, same answers.
//! * In a forked child only the forking thread exists: [`forget_others`]
//!   empties the other threads' ways, so a thread of the child that reuses
//!   one of their thread pointers claims an index of its own (their indices
//!   stay held, as they did before this table: their shards may have been
//!   left half-written by the fork).

use core::sync::atomic::{AtomicUsize, Ordering};

/// Ways per set: one 64-byte line of four pointers and four indices.
const WAYS: usize = 4;
/// Sets: 512 ways for at most `MAX_THREADS` (256) registered threads.
const SETS: usize = 128;

#[repr(C, align(64))]
struct Set {
    /// Thread pointer of the way's thread (0: empty).
    tp: [AtomicUsize; WAYS],
    /// That thread's index.
    index: [AtomicUsize; WAYS],
}

static TABLE: [Set; SETS] = [const {
    Set {
        tp: [const { AtomicUsize::new(0) }; WAYS],
        index: [const { AtomicUsize::new(0) }; WAYS],
    }
}; SETS];

/// The calling thread's thread pointer (never 0).
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

/// The set `tp` falls in: a multiplicative hash (thread pointers are spaced
/// by stack sizes, a power of two apart, so their low bits say little).
#[inline(always)]
fn set_of(tp: usize) -> &'static Set {
    let h = (tp as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SETS.trailing_zeros());
    &crate::direct_static!(TABLE)[h as usize]
}

/// The index the calling thread registered, if it did.
#[inline(always)]
pub(crate) fn lookup() -> Option<usize> {
    let tp = tp();
    let set = set_of(tp);
    for w in 0..WAYS {
        // Acquire: pairs with `unregister`'s Release, so a thread reusing an
        // exited thread's pointer sees its way emptied.
        if set.tp[w].load(Ordering::Acquire) == tp {
            return Some(set.index[w].load(Ordering::Relaxed));
        }
    }
    None
}

/// Registers `index` as the calling thread's (just claimed). A full set
/// leaves the thread to the thread-local path.
pub(crate) fn register(index: usize) {
    let tp = tp();
    let set = set_of(tp);
    for w in 0..WAYS {
        if set.tp[w]
            .compare_exchange(0, tp, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            // Read only by this thread (it alone matches `tp`), after this.
            set.index[w].store(index, Ordering::Relaxed);
            return;
        }
    }
}

/// Empties the calling thread's way, before its index is given back.
pub(crate) fn unregister() {
    let tp = tp();
    let set = set_of(tp);
    for w in 0..WAYS {
        if set.tp[w].load(Ordering::Relaxed) == tp {
            set.tp[w].store(0, Ordering::Release);
        }
    }
}

/// In a forked child: empties every way but the calling thread's (see the
/// module comment). Async-signal-safe: atomic loads and stores only.
pub(crate) fn forget_others() {
    let me = tp();
    for set in crate::direct_static!(TABLE) {
        for w in 0..WAYS {
            let tp = set.tp[w].load(Ordering::Relaxed);
            if tp != 0 && tp != me {
                set.tp[w].store(0, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
pub(crate) fn current_tp() -> usize {
    tp()
}
