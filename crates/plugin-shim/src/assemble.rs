//! The assembler: events put together from the call log, on the writer
//! thread, by one thread only.
//!
//! NCCL's threads only log their calls (`hot.rs`: an ID from the slab, a
//! clock read, one entry in the thread's own lane). Everything that relates
//! one event to another happens here, over plain data, with no atomics:
//!
//! 1. **Parents.** A start names its parent by ID. Known here: the child is
//!    linked (claims one of the children the parent expects, else adds one).
//!    Unknown here: the slab tells why ([`Slots::check`]). *Live*: the
//!    parent's start is still in another thread's lane (lanes are drained
//!    one after another, so a child can come first); a placeholder stands
//!    in for it until it comes. *Stale*: the parent has completed; the
//!    child is a late child. *Foreign*: not an ID of this instance.
//! 2. **Order.** Lanes are drained one after another, so entries of
//!    different threads come out of time order; [`Assembler::advance`]
//!    applies them in the order of their clock reads, and only those read
//!    before a pass began (less a margin): every entry logged before then
//!    has been drained, so an event's fate is decided by the calls that
//!    came before it, as it was when NCCL's threads decided it at the call.
//!    A child started before its parent completed is linked; one started
//!    after is a late child.
//! 3. **Completion** = stopped, no expected child missing, no linked child
//!    running. The record goes out, the slot is retired (its ID is stale
//!    from then on, at the call as here), and the parent folds in the
//!    child's end and GPU window, which may complete the parent in turn.
//! 4. **Bounded waiting**: [`Assembler::sweep`] completes stopped events
//!    older than the age limit (twice it while a started child still runs),
//!    youngest first, and under pressure the oldest events; finalize and
//!    exit complete the rest ([`Assembler::force_where`]).
//! 5. Stops and states of events no longer here (completed by a sweep
//!    while NCCL still held them) are counted as stale handles; a second
//!    stop, a state after the stop or a state the kind does not take are
//!    counted too, as they were at the call before.
//!
//! The machine is pure: entries in, records out ([`Assembler::take`]). The
//! slab is reached only through [`Slots`], so tests drive it with a fake,
//! and the simulator's replays feed it entries directly.

use crate::clock;
use crate::counters::Counters;
use crate::entry::{Entry, Op, Start};
use crate::model::{Info, Kind, StateArg};
use crate::record::{flag, pack_state, unpack_state, STATES};
use crate::record::{Record, Timing};
use crate::symbols::Sym;
use evring::Miss;

/// The slab as the assembler needs it: where an ID's slot is, classify an
/// ID, retire a completed event's slot.
pub trait Slots {
    /// Slots in the slab.
    fn capacity(&self) -> usize;
    /// The slot an ID of this slab names (any generation), else `None`.
    fn index(&self, id: u64) -> Option<usize>;
    fn check(&self, id: u64) -> Result<(), Miss>;
    fn retire(&self, id: u64);
}

impl Slots for evring::TaggedSlab<()> {
    fn capacity(&self) -> usize {
        evring::TaggedSlab::capacity(self)
    }

    #[inline]
    fn index(&self, id: u64) -> Option<usize> {
        evring::TaggedSlab::slot_index(self, evring::EventId::from_raw(id)?)
    }

    #[inline]
    fn check(&self, id: u64) -> Result<(), Miss> {
        match evring::EventId::from_raw(id) {
            Some(id) => evring::TaggedSlab::check(self, id),
            None => Err(Miss::Foreign),
        }
    }

    #[inline]
    fn retire(&self, id: u64) {
        if let Some(id) = evring::EventId::from_raw(id) {
            drop(evring::TaggedSlab::retire(self, id));
        }
    }
}

/// The children an event of kind `parent` expects (`Info::children`) are
/// of kind `child`.
fn expects(parent: Kind, child: Kind) -> bool {
    matches!(
        (parent, child),
        (Kind::CollApi, Kind::Coll)
            | (Kind::P2pApi, Kind::P2p)
            | (Kind::Coll | Kind::P2p, Kind::KernelCh)
    )
}

