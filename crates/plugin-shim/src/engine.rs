//! The lifetime policy: how NCCL's calls map onto slab IDs, references and
//! completions. Everything that decides when an event ends lives here and in
//! `node.rs`; the C entry points only convert arguments.
//!
//! 1. Every start gets an ID (never a pointer); a refused start is counted by reason.
//! 2. A child looks its parent up by ID. Live parent: the child takes a
//!    reference. Stale parent: the child is recorded as a late child with the
//!    parent's ID. Foreign (PXN, garbage): recorded detached, never dereferenced.
//! 3. An event completes when it is stopped and holds no references; its
//!    record goes to the ring, its slot is retired, and its parent's reference
//!    is released (which may complete the parent in turn).
//! 4. Waiting is bounded: the writer thread's sweep completes stopped events
//!    older than the age limit (twice it for a parent whose started child
//!    still runs), and the oldest events when the slab passes its high-water
//!    mark; finalize and process exit complete the rest.
//! 5. Contexts are IDs in their own slab; `init` never fails.
//! 6. The mask is process-wide: written through NCCL's pointer, kept for
//!    run-time changes.
//! 7. Everything is counted (`counters.rs`).

use crate::clock::now_ns;
use crate::compact::Head;
use crate::config::Config;
use crate::counters::{Counters, StatsV1};
use crate::held::{self, Visit};
use crate::local::{self, Cx, Local};
use crate::model::{Info, Kind, StartArg, StateArg};
use crate::node::{flag, Node, Stop};
use crate::record::{Compact, Folded};
use crate::strings::Memo;
use crate::writer::{StreamMeta, Writer};
use evring::{EventId, Miss, RecordRing, Ref, TaggedSlab};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU64, Ordering};

/// Internal flag: the event holds a reference on its parent.
const LINKED: u32 = 1 << 31;

/// Stream of events whose context is not ours (PXN) or unknown.
pub const DETACHED: u64 = 0;

/// One communicator as NCCL announced it in `init`.
pub struct Ctx {
    pub meta: StreamMeta,
    pub finalized: AtomicBool,
}

pub struct Engine {
    pub cfg: Config,
    pub events: TaggedSlab<Node>,
    pub ctxs: TaggedSlab<Ctx>,
    pub ring: RecordRing<Compact>,
    pub counters: Counters,
    /// Mask we want (and wrote); NCCL's own int is updated alongside.
    mask: AtomicI32,
    mask_ptr: AtomicPtr<i32>,
    active: AtomicI64,
    /// Inits answered with `CONTEXT_OVERFLOW` and not yet finalized.
    overflow_open: AtomicI64,
    /// Bumped by every finalize: invalidates the per-thread context cache.
    /// Starts at a value no earlier engine of this process used.
    finalize_epoch: AtomicU64,
    pub pid: i32,
    pub writer: Writer,
    logger: AtomicPtr<()>,
    /// The exit handler ran: nothing is written after its footers.
    exited: AtomicBool,
}

/// The process's engine. A pointer rather than a `OnceLock` so that a forked
/// child can drop its parent's engine (see `fork.rs`): the child never touches
/// the parent's state, whose locks other threads may have held at fork time.
static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(std::ptr::null_mut());

