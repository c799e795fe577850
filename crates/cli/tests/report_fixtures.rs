//! `evring report` on the recorded NCCL 2.28.9 logs (two ranks, network
//! transport) replayed through the release plugin: every Coll/P2p of the
//! traces is in the table, collectives are matched across the two ranks by
//! NCCL's own sequence numbers, and the binary traces and their JSON
//! conversions give the same report.

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

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

fn report(paths: &[PathBuf]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_evring"))
        .arg("report")
        .arg("--json")
        .args(paths)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn replayed_two_rank_fixtures() {
    let dir = Dir(std::env::temp_dir().join(format!("evring-report-fix-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut p = evring_sim::scenario::Params::new(plugin());
    p.trace_root = Some(dir.0.clone());
    p.keep = true;
    p.ring = Some(1 << 16);
    let fixtures = evring_sim::fixtures_dir().join("../nccl-2.28.9-2rank-net");
    let mut in_traces = 0;
    for rank in 0..2 {
        let log = fixtures.join(format!("socket-4095-rank{rank}.log"));
        // The plugin's live metrics too (its settings come from the
        // environment at init), one prefix per replay: both replays may
        // run in this process, and metrics files are named by host and pid.
        std::env::set_var(
            "EVRING_METRICS",
            dir.0.join("metrics").join(format!("rank{rank}")),
        );
        let o = evring_sim::replay::replay(&log, &p).unwrap_or_else(|e| panic!("{e}"));
        assert!(o.ok(), "{:?}", o.problems);
        in_traces += o.trace().cat("Coll") + o.trace().cat("P2p");
    }
    let mut pf = Vec::new();
    files(&dir.0, "pftrace", &mut pf);
    assert_eq!(pf.len(), 4, "two communicators x two ranks: {pf:?}");
    let r = report(&pf);
    let comms = r["communicators"].as_array().unwrap();
    assert_eq!(comms.len(), 2);
    let mut ops = 0;
    for c in comms {
        assert_eq!(c["nranks"], 2);
        assert_eq!(c["missing_ranks"].as_array().unwrap().len(), 0);
        for rr in c["ranks"].as_array().unwrap() {
            assert_eq!(rr["footer"], true);
            assert_eq!(rr["cut"], false);
            assert_eq!(rr["drops"], 0);
            ops += rr["ops"].as_u64().unwrap();
        }
        let rows: u64 = c["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["count"].as_u64().unwrap())
            .sum();
        let per_rank: u64 = c["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["ops"].as_u64().unwrap())
            .sum();
        assert_eq!(rows, per_rank);
        // The logs replay one after the other: rank 1 enqueues every
        // collective later than rank 0 did, so it is the one straggler.
        let st = &c["stragglers"];
        assert!(st["matched"].as_u64().unwrap() >= 1, "{st}");
        assert_eq!(st["partial"], 0, "{st}");
        assert_eq!(st["offenders"][0]["rank"], 1, "{st}");
        assert_eq!(st["offenders"][0]["last"], st["matched"], "{st}");
        assert_eq!(st["offenders"].as_array().unwrap().len(), 1);
    }
    assert_eq!(ops, in_traces);
    // The main communicator's all-reduces (1 + burst of 4 + graph capture...) on both ranks.
    let main = comms
        .iter()
        .find(|c| c["stragglers"]["matched"].as_u64().unwrap() > 1)
        .unwrap();
    let ar = main["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "AllReduce")
        .map(|o| o["count"].as_u64().unwrap())
        .sum::<u64>();
    assert!(ar >= 10, "{main}");

    // The metrics the plugin exported (final export at the last finalize)
    // count what the report counts, per communicator and operation.
    let mut from_metrics: std::collections::BTreeMap<(String, String), f64> = Default::default();
    let mut prom = Vec::new();
    files(&dir.0.join("metrics"), "prom", &mut prom);
    assert_eq!(prom.len(), 2, "one per replayed process: {prom:?}");
    for f in &prom {
        let text = std::fs::read_to_string(f).unwrap();
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("the plugin's Prometheus file parses");
        for s in scrape
            .samples
            .iter()
            .filter(|s| s.metric == "evring_ops_total")
        {
            let prometheus_parse::Value::Counter(v) = s.value else {
                panic!("{:?}", s.value)
            };
            let key = (
                s.labels.get("comm").unwrap().to_string(),
                s.labels.get("op").unwrap().to_string(),
            );
            *from_metrics.entry(key).or_default() += v;
        }
    }
    let mut from_report: std::collections::BTreeMap<(String, String), f64> = Default::default();
    for c in comms {
        for o in c["operations"].as_array().unwrap() {
            let key = (
                c["comm_id"].as_str().unwrap().to_string(),
                o["op"].as_str().unwrap().to_string(),
            );
            *from_report.entry(key).or_default() += o["count"].as_f64().unwrap();
        }
    }
    assert_eq!(from_metrics, from_report);
    // And each trace's footer carries its communicator's final figures.
    for f in &pf {
        let t = evring_perfetto::trace::read(&std::fs::read(f).unwrap());
        let summary = t.summary.as_ref().unwrap();
        let counted: u64 = summary
            .iter()
            .filter(|(k, _)| k.starts_with("metrics/") && k.ends_with("/count"))
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        let slices = t
            .slices
            .iter()
            .filter(|s| s.category == "Coll" || s.category == "P2p")
            .count() as u64;
        assert_eq!(counted, slices, "{}", f.display());
    }

    // `evring merge`: one file with every slice of the four, one process per file.
    let merged = dir.0.join("job.pftrace");
    let o = Command::new(env!("CARGO_BIN_EXE_evring"))
        .arg("merge")
        .args(&pf)
        .arg("-o")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let slices: usize = pf
        .iter()
        .map(|f| {
            evring_perfetto::trace::read(&std::fs::read(f).unwrap())
                .slices
                .len()
        })
        .sum();
    let m = evring_perfetto::trace::read(&std::fs::read(&merged).unwrap());
    assert_eq!(m.stop, None);
    assert_eq!(m.slices.len(), slices);
    assert_eq!(m.tracks.values().filter(|t| t.pid.is_some()).count(), 4);

    // The same traces converted to JSON report the same figures.
    let mut js = Vec::new();
    for f in &pf {
        let mut out = Vec::new();
        evring_cli::to_json(&std::fs::read(f).unwrap(), &mut out).unwrap();
        let j = f.with_extension("json");
        std::fs::write(&j, out).unwrap();
        js.push(j);
    }
    let rj = report(&js);
    for (a, b) in comms.iter().zip(rj["communicators"].as_array().unwrap()) {
        assert_eq!(a["operations"], b["operations"]);
        assert_eq!(a["stragglers"], b["stragglers"]);
    }
}
