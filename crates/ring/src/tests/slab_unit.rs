use crate::{Config, EventId, Miss, TaggedSlab};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Four slots, two generation bits: a slot is retired for good after three uses.
pub(crate) struct Tiny;
impl Config for Tiny {
    const INDEX_BITS: u32 = 2;
    const GEN_BITS: u32 = 2;
    const TAG_BITS: u32 = 2;
}

/// Inserts, retrying while other threads still hold references.
pub(crate) fn insert_eventually<T: Send + Sync + 'static, C: Config>(
    slab: &TaggedSlab<T, C>,
    mut value: T,
) -> Option<EventId> {
    for _ in 0..10_000 {
        match slab.insert(value) {
            Ok(id) => return Some(id),
            Err(full) => value = full.0,
        }
        std::thread::yield_now();
    }
    None
}

#[test]
fn insert_lookup_retire() {
    let slab: TaggedSlab<u64> = TaggedSlab::new(8);
    let a = slab.insert(10).unwrap();
    let b = slab.insert(20).unwrap();
    assert_ne!(a, b);
    assert_ne!(a.get(), 0);
    assert_eq!(slab.with(a, |v| *v), Ok(10));
    assert_eq!(slab.live(), 2);
    assert_eq!(slab.retire_with(a, |v| *v), Some(10));
    assert_eq!(slab.retire_with(a, |v| *v), None, "double retire");
    assert_eq!(slab.with(a, |v| *v), Err(Miss::Stale));
    assert_eq!(slab.with(b, |v| *v), Ok(20));
    assert_eq!(slab.live(), 1);
}

#[test]
fn foreign_and_malformed_ids_are_refused() {
    let slab: TaggedSlab<u64> = TaggedSlab::with_tag(4, 7);
    let other: TaggedSlab<u64> = TaggedSlab::with_tag(4, 8);
    let mine = slab.insert(1).unwrap();
    let theirs = other.insert(2).unwrap();
    assert_eq!(slab.with(theirs, |v| *v), Err(Miss::Foreign));
    assert_eq!(slab.check(mine), Ok(()));
    for raw in [1u64, u64::MAX, mine.get() ^ (1 << 63), 0xdead_beef] {
        let id = EventId::from_raw(raw).unwrap();
        assert_eq!(slab.with(id, |v| *v), Err(Miss::Foreign), "{raw:#x}");
        assert!(slab.retire_with(id, |_| ()).is_none());
    }
    // Index beyond capacity but otherwise well formed.
    let big = EventId::from_raw(mine.get() | 0x8).unwrap();
    assert_eq!(slab.check(big), Err(Miss::Foreign));
}

#[test]
fn stale_after_every_kind_of_recycle() {
    let slab: TaggedSlab<u32> = TaggedSlab::new(2);
    let mut old = Vec::new();
    for round in 0..200u32 {
        let id = insert_eventually(&slab, round).expect("slot comes back");
        for &o in &old {
            assert_eq!(slab.check(o), Err(Miss::Stale), "old id accepted");
        }
        assert_eq!(slab.with(id, |v| *v), Ok(round));
        assert!(slab.retire_with(id, |_| ()).is_some());
        old.push(id);
    }
    assert_eq!(slab.live(), 0);
}

#[test]
fn wrap_around_retires_slot_instead_of_reusing_generation() {
    let slab: TaggedSlab<u32, Tiny> = TaggedSlab::with_tag(1, 1);
    let mut seen = Vec::new();
    // Generations 1, 2, 3 are usable; the third retire kills the slot.
    for g in 0..3u32 {
        let id = insert_eventually(&slab, g).expect("generation left");
        assert!(!seen.contains(&id), "generation repeated");
        seen.push(id);
        assert!(slab.retire_with(id, |_| ()).is_some());
    }
    for _ in 0..50 {
        assert!(slab.insert(99).is_err(), "dead slot was reused");
    }
    for id in &seen {
        assert_eq!(slab.check(*id), Err(Miss::Stale));
    }
    assert_eq!(slab.stats().dead_slots, 1);
    assert!(slab.stats().full >= 50);
}

#[test]
fn full_gives_value_back() {
    let slab: TaggedSlab<String> = TaggedSlab::new(2);
    let _a = slab.insert("a".into()).unwrap();
    let _b = slab.insert("b".into()).unwrap();
    let err = slab.insert("c".into()).unwrap_err();
    assert_eq!(err.0, "c");
    assert_eq!(slab.stats().full, 1);
}

#[test]
fn insert_with_builds_only_when_a_slot_is_free_and_survives_a_panicking_make() {
    let slab: TaggedSlab<u64> = TaggedSlab::new(1);
    // A panic while making the value hands the taken slot back.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::with_thread(|me| slab.insert_and_get_with_in(me, || panic!("make failed")))
    }));
    assert!(r.is_err());
    assert_eq!(slab.live(), 0);
    let made = AtomicUsize::new(0);
    let make = || {
        made.fetch_add(1, Ordering::Relaxed);
        7
    };
    let (id, r) = crate::with_thread(|me| slab.insert_and_get_with_in(me, make)).unwrap();
    assert_eq!(*r, 7);
    drop(r);
    // Full: `make` is not called, and the one slot is still the one given back.
    assert!(crate::with_thread(|me| slab.insert_and_get_with_in(me, make)).is_err());
    assert_eq!(made.load(Ordering::Relaxed), 1);
    assert_eq!(slab.retire_with(id, |v| *v), Some(7));
    assert!(slab.insert(8).is_ok(), "the slot is free again");
}

