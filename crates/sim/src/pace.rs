//! Pacing: the simulated threads issue `startEvent` calls at a set rate instead
//! of as fast as they can, so a run shows what a plugin does at (a multiple of)
//! NCCL's real event rates, not how far a writer falls behind a synthetic flood.
//!
//! The rate's default comes from real NCCL (docs/sim.md, "Pace"). Threads check
//! the schedule only when they publish progress (every few hundred starts), and
//! sleep there when ahead: no clock read or syscall per event. A thread that fell
//! behind (descheduled) catches up by at most [`CATCH_UP`] worth of starts at
//! full speed; older debt is forgiven, so a stall never turns into a flood.
//!
//! A paced thread also lowers its own scheduling priority (nice +10) the first
//! time it waits: on a small machine the simulated NCCL threads would otherwise
//! take CPU time from the plugin's own threads (its writer) that a real job's
//! NCCL threads, on other cores and mostly waiting for the GPU, do not take.
//! Under contention the simulator then falls behind its pace (issues fewer
//! events), never the plugin behind the simulator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most a run may be behind its schedule and still catch up at full speed.
pub const CATCH_UP: Duration = Duration::from_millis(2);

/// A run's schedule: start number `n` is due at `origin + n / rate`.
#[derive(Debug)]
pub struct Pace {
    base: Instant,
    /// Nanoseconds after `base` at which start 0 was due (moves forward when a
    /// stall's debt is forgiven).
    origin_ns: AtomicU64,
    ns_per_start: f64,
}

impl Pace {
    /// A schedule of `per_sec` starts per second from now; `None` for 0 (unpaced).
    pub fn new(per_sec: u64) -> Option<Pace> {
        (per_sec > 0).then(|| Pace {
            base: Instant::now(),
            origin_ns: AtomicU64::new(0),
            ns_per_start: 1e9 / per_sec as f64,
        })
    }

    /// Called with the run's total starts so far: sleeps until they are due.
    pub fn wait(&self, starts: u64) {
        yield_priority();
        let origin = self.origin_ns.load(Ordering::Relaxed);
        let due = origin + (starts as f64 * self.ns_per_start) as u64;
        let now = self.base.elapsed().as_nanos() as u64;
        let window = CATCH_UP.as_nanos() as u64;
        if due > now {
            std::thread::sleep(Duration::from_nanos(due - now));
        } else if now - due > window {
            // Forgive what is older than the catch-up window (any thread may;
            // the latest origin wins).
            self.origin_ns
                .fetch_max(origin + (now - due - window), Ordering::Relaxed);
        }
    }
}

thread_local! {
    static YIELDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Nice +10 for the calling thread, once (Linux: per thread).
fn yield_priority() {
    if YIELDED.with(|y| y.replace(true)) {
        return;
    }
    // SAFETY: gettid and setpriority take plain integers and touch no memory
    // of ours; a failure (e.g. not permitted) leaves the priority as it was.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_unpaced() {
        assert!(Pace::new(0).is_none());
    }

    #[test]
    fn a_paced_thread_yields_priority_and_others_keep_theirs() {
        let nice = || {
            // SAFETY: as in yield_priority.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        };
        let before = nice();
        let p = Pace::new(1_000_000).unwrap();
        let paced = std::thread::spawn(move || {
            p.wait(0);
            nice()
        })
        .join()
        .unwrap();
        assert_eq!(paced, before + 10);
        assert_eq!(nice(), before, "only the paced thread");
    }

    #[test]
    fn holds_starts_to_the_rate() {
        // 20 000 starts at 100 000/s: due over 200 ms.
        let p = Pace::new(100_000).unwrap();
        let t = Instant::now();
        for n in (0..=20_000).step_by(250) {
            p.wait(n);
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(195), "{took:?}");
    }

    #[test]
    fn a_stall_is_forgiven_beyond_the_catch_up_window() {
        let p = Pace::new(1_000_000).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // 50 ms behind: start 0 catches up, and the schedule moves on so that
        // the next 50 000 starts are not all due at once.
        p.wait(0);
        let origin = p.origin_ns.load(Ordering::Relaxed);
        assert!(origin >= 45_000_000, "{origin}");
        let t = Instant::now();
        p.wait(10_000); // 10 ms of starts: at most the catch-up window is free
        assert!(t.elapsed() >= Duration::from_millis(5), "{:?}", t.elapsed());
    }
}
