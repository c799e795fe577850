//! Call logs that the plugin recorded on GPUs (`EVRING_RECORD`, the `record`
//! stage of tests/gpu/run.sh, packed by tests/gpu/make_fixtures.py) replayed
//! in CI: every operation the driver issued has its API event in the log, the
//! timing sidecar is whole, and the simulator's replay of each log through
//! the release plugin leaks and loses nothing.
//!
//! Each `tests/fixtures/<dir>/manifest.json` lists its logs; see its README.

mod common;
use common::*;
use evring_shim::abi::ty;
use evring_sim::fixture::{func_names, parse_file, resolve_name, Verb};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn manifests() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|rd| {
            rd.filter_map(|e| Some(e.ok()?.path().join("manifest.json")))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// START calls of type `t` whose func is `func` and whose count (word 1 of
/// CollApi and P2pApi) is `count`.
fn api_starts(log: &Path, t: u64, func: &str, count: u64) -> u64 {
    let calls = parse_file(log).unwrap();
    let names = func_names(&calls);
    calls
        .iter()
        .filter(|c| match &c.verb {
            Verb::Start {
                ty: st,
                name,
                words,
                ..
            } => {
                *st == t
                    && words[1] == count
                    && resolve_name(*st, name.as_deref(), words, &names) == Some(func)
            }
            _ => false,
        })
        .count() as u64
}

fn check_log(dir: &Path, entry: &Value) {
    let name = entry["log"].as_str().unwrap();
    let log = dir.join(name);
    let calls = parse_file(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let times = std::fs::read_to_string(log.with_extension("times")).unwrap();
    assert_eq!(
        times.lines().count(),
        calls.len(),
        "{name}: one time per call"
    );

    let world = entry["world"].as_u64().unwrap();
    for row in entry["issued"].as_array().unwrap() {
        let t = match row["cat"].as_str().unwrap() {
            "CollApi" => ty::COLL_API,
            "P2pApi" => ty::P2P_API,
            other => panic!("{name}: unknown event {other}"),
        };
        let func = row["func"].as_str().unwrap();
        let issued = row["n"].as_u64().unwrap();
        // Single-rank communicators produce no events (ABI doc §3.1).
        let want = if world > 1 { issued } else { 0 };
        let got = api_starts(&log, t, func, row["count"].as_u64().unwrap());
        assert_eq!(got, want, "{name}: {row}");
    }

    let mut p = evring_sim::scenario::Params::new(plugin_so().to_path_buf());
    p.mask = Some(entry["mask"].as_i64().unwrap() as i32);
    p.ring = Some(1 << 18);
    let o = evring_sim::replay::replay(&log, &p).unwrap_or_else(|e| panic!("{e}"));
    assert!(o.ok(), "{name}: {:?}", o.problems);
    assert!(
        o.notes.iter().all(|n| !n.contains("no START")),
        "{name}: {:?}",
        o.notes
    );
}

#[test]
fn gpu_recordings_replay() {
    let found = manifests();
    if found.is_empty() {
        eprintln!(
            "no GPU recordings under tests/fixtures (docs/validation.md says how to make them)"
        );
        return;
    }
    for m in found {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
        let dir = m.parent().unwrap();
        let logs = v["logs"].as_array().unwrap();
        assert!(!logs.is_empty(), "{}: no logs", m.display());
        for entry in logs {
            check_log(dir, entry);
        }
    }
}
