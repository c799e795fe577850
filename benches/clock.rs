//! The clock both benches measure with (included by `#[path]`; not a bench).

use std::time::{Duration, Instant};

/// Wall time, or this thread's CPU time with `EVRING_BENCH_CLOCK=thread-cpu`
/// (for shared machines, where time spent preempted would swamp the figures).
pub fn now() -> Duration {
    static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *CPU.get_or_init(|| std::env::var("EVRING_BENCH_CLOCK").as_deref() == Ok("thread-cpu")) {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    } else {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        T0.get_or_init(Instant::now).elapsed()
    }
}