impl Engine {
    /// The process-wide engine, built on first use from the environment.
    /// Only `init` calls this: settings are read at the first init.
    pub fn get() -> &'static Engine {
        if let Some(e) = Self::try_get() {
            return e;
        }
        let fresh = Box::into_raw(Box::new(Engine::new(Config::from_env_warn())));
        match ENGINE.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                crate::exit::register();
                crate::fork::register();
                // SAFETY: just published; engines are never freed.
                let e = unsafe { &*fresh };
                // Settings given before this first init, taken by the engine
                // that won (a losing candidate must not consume them).
                let pending = crate::config::take_pending();
                if let Some(m) = pending.mask {
                    e.set_mask(m);
                }
                if let Some(on) = pending.output {
                    e.writer.set_enabled(on);
                }
                e
            }
            Err(winner) => {
                // SAFETY: `fresh` was never shared; `winner` is published and
                // never freed.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*winner
                }
            }
        }
    }

    /// The engine if it exists already (for entry points that must not create it).
    #[inline]
    pub fn try_get() -> Option<&'static Engine> {
        let p = ENGINE.load(Ordering::Acquire);
        // SAFETY: non-null values are published engines, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// In a forked child: forget the parent's engine (leaked, never touched
    /// again) so the child's first init builds its own. Async-signal-safe.
    pub(crate) fn forget_after_fork() {
        ENGINE.store(std::ptr::null_mut(), Ordering::Release);
    }

    fn new(cfg: Config) -> Engine {
        let engine = Engine {
            events: TaggedSlab::new(cfg.capacity),
            ctxs: TaggedSlab::new(cfg.max_comms),
            ring: RecordRing::new(cfg.ring),
            counters: Counters::default(),
            mask: AtomicI32::new(cfg.mask),
            mask_ptr: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicI64::new(0),
            overflow_open: AtomicI64::new(0),
            finalize_epoch: AtomicU64::new(ctx_cache::first_epoch()),
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            writer: Writer::new(cfg.prefix.clone(), crate::fork::is_child(), true),
            logger: AtomicPtr::new(std::ptr::null_mut()),
            exited: AtomicBool::new(false),
            cfg,
        };
        if let Some(m) = &engine.cfg.metrics {
            engine
                .writer
                .add_sink(Box::new(crate::metrics::MetricsSink::new(
                    m.clone(),
                    crate::host::name().to_string(),
                    engine.pid,
                )));
        }
        engine
    }

    pub fn stats(&self) -> StatsV1 {
        self.counters
            .snapshot(self.events.live(), self.ring.pushed() + self.ring.dropped())
    }

    pub fn mask(&self) -> i32 {
        self.mask.load(Ordering::Relaxed)
    }

    /// Changes the activation mask at run time (NCCL applies it to operations
    /// enqueued afterwards).
    pub fn set_mask(&self, mask: i32) {
        self.mask.store(mask, Ordering::Relaxed);
        let p = self.mask_ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `p` is the pointer NCCL passed to init: a live, aligned
            // process-wide int that NCCL itself reads atomically.
            unsafe { AtomicI32::from_ptr(p) }.store(mask, Ordering::Relaxed);
        }
    }

    pub fn logger(&self) -> crate::abi::Logger {
        let p = self.logger.load(Ordering::Acquire);
        if p.is_null() {
            None
        } else {
            // SAFETY: only ever stored from a non-null `Logger` function pointer.
            Some(unsafe { std::mem::transmute::<*mut (), crate::log::LogFn>(p) })
        }
    }

    // ---- init / finalize -------------------------------------------------

    /// NCCL's init: returns the context ID (0 only when disabled). Never
    /// waits on the writer: the trace file is opened by the writer thread.
    pub fn init(
        &'static self,
        mask_ptr: *mut i32,
        meta: StreamMeta,
        logfn: crate::abi::Logger,
    ) -> u64 {
        self.counters.inits.incr();
        if let Some(f) = logfn {
            self.logger.store(f as *mut (), Ordering::Release);
        }
        if self.cfg.disabled {
            return 0;
        }
        if !mask_ptr.is_null() && mask_ptr.is_aligned() {
            self.mask_ptr.store(mask_ptr, Ordering::Release);
            self.set_mask(self.mask());
        }
        self.writer.ensure_started(self);
        let ctx = Ctx {
            meta: meta.clone(),
            finalized: AtomicBool::new(false),
        };
        let id = match self.ctxs.insert(ctx) {
            Ok(id) => id,
            Err(full) => {
                self.retire_finalized_contexts();
                match self.ctxs.insert(full.0) {
                    Ok(id) => id,
                    Err(_) => return self.overflow_init(),
                }
            }
        };
        self.active.fetch_add(1, Ordering::AcqRel);
        self.writer.open(id.get(), meta);
        id.get()
    }

    /// The context registry is full: the communicator's events go to the
    /// detached stream. Warned at the 1st, 2nd, 4th, 8th... refusal, not at
    /// every one (a job creating thousands of communicators printed 981 lines).
    fn overflow_init(&self) -> u64 {
        self.counters.context_full.incr();
        let n = self.counters.context_full.get();
        if n.is_power_of_two() {
            crate::log::warn(
                self,
                &format!(
                    "context registry full ({} slots, EVRING_MAX_COMMS); events go to the detached stream ({n} inits so far)",
                    self.cfg.max_comms
                ),
            );
        }
        self.overflow_open.fetch_add(1, Ordering::AcqRel);
        self.active.fetch_add(1, Ordering::AcqRel);
        CONTEXT_OVERFLOW
    }

    /// NCCL's finalize: completes the context's open events and asks the
    /// writer for its footer. Costs one scan of the event slots plus at most
    /// `FINALIZE_WAIT` of waiting for the footer: never the writer's I/O, never
    /// other communicators' backlog. Unknown, garbage and repeated contexts are
    /// refused and counted (`bad_contexts`).
    pub fn finalize(&'static self, ctx: u64) {
        if ctx == CONTEXT_OVERFLOW {
            // Only as many overflow finalizes as overflow inits were handed out.
            let ok = self
                .overflow_open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n > 0).then(|| n - 1)
                })
                .is_ok();
            if !ok {
                self.counters.bad_contexts.incr();
                return;
            }
            self.counters.finalizes.incr();
            self.context_closed(None);
            return;
        }
        let won = EventId::from_raw(ctx)
            .and_then(|id| {
                self.ctxs
                    .with(id, |c| !c.finalized.swap(true, Ordering::AcqRel))
                    .ok()
            })
            .unwrap_or(false);
        if !won {
            self.counters.bad_contexts.incr();
            return;
        }
        // Release, after the flag: a start that sees the new epoch misses its
        // context cache and then sees the flag.
        self.finalize_epoch.fetch_add(1, Ordering::Release);
        self.counters.finalizes.incr();
        self.force_where(|n| n.ctx == ctx, flag::FORCED_FINALIZE);
        self.context_closed(Some(ctx));
        crate::log::summary(self, ctx);
    }

    /// One communicator fewer; the last one also completes whatever is still
    /// live (nothing may stay live once no communicator is open).
    fn context_closed(&'static self, ctx: Option<u64>) {
        let last = self.active.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.force_where(|_| true, flag::FORCED_FINALIZE);
        }
        self.writer.close(ctx, last, self);
        if last {
            self.retire_finalized_contexts();
            #[cfg(evring_ablate = "selftime")]
            crate::selftime::dump();
        }
    }

    /// Communicators initialised and not finalized.
    pub fn open_comms(&self) -> i64 {
        self.active.load(Ordering::Acquire)
    }

    fn retire_finalized_contexts(&self) {
        let done: Vec<EventId> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.finalized.load(Ordering::Acquire))
            .map(|(id, _)| id)
            .collect();
        for id in done {
            drop(self.ctxs.retire(id));
        }
    }

    /// Process exit without finalize: complete everything, then let the
    /// writer write every stream's footer. Waits for the writer only while it
    /// makes progress (`writer::Writer::exit`); nothing is written afterwards,
    /// so the footers are the last lines of every file.
    pub fn exit(&'static self) {
        if self.exited.swap(true, Ordering::AcqRel) {
            return;
        }
        self.force_where(|_| true, flag::FORCED_FINALIZE);
        self.writer.exit(self);
    }

    // ---- events ----------------------------------------------------------

    /// NCCL's startEvent: returns the handle to store in `*eHandle` (0 = dropped).
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
            // Cost attribution build (`floor.rs`): the call is only logged.
            #[cfg(evring_ablate = "floor")]
            let id = crate::floor::start(self, cx, ctx, arg.as_ref());
            #[cfg(not(evring_ablate = "floor"))]
            let id = self.start_in(cx, ctx, arg.as_ref());
            log(arg.as_ref(), id);
            id
        })
    }

    fn start_in(&'static self, cx: Cx<'_>, ctx: u64, arg: Option<&StartArg>) -> u64 {
        let h = cx.held();
        let c = &self.counters;
        c.start_calls.incr_in(cx.me);
        let Some(arg) = arg else {
            c.drop_unknown_type.incr_in(cx.me);
            return 0;
        };
        let mut flags = arg.flags;
        if flags & flag::BAD_STRING != 0 {
            c.bad_strings.incr();
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
        let mut parent_ref = None;
        if let Some(pid) = EventId::from_raw(arg.parent) {
            if pxn {
                flags |= flag::FOREIGN_PARENT;
                c.foreign_parents.incr();
            } else {
                let adopted = match held::visit(h, &self.events, pid, |n| (n.adopt(), false)) {
                    Some(Visit::Kept(ok) | Visit::Taken(_, ok)) => Ok(ok),
                    None => self.events.lookup(pid).map(|n| {
                        let ok = n.adopt();
                        held::put(h, &self.events, pid, n);
                        ok
                    }),
                };
                match adopted {
                    Ok(true) => {
                        flags |= LINKED;
                        parent_ref = Some(pid);
                    }
                    Ok(false) | Err(Miss::Stale | Miss::Busy) => {
                        flags |= flag::LATE_CHILD;
                        c.late_children.incr();
                    }
                    Err(Miss::Foreign) => {
                        flags |= flag::FOREIGN_PARENT;
                        c.foreign_parents.incr();
                    }
                }
            }
        }
        let expect = self.expected_children(arg);
        // Built in its slot (not on the stack and then copied in).
        let node = || {
            Node::new(arg.kind, stream, arg.parent, arg.rank, arg.info, flags)
                .expect_children(expect)
        };
        match self.events.insert_and_get_with_in(cx.me, node) {
            Ok((id, r)) => {
                // Held for this thread's next call (its stop, its states, a
                // child's start under it).
                held::put(h, &self.events, id, r);
                self.check_pressure(cx.l);
                id.get()
            }
            Err(_) => {
                c.drop_slab_full.incr();
                self.writer.wake();
                if let Some(p) = parent_ref {
                    self.release(cx, p);
                }
                0
            }
        }
    }

    /// Which stream an event goes to, or Err if it must be dropped.
    fn resolve_ctx(&self, cx: Cx<'_>, ctx: u64, kind: Kind, pxn: bool) -> Result<u64, ()> {
        let c = &self.counters;
        if ctx == CONTEXT_OVERFLOW {
            return Ok(DETACHED);
        }
        let Some(id) = EventId::from_raw(ctx) else {
            c.drop_null_context.incr();
            return Err(());
        };
        if pxn {
            c.foreign_contexts.incr();
            return Ok(DETACHED);
        }
        // Read before the lookup: a finalize in between bumps it, so what
        // the cache keeps below is never newer than the epoch it is filed under.
        let epoch = self.finalize_epoch.load(Ordering::Acquire);
        if ctx_cache::hit(cx.l, ctx, epoch) {
            return Ok(ctx);
        }
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
                c.foreign_contexts.incr();
                Ok(DETACHED)
            }
        }
    }

    /// Children an event waits for, given the mask now in force (which
    /// children NCCL sends, and under which mask bits: [`Info::children`]).
    #[inline(always)]
    fn expected_children(&self, arg: &StartArg) -> u32 {
        if self.mask() as u64 & u64::from(arg.children_gate) != 0 {
            u32::from(arg.children)
        } else {
            0
        }
    }

    /// NCCL's stopEvent.
    pub fn stop(&'static self, handle: u64) {
        #[cfg(evring_ablate = "floor")]
        return crate::floor::call(self, handle, None);
        #[cfg(not(evring_ablate = "floor"))]
        local::with_local(|l| self.stop_in(l, handle))
    }

    fn stop_in(&'static self, l: Option<&Local>, handle: u64) {
        let Some(id) = EventId::from_raw(handle) else {
            self.counters.null_handles.incr();
            return;
        };
        // Held by this thread (it started the event): stopped in place;
        // otherwise looked up and held if it must wait for children. The
        // reference is taken when this stop completes the event (to retire
        // it) or when the event needs nothing more (to drop it).
        let now = now_ns();
        let stopped = held::with_event(l.map(|l| &l.held), &self.events, id, |n| {
            let r = n.stop(now);
            let want = r != Stop::Waiting;
            (r, want)
        });
        let (r, node) = match stopped {
            Ok(x) => x,
            Err(Miss::Stale | Miss::Busy) => return self.counters.stale_handles.incr(),
            Err(Miss::Foreign) => return self.counters.unknown_handles.incr(),
        };
        match r {
            // Retire through the reference already held (one atomic step
            // fewer than retiring by ID).
            Stop::Complete => {
                // The ring crate's thread index: only a completion needs it.
                local::thread(l, |me| {
                    if let Some(Ok(node)) = node.map(|n| Ref::retire_in(n, me)) {
                        self.complete_retired(Cx::of(l, me), id, node);
                    }
                });
            }
            Stop::Waiting => {}
            Stop::Again => self.counters.double_stops.incr(),
            Stop::Done => self.counters.stale_handles.incr(),
        }
    }

    /// NCCL's recordEventState.
    pub fn record(&'static self, handle: u64, s: StateArg) {
        #[cfg(evring_ablate = "floor")]
        return crate::floor::call(self, handle, Some(s));
        #[cfg(not(evring_ablate = "floor"))]
        local::with_local(|l| self.record_in(l.map(|l| &l.held), handle, s))
    }

    fn record_in(&'static self, h: Option<&held::Held>, handle: u64, s: StateArg) {
        let Some(id) = EventId::from_raw(handle) else {
            self.counters.null_handles.incr();
            return;
        };
        let applied = held::with_event(h, &self.events, id, |n| {
            if !n.kind.accepts_state(s.state) {
                self.counters.unknown_states.incr();
            } else if !n.record(s, now_ns()) {
                self.counters.record_after_stop.incr();
            }
            ((), false)
        });
        match applied {
            Ok(_) => {}
            Err(Miss::Stale | Miss::Busy) => self.counters.stale_handles.incr(),
            Err(Miss::Foreign) => self.counters.unknown_handles.incr(),
        }
    }

    // ---- completion ------------------------------------------------------

    /// Completes `id`, which this thread has just moved to DONE.
    fn complete(&'static self, cx: Cx<'_>, id: EventId) {
        if let Some(node) = self.events.retire(id) {
            self.complete_retired(cx, id, node);
        }
    }

    /// Completes `id`, which this thread has just retired (`node` is the
    /// retire's reference), and walks up the parents whose last reference
    /// that released.
    fn complete_retired(&'static self, cx: Cx<'_>, mut id: EventId, mut node: Ref<'static, Node>) {
        loop {
            // The record is written straight into the ring's slot (no copy
            // on the stack); `LINKED` is ours, not the record's.
            let n: &Node = &node;
            let head = Head::of(id.get(), n);
            let pushed = self
                .ring
                .push_with_in(cx.me, move |slot| head.write(n, LINKED, |c| slot.write(c)));
            let done = head.folded();
            if !pushed {
                self.count_ring_full(cx.me);
            }
            // The last reference: the node is dropped and its slot freed here.
            node.release_in(cx.me);
            let Some(p) = EventId::from_raw(done.parent).filter(|_| done.flags & LINKED != 0)
            else {
                return;
            };
            // The parent is usually held by this thread (it started it):
            // folded in place, its reference taken only to complete it.
            let h = cx.held();
            let pn = match held::visit(h, &self.events, p, |pn| {
                let complete = fold_child(pn, &done);
                (complete, complete)
            }) {
                Some(Visit::Taken(pn, _)) => pn,
                // Still waiting for children or its stop: stays held.
                Some(Visit::Kept(_)) => return,
                None => {
                    let Ok(pn) = self.events.lookup(p) else {
                        return;
                    };
                    if !fold_child(&pn, &done) {
                        // Kept for this thread's next call (often the
                        // parent's next child or its stop).
                        held::put(h, &self.events, p, pn);
                        return;
                    }
                    pn
                }
            };
            match Ref::retire_in(pn, cx.me) {
                Ok(pn) => (id, node) = (p, pn),
                Err(_) => return,
            }
        }
    }

    /// A record the ring had no room for (out of line: nothing of it is
    /// computed on the completion path unless it happens).
    #[cold]
    #[inline(never)]
    fn count_ring_full(&self, me: evring::Me<'_>) {
        self.counters.drop_ring_full.incr_in(me);
    }

    /// Gives back a reference taken on `parent` for a child that never came
    /// to be (its insert failed).
    fn release(&'static self, cx: Cx<'_>, parent: EventId) {
        if self.events.get(parent).is_some_and(|n| n.release(0)) {
            self.complete(cx, parent);
        }
    }

    /// Forces completion of every live event matching `pred`.
    fn force_where(&'static self, pred: impl Fn(&Node) -> bool, why: u32) {
        let ids: Vec<EventId> = self
            .events
            .iter()
            .filter(|(_, n)| pred(n))
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            self.force(id, why);
        }
    }

    fn force(&'static self, id: EventId, why: u32) {
        if self.events.with(id, |n| n.force(why)) != Ok(true) {
            return;
        }
        let c = &self.counters;
        match why {
            flag::FORCED_AGE => c.forced_age.incr(),
            flag::FORCED_PRESSURE => c.forced_pressure.incr(),
            _ => c.forced_finalize.incr(),
        }
        let incomplete = self
            .events
            .with(id, |n| {
                n.flags.load(Ordering::Relaxed) & flag::CHILDREN_INCOMPLETE != 0
            })
            .unwrap_or(false);
        if incomplete {
            c.children_incomplete.incr();
        }
        local::with(|cx| self.complete(cx, id));
    }

    #[inline]
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

    /// Bounded waiting, run by the writer thread: completes stopped events
    /// older than the age limit, and under pressure the oldest events (those
    /// only waiting for children first) until the low-water mark. A parent
    /// one of whose started children is still running gets twice the limit:
    /// that child normally ends (or is forced, being younger) first and
    /// completes the parent, which would otherwise be forced first whenever a
    /// sweep falls between the two reaching the limit.
    pub fn sweep(&'static self) {
        let now = now_ns();
        let pressure = self.events.live() > self.cfg.high_water;
        let mut aged = Vec::new();
        let mut candidates = Vec::new();
        for (id, n) in self.events.iter() {
            let stopped = n.is_stopped();
            let limit = if n.children_running() {
                self.cfg.max_age_ns.saturating_mul(2)
            } else {
                self.cfg.max_age_ns
            };
            if stopped && now.saturating_sub(n.start_ns) > limit {
                aged.push((n.start_ns, id));
            } else if pressure {
                candidates.push((!stopped, n.start_ns, id));
            }
        }
        // Youngest first: a forced child releases its parent, which then
        // completes normally if nothing else holds it.
        aged.sort_unstable_by_key(|&(start, _)| std::cmp::Reverse(start));
        for (_, id) in aged {
            self.force(id, flag::FORCED_AGE);
        }
        if pressure {
            candidates.sort_unstable();
            let excess = self.events.live().saturating_sub(self.cfg.low_water) as usize;
            for (_, _, id) in candidates.into_iter().take(excess) {
                self.force(id, flag::FORCED_PRESSURE);
            }
        }
    }
}

