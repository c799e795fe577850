//! Writing a record in place: [`RecordSlot`] and [`Written`], the two halves
//! of [`RecordRing::push_with`](super::RecordRing::push_with).
//!
//! A record built on the stack and then pushed is written twice (once on the
//! stack, once into the ring's slot: 128 bytes each for the shim's record).
//! `push_with` hands the producer the slot itself instead. The types make
//! the in-place write safe:
//!
//! * the closure gets a `RecordSlot<'s, R>` and must return a `Written<'s, R>`;
//!   the only way to make one is [`RecordSlot::write`], so a returned
//!   `Written` proves that the slot holds a whole `R`;
//! * `'s` is chosen afresh for every call (the closure is generic over it)
//!   and is invariant, so a `Written` of another slot (another push, a
//!   nested one) never has the right type.
//!
//! After the write the producer may still change the record through the
//! `Written` (it dereferences to `&mut R`): the record is published only
//! once the closure has returned.

use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::{Deref, DerefMut};

/// Makes `'s` invariant: neither a longer nor a shorter lifetime converts.
type Brand<'s> = PhantomData<fn(&'s ()) -> &'s ()>;

/// The uninitialised slot a record is about to be written into (see
/// [`RecordRing::push_with`](super::RecordRing::push_with)).
pub struct RecordSlot<'s, R> {
    cell: &'s mut MaybeUninit<R>,
    _brand: Brand<'s>,
}

/// Proof that a [`RecordSlot`] was written: dereferences to the record,
/// which may still be changed until the closure returns.
pub struct Written<'s, R> {
    record: &'s mut R,
    _brand: Brand<'s>,
}

impl<'s, R> RecordSlot<'s, R> {
    #[inline(always)]
    pub(super) fn new(cell: &'s mut MaybeUninit<R>) -> Self {
        Self {
            cell,
            _brand: PhantomData,
        }
    }

    /// Writes `record` into the slot.
    #[inline(always)]
    pub fn write(self, record: R) -> Written<'s, R> {
        Written {
            record: self.cell.write(record),
            _brand: PhantomData,
        }
    }
}

impl<R> Deref for Written<'_, R> {
    type Target = R;

    #[inline(always)]
    fn deref(&self) -> &R {
        self.record
    }
}

impl<R> DerefMut for Written<'_, R> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut R {
        self.record
    }
}

/// Runs `f` on a slot on the stack and returns the record it wrote (the
/// paths that push a record by value).
#[inline(always)]
pub(super) fn build<R, F>(f: F) -> R
where
    F: for<'s> FnOnce(RecordSlot<'s, R>) -> Written<'s, R>,
{
    let mut cell = MaybeUninit::uninit();
    let _: Written<'_, R> = f(RecordSlot::new(&mut cell));
    // SAFETY: `f` returned a `Written` of the brand of this call's slot, and
    // only `RecordSlot::write` of that slot makes one: `cell` holds an `R`.
    unsafe { cell.assume_init() }
}
