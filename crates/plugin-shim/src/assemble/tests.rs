//! The assembler alone: entries in, records out, no threads. The slab is a
//! fake that knows which IDs were minted and which are retired.

use super::*;
use crate::abi::state;
use std::cell::RefCell;
use std::collections::HashSet;

/// IDs below `FOREIGN` are ours: live until retired, in slot `id % CAPACITY`.
const FOREIGN: u64 = 1 << 40;
const CAPACITY: usize = 64;

#[derive(Default)]
struct FakeSlots {
    retired: RefCell<HashSet<u64>>,
}

impl Slots for FakeSlots {
    fn capacity(&self) -> usize {
        CAPACITY
    }

    fn index(&self, id: u64) -> Option<usize> {
        (id < FOREIGN).then_some(id as usize % CAPACITY)
    }

    fn check(&self, id: u64) -> Result<(), Miss> {
        if id >= FOREIGN {
            Err(Miss::Foreign)
        } else if self.retired.borrow().contains(&id) {
            Err(Miss::Stale)
        } else {
            Ok(())
        }
    }

    fn retire(&self, id: u64) {
        assert!(
            self.retired.borrow_mut().insert(id),
            "slot {id} retired twice"
        );
    }
}

struct Run {
    asm: Assembler,
    slots: FakeSlots,
    c: Counters,
    out: Vec<Record>,
}

impl Run {
    fn new() -> Run {
        Run {
            asm: Assembler::new(CAPACITY),
            slots: FakeSlots::default(),
            c: Counters::default(),
            out: Vec::new(),
        }
    }

    fn start(&mut self, id: u64, parent: u64, kind: Kind, expect: u8, t: u64) {
        self.start_info(id, parent, kind, Info::None, expect, t);
    }

    fn start_info(
        &mut self,
        id: u64,
        parent: u64,
        kind: Kind,
        info: Info<Sym>,
        expect: u8,
        t: u64,
    ) {
        let e = Entry {
            id,
            t,
            op: Op::Start(Start {
                ctx: 1,
                parent,
                rank: 0,
                kind,
                info,
                flags: 0,
                expect,
            }),
        };
        self.asm.apply(&e, &self.slots, &self.c);
    }

    fn stop(&mut self, id: u64, t: u64) {
        self.asm.apply(
            &Entry {
                id,
                t,
                op: Op::Stop,
            },
            &self.slots,
            &self.c,
        );
    }

    fn state(&mut self, id: u64, s: i32, arg: Option<u64>, t: u64) {
        let op = Op::State(StateArg { state: s, arg });
        self.asm.apply(&Entry { id, t, op }, &self.slots, &self.c);
    }

    fn refused(&mut self, parent: u64, kind: Kind, t: u64) {
        let op = Op::Refused(kind);
        self.asm
            .apply(&Entry { id: parent, t, op }, &self.slots, &self.c);
    }

    /// The records completed so far (entries applied in the order given).
    fn pass(&mut self, _t: u64) -> Vec<Record> {
        self.take()
    }

    /// Entries as the writer drains them, lane after lane: applied in time
    /// order, those read before `read_to` only.
    fn drained(&mut self, lanes: &[&[Entry]], read_to: u64) -> Vec<Record> {
        for lane in lanes {
            for e in *lane {
                self.asm.push(*e);
            }
        }
        self.asm.advance_all(read_to, &self.slots, &self.c);
        self.take()
    }

    fn take(&mut self) -> Vec<Record> {
        let mut v = Vec::new();
        self.asm.take(&mut v);
        self.out.extend(v.iter().copied());
        v
    }

    fn ids(v: &[Record]) -> Vec<u64> {
        v.iter().map(|r| r.id).collect()
    }
}

fn start_entry(id: u64, parent: u64, kind: Kind, expect: u8, t: u64) -> Entry {
    Entry {
        id,
        t,
        op: Op::Start(Start {
            ctx: 1,
            parent,
            rank: 0,
            kind,
            info: Info::None,
            flags: 0,
            expect,
        }),
    }
}

fn stop_entry(id: u64, t: u64) -> Entry {
    Entry {
        id,
        t,
        op: Op::Stop,
    }
}

