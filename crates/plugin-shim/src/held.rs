//! The last event each thread touched, with its slab reference kept.
//!
//! NCCL's calls on one event come in runs from one thread: the proxy thread
//! starts a ProxyStep, records three states on it and stops it; the user
//! thread starts a CollApi and then starts its children under it. Without a
//! cache each of those calls validates the ID by taking a reference on the
//! slot (an atomic read-modify-write on the slot's state word) and gives it
//! back at the end (another one). Here the thread keeps the reference of the
//! event it touched last: the next call on the same ID finds it and pays a
//! plain load (is the slot still live under that generation?) instead of two
//! locked instructions. A thread holds the references of the last
//! [`HELD`] events it touched; one of them is given back when it touches
//! another, so each thread keeps at most [`HELD`] slots from being reused.
//!
//! What this changes, and what it does not:
//! * A held reference only delays the moment a completed event's memory is
//!   dropped and its slot freed (the same as any reader holding a `Ref`);
//!   the event is retired, recorded and counted exactly as before.
//! * A stale ID is still refused: a hit is used only while the event is not
//!   DONE ([`usable`]), else the reference is dropped and the normal lookup
//!   reports the miss (or, for an event that is DONE but not yet retired,
//!   finds it as before).
//! * Entries belong to one slab, whose address is kept with them, so an entry
//!   left by another engine never matches (holding an event of another slab
//!   gives the entries back first); in a forked child the forking
//!   thread's entries (references into the parent's engine, which the child
//!   never touches) are forgotten, not given back.
//! * A thread's references are given back when it exits (`ExitGuard`,
//!   registered on the thread's first use of this module); a call made after that (from
//!   another thread-local's destructor) holds nothing, and one made without
//!   the thread's block (`None`) runs uncached.

use crate::node::Node;
use evring::{EventId, Miss, Ref, TaggedSlab};
use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, Ordering};

/// Events held per thread: NCCL's user thread has four of its own open at
/// once in every collective (GroupApi, CollApi, Group, Coll).
pub const HELD: usize = 4;

/// One thread's held references (part of the thread's `local::Local`).
/// `keys[i]` is the ID of the reference in `refs[i]` (an event of `slab`), 0
/// when empty; Copy keys keep the search to plain compares.
pub struct Held {
    /// The slab every entry belongs to (its address; 0: none yet).
    slab: Cell<usize>,
    keys: [Cell<u64>; HELD],
    refs: [Kept; HELD],
    /// The place the next insertion evicts when none is empty (round robin).
    next: Cell<usize>,
    /// [`FORKS`] when the entries were made.
    forks: Cell<u32>,
    /// This thread's [`ExitGuard`] has run (or could not be registered):
    /// nothing is held any more.
    closed: Cell<bool>,
}

/// `Held::forks` of a block that may not hold references (yet): never the
/// value of [`FORKS`], so every access takes the cold path (`Held::refresh`),
/// which registers the exit guard or refuses.
const UNCHECKED: u32 = u32::MAX;

/// One held reference. Not dropped with the thread's block: the block has no
/// destructor, so that reaching it is a plain thread-local access with no
/// "is it registered yet" check on every call; [`ExitGuard`] gives the
/// references back at thread exit instead.
struct Kept(Cell<Option<ManuallyDrop<Ref<'static, Node>>>>);

impl Kept {
    const fn empty() -> Kept {
        Kept(Cell::new(None))
    }

    #[inline(always)]
    fn take(&self) -> Option<Ref<'static, Node>> {
        self.0.take().map(ManuallyDrop::into_inner)
    }

    #[inline(always)]
    fn replace(&self, r: Option<Ref<'static, Node>>) -> Option<Ref<'static, Node>> {
        self.0
            .replace(r.map(ManuallyDrop::new))
            .map(ManuallyDrop::into_inner)
    }

    /// Puts back the reference just taken out of this (empty) place: no old
    /// reference to give back, so no test for one. (The callers' `f` never
    /// touches this thread's held references; an old one would only be
    /// leaked, never released twice.)
    #[inline(always)]
    fn restore(&self, r: Ref<'static, Node>) {
        if cfg!(any(test, debug_assertions)) {
            assert!(self.0.take().is_none(), "restored into a used place");
        }
        self.0.set(Some(ManuallyDrop::new(r)));
    }
}

/// Gives this thread's held references back when the thread exits
/// (registered on the thread's first use of this module, `Held::refresh`).
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        crate::local::with_local(|l| {
            if let Some(l) = l {
                l.held.close();
            }
        });
    }
}

