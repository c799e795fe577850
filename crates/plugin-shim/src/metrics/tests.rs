use super::*;
use crate::model::{Info, Kind};
use crate::record::Timing;
use crate::record::{flag, STATES};
use crate::strings::Str16;

fn s(t: &str) -> Str16 {
    Str16::from_bytes(t.as_bytes())
}

fn rec(info: Info, kind: Kind, start: u64, lat: u64) -> Record {
    Record {
        id: 1,
        parent: 0,
        ctx: 7,
        kind,
        rank: 1,
        info,
        start_ns: start,
        stop_ns: start + lat,
        end_ns: start + lat,
        timing: Timing::Gpu,
        gpu_start: 0,
        gpu_end: 0,
        states: [(0, 0); STATES],
        n_states: 0,
        state_arg: 0,
        flags: flag::STOPPED,
    }
}

fn allreduce(seq: u64, count: u64) -> Info {
    Info::Coll {
        seq,
        func: s("AllReduce"),
        count,
        root: 0,
        datatype: s("ncclFloat32"),
        n_channels: 4,
        n_warps: 16,
        algo: s("RING"),
        proto: s("SIMPLE"),
        parent_group: 0,
        kernel_variant: Default::default(),
        is_sym_coll: false,
        user_tag: 0,
    }
}

fn p2p(func: &str, peer: i32) -> Info {
    Info::P2p {
        func: s(func),
        datatype: s("ncclBfloat16"),
        count: 1000,
        peer,
        n_channels: 1,
        parent_group: 0,
        user_tag: 0,
    }
}

fn stream(nranks: i32) -> StreamInfo {
    StreamInfo {
        comm_id: 0xC0FFEE,
        rank: 1,
        nranks,
        nnodes: 1,
        abi: 6,
        name: None,
        pid: 9,
        host: "node-a".into(),
        ctx: 7,
    }
}

/// 100 all-reduces of 4 MiB, latency 100 + (i % 10) × 10 µs and kernel time
/// half of that; 6 sends to peer 2, 4 receives from peer 0, a ProxyStep
/// (ignored).
fn feed(sink: &mut MetricsSink) {
    sink.open(7, &stream(4));
    for i in 0..100u64 {
        let lat = 100_000 + (i % 10) * 10_000;
        let mut r = rec(allreduce(i, 1 << 20), Kind::Coll, 1_000_000 * i, lat);
        r.gpu_start = 5_000_000_000 + i;
        r.gpu_end = r.gpu_start + lat / 2;
        sink.record(7, &r);
    }
    for i in 0..6 {
        sink.record(7, &rec(p2p("Send", 2), Kind::P2p, i, 20_000));
    }
    for i in 0..4 {
        sink.record(7, &rec(p2p("Recv", 0), Kind::P2p, i, 40_000));
    }
    sink.record(7, &rec(Info::ProxyStep { step: 1 }, Kind::ProxyStep, 0, 5));
}

fn cfg(prefix: &str) -> MetricsConfig {
    MetricsConfig {
        prefix: prefix.into(),
        interval_ns: 100_000_000,
        max_series: 512,
    }
}

fn near(got: u64, want: u64) -> bool {
    // 2 significant digits: within 1 %.
    got.abs_diff(want) * 100 <= want
}

#[test]
fn figures_match_hand_computed_values() {
    let mut sink = MetricsSink::new(cfg("unused"), "node-a".into(), 9);
    feed(&mut sink);
    let f = sink.figures();
    assert_eq!(f.series.len(), 3, "all-reduce, send, recv");
    assert_eq!(f.peers.len(), 2);
    let (k, ar) = f
        .series
        .iter()
        .find(|(k, _)| k.func == s("AllReduce"))
        .unwrap();
    assert_eq!(crate::bandwidth::bucket_label(k.bucket), "4M");
    assert_eq!(ar.count, 100);
    assert_eq!(ar.bytes, 100 * (4 << 20));
    // 100..190 us, ten of each: p50 is the 50th (140 us), p90 the 90th (180 us), p99 190 us.
    assert!(near(ar.latency.value_at_quantile(0.5), 140_000));
    assert!(near(ar.latency.value_at_quantile(0.9), 180_000));
    assert!(near(ar.latency.value_at_quantile(0.99), 190_000));
    assert!(near(ar.latency.max(), 190_000));
    let k50 = ar.kernel.as_ref().unwrap().value_at_quantile(0.5);
    assert!(near(k50, 70_000), "{k50}");
    let lat_sum: u64 = (0..100u64).map(|i| 100_000 + (i % 10) * 10_000).sum();
    assert_eq!(ar.latency_sum_ns, lat_sum);
    let algbw = (100 * (4u64 << 20)) as f64 / lat_sum as f64;
    assert_eq!(ar.algbw(), algbw);
    assert_eq!(ar.busbw(4), algbw * 1.5, "2(n-1)/n on 4 ranks");
    // p2p: 2000 bytes each, bus factor 1, bytes per peer.
    let send = &f.peers[&(7, s("Send"), 2)];
    assert_eq!((send.count, send.bytes), (6, 12_000));
    let recv = &f.peers[&(7, s("Recv"), 0)];
    assert_eq!((recv.count, recv.bytes), (4, 8_000));
    let (_, sd) = f.series.iter().find(|(k, _)| k.func == s("Send")).unwrap();
    assert_eq!(sd.busbw(4), sd.algbw());
    assert_eq!(sd.algbw(), 0.1);
    assert!(f.memory > 0 && f.refused == 0);

    // The footer carries the same figures.
    let mut out = Vec::new();
    sink.footer(7, &mut out);
    let get = |k: &str| {
        out.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k} missing from {out:?}"))
    };
    let p = "metrics/AllReduce/ncclFloat32/4M/RING/SIMPLE/";
    assert_eq!(get(&format!("{p}count")), Field::U64(100));
    assert_eq!(
        get(&format!("{p}busbw_mbps")),
        Field::U64((algbw * 1.5 * 1e3).round() as u64)
    );
    assert_eq!(get("metrics/p2p/Send/2/bytes"), Field::U64(12_000));
    assert_eq!(get("metrics_refused"), Field::U64(0));
}