#[test]
fn a_leaf_completes_at_its_stop() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 0, 10);
    r.stop(1, 20);
    let v = r.pass(21);
    assert_eq!(Run::ids(&v), [1]);
    let rec = v[0];
    assert_eq!((rec.start_ns, rec.stop_ns, rec.end_ns), (10, 20, 20));
    assert_eq!(rec.timing, Timing::Host);
    assert_ne!(rec.flags & flag::STOPPED, 0);
    assert_eq!(r.asm.pending(), 0);
    assert_eq!(r.slots.check(1), Err(Miss::Stale), "slot retired");
    assert_eq!(r.asm.completed(), 1);
}

#[test]
fn a_parent_waits_for_its_expected_children_and_takes_their_end() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 2, 10);
    r.stop(1, 20);
    r.start(2, 1, Kind::KernelCh, 0, 30);
    r.stop(2, 40);
    assert_eq!(
        Run::ids(&r.pass(100)),
        [2],
        "one expected child still missing"
    );
    r.start(3, 1, Kind::KernelCh, 0, 50);
    r.stop(3, 60);
    let v = r.pass(100);
    assert_eq!(Run::ids(&v), [3, 1], "child before the parent it completes");
    let p = v[1];
    assert_eq!((p.end_ns, p.timing), (60, Timing::Children));
    assert_ne!(p.flags & flag::CHILD_EXTENDED, 0);
    assert_eq!(r.c.late_children.get(), 0);
}

#[test]
fn a_refused_child_is_not_waited_for() {
    let mut r = Run::new();
    // A Coll expecting two KernelCh: one comes, the other's start is
    // refused at the call (slab full). The parent completes with the one
    // that came, flagged, not at the age limit.
    r.start(1, 0, Kind::Coll, 2, 10);
    r.start(2, 1, Kind::KernelCh, 0, 30);
    r.refused(1, Kind::KernelCh, 31);
    r.stop(1, 35);
    assert_eq!(
        Run::ids(&r.pass(100)),
        Vec::<u64>::new(),
        "child 2 still runs"
    );
    r.stop(2, 40);
    let v = r.pass(100);
    assert_eq!(Run::ids(&v), [2, 1]);
    assert_ne!(
        v[1].flags & flag::CHILDREN_INCOMPLETE,
        0,
        "a child is missing"
    );
    assert_eq!(v[0].flags & flag::CHILDREN_INCOMPLETE, 0);
    assert_eq!(r.asm.pending(), 0);

    // Refused before the parent's start is read (a placeholder), and a
    // refused child of a kind the parent does not wait for: the parent
    // expecting one KernelCh completes at its stop once the KernelCh is
    // refused; the ProxyOp refusal only flags it.
    r.refused(3, Kind::KernelCh, 50);
    r.start(3, 0, Kind::Coll, 1, 45);
    r.refused(3, Kind::ProxyOp, 52);
    r.stop(3, 60);
    let v = r.pass(100);
    assert_eq!(Run::ids(&v), [3]);
    assert_ne!(v[0].flags & flag::CHILDREN_INCOMPLETE, 0);

    // A refusal naming a completed or a foreign parent changes nothing.
    r.refused(3, Kind::KernelCh, 70);
    r.refused(FOREIGN + 1, Kind::KernelCh, 71);
    assert!(r.pass(100).is_empty());
    assert_eq!(r.asm.pending(), 0);
    assert_eq!((r.c.stale_handles.get(), r.c.unknown_handles.get()), (0, 0));
}

#[test]
fn a_child_read_before_its_parents_start_waits_in_a_placeholder() {
    let mut r = Run::new();
    // The proxy thread's lane read first: the child names a live slot whose
    // start is in the user thread's lane.
    r.start(2, 1, Kind::ProxyOp, 0, 30);
    r.stop(2, 40);
    r.start(1, 0, Kind::Coll, 0, 10);
    r.stop(1, 20);
    let v = r.pass(100);
    assert_eq!(Run::ids(&v), [2, 1]);
    assert_eq!(v[0].flags & flag::LATE_CHILD, 0);
    assert_eq!(v[1].kind, Kind::Coll);
    assert_eq!(v[1].end_ns, 40, "the child's end counts");
    assert_eq!(r.c.late_children.get() + r.c.foreign_parents.get(), 0);
}

