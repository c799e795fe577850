//! The meter's clock: the TSC on x86_64 (two `rdtsc` per forwarded call), converted to
//! nanoseconds with a factor calibrated once against `CLOCK_MONOTONIC` at the first init;
//! `CLOCK_MONOTONIC` itself elsewhere.

use std::sync::OnceLock;

/// Nanoseconds per tick in 32.32 fixed point.
static MULT: OnceLock<u64> = OnceLock::new();

/// `CLOCK_MONOTONIC` in ns.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Raw ticks.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn ticks() -> u64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Raw ticks (nanoseconds where there is no TSC).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn ticks() -> u64 {
    mono_ns()
}

/// Calibrates once (about 5 ms of spinning on x86_64); later calls return at once.
/// Called from init, outside any timed window.
pub fn calibrate() {
    MULT.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return 1 << 32;
        }
        let (m0, t0) = (mono_ns(), ticks());
        let mut m1 = m0;
        while m1.saturating_sub(m0) < 5_000_000 {
            m1 = mono_ns();
        }
        let t1 = ticks();
        let dt = t1.saturating_sub(t0).max(1);
        let ns = m1 - m0;
        (((ns as u128) << 32) / dt as u128).min(u64::MAX as u128) as u64
    });
}

/// The calibration factor (32.32 fixed-point ns per tick); 1.0 before calibration.
pub fn mult() -> u64 {
    MULT.get().copied().unwrap_or(1 << 32)
}

/// Nanoseconds per tick, for the report.
pub fn ns_per_tick() -> f64 {
    mult() as f64 / (1u64 << 32) as f64
}

/// Converts a tick difference to ns with the factor `m` from [`mult`].
#[inline(always)]
pub fn to_ns(dticks: u64, m: u64) -> u64 {
    ((dticks as u128 * m as u128) >> 32) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_plausible() {
        calibrate();
        let r = ns_per_tick();
        // Any TSC from 100 MHz to 10 GHz.
        assert!(r > 0.1 && r < 10.0, "ns per tick {r}");
        let (m0, t0) = (mono_ns(), ticks());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (m1, t1) = (mono_ns(), ticks());
        let est = to_ns(t1 - t0, mult()) as f64;
        let real = (m1 - m0) as f64;
        assert!((est / real - 1.0).abs() < 0.05, "{est} vs {real}");
    }
}
