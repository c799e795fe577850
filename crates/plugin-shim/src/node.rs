//! One live event in the slab: immutable descriptor data plus the atomics that
//! several threads update (stop, states, child references, child end times).
//!
//! The reference word decides completion, in one place:
//!
//! ```text
//!  bit 63 DONE | bit 62 STOPPED | bits 46..62 references | bits 0..46 child end
//! ```
//!
//! An event starts with one reference for itself plus one per child it expects
//! (e.g. `nChannels` KernelCh for a Coll). `stop` drops the self reference; a
//! child that ends drops one. Whoever drops the last reference sets DONE and
//! completes the event; a forced completion sets DONE whatever the count. DONE
//! is set exactly once, so exactly one thread completes each event.
//!
//! The child-end field keeps the latest end of a child, in ns after the
//! event's start (0: none; saturates about 19.5 hours after the start). It
//! lives in the reference word so that a child that ends folds its end time
//! in with the same compare-and-swap that drops its reference: one locked
//! instruction per child instead of two.

use crate::model::{Info, Kind, StateArg};
use crate::symbols::Sym;
use evring::ablate::CasWeak;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const DONE: u64 = 1 << 63;
const STOPPED: u64 = 1 << 62;
const COUNT_SHIFT: u32 = 46;
/// One reference.
const ONE: u64 = 1 << COUNT_SHIFT;
/// The reference count (16 bits: a child beyond 65 535 linked at once is
/// recorded as a late child).
const COUNT: u64 = STOPPED - ONE;
/// The latest child end, ns after the event's start.
const END: u64 = ONE - 1;

#[inline(always)]
fn count(w: u64) -> u64 {
    (w & COUNT) >> COUNT_SHIFT
}

/// How many state transitions an event keeps (ProxyStep has three; repeats of
/// the same state are folded, so four is enough for every NCCL sequence).
pub const STATES: usize = 4;

/// Event flags, stored in records.
pub mod flag {
    /// The event was stopped by NCCL.
    pub const STOPPED: u32 = 1 << 0;
    /// Its parent had already completed when it started.
    pub const LATE_CHILD: u32 = 1 << 1;
    /// Its parent was not one of our IDs (PXN or garbage).
    pub const FOREIGN_PARENT: u32 = 1 << 2;
    /// Its context was not one of ours; written to the detached stream.
    pub const DETACHED: u32 = 1 << 3;
    /// Completed while expected or started children were still outstanding.
    pub const CHILDREN_INCOMPLETE: u32 = 1 << 4;
    /// Completed by the pressure sweep.
    pub const FORCED_PRESSURE: u32 = 1 << 5;
    /// Completed by the age limit.
    pub const FORCED_AGE: u32 = 1 << 6;
    /// Completed by finalize or process exit.
    pub const FORCED_FINALIZE: u32 = 1 << 7;
    /// More distinct states than the record keeps.
    pub const STATES_OVERFLOW: u32 = 1 << 8;
    /// A string in its descriptor pointed at unreadable memory.
    pub const BAD_STRING: u32 = 1 << 9;
    /// Its end time comes from GPU timers (KernelCh).
    pub const GPU_TIMED: u32 = 1 << 10;
    /// A child ended after the parent's own stop and extended its end.
    pub const CHILD_EXTENDED: u32 = 1 << 11;
    /// Stopped more than once.
    pub const DOUBLE_STOP: u32 = 1 << 12;

    pub const NAMES: [(u32, &str); 13] = [
        (STOPPED, "stopped"),
        (LATE_CHILD, "late_child"),
        (FOREIGN_PARENT, "foreign_parent"),
        (DETACHED, "detached"),
        (CHILDREN_INCOMPLETE, "children_incomplete"),
        (FORCED_PRESSURE, "forced_pressure"),
        (FORCED_AGE, "forced_age"),
        (FORCED_FINALIZE, "forced_finalize"),
        (STATES_OVERFLOW, "states_overflow"),
        (BAD_STRING, "bad_string"),
        (GPU_TIMED, "gpu_timed"),
        (CHILD_EXTENDED, "child_extended"),
        (DOUBLE_STOP, "double_stop"),
    ];
}

