//! Call logs that the plugin recorded on GPUs (`EVRING_RECORD`, the `record`
//! stage of tests/gpu/run.sh, packed by tests/gpu/make_fixtures.py) replayed
//! in CI through the release plugin, with exact expectations:
//!
//! * every operation the driver issued has its API event in the log, and the
//!   timing sidecar has one time per line;
//! * the replay leaks and loses nothing (the simulator's own judgement; live 0
//!   after the last finalize);
//! * the trace holds exactly the events of the log: per event kind the same
//!   number, and the same forest: every API event with its func and count, the
//!   tasks under it, their KernelCh and ProxyOp children and the ProxyOps'
//!   ProxyStep children, linked by the IDs the plugin handed out, equal the
//!   parent links NCCL made in the recording.
//!
//! Each `tests/fixtures/<dir>/manifest.json` lists its logs; see its README.

mod common;
use common::*;
use evring_shim::abi::ty;
use evring_sim::driver::TYPE_NAMES;
use evring_sim::fixture::{func_names, parse_file, resolve_name, Call, Verb};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
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
fn api_starts(calls: &[Call], t: u64, func: &str, count: u64) -> u64 {
    let names = func_names(calls);
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

/// One event of a forest: its label and its parent's key (0: none).
struct Node {
    label: String,
    parent: u64,
}

/// Events by key, and the canonical form of the forest they make.
#[derive(Default)]
struct Forest {
    nodes: HashMap<u64, Node>,
}

impl Forest {
    fn add(&mut self, key: u64, label: String, parent: u64) {
        let old = self.nodes.insert(key, Node { label, parent });
        assert!(old.is_none(), "key {key:#x} twice");
    }

    /// Events per label's kind (the part before the first ':').
    fn kinds(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for n in self.nodes.values() {
            let kind = n.label.split(':').next().unwrap_or_default().to_string();
            *out.entry(kind).or_insert(0) += 1;
        }
        out
    }

    /// Every root (no parent, or a parent that is not in the forest) written as
    /// `label(child,child,...)` with children sorted, the roots sorted too.
    fn canonical(&self) -> Vec<String> {
        let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut roots = Vec::new();
        for (&k, n) in &self.nodes {
            if n.parent != 0 && self.nodes.contains_key(&n.parent) {
                children.entry(n.parent).or_default().push(k);
            } else {
                roots.push(k);
            }
        }
        fn form(k: u64, f: &Forest, ch: &HashMap<u64, Vec<u64>>) -> String {
            let mut kids: Vec<String> = ch
                .get(&k)
                .map(|v| v.iter().map(|&c| form(c, f, ch)).collect())
                .unwrap_or_default();
            kids.sort();
            format!("{}({})", f.nodes[&k].label, kids.join(","))
        }
        let mut out: Vec<String> = roots
            .into_iter()
            .map(|r| form(r, self, &children))
            .collect();
        out.sort();
        out
    }
}

fn type_name(t: u64) -> &'static str {
    if t.is_power_of_two() {
        if let Some(n) = TYPE_NAMES.get(t.trailing_zeros() as usize) {
            return n;
        }
    }
    "?"
}

/// An event's label: its kind; for API events and tasks also the func; for
/// API events also the element count.
fn label(kind: &str, func: Option<&str>, count: Option<u64>) -> String {
    match kind {
        "CollApi" | "P2pApi" => format!("{kind}:{}:{}", func.unwrap_or("?"), count.unwrap_or(0)),
        "Coll" | "P2p" => format!("{kind}:{}", func.unwrap_or("?")),
        _ => kind.to_string(),
    }
}

/// The forest NCCL made in the recording: START handles and parent handles.
fn log_forest(calls: &[Call]) -> Forest {
    let names = func_names(calls);
    let mut f = Forest::default();
    for c in calls {
        if let Verb::Start {
            handle,
            ty: t,
            parent,
            name,
            words,
            ..
        } = &c.verb
        {
            assert_ne!(
                *handle, 0,
                "line {}: the recording dropped this start",
                c.line
            );
            let kind = type_name(*t);
            let func = resolve_name(*t, name.as_deref(), words, &names);
            let count = matches!(*t, ty::COLL_API | ty::P2P_API).then_some(words[1]);
            f.add(*handle, label(kind, func, count), *parent);
        }
    }
    f
}

fn hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or("0x0");
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0)
}

/// The forest in the trace files of `dir`: records' `args.id` and
/// `args.parent`; also each footer's time and `live` (a process-wide count:
/// the last footer's is what was left after the last finalize).
fn trace_forest(dir: &Path) -> (Forest, Vec<(f64, u64)>) {
    let mut f = Forest::default();
    let mut live = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "pftrace"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no trace files in {}", dir.display());
    for p in files {
        if p.extension().is_some_and(|x| x == "pftrace") {
            binary_forest(&p, &mut f, &mut live);
            continue;
        }
        let r = std::io::BufReader::new(std::fs::File::open(&p).unwrap());
        for line in r.lines() {
            let line = line.unwrap();
            let t = line.trim().trim_end_matches(',');
            if !t.starts_with('{') {
                continue;
            }
            let e: Value =
                serde_json::from_str(t).unwrap_or_else(|err| panic!("{}: {err}: {t}", p.display()));
            let args = &e["args"];
            if e["name"] == "evring.summary" {
                live.push((e["ts"].as_f64().unwrap(), args["live"].as_u64().unwrap()));
                continue;
            }
            // One record per event: an async begin ("b", its "e" follows) or a
            // complete event ("X").
            if e["ph"] != "b" && e["ph"] != "X" {
                continue;
            }
            let kind = e["cat"].as_str().unwrap();
            let func = matches!(kind, "CollApi" | "P2pApi" | "Coll" | "P2p")
                .then(|| e["name"].as_str().unwrap());
            f.add(
                hex(&args["id"]),
                label(kind, func, args["count"].as_u64()),
                hex(&args["parent"]),
            );
        }
    }
    (f, live)
}

