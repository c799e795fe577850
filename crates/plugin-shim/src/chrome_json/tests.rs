//! The JSON trace checked against the rules of Perfetto's JSON importer:
//! complete events on thread tracks that nest, named threads, v1 flows bound
//! inside their slices, no integer a JavaScript number would round.

use super::JsonEncoder;
use crate::format::fields;
use crate::test_records::{anchor, info, records, HIGH};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

fn encode() -> Vec<u8> {
    let recs = records();
    let mut e = JsonEncoder::new(info(), &anchor(1));
    let mut out = Vec::new();
    e.header(&mut out, &anchor(1));
    for r in &recs {
        e.record(&mut out, r);
    }
    e.footer(
        &mut out,
        &anchor(2),
        &fields(
            &[("finalized", true)],
            &[("stream_records", 1), ("big", u64::MAX)],
        ),
    );
    out
}

fn events() -> Vec<Value> {
    let v: Value = serde_json::from_slice(&encode()).expect("a closed file is one JSON array");
    v.as_array().unwrap().clone()
}

fn ns(v: &Value) -> u64 {
    // "ts" is microseconds with three decimals: back to integer nanoseconds.
    let s = v.to_string();
    let (a, b) = s.split_once('.').unwrap_or((&s, "0"));
    a.parse::<u64>().unwrap() * 1000 + format!("{b:0<3}")[..3].parse::<u64>().unwrap()
}

#[test]
fn every_record_is_a_complete_event_on_a_named_thread_and_threads_nest() {
    let ev = events();
    let xs: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(xs.len(), records().len());
    assert!(
        ev.iter().all(|e| e["ph"] != "b" && e["ph"] != "e"),
        "no async events"
    );
    let named: HashMap<u64, String> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut per_tid: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for x in &xs {
        let tid = x["tid"].as_u64().expect("numeric tid");
        assert!(named.contains_key(&tid), "tid {tid} has a thread_name");
        per_tid
            .entry(tid)
            .or_default()
            .push((ns(&x["ts"]), ns(&x["ts"]) + ns(&x["dur"])));
    }
    for (tid, mut v) in per_tid {
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "tid {tid}: {:?} and {:?} overlap",
                w[0],
                w[1]
            );
        }
    }
    let lane = |id: u64| {
        let x = xs
            .iter()
            .find(|x| x["args"]["id"] == format!("{:#x}", HIGH + id))
            .unwrap();
        named[&x["tid"].as_u64().unwrap()].clone()
    };
    assert_eq!(lane(5), "Coll/P2p");
    assert_eq!(lane(4), "API");
    assert_eq!(lane(9), "Proxy ch1 send peer 3");
    assert_eq!(lane(28), "rank 5 Proxy ch0 recv peer 0");
    let pnames: Vec<_> = ev.iter().filter(|e| e["name"] == "process_name").collect();
    assert_eq!(pnames.len(), 1);
    assert!(pnames[0]["args"]["name"]
        .as_str()
        .unwrap()
        .contains("@node-07"));
}

#[test]
fn flows_bind_inside_parent_and_child_slices() {
    let ev = events();
    let xs: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
    let enclosing = |tid: &Value, ts: u64| -> Option<&Value> {
        xs.iter()
            .copied()
            .find(|x| &x["tid"] == tid && ns(&x["ts"]) <= ts && ts <= ns(&x["ts"]) + ns(&x["dur"]))
    };
    let starts: HashMap<String, &Value> = ev
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| (e["id"].as_str().unwrap().to_string(), e))
        .collect();
    let mut linked = 0;
    for f in ev.iter().filter(|e| e["ph"] == "f") {
        assert_eq!(f["bp"], "e");
        let s = starts[f["id"].as_str().unwrap()];
        assert_eq!(
            (&s["cat"], &s["name"]),
            (&f["cat"], &f["name"]),
            "v1 flows match on id, cat and name"
        );
        let child = enclosing(&f["tid"], ns(&f["ts"])).expect("f inside its slice");
        let parent = enclosing(&s["tid"], ns(&s["ts"])).expect("s inside its slice");
        assert_eq!(child["args"]["parent"], parent["args"]["id"]);
        linked += 1;
    }
    // 12 of the v5 tree, 2 of the v7 one (phase -> channel -> coll).
    assert_eq!(linked, 14);
    assert_eq!(starts.len(), 14);
}

