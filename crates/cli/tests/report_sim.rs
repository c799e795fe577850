//! `evring report` on what the simulator's default job writes: the ranks of
//! one communicator share its id (NCCL's commHash), so the report reads every
//! rank of each communicator and matches their collectives (by function and
//! sequence number) into the straggler table. The dump directory is given as
//! it is (`evring report DIR`).

use evring_sim::scenario::{Params, Scenario};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `EVRING_PLUGIN` if set, else the release plugin built as the README says.
fn plugin() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    evring_sim::locate::build_release_plugin(&workspace).unwrap_or_else(|e| panic!("{e}"))
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn report(dir: &Path) -> (Value, String) {
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_evring"));
        c.arg("report");
        if json {
            c.arg("--json");
        }
        let o = c.arg(dir).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    (serde_json::from_str(&run(true)).unwrap(), run(false))
}

/// Runs `sc` (two ranks, as the default job) and reports its process's dump directory.
fn job(sc: Scenario, tag: &str) -> (Value, String, Dir) {
    let dir =
        Dir(std::env::temp_dir().join(format!("evring-report-sim-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut p = Params::new(plugin());
    p.events = 20_000;
    p.trace_root = Some(dir.0.clone());
    p.keep = true;
    let o = evring_sim::scenario::run(sc, &p).unwrap_or_else(|e| panic!("{e}"));
    assert!(o.ok(), "{:?}", o.problems);
    let traces = o.trace_dir.clone().unwrap().join("proc0");
    let (r, text) = report(&traces);
    (r, text, dir)
}

/// Every rank of `c` was read and at least `min_matched` of its collectives
/// were matched across ranks.
fn every_rank_read(c: &Value, min_matched: u64) {
    assert_eq!(c["nranks"], 2, "{c}");
    assert_eq!(c["missing_ranks"].as_array().unwrap().len(), 0, "{c}");
    let ranks: Vec<i64> = c["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_i64().unwrap())
        .collect();
    assert_eq!(ranks, [0, 1], "{c}");
    let st = &c["stragglers"];
    assert!(st["matched"].as_u64().unwrap() >= min_matched, "{st}");
}

#[test]
fn default_job_ranks_share_their_communicator() {
    let (r, text, _dir) = job(Scenario::Eth, "eth");
    let comms = r["communicators"].as_array().unwrap();
    assert_eq!(comms.len(), 1, "{r}");
    every_rank_read(&comms[0], 10);
    assert!(text.contains(": 2 of 2 ranks read"), "{text}");
    // The id is the one the simulator gives the scenario's communicator.
    let id = evring_sim::scenario::comm_id(Scenario::Eth, 0);
    assert_eq!(comms[0]["comm_id"], format!("{id:#x}"));
}

#[test]
fn split_parent_and_child_each_have_both_ranks() {
    let (r, _, _dir) = job(Scenario::Split, "split");
    let comms = r["communicators"].as_array().unwrap();
    assert_eq!(comms.len(), 2, "{r}");
    // The parent is finalized half-way, each rank at its own moment, while
    // collectives are in flight: how many both ranks recorded depends on
    // that race (of ~150 per rank: 12 to 30 in 8 runs with main 84277f6's
    // plugin, 4 to 30 in 8 runs with 671ead5's, whose calls are faster; it
    // failed a CI run at >= 10). Matching itself is what this test is for.
    for c in comms {
        every_rank_read(c, 1);
    }
}
