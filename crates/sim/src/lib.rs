//! evring-sim: drives any NCCL profiler plugin through its C ABI, exactly as NCCL
//! would, and proves it loses and leaks nothing.
//!
//! * [`scenario`] generates NCCL's call orders (`nccl-profiler-abi.md` §3) on NCCL's
//!   thread structure: SHM, P2P with kernel events, NET socket and IB, PXN, grouped
//!   send/recv, CUDA graphs, non-blocking and split communicators, abort, and process
//!   exit without finalize.
//! * [`replay`] replays recorded call logs ([`fixture`] parses them).
//! * [`plugin`] loads a plugin library (a private copy per simulated process) and adapts
//!   calls to whichever ABI version it exports, like NCCL's per-version shims.
//! * [`driver`] counts every call per simulated process and thread; [`pace`] holds
//!   the issuing threads to a rate (by default a multiple of NCCL's real peak).
//! * [`trace`] reads the Chrome traces a plugin wrote; [`report`] judges a run from our
//!   shim's exact counters (or, for other plugins, from what is observable) and prints
//!   the table.
//! * [`isolate`] runs each of the CLI's runs in a child process with the plugin's
//!   settings as its process-wide environment: a crash is a verdict, memory is judged.
//! * [`logger`] is the printf-style logger every `init` gets, as from NCCL.
//! * [`locate`] finds our plugin next to the executable (the binary never runs cargo).

pub mod chaos;
pub mod driver;
pub mod fixture;
pub mod isolate;
pub mod locate;
pub mod logger;
pub mod pace;
pub mod pftrace;
pub mod plugin;
pub mod replay;
pub mod report;
pub mod scenario;
pub mod trace;

use std::path::{Path, PathBuf};

/// The recorded NCCL 2.28.9 logs in this repository (`tests/fixtures/nccl-2.28.9`),
/// found relative to this crate's sources. Tests read them from here; the binary
/// carries its own copy ([`RECORDED_LOGS`]).
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nccl-2.28.9")
}

/// `startEvent` calls per second per simulated process unless `--rate` says
/// otherwise: 2.1× the busiest 10 ms of one real NCCL 2.28.9 process at mask
/// 4095 (1 913 starts in 10 ms during a burst of 1000 all-reduces), 5× its
/// busiest 100 ms (docs/sim.md, "Pace").
pub const DEFAULT_RATE: u64 = 400_000;

/// The four recorded logs, in a fixed order.
pub fn fixture_logs() -> Vec<PathBuf> {
    RECORDED_LOGS
        .iter()
        .map(|(stem, _)| fixtures_dir().join(format!("{stem}.log")))
        .collect()
}

/// The four recorded logs compiled into the binary as `(stem, text)`, so that
/// `evring-sim all` needs no file of the source tree at run time.
pub const RECORDED_LOGS: [(&str, &str); 4] = [
    (
        "A655",
        include_str!("../../../tests/fixtures/nccl-2.28.9/A655.log"),
    ),
    (
        "A656",
        include_str!("../../../tests/fixtures/nccl-2.28.9/A656.log"),
    ),
    (
        "B861",
        include_str!("../../../tests/fixtures/nccl-2.28.9/B861.log"),
    ),
    (
        "B862",
        include_str!("../../../tests/fixtures/nccl-2.28.9/B862.log"),
    ),
];