thread_local! {
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

/// Forks this process has gone through (bumped in the child).
static FORKS: AtomicU32 = AtomicU32::new(0);

/// In a forked child (single thread, from the atfork handler: one atomic
/// add). The entries then belong to the parent's engine: the next access
/// forgets them without touching that engine.
pub(crate) fn forget_after_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

impl Held {
    pub const fn new() -> Held {
        Held {
            slab: Cell::new(0),
            keys: [const { Cell::new(0) }; HELD],
            refs: [const { Kept::empty() }; HELD],
            next: Cell::new(0),
            forks: Cell::new(UNCHECKED),
            closed: Cell::new(false),
        }
    }

    /// This block if it may be used: one compare on every access. `None`
    /// (no cache) once the thread's exit guard ran or if it cannot be
    /// registered (a call from another thread-local's destructor at exit).
    #[inline(always)]
    fn current(&self) -> Option<&Held> {
        if self.forks.get() == FORKS.load(Ordering::Relaxed) {
            return Some(self);
        }
        self.refresh()
    }

    /// The first access of the thread, or the first after a fork, or any
    /// access after the exit guard ran. Entries made before a fork are
    /// forgotten (their references are leaked with the parent's engine, never
    /// released into it); the exit guard is registered once.
    #[cold]
    fn refresh(&self) -> Option<&Held> {
        if self.closed.get() {
            return None;
        }
        let forks = FORKS.load(Ordering::Relaxed);
        for (k, r) in self.keys.iter().zip(&self.refs) {
            k.set(0);
            std::mem::forget(r.take());
        }
        if EXIT_GUARD.try_with(|_| ()).is_err() {
            self.closed.set(true);
            return None;
        }
        // (FORKS never reaches UNCHECKED: 2^32 - 1 forks.)
        self.forks.set(forks);
        Some(self)
    }

    /// At thread exit: gives the references back (those made before a fork
    /// are forgotten, as always); nothing is held afterwards.
    fn close(&self) {
        let same = self.forks.get() == FORKS.load(Ordering::Relaxed);
        self.closed.set(true);
        self.forks.set(UNCHECKED);
        for (k, r) in self.keys.iter().zip(&self.refs) {
            k.set(0);
            let r = r.take();
            if same {
                drop(r);
            } else {
                std::mem::forget(r);
            }
        }
    }
}

#[inline(always)]
fn addr(slab: &'static TaggedSlab<Node>) -> usize {
    slab as *const TaggedSlab<Node> as usize
}

impl Held {
    /// The place holding `id` of `slab`: one compare for the slab, then IDs
    /// only (never 0, the empty key).
    #[inline(always)]
    fn find(&self, slab: &'static TaggedSlab<Node>, id: EventId) -> Option<usize> {
        if self.slab.get() != addr(slab) {
            return None;
        }
        self.keys.iter().position(|c| c.get() == id.get())
    }
}

/// Takes the held reference for `id` out of the cache if it is live (it is
/// then no longer held). `None`: not held (or held but no longer live, in
/// which case the stale reference is dropped here).
/// `h`: the calling thread's (`None`: no cache, e.g. in a thread-local
/// destructor), as for every function here.
/// (Tests only: the engine folds into a held parent in place, `visit`.)
#[cfg(test)]
pub fn take(
    h: Option<&Held>,
    slab: &'static TaggedSlab<Node>,
    id: EventId,
) -> Option<Ref<'static, Node>> {
    let h = h?.current()?;
    let i = h.find(slab, id)?;
    h.keys[i].set(0);
    let r = h.refs[i].take()?;
    // A retired event's reference is dropped here, and the caller's lookup
    // reports the miss.
    usable(slab, id, &r).then_some(r)
}

/// May a held reference to `id` be used as a lookup of `id` would be?
///
/// The reference was taken under `id`'s generation and keeps the slot from
/// being reused, so it refers to that event; the event's ID is stale exactly
/// when its slot has been retired. Every event slot is retired only after
/// its node was marked DONE (`Node::stop`/`release`/`force`, which decide
/// completion, come first in `engine.rs`), so "not DONE" implies "not
/// retired": a load of the node's reference word, which the caller reads
/// next anyway, instead of decoding the ID against the slab (`check`). A
/// DONE event that is not retired yet is refused here too; the caller's
/// lookup then finds it, as it did before. Test builds check that the node
/// and the slab agree.
#[inline(always)]
fn usable(slab: &'static TaggedSlab<Node>, id: EventId, r: &Node) -> bool {
    // (Slab first: a retire that this load sees came after the DONE.)
    let live = !cfg!(any(test, debug_assertions)) || slab.check(id).is_ok();
    let done = r.is_done();
    assert!(
        live || done,
        "an event slot was retired before its node was DONE"
    );
    !done
}

