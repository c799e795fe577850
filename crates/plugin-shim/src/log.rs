//! Messages to NCCL's logger (the function NCCL passes to init, v4 and later).

use crate::abi::{LOG_INFO, LOG_WARN, NCCL_INIT, NCCL_PROFILE};
use crate::engine::Engine;
use std::ffi::{c_char, c_int, c_ulong, CString};

pub type LogFn = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);

fn emit(engine: &Engine, level: c_int, msg: &str) {
    let Some(f) = engine.logger() else {
        if level == LOG_WARN {
            eprintln!("evring WARN {msg}");
        }
        return;
    };
    let Ok(text) = CString::new(msg.replace('\0', " ")) else {
        return;
    };
    // SAFETY: NCCL's logger is printf-style; passing "%s" with one C string
    // argument keeps our text from being read as a format.
    unsafe {
        f(
            level,
            NCCL_INIT | NCCL_PROFILE,
            c"evring".as_ptr(),
            line!() as c_int,
            c"%s".as_ptr(),
            text.as_ptr(),
        )
    };
}

pub fn warn(engine: &Engine, msg: &str) {
    emit(engine, LOG_WARN, &format!("evring: {msg}"));
}

/// A warning the user must see even without `NCCL_DEBUG`: through NCCL's
/// logger and, the first time in this process, on stderr as well (NCCL's
/// logger prints nothing unless `NCCL_DEBUG` is set).
pub fn warn_loud(engine: &Engine, msg: &str) {
    static ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    warn(engine, msg);
    if engine.logger().is_some() && !ONCE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("evring WARN evring: {msg}");
    }
}

pub fn info(engine: &Engine, msg: &str) {
    emit(engine, LOG_INFO, &format!("evring: {msg}"));
}

/// The counters line logged at each finalize.
pub fn summary(engine: &Engine, ctx: u64) {
    let s = engine.stats();
    let body: Vec<String> = s
        .fields()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    info(
        engine,
        &format!("finalize ctx {ctx:#x}: {}", body.join(" ")),
    );
}
