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
//! * [`driver`] counts every call per simulated process and thread.
//! * [`trace`] reads the Chrome traces a plugin wrote; [`report`] judges a run from our
//!   shim's exact counters (or, for other plugins, from what is observable) and prints
//!   the table.

pub mod chaos;
pub mod driver;
pub mod fixture;
pub mod plugin;
pub mod replay;
pub mod report;
pub mod scenario;
pub mod trace;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The recorded NCCL 2.28.9 logs shipped with the project, found relative to this
/// crate's sources.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/nccl-2.28.9")
}

/// The four recorded logs, in a fixed order.
pub fn fixture_logs() -> Vec<PathBuf> {
    ["A655.log", "A656.log", "B861.log", "B862.log"]
        .iter()
        .map(|f| fixtures_dir().join(f))
        .collect()
}

/// Builds our shim with `cargo build --release -p evring-shim` in this workspace and
/// returns the path of the shared library cargo reports.
pub fn build_shim() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(&cargo)
        .current_dir(&workspace)
        .args([
            "build",
            "--release",
            "-p",
            "evring-shim",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| {
            format!("cannot run cargo to build the shim (pass --plugin PATH instead): {e}")
        })?;
    if !out.status.success() {
        return Err(format!(
            "cargo build --release -p evring-shim failed ({})",
            out.status
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" || v["target"]["name"] != "evring_shim" {
            continue;
        }
        if let Some(files) = v["filenames"].as_array() {
            for f in files.iter().filter_map(|f| f.as_str()) {
                if f.ends_with(".so") {
                    return Ok(PathBuf::from(f));
                }
            }
        }
    }
    Err("cargo built evring-shim but reported no shared library".to_string())
}
