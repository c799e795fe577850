//! Threads that exit leave no slot behind: their per-thread caches are
//! inherited by the next thread that gets their index.
//!
//! In a test binary of its own: thread indices are process-wide, and threads
//! of concurrently running tests would take the freed indices (their cached
//! slots then wait for a thread holding that index to use this slab, the
//! headroom docs/ring.md describes).

use evring::TaggedSlab;

#[test]
fn exited_threads_leave_no_slot_behind() {
    let slab: TaggedSlab<u32> = TaggedSlab::with_cache(512, 6, 8);
    for round in 0..300 {
        // `join` (not a scope) returns after the thread's thread-local
        // destructors ran, so its index is free for the next round's thread.
        std::thread::scope(|s| {
            s.spawn(|| {
                let ids: Vec<_> = (0..20)
                    .map(|i| slab.insert(i).expect("slots lost to exited threads"))
                    .collect();
                for id in ids {
                    slab.retire(id);
                }
            })
            .join()
            .unwrap();
        });
        assert_eq!(slab.live(), 0, "round {round}");
    }
    // Everything but what live threads cache is reachable from here.
    let cached = slab.stats().cached as usize;
    let ids: Vec<_> = std::iter::from_fn(|| slab.insert(0).ok()).collect();
    assert!(ids.len() + cached >= 512, "{} + {cached}", ids.len());
}
