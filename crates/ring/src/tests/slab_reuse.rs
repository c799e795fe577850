//! Reuse under concurrency: a held reference keeps its value intact (the
//! use-after-free of the guard-based API cannot be written any more), a
//! stalled reader holds up one slot only, and per-thread caches never make
//! the slab report Full while most of it is free.

use crate::{EventId, TaggedSlab};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

/// The proof of concept of the old API's unsoundness, rewritten for this
/// one: a reader holds a value while another thread retires it and churns
/// the slab. The old API let the retire defer the drop on a guard of another
/// epoch collector, so the reader saw the value freed and its memory reused
/// (a changed string; ASan: heap-use-after-free). Here readers hold a
/// counted `Ref` (there is no guard to pass), so the value must be intact
/// until the reader drops it, and only then may the slot be reused.
#[test]
fn held_value_survives_retire_and_churn() {
    let slab: TaggedSlab<String> = TaggedSlab::new(4);
    let id = slab.insert("original value".repeat(4)).unwrap();
    let held = slab.get(id).unwrap();
    let before = held.as_ptr();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(slab.retire(id).is_some());
            for i in 0..10_000 {
                if let Ok(other) = slab.insert(format!("{i:060}")) {
                    slab.retire(other);
                }
            }
        });
    });
    assert_eq!(*held, "original value".repeat(4));
    assert_eq!(held.as_ptr(), before, "value moved or reallocated");
    assert!(slab.check(id).is_err());
    drop(held);
    // Now the slot is free: all four slots can be filled.
    let ids: Vec<EventId> = (0..4)
        .map(|i| slab.insert(i.to_string()).unwrap())
        .collect();
    assert_eq!(slab.live(), 4);
    drop(ids);
}

/// The slab reports Full only when slots are really taken. A reader that
/// holds a reference forever (a preempted thread) blocks its one slot: a
/// busy thread can still insert and retire a million times in the rest of
/// a small slab.
#[test]
fn stalled_reader_blocks_one_slot_only() {
    let slab: TaggedSlab<u64> = TaggedSlab::with_cache(64, 3, 4);
    let id = slab.insert(42).unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let slab = &slab;
    std::thread::scope(|s| {
        s.spawn(move || {
            let r = slab.get(id).unwrap();
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            assert_eq!(*r, 42);
        });
        held_rx.recv().unwrap();
        assert!(slab.retire(id).is_some());
        for i in 0..1_000_000u64 {
            let a = slab.insert(i).expect("full with one slot held");
            slab.retire(a);
        }
        assert_eq!(slab.stats().full, 0);
        // 63 slots can be live at once beside the held one.
        let ids: Vec<_> = (0..63).map(|i| slab.insert(i).unwrap()).collect();
        assert!(slab.insert(99).is_err(), "the held slot was reused");
        ids.into_iter().for_each(|i| drop(slab.retire(i)));
        done_tx.send(()).unwrap();
    });
    assert!(slab.insert(1).is_ok());
}

/// NCCL's pattern: one thread inserts, another retires (a remote retire:
/// freed slots land in the retiring thread's cache and reach the inserting
/// thread through the shared stack). With at most 256 values live and two
/// threads caching at most 32 free slots each, a slab of 4096 never reports
/// Full.
#[test]
fn insert_on_one_thread_retire_on_another_never_full() {
    let slab: TaggedSlab<(u64, u64)> = TaggedSlab::with_cache(4096, 5, 32);
    let in_flight = crate::BoundedQueue::new(256);
    let stale_accepted = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    const N: u64 = 500_000;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut done = 0;
            let mut last = None;
            while done < N {
                if let Some((id, v)) = in_flight.pop() {
                    assert_eq!(slab.retire_with(id, |x: &(u64, u64)| x.1), Some(v));
                    if let Some(old) = last.replace(id) {
                        if slab.check(old).is_ok() {
                            stale_accepted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    done += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
            stop.store(true, Ordering::Release);
        });
        for v in 0..N {
            let id = slab.insert((0, v)).expect("Full with at most 256 live");
            let mut e = (id, v);
            while let Err(back) = in_flight.push(e) {
                e = back;
                std::thread::yield_now();
            }
        }
        while !stop.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    });
    let st = slab.stats();
    assert_eq!((st.full, st.live), (0, 0), "{st:?}");
    assert_eq!(stale_accepted.load(Ordering::Relaxed), 0);
    assert!(st.cached <= 64, "{st:?}");
}

// Threads that exit leave no slot behind: tests/thread_exit.rs (a binary of
// its own, so no concurrent test takes the freed thread indices).

/// More threads alive at once than there are per-thread shards: the ones
/// without a shard take the shared path (chains of one, shared counters).
/// Every live ID is distinct, every value reads back, the counts balance,
/// and every slot not cached by a thread is reachable afterwards.
#[test]
fn more_threads_than_shards_share_the_slow_path() {
    use std::sync::{Barrier, Mutex};
    let threads = crate::thread_index::MAX_THREADS + 44;
    let slab: TaggedSlab<(usize, u32)> = TaggedSlab::with_cache(4096, 7, 4);
    let all_inserted = Barrier::new(threads);
    let ids = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (slab, all_inserted, ids) = (&slab, &all_inserted, &ids);
            s.spawn(move || {
                let mine: Vec<_> = (0..5)
                    .map(|i| slab.insert((t, i)).expect("room for 5 per thread"))
                    .collect();
                ids.lock().unwrap().extend(mine.iter().copied());
                // Everybody holds its five at once, shard or not.
                all_inserted.wait();
                for (i, id) in mine.into_iter().enumerate() {
                    assert_eq!(slab.retire_with(id, |v| *v), Some((t, i as u32)));
                }
            });
        }
    });
    let mut ids = ids.into_inner().unwrap();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "an ID handed out twice");
    assert_eq!(n, threads * 5);
    assert_eq!(slab.live(), 0);
    let cached = slab.stats().cached as usize;
    let refill: Vec<_> = std::iter::from_fn(|| slab.insert((0, 0)).ok()).collect();
    assert!(refill.len() + cached >= 4096, "{} + {cached}", refill.len());
}
