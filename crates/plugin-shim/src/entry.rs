//! One profiler call as NCCL's thread logs it: what the hot path (`hot.rs`)
//! appends to its own lane of the log, and what the assembler
//! (`assemble.rs`) reads back on the writer thread.
//!
//! An entry carries what the writer cannot find later: the event's ID, the
//! host time of the call and, for a start, the descriptor as converted on
//! the calling thread (strings as symbols: NCCL's memory is not ours to
//! read afterwards). Nothing in it points anywhere.

use crate::model::{Info, Kind, StateArg};
use crate::symbols::Sym;

/// A logged call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    /// The event's ID (`EventId::get`), never 0.
    pub id: u64,
    /// Host time of the call (`clock::now_ns`), read as the entry is written
    /// into its lane (`hot.rs`).
    pub t: u64,
    pub op: Op,
}

/// What the call was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Start(Start),
    Stop,
    State(StateArg),
    /// A start of this kind whose parent is the entry's ID was refused at
    /// the call (the slab was full): the child never gets an ID, so the
    /// parent must not wait for it (`hot.rs`, `assemble.rs`).
    Refused(Kind),
}

/// A start's converted descriptor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Start {
    /// Stream the event belongs to (its context ID, or `DETACHED`).
    pub ctx: u64,
    /// `parentObj` as NCCL gave it (0: none). Resolved by the assembler.
    pub parent: u64,
    pub rank: i32,
    pub kind: Kind,
    pub info: Info<Sym>,
    /// Flags known at the call (`bad_string`, `detached`, `foreign_parent`).
    pub flags: u32,
    /// Children the event waits for, under the mask in force at its start.
    pub expect: u8,
}

// Two cache lines at most: a lane entry is written by NCCL's thread and read
// once by the writer.
const _: () = assert!(std::mem::size_of::<Entry>() <= 128);
