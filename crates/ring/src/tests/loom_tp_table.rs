//! Loom model of the thread-pointer table (`tp_table.rs`): threads whose
//! pointers fall in one set register, look up and unregister at once, and a
//! lookup only ever returns the caller's own index (or nothing, when the set
//! was full for it). Under loom a set has two ways and the table one set, so
//! three threads can fill it. The model fails when a way is taken with a
//! load and a store instead of the compare-and-swap (two threads then share a
//! way, and one reads the other's index).

use crate::tp_table::Table;
use loom::sync::Arc;
use loom::thread;

/// Distinct, nonzero "thread pointers" (one set holds them all).
const TP: [usize; 3] = [0x1000, 0x2000, 0x3000];

/// Registers `index` for `tp`, looks it up, unregisters, looks again.
fn life(t: &Table<1>, tp: usize, index: usize) {
    let registered = t.register_for(tp, index);
    let found = t.lookup_for(tp);
    if registered {
        assert_eq!(found, Some(index), "a lookup found another way's index");
    } else {
        assert_eq!(
            found, None,
            "a thread that found the set full matched a way"
        );
    }
    t.unregister_for(tp);
    assert_eq!(t.lookup_for(tp), None, "a way outlived its unregister");
}

#[test]
fn threads_of_one_set_find_only_their_own_index() {
    loom::model(|| {
        let t = Arc::new(Table::<1>::new());
        let others: Vec<_> = [1, 2]
            .into_iter()
            .map(|k| {
                let t = t.clone();
                thread::spawn(move || life(&t, TP[k], 10 + k))
            })
            .collect();
        life(&t, TP[0], 10);
        for h in others {
            h.join().unwrap();
        }
    });
}

#[test]
fn a_full_set_takes_a_thread_once_a_way_is_free() {
    loom::model(|| {
        let t = Arc::new(Table::<1>::new());
        assert!(t.register_for(TP[0], 0));
        let other = {
            let t = t.clone();
            // The set's other way, then the thread leaves it.
            thread::spawn(move || life(&t, TP[1], 1))
        };
        // The third thread finds the set full or a way freed; either way it
        // reads back what it registered and nothing else.
        life(&t, TP[2], 2);
        other.join().unwrap();
        assert_eq!(t.lookup_for(TP[0]), Some(0));
        t.forget_others_of(TP[0]);
        assert_eq!(
            t.lookup_for(TP[0]),
            Some(0),
            "forget_others dropped the caller"
        );
        assert!(
            t.register_for(TP[1], 1),
            "a way stayed taken after its unregister"
        );
    });
}
