//! Loom models of `TaggedSlab` (2 threads, 1-3 operations, capacity 1-2, two
//! generation bits so wrap-around happens inside the model), its per-thread
//! free caches and its shared free stack.

use crate::slab::{FreeSlots, Links};
use crate::{Config, Miss, TaggedSlab};
use loom::sync::Arc;
use loom::thread;

struct Tiny;
impl Config for Tiny {
    const INDEX_BITS: u32 = 1;
    const GEN_BITS: u32 = 2;
    const TAG_BITS: u32 = 1;
}

type Slab = TaggedSlab<usize, Tiny>;

#[test]
fn concurrent_insert_gives_distinct_live_ids() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(2, 1));
        let t = {
            let slab = slab.clone();
            thread::spawn(move || slab.insert(1).unwrap())
        };
        let a = slab.insert(0).unwrap();
        let b = t.join().unwrap();
        assert_ne!(a, b);
        assert_eq!(slab.with(a, |v| *v), Ok(0));
        assert_eq!(slab.with(b, |v| *v), Ok(1));
        assert_eq!(slab.live(), 2);
        assert!(slab.insert(2).is_err());
    });
}

#[test]
fn insert_races_retire() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(2, 1));
        let a = slab.insert(10).unwrap();
        let t = {
            let slab = slab.clone();
            thread::spawn(move || slab.retire_with(a, |v| *v))
        };
        let b = slab.insert(20).unwrap();
        assert_eq!(t.join().unwrap(), Some(10));
        assert_ne!(a, b);
        assert_eq!(slab.with(b, |v| *v), Ok(20));
        assert_eq!(slab.check(a), Err(Miss::Stale));
        assert_eq!(slab.live(), 1);
    });
}

#[test]
fn double_retire_has_one_winner() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(1, 1));
        let a = slab.insert(7).unwrap();
        let t = {
            let slab = slab.clone();
            thread::spawn(move || slab.retire_with(a, |v| *v))
        };
        let here = slab.retire_with(a, |v| *v);
        let there = t.join().unwrap();
        assert_eq!(here.is_some() as u8 + there.is_some() as u8, 1);
        assert_eq!(here.or(there), Some(7));
        assert_eq!(slab.live(), 0);
    });
}

/// A reader that validated an ID keeps reading the old value while another
/// thread retires it and tries to reuse the only slot. The reuse must either
/// fail (reader still holds its reference) or produce a new ID; the reader never sees the
/// new value, and the old ID is never accepted again.
#[test]
fn stale_get_vs_retire_and_reinsert() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(1, 1));
        let a = slab.insert(1).unwrap();
        let reader = {
            let slab = slab.clone();
            thread::spawn(move || slab.with(a, |v| *v))
        };
        assert_eq!(slab.retire_with(a, |v| *v), Some(1));
        let b = slab.insert(2);
        match reader.join().unwrap() {
            Ok(v) => assert_eq!(v, 1),
            Err(miss) => assert_eq!(miss, Miss::Stale),
        }
        if let Ok(b) = b {
            assert_ne!(a, b);
            assert_eq!(slab.with(b, |v| *v), Ok(2));
        }
        assert_eq!(slab.check(a), Err(Miss::Stale));
    });
}

/// Generations 1..=3 exist; after three uses the slot is dead. A concurrent
/// stale lookup of any earlier ID fails throughout.
#[test]
fn wrap_around_never_reuses_a_generation() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(1, 1));
        let first = slab.insert(0).unwrap();
        slab.retire_with(first, |_| ()).unwrap();
        let checker = {
            let slab = slab.clone();
            thread::spawn(move || slab.check(first))
        };
        let mut ids = vec![first];
        for v in 1..3 {
            if let Ok(id) = slab.insert(v) {
                assert!(!ids.contains(&id));
                ids.push(id);
                slab.retire_with(id, |_| ()).unwrap();
            }
        }
        assert_eq!(checker.join().unwrap(), Err(Miss::Stale));
        for id in ids {
            assert_eq!(slab.check(id), Err(Miss::Stale));
        }
    });
}

/// The classic ABA on the shared free stack: one thread pops chains A and B
/// and pushes A back while the other is between reading A's link and its
/// CAS. With the tagged head the stale CAS fails; without it the second
/// thread would take B, which the first still holds. Afterwards the stack
/// holds each chain once.
#[test]
fn free_stack_pop_push_no_aba() {
    loom::model(|| {
        // Chains of one slot: the slots' own links are never followed.
        let links = [Links::new(), Links::new()];
        let free = Arc::new(FreeSlots::new(&links[..], 2, 0));
        let t = {
            let free = free.clone();
            thread::spawn(move || {
                let a = free.pop_chain_for_test();
                let b = free.pop_chain_for_test();
                if let Some((a, len)) = a {
                    free.push_chain_for_test(a, len);
                }
                b.map(|b| b.0)
            })
        };
        let mine = free.pop_chain_for_test().map(|c| c.0);
        let theirs = t.join().unwrap();
        if let (Some(x), Some(y)) = (mine, theirs) {
            assert_ne!(x, y, "one slot handed to two owners");
        }
        for i in [mine, theirs].into_iter().flatten() {
            free.push_chain_for_test(i, 1);
        }
        let mut got = [0; 3].map(|_| free.pop_chain_for_test().map(|c| c.0));
        got.sort();
        assert_eq!(got, [None, Some(0), Some(1)]);
    });
}

