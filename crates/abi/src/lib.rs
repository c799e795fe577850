//! # evring-abi
//!
//! The C layouts an NCCL profiler plugin deals in, and nothing else: `#[repr(C)]`
//! mirrors of NCCL's profiler-plugin ABI v1 to v7 (descriptors, state arguments,
//! the `ncclProfiler_vN` tables, event-type bits and state values), plus the
//! counter snapshot evring's plugin exports through `evring_stats`
//! ([`StatsV1`]). Like a `-sys` crate it has no behaviour and no dependencies,
//! so any Rust profiler plugin, driver or test harness can use it without
//! linking evring's plugin.
#![deny(unsafe_op_in_unsafe_fn)]
#![no_std]

extern crate alloc;

mod nccl;
mod stats;

pub use nccl::*;
pub use stats::StatsV1;