#[test]
fn iter_sees_exactly_live_entries() {
    let slab: TaggedSlab<u32> = TaggedSlab::new(16);
    let ids: Vec<_> = (0..10).map(|i| slab.insert(i).unwrap()).collect();
    for id in ids.iter().step_by(3) {
        slab.retire_with(*id, |_| ()).unwrap();
    }
    let mut got: Vec<_> = slab.iter().map(|(id, v)| (id, *v)).collect();
    got.sort();
    let mut want: Vec<_> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(i, id)| (*id, i as u32))
        .collect();
    want.sort();
    assert_eq!(got, want);
}

struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn every_value_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let slab: TaggedSlab<DropCount> = TaggedSlab::new(4);
        for _ in 0..100 {
            let id = insert_eventually(&slab, DropCount(drops.clone())).unwrap();
            slab.retire_with(id, |_| ()).unwrap();
        }
        assert_eq!(drops.load(Ordering::SeqCst), 100, "dropped at retire");
        // Two left live, one retired while referenced.
        insert_eventually(&slab, DropCount(drops.clone())).unwrap();
        insert_eventually(&slab, DropCount(drops.clone())).unwrap();
        let id = insert_eventually(&slab, DropCount(drops.clone())).unwrap();
        let held = slab.get(id).unwrap();
        slab.retire_with(id, |_| ()).unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 100, "referenced value kept");
        drop(held);
        assert_eq!(drops.load(Ordering::SeqCst), 101, "last reference drops it");
    }
    assert_eq!(drops.load(Ordering::SeqCst), 103);
}

#[test]
fn reader_reference_survives_concurrent_retire() {
    let slab: TaggedSlab<Vec<u8>> = TaggedSlab::new(1);
    let id = slab.insert(vec![7; 64]).unwrap();
    let value = slab.get(id).unwrap();
    assert!(slab.retire_with(id, |_| ()).is_some());
    // The slot cannot be recycled while `value` is held.
    for _ in 0..100 {
        assert!(slab.insert(vec![1]).is_err());
    }
    assert_eq!(*value, vec![7u8; 64]);
    drop(value);
    assert!(slab.insert(vec![2]).is_ok());
}

/// 4 threads × 1 M mixed operations, with IDs retired by other threads.
#[test]
fn stress_four_threads_mixed() {
    use std::sync::Mutex;
    const THREADS: u64 = 4;
    const OPS: u64 = 1_000_000;
    let slab: Arc<TaggedSlab<(u64, u64)>> = Arc::new(TaggedSlab::new(1024));
    // Hand-off lanes between neighbouring threads (cross-thread retire).
    let lanes: Arc<Vec<crate::BoundedQueue<(EventId, u64, u64)>>> =
        Arc::new((0..THREADS).map(|_| crate::BoundedQueue::new(64)).collect());
    let stale_accepts = Arc::new(AtomicUsize::new(0));
    let leftovers = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (slab, lanes, stale, left) = (
                slab.clone(),
                lanes.clone(),
                stale_accepts.clone(),
                leftovers.clone(),
            );
            std::thread::spawn(move || {
                let mut mine: Vec<(EventId, u64, u64)> = Vec::new();
                let mut dead: Vec<EventId> = Vec::new();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                for seq in 0..OPS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    match x % 8 {
                        0..=2 => {
                            if let Ok(id) = slab.insert((t, seq)) {
                                mine.push((id, t, seq));
                            }
                        }
                        3 | 4 => {
                            if let Some(&(id, a, b)) =
                                mine.get((x >> 8) as usize % mine.len().max(1))
                            {
                                assert_eq!(slab.with(id, |v| *v), Ok((a, b)), "live value wrong");
                            }
                        }
                        5 => {
                            if let Some((id, a, b)) = mine.pop() {
                                assert_eq!(slab.retire_with(id, |v| *v), Some((a, b)));
                                assert_eq!(slab.retire_with(id, |v| *v), None);
                                dead.push(id);
                            }
                        }
                        6 => {
                            if let Some(e) = mine.pop() {
                                if let Err(e) = lanes[((t + 1) % THREADS) as usize].push(e) {
                                    mine.push(e);
                                }
                            }
                        }
                        _ => {
                            if let Some((id, a, b)) = lanes[t as usize].pop() {
                                assert_eq!(slab.retire_with(id, |v| *v), Some((a, b)));
                                dead.push(id);
                            }
                            if let Some(&d) = dead.get((x >> 8) as usize % dead.len().max(1)) {
                                if slab.check(d).is_ok() {
                                    stale.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            if dead.len() > 4096 {
                                dead.drain(..2048);
                            }
                        }
                    }
                }
                left.lock().unwrap().extend(mine);
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let mut left = leftovers.lock().unwrap();
    for lane in lanes.iter() {
        while let Some(e) = lane.pop() {
            left.push(e);
        }
    }
    assert_eq!(
        stale_accepts.load(Ordering::Relaxed),
        0,
        "stale id accepted"
    );
    assert_eq!(slab.live(), left.len() as u64, "exact live count");
    let mut ids: Vec<_> = left.iter().map(|e| e.0).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), left.len(), "an id live twice");
    for &(id, a, b) in left.iter() {
        assert_eq!(slab.retire_with(id, |v| *v), Some((a, b)));
    }
    assert_eq!(slab.live(), 0);
}
