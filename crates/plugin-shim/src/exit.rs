//! Flushing at process exit, for jobs that never call finalize (PyTorch's
//! `destroy_process_group()` followed by exit was observed to do exactly that).
//!
//! In a forked child the engine pointer was cleared at fork (`fork.rs`): the
//! handler then finds no engine, or the child's own.
//!
//! The library is linked with `-z nodelete` (build.rs), so the handler's code
//! stays mapped even after NCCL dlcloses us.

use std::sync::Once;

static REGISTER: Once = Once::new();

extern "C" fn on_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(engine) = crate::engine::Engine::try_get() {
            engine.exit();
        }
    });
}

pub fn register() {
    REGISTER.call_once(|| {
        // SAFETY: `on_exit` is a plain extern "C" fn with no arguments that
        // never unwinds (it catches panics), as atexit requires.
        unsafe { libc::atexit(on_exit) };
    });
}
