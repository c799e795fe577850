//! One host clock for every timestamp, and the GPU-to-host offset estimate.
//!
//! Host times are CLOCK_MONOTONIC nanoseconds, read as TSC ticks through
//! `quanta` (calibrated once against CLOCK_MONOTONIC, so files written by
//! different processes on one host share a time base). GPU times
//! (`pTimer`, the GPU's globaltimer) are mapped with an offset estimated from
//! observations: when the proxy thread reports a GPU timestamp, the host clock
//! already reads later than that instant, so each `host_now - gpu_ts` is an
//! upper bound of the true offset and the smallest one seen is the best
//! estimate.

use std::sync::atomic::{AtomicI64, Ordering};

/// CLOCK_MONOTONIC from the OS (the reference the TSC is mapped onto).
pub fn monotonic_ns() -> u64 {
    os_clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread (benches that must hold on a loaded machine).
pub fn thread_cpu_ns() -> u64 {
    os_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn os_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into our local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Base {
    clock: quanta::Clock,
    raw0: u64,
    mono0: u64,
}

static BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();

/// Host time in CLOCK_MONOTONIC nanoseconds.
#[inline]
pub fn now_ns() -> u64 {
    let b = BASE.get_or_init(|| {
        let clock = quanta::Clock::new();
        let raw0 = clock.raw();
        Base {
            clock,
            raw0,
            mono0: monotonic_ns(),
        }
    });
    b.mono0 + b.clock.delta_as_nanos(b.raw0, b.clock.raw())
}

/// Smallest observed `host - gpu` difference (i64::MAX = none yet).
static GPU_OFFSET: AtomicI64 = AtomicI64::new(i64::MAX);

/// Feeds one observation: a GPU timestamp that is already in the past at `host_ns`.
#[inline]
pub fn observe_gpu(gpu_ns: u64, host_ns: u64) {
    if gpu_ns == 0 {
        return;
    }
    let diff = host_ns as i64 - gpu_ns as i64;
    GPU_OFFSET.fetch_min(diff, Ordering::Relaxed);
}

/// Maps a GPU timestamp to the host clock, if any observation exists.
#[inline]
pub fn gpu_to_host(gpu_ns: u64) -> Option<u64> {
    let off = GPU_OFFSET.load(Ordering::Relaxed);
    (gpu_ns != 0 && off != i64::MAX).then(|| (gpu_ns as i64).wrapping_add(off).max(0) as u64)
}

/// The current estimate, for trace metadata.
pub fn gpu_offset() -> Option<i64> {
    let off = GPU_OFFSET.load(Ordering::Relaxed);
    (off != i64::MAX).then_some(off)
}

#[cfg(test)]
pub fn reset_gpu_offset() {
    GPU_OFFSET.store(i64::MAX, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_difference_wins() {
        reset_gpu_offset();
        assert_eq!(gpu_to_host(5), None);
        observe_gpu(1_000, 1_500);
        observe_gpu(2_000, 2_100);
        observe_gpu(3_000, 9_000);
        assert_eq!(gpu_offset(), Some(100));
        assert_eq!(gpu_to_host(10_000), Some(10_100));
        let (a, m, b) = (now_ns(), monotonic_ns(), now_ns());
        assert!(a <= b);
        assert!(
            m.abs_diff(a) < 5_000_000,
            "TSC clock tracks CLOCK_MONOTONIC"
        );
    }
}
