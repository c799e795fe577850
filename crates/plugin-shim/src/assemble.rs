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
//! 2. **Completion** = stopped, no expected child missing, no linked child
//!    running, and every lane read past the moment that became true
//!    ([`Assembler::end_pass`]): a child NCCL started on another thread
//!    before that moment has been read by then and linked, as it would
//!    have been at the call; one started after it is a late child, as it
//!    would have been at the call. Then the record goes out, the slot is
//!    retired (its ID is stale from then on, at the call as here), and the
//!    parent folds in the child's end and GPU window, which may complete
//!    the parent in turn.
//! 3. **Bounded waiting**: [`Assembler::sweep`] completes stopped events
//!    older than the age limit (twice it while a started child still runs),
//!    youngest first, and under pressure the oldest events; finalize and
//!    exit complete the rest ([`Assembler::force_where`]).
//! 4. Stops and states of events no longer here (completed by a sweep
//!    while NCCL still held them) are counted as stale handles; a second
//!    stop, a state after the stop or a state the kind does not take are
//!    counted too, as they were at the call before.
//!
//! The machine is pure: entries in, records out ([`Assembler::take`]). The
//! slab is reached only through [`Slots`], so tests drive it with a fake,
//! and the simulator's replays feed it entries directly.

use crate::clock;
use crate::compact::{Compact, Parts};
use crate::counters::Counters;
use crate::entry::{Entry, Op, Start};
use crate::model::{Info, Kind, StateArg};
use crate::node::{flag, pack_state, STATES};
use crate::record::{Record, Timing};
use crate::symbols::Sym;
use evring::Miss;
use rustc_hash::FxHashMap;

/// The slab as the assembler needs it: classify an ID, retire a completed
/// event's slot.
pub trait Slots {
    fn check(&self, id: u64) -> Result<(), Miss>;
    fn retire(&self, id: u64);
}

impl Slots for evring::TaggedSlab<()> {
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

/// An event between its first entry and its completion.
#[derive(Debug, Clone)]
struct Pending {
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
    /// Time of the first entry (a placeholder's age).
    seen_ns: u64,
    /// When it became complete (its stop, or the end of the child that
    /// completed it): a child started later is a late child, as it would
    /// have been at the call.
    complete_at: u64,
}

impl Pending {
    fn placeholder(t: u64) -> Pending {
        Pending {
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
            seen_ns: t,
            complete_at: 0,
        }
    }

    fn complete(&self) -> bool {
        self.started && self.stopped && self.expect_left == 0 && self.running == 0
    }

    /// A started child is still running (its parent waits longer).
    fn children_running(&self) -> bool {
        self.stopped && self.running > 0
    }