/// Outcome of `Node::stop`.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// This stop dropped the last reference: the caller completes the event.
    Complete,
    /// Stopped; children (or expected children) still hold references.
    Waiting,
    /// Already stopped before.
    Again,
    /// Already completed (forced); the stop came too late to matter.
    Done,
}

pub struct Node {
    pub kind: Kind,
    pub ctx: u64,
    pub parent: u64,
    pub rank: i32,
    /// Descriptor fields, strings as symbols (40 bytes where a `Str16` Coll
    /// took 104).
    pub info: Info<Sym>,
    pub start_ns: u64,
    pub stop_ns: AtomicU64,
    refs: AtomicU64,
    /// Children still expected (they claim a pre-counted reference).
    expect: AtomicU32,
    pub flags: AtomicU32,
    /// Latest end (host ns) among children that have completed.
    /// Earliest GPU start / latest GPU end (raw globaltimer ns) of this event
    /// or its KernelCh children; 0 / u64::MAX when unknown.
    pub gpu_start: AtomicU64,
    pub gpu_end: AtomicU64,
    /// Packed `state << 56 | host ns` (ns truncated to 56 bits: ~2.3 years).
    states: [AtomicU64; STATES],
    n_states: AtomicU32,
    /// The one argument word of the latest state that carries one.
    pub state_arg: AtomicU64,
}

const TS_MASK: u64 = (1 << 56) - 1;

/// One state word: `state << 56 | host ns` (ns truncated to 56 bits).
#[inline]
pub fn pack_state(state: u8, ns: u64) -> u64 {
    (state as u64) << 56 | (ns & TS_MASK)
}

/// The (state, host ns) of a [`pack_state`] word.
#[inline]
pub fn unpack_state(w: u64) -> (u8, u64) {
    ((w >> 56) as u8, w & TS_MASK)
}

