//! Everything the plugin keeps per calling thread, found without a
//! thread-local access.
//!
//! In a library loaded with `dlopen` every thread-local access is a call to
//! `__tls_get_addr`: a chain of dependent loads (the module's GOT entry, the
//! thread's DTV, the TLS generation) that a call made after a pause pays as
//! one cache miss after another. So the ring crate finds the calling thread's
//! index through the thread pointer (a register; `evring`'s `tp_table.rs`),
//! and the plugin keeps its per-thread block in a table indexed by that
//! index ([`BLOCKS`]): an entry point reaches both in two lines, with no
//! thread-local access.
//!
//! A thread without an index (more threads than indices, or inside its
//! thread-local destructors after giving its index back) uses a block in
//! thread-local storage instead ([`with`]'s fallback): slower, same
//! behaviour. A block needs no destructor either way.
//!
//! A block passes, with its index, from an exited thread to the next thread
//! that claims the index: what it holds is valid for any thread (the last
//! context found live with the finalize epoch it was checked under, a
//! countdown, string pointers and their process-wide symbols).

use crate::strings::Memo;
use evring::{Me, MAX_THREADS};
use std::cell::Cell;

/// The fields every call reads first, on one cache line (the block is
/// line-aligned); the string memo (starts with strings only) after them.
#[repr(C, align(64))]
pub struct Local {
    /// (context ID, finalize epoch) of the last context this thread found
    /// live (`hot.rs`, `ctx_cache`).
    pub ctx: Cell<(u64, u64)>,
    /// Starts until this thread next checks the slab's high-water mark.
    pub pressure: Cell<u32>,
    /// The last descriptors' strings this thread read, per kind, and its
    /// re-read countdown (`strings.rs`).
    pub strings: Memo,
}

// No destructor: see the module comment.
const _: () = assert!(!std::mem::needs_drop::<Local>());

impl Local {
    /// All zero bytes, so that [`BLOCKS`] takes no room in the library
    /// file (epoch 0 is no engine's: `ctx_cache::first_epoch`).
    const fn new() -> Local {
        Local {
            ctx: Cell::new((0, 0)),
            pressure: Cell::new(0),
            strings: Memo::new(),
        }
    }
}

/// One block per thread index.
struct Blocks([Local; MAX_THREADS]);

// SAFETY: block `i` is reached only through a `Me` naming index `i` ([`with`]),
// which only the thread holding that index can have (a `Me` is neither `Send`
// nor `Sync` and never outlives the call it was made for); so each block is
// used by one thread at a time, and handed from one holder to the next with
// the index (Release at give-back, Acquire at claim). Its cells are never
// shared between threads at the same time.
unsafe impl Sync for Blocks {}

static BLOCKS: Blocks = Blocks([const { Local::new() }; MAX_THREADS]);

/// Maps the blocks' pages now (see `Engine::new`).
pub(crate) fn populate() {
    evring::populate(&BLOCKS);
}

thread_local! {
    /// The block of a thread without an index.
    static LOCAL: Local = const { Local::new() };
}

/// What an entry point looked up about its calling thread, passed down to
/// everything it calls.
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    /// This thread's block (`None` while thread-local storage is torn down
    /// on a thread without an index).
    pub l: Option<&'a Local>,
    /// This thread's index in the slab, counters and ring.
    pub me: Me<'a>,
}

/// Runs `f` with the calling thread's [`Cx`]: its index through the thread
/// pointer and its block by index; a thread-local access only for a thread
/// without an index.
#[inline(always)]
pub fn with<R>(f: impl for<'a> FnOnce(Cx<'a>) -> R) -> R {
    evring::with_thread(|me| match me.index() {
        Some(i) => f(Cx {
            l: Some(&evring::direct_static!(BLOCKS).0[i]),
            me,
        }),
        None => without_index(me, f),
    })
}

/// [`with`] for a thread that holds no index: its block in thread-local
/// storage.
#[inline(never)]
fn without_index<R>(me: Me<'_>, f: impl for<'a> FnOnce(Cx<'a>) -> R) -> R {
    let mut f = Some(f);
    // `try_with` runs the closure exactly when it returns `Ok`: `f` is taken
    // once, on one of the two paths.
    if let Ok(Some(r)) = LOCAL.try_with(|l| f.take().map(|f| f(Cx { l: Some(l), me }))) {
        return r;
    }
    match f.take() {
        Some(f) => f(Cx { l: None, me }),
        None => unreachable!("local::without_index: closure consumed without a result"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_with_an_index_get_its_block_and_distinct_blocks() {
        let addr = || with(|cx| (cx.me.index(), cx.l.map(|l| l as *const Local as usize)));
        let (mine, block) = addr();
        let i = mine.expect("an index is free");
        assert_eq!(block, Some(&BLOCKS.0[i] as *const Local as usize));
        assert_eq!(addr(), (mine, block), "a thread's block changed");
        let theirs = std::thread::scope(|s| s.spawn(addr).join().unwrap());
        assert_ne!(theirs.0, mine);
        assert_ne!(theirs.1, block, "two live threads shared a block");
    }
}
