//! Loom models of `TaggedSlab` (2 threads, 1-3 operations, capacity 1-2, two
//! generation bits so wrap-around happens inside the model).

use crate::{Config, Miss, TaggedSlab};
use loom::sync::Arc;
use loom::thread;

struct Tiny;
impl Config for Tiny {
    const INDEX_BITS: u32 = 1;
    const GEN_BITS: u32 = 2;
    const TAG_BITS: u32 = 1;
    const RECLAIM_BATCH: u32 = 1;
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
/// fail (reader still pinned) or produce a new ID; the reader never sees the
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

/// The classic ABA on a free stack: one thread pops A and B and pushes A
/// back while the other is between reading A's link and its CAS. With the
/// tagged head the stale CAS fails; without it the second thread would take B,
/// which the first still holds. Afterwards the stack holds each index once.
#[test]
fn free_stack_pop_push_no_aba() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(2, 1));
        let t = {
            let slab = slab.clone();
            thread::spawn(move || {
                let (pop, push) = slab.free_stack();
                let a = pop();
                let b = pop();
                if let Some(a) = a {
                    push(a);
                }
                b
            })
        };
        let (pop, push) = slab.free_stack();
        let mine = pop();
        let theirs = t.join().unwrap();
        if let (Some(x), Some(y)) = (mine, theirs) {
            assert_ne!(x, y, "one slot handed to two owners");
        }
        for i in [mine, theirs].into_iter().flatten() {
            push(i);
        }
        let mut got = [pop(), pop(), pop()];
        got.sort();
        assert_eq!(got, [None, Some(0), Some(1)]);
    });
}