impl Node {
    pub fn new(kind: Kind, ctx: u64, parent: u64, rank: i32, info: Info<Sym>, flags: u32) -> Self {
        let gpu_start = match info {
            Info::KernelCh { gpu_start, .. } | Info::KernelPhase { gpu_start, .. }
                if gpu_start != 0 =>
            {
                gpu_start
            }
            _ => u64::MAX,
        };
        Node {
            kind,
            ctx,
            parent,
            rank,
            info,
            start_ns: crate::clock::now_ns(),
            stop_ns: AtomicU64::new(0),
            refs: AtomicU64::new(ONE),
            expect: AtomicU32::new(0),
            flags: AtomicU32::new(flags),
            gpu_start: AtomicU64::new(gpu_start),
            gpu_end: AtomicU64::new(0),
            states: Default::default(),
            n_states: AtomicU32::new(0),
            state_arg: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn set_flag(&self, f: u32) {
        self.flags.fetch_or(f, Ordering::Relaxed);
    }

    /// NCCL's stopEvent: drops the self reference once.
    pub fn stop(&self, now: u64) -> Stop {
        let mut w = self.refs.load(Ordering::Acquire);
        loop {
            if w & DONE != 0 {
                return Stop::Done;
            }
            if w & STOPPED != 0 {
                self.set_flag(flag::DOUBLE_STOP);
                return Stop::Again;
            }
            let left = count(w).saturating_sub(1);
            let end = w & END;
            let new = if left == 0 {
                DONE | STOPPED | end
            } else {
                STOPPED | left << COUNT_SHIFT | end
            };
            // Publish the stop time before the word, so the completer sees it.
            self.stop_ns.store(now, Ordering::Relaxed);
            match self
                .refs
                .cas_weak(w, new, Ordering::AcqRel, Ordering::Acquire)
            {
                // `flag::STOPPED` is derived from this word (`Node::flags`),
                // so no second atomic step is needed here.
                Ok(_) => {
                    return if left == 0 {
                        Stop::Complete
                    } else {
                        Stop::Waiting
                    };
                }
                Err(cur) => w = cur,
            }
        }
    }

    /// A child starting under this live event takes a reference (claiming an
    /// expected one first). False if the event already completed.
    #[inline]
    pub fn adopt(&self) -> bool {
        let mut e = self.expect.load(Ordering::Relaxed);
        while e > 0 {
            match self
                .expect
                .cas_weak(e, e - 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return self.refs.load(Ordering::Acquire) & DONE == 0,
                Err(cur) => e = cur,
            }
        }
        let mut w = self.refs.load(Ordering::Acquire);
        loop {
            if w & DONE != 0 || w & COUNT == COUNT {
                return false;
            }
            match self
                .refs
                .cas_weak(w, w + ONE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(cur) => w = cur,
            }
        }
    }

    /// A child ended at `end_ns` (0: it never ran, e.g. its insert failed):
    /// drops its reference and folds its end into the latest child end, in
    /// one step. True if the caller must complete us.
    pub fn release(&self, end_ns: u64) -> bool {
        let end = end_ns.saturating_sub(self.start_ns).min(END);
        let mut w = self.refs.load(Ordering::Acquire);
        loop {
            if w & DONE != 0 || w & COUNT == 0 {
                return false;
            }
            let left = count(w) - 1;
            let folded = (w & END).max(end);
            let new = if left == 0 {
                DONE | (w & STOPPED) | folded
            } else {
                (w - ONE) & !END | folded
            };
            match self
                .refs
                .cas_weak(w, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return left == 0,
                Err(cur) => w = cur,
            }
        }
    }

    /// Completes the event whatever its references; true if this call won.
    /// Sets CHILDREN_INCOMPLETE when references other than an unstopped self
    /// reference were still held.
    pub fn force(&self, why: u32) -> bool {
        let mut w = self.refs.load(Ordering::Acquire);
        loop {
            if w & DONE != 0 {
                return false;
            }
            match self
                .refs
                .cas_weak(w, w | DONE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let self_ref = u64::from(w & STOPPED == 0);
                    let mut f = why;
                    if count(w) > self_ref {
                        f |= flag::CHILDREN_INCOMPLETE;
                    }
                    self.set_flag(f);
                    return true;
                }
                Err(cur) => w = cur,
            }
        }
    }

    /// The event's flags, with `flag::STOPPED` taken from the reference word.
    pub fn flags(&self) -> u32 {
        let stopped = if self.is_stopped() { flag::STOPPED } else { 0 };
        self.flags.load(Ordering::Relaxed) | stopped
    }

    pub fn is_stopped(&self) -> bool {
        self.refs.load(Ordering::Relaxed) & STOPPED != 0
    }

    pub fn is_done(&self) -> bool {
        self.refs.load(Ordering::Relaxed) & DONE != 0
    }

    /// A child that started under this stopped event has not ended yet (its
    /// references less the expected children that never started). A hint for
    /// the writer's age sweep: read without synchronisation.
    pub fn children_running(&self) -> bool {
        let w = self.refs.load(Ordering::Relaxed);
        let unclaimed = u64::from(self.expect.load(Ordering::Relaxed));
        w & STOPPED != 0 && count(w) > unclaimed
    }

    /// The latest end of a child that has ended (0: none).
    pub fn child_end_ns(&self) -> u64 {
        match self.refs.load(Ordering::Acquire) & END {
            0 => 0,
            e => self.start_ns + e,
        }
    }

    /// Records a state transition; consecutive repeats of one state keep the
    /// first time. Returns false if the event was already stopped (the record
    /// is then ignored and counted by the caller).
    #[inline]
    pub fn record(&self, s: StateArg, now: u64) -> bool {
        if self.is_stopped() {
            return false;
        }
        if let Some(arg) = s.arg {
            self.state_arg.store(arg, Ordering::Relaxed);
        }
        // KernelPhase's stop (v7) carries its GPU end as KernelCh's does.
        if s.state == crate::abi::state::KERNEL_CH_STOP
            || s.state == crate::abi::state::KERNEL_PHASE_STOP
        {
            if let Some(t) = s.arg.filter(|&t| t != 0) {
                self.gpu_end.fetch_max(t, Ordering::Relaxed);
                self.set_flag(flag::GPU_TIMED);
                crate::clock::observe_gpu(t, now);
            }
        }
        let n = self.n_states.load(Ordering::Relaxed) as usize;
        if n > 0 && n <= STATES {
            let last = self.states[n - 1].load(Ordering::Relaxed);
            if (last >> 56) as i32 == s.state {
                return true;
            }
        }
        // NCCL records an event's states from one thread (the proxy thread
        // for ProxyOp/ProxyStep/ProxyCtrl, the thread that owns the event
        // otherwise), so a load and a store suffice: no locked instruction.
        // Two threads recording on one event at the same instant could write
        // the same entry and keep one of the two states (never memory
        // unsafety: every field is atomic).
        let i = n;
        self.n_states
            .store((n as u32).saturating_add(1), Ordering::Relaxed);
        if i < STATES {
            self.states[i].store(pack_state(s.state as u8, now), Ordering::Relaxed);
        } else {
            self.set_flag(flag::STATES_OVERFLOW);
        }
        true
    }

    /// The recorded (state, host ns) pairs.
    pub fn states(&self) -> ([(u8, u64); STATES], u8) {
        let (packed, n) = self.packed_states();
        let mut out = [(0u8, 0u64); STATES];
        for (slot, w) in out.iter_mut().zip(packed).take(n as usize) {
            *slot = unpack_state(w);
        }
        (out, n)
    }

    /// The recorded states as packed words ([`pack_state`]; unused ones 0).
    pub fn packed_states(&self) -> ([u64; STATES], u8) {
        let n = (self.n_states.load(Ordering::Relaxed) as usize).min(STATES);
        let mut out = [0u64; STATES];
        for (o, s) in out.iter_mut().zip(&self.states).take(n) {
            *o = s.load(Ordering::Relaxed);
        }
        (out, n as u8)
    }

    /// How many states are recorded (at most [`STATES`]): with
    /// [`state_word`](Self::state_word), for a reader that wants the count
    /// first and the words only if there are any (the completion path).
    #[inline]
    pub fn n_states(&self) -> u8 {
        (self.n_states.load(Ordering::Relaxed) as usize).min(STATES) as u8
    }

    /// Recorded state `k` (below [`n_states`](Self::n_states)) as a packed
    /// word ([`pack_state`]).
    #[inline]
    pub fn state_word(&self, k: usize) -> u64 {
        self.states[k].load(Ordering::Relaxed)
    }
}

impl Node {
    /// Sets how many children the event waits for before completing (chosen
    /// by the engine from the kind, the descriptor and the mask).
    pub fn expect_children(mut self, n: u32) -> Self {
        // Within the count field (NCCL's channel counts are far below).
        let n = n.min((COUNT >> COUNT_SHIFT) as u32 - 1);
        *self.refs.get_mut() = u64::from(n + 1) << COUNT_SHIFT;
        *self.expect.get_mut() = n;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node::new(Kind::Coll, 1, 0, 0, Info::None, 0)
    }

