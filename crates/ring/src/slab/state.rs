//! A slot's state word: `generation | references | LIVE`, changed only by
//! atomic operations on the whole word, so every transition sees all three.
//!
//! ```text
//!  63 ........................ 25 24 ................ 1   0
//! [ generation (0 = dead slot)   | references (24 bits) | LIVE ]
//! ```
//!
//! * `LIVE`: the slot holds a value that its current generation's ID may reach.
//! * references: [`Ref`](super::Ref)s held on the slot. A reference can only
//!   be taken while the slot is LIVE with the ID's generation.
//! * generation: the generation the next (or current) ID of this slot carries.
//!   Retire bumps it in the same step that clears LIVE; a slot whose
//!   generation would wrap gets 0, which no ID carries, and is never reused.
//!
//! The value is dropped by whoever sees the word reach "not LIVE, no
//! references": the retiring call if nobody else held a reference, otherwise
//! the last reference dropped.

pub(crate) const LIVE: u64 = 1;
const REF_SHIFT: u32 = 1;
const REF_BITS: u32 = 24;
pub(crate) const REF_ONE: u64 = 1 << REF_SHIFT;
const REF_MASK: u64 = ((1 << REF_BITS) - 1) << REF_SHIFT;
/// `lookup` stops one short of the field's maximum so that `retire` can
/// always take the reference it hands back.
pub(crate) const LOOKUP_MAX_REFS: u64 = (1 << REF_BITS) - 2;
const GEN_SHIFT: u32 = REF_SHIFT + REF_BITS;
/// The widest generation a state word holds (`Config::GEN_BITS` is checked against it).
pub(crate) const MAX_GEN_BITS: u32 = 64 - GEN_SHIFT;

#[inline(always)]
pub(crate) const fn generation(state: u64) -> u64 {
    state >> GEN_SHIFT
}

#[inline(always)]
pub(crate) const fn refs(state: u64) -> u64 {
    (state & REF_MASK) >> REF_SHIFT
}

/// The state word with its reference count cleared.
#[inline(always)]
pub(crate) const fn without_refs(state: u64) -> u64 {
    state & !REF_MASK
}

/// A live slot of generation `g` with no references.
#[inline(always)]
pub(crate) const fn live(g: u64) -> u64 {
    g << GEN_SHIFT | LIVE
}

/// A free (or retired) slot whose next ID carries generation `g`.
#[inline(always)]
pub(crate) const fn free(g: u64) -> u64 {
    g << GEN_SHIFT
}

/// The word after retiring generation `g` (of at most `gen_mask`), with
/// `refs` references: the next generation, or 0 (dead) if `g` was the last.
#[inline(always)]
pub(crate) const fn retired(g: u64, gen_mask: u64, refs: u64) -> u64 {
    let next = if g < gen_mask { g + 1 } else { 0 };
    next << GEN_SHIFT | refs << REF_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let s = live(5) + 3 * REF_ONE;
        assert_eq!((generation(s), refs(s), s & LIVE), (5, 3, 1));
        assert_eq!(without_refs(s), live(5));
        let r = retired(5, 7, 4);
        assert_eq!((generation(r), refs(r), r & LIVE), (6, 4, 0));
        assert_eq!(generation(retired(7, 7, 0)), 0, "wrap kills the slot");
        let max = live((1 << MAX_GEN_BITS) - 1) + (LOOKUP_MAX_REFS + 1) * REF_ONE;
        assert_eq!(generation(max), (1 << MAX_GEN_BITS) - 1);
        assert_eq!(refs(max), LOOKUP_MAX_REFS + 1);
    }
}