/// What [`visit`] did with a held event.
pub enum Visit<R> {
    /// `f` ran on the event; its reference stays held.
    Kept(R),
    /// `f` ran and asked for the reference, which is no longer held.
    Taken(Ref<'static, Node>, R),
}

/// Runs `f` on the held event `id` in place (one thread-local access: the
/// common case of a state record or a stop that leaves the event waiting for
/// children). `f` returns its result and whether the caller wants the
/// reference (e.g. to retire the event). `None`: not held, or held but no
/// longer live (the stale reference is then dropped). `f` must not use this
/// thread's held references (its place is put back without a check).
#[inline]
pub fn visit<R>(
    h: Option<&Held>,
    slab: &'static TaggedSlab<Node>,
    id: EventId,
    f: impl FnOnce(&Node) -> (R, bool),
) -> Option<Visit<R>> {
    let h = h?.current()?;
    let i = h.find(slab, id)?;
    let r = h.refs[i].take()?;
    if !usable(slab, id, &r) {
        // Stale: the reference is dropped (the last one frees the slot).
        h.keys[i].set(0);
        return None;
    }
    let (out, want) = f(&r);
    if want {
        h.keys[i].set(0);
        Some(Visit::Taken(r, out))
    } else {
        h.refs[i].restore(r);
        Some(Visit::Kept(out))
    }
}

/// Runs `f` on the live event `id`, once: through this thread's held
/// reference if it holds one (no atomic read-modify-write), else through a
/// slab lookup whose reference is then held for the next call. `f` returns
/// its result and whether the caller wants the reference (then no longer
/// held: e.g. to retire the event, or to drop it). `f` must not use this
/// thread's held references, as for [`visit`].
#[inline(always)]
pub fn with_event<R>(
    h: Option<&Held>,
    slab: &'static TaggedSlab<Node>,
    id: EventId,
    f: impl FnOnce(&Node) -> (R, bool),
) -> Result<(R, Option<Ref<'static, Node>>), Miss> {
    let h = h.and_then(Held::current);
    if let Some(h) = h {
        if let Some(i) = h.find(slab, id) {
            if let Some(r) = h.refs[i].take() {
                // One dereference (through the slab's slot array) for the
                // check and `f`.
                let n: &Node = &r;
                if usable(slab, id, n) {
                    let (out, want) = f(n);
                    if !want {
                        h.refs[i].restore(r);
                        return Ok((out, None));
                    }
                    h.keys[i].set(0);
                    return Ok((out, Some(r)));
                }
                // Stale: dropped (the last reference frees the slot).
                h.keys[i].set(0);
                drop(r);
            }
        }
    }
    looked_up(h, slab, id, f)
}

/// [`with_event`] for an event this thread does not hold.
#[inline(never)]
fn looked_up<R>(
    h: Option<&Held>,
    slab: &'static TaggedSlab<Node>,
    id: EventId,
    f: impl FnOnce(&Node) -> (R, bool),
) -> Result<(R, Option<Ref<'static, Node>>), Miss> {
    let r = slab.lookup(id)?;
    let (out, want) = f(&r);
    if want {
        return Ok((out, Some(r)));
    }
    put(h, slab, id, r);
    Ok((out, None))
}

/// Holds `node` (a reference to the event `id` of `slab`) for this thread's
/// next calls, in an empty place or else in place of another (round robin), whose
/// reference is given back.
#[inline(always)]
pub fn put(
    h: Option<&Held>,
    slab: &'static TaggedSlab<Node>,
    id: EventId,
    node: Ref<'static, Node>,
) {
    // Without a cache the reference is dropped here. Dropping a reference
    // (the evicted one, below) never calls back into this module: the last
    // one drops a `Node` and frees its slot, nothing more.
    let Some(h) = h.and_then(Held::current) else {
        return;
    };
    if h.slab.get() != addr(slab) {
        // Another slab's entries (another engine; tests): given back.
        for (k, r) in h.keys.iter().zip(&h.refs) {
            k.set(0);
            drop(r.take());
        }
        h.slab.set(addr(slab));
    }
    let i = match h.keys.iter().position(|c| c.get() == 0) {
        Some(i) => i,
        None => {
            let i = h.next.get();
            h.next.set((i + 1) % HELD);
            i
        }
    };
    h.keys[i].set(id.get());
    drop(h.refs[i].replace(Some(node)));
}

/// Gives back this thread's held references.
#[cfg(test)]
pub fn clear() {
    crate::local::with(|cx| {
        if let Some(l) = cx.l {
            for (k, r) in l.held.keys.iter().zip(&l.held.refs) {
                k.set(0);
                drop(r.take());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Info, Kind};

    // The module's functions on the calling thread's cache.
    fn put(s: &'static TaggedSlab<Node>, id: EventId, r: Ref<'static, Node>) {
        crate::local::with(|cx| super::put(cx.held(), s, id, r))
    }
    fn take(s: &'static TaggedSlab<Node>, id: EventId) -> Option<Ref<'static, Node>> {
        crate::local::with(|cx| super::take(cx.held(), s, id))
    }
    fn visit<R>(
        s: &'static TaggedSlab<Node>,
        id: EventId,
        f: impl FnOnce(&Node) -> (R, bool),
    ) -> Option<Visit<R>> {
        crate::local::with(|cx| super::visit(cx.held(), s, id, f))
    }

    /// Completes `id` as the engine does: its node DONE first, then the
    /// slot retired.
    fn complete(s: &'static TaggedSlab<Node>, id: EventId) -> Option<Ref<'static, Node>> {
        assert_eq!(s.with(id, |n| n.stop(1)), Ok(crate::node::Stop::Complete));
        s.retire(id)
    }

    fn slab() -> &'static TaggedSlab<Node> {
        Box::leak(Box::new(TaggedSlab::new(64)))
    }

    /// The fork test bumps the process-wide fork count, which makes every
    /// thread forget its entries: the tests of this module run one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn node() -> Node {
        Node::new(Kind::Coll, 1, 0, 0, Info::None, 0)
    }

    #[test]
    fn hit_only_for_the_same_slab_and_live_id() {
        let _serial = serial();
        let (a, b) = (slab(), slab());
        let (id, r) = a.insert_and_get(node()).unwrap();
        put(a, id, r);
        assert!(take(b, id).is_none(), "another slab's entry never matches");
        let r = take(a, id).expect("same slab and id: hit");
        assert!(take(a, id).is_none(), "taken: the cache is empty");
        put(a, id, r);
        assert!(complete(a, id).is_some());
        assert!(take(a, id).is_none(), "retired: a held reference is no hit");
        assert_eq!(a.check(id), Err(evring::Miss::Stale));
        // Holding an event of another slab gives the first slab's back.
        let (x, rx) = a.insert_and_get(node()).unwrap();
        put(a, x, rx);
        let (y, ry) = b.insert_and_get(node()).unwrap();
        put(b, y, ry);
        assert!(take(a, x).is_none(), "given back");
        assert!(take(b, y).is_some());
        clear();
    }

    #[test]
    fn a_held_retired_slot_is_freed_when_looked_up_stale_or_evicted() {
        let _serial = serial();
        let s: &'static TaggedSlab<Node> = Box::leak(Box::new(TaggedSlab::new(HELD + 2)));
        let (x, rx) = s.insert_and_get(node()).unwrap();
        put(s, x, rx);
        drop(complete(s, x));
        let mut others = Vec::new();
        for _ in 0..HELD + 1 {
            others.push(s.insert(node()).unwrap());
        }
        assert!(
            s.insert(node()).is_err(),
            "x is retired but its slot is still referenced by the cache"
        );
        assert!(take(s, x).is_none(), "stale: no hit, reference dropped");
        let y = s.insert(node()).expect("x's slot is free again");
        // Eviction: after HELD newer events, y's reference is given back.
        put(s, y, s.get(y).unwrap());
        for &o in &others[..HELD] {
            put(s, o, s.get(o).unwrap());
        }
        assert!(take(s, y).is_none(), "evicted");
        drop(complete(s, y));
        let z = s
            .insert(node())
            .expect("y's slot freed at retire: not held");
        assert!(take(s, others[0]).is_some(), "still held");
        assert!(take(s, z).is_none());
        clear();
    }

    #[test]
    fn after_fork_entries_are_forgotten_not_released() {
        let _serial = serial();
        let s: &'static TaggedSlab<Node> = Box::leak(Box::new(TaggedSlab::new(1)));
        let (x, rx) = s.insert_and_get(node()).unwrap();
        put(s, x, rx);
        forget_after_fork();
        drop(complete(s, x));
        assert!(take(s, x).is_none());
        assert!(
            s.insert(node()).is_err(),
            "the reference made before the fork is leaked, never released"
        );
    }

    #[test]
    fn visit_runs_in_place_takes_on_request_and_refuses_stale() {
        let _serial = serial();
        let s: &'static TaggedSlab<Node> = Box::leak(Box::new(TaggedSlab::new(4)));
        let (x, rx) = s.insert_and_get(node()).unwrap();
        put(s, x, rx);
        let (y, _) = s.insert_and_get(node()).unwrap();
        assert!(visit(s, y, |_| ((), false)).is_none(), "not held: no visit");
        assert!(matches!(
            visit(s, x, |n| (n.kind, false)),
            Some(Visit::Kept(Kind::Coll))
        ));
        let Some(Visit::Taken(r, ())) = visit(s, x, |_| ((), true)) else {
            panic!("asked for the reference");
        };
        assert!(
            visit(s, x, |_| ((), false)).is_none(),
            "taken: no longer held"
        );
        put(s, x, r);
        drop(complete(s, x));
        let mut ran = false;
        assert!(visit(s, x, |_| {
            ran = true;
            ((), false)
        })
        .is_none());
        assert!(!ran, "a retired event is never visited");
        clear();
    }

    #[test]
    fn with_event_holds_looked_up_events_and_refuses_retired_ones() {
        let _serial = serial();
        let s: &'static TaggedSlab<Node> = Box::leak(Box::new(TaggedSlab::new(8)));
        let with = |id, want| {
            let mut ran = false;
            let out = crate::local::with(|cx| {
                super::with_event(cx.held(), s, id, |n| {
                    ran = true;
                    (n.kind, want)
                })
            });
            (out.map(|(k, r)| (k, r.is_some())), ran)
        };
        // Not held: looked up, then held for the next call.
        let x = s.insert(node()).unwrap();
        assert_eq!(with(x, false), (Ok((Kind::Coll, false)), true));
        let r = take(s, x).expect("held after the lookup");
        put(s, x, r);
        // Held: run in place, reference handed out on request.
        assert_eq!(with(x, true), (Ok((Kind::Coll, true)), true));
        assert!(take(s, x).is_none(), "handed out: no longer held");
        // DONE but not yet retired (a completion in progress on another
        // thread): found by the lookup, as without a cache.
        let (y, ry) = s.insert_and_get(node()).unwrap();
        put(s, y, ry);
        assert_eq!(s.with(y, |n| n.stop(1)), Ok(crate::node::Stop::Complete));
        assert_eq!(with(y, false), (Ok((Kind::Coll, false)), true));
        // Retired while held by this thread: stale, `f` never runs, and the
        // held reference is given back (y's slot is reused below).
        assert!(s.retire(y).is_some());
        assert_eq!(with(y, false), (Err(evring::Miss::Stale), false));
        assert!(take(s, y).is_none());
        let foreign = EventId::from_raw(0xdead).unwrap();
        assert_eq!(with(foreign, false), (Err(evring::Miss::Foreign), false));
        clear();
        for _ in 0..7 {
            s.insert(node()).expect("every slot but x's is free again");
        }
    }

    #[test]
    fn references_are_given_back_at_thread_exit_and_never_held_after() {
        let _serial = serial();
        let s: &'static TaggedSlab<Node> = Box::leak(Box::new(TaggedSlab::new(2)));
        // A thread holds two references and exits without another call.
        let ids = std::thread::spawn(move || {
            let (x, rx) = s.insert_and_get(node()).unwrap();
            let (y, ry) = s.insert_and_get(node()).unwrap();
            put(s, x, rx);
            put(s, y, ry);
            assert!(crate::local::with_local(|l| l
                .unwrap()
                .held
                .current()
                .is_some()));
            (x, y)
        })
        .join()
        .unwrap();
        drop(complete(s, ids.0));
        drop(complete(s, ids.1));
        let a = s
            .insert(node())
            .expect("the exited thread's references were given back");
        let b = s.insert(node()).expect("both of them");
        // Once closed (the guard ran), a reference put is dropped, not held.
        let h = Held::new();
        h.close();
        super::put(Some(&h), s, a, s.get(a).unwrap());
        assert!(
            super::take(Some(&h), s, a).is_none(),
            "closed: nothing held"
        );
        drop(complete(s, a));
        drop(complete(s, b));
        s.insert(node())
            .expect("a's slot is free: its reference was dropped");
    }
}
