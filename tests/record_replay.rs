//! Record → replay round trip: the simulator replays a real NCCL 2.28.9 log
//! through the release plugin with `EVRING_RECORD` on; the plugin's own log
//! must be the same call sequence, and replaying that log must pass too.
//!
//! One test in its own binary: it sets `EVRING_RECORD` in the process
//! environment, which the plugin instance reads at its first `init`.

mod common;
use common::*;
use evring_shim::abi::ty;
use evring_sim::fixture::{func_names, parse_file, resolve_name, Call, Verb};
use evring_sim::scenario::Params;
use std::collections::HashMap;
use std::path::Path;

fn params() -> Params {
    let mut p = Params::new(plugin_so().to_path_buf());
    p.ring = Some(1 << 18);
    p
}

fn replay(log: &Path) -> evring_sim::report::Outcome {
    let o = evring_sim::replay::replay(log, &params()).unwrap_or_else(|e| panic!("{e}"));
    assert!(o.ok(), "{}: {:?}", o.name, o.problems);
    assert!(
        o.notes.iter().all(|n| !n.contains("no START")),
        "{:?}",
        o.notes
    );
    o
}

/// Words of a START that hold values rather than addresses or handles (the
/// replay gives strings, parents and `proxyOp.pid` new values), per type.
fn value_words(t: u64, w: &[u64; 11]) -> Vec<u64> {
    match t {
        ty::GROUP_API => vec![w[0]],
        ty::COLL_API => vec![w[1], w[3], w[5]],
        ty::P2P_API => vec![w[1], w[4]],
        ty::COLL => vec![w[0], w[4], w[5], w[7]],
        ty::P2P => vec![w[3], w[4]],
        // pid (low half of word 0) is replaced by the replaying process's.
        ty::PROXY_OP => vec![w[0] >> 32, w[1], w[2]],
        ty::PROXY_STEP => vec![w[0]],
        ty::KERNEL_CH => vec![w[0], w[1]],
        _ => vec![],
    }
}

/// One call with handles replaced by the index of the START that made them.
#[derive(Debug, PartialEq, Eq)]
enum Norm {
    Init(u64, i32),
    Start(u64, Option<usize>, i32, Option<String>, Vec<u64>),
    Stop(Option<usize>),
    Rec(Option<usize>, i32, Option<u64>),
    Fin,
}

fn normalise(calls: &[Call]) -> Vec<Norm> {
    let names = func_names(calls);
    let mut idx: HashMap<u64, usize> = HashMap::new();
    let mut out = Vec::new();
    for c in calls {
        out.push(match &c.verb {
            Verb::Init { comm_id, rank, .. } => Norm::Init(*comm_id, *rank),
            Verb::Start {
                handle,
                ty: t,
                parent,
                rank,
                name,
                words,
                ..
            } => {
                let n = Norm::Start(
                    *t,
                    idx.get(parent).copied(),
                    *rank,
                    resolve_name(*t, name.as_deref(), words, &names).map(str::to_string),
                    value_words(*t, words),
                );
                idx.insert(*handle, idx.len());
                n
            }
            Verb::Stop { handle } => Norm::Stop(idx.get(handle).copied()),
            Verb::Rec { handle, state, arg } => Norm::Rec(idx.get(handle).copied(), *state, *arg),
            Verb::Fin { .. } => Norm::Fin,
        });
    }
    out
}

#[test]
fn recorded_nccl_logs_round_trip() {
    for name in ["A655.log", "B862.log"] {
        let original = evring_sim::fixtures_dir().join(name);
        let dir = tempdir("roundtrip");
        let prefix = dir.join("rec-").to_string_lossy().into_owned();
        std::env::set_var("EVRING_RECORD", &prefix);
        replay(&original);
        std::env::remove_var("EVRING_RECORD");

        let log = dir.join(format!("rec-{}.log", std::process::id()));
        let recorded = parse_file(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let want = normalise(&parse_file(&original).unwrap());
        let got = normalise(&recorded);
        // The replay finalizes what the recorded run never did: one FIN more.
        assert_eq!(got.last(), Some(&Norm::Fin), "{name}");
        assert_eq!(got[..got.len() - 1], want[..], "{name}");

        // The plugin's own log replays as cleanly as the original.
        let o = replay(&log);
        assert_eq!(o.procs.len(), 1);
    }
}
