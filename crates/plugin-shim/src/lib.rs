//! # evring-shim
//!
//! An NCCL profiler plugin (ABI v1 to v6) whose handles are
//! [`evring::EventId`]s. NCCL loads it through `NCCL_PROFILER_PLUGIN`; see
//! `docs/shim.md` for the lifetime policy, settings and output format.
//!
//! Three parts:
//! * **the hot path** NCCL's threads run: `exports` (C entry points, panics
//!   caught) → `convert` (per-version descriptors into `model`) → `hot`
//!   (an ID from the slab, a clock read, one `entry` in the thread's lane);
//! * **the assembler** (`assemble`): a single-threaded state machine on the
//!   writer thread that puts events together from the log (parents,
//!   completion, bounded waiting);
//! * **the sinks** the `writer` thread hands completed records to: trace
//!   encoders (`perfetto`, `chrome_json`), `metrics`, user sinks (`sink`).
#![deny(unsafe_op_in_unsafe_fn)]

/// NCCL's profiler ABI (the `evring-abi` crate), under its old path.
pub use evring_abi as abi;
pub mod assemble;
pub mod bandwidth;
pub mod chrome_json;
pub mod clock;
pub mod config;
pub mod convert;
pub mod counters;
pub mod engine;
pub mod entry;
mod exit;
pub mod exports;
pub mod flows;
mod fork;
pub mod format;
pub mod host;
mod hot;
mod hotline;
pub mod lanes;
mod local;
pub mod log;
pub mod metrics;
pub mod model;
pub mod perfetto;
pub mod record;
pub mod recorder;
pub mod sink;
pub mod strings;
pub mod symbols;
pub mod trace;
pub mod writer;

#[cfg(test)]
mod test_records;

pub use evring_abi::StatsV1;