#[test]
fn series_beyond_the_cap_are_refused_and_counted() {
    let mut c = cfg("unused");
    c.max_series = 2;
    let mut sink = MetricsSink::new(c, "h".into(), 1);
    sink.open(7, &stream(2));
    for size in [1u64 << 10, 1 << 12, 1 << 14, 1 << 16] {
        for i in 0..5 {
            sink.record(7, &rec(allreduce(i, size), Kind::Coll, i, 1000));
        }
    }
    let f = sink.figures();
    assert_eq!(f.series.len(), 2);
    assert_eq!(f.refused, 10, "two sizes of five records had no room");
    assert!(f.series.values().all(|s| s.count == 5));
    let held = f.memory;
    assert!(held > 0 && held < 64 << 10, "{held}");
    sink.footer(7, &mut Vec::new());
    // Ended streams are forgotten after the export that shows them last.
    sink.ended.push(7);
    sink.figures.remove(7);
    assert_eq!(sink.figures().memory, 0);
}

/// A temp dir removed when dropped.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text parses")
}

fn sample<'a>(
    scrape: &'a prometheus_parse::Scrape,
    metric: &str,
    label: (&str, &str),
) -> &'a prometheus_parse::Sample {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && s.labels.get(label.0) == Some(label.1))
        .unwrap_or_else(|| panic!("{metric} {label:?}"))
}

#[test]
fn every_export_parses_as_prometheus_text_and_json() {
    let dir = Dir(std::env::temp_dir().join(format!("evring-metrics-{}", std::process::id())));
    let prefix = dir.0.join("sub").join("m");
    let mut sink = MetricsSink::new(cfg(prefix.to_str().unwrap()), "node-a".into(), 9);
    sink.open(7, &stream(4));
    let prom = dir.0.join("sub").join("m_node-a_9.prom");
    let jsonl = dir.0.join("sub").join("m_node-a_9.jsonl");
    for round in 1..=3u64 {
        for i in 0..10 {
            sink.record(
                7,
                &rec(allreduce(i, 1 << 20), Kind::Coll, i, 100_000 * round),
            );
        }
        sink.record(7, &rec(p2p("Send", 2), Kind::P2p, 0, 20_000));
        sink.export();
        assert!(!dir.0.join("sub").join("m_node-a_9.prom.tmp").exists());
        let scrape = parse(&std::fs::read_to_string(&prom).unwrap());
        let ops = sample(&scrape, "evring_ops_total", ("op", "AllReduce"));
        assert_eq!(ops.labels.get("host"), Some("node-a"));
        assert_eq!(ops.labels.get("rank"), Some("1"));
        assert_eq!(ops.labels.get("comm"), Some("0xc0ffee"));
        assert_eq!(ops.labels.get("size"), Some("4M"));
        assert!(
            matches!(ops.value, prometheus_parse::Value::Counter(v) if v == 10.0 * round as f64),
            "{:?}",
            ops.value
        );
        let bus = sample(
            &scrape,
            "evring_busbw_gbytes_per_second",
            ("op", "AllReduce"),
        );
        let sent: u64 = (1..=round).map(|r| 10 * 100_000 * r).sum();
        let want = (10 * round * (4 << 20)) as f64 / sent as f64 * 1.5;
        match bus.value {
            prometheus_parse::Value::Gauge(v) => assert!((v - want).abs() < want * 1e-9, "{v}"),
            ref v => panic!("{v:?}"),
        }
        let lat = sample(&scrape, "evring_latency_seconds", ("op", "AllReduce"));
        match &lat.value {
            prometheus_parse::Value::Summary(q) => {
                assert_eq!(q.len(), 3);
                // The rounds' latencies so far: 100 us, then 200 us, then 300 us, 10 each.
                let p99 = q.iter().find(|c| c.quantile == 0.99).unwrap().count;
                let want = 100e-6 * round as f64;
                assert!((p99 - want).abs() <= want * 0.01, "{p99}");
            }
            v => panic!("{v:?}"),
        }
        let peer = sample(&scrape, "evring_p2p_bytes_total", ("peer", "2"));
        assert!(
            matches!(peer.value, prometheus_parse::Value::Counter(v) if v == 2000.0 * round as f64)
        );
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(lines.len() as u64, round);
        let last = &lines[lines.len() - 1];
        assert_eq!(last["series"][0]["count"], 10 * round);
        assert_eq!(last["p2p"][0]["bytes"], 2000 * round);
    }
    assert_eq!((sink.exports, sink.export_errors), (3, 0));
    // The last finalize exports the final figures at once, then forgets the stream.
    sink.close(7, End::LastFinalize);
    assert_eq!(sink.exports, 4);
    assert!(sink.figures().series.is_empty());
}