/// Context handed out when the registry is full: events go to the detached
/// stream. Well-formed for no slab (all high bits set), never 0.
pub const CONTEXT_OVERFLOW: u64 = u64::MAX;

/// Folds a completed child's GPU window into its parent, then drops the
/// child's reference with its end time; true if the parent must now be
/// completed.
/// (`flag::CHILD_EXTENDED` is derived when the parent's record is built.)
fn fold_child(p: &Node, child: &Folded) -> bool {
    // Each GPU update is skipped when it would change nothing (a Coll folds
    // in one KernelCh per channel: only the first sets GPU_TIMED, only a
    // later end moves the maxima), sparing a locked instruction; the values
    // only ever move one way, so a load that is stale can only cause a
    // redundant update, never a lost one. The child's end goes in with its
    // reference drop (`Node::release`).
    if child.flags & flag::GPU_TIMED != 0 {
        let gpu_start = child.gpu_start;
        if gpu_start != 0 && gpu_start < p.gpu_start.load(Ordering::Relaxed) {
            p.gpu_start.fetch_min(gpu_start, Ordering::Relaxed);
        }
        max_into(&p.gpu_end, child.gpu_end);
        if p.flags.load(Ordering::Relaxed) & flag::GPU_TIMED == 0 {
            p.set_flag(flag::GPU_TIMED);
        }
    }
    p.release(child.end_ns)
}

#[inline]
fn max_into(a: &AtomicU64, v: u64) {
    if v > a.load(Ordering::Relaxed) {
        a.fetch_max(v, Ordering::Relaxed);
    }
}

/// The last context each thread found live and not finalized, with the
/// finalize epoch it was checked under: a thread that keeps starting events
/// on one communicator validates its context once per finalize anywhere,
/// instead of taking a reference on the context's slot (a cache line every
/// thread of the communicator would share) on every start.
mod ctx_cache {
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
