//! Loom model of the plugin's call log (`evring-shim`'s `hot.rs` and
//! `assemble.rs`): NCCL's thread takes an ID from the slab and publishes it
//! in its owned lane; the writer reads the entry, finds the ID live in the
//! slab (the slot's state store comes before the lane's Release of its
//! tail, which the writer's Acquire of the tail makes visible), completes
//! the event and retires the slot; NCCL's later stop of the same ID finds
//! it live or stale, never foreign, and never a reused slot's new event.
//! With the owned lane's tail stored Relaxed instead of Release, loom
//! reports the writer's read of the entry as a causality violation.

use crate::thread_index::MAX_THREADS;
use crate::{Config, EventId, Miss, RecordRing, TaggedSlab};
use loom::sync::Arc;
use loom::thread;

struct Tiny;
impl Config for Tiny {
    const INDEX_BITS: u32 = 1;
    const GEN_BITS: u32 = 2;
    const TAG_BITS: u32 = 1;
}

type Slab = TaggedSlab<(), Tiny>;

#[test]
fn an_id_read_from_the_log_is_live_until_the_writer_retires_it() {
    loom::model(|| {
        let slab = Arc::new(Slab::with_tag(1, 1));
        // Every thread index owns a lane of two entries (the hot path's
        // case), one shared entry takes any overflow.
        let log: Arc<RecordRing<u64>> = Arc::new(RecordRing::with_lanes(
            MAX_THREADS * 2 + 1,
            MAX_THREADS,
            2,
            1,
        ));
        let nccl = {
            let (slab, log) = (slab.clone(), log.clone());
            thread::spawn(move || {
                // start: an ID, then its entry.
                let id = slab.insert(()).unwrap();
                assert!(log.push(id.get()));
                // stop: checked against the slab, then logged.
                match slab.check(id) {
                    Ok(()) => assert!(log.push(id.get())),
                    Err(Miss::Stale) => {}
                    Err(m) => panic!("our own ID refused as {m:?}"),
                }
                id
            })
        };
        // The writer: every entry it reads names a slot it has not retired
        // yet, so the ID is live; after the first it completes the event.
        let mut retired = false;
        for _ in 0..3 {
            while let Some(raw) = log.pop() {
                let id = EventId::from_raw(raw).unwrap();
                if retired {
                    // A stop logged before the retire: stale for the writer
                    // too (counted there), never live again.
                    assert_eq!(slab.check(id), Err(Miss::Stale));
                } else {
                    assert_eq!(slab.check(id), Ok(()));
                    assert!(slab.retire(id).is_some());
                    retired = true;
                }
            }
            thread::yield_now();
        }
        let id = nccl.join().unwrap();
        while let Some(raw) = log.pop() {
            assert_eq!(raw, id.get());
            if !retired {
                assert_eq!(slab.check(id), Ok(()));
                assert!(slab.retire(id).is_some());
                retired = true;
            } else {
                assert_eq!(slab.check(id), Err(Miss::Stale));
            }
        }
        assert!(retired);
        assert_eq!(slab.live(), 0);
        // The slot is free again: a new event gets a new ID, and the old
        // one stays stale.
        let next = slab.insert(()).unwrap();
        assert_ne!(next, id);
        assert_eq!(slab.check(id), Err(Miss::Stale));
    });
}
