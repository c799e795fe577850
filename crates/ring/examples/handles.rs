//! Opaque handles across threads, the way a profiler plugin uses them: one
//! thread starts events and passes their IDs as raw `u64`s (as a C API would
//! pass `void*`), another thread records into them and stops them. Garbage,
//! stale and double stops are refused and counted, never dereferenced.
//!
//! `cargo run -p evring --example handles`

use evring::{EventId, Miss, TaggedSlab};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;

struct Event {
    op: &'static str,
    seq: u64,
    steps: AtomicU32,
}

fn main() {
    let slab: TaggedSlab<Event> = TaggedSlab::new(1024);
    let (tx, rx) = mpsc::sync_channel::<u64>(64);
    let (mut stale, mut foreign, mut done) = (0u64, 0u64, 0u64);
    std::thread::scope(|s| {
        // The "user thread": starts events, hands out raw handles.
        s.spawn(|| {
            for seq in 0..10_000u64 {
                let op = if seq % 2 == 0 {
                    "all-reduce"
                } else {
                    "all-gather"
                };
                let event = Event {
                    op,
                    seq,
                    steps: AtomicU32::new(0),
                };
                match slab.insert(event) {
                    Ok(id) => tx.send(id.get()).unwrap(),
                    Err(full) => eprintln!("dropped event {} (slab full)", full.0.seq),
                }
            }
            tx.send(0xdead_beef).unwrap(); // a garbage handle
            drop(tx);
        });
        // The "proxy thread": records progress and stops events.
        let mut last = None;
        for raw in rx {
            let Some(id) = EventId::from_raw(raw) else {
                continue;
            };
            for _ in 0..3 {
                let _ = slab.with(id, |e| e.steps.fetch_add(1, Ordering::Relaxed));
            }
            match slab.retire(id) {
                Some(e) => {
                    assert_eq!(e.steps.load(Ordering::Relaxed), 3);
                    assert!(e.op.starts_with("all-"));
                    done += 1;
                }
                None => match slab.check(id) {
                    Err(Miss::Foreign) => foreign += 1,
                    _ => stale += 1,
                },
            }
            // Stopping the previous event again: refused, the slot may already
            // hold a newer event under a newer generation.
            if let Some(prev) = last.replace(id) {
                if slab.retire(prev).is_none() {
                    stale += 1;
                }
            }
        }
    });
    println!("completed {done}, stale stops refused {stale}, foreign handles refused {foreign}");
    println!("{:?}", slab.stats());
    assert_eq!((done, foreign, slab.live()), (10_000, 1, 0));
}