/// An event between its first entry and its completion.
#[derive(Debug, Clone)]
struct Pending {
    /// Its ID (0: the table's place is empty).
    id: u64,
    /// Its start has been seen (else a placeholder: only children, a stop
    /// or states came so far).
    started: bool,
    kind: Kind,
    ctx: u64,
    parent: u64,
    /// The parent (a key of `events`) this event is linked to.
    linked: bool,
    rank: i32,
    info: Info<Sym>,
    flags: u32,
    /// Its start's time; a placeholder's: its first entry's (its age).
    start_ns: u64,
    /// 0: not stopped.
    stop_ns: u64,
    stopped: bool,
    /// Expected children that have not started yet.
    expect_left: u32,
    /// Linked children started and not completed.
    running: u32,
    /// Children linked so far (a placeholder's count, claimed against the
    /// expected children when its start comes).
    adopted: u32,
    /// Latest end among completed children (0: none).
    child_end: u64,
    /// Raw GPU window (`u64::MAX` / 0: none).
    gpu_start: u64,
    gpu_end: u64,
    states: [u64; STATES],
    n_states: u32,
    state_arg: u64,
}

impl Pending {
    fn placeholder(id: u64, t: u64) -> Pending {
        Pending {
            id,
            started: false,
            kind: Kind::Group,
            ctx: 0,
            parent: 0,
            linked: false,
            rank: 0,
            info: Info::None,
            flags: 0,
            start_ns: t,
            stop_ns: 0,
            stopped: false,
            expect_left: 0,
            running: 0,
            adopted: 0,
            child_end: 0,
            gpu_start: u64::MAX,
            gpu_end: 0,
            states: [0; STATES],
            n_states: 0,
            state_arg: 0,
        }
    }

    fn complete(&self) -> bool {
        self.started && self.stopped && self.expect_left == 0 && self.running == 0
    }

    /// A started child is still running (its parent waits longer).
    fn children_running(&self) -> bool {
        self.stopped && self.running > 0
    }

    /// Links a child of kind `child`. Only the kind the parent expects
    /// claims an expected place (a Coll waits for its KernelCh even when
    /// its ProxyOps come first: NCCL 2.31+ sends KernelCh from a thread of
    /// its own, often after them); a placeholder, whose kind is not known
    /// yet, counts every child and settles at its start.
    fn adopt(&mut self, child: Kind) {
        self.claim(child);
        self.running += 1;
    }

    /// A child of kind `child` takes an expected place if it is one (see
    /// [`adopt`](Self::adopt)): it came, or it was refused at the call.
    fn claim(&mut self, child: Kind) {
        if !self.started || expects(self.kind, child) {
            self.adopted += 1;
            self.expect_left = self.expect_left.saturating_sub(1);
        }
    }

    fn record(&mut self, s: StateArg, t: u64) {
        if let Some(arg) = s.arg {
            self.state_arg = arg;
        }
        // KernelPhase's stop (v7) carries its GPU end as KernelCh's does.
        if s.state == crate::abi::state::KERNEL_CH_STOP
            || s.state == crate::abi::state::KERNEL_PHASE_STOP
        {
            if let Some(g) = s.arg.filter(|&g| g != 0) {
                self.gpu_end = self.gpu_end.max(g);
                self.flags |= flag::GPU_TIMED;
                clock::observe_gpu(g, t);
            }
        }
        let n = self.n_states as usize;
        // A repeat of the last state (a ProxyOp's progress reported in a
        // loop) keeps the first time.
        if n > 0 && n <= STATES && (self.states[n - 1] >> 56) as i32 == s.state {
            return;
        }
        self.n_states = self.n_states.saturating_add(1);
        if n < STATES {
            self.states[n] = pack_state(s.state as u8, t);
        } else {
            self.flags |= flag::STATES_OVERFLOW;
        }
    }
}

/// The pending events, addressed as the slab addresses them: an event's
/// place is its slot's index (at most one ID per slot is pending, since a
/// slot is retired only when its event completes). Laid out whole at the
/// start, so its memory does not grow under load.
#[derive(Default)]
struct Table {
    v: Vec<Pending>,
    n: usize,
}

impl Table {
    fn new(capacity: usize) -> Table {
        Table {
            v: vec![Pending::placeholder(0, 0); capacity],
            n: 0,
        }
    }