#[test]
fn no_integer_beyond_javascript_precision() {
    fn walk(v: &Value, path: &str, bad: &mut Vec<String>) {
        match v {
            Value::Number(n)
                if n.as_u64().is_some_and(|u| u > 1 << 53)
                    || n.as_f64().is_some_and(|f| f.abs() > 9.007e15) =>
            {
                bad.push(format!("{path} = {n}"));
            }
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, x)| walk(x, &format!("{path}[{i}]"), bad)),
            Value::Object(o) => o
                .iter()
                .for_each(|(k, x)| walk(x, &format!("{path}.{k}"), bad)),
            _ => {}
        }
    }
    let mut bad = Vec::new();
    for e in events() {
        walk(&e, "", &mut bad);
    }
    assert!(bad.is_empty(), "{bad:?}");
    let ev = events();
    let stream = ev.iter().find(|e| e["name"] == "evring.stream").unwrap();
    assert_eq!(stream["args"]["comm_id"], "0xfedcba9876543210");
    assert_eq!(
        stream["args"]["realtime_ns"],
        anchor(1).realtime_ns.to_string()
    );
    let summary = ev.iter().find(|e| e["name"] == "evring.summary").unwrap();
    assert_eq!(summary["args"]["big"], u64::MAX.to_string());
    assert_eq!(summary["args"]["stream_records"], 1);
    let coll = ev
        .iter()
        .find(|e| e["args"]["count"] == (1u64 << 40))
        .unwrap();
    assert_eq!(coll["name"], "AllReduce");
    let batch = ev.iter().find(|e| e["cat"] == "CeBatch").unwrap();
    assert_eq!(batch["args"]["bytes"], 1u64 << 33);
}

#[test]
fn states_are_named_as_nccl_names_them() {
    let ev = events();
    let step = ev.iter().find(|e| e["cat"] == "ProxyStep").unwrap();
    let names: Vec<&str> = step["args"]["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap())
        .collect();
    assert_eq!(names, ["SendGPUWait", "SendWait", "SendPeerWait"]);
}

#[test]
fn a_cut_file_keeps_every_whole_line() {
    let bytes = encode();
    let text = String::from_utf8(bytes).unwrap();
    let cut = &text[..text.len() / 2];
    let mut ids = HashSet::new();
    for line in cut.lines().skip(1) {
        let Ok(v) = serde_json::from_str::<Value>(line.trim_end_matches(',')) else {
            continue;
        };
        if v["ph"] == "X" {
            ids.insert(v["args"]["id"].as_str().unwrap().to_string());
        }
    }
    assert!(!ids.is_empty());
    let whole = cut
        .lines()
        .filter(|l| l.contains("\"ph\":\"X\"") && l.ends_with("},"))
        .count();
    assert_eq!(ids.len(), whole);
}

/// v7 arguments: the user tag (only where non-zero), kernel variant and
/// symmetric flag of a Coll; the phase name of a KernelPhase.
#[test]
fn v7_fields_are_event_args() {
    let ev = events();
    let by_id = |id: u64| {
        ev.iter()
            .find(|e| e["ph"] == "X" && e["args"]["id"] == format!("{:#x}", HIGH + id))
            .unwrap_or_else(|| panic!("event {id}"))
            .clone()
    };
    let coll = by_id(31);
    // Above 2^53: a string, as every such integer (no JavaScript rounding).
    assert_eq!(
        coll["args"]["user_tag"],
        0xC0DE_0000_0000_0042u64.to_string()
    );
    assert_eq!(coll["args"]["kernel_variant"], "AllReduce_ST");
    assert_eq!(coll["args"]["sym_coll"], true);
    let old = by_id(5);
    assert_eq!(old["cat"], "Coll");
    for k in ["user_tag", "kernel_variant", "sym_coll"] {
        assert!(old["args"].get(k).is_none(), "{k}: {old}");
    }
    let phase = by_id(29);
    assert_eq!(phase["cat"], "KernelPhase");
    assert_eq!(phase["args"]["phase"], "compute");
    assert_eq!(phase["args"]["channel"], 1);
}
