//! The binary: bad input gives one clear line on stderr and a non-zero exit, never a
//! panic trace; `list` and a small run work.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_evring-sim");

fn sim(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .output()
        .expect("run evring-sim")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("evring-sim-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Exit status 2 and exactly one line on stderr containing `what`.
fn one_line_error(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line, got: {err}");
    assert!(err.contains(what), "{what:?} not in {err:?}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[test]
fn missing_plugin() {
    let out = sim(&["run", "shm", "-q", "--plugin", "/nonexistent/libnothing.so"]);
    one_line_error(
        &out,
        "cannot load profiler plugin /nonexistent/libnothing.so",
    );
}

/// A shared library built in this workspace that is not a profiler: a proc-macro
/// dylib from the same target directory (clap's and serde's derives are deps).
fn not_a_plugin() -> PathBuf {
    let deps = Path::new(EXE).parent().unwrap().join("deps");
    std::fs::read_dir(&deps)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.ends_with(".so") && n.contains("_derive")
        })
        .expect("a proc-macro .so next to the binary")
}

#[test]
fn library_without_profiler_symbols() {
    let lib = not_a_plugin();
    let out = sim(&["run", "shm", "-q", "--plugin", lib.to_str().unwrap()]);
    one_line_error(
        &out,
        "not a profiler plugin: it exports none of ncclProfiler_v7, ncclProfiler_v6",
    );
}

#[test]
fn unknown_abi_version() {
    let out = sim(&[
        "run",
        "shm",
        "-q",
        "--abi",
        "9",
        "--plugin",
        "/nonexistent/x.so",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn malformed_log_line() {
    let d = tmp("malformed");
    let log = d.join("bad.log");
    std::fs::write(
        &log,
        "7f INIT 0x1 abc 0 0x10\n7f START 0x2 0x1 256 (nil) 0 - 1 2 3\n",
    )
    .unwrap();
    let out = sim(&[
        "replay",
        "-q",
        "--plugin",
        "/nonexistent/x.so",
        log.to_str().unwrap(),
    ]);
    one_line_error(&out, "bad.log: line 2: START: missing word 3");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn truncated_log() {
    let d = tmp("truncated");
    let text = std::fs::read_to_string(evring_sim::fixtures_dir().join("B861.log")).unwrap();
    let log = d.join("cut.log");
    std::fs::write(&log, &text[..text.len() / 2]).unwrap();
    let out = sim(&[
        "replay",
        "-q",
        "--plugin",
        "/nonexistent/x.so",
        log.to_str().unwrap(),
    ]);
    one_line_error(&out, "truncated");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn missing_log() {
    let out = sim(&[
        "replay",
        "-q",
        "--plugin",
        "/nonexistent/x.so",
        "/nonexistent/none.log",
    ]);
    one_line_error(&out, "cannot read /nonexistent/none.log");
}

#[test]
fn unknown_scenario() {
    let out = sim(&["run", "nope", "-q", "--plugin", "/nonexistent/x.so"]);
    one_line_error(&out, "unknown scenario \"nope\"");
}

#[test]
fn list_names_every_scenario() {
    let out = sim(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for s in evring_sim::scenario::Scenario::ALL {
        assert!(text.contains(s.name()), "{text}");
    }
}

/// A copy of the binary in a directory of its own: it must not build anything (no
/// cargo at run time) and must say in one line which paths it tried.
#[test]
fn binary_alone_names_the_paths_it_tried() {
    let d = tmp("alone");
    let exe = d.join("evring-sim");
    std::fs::copy(EXE, &exe).unwrap();
    let out = Command::new(&exe)
        .args(["all", "-q", "--events", "1000"])
        .env_remove("CARGO")
        .output()
        .unwrap();
    one_line_error(
        &out,
        &format!(
            "no plugin found next to evring-sim: tried {}",
            d.join("libevring_shim.so").display()
        ),
    );
    let _ = std::fs::remove_dir_all(d);
}

/// The binary and our plugin copied together, away from the source tree: `all`
/// (every scenario and the recorded NCCL logs, which the binary carries) passes.
#[test]
fn binary_beside_plugin_runs_everything_away_from_the_source_tree() {
    let d = tmp("beside");
    let exe = d.join("evring-sim");
    std::fs::copy(EXE, &exe).unwrap();
    let so = common::plugin();
    std::fs::copy(&so, d.join("libevring_shim.so")).unwrap();
    let out = Command::new(&exe)
        .args(["all", "-q", "--events", "2000", "--ring", "65536"])
        .current_dir(&d)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for stem in ["A655", "A656", "B861", "B862"] {
        assert!(text.contains(&format!("replay {stem}")), "{text}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// Sizes of zero are bad input, refused before anything runs (one line, exit 2).
#[test]
fn zero_sizes_are_refused() {
    for flag in ["--events", "--ranks", "--channels", "--steps", "--replays"] {
        let out = sim(&[
            "run",
            "shm",
            "-q",
            flag,
            "0",
            "--plugin",
            "/nonexistent/x.so",
        ]);
        one_line_error(&out, flag);
    }
    let out = sim(&[
        "run",
        "shm",
        "-q",
        "--channels",
        "65",
        "--plugin",
        "/nonexistent/x.so",
    ]);
    one_line_error(&out, "--channels");
}

/// Values our shim cannot take are raised to its minimum, and the run says so.
#[test]
fn capacity_below_the_minimum_is_reported_as_changed() {
    let so = common::plugin();
    let out = sim(&[
        "run",
        "shm",
        "-q",
        "--events",
        "5000",
        "--capacity",
        "8",
        "--plugin",
        so.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--capacity 8 is outside our shim's range 64..=1048576; using 64"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// With the smallest ring the writer cannot keep up: records are lost (counted), the
/// traces miss Coll/P2p, and the run fails instead of calling that `ok`.
#[test]
fn lost_records_fail_the_run() {
    let so = common::plugin();
    let out = sim(&[
        "run",
        "shm",
        "-q",
        "--events",
        "20000",
        "--ring",
        "0",
        "--plugin",
        so.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--ring 0 is outside our shim's range"),
        "{err}"
    );
    // A record lost after its start (the old record ring) leaves a Coll
    // missing from the trace; a start whose log entry finds no room is
    // refused (NULL) instead: either way the paced run fails.
    assert!(
        err.contains("missing from the trace")
            || err.contains("lost to a full ring at a paced rate"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    assert!(
        text.lines().nth(1).is_some_and(|l| l.ends_with("FAIL")),
        "{text}"
    );
}

/// Unpaced stress (`--rate 0`) outruns one writer thread on purpose: with the
/// smallest ring records are lost, counted and noted, and the run is not failed
/// for it (the same run paced fails: `lost_records_fail_the_run`).
#[test]
fn unpaced_stress_notes_ring_losses_instead_of_failing() {
    let so = common::plugin();
    let out = sim(&[
        "run",
        "shm",
        "-q",
        "--events",
        "20000",
        "--ring",
        "16",
        "--rate",
        "0",
        "--plugin",
        so.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected in unpaced stress"), "{err}");
    assert!(err.contains("unpaced stress (--rate 0)"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    let row = text.lines().nth(1).unwrap_or("");
    assert!(row.contains("ring=") && row.ends_with("ok"), "{text}");
}

/// The default job: paced at a multiple of NCCL's real rate, our shim at its own
/// default sizes (32 768-record ring) keeps every record, in a few MiB.
#[test]
fn a_paced_run_at_the_shims_defaults_keeps_every_record() {
    let so = common::plugin();
    let out = sim(&[
        "run",
        "eth",
        "-q",
        "--events",
        "100000",
        "--plugin",
        so.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("paced at 400000 startEvent calls/s"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    let row: Vec<&str> = text
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // scenario calls/s issued recorded dropped late live MiB/inst trace result
    assert_eq!(row.get(4), Some(&"0"), "no drop: {text}");
    let mib: f64 = row[7].parse().unwrap();
    assert!(mib <= 64.0, "{mib} MiB per instance: {text}");
}
