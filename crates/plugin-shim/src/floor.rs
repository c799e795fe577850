//! Cost attribution build `--cfg evring_ablate="floor"` (diagnostic, never
//! shipped; docs/performance.md, "Round 9"): what NCCL's thread would pay per
//! call if the plugin only *logged* its calls and the writer thread did the
//! rest (an event-sourced design).
//!
//! Every entry point keeps what any design pays on the calling thread: the C
//! entry, the panic guard, the call recorder's switch, argument conversion
//! (a start's descriptor to symbols: the writer cannot read NCCL's memory
//! later), one thread-local access and a clock read; then it pushes one
//! record-sized fragment into the thread's ring lane and returns. Nothing is
//! validated, no slab slot is taken, no parent is linked, no record is
//! assembled from events, and the writer receives fragments, not events: the
//! build is wrong for any use but timing the calling thread's side.
//!
//! A start's handle is a per-thread sequence number under a number the
//! thread takes at its first start (what an event-sourced handle would be:
//! unique, never a pointer).

use crate::clock::now_ns;
use crate::compact::Compact;
use crate::engine::Engine;
use crate::local::{self, Cx};
use crate::model::{Info, Kind, StartArg, StateArg};
use crate::node::pack_state;

use std::sync::atomic::{AtomicU64, Ordering};

/// Handle bits for the per-thread sequence (a thread number above them).
const SEQ_BITS: u32 = 40;

/// Threads that made a start so far.
static THREADS: AtomicU64 = AtomicU64::new(0);

/// The first handle of a thread's first start (once per thread).
#[cold]
fn new_thread() -> u64 {
    (THREADS.fetch_add(1, Ordering::Relaxed) + 1) << SEQ_BITS
}

/// A start: its converted descriptor and its time, as a fragment.
#[inline(always)]
pub fn start(e: &Engine, cx: Cx<'_>, ctx: u64, arg: Option<&StartArg>) -> u64 {
    let Some(arg) = arg else { return 0 };
    let now = now_ns();
    let id = cx.l.map_or(0, |l| {
        let mut s = l.floor_seq.get();
        if s == 0 {
            s = new_thread();
        }
        l.floor_seq.set(s + 1);
        s
    });
    let pushed = e.ring.push_with_in(cx.me, |slot| {
        Compact::fragment(
            id,
            arg.parent,
            ctx,
            arg.rank,
            arg.kind,
            &arg.info,
            now,
            0,
            false,
            |c| slot.write(c),
        )
    });
    if !pushed {
        e.counters.drop_ring_full.incr_in(cx.me);
    }
    id
}

/// A stop (`state == None`) or a state record: the handle, the time and the
/// state word, as a fragment.
#[inline(always)]
pub fn call(e: &Engine, handle: u64, state: Option<StateArg>) {
    local::with_local(|l| {
        local::thread(l, |me| {
            let now = now_ns();
            let (word, stop) = match state {
                Some(s) => (pack_state(s.state as u8, now), false),
                None => (0, true),
            };
            let pushed = e.ring.push_with_in(me, |slot| {
                Compact::fragment(
                    handle,
                    0,
                    0,
                    0,
                    // Any kind: the fragment names its event by `handle`.
                    Kind::GroupApi,
                    &Info::None,
                    now,
                    word,
                    stop,
                    |c| slot.write(c),
                )
            });
            if !pushed {
                e.counters.drop_ring_full.incr_in(me);
            }
        })
    })
}
