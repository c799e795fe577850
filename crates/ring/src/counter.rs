//! A striped event counter: cheap to bump from many threads, exact when summed
//! at a quiescent point.
//!
//! The first `OWNED` threads (by their dense thread index, `thread_index.rs`)
//! each own one cache-padded stripe and bump it with a plain load and store:
//! no locked instruction, no shared cache line. Other threads (more than
//! `OWNED` at once, or calls from thread-local destructors) share one more
//! stripe with an atomic add. Reading sums all stripes; the sum is exact once
//! no thread is counting.
//!
//! An owned stripe has one writer at a time: an index is held by one live
//! thread, and the bitmap that hands it to the next thread orders the old
//! owner's last store before the new owner's first load. A signal handler
//! that counts on the thread it interrupted could lose that one update (never
//! corrupt memory); no caller counts from signal handlers.

use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Threads with a stripe of their own.
#[cfg(not(evring_loom))]
const OWNED: usize = 16;
#[cfg(evring_loom)]
const OWNED: usize = 2;

/// A counter of events (u64, wrapping arithmetic; a decrement is an add of -1).
pub struct Counter {
    /// `OWNED` single-writer stripes, then the shared one.
    stripes: [CachePadded<AtomicU64>; OWNED + 1],
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
        self.add_as(crate::thread_index::current(), n);
    }

    /// [`add`](Self::add) for a caller that already looked up its thread
    /// index (`thread_index::current()`, one thread-local access saved).
    #[inline(always)]
    pub(crate) fn add_as(&self, me: Option<usize>, n: u64) {
        match me.filter(|&i| i < OWNED) {
            Some(i) => {
                let s = &self.stripes[i];
                s.store(s.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
            }
            None => {
                self.stripes[OWNED].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// [`add`](Self::add) with the calling thread's index already looked up
    /// ([`with_thread`](crate::with_thread)).
    #[inline(always)]
    pub fn add_in(&self, me: crate::Me<'_>, n: u64) {
        self.add_as(me.index, n);
    }

    /// Adds one, with the calling thread's index already looked up.
    #[inline(always)]
    pub fn incr_in(&self, me: crate::Me<'_>) {
        self.add_as(me.index, 1);
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

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_across_threads() {
        let c = Arc::new(Counter::new());
        // More threads alive at once than owned stripes: both paths count.
        let threads = OWNED + 8;
        let all_started = Arc::new(std::sync::Barrier::new(threads));
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let (c, all_started) = (c.clone(), all_started.clone());
                std::thread::spawn(move || {
                    all_started.wait();
                    for _ in 0..10_000 {
                        c.incr();
                        c.incr();
                        c.decr();
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        let n = (OWNED as u64 + 8) * 10_000;
        assert_eq!(c.get(), n);
        c.decr();
        assert_eq!(c.sum(), n as i64 - 1);
        c.reset();
        c.decr();
        assert_eq!((c.sum(), c.get()), (-1, 0));
    }
}
