//! Parent → child arrows, for both trace formats.
//!
//! A child completes (and is written) before its parent, so each child's
//! flow id waits here until its parent's slice is written with the list of
//! arrows leaving it. A flow id is the child's id in its trace form, keyed by
//! the stream ([`evring_perfetto::ids::flow`]): unique per child, different
//! per stream of one file, and the child's id can be read back from it.

use crate::record::flag;
use crate::record::Record;
use rustc_hash::FxHashMap;

/// Children waiting for their parent's slice, at most this many parents.
const MAX_PENDING_PARENTS: usize = 1 << 16;

/// Emptied lists kept for the next parents (most parents have a few
/// children: a list per parent would be an allocation per parent).
const SPARE_LISTS: usize = 1024;

pub struct Flows {
    key: u64,
    /// Parent id → flow ids of its children already written.
    pending: FxHashMap<u64, Vec<u64>>,
    /// Lists given back ([`recycle`](Self::recycle)), for the next parents.
    spare: Vec<Vec<u64>>,
    /// Arrows written (both ends).
    pub linked: u64,
    lost: u64,
}

impl Flows {
    pub fn new(key: u64) -> Flows {
        Flows {
            key,
            pending: FxHashMap::default(),
            spare: Vec::new(),
            linked: 0,
            lost: 0,
        }
    }

    /// Children with no arrow: their parent came first, never came, was
    /// foreign, or was forgotten at the pending limit.
    pub fn unmatched(&self) -> u64 {
        self.lost + self.pending.values().map(|v| v.len() as u64).sum::<u64>()
    }

    /// The flow id of the arrow into `child`.
    pub fn id(&self, child: u64) -> u64 {
        evring_perfetto::ids::flow(child, self.key)
    }

    /// The arrow ending at record `r`'s slice, if it gets one (its parent's
    /// slice is still to be written).
    pub fn into_child(&mut self, r: &Record) -> Option<u64> {
        if r.parent == 0 {
            return None;
        }
        if r.flags & (flag::LATE_CHILD | flag::FOREIGN_PARENT) != 0 {
            self.lost += 1;
            return None;
        }
        if self.pending.len() >= MAX_PENDING_PARENTS && !self.pending.contains_key(&r.parent) {
            // Parents that never complete here: forget them, counted.
            self.lost += self.pending.values().map(|v| v.len() as u64).sum::<u64>();
            self.pending.clear();
        }
        let f = self.id(r.id);
        let spare = &mut self.spare;
        self.pending
            .entry(r.parent)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(f);
        Some(f)
    }

    /// The arrows leaving record `id`'s slice (to its children already
    /// written); give the list back with [`recycle`](Self::recycle) once written.
    pub fn out_of(&mut self, id: u64) -> Option<Vec<u64>> {
        let v = self.pending.remove(&id)?;
        self.linked += v.len() as u64;
        Some(v)
    }

    /// Takes back a list [`out_of`](Self::out_of) gave, for another parent.
    pub fn recycle(&mut self, mut v: Vec<u64>) {
        if self.spare.len() < SPARE_LISTS && v.capacity() <= 64 {
            v.clear();
            self.spare.push(v);
        }
    }
}