    #[inline]
    fn at(&self, id: u64, s: &impl Slots) -> Option<usize> {
        let i = s.index(id)?;
        (self.v.get(i)?.id == id).then_some(i)
    }

    #[inline]
    fn get(&self, id: u64, s: &impl Slots) -> Option<&Pending> {
        self.at(id, s).map(|i| &self.v[i])
    }

    #[inline]
    fn get_mut(&mut self, id: u64, s: &impl Slots) -> Option<&mut Pending> {
        self.at(id, s).map(|i| &mut self.v[i])
    }

    /// Puts `p` at its ID's place (an event left there whose slot was
    /// retired elsewhere, a start lost at the call, is dropped).
    fn insert(&mut self, p: Pending, s: &impl Slots) {
        let Some(slot) = s.index(p.id).and_then(|i| self.v.get_mut(i)) else {
            return;
        };
        if slot.id == 0 {
            self.n += 1;
        }
        *slot = p;
    }

    /// Empties place `i` (its other fields stay: a place is read only
    /// while its `id` is an event's, and `insert` writes it whole).
    #[inline]
    fn free(&mut self, i: usize) {
        self.v[i].id = 0;
        self.n -= 1;
    }

    fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.v.iter().filter(|p| p.id != 0)
    }
}

/// The assembler's state: the events between their first entry and their
/// completion, and the records completed since the last [`take`](Self::take).
#[derive(Default)]
pub struct Assembler {
    events: Table,
    /// Entries drained and not applied yet (`advance`): sorted, the first
    /// `ready` of them due in this pass, the first `cursor` applied.
    held: Vec<Entry>,
    ready: usize,
    cursor: usize,
    out: Vec<Record>,
    completed: u64,
}

impl Assembler {
    /// An assembler for the events of a slab of `capacity` slots.
    pub fn new(capacity: usize) -> Assembler {
        Assembler {
            events: Table::new(capacity),
            ..Assembler::default()
        }
    }

    /// Events started (or named) and not completed.
    pub fn pending(&self) -> usize {
        self.events.n
    }

    /// Events completed so far.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Completed records since the last call, in completion order (a child
    /// before the parent it completes).
    pub fn take(&mut self, into: &mut Vec<Record>) {
        if into.is_empty() {
            // One buffer goes back and forth (`recycle`), not two.
            std::mem::swap(into, &mut self.out);
        } else {
            into.append(&mut self.out);
        }
    }

    /// Gives back a buffer [`take`](Self::take) filled, once written: its
    /// room serves the next records.
    pub fn recycle(&mut self, mut buf: Vec<Record>) {
        buf.clear();
        if self.out.is_empty() && buf.capacity() > self.out.capacity() {
            self.out = buf;
        }
    }

    /// Records waiting to be taken.
    pub fn ready(&self) -> usize {
        self.out.len()
    }

    /// Applies one logged call.
    pub fn apply(&mut self, e: &Entry, slots: &impl Slots, c: &Counters) {
        match &e.op {
            Op::Start(s) => self.start(e.id, e.t, s, slots, c),
            Op::Stop => self.stop(e.id, e.t, slots, c),
            Op::State(s) => self.state(e.id, e.t, *s, slots, c),
            Op::Refused(kind) => self.refused(e.id, e.t, *kind, slots),
        }
    }

    /// A child of `parent` was refused at the call (the slab was full): the
    /// parent stops waiting for it, as if it had come and gone, and its
    /// record says a child is missing. A parent that is gone already (or
    /// not ours) waits for nothing; the refusal is counted at the call.
    fn refused(&mut self, parent: u64, t: u64, child: Kind, slots: &impl Slots) {
        let Ok(p) = self.pending_or_placeholder(parent, t, slots) else {
            return;
        };
        p.claim(child);
        p.flags |= flag::CHILDREN_INCOMPLETE;
        if p.complete() {
            self.finish(parent, None, slots);
        }
    }