#[test]
fn intervals_parse() {
    assert_eq!(parse_interval("10"), Some(10_000_000_000));
    assert_eq!(parse_interval("2.5s"), Some(2_500_000_000));
    assert_eq!(parse_interval("250ms"), Some(250_000_000));
    assert_eq!(parse_interval("soon"), None);
    assert_eq!(parse_interval("-1"), None);
}

/// v7: a tagged Coll with two channels, each with three KernelPhase records
/// (in NCCL's order: phases, then their KernelCh, then the Coll). The tag is
/// a label of its own series; each phase keeps the slower channel's time.
#[test]
fn user_tag_labels_and_kernel_phase_times() {
    let mut sink = MetricsSink::new(
        MetricsConfig {
            prefix: "unused".into(),
            interval_ns: u64::MAX,
            max_series: 8,
        },
        "node-a".into(),
        9,
    );
    sink.open(7, &stream(2));
    let coll_id = 100;
    for ch in 0..2u64 {
        let ch_id = 200 + ch;
        for phase in 0..3u8 {
            // Phase p of channel c lasts (p + 1) × 1000 + c × 100 ns.
            let start = 10_000 + u64::from(phase) * 10_000;
            let len = (u64::from(phase) + 1) * 1000 + ch * 100;
            let mut r = rec(
                Info::KernelPhase {
                    channel: ch as u8,
                    phase,
                    gpu_start: start,
                },
                Kind::KernelPhase,
                0,
                1,
            );
            (r.id, r.parent, r.gpu_start, r.gpu_end) =
                (300 + ch * 3 + phase as u64, ch_id, start, start + len);
            sink.record(7, &r);
        }
        let mut k = rec(
            Info::KernelCh {
                channel: ch as u8,
                gpu_start: 10_000,
            },
            Kind::KernelCh,
            0,
            1,
        );
        (k.id, k.parent) = (ch_id, coll_id);
        sink.record(7, &k);
    }
    let mut tagged = allreduce(1, 1 << 20);
    if let Info::Coll { user_tag, .. } = &mut tagged {
        *user_tag = 0xABCD;
    }
    let mut c = rec(tagged, Kind::Coll, 1_000, 50_000);
    c.id = coll_id;
    sink.record(7, &c);
    // An untagged one of the same shape: a series of its own, no tag label.
    sink.record(7, &rec(allreduce(2, 1 << 20), Kind::Coll, 2_000, 50_000));
    let prom = sink.prometheus();
    assert!(
        prom.contains("evring_ops_total{host=\"node-a\",rank=\"1\",comm=\"0xc0ffee\",op=\"AllReduce\",datatype=\"ncclFloat32\",size=\"4M\",algo=\"RING\",proto=\"SIMPLE\",tag=\"0xabcd\"} 1"),
        "{prom}"
    );
    assert!(
        prom.contains("proto=\"SIMPLE\"} 1"),
        "the untagged series has no tag label: {prom}"
    );
    assert_eq!(sink.figures().series.len(), 2);
    // Compute: channel 1's 2100 ns (the slower one).
    let line = prom
        .lines()
        .find(|l| {
            l.starts_with("evring_kernel_phase_seconds_count") && l.contains("phase=\"compute\"")
        })
        .unwrap_or_else(|| panic!("{prom}"));
    assert!(
        line.contains("tag=\"0xabcd\"") && line.ends_with(" 1"),
        "{line}"
    );
    let s = sink
        .figures()
        .series
        .values()
        .find(|s| s.phases[1].is_some())
        .unwrap();
    let want = [1100, 2100, 3100];
    for (h, w) in s.phases.iter().zip(want) {
        let v = h.as_ref().unwrap().max();
        assert!(v.abs_diff(w) <= w / 100, "{v} vs {w}");
    }
    let json = export::json_line("node-a", 9, 0, sink.figures(), &HashMap::new());
    assert!(json.contains("\"tag\":43981"), "{json}");
    assert!(json.contains("\"final_sync_p50_ns\":"), "{json}");
    let mut footer = Vec::new();
    sink.footer(7, &mut footer);
    assert!(
        footer
            .iter()
            .any(|(k, _)| k.starts_with("metrics/AllReduce/")
                && k.contains("/tag0xabcd/compute_p50_ns")),
        "{footer:?}"
    );
}