    #[test]
    fn leaf_completes_at_stop_once() {
        let n = node();
        assert_eq!(n.flags() & flag::STOPPED, 0);
        assert_eq!(n.stop(5), Stop::Complete);
        assert_ne!(
            n.flags() & flag::STOPPED,
            0,
            "stopped flag derived from refs"
        );
        assert_eq!(n.stop(6), Stop::Done);
        assert!(!n.force(flag::FORCED_AGE));
    }

    #[test]
    fn double_stop_while_waiting() {
        let n = node().expect_children(1);
        assert_eq!(n.stop(5), Stop::Waiting);
        assert_eq!(n.stop(6), Stop::Again);
        assert_ne!(n.flags.load(Ordering::Relaxed) & flag::DOUBLE_STOP, 0);
        assert!(n.adopt());
        assert!(n.release(0), "expected child completes the parent");
    }

    #[test]
    fn children_hold_parent_open() {
        let n = node();
        assert!(n.adopt());
        assert!(n.adopt());
        assert_eq!(n.stop(1), Stop::Waiting);
        assert!(!n.release(0));
        assert!(n.release(0));
        assert!(n.is_done());
        assert!(!n.adopt(), "no adoption after completion");
        assert!(!n.release(0));
    }

    #[test]
    fn children_running_counts_started_children_of_a_stopped_event() {
        // Two expected, neither started: nothing running once stopped.
        let n = node().expect_children(2);
        assert!(!n.children_running(), "not stopped yet");
        assert_eq!(n.stop(1), Stop::Waiting);
        assert!(
            !n.children_running(),
            "expected children that never started"
        );
        // One of them starts: running until it ends.
        assert!(n.adopt());
        assert!(n.children_running());
        assert!(!n.release(0));
        assert!(!n.children_running());
        // A child beyond the expected ones.
        let n = node();
        assert!(n.adopt());
        assert_eq!(n.stop(1), Stop::Waiting);
        assert!(n.children_running());
        assert!(n.release(0));
        assert!(!n.children_running(), "completed");
    }