    fn adopt(&mut self) {
        self.adopted += 1;
        if self.expect_left > 0 {
            self.expect_left -= 1;
        }
        self.running += 1;
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

/// The assembler's state: the events between their first entry and their
/// completion, and the records completed since the last [`take`](Self::take).
#[derive(Default)]
pub struct Assembler {
    events: FxHashMap<u64, Pending>,
    /// Events that became complete and are not written yet (`end_pass`).
    due: Vec<u64>,
    out: Vec<Record>,
    completed: u64,
}

impl Assembler {
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// Events started (or named) and not completed.
    pub fn pending(&self) -> usize {
        self.events.len()
    }

    /// Events completed so far.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Completed records since the last call, in completion order (a child
    /// before the parent it completes).
    pub fn take(&mut self, into: &mut Vec<Record>) {
        into.append(&mut self.out);
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
        }
    }

    fn start(&mut self, id: u64, t: u64, s: &Start, slots: &impl Slots, c: &Counters) {
        let mut flags = s.flags;
        let mut linked = false;
        if s.parent != 0 && flags & flag::FOREIGN_PARENT == 0 {
            match self.parent_of(s.parent, t, slots) {
                // Complete before this child started, only not yet written
                // (`end_pass`): the child came late.
                Ok(p) if p.complete() && t > p.complete_at => {
                    flags |= flag::LATE_CHILD;
                    c.late_children.incr();
                }
                Ok(p) => {
                    p.adopt();
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
        let p = self
            .events
            .entry(id)
            .or_insert_with(|| Pending::placeholder(t));
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
            p.complete_at = p.stop_ns.max(p.complete_at);
            self.due.push(id);
        }
    }

    /// The parent named by a start, made a placeholder if its own start is
    /// still in another lane.
    fn parent_of(&mut self, parent: u64, t: u64, slots: &impl Slots) -> Result<&mut Pending, Miss> {
        if !self.events.contains_key(&parent) {
            slots.check(parent)?;
            self.events.insert(parent, Pending::placeholder(t));
        }
        Ok(self.events.get_mut(&parent).expect("inserted above"))
    }

    /// The event `id` names, or why there is none here: a placeholder if
    /// its start is still in another lane.
    fn event(&mut self, id: u64, t: u64, slots: &impl Slots, c: &Counters) -> Option<&mut Pending> {
        if !self.events.contains_key(&id) {
            match slots.check(id) {
                Ok(()) => {
                    self.events.insert(id, Pending::placeholder(t));
                }
                // Validated at the call: completed here since (a sweep).
                Err(Miss::Stale | Miss::Busy) => {
                    c.stale_handles.incr();
                    return None;
                }
                Err(Miss::Foreign) => {
                    c.unknown_handles.incr();
                    return None;
                }
            }
        }
        self.events.get_mut(&id)
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
            p.complete_at = p.complete_at.max(t);
            self.due.push(id);
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

    /// Ends a pass that read every entry logged before `read_to` (the time
    /// the pass began, less a margin for a thread preempted between its
    /// clock read and its push): every event that became complete before
    /// then is written, and the parents that completes.
    pub fn end_pass(&mut self, read_to: u64, slots: &impl Slots) {
        self.complete_due(|p| p.complete_at < read_to, slots);
    }

    /// Writes every event that is complete now, and the parents that
    /// completes (finalize, flush, exit: every lane has just been read).
    pub fn settle(&mut self, slots: &impl Slots) {
        self.complete_due(|_| true, slots);
    }

    fn complete_due(&mut self, ready: impl Fn(&Pending) -> bool, slots: &impl Slots) {
        let mut due = std::mem::take(&mut self.due);
        let mut keep = 0;
        let mut i = 0;
        // `finish` appends the parents it completes to `self.due`: taken
        // into this round too.
        loop {
            due.append(&mut self.due);
            if i == due.len() {
                break;
            }
            let id = due[i];
            i += 1;
            match self.events.get(&id) {
                Some(p) if p.complete() && ready(p) => self.finish(id, None, slots),
                Some(p) if p.complete() => {
                    due[keep] = id;
                    keep += 1;
                }
                // Completed already, or waiting again (a child came).
                _ => {}
            }
        }
        due.truncate(keep);
        self.due = due;
    }

    /// Completes `id` (`forced`: why, with the time); a parent this leaves
    /// complete is due at the end of the next pass.
    fn finish(&mut self, id: u64, forced: Option<(u32, u64)>, slots: &impl Slots) {
        let Some(p) = self.events.remove(&id) else {
            return;
        };
        let rec = self.record_of(id, &p, forced);
        let done_at = forced.map_or(p.complete_at, |(_, now)| now);
        slots.retire(id);
        self.completed += 1;
        let (end, gpu) = (rec.end_ns, (rec.gpu_start, rec.gpu_end));
        let timed = rec.flags & flag::GPU_TIMED != 0;
        self.out.push(rec);
        if !p.linked {
            return;
        }
        let Some(pp) = self.events.get_mut(&p.parent) else {
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
        // Until it completes, the latest time one of its children completed.
        pp.complete_at = pp.complete_at.max(done_at);
        if pp.complete() {
            pp.complete_at = pp.complete_at.max(pp.stop_ns);
            self.due.push(p.parent);
        }
    }

    /// The record of `p`, completed now (`forced`: flag and time).
    fn record_of(&self, id: u64, p: &Pending, forced: Option<(u32, u64)>) -> Record {
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
        Compact::of_parts(&Parts {
            id,
            parent: p.parent,
            ctx: p.ctx,
            start_ns: p.start_ns,
            stop_ns,
            end_ns: end_ns.max(p.start_ns),
            rank: p.rank,
            flags,
            kind: p.kind,
            timing,
            info: &p.info,
            gpu_start,
            gpu_end,
            state_arg: p.state_arg,
            states: &p.states[..n],
        })
        .expand()
    }

    /// Completes every started event `pred` picks (finalize: one context's;
    /// exit and the last finalize: all), youngest first, so that a forced
    /// child lets its parent complete normally when nothing else holds it.
    /// Placeholders go too when `all`: nothing will come for them.
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
            .filter(|(_, p)| p.started && pred(p.ctx))
            .map(|(&id, p)| (p.start_ns, id))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        for (_, id) in ids {
            self.force(id, why, now, slots, c);
        }
        if all {
            self.drop_placeholders(|_| true, slots);
        }
    }

    fn force(&mut self, id: u64, why: u32, now: u64, slots: &impl Slots, c: &Counters) {
        let Some(p) = self.events.get(&id) else {
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
            .filter(|(_, p)| !p.started && old(p))
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.events.remove(&id);
            slots.retire(id);
        }
    }

    /// Bounded waiting (the writer's sweep): stopped events older than
    /// `max_age_ns` (twice it while a started child still runs) are forced,
    /// youngest first; then, when `excess > 0`, that many of the oldest
    /// events (stopped ones first).
    pub fn sweep(&mut self, now: u64, max_age_ns: u64, excess: usize, slots: &impl Slots, c: &Counters) {
        let mut aged = Vec::new();
        let mut candidates = Vec::new();
        for (&id, p) in &self.events {
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
        self.drop_placeholders(|p| now.saturating_sub(p.seen_ns) > limit, slots);
    }
}

#[cfg(test)]
mod tests;
