//! `EventId`: the handle a slab hands out, and the bit layout behind it.
//!
//! An ID packs three fields, least significant first:
//!
//! ```text
//!  63 ......................................................... 0
//! [ zero padding | tag: TAG_BITS | generation: GEN_BITS | index: INDEX_BITS ]
//! ```
//!
//! * `index` names the slot.
//! * `generation` counts how often the slot has been handed out; it starts at 1,
//!   so no ID is ever 0 (NCCL's "no event").
//! * `tag` is drawn at random for each slab, so IDs minted by another slab or
//!   another process (PXN) are rejected without looking at any slot.
//!
//! The layout is declared once, by a [`Config`]; every mask and shift derives
//! from its three widths.

use core::fmt;
use core::marker::PhantomData;

/// Compile-time sizes of a slab's IDs. Tests shrink them until wrap-around happens.
pub trait Config: Send + Sync + 'static {
    /// Bits for the slot index; capacity is at most `1 << INDEX_BITS`.
    const INDEX_BITS: u32;
    /// Bits for the per-slot generation. A slot whose generation would wrap is
    /// retired for good, so a generation never repeats within one slot.
    const GEN_BITS: u32;
    /// Bits for the per-slab random tag.
    const TAG_BITS: u32;
}

/// The layout used unless a slab asks for another: up to 2^20 slots, 36
/// generation bits, an 8-bit tag. docs/ring.md has the wrap-around arithmetic.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultConfig;

impl Config for DefaultConfig {
    const INDEX_BITS: u32 = 20;
    const GEN_BITS: u32 = 36;
    const TAG_BITS: u32 = 8;
}

pub(crate) struct Layout<C: Config>(PhantomData<C>);

impl<C: Config> Layout<C> {
    pub(crate) const INDEX_SHIFT: u32 = 0;
    pub(crate) const GEN_SHIFT: u32 = C::INDEX_BITS;
    pub(crate) const TAG_SHIFT: u32 = C::INDEX_BITS + C::GEN_BITS;
    pub(crate) const USED_BITS: u32 = C::INDEX_BITS + C::GEN_BITS + C::TAG_BITS;
    pub(crate) const INDEX_MASK: u64 = mask(C::INDEX_BITS);
    pub(crate) const GEN_MASK: u64 = mask(C::GEN_BITS);
    pub(crate) const TAG_MASK: u64 = mask(C::TAG_BITS);
    /// Evaluated (and so checked) wherever a slab of this config is built.
    pub(crate) const VALID: () = {
        assert!(
            C::INDEX_BITS >= 1 && C::INDEX_BITS <= 31,
            "index must fit u32"
        );
        // A slot's state word keeps 39 bits for the generation (slab/state.rs).
        assert!(C::GEN_BITS >= 1 && C::GEN_BITS <= 39, "generation width");
        assert!(C::TAG_BITS <= 16, "tag width");
        assert!(Self::USED_BITS <= 64, "fields exceed 64 bits");
    };

    #[inline(always)]
    pub(crate) const fn pack(index: u32, generation: u64, tag: u64) -> u64 {
        ((index as u64) << Self::INDEX_SHIFT)
            | ((generation & Self::GEN_MASK) << Self::GEN_SHIFT)
            | ((tag & Self::TAG_MASK) << Self::TAG_SHIFT)
    }

    /// Splits a raw ID into (index, generation, tag); `None` if bits above the
    /// layout are set or the generation is 0, which no slab ever mints.
    #[inline(always)]
    pub(crate) const fn unpack(raw: u64) -> Option<(u32, u64, u64)> {
        if Self::USED_BITS < 64 && raw >> Self::USED_BITS != 0 {
            return None;
        }
        let generation = (raw >> Self::GEN_SHIFT) & Self::GEN_MASK;
        if generation == 0 {
            return None;
        }
        Some((
            ((raw >> Self::INDEX_SHIFT) & Self::INDEX_MASK) as u32,
            generation,
            (raw >> Self::TAG_SHIFT) & Self::TAG_MASK,
        ))
    }
}

const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// A slab handle. Never 0; meaningless outside the slab that minted it, where
/// it is only ever compared, never dereferenced.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct EventId(u64);

impl EventId {
    /// Wraps a raw value received from outside (e.g. an opaque C handle).
    /// Returns `None` for 0. Any other value is accepted here and validated by
    /// the slab on use.
    #[inline(always)]
    pub const fn from_raw(raw: u64) -> Option<Self> {
        if raw == 0 {
            None
        } else {
            Some(Self(raw))
        }
    }

    /// The raw value, for storing in an opaque handle.
    #[inline(always)]
    pub const fn get(self) -> u64 {
        self.0
    }

    #[inline(always)]
    pub(crate) const fn new_unchecked(raw: u64) -> Self {
        Self(raw)
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({:#x})", self.0)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tiny;
    impl Config for Tiny {
        const INDEX_BITS: u32 = 2;
        const GEN_BITS: u32 = 2;
        const TAG_BITS: u32 = 1;
    }

    #[test]
    fn pack_roundtrip_default() {
        type L = Layout<DefaultConfig>;
        let raw = L::pack(0xABCDE, 0x9_8765_4321, 0xEE);
        assert_eq!(L::unpack(raw), Some((0xABCDE, 0x9_8765_4321, 0xEE)));
        assert_ne!(raw, 0);
    }

    #[test]
    fn generation_zero_and_high_bits_are_malformed() {
        type L = Layout<Tiny>;
        assert_eq!(L::unpack(L::pack(3, 0, 1)), None);
        assert_eq!(L::unpack(L::pack(3, 1, 1)), Some((3, 1, 1)));
        assert_eq!(L::unpack(1 << 5), None, "bit above the layout");
        assert_eq!(L::unpack(u64::MAX), None);
        assert_eq!(EventId::from_raw(0), None);
    }

    #[test]
    fn fields_do_not_overlap() {
        type L = Layout<DefaultConfig>;
        assert_eq!(
            L::INDEX_MASK << L::INDEX_SHIFT & L::GEN_MASK << L::GEN_SHIFT,
            0
        );
        assert_eq!(L::GEN_MASK << L::GEN_SHIFT & L::TAG_MASK << L::TAG_SHIFT, 0);
        assert_eq!(L::USED_BITS, 64);
    }
}
