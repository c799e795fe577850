//! A striped event counter: cheap to bump from many threads, exact when summed
//! at a quiescent point.
//!
//! Each thread bumps the stripe picked by a thread-local number, so threads
//! that count the same thing rarely share a cache line. Reading sums all
//! stripes; the sum is exact once no thread is counting.

use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

#[cfg(not(evring_loom))]
const STRIPES: usize = 16;
#[cfg(evring_loom)]
const STRIPES: usize = 1;

/// A counter of events (u64, wrapping arithmetic; a decrement is an add of -1).
pub struct Counter {
    stripes: [CachePadded<AtomicU64>; STRIPES],
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
    }
}

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self {
            stripes: core::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }
    }

    /// Adds `n` (wrapping).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.stripes[stripe()].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    #[inline(always)]
    pub fn incr(&self) {
        self.add(1);
    }

    /// Subtracts one (wrapping), for gauges such as a live count.
    #[inline(always)]
    pub fn decr(&self) {
        self.add(u64::MAX);
    }

    /// The sum of all stripes, as a signed value so a gauge read mid-update
    /// cannot show a huge number.
    pub fn sum(&self) -> i64 {
        self.stripes
            .iter()
            .fold(0u64, |acc, s| acc.wrapping_add(s.load(Ordering::Relaxed))) as i64
    }

    /// The sum, clamped at 0.
    pub fn get(&self) -> u64 {
        self.sum().max(0) as u64
    }

    /// Sets the counter to zero (not atomic with concurrent adds).
    pub fn reset(&self) {
        for s in &self.stripes {
            s.store(0, Ordering::Relaxed);
        }
    }
}

impl core::fmt::Debug for Counter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.sum())
    }
}

#[cfg(not(evring_loom))]
#[inline(always)]
fn stripe() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;
    static NEXT: StdAtomicUsize = StdAtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    // try_with: counting still works in thread-local destructors and atexit.
    MINE.try_with(|m| {
        let mut s = m.get();
        if s == usize::MAX {
            s = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % STRIPES;
            m.set(s);
        }
        s
    })
    .unwrap_or(0)
}

#[cfg(evring_loom)]
#[inline(always)]
fn stripe() -> usize {
    0
}

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_across_threads() {
        let c = Arc::new(Counter::new());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        c.incr();
                        c.incr();
                        c.decr();
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(c.get(), 40_000);
        c.decr();
        assert_eq!(c.sum(), 39_999);
        c.reset();
        c.decr();
        assert_eq!((c.sum(), c.get()), (-1, 0));
    }
}
