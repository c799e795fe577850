//! The hot path: what a profiler call costs NCCL's thread.
//!
//! A call does only what no design can avoid, and nothing that touches
//! another event's state:
//!
//! * **start**: the descriptor converted (strings as symbols), its context
//!   checked (a per-thread cache, revalidated once per finalize anywhere),
//!   an ID minted from the slab (a slot from this thread's free cache), the
//!   clock read, one entry appended to this thread's lane of the log.
//! * **stop / record**: the handle checked against the slab (a stale,
//!   foreign or garbage handle is counted here and never logged, never
//!   dereferenced: it is only ever compared), the clock read, one entry.
//!
//! No parent is looked up, no reference taken, no record assembled, no
//! cache line written that another thread wrote last (the slot's state word
//! was last written by whoever retired it). The writer thread puts events
//! together from the lanes (`assemble.rs`).
//!
//! The clock is read inside the lane's reservation (`push_with`), last:
//! `rdtsc` does not execute before the loads older than it have completed
//! (measured on the dev box, an Intel Xeon virtual machine like the GPU
//! machine; docs/performance.md, Round 15), so read between the slab's slot
//! and the lane's producer line it kept their misses from overlapping. Read
//! after both are asked for, it waits for the two at once. The entry is
//! written in place, its payload made inside the closure: a captured `Op`
//! would be copied whole, a stop's 104 bytes instead of its tag.
//!
//! A lane with no room is a counted loss, never a wait: a start whose entry
//! cannot be logged gives its slot back and returns NULL (NCCL then sends
//! nothing more for it; counted in `drop_ring_full` and as completed); a
//! lost stop or state leaves the event to the age limit (`log_lost`).

use crate::clock::now_ns;
use crate::engine::{Engine, CONTEXT_OVERFLOW, DETACHED};
use crate::entry::{Entry, Op, Start};
use crate::local::{self, Cx, Local};
use crate::model::{Info, Kind, StartArg, StateArg};
use crate::record::flag;
use crate::strings::Memo;
use evring::{EventId, Miss};
use std::sync::atomic::Ordering;

impl Engine {
    /// NCCL's startEvent: returns the handle to store in `*eHandle` (0 =
    /// dropped, or not wanted: outside the mask when the mask is honoured).
    /// `convert` turns the descriptor into a [`StartArg`] with this thread's
    /// string memo (`None` while thread-local storage is torn down); `log`
    /// sees it and the handle before NCCL does (the call recorder).
    #[inline(always)]
    pub fn start(
        &'static self,
        ctx: u64,
        convert: impl FnOnce(Option<&Memo>) -> Option<StartArg>,
        log: impl FnOnce(Option<&StartArg>, u64),
    ) -> u64 {
        local::with(|cx| {
            let arg = convert(cx.l.map(|l| &l.strings));
            let id = self.start_in(cx, ctx, arg.as_ref());
            log(arg.as_ref(), id);
            id
        })
    }

    #[inline(always)]
    fn start_in(&'static self, cx: Cx<'_>, ctx: u64, arg: Option<&StartArg>) -> u64 {
        // No count of the call itself: it either gets an ID (the slab
        // counts inserts) or is counted as refused (`Counters::snapshot`).
        let c = &self.counters;
        let Some(arg) = arg else {
            rare(&c.drop_unknown_type);
            return 0;
        };
        let mut flags = arg.flags;
        if flags & flag::BAD_STRING != 0 {
            rare(&c.bad_strings);
        }
        // PXN: a proxy op from another process carries that process's
        // context and parent; neither may be looked up, let alone followed.
        let pxn = matches!(arg.info, Info::ProxyOp { pid, .. } if pid != self.pid);
        let stream = match self.resolve_ctx(cx, ctx, arg.kind, pxn) {
            Ok(s) => s,
            Err(()) => return 0,
        };
        if stream == DETACHED {
            flags |= flag::DETACHED;
        }
        if pxn && arg.parent != 0 {
            flags |= flag::FOREIGN_PARENT;
            rare(&c.foreign_parents);
        }
        let id = match self.events.insert_in(cx.me, ()) {
            Ok(id) => id,
            Err(_) => {
                self.slab_full(cx, arg, pxn);
                return 0;
            }
        };
        let expect = self.expected_children(arg);
        // The clock last, inside the reservation, and the payload made there
        // from `arg` (see the module comment).
        if !self.log.push_with_in(cx.me, |slot| {
            slot.write(Entry {
                id: id.get(),
                t: now_ns(),
                op: Op::Start(Start {
                    ctx: stream,
                    parent: arg.parent,
                    rank: arg.rank,
                    kind: arg.kind,
                    info: arg.info,
                    flags,
                    expect,
                }),
            })
        }) {
            self.start_lost(cx, id);
            return 0;
        }
        self.check_pressure(cx.l);
        id.get()
    }