    fn start(&mut self, id: u64, t: u64, s: &Start, slots: &impl Slots, c: &Counters) {
        let mut flags = s.flags;
        let mut linked = false;
        if s.parent != 0 && flags & flag::FOREIGN_PARENT == 0 {
            match self.pending_or_placeholder(s.parent, t, slots) {
                Ok(p) => {
                    p.adopt(s.kind);
                    linked = true;
                }
                Err(Miss::Foreign) => {
                    flags |= flag::FOREIGN_PARENT;
                    c.foreign_parents.incr();
                }
                Err(Miss::Stale | Miss::Busy) => {
                    flags |= flag::LATE_CHILD;
                    c.late_children.incr();
                }
            }
        }
        let gpu_start = match s.info {
            Info::KernelCh { gpu_start, .. } | Info::KernelPhase { gpu_start, .. }
                if gpu_start != 0 =>
            {
                gpu_start
            }
            _ => u64::MAX,
        };
        if self.events.get(id, slots).is_none() {
            self.events.insert(Pending::placeholder(id, t), slots);
        }
        let Some(p) = self.events.get_mut(id, slots) else {
            return;
        };
        if p.started {
            // The slab never hands out a live ID twice: a second start under
            // one ID is a logging fault, kept out of the record.
            return;
        }
        p.started = true;
        p.kind = s.kind;
        p.ctx = s.ctx;
        p.parent = s.parent;
        p.linked = linked;
        p.rank = s.rank;
        p.info = s.info;
        p.flags |= flags;
        p.start_ns = t;
        p.gpu_start = p.gpu_start.min(gpu_start);
        // Children that came before the start claim expected places first.
        p.expect_left = u32::from(s.expect).saturating_sub(p.adopted);
        if p.complete() {
            self.finish(id, None, slots);
        }
    }

    /// The pending event `id` names, made a placeholder if the slab still
    /// holds it live (its start is in another lane, not read yet); else why
    /// there is none: stale (completed), foreign (not an ID of this slab).
    fn pending_or_placeholder(
        &mut self,
        id: u64,
        t: u64,
        slots: &impl Slots,
    ) -> Result<&mut Pending, Miss> {
        if self.events.get(id, slots).is_none() {
            slots.check(id)?;
            self.events.insert(Pending::placeholder(id, t), slots);
        }
        self.events.get_mut(id, slots).ok_or(Miss::Foreign)
    }

    /// The event a stop or a state names. Validated at the call, so a miss
    /// here is an event a sweep completed since (counted stale), or one the
    /// slab does not know (counted unknown).
    fn event(&mut self, id: u64, t: u64, slots: &impl Slots, c: &Counters) -> Option<&mut Pending> {
        match self.pending_or_placeholder(id, t, slots) {
            Ok(p) => Some(p),
            Err(Miss::Stale | Miss::Busy) => {
                c.stale_handles.incr();
                None
            }
            Err(Miss::Foreign) => {
                c.unknown_handles.incr();
                None
            }
        }
    }

    fn stop(&mut self, id: u64, t: u64, slots: &impl Slots, c: &Counters) {
        let Some(p) = self.event(id, t, slots, c) else {
            return;
        };
        if p.stopped {
            p.flags |= flag::DOUBLE_STOP;
            c.double_stops.incr();
            return;
        }
        p.stopped = true;
        p.stop_ns = t;
        if p.complete() {
            self.finish(id, None, slots);
        }
    }

    fn state(&mut self, id: u64, t: u64, s: StateArg, slots: &impl Slots, c: &Counters) {
        let Some(p) = self.event(id, t, slots, c) else {
            return;
        };
        if p.started && !p.kind.accepts_state(s.state) {
            c.unknown_states.incr();
        } else if p.stopped {
            c.record_after_stop.incr();
        } else {
            p.record(s, t);
        }
    }

    /// Takes a drained entry, to be applied in time order by [`advance`](Self::advance).
    #[inline]
    pub fn push(&mut self, e: Entry) {
        self.held.push(e);
    }

