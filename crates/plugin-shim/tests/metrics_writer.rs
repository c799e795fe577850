//! The metrics sink in the real writer (in-process plugin, v6 table, turned
//! on by `EVRING_METRICS`): the Prometheus file appears within an interval
//! and parses, its counts are the collectives issued, and the final figures
//! land in the binary trace's footer.

mod common;
use common::{init_comm, issue_allreduces};
use evring_perfetto::trace::Value;
use evring_shim::exports::{evring_flush_wait, ncclProfiler_v6 as PLUGIN};
use std::time::{Duration, Instant};

fn ops_total(text: &str) -> f64 {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text parses");
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == "evring_ops_total" && s.labels.get("op") == Some("AllReduce"))
        .expect("an all-reduce series");
    assert_eq!(s.labels.get("comm"), Some("0x2a"));
    assert_eq!(s.labels.get("rank"), Some("1"));
    assert_eq!(s.labels.get("size"), Some("4K"));
    match s.value {
        prometheus_parse::Value::Counter(v) => v,
        ref v => panic!("{v:?}"),
    }
}

#[test]
fn metrics_export_every_interval_and_end_in_the_footer() {
    let dir = std::env::temp_dir().join(format!("evring-metrics-w-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("NCCL_PROFILE_DUMP_FILE", dir.join("trace"));
    std::env::set_var("NCCL_PROFILE_EVENT_MASK", "2");
    std::env::set_var("EVRING_FORMAT", "perfetto");
    std::env::set_var("EVRING_METRICS", dir.join("metrics"));
    std::env::set_var("EVRING_METRICS_INTERVAL", "200ms");
    let ctx = init_comm(c"metrics-test", 2, 1);
    let prom = std::fs::read_dir(&dir).unwrap().flatten().count();
    assert_eq!(prom, 0, "nothing before the first interval");
    // Two rounds: each export within a few intervals shows every collective so far.
    for round in 1..=2u64 {
        issue_allreduces(ctx, 300);
        assert_eq!(evring_flush_wait(10_000), 1);
        let t0 = Instant::now();
        let path = loop {
            let found = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "prom"));
            if let Some(p) = found {
                let text = std::fs::read_to_string(&p).unwrap();
                if ops_total(&text) == 300.0 * round as f64 {
                    break p;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no export with round {round}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("metrics_"));
    }
    // SAFETY: the context init gave us.
    assert_eq!(unsafe { (PLUGIN.finalize)(ctx) }, 0);
    assert_eq!(evring_flush_wait(10_000), 1);

    let bytes = std::fs::read(dir.join("trace_42_1.pftrace")).unwrap();
    let t = evring_perfetto::trace::read(&bytes);
    let p = "metrics/AllReduce/ncclFloat32/4K/RING/SIMPLE/";
    assert_eq!(
        t.summary_value(&format!("{p}count")),
        Some(&Value::Uint(600))
    );
    assert_eq!(
        t.summary_value(&format!("{p}bytes")),
        Some(&Value::Uint(600 * 4096))
    );
    assert_eq!(t.summary_value("metrics_refused"), Some(&Value::Uint(0)));
    assert_eq!(t.summary_value("complete"), Some(&Value::Bool(true)));
    let jsonl: Vec<serde_json::Value> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(jsonl.len() >= 3, "two interval exports and the final one");
    assert_eq!(jsonl.last().unwrap()["series"][0]["count"], 600);
    let _ = std::fs::remove_dir_all(&dir);
}
