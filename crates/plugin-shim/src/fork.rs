//! fork(): a child process never touches its parent's engine.
//!
//! At fork time other threads of the parent may be inside the plugin, holding
//! locks and owning buffered trace data; in the child those threads do not
//! exist. The `pthread_atfork` child handler therefore drops the child's
//! reference to the parent's engine (its memory is leaked, untouched) and the
//! caches that a half-finished write could have left inconsistent. Nothing
//! the child does afterwards can block on a parent's lock or write a parent's
//! file: its exit handler finds no engine, stale parent handles find none
//! either, and if it calls init it gets an engine, a writer thread and trace
//! files of its own (named with its pid).
//!
//! Only `fork()` runs atfork handlers; `vfork`/`posix_spawn` children exec at
//! once and a raw `clone` without them is not supported.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static REGISTER: Once = Once::new();
static CHILD: AtomicBool = AtomicBool::new(false);

/// Runs in the child right after fork, while it has a single thread. Only
/// stores to atomics: async-signal-safe, as POSIX requires of it.
extern "C" fn in_child() {
    CHILD.store(true, Ordering::Release);
    crate::engine::Engine::forget_after_fork();
    crate::strings::forget_after_fork();
    crate::recorder::forget_after_fork();
    // The parent's other threads no longer lead to their thread indices (a
    // thread of the child on one of their recycled stacks claims its own).
    evring::after_fork_in_child();
}

/// True in a process forked from the one that loaded the plugin.
pub fn is_child() -> bool {
    CHILD.load(Ordering::Acquire)
}

pub fn register() {
    REGISTER.call_once(|| {
        // SAFETY: `in_child` is an extern "C" fn with no arguments that only
        // stores to atomics; the library is `-z nodelete`, so it stays mapped.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}