    #[test]
    fn expected_children_before_and_after_stop() {
        let n = node().expect_children(2);
        assert!(n.adopt()); // claims an expected slot
        assert!(!n.release(0));
        assert_eq!(n.stop(1), Stop::Waiting);
        assert!(n.adopt());
        assert!(n.release(0));
    }

    #[test]
    fn child_ends_fold_with_the_reference_drop() {
        let n = node().expect_children(3);
        let t0 = n.start_ns;
        assert_eq!(n.child_end_ns(), 0, "no child ended yet");
        assert!(n.adopt() && n.adopt() && n.adopt());
        assert!(!n.release(t0 + 50));
        assert!(!n.release(t0 + 20), "an earlier end does not move it back");
        assert_eq!(n.child_end_ns(), t0 + 50);
        assert_eq!(
            n.stop(t0 + 10),
            Stop::Waiting,
            "the stop keeps the child end"
        );
        assert_eq!(n.child_end_ns(), t0 + 50);
        assert!(n.release(t0 + 70), "last reference: complete");
        assert_eq!(
            n.child_end_ns(),
            t0 + 70,
            "the completing child's end is in"
        );
        assert!(n.is_done() && n.is_stopped());
        // An end before the start (no child can) and a failed insert (0)
        // change nothing; an end beyond the field saturates.
        let m = node();
        assert!(m.adopt() && m.adopt());
        assert!(!m.release(0));
        assert!(!m.release(m.start_ns));
        assert_eq!(m.child_end_ns(), 0);
        assert!(m.adopt());
        assert!(!m.release(u64::MAX));
        assert_eq!(m.child_end_ns(), m.start_ns + END);
        assert_eq!(m.stop(m.start_ns + 1), Stop::Complete);
        assert_eq!(m.child_end_ns(), m.start_ns + END);
    }

    #[test]
    fn references_saturate_as_late_children() {
        let n = node();
        let max = COUNT >> COUNT_SHIFT;
        for _ in 1..max {
            assert!(n.adopt());
        }
        assert!(!n.adopt(), "count field full: refused, never wrapped");
        assert_eq!(n.stop(1), Stop::Waiting);
        for _ in 1..max - 1 {
            assert!(!n.release(2));
        }
        assert!(n.release(2));
        assert!(n.is_done());
    }

    #[test]
    fn force_flags_missing_children() {
        let n = node().expect_children(3);
        assert_eq!(n.stop(1), Stop::Waiting);
        assert!(n.force(flag::FORCED_PRESSURE));
        let f = n.flags.load(Ordering::Relaxed);
        assert_ne!(f & flag::CHILDREN_INCOMPLETE, 0);
        assert!(!n.release(0));
        let m = node();
        assert!(m.force(flag::FORCED_FINALIZE));
        assert_eq!(m.flags() & flag::STOPPED, 0, "forced, never stopped");
        assert_eq!(
            m.flags.load(Ordering::Relaxed) & flag::CHILDREN_INCOMPLETE,
            0
        );
    }

    #[test]
    fn states_fold_repeats_and_refuse_after_stop() {
        let n = node().expect_children(1);
        for s in [8, 20, 20, 20, 9] {
            assert!(n.record(
                StateArg {
                    state: s,
                    arg: Some(s as u64)
                },
                100 + s as u64
            ));
        }
        let (st, k) = n.states();
        assert_eq!(k, 3);
        assert_eq!(
            st[..3].iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![8, 20, 9]
        );
        assert_eq!(n.state_arg.load(Ordering::Relaxed), 9);
        n.stop(1);
        assert!(!n.record(
            StateArg {
                state: 9,
                arg: None
            },
            2
        ));
    }
}
