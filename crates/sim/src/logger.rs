//! The logger NCCL passes to every `init` (v4 and later). NCCL never passes NULL, so
//! neither does the simulator: plugins may call it unconditionally. Messages are
//! counted per level; WARN messages are kept (the first few) for the run's notes.

use std::ffi::{c_char, c_int, c_ulong, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use evring_abi::Logger;

extern "C" {
    fn evring_sim_set_log_sink(
        sink: extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char),
    );
    fn evring_sim_nccl_logger(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    );
}

/// NCCL's WARN level (`NCCL_LOG_WARN`).
const WARN: c_int = 2;
/// WARN messages kept for the report.
const KEEP: usize = 3;

static WARNINGS: AtomicU64 = AtomicU64::new(0);
static OTHERS: AtomicU64 = AtomicU64::new(0);
static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());

extern "C" fn sink(
    level: c_int,
    _flags: c_ulong,
    _file: *const c_char,
    _line: c_int,
    msg: *const c_char,
) {
    if level != WARN {
        OTHERS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    WARNINGS.fetch_add(1, Ordering::Relaxed);
    if msg.is_null() {
        return;
    }
    // SAFETY: logger.c passes its NUL-terminated, formatted buffer.
    let text = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() < KEEP {
        kept.push(text);
    }
}

/// The logger to pass to `init`.
pub fn nccl_logger() -> Logger {
    static SINK: Once = Once::new();
    // SAFETY: `sink` matches the C sink type and lives for the whole program.
    SINK.call_once(|| unsafe { evring_sim_set_log_sink(sink) });
    Some(evring_sim_nccl_logger)
}

/// What plugins logged so far in this process: WARN count, other count, first WARNs.
pub fn logged() -> (u64, u64, Vec<String>) {
    (
        WARNINGS.load(Ordering::Relaxed),
        OTHERS.load(Ordering::Relaxed),
        KEPT.lock().unwrap_or_else(|p| p.into_inner()).clone(),
    )
}

/// Adds a note to `o` if plugins logged WARN messages since the count was
/// `before` (the first few messages are quoted).
pub fn note_warnings(o: &mut crate::report::Outcome, before: u64) {
    let (warnings, _, kept) = logged();
    if warnings > before {
        o.notes.push(format!(
            "{}: the plugin logged {} WARN message(s) through NCCL's logger, e.g. {:?}",
            o.name,
            warnings - before,
            kept.first().map(String::as_str).unwrap_or("")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_counts_warnings() {
        let log = nccl_logger().unwrap();
        let before = logged().0;
        // SAFETY: a printf format with one matching string argument.
        unsafe {
            log(
                WARN,
                0,
                c"test.c".as_ptr(),
                1,
                c"plugin says %s %d".as_ptr(),
                c"hello".as_ptr(),
                7,
            )
        };
        let (w, _, kept) = logged();
        assert!(w > before);
        assert!(kept.iter().any(|k| k == "plugin says hello 7"), "{kept:?}");
    }
}
