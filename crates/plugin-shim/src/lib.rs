//! evring-shim.

pub mod abi;