    /// With the mask honoured (`EVRING_MASK_STRICT`): whether NCCL's type
    /// value `ty` is one the mask asks for. A value that is not one known
    /// type bit is "wanted": the normal path counts it as unknown.
    #[inline(always)]
    pub fn wants(&self, ty: u64) -> bool {
        ty.count_ones() != 1 || self.mask() as u64 & ty != 0
    }

    /// A start answered NULL because its type is outside the honoured mask:
    /// an event nobody asked for, so NCCL sends no stop or state for it (nor,
    /// for some, its children). Counted as a start and as a start drop by
    /// request (`masked_starts`, which the stats add to `start_calls`).
    pub fn masked_start(&self) {
        self.counters.masked_starts.incr();
    }

    /// A start refused because the slab is full: counted, and if it names a
    /// parent of ours, logged against that parent (`Op::Refused`), so that
    /// the assembler stops waiting for a child that will never come (the
    /// parent completes with its other children, flagged
    /// `children_incomplete`, instead of at the age limit). If the lane has
    /// no room either, the parent waits for the age limit, as before.
    #[cold]
    #[inline(never)]
    fn slab_full(&self, cx: Cx<'_>, arg: &StartArg, pxn: bool) {
        self.counters.drop_slab_full.incr();
        self.writer.wake();
        if arg.parent == 0 || pxn {
            return;
        }
        let kind = arg.kind;
        // No need to count a failure: the start is counted already, and
        // what it costs the parent is bounded by the age limit.
        let _ = self.log.push_with_in(cx.me, |slot| {
            slot.write(Entry {
                id: arg.parent,
                t: now_ns(),
                op: Op::Refused(kind),
            })
        });
    }

    /// A start whose entry found no room: its slot goes back at once (the
    /// ID never reaches NCCL) and the event counts as completed and lost.
    #[cold]
    #[inline(never)]
    fn start_lost(&self, cx: Cx<'_>, id: EventId) {
        drop(self.events.retire(id));
        self.counters.drop_ring_full.incr_in(cx.me);
        self.writer.wake();
    }

    /// Which stream an event goes to, or Err if it must be dropped.
    #[inline(always)]
    fn resolve_ctx(&self, cx: Cx<'_>, ctx: u64, kind: Kind, pxn: bool) -> Result<u64, ()> {
        let c = &self.counters;
        if ctx == CONTEXT_OVERFLOW {
            return Ok(DETACHED);
        }
        let Some(id) = EventId::from_raw(ctx) else {
            rare(&c.drop_null_context);
            return Err(());
        };
        if pxn {
            rare(&c.foreign_contexts);
            return Ok(DETACHED);
        }
        // Read before the lookup: a finalize in between bumps it, so what
        // the cache keeps below is never newer than the epoch it is filed under.
        let epoch = self.finalize_epoch.load(Ordering::Acquire);
        if ctx_cache::hit(cx.l, ctx, epoch) {
            return Ok(ctx);
        }
        self.resolve_ctx_slow(cx, ctx, id, kind, epoch)
    }

