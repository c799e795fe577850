//! # evring
//!
//! Lifetime management for handles that cross threads and outlive their
//! owners' expectations, with no NCCL knowledge:
//!
//! * [`TaggedSlab`]: fixed-capacity, lock-free storage addressed by
//!   generation-tagged [`EventId`]s. A stale, foreign or malformed ID is
//!   detected and refused, never dereferenced. Readers hold counted [`Ref`]s;
//!   a retired slot is recycled only after the last of them is dropped, so a
//!   reader never sees its slot reused, and a reader that stalls holds up
//!   that one slot only.
//! * [`RecordRing`]: a bounded multi-producer queue of completed records: a
//!   single-producer lane for each of the first 16 thread indices, shared
//!   lanes for the rest and for overflow; a full ring is a counted drop,
//!   never a wait.
//! * [`BoundedQueue`]: a bounded multi-producer multi-consumer FIFO.
//! * [`Counter`]: a striped counter for hot statistics.
//! * [`direct_static!`]: a reference to a static without the GOT load that
//!   position-independent code otherwise pays (one cache line fewer for a
//!   call made after a pause).
//!
//! The design, memory orderings and proofs are in `docs/ring.md`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod counter;
mod direct;
mod hint;
mod id;
mod queue;
mod resident;
mod ring;
mod slab;
mod sync;
mod thread_index;
// Under loom only for its model (`tests/loom_tp_table.rs`): the loom build's
// thread index uses its thread-locals alone.
#[cfg(any(
    all(test, evring_loom),
    all(not(evring_loom), target_arch = "x86_64", target_os = "linux")
))]
mod tp_table;

#[cfg(test)]
mod tests;

/// The crate README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use counter::Counter;
#[doc(hidden)]
pub use direct::__at;
pub use id::{Config, DefaultConfig, EventId};
pub use queue::BoundedQueue;
pub use resident::populate;
pub use ring::{RecordRing, RecordSlot, Written};
pub use slab::{Full, Miss, Ref, SlabStats, TaggedSlab};
pub use thread_index::{
    after_fork_in_child, populate_thread_table, with_thread, Me, ThreadCache, MAX_THREADS,
};