    /// Entries taken and not applied yet.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Applies, in the order of their clock reads, the entries taken so far
    /// that were read before `read_to`: the time a pass began that drained
    /// every lane, less a margin for a thread preempted between its clock
    /// read and its push (`u64::MAX`: all of them, when nothing more can
    /// come before, at a finalize, a flush or exit). Later ones wait for
    /// the next pass, which may still bring entries read before them.
    ///
    /// At most `limit` entries a call, so that the records they complete
    /// can be written before the next ones are made (the writer calls it
    /// until it returns 0, which ends the pass); returns how many.
    pub fn advance(
        &mut self,
        read_to: u64,
        limit: usize,
        slots: &impl Slots,
        c: &Counters,
    ) -> usize {
        if self.cursor == 0 && self.ready == 0 {
            // Stable: one thread's entries with equal times keep their
            // order. Each lane's run is sorted already; the sort merges
            // the runs.
            self.held.sort_by_key(|e| e.t);
            self.ready = self.held.partition_point(|e| e.t < read_to);
        }
        let end = self.ready.min(self.cursor.saturating_add(limit));
        let held = std::mem::take(&mut self.held);
        for e in &held[self.cursor..end] {
            self.apply(e, slots, c);
        }
        self.held = held;
        let n = end - self.cursor;
        self.cursor = end;
        if n == 0 {
            self.held.drain(..self.ready);
            (self.ready, self.cursor) = (0, 0);
        }
        n
    }

    /// [`advance`](Self::advance) to the end of the pass in one call.
    pub fn advance_all(&mut self, read_to: u64, slots: &impl Slots, c: &Counters) {
        while self.advance(read_to, usize::MAX, slots, c) > 0 {}
    }

    /// Completes `id` (`forced`: why, with the time) and walks up the
    /// parents this completes.
    fn finish(&mut self, mut id: u64, mut forced: Option<(u32, u64)>, slots: &impl Slots) {
        while let Some(i) = self.events.at(id, slots) {
            let p = &self.events.v[i];
            let (linked, parent) = (p.linked, p.parent);
            let rec = record_of(id, p, forced);
            self.events.free(i);
            slots.retire(id);
            self.completed += 1;
            let (end, gpu) = (rec.end_ns, (rec.gpu_start, rec.gpu_end));
            let timed = rec.flags & flag::GPU_TIMED != 0;
            self.out.push(rec);
            if !linked {
                return;
            }
            let Some(pp) = self.events.get_mut(parent, slots) else {
                return;
            };
            if timed {
                if gpu.0 != 0 {
                    pp.gpu_start = pp.gpu_start.min(gpu.0);
                }
                pp.gpu_end = pp.gpu_end.max(gpu.1);
                pp.flags |= flag::GPU_TIMED;
            }
            pp.child_end = pp.child_end.max(end);
            pp.running = pp.running.saturating_sub(1);
            if !pp.complete() {
                return;
            }
            (id, forced) = (parent, None);
        }
    }

    /// Completes every started event `pred` picks (finalize: one context's;
    /// exit and the last finalize: all), each flagged `why`: oldest first,
    /// so a parent goes before the children it was waiting for (flagged
    /// `children_incomplete`). Placeholders go too when `all`: nothing will
    /// come for them.
    pub fn force_where(
        &mut self,
        pred: impl Fn(u64) -> bool,
        all: bool,
        why: u32,
        now: u64,
        slots: &impl Slots,
        c: &Counters,
    ) {
        let mut ids: Vec<(u64, u64)> = self
            .events
            .iter()
            .filter(|p| p.started && pred(p.ctx))
            .map(|p| (p.start_ns, p.id))
            .collect();
        ids.sort_unstable();
        for (_, id) in ids {
            self.force(id, why, now, slots, c);
        }
        if all {
            self.drop_placeholders(|_| true, slots);
        }
    }

    fn force(&mut self, id: u64, why: u32, now: u64, slots: &impl Slots, c: &Counters) {
        let Some(p) = self.events.get(id, slots) else {
            return;
        };
        // Completed by a child forced just before it: not forced itself.
        if p.complete() {
            return self.finish(id, None, slots);
        }
        match why {
            flag::FORCED_AGE => c.forced_age.incr(),
            flag::FORCED_PRESSURE => c.forced_pressure.incr(),
            _ => c.forced_finalize.incr(),
        }
        if p.expect_left + p.running > 0 {
            c.children_incomplete.incr();
        }
        self.finish(id, Some((why, now)), slots);
    }