    #[inline(never)]
    fn resolve_ctx_slow(
        &self,
        cx: Cx<'_>,
        ctx: u64,
        id: EventId,
        kind: Kind,
        epoch: u64,
    ) -> Result<u64, ()> {
        let c = &self.counters;
        match self
            .ctxs
            .lookup(id)
            .map(|x| x.finalized.load(Ordering::Acquire))
        {
            Ok(false) => {
                ctx_cache::keep(cx.l, ctx, epoch);
                Ok(ctx)
            }
            // A proxy shared by split communicators keeps reporting ProxyCtrl
            // with its creator's context after that one's finalize: real
            // activity, recorded on the detached stream.
            Ok(true) | Err(Miss::Stale) if kind == Kind::ProxyCtrl => {
                c.late_context_events.incr();
                Ok(DETACHED)
            }
            Ok(true) | Err(Miss::Stale) => {
                c.drop_after_finalize.incr();
                Err(())
            }
            Err(Miss::Foreign | Miss::Busy) => {
                rare(&c.foreign_contexts);
                Ok(DETACHED)
            }
        }
    }

    /// Children an event waits for, given the mask now in force (which
    /// children NCCL sends, and under which mask bits: [`Info::children`]).
    #[inline(always)]
    fn expected_children(&self, arg: &StartArg) -> u8 {
        if self.mask() as u64 & u64::from(arg.children_gate) != 0 {
            arg.children
        } else {
            0
        }
    }

    /// NCCL's stopEvent.
    #[inline(always)]
    pub fn stop(&'static self, handle: u64) {
        local::with(|cx| self.log_call(cx, handle, || Op::Stop))
    }

    /// NCCL's recordEventState.
    #[inline(always)]
    pub fn record(&'static self, handle: u64, s: StateArg) {
        local::with(|cx| self.log_call(cx, handle, move || Op::State(s)))
    }

    /// A stop or a state: the handle checked, then logged (`op` makes the
    /// payload in the lane's slot, the clock read last: module comment).
    #[inline(always)]
    fn log_call(&'static self, cx: Cx<'_>, handle: u64, op: impl FnOnce() -> Op) {
        let c = &self.counters;
        let Some(id) = EventId::from_raw(handle) else {
            return rare(&c.null_handles);
        };
        match self.events.check(id) {
            Ok(()) => {}
            Err(Miss::Stale | Miss::Busy) => return rare(&c.stale_handles),
            Err(Miss::Foreign) => return rare(&c.unknown_handles),
        }
        if !self.log.push_with_in(cx.me, |slot| {
            slot.write(Entry {
                id: handle,
                t: now_ns(),
                op: op(),
            })
        }) {
            self.call_lost(cx);
        }
    }

    #[cold]
    #[inline(never)]
    fn call_lost(&self, cx: Cx<'_>) {
        self.counters.log_lost.incr_in(cx.me);
        self.writer.wake();
    }

    #[inline(always)]
    fn check_pressure(&self, l: Option<&Local>) {
        let due = l.is_some_and(|l| {
            let v = l.pressure.get();
            l.pressure.set(if v == 0 { 255 } else { v - 1 });
            v == 0
        });
        if due && self.events.live() > self.cfg.high_water {
            self.writer.wake();
        }
    }
}

/// Counts an event of a path NCCL does not take in a healthy job (a bad
/// handle, an unknown type, a foreign parent...): out of line, so that its
/// code (a thread-index lookup and a striped add) stays off the cache lines
/// of the hot path.
#[cold]
#[inline(never)]
fn rare(c: &evring::Counter) {
    c.incr();
}

/// The last context each thread found live and not finalized, with the
/// finalize epoch it was checked under: a thread that keeps starting events
/// on one communicator validates its context once per finalize anywhere,
/// instead of taking a reference on the context's slot (a cache line every
/// thread of the communicator would share) on every start.
pub(crate) mod ctx_cache {
    use crate::local::Local;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The first finalize epoch of a new engine: engines of one process (a
    /// forked child builds its own) never share an epoch value, so an entry
    /// left by an earlier engine never matches (unless 2^32 finalizes).
    pub fn first_epoch() -> u64 {
        static ENGINES: AtomicU64 = AtomicU64::new(0);
        (ENGINES.fetch_add(1, Ordering::Relaxed) + 1) << 32
    }

    #[inline]
    pub fn hit(l: Option<&Local>, ctx: u64, epoch: u64) -> bool {
        l.is_some_and(|l| l.ctx.get() == (ctx, epoch))
    }

    #[inline]
    pub fn keep(l: Option<&Local>, ctx: u64, epoch: u64) {
        if let Some(l) = l {
            l.ctx.set((ctx, epoch));
        }
    }
}
