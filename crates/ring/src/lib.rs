//! # evring
//!
//! Lifetime management for handles that cross threads and outlive their
//! owners' expectations, with no NCCL knowledge:
//!
//! * [`TaggedSlab`]: fixed-capacity, lock-free storage addressed by
//!   generation-tagged [`EventId`]s. A stale, foreign or malformed ID is
//!   detected and refused, never dereferenced. Retired slots are recycled only
//!   after an epoch grace period (crossbeam-epoch), so a reader holding a
//!   reference never sees its slot reused.
//! * [`RecordRing`]: a bounded multi-producer queue of completed records; a
//!   full ring is a counted drop, never a wait.
//! * [`Counter`]: a striped counter for hot statistics.
//!
//! The design, memory orderings and proofs are in `docs/ring.md`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod counter;
mod id;
mod queue;
mod ring;
mod slab;
mod sync;

#[cfg(test)]
mod tests;

pub use counter::Counter;
pub use crossbeam_epoch::{pin, Guard};
pub use id::{Config, DefaultConfig, EventId};
pub use queue::BoundedQueue;
pub use ring::RecordRing;
pub use slab::{Full, Miss, SlabStats, TaggedSlab};