    /// Placeholders whose start never came: their children are already
    /// written or linked to nothing; the slot is retired.
    fn drop_placeholders(&mut self, old: impl Fn(&Pending) -> bool, slots: &impl Slots) {
        let gone: Vec<u64> = self
            .events
            .iter()
            .filter(|p| !p.started && old(p))
            .map(|p| p.id)
            .collect();
        for id in gone {
            if let Some(i) = self.events.at(id, slots) {
                self.events.free(i);
            }
            slots.retire(id);
        }
    }

    /// Bounded waiting (the writer's sweep): stopped events older than
    /// `max_age_ns` (twice it while a started child still runs) are forced,
    /// youngest first; then, when `excess > 0`, that many of the oldest
    /// events (stopped ones first).
    pub fn sweep(
        &mut self,
        now: u64,
        max_age_ns: u64,
        excess: usize,
        slots: &impl Slots,
        c: &Counters,
    ) {
        let mut aged = Vec::new();
        let mut candidates = Vec::new();
        for p in self.events.iter() {
            let id = p.id;
            if !p.started {
                continue;
            }
            let limit = if p.children_running() {
                max_age_ns.saturating_mul(2)
            } else {
                max_age_ns
            };
            if p.stopped && now.saturating_sub(p.start_ns) > limit {
                aged.push((p.start_ns, id));
            } else if excess > 0 {
                candidates.push((!p.stopped, p.start_ns, id));
            }
        }
        aged.sort_unstable_by(|a, b| b.cmp(a));
        for (_, id) in aged {
            self.force(id, flag::FORCED_AGE, now, slots, c);
        }
        if excess > 0 {
            candidates.sort_unstable();
            for (_, _, id) in candidates.into_iter().take(excess) {
                self.force(id, flag::FORCED_PRESSURE, now, slots, c);
            }
        }
        // A placeholder lives only until its start is drained (one pass of
        // the writer); one this old lost its start.
        let limit = max_age_ns.saturating_mul(4);
        self.drop_placeholders(|p| now.saturating_sub(p.start_ns) > limit, slots);
    }
}

/// The record of `p`, completed now (`forced`: flag and time).
fn record_of(id: u64, p: &Pending, forced: Option<(u32, u64)>) -> Record {
    let mut flags = p.flags;
    if p.stopped {
        flags |= flag::STOPPED;
    }
    if let Some((why, _)) = forced {
        flags |= why;
        if p.expect_left + p.running > 0 {
            flags |= flag::CHILDREN_INCOMPLETE;
        }
    }
    let stop_ns = if p.stopped { p.stop_ns } else { 0 };
    let child_end = p.child_end;
    if stop_ns != 0 && child_end > stop_ns {
        flags |= flag::CHILD_EXTENDED;
    }
    let gpu_start = if p.gpu_start == u64::MAX {
        0
    } else {
        p.gpu_start
    };
    let gpu_end = p.gpu_end;
    let gpu_end_host = if flags & flag::GPU_TIMED != 0 {
        clock::gpu_to_host(gpu_end).unwrap_or(0)
    } else {
        0
    };
    let now = if stop_ns == 0 {
        forced.map_or_else(clock::now_ns, |(_, t)| t)
    } else {
        stop_ns
    };
    let (end_ns, timing) = if gpu_end_host > 0 {
        (now.max(gpu_end_host).max(child_end), Timing::Gpu)
    } else if child_end > now {
        (child_end, Timing::Children)
    } else if stop_ns == 0 {
        (now, Timing::Forced)
    } else {
        (stop_ns, Timing::Host)
    };
    let n = (p.n_states as usize).min(STATES);
    let mut states = [(0u8, 0u64); STATES];
    for (o, &w) in states.iter_mut().zip(&p.states[..n]) {
        *o = unpack_state(w);
    }
    Record {
        id,
        parent: p.parent,
        ctx: p.ctx,
        kind: p.kind,
        rank: p.rank,
        // Symbols back to strings before any sink sees the record.
        info: p.info.resolve(),
        start_ns: p.start_ns,
        stop_ns,
        end_ns: end_ns.max(p.start_ns),
        timing,
        gpu_start,
        gpu_end,
        states,
        n_states: n as u8,
        state_arg: p.state_arg,
        flags,
    }
}

#[cfg(test)]
mod tests;
