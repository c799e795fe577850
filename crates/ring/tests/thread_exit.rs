//! Threads that exit leave no slot behind: their per-thread caches are
//! inherited by the next thread that gets their index, or taken by the steal
//! path of a thread whose own cache and the shared stack are empty.
//!
//! In a test binary of its own, and its tests one at a time: thread indices
//! are process-wide, and a live thread of another test holding an exited
//! thread's index would make that cache its own (out of reach again).

use evring::TaggedSlab;
use std::sync::{Barrier, Mutex};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn exited_threads_leave_no_slot_behind() {
    let _one = serial();
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

/// Many threads alive at once (so each has an index of its own) each leave
/// a full cache behind and exit. From then on `insert` reports Full only
/// when every slot is live: the caches of exited threads are stolen.
#[test]
fn full_only_when_every_slot_is_live() {
    let _one = serial();
    const THREADS: usize = 24;
    const CACHE: u32 = 8;
    let slab: TaggedSlab<u32> = TaggedSlab::with_cache(1000, 7, CACHE);
    let keep = 100usize;
    let kept: Vec<_> = (0..keep).map(|i| slab.insert(i as u32).unwrap()).collect();
    // Two meeting points: every thread has taken its index (its first
    // insert) before any exits, so no thread inherits another's cache.
    let (inserted, retired) = (Barrier::new(THREADS), Barrier::new(THREADS));
    let handles: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (slab, inserted, retired) = (&slab, &inserted, &retired);
                s.spawn(move || {
                    let ids: Vec<_> = (0..3 * CACHE)
                        .map(|i| slab.insert(t as u32 * 100 + i).unwrap())
                        .collect();
                    inserted.wait();
                    for id in ids {
                        slab.retire(id);
                    }
                    retired.wait();
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join()).collect()
    });
    assert!(handles.iter().all(Result::is_ok));
    assert_eq!(slab.live(), keep as u64);
    let stranded = slab.stats().cached;
    assert!(
        stranded >= THREADS as u64 * u64::from(CACHE),
        "the exited threads should have left full caches behind: {stranded}"
    );
    // From one thread: every free slot, then Full with all slots live.
    let mut ids = Vec::new();
    let full = loop {
        match slab.insert(1) {
            Ok(id) => ids.push(id),
            Err(full) => break full,
        }
    };
    assert_eq!(full.0, 1);
    assert_eq!(
        keep + ids.len(),
        1000,
        "Full with free slots left in caches"
    );
    assert_eq!(slab.live(), 1000);
    assert_eq!(slab.stats().full, 1);
    // Stolen slots carry fresh generations: old IDs stay dead, new ones work.
    for id in &ids {
        assert_eq!(slab.with(*id, |v| *v), Ok(1));
    }
    for id in kept.into_iter().chain(ids) {
        assert!(slab.retire(id).is_some());
    }
    assert_eq!(slab.live(), 0);
}

/// The steal path on a thread that has no index of its own (its
/// thread-local storage is being torn down): exited threads' caches are
/// still reachable.
#[test]
fn thread_without_index_steals_too() {
    let _one = serial();
    let slab: &'static TaggedSlab<u32> = Box::leak(Box::new(TaggedSlab::with_cache(64, 8, 8)));
    // One thread takes every slot, frees 8 into its cache (the rest to the
    // shared stack), exits.
    std::thread::spawn(move || {
        let ids: Vec<_> = std::iter::from_fn(|| slab.insert(0).ok()).collect();
        assert_eq!(ids.len(), 64);
        for id in ids.into_iter().take(8) {
            slab.retire(id);
        }
    })
    .join()
    .unwrap();
    assert_eq!(slab.stats().cached, 8);
    // Insert from a thread-local destructor: no index there.
    struct InsertOnExit(&'static TaggedSlab<u32>, std::sync::mpsc::Sender<usize>);
    impl Drop for InsertOnExit {
        fn drop(&mut self) {
            let n = std::iter::from_fn(|| self.0.insert(2).ok()).count();
            let _ = self.1.send(n);
        }
    }
    thread_local! {
        static ON_EXIT: std::cell::RefCell<Option<InsertOnExit>> = const { std::cell::RefCell::new(None) };
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Thread-local destructors run in reverse order of first use: the
        // slab's index registration (first used by the insert below) is
        // torn down before `ON_EXIT` runs, so the inserts there have no
        // index. This thread inherits the exited thread's index and cache
        // but leaves the cache full when it gives the index back.
        ON_EXIT.with(|e| *e.borrow_mut() = Some(InsertOnExit(slab, tx)));
        let id = slab.insert(3).unwrap();
        slab.retire(id);
    })
    .join()
    .unwrap();
    assert_eq!(rx.recv().unwrap(), 8, "the 8 cached slots were reachable");
    assert_eq!(slab.live(), 64);
}