/// As `trace_forest`, for one binary (Perfetto) trace file.
fn binary_forest(p: &Path, f: &mut Forest, live: &mut Vec<(f64, u64)>) {
    use evring_perfetto::trace::Value as V;
    let t = evring_perfetto::trace::read(&std::fs::read(p).unwrap());
    let u = |v: Option<&V>| v.and_then(V::as_u64);
    if let Some(n) = u(t.summary_value("live")) {
        let ts = u(t.summary_value("monotonic_ns")).unwrap_or(0) as f64 / 1000.0;
        live.push((ts, n));
    }
    for s in &t.slices {
        let kind = s.category.as_str();
        let func = matches!(kind, "CollApi" | "P2pApi" | "Coll" | "P2p").then_some(s.name.as_str());
        let key = evring_perfetto::ids::flow_key(&t, s.seq);
        f.add(
            evring_perfetto::ids::event_id(s, key).unwrap_or(0),
            label(kind, func, u(s.arg("count"))),
            evring_perfetto::ids::id_arg(s, "parent"),
        );
    }
}

/// The first difference of two sorted lists, for a readable failure.
fn first_difference(a: &[String], b: &[String]) -> String {
    let mut only_a: Vec<&String> = a.iter().filter(|x| !b.contains(x)).collect();
    let mut only_b: Vec<&String> = b.iter().filter(|x| !a.contains(x)).collect();
    only_a.truncate(3);
    only_b.truncate(3);
    format!("only in the log: {only_a:?}\nonly in the trace: {only_b:?}")
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
        let got = api_starts(&calls, t, func, row["count"].as_u64().unwrap());
        assert_eq!(got, want, "{name}: {row}");
    }

    let root = std::env::temp_dir().join(format!("evring-gpu-fixtures-{}", std::process::id()));
    let mut p = evring_sim::scenario::Params::new(plugin_so().to_path_buf());
    p.mask = Some(entry["mask"].as_i64().unwrap() as i32);
    p.ring = Some(1 << 18);
    p.keep = true;
    p.trace_root = Some(root.clone());
    let o = evring_sim::replay::replay(&log, &p).unwrap_or_else(|e| panic!("{e}"));
    assert!(o.ok(), "{name}: {:?}", o.problems);
    assert!(
        o.notes.iter().all(|n| !n.contains("no START")),
        "{name}: {:?}",
        o.notes
    );
    let traces = o.trace_dir.clone().expect("kept trace directory");

    let want = log_forest(&calls);
    let (got, live) = trace_forest(&traces);
    let _ = std::fs::remove_dir_all(&root);
    let last = live.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(
        last.map(|l| l.1),
        Some(0),
        "{name}: live after the last finalize ({live:?})"
    );
    assert_eq!(got.kinds(), want.kinds(), "{name}: events per kind");
    let (w, g) = (want.canonical(), got.canonical());
    assert!(
        w == g,
        "{name}: event forests differ\n{}",
        first_difference(&w, &g)
    );
    if world > 1 {
        // The forest must hold real structure: API events with tasks, and the
        // children the mask asks for (a re-recording that lost them fails).
        assert!(
            w.iter()
                .any(|t| t.contains("CollApi:") && t.contains("Coll:")),
            "{name}: no CollApi with its Coll"
        );
        let mask = entry["mask"].as_u64().unwrap();
        let kinds = want.kinds();
        for (bit, kind) in [
            (ty::KERNEL_CH, "KernelCh"),
            (ty::PROXY_OP, "ProxyOp"),
            (ty::PROXY_STEP, "ProxyStep"),
        ] {
            if mask & bit != 0 {
                assert!(
                    kinds.get(kind).copied().unwrap_or(0) > 0,
                    "{name}: no {kind} at mask {mask}"
                );
            }
        }
    }
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

/// The forest comparison sees a child moved to another parent and a missing
/// child, even when the kinds per count agree.
#[test]
fn forest_comparison_sees_relinks() {
    let build = |links: &[(u64, &str, u64)]| {
        let mut f = Forest::default();
        for &(k, l, p) in links {
            f.add(k, l.to_string(), p);
        }
        f
    };
    let base = [
        (1, "CollApi:AllReduce:4", 0),
        (2, "Coll:AllReduce", 1),
        (3, "KernelCh", 2),
        (4, "CollApi:AllReduce:8", 0),
        (5, "Coll:AllReduce", 4),
        (6, "KernelCh", 5),
    ];
    let a = build(&base);
    let mut moved = base;
    moved[5].2 = 2; // both KernelCh under the first Coll
    let b = build(&moved);
    assert_eq!(a.kinds(), b.kinds());
    assert_ne!(a.canonical(), b.canonical());
    let c = build(&base[..5]);
    assert_ne!(a.canonical(), c.canonical());
    // Keys differ between a log and a trace; only the structure counts.
    let renumbered: Vec<(u64, &str, u64)> = base
        .iter()
        .map(|&(k, l, p)| (k + 100, l, if p == 0 { 0 } else { p + 100 }))
        .collect();
    assert_eq!(a.canonical(), build(&renumbered).canonical());
}