#[test]
fn a_stop_read_before_the_start_is_kept() {
    let mut r = Run::new();
    r.stop(5, 20);
    r.state(5, state::KERNEL_CH_STOP, Some(0), 15);
    r.start(5, 0, Kind::KernelCh, 0, 10);
    let v = r.pass(100);
    assert_eq!(Run::ids(&v), [5]);
    assert_eq!((v[0].start_ns, v[0].stop_ns), (10, 20));
}

#[test]
fn children_after_completion_are_late_and_foreign_parents_foreign() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 0, 10);
    r.stop(1, 20);
    r.pass(21);
    r.start(2, 1, Kind::ProxyOp, 0, 30);
    r.start(3, FOREIGN + 7, Kind::ProxyOp, 0, 31);
    r.stop(2, 40);
    r.stop(3, 41);
    let v = r.pass(100);
    assert_eq!(Run::ids(&v), [2, 3]);
    assert_ne!(v[0].flags & flag::LATE_CHILD, 0);
    assert_eq!(v[0].parent, 1, "the parent's ID is kept");
    assert_ne!(v[1].flags & flag::FOREIGN_PARENT, 0);
    assert_eq!((r.c.late_children.get(), r.c.foreign_parents.get()), (1, 1));
}

#[test]
fn lanes_are_applied_in_time_order_so_children_are_linked_as_at_the_call() {
    let mut r = Run::new();
    // The user thread: a Coll started and stopped.
    let user = [start_entry(1, 0, Kind::Coll, 0, 10), stop_entry(1, 20)];
    // Another thread: a child started before the Coll's stop (linked), one
    // after the Coll completed (late).
    let proxy = [
        start_entry(3, 1, Kind::ProxyOp, 0, 15),
        stop_entry(3, 35),
        start_entry(2, 1, Kind::ProxyOp, 0, 36),
        stop_entry(2, 40),
    ];
    // The proxy lane drained first.
    let v = r.drained(&[&proxy, &user], 100);
    let late: Vec<(u64, bool)> = v
        .iter()
        .map(|x| (x.id, x.flags & flag::LATE_CHILD != 0))
        .collect();
    assert_eq!(late, [(3, false), (1, false), (2, true)]);
    assert_eq!(v[1].end_ns, 35, "the linked child's end counts");
}

#[test]
fn entries_read_after_the_pass_began_wait_for_the_next_pass() {
    let mut r = Run::new();
    let lane = [start_entry(1, 0, Kind::Coll, 0, 10), stop_entry(1, 50)];
    assert!(
        r.drained(&[&lane], 50).is_empty(),
        "the stop was read at 50"
    );
    assert_eq!(r.asm.held(), 1);
    // The next pass brings a child read before that stop: still linked.
    let other = [start_entry(2, 1, Kind::ProxyOp, 0, 30), stop_entry(2, 60)];
    let v = r.drained(&[&other], u64::MAX);
    assert_eq!(Run::ids(&v), [2, 1]);
    assert_eq!(v[0].flags & flag::LATE_CHILD, 0);
    assert_eq!(r.asm.held(), 0);
}

#[test]
fn double_stops_states_after_stop_unknown_states_and_stale_handles_are_counted() {
    let mut r = Run::new();
    r.start(1, 0, Kind::ProxyOp, 1, 10);
    r.stop(1, 20);
    r.stop(1, 21);
    r.state(1, 0, None, 22);
    r.start(2, 0, Kind::Coll, 0, 10);
    r.state(2, 8, None, 11);
    r.stop(2, 12);
    r.pass(100);
    r.stop(2, 101);
    r.state(2, 0, None, 102);
    assert_eq!(r.c.double_stops.get(), 1);
    assert_eq!(r.c.record_after_stop.get(), 1);
    assert_eq!(r.c.unknown_states.get(), 1);
    assert_eq!(r.c.stale_handles.get(), 2);
    r.stop(FOREIGN + 1, 103);
    assert_eq!(r.c.unknown_handles.get(), 1);
    let rec = r.out.iter().find(|x| x.id == 2).unwrap();
    assert_eq!(
        rec.n_states, 0,
        "the state a Coll does not take is not kept"
    );
}