/// NCCL's pattern on a slab whose threads cache one free slot each: the
/// main thread inserts both slots, another thread retires both (a remote
/// retire; its cache fills, so the first slot is flushed to the shared stack
/// as a chain) while a third thread inserts (refilling its empty cache from
/// that stack). The new insert either finds no free slot or gets a slot
/// with a fresh generation whose value it reads back; the retired IDs are
/// refused throughout; the counts balance. Once the retiring thread has
/// exited, the slot it still caches is reachable too (steal path).
///
/// The racing inserter is a spawned thread: with loom 0.7 the main thread
/// racing a spawned one here explored a single interleaving.
#[test]
fn remote_retire_flushes_cache_to_inserting_thread() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_cache(2, 1, 1));
        let a = slab.insert(1).unwrap();
        let b = slab.insert(2).unwrap();
        let t = {
            let slab = slab.clone();
            thread::spawn(move || {
                assert_eq!(slab.retire_with(a, |v| *v), Some(1));
                assert_eq!(slab.retire_with(b, |v| *v), Some(2));
                crate::thread_index::exit_for_test();
            })
        };
        let inserter = {
            let slab = slab.clone();
            thread::spawn(move || {
                let c = slab.insert(3).ok();
                if let Some(c) = c {
                    assert!(c != a && c != b, "ID reissued");
                    assert_eq!(slab.with(c, |v| *v), Ok(3));
                }
                c
            })
        };
        let c = inserter.join().unwrap();
        t.join().unwrap();
        assert_eq!(slab.check(a), Err(Miss::Stale));
        assert_eq!(slab.check(b), Err(Miss::Stale));
        assert_eq!(slab.live(), u64::from(c.is_some()));
        // Every free slot is reachable from here (the inserter's cache, if
        // it holds one, is empty: it took a chain of one), none twice.
        let d = slab.insert(4);
        let e = slab.insert(5);
        assert!(d.is_ok(), "a free slot is out of reach");
        assert_eq!(
            e.is_ok(),
            c.is_none(),
            "every free slot reachable, none twice"
        );
    });
}

/// A reference taken on one thread and dropped after another thread retired
/// the value: whichever drops last frees the slot, exactly once, and a
/// re-insert never overwrites a value that is still referenced.
#[test]
fn last_reference_frees_once() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_cache(1, 1, 0));
        let a = slab.insert(1).unwrap();
        let reader = {
            let slab = slab.clone();
            thread::spawn(move || slab.with(a, |v| *v).ok())
        };
        let retired = slab.retire(a).map(|r| *r);
        assert_eq!(retired, Some(1));
        let again = slab.insert(5);
        let seen = reader.join().unwrap();
        assert!(seen.is_none() || seen == Some(1));
        let again = again.or_else(|full| slab.insert(full.0));
        let id = again.expect("slot freed once every reference is gone");
        assert_eq!(slab.with(id, |v| *v), Ok(5));
        assert!(slab.insert(6).is_err(), "slot freed twice");
    });
}

/// An ID handed to another thread through a relaxed store carries no
/// ordering of its own: the reader may find the slot not yet live (Stale),
/// but if it accepts the ID, the slab's release (insert) / acquire (lookup)
/// pair alone must make the value visible to it.
#[test]
fn lookup_sees_value_published_by_insert() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_cache(1, 1, 0));
        let raw = Arc::new(loom::sync::atomic::AtomicU64::new(0));
        let t = {
            let (slab, raw) = (slab.clone(), raw.clone());
            thread::spawn(move || {
                let id = slab.insert(7).unwrap();
                raw.store(id.get(), loom::sync::atomic::Ordering::Relaxed);
            })
        };
        if let Some(id) = crate::EventId::from_raw(raw.load(loom::sync::atomic::Ordering::Relaxed))
        {
            match slab.with(id, |v| *v) {
                Ok(v) => assert_eq!(v, 7),
                Err(miss) => assert_eq!(miss, Miss::Stale),
            }
        }
        t.join().unwrap();
    });
}

/// The steal path against the next owner of an exited thread's index. A
/// thread frees a slot into its cache (one slot) and exits; the other slot
/// stays live on the main thread. Then the main thread inserts (its cache
/// and the shared stack are empty: it steals the exited thread's cache,
/// holding that index meanwhile) while a new thread inserts (it claims the
/// lowest free index, the exited thread's, and inherits the cache, unless
/// the main thread holds it at that moment). Exactly one of them gets the
/// slot, with a fresh generation; the other finds the slab full. Fails if
/// the index hand-over loses its Acquire/Release (the new holder would
/// read a cache the other has emptied, and two threads would write one
/// slot) or if a held index could be stolen. The exiting thread gives its
/// index back explicitly (`exit_for_test`, the thread-local destructor's
/// code): loom's join does not order thread-local destructors before the
/// joiner's next step.
#[test]
fn steal_races_new_owner_of_the_index() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_cache(2, 1, 1));
        let y = slab.insert(1).unwrap();
        let x = {
            let slab = slab.clone();
            thread::spawn(move || {
                let x = slab.insert(2).unwrap();
                assert_eq!(slab.retire_with(x, |v| *v), Some(2));
                crate::thread_index::exit_for_test();
                x
            })
            .join()
            .unwrap()
        };
        assert_eq!(slab.stats().cached, 1, "the exited thread's cache");
        let newcomer = {
            let slab = slab.clone();
            thread::spawn(move || slab.insert(3).ok())
        };
        let mine = slab.insert(4).ok();
        let theirs = newcomer.join().unwrap();
        assert!(
            mine.is_some() != theirs.is_some(),
            "one free slot, one winner: {mine:?} {theirs:?}"
        );
        for (id, v) in [(mine, 4), (theirs, 3)] {
            if let Some(id) = id {
                assert!(id != x && id != y, "ID reissued");
                assert_eq!(slab.with(id, |v| *v), Ok(v));
            }
        }
        assert_eq!(slab.check(x), Err(Miss::Stale));
        assert_eq!(slab.live(), 2);
    });
}
