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
    /// Nanoseconds per 2^[`SHIFT`] raw ticks (quanta's calibration, taken
    /// once: the hot path multiplies and shifts instead of asking quanta).
    scale: u64,
    /// quanta reads the TSC: read it inline (no call, no match on quanta's
    /// clock kind).
    tsc: bool,
}

/// Fixed point of [`Base::scale`]: 2^-40 of a nanosecond per tick, far finer
/// than quanta's own calibration.
const SHIFT: u32 = 40;

static BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();

impl Base {
    fn new() -> Base {
        let clock = quanta::Clock::new();
        // A clock that is not the TSC (quanta's CLOCK_MONOTONIC fallback)
        // ticks in nanoseconds: exactly 2^SHIFT per 2^SHIFT ticks.
        let scale = clock.delta_as_nanos(0, 1 << SHIFT);
        let tsc = scale != 1 << SHIFT && reads_tsc(&clock);
        let raw0 = clock.raw();
        Base {
            clock,
            raw0,
            mono0: monotonic_ns(),
            scale,
            tsc,
        }
    }

    #[inline(always)]
    fn raw(&self) -> u64 {
        if self.tsc {
            rdtsc()
        } else {
            self.clock.raw()
        }
    }

    /// quanta's `delta_as_nanos(raw0, raw)`, from the calibration taken once
    /// (0 for a reading before `raw0`, as quanta).
    #[inline(always)]
    fn ns_since_start(&self, raw: u64) -> u64 {
        let ticks = raw.saturating_sub(self.raw0);
        ((u128::from(ticks) * u128::from(self.scale)) >> SHIFT) as u64
    }
}

/// Does `clock` read the TSC as [`rdtsc`] does? (quanta's counter source on
/// x86_64: a reading of ours falls between two of quanta's.)
fn reads_tsc(clock: &quanta::Clock) -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    (0..3).any(|_| {
        let a = clock.raw();
        let t = rdtsc();
        let b = clock.raw();
        a <= t && t <= b && b - a < 1 << 20
    })
}

/// The TSC (0 on other architectures).
#[inline(always)]
pub(crate) fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC exists on every x86_64 CPU and touches no memory.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    return 0;
}

/// Host time in CLOCK_MONOTONIC nanoseconds.
///
/// Where the counter is the TSC, the calibration is read from the one line
/// of process-wide values every call reads anyway (`hotline.rs`): a call
/// pays the RDTSC and no line of its own. Otherwise (and on the very first
/// read, which calibrates) through quanta.
#[inline]
pub fn now_ns() -> u64 {
    let l = crate::hotline::line();
    if l.tsc.load(Ordering::Acquire) {
        let ticks = rdtsc().saturating_sub(l.raw0.load(Ordering::Relaxed));
        let ns = (u128::from(ticks) * u128::from(l.scale.load(Ordering::Relaxed))) >> SHIFT;
        return l.mono0.load(Ordering::Relaxed) + ns as u64;
    }
    now_slow()
}

/// [`now_ns`] before the TSC calibration is published, or without a TSC:
/// calibrates on first use and publishes the calibration when the counter
/// is the TSC (every publisher writes the same values: benign). Not
/// `#[cold]`: where the counter is not the TSC every read comes here.
#[inline(never)]
fn now_slow() -> u64 {
    let b = BASE.get_or_init(Base::new);
    if b.tsc {
        let l = crate::hotline::line();
        l.raw0.store(b.raw0, Ordering::Relaxed);
        l.mono0.store(b.mono0, Ordering::Relaxed);
        l.scale.store(b.scale, Ordering::Relaxed);
        l.tsc.store(true, Ordering::Release);
    }
    b.mono0 + b.ns_since_start(b.raw())
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

    #[test]
    fn fixed_point_matches_quanta_and_reads_its_counter() {
        let b = Base::new();
        for d in [0u64, 1, 999, 1 << 20, 1 << 32, 1 << 40, 1 << 50, 1 << 56] {
            let raw = b.raw0 + d;
            let q = b.clock.delta_as_nanos(b.raw0, raw);
            let ours = b.ns_since_start(raw);
            assert!(
                q.abs_diff(ours) <= 1 + (d >> SHIFT),
                "{d} ticks: quanta {q} ns, ours {ours} ns"
            );
        }
        assert_eq!(b.ns_since_start(b.raw0 - 1), 0, "before the start: 0");
        // The inline read is quanta's counter (TSC or not), not another clock.
        let ok = (0..100).any(|_| {
            let (x, r, y) = (b.clock.raw(), b.raw(), b.clock.raw());
            x <= r && r <= y
        });
        assert!(ok, "tsc {}: our reading is not between quanta's", b.tsc);
        if cfg!(target_arch = "x86_64") && b.scale != 1 << SHIFT {
            assert!(b.tsc, "quanta calibrated a counter: it is the TSC");
        }
    }
}