#[test]
fn states_are_kept_in_order_repeats_once_and_gpu_times_fold_into_the_parent() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 1, 10);
    r.stop(1, 11);
    let info = Info::KernelCh {
        channel: 0,
        gpu_start: 5_000,
    };
    r.start_info(2, 1, Kind::KernelCh, info, 0, 12);
    r.state(2, state::KERNEL_CH_STOP, Some(9_000), 13);
    r.state(2, state::KERNEL_CH_STOP, Some(9_000), 14);
    r.stop(2, 15);
    let v = r.pass(100);
    let k = v[0];
    assert_eq!((k.gpu_start, k.gpu_end, k.n_states), (5_000, 9_000, 1));
    assert_ne!(k.flags & flag::GPU_TIMED, 0);
    let p = v[1];
    assert_eq!((p.gpu_start, p.gpu_end), (5_000, 9_000));
    assert_ne!(p.flags & flag::GPU_TIMED, 0);
}

#[test]
fn finalize_forces_every_open_event_oldest_first() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 1, 10);
    r.stop(1, 11);
    r.start(2, 1, Kind::KernelCh, 0, 12);
    r.start(3, 0, Kind::Group, 0, 13);
    r.asm.force_where(
        |ctx| ctx == 1,
        false,
        flag::FORCED_FINALIZE,
        50,
        &r.slots,
        &r.c,
    );
    let v = r.take();
    let flags: Vec<(u64, bool)> = v
        .iter()
        .map(|x| (x.id, x.flags & flag::FORCED_FINALIZE != 0))
        .collect();
    assert_eq!(flags, [(1, true), (2, true), (3, true)]);
    assert_ne!(v[0].flags & flag::CHILDREN_INCOMPLETE, 0, "1 waited for 2");
    assert_eq!(v[1].timing, Timing::Forced);
    assert_eq!(v[1].flags & flag::LATE_CHILD, 0);
    assert_eq!(r.c.forced_finalize.get(), 3);
    assert_eq!(r.asm.pending(), 0);
}

#[test]
fn force_sets_children_incomplete_when_children_are_missing() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 2, 10);
    r.stop(1, 11);
    r.asm
        .force_where(|_| true, true, flag::FORCED_FINALIZE, 50, &r.slots, &r.c);
    let v = r.take();
    assert_ne!(v[0].flags & flag::CHILDREN_INCOMPLETE, 0);
    assert_eq!(r.c.children_incomplete.get(), 1);
}

#[test]
fn the_age_sweep_forces_stopped_events_and_waits_twice_for_running_children() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 1, 0);
    r.stop(1, 5);
    r.start(2, 0, Kind::CollApi, 0, 0);
    r.start(3, 2, Kind::ProxyOp, 0, 1);
    r.stop(2, 5);
    r.asm.sweep(150, 100, 0, &r.slots, &r.c);
    assert_eq!(
        Run::ids(&r.take()),
        [1],
        "2 has a running child: twice the limit"
    );
    r.asm.sweep(250, 100, 0, &r.slots, &r.c);
    assert_eq!(r.c.forced_age.get(), 2);
    let v = r.take();
    assert_eq!(Run::ids(&v), [2]);
    assert_ne!(v[0].flags & flag::FORCED_AGE, 0);
    assert_eq!(r.asm.pending(), 1, "the never-stopped child is not aged");
}

#[test]
fn pressure_forces_the_oldest_stopped_first() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 0, 10);
    r.start(2, 0, Kind::Coll, 1, 20);
    r.stop(2, 21);
    r.start(3, 0, Kind::Coll, 1, 30);
    r.stop(3, 31);
    r.asm.sweep(40, 1_000, 2, &r.slots, &r.c);
    let v = r.take();
    assert_eq!(Run::ids(&v), [2, 3]);
    assert!(v.iter().all(|x| x.flags & flag::FORCED_PRESSURE != 0));
    assert_eq!(r.c.forced_pressure.get(), 2);
}

#[test]
fn placeholders_whose_start_never_comes_go_at_the_end() {
    let mut r = Run::new();
    r.start(1, 0, Kind::Coll, 0, 10);
    r.stop(1, 1_000);
    r.start(2, 9, Kind::ProxyOp, 0, 20);
    assert_eq!(Run::ids(&r.take()), [1]);
    r.asm
        .force_where(|_| true, true, flag::FORCED_FINALIZE, 2_000, &r.slots, &r.c);
    assert_eq!(Run::ids(&r.take()), [2]);
    assert_eq!(r.asm.pending(), 0, "the placeholder of 9 went too");
    assert_eq!(r.slots.check(9), Err(Miss::Stale));
}
