//! A small, dense, process-wide index per live thread.
//!
//! Each slab keeps one shard of per-thread state (free-slot cache, insert and
//! retire counts) per index, so a thread touches only its own cache lines on
//! the fast path. Indices are claimed from a bitmap on a thread's first slab
//! call and given back when the thread exits, so a long-running process that
//! keeps spawning threads reuses them; the next owner of an index inherits the
//! shard's cached free slots and counts, which stay correct.
//!
//! A thread that finds every index taken, or calls in while its thread-local
//! storage is being torn down, gets `None` and takes the shared (slower) path.

#[cfg(not(evring_loom))]
mod imp {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// Threads that can hold an index at once; more fall back to the shared path.
    pub(crate) const MAX_THREADS: usize = 256;
    const WORDS: usize = MAX_THREADS / 64;

    static USED: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
    /// One past the highest index ever handed out: sums stop there.
    static HIGH: AtomicUsize = AtomicUsize::new(0);

    struct Registration(usize);

    impl Registration {
        fn claim() -> Self {
            for (w, word) in USED.iter().enumerate() {
                let mut bits = word.load(Ordering::Relaxed);
                while bits != u64::MAX {
                    let bit = (!bits).trailing_zeros();
                    // Acquire: the previous owner's writes to the shards of
                    // this index (released below) are visible to us.
                    let prev = word.fetch_or(1 << bit, Ordering::AcqRel);
                    if prev & (1 << bit) == 0 {
                        let index = w * 64 + bit as usize;
                        HIGH.fetch_max(index + 1, Ordering::AcqRel);
                        return Self(index);
                    }
                    bits = prev | 1 << bit;
                }
            }
            Self(usize::MAX)
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            if self.0 != usize::MAX {
                // Release: hands this thread's shard writes to the next owner.
                USED[self.0 / 64].fetch_and(!(1 << (self.0 % 64)), Ordering::Release);
            }
        }
    }

    thread_local! {
        static MINE: Registration = Registration::claim();
    }

    /// This thread's index, or `None` (shared path).
    #[inline(always)]
    pub(crate) fn current() -> Option<usize> {
        MINE.try_with(|r| r.0).ok().filter(|&i| i != usize::MAX)
    }

    /// One past the highest index any thread has held.
    #[inline]
    pub(crate) fn high() -> usize {
        HIGH.load(Ordering::Acquire)
    }
}

/// Under loom: every model execution starts from fresh statics and fresh
/// threads, and models use a handful of threads, so indices are never reused.
#[cfg(evring_loom)]
mod imp {
    use loom::sync::atomic::{AtomicUsize, Ordering};

    pub(crate) const MAX_THREADS: usize = 4;

    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn current() -> Option<usize> {
        let i = MINE.with(|i| *i);
        (i < MAX_THREADS).then_some(i)
    }

    pub(crate) fn high() -> usize {
        NEXT.load(Ordering::Acquire).min(MAX_THREADS)
    }
}

pub(crate) use imp::*;

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::*;

    #[test]
    fn live_threads_hold_distinct_indices_and_exited_ones_are_reused() {
        let here = current().expect("an index is free");
        let (tx, rx) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let tx = tx.clone();
                let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
                let t = std::thread::spawn(move || {
                    tx.send(current()).unwrap();
                    go_rx.recv().unwrap();
                });
                (t, go_tx)
            })
            .collect();
        let mut seen: Vec<usize> = (0..8).map(|_| rx.recv().unwrap().unwrap()).collect();
        seen.push(here);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 9, "two live threads shared an index");
        assert!(seen.iter().all(|&i| i < high()));
        for (t, go) in threads {
            go.send(()).unwrap();
            t.join().unwrap();
        }
        // Sequential threads far beyond MAX_THREADS all get an index: exited
        // threads give theirs back.
        for _ in 0..(MAX_THREADS * 2) {
            let got = std::thread::spawn(current).join().unwrap();
            assert!(got.is_some(), "indices of exited threads are not reused");
        }
    }
}
