//! # evring-shim
//!
//! An NCCL profiler plugin (ABI v1 to v6) whose handles are
//! [`evring::EventId`]s. NCCL loads it through `NCCL_PROFILER_PLUGIN`; see
//! `docs/shim.md` for the lifetime policy, settings and output format.
//!
//! Layers, outermost first: `exports` (C entry points, panics caught) →
//! `convert` (per-version descriptors into `model`) → `engine` (the policy)
//! → `node` (one event's reference word) → `evring` (slab, ring). The
//! `writer` thread turns completed records into Chrome traces.
#![deny(unsafe_op_in_unsafe_fn)]
// The cost attribution build `evring_ablate="floor"` (`floor.rs`) bypasses the
// engine's lifetime code, which it leaves compiled but unused.
#![cfg_attr(evring_ablate = "floor", allow(dead_code))]

/// NCCL's profiler ABI (the `evring-abi` crate), under its old path.
pub use evring_abi as abi;
pub mod bandwidth;
pub mod chrome_json;
pub mod clock;
pub mod compact;
pub mod config;
pub mod convert;
pub mod counters;
pub mod engine;
mod exit;
pub mod exports;
#[cfg(evring_ablate = "floor")]
mod floor;
pub mod flows;
mod fork;
pub mod format;
mod held;
pub mod host;
pub mod lanes;
mod local;
pub mod log;
pub mod metrics;
pub mod model;
pub mod node;
pub mod perfetto;
pub mod record;
pub mod recorder;
#[cfg(evring_ablate = "selftime")]
pub mod selftime;
pub mod sink;
pub mod strings;
pub mod symbols;
pub mod trace;
pub mod writer;

#[cfg(test)]
mod test_records;

pub use evring_abi::StatsV1;
