//! Everything the plugin keeps per calling thread, in one thread-local.
//!
//! In a library loaded with `dlopen` every thread-local access is a call to
//! `__tls_get_addr`. Each entry point looks the block up once ([`with`]) and
//! passes it down (context cache, pressure countdown, string memo); the
//! block also leads to the ring crate's thread index (`evring::ThreadCache`:
//! the thread's lane and slab cache), so an entry point makes exactly one
//! such call. The block needs no destructor, so reaching it is
//! `__tls_get_addr` and nothing more: no "destructor registered yet?" check
//! on every call. `None` ("no thread-local storage", every user then
//! takes its uncached path) is kept for callers, though such a block is
//! always reachable.

use crate::strings::Memo;
use evring::{Me, ThreadCache};
use std::cell::Cell;

/// The fields every call reads first, on one cache line (the block is
/// line-aligned); the string memo (starts with strings only) after them.
#[repr(C, align(64))]
pub struct Local {
    /// The way to the ring crate's thread index, so that reaching it costs
    /// no thread-local access of its own ([`thread`]).
    pub thread: ThreadCache,
    /// (context ID, finalize epoch) of the last context this thread found
    /// live (`engine.rs`, `ctx_cache`).
    pub ctx: Cell<(u64, u64)>,
    /// Starts until this thread next checks the slab's high-water mark.
    pub pressure: Cell<u32>,
    /// The last descriptors' strings this thread read, per kind, and its
    /// re-read countdown (`strings.rs`).
    pub strings: Memo,
}

// No destructor: see the module comment.
const _: () = assert!(!std::mem::needs_drop::<Local>());

thread_local! {
    static LOCAL: Local = const {
        Local {
            thread: ThreadCache::new(),
            ctx: Cell::new((0, u64::MAX)),
            pressure: Cell::new(0),
            strings: Memo::new(),
        }
    };
}

/// What an entry point looked up about its calling thread, passed down to
/// everything it calls.
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    /// This thread's block (`None` while thread-local storage is torn down).
    pub l: Option<&'a Local>,
    /// This thread's index in the slab, counters and ring.
    pub me: Me<'a>,
}

/// Runs `f` with the calling thread's [`Cx`]: one thread-local access (this
/// crate's block, which also leads to the ring crate's thread index),
/// whatever `f` does.
#[inline(always)]
pub fn with<R>(f: impl for<'a> FnOnce(Cx<'a>) -> R) -> R {
    with_local(|l| thread(l, |me| f(Cx { l, me })))
}

/// Runs `f` with the ring crate's thread index, reached through `l` (no
/// thread-local access) or, without a block, looked up.
#[inline(always)]
pub fn thread<R>(l: Option<&Local>, f: impl for<'a> FnOnce(Me<'a>) -> R) -> R {
    match l {
        Some(l) => l.thread.with(f),
        None => evring::with_thread(f),
    }
}

/// Runs `f` with this thread's block only (one thread-local access), for
/// calls that need the ring crate's thread index only on some paths
/// ([`Cx::of`] then).
#[inline(always)]
pub fn with_local<R>(f: impl FnOnce(Option<&Local>) -> R) -> R {
    let mut f = Some(f);
    // `try_with` runs the closure exactly when it returns `Ok`: `f` is taken
    // once, on one of the two paths.
    if let Ok(Some(r)) = LOCAL.try_with(|l| f.take().map(|f| f(Some(l)))) {
        return r;
    }
    match f.take() {
        Some(f) => f(None),
        None => unreachable!("local::with_local: closure consumed without a result"),
    }
}
