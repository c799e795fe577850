//! The metrics as Prometheus text exposition format (for node_exporter's
//! textfile collector), as one JSON line per export, and as footer fields.

use super::series::{Figures, Key, Series, PHASES};
use crate::bandwidth::bucket_label;
use crate::format::Field;
use std::collections::HashMap;
use std::fmt::Write as _;

/// What a stream's labels say about it.
#[derive(Debug, Clone, Default)]
pub struct StreamLabels {
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
}

/// A label value with `\`, `"` and newlines escaped (the text format's rule).
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

/// The quantiles every latency summary gives.
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

fn sorted(f: &Figures) -> Vec<(&Key, &Series)> {
    let mut v: Vec<_> = f.series.iter().collect();
    v.sort_by_key(|(k, _)| **k);
    v
}

fn stream_of(streams: &HashMap<u64, StreamLabels>, ctx: u64) -> StreamLabels {
    streams.get(&ctx).cloned().unwrap_or(StreamLabels {
        comm_id: 0,
        rank: -1,
        nranks: 0,
    })
}

/// `,tag="0x…"` for a tagged series (v7 `userTag`), nothing otherwise.
fn tag_label(k: &Key) -> String {
    if k.tag == 0 {
        String::new()
    } else {
        format!(",tag=\"{:#x}\"", k.tag)
    }
}

/// The Prometheus text file: every series with labels host, rank, comm, op,
/// datatype, size, algo, proto (and tag when the operations carry a v7
/// user tag); p2p bytes per peer; the sink's own counts.
pub fn prometheus(host: &str, f: &Figures, streams: &HashMap<u64, StreamLabels>) -> String {
    let mut o = String::new();
    let host = esc(host);
    let series = sorted(f);
    let labels = |k: &Key| {
        let s = stream_of(streams, k.ctx);
        format!(
            "host=\"{host}\",rank=\"{}\",comm=\"{:#x}\",op=\"{}\",datatype=\"{}\",size=\"{}\",algo=\"{}\",proto=\"{}\"{}",
            s.rank,
            s.comm_id,
            esc(or_unknown(&k.func.as_str())),
            esc(or_unknown(&k.datatype.as_str())),
            bucket_label(k.bucket),
            esc(or_unknown(&k.algo.as_str())),
            esc(or_unknown(&k.proto.as_str())),
            tag_label(k),
        )
    };
    let family = |o: &mut String, name: &str, ty: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {ty}");
    };
    family(
        &mut o,
        "evring_ops_total",
        "counter",
        "Completed collective and p2p operations.",
    );
    for (k, s) in &series {
        let _ = writeln!(o, "evring_ops_total{{{}}} {}", labels(k), s.count);
    }
    family(
        &mut o,
        "evring_bytes_total",
        "counter",
        "Bytes of those operations (nccl-tests' size rule, docs/report.md).",
    );
    for (k, s) in &series {
        let _ = writeln!(o, "evring_bytes_total{{{}}} {}", labels(k), s.bytes);
    }
    family(
        &mut o,
        "evring_latency_seconds",
        "summary",
        "Enqueue to completion, quantiles since the start.",
    );
    for (k, s) in &series {
        let l = labels(k);
        for q in QUANTILES {
            let v = s.latency.value_at_quantile(q) as f64 / 1e9;
            let _ = writeln!(o, "evring_latency_seconds{{{l},quantile=\"{q}\"}} {v:e}");
        }
        let _ = writeln!(
            o,
            "evring_latency_seconds_sum{{{l}}} {:e}\nevring_latency_seconds_count{{{l}}} {}",
            s.latency_sum_ns as f64 / 1e9,
            s.count
        );
    }
    family(
        &mut o,
        "evring_latency_max_seconds",
        "gauge",
        "Longest enqueue to completion since the start.",
    );
    for (k, s) in &series {
        let _ = writeln!(
            o,
            "evring_latency_max_seconds{{{}}} {:e}",
            labels(k),
            s.latency.max() as f64 / 1e9
        );
    }
    family(
        &mut o,
        "evring_kernel_seconds",
        "summary",
        "GPU kernel time of operations NCCL timed on the GPU.",
    );
    for (k, s) in &series {
        let Some(h) = &s.kernel else { continue };
        let l = labels(k);
        for q in QUANTILES {
            let v = h.value_at_quantile(q) as f64 / 1e9;
            let _ = writeln!(o, "evring_kernel_seconds{{{l},quantile=\"{q}\"}} {v:e}");
        }
        let _ = writeln!(o, "evring_kernel_seconds_count{{{l}}} {}", h.len());
    }
    if series
        .iter()
        .any(|(_, s)| s.phases.iter().any(Option::is_some))
    {
        family(
            &mut o,
            "evring_kernel_phase_seconds",
            "summary",
            "GPU time of each kernel barrier phase (NCCL 2.31+ KernelPhase), slowest channel per operation.",
        );
    }
    for (k, s) in &series {
        for (p, h) in s.phases.iter().enumerate() {
            let Some(h) = h else { continue };
            let l = format!(
                "{},phase=\"{}\"",
                labels(k),
                crate::model::phase_name(p as u8)
            );
            for q in QUANTILES {
                let v = h.value_at_quantile(q) as f64 / 1e9;
                let _ = writeln!(
                    o,
                    "evring_kernel_phase_seconds{{{l},quantile=\"{q}\"}} {v:e}"
                );
            }
            let _ = writeln!(o, "evring_kernel_phase_seconds_count{{{l}}} {}", h.len());
        }
    }
    for (name, help, bus) in [
        (
            "evring_algbw_gbytes_per_second",
            "Bytes over summed latency (GB/s).",
            false,
        ),
        (
            "evring_busbw_gbytes_per_second",
            "algbw times nccl-tests' bus factor of the operation (GB/s).",
            true,
        ),
    ] {
        family(&mut o, name, "gauge", help);
        for (k, s) in &series {
            let n = stream_of(streams, k.ctx).nranks.max(1) as u32;
            let v = if bus { s.busbw(n) } else { s.algbw() };
            let _ = writeln!(o, "{name}{{{}}} {v:e}", labels(k));
        }
    }
    family(
        &mut o,
        "evring_p2p_bytes_total",
        "counter",
        "Bytes sent to (Send) or received from (Recv) each peer.",
    );
    let mut peers: Vec<_> = f.peers.iter().collect();
    peers.sort_by_key(|(k, _)| **k);
    for ((ctx, func, peer), b) in peers {
        let s = stream_of(streams, *ctx);
        let _ = writeln!(
            o,
            "evring_p2p_bytes_total{{host=\"{host}\",rank=\"{}\",comm=\"{:#x}\",op=\"{}\",peer=\"{peer}\"}} {}",
            s.rank,
            s.comm_id,
            esc(&func.as_str()),
            b.bytes
        );
    }
    for (name, ty, help, v) in [
        (
            "evring_metrics_series",
            "gauge",
            "Series and p2p peers held.",
            (f.series.len() + f.peers.len()) as u64,
        ),
        (
            "evring_metrics_memory_bytes",
            "gauge",
            "Memory the metrics hold (histograms included).",
            f.memory as u64,
        ),
        (
            "evring_metrics_refused_total",
            "counter",
            "Records not aggregated: a new series would pass EVRING_METRICS_MAX_SERIES.",
            f.refused,
        ),
    ] {
        family(&mut o, name, ty, help);
        let _ = writeln!(o, "{name}{{host=\"{host}\"}} {v}");
    }
    if let Some(m) = crate::config::nccl_mask() {
        family(
            &mut o,
            "evring_event_mask",
            "gauge",
            "NCCL's activation mask in force at this export (read through NCCL's pointer).",
        );
        let _ = writeln!(o, "evring_event_mask{{host=\"{host}\"}} {}", m as u32);
    }
    o
}

/// One JSON line: time, host, pid and every series and peer.
pub fn json_line(
    host: &str,
    pid: i32,
    realtime_ns: u64,
    f: &Figures,
    streams: &HashMap<u64, StreamLabels>,
) -> String {
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q);
    let mut o = format!(
        "{{\"realtime_ns\":{realtime_ns},\"host\":\"{}\",\"pid\":{pid},\"series\":[",
        json_esc(host)
    );
    for (i, (k, s)) in sorted(f).into_iter().enumerate() {
        let st = stream_of(streams, k.ctx);
        let n = st.nranks.max(1) as u32;
        if i > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"comm\":\"{:#x}\",\"rank\":{},\"op\":\"{}\",\"datatype\":\"{}\",\"size\":\"{}\",\"algo\":\"{}\",\"proto\":\"{}\",\"count\":{},\"bytes\":{},\"p50_ns\":{},\"p90_ns\":{},\"p99_ns\":{},\"max_ns\":{},\"algbw_gbps\":{},\"busbw_gbps\":{}",
            st.comm_id,
            st.rank,
            json_esc(&k.func.as_str()),
            json_esc(&k.datatype.as_str()),
            bucket_label(k.bucket),
            json_esc(&k.algo.as_str()),
            json_esc(&k.proto.as_str()),
            s.count,
            s.bytes,
            q(&s.latency, 0.5),
            q(&s.latency, 0.9),
            q(&s.latency, 0.99),
            s.latency.max(),
            s.algbw(),
            s.busbw(n),
        );
        if let Some(h) = &s.kernel {
            let _ = write!(
                o,
                ",\"kernel_p50_ns\":{},\"kernel_p99_ns\":{},\"kernel_max_ns\":{}",
                q(h, 0.5),
                q(h, 0.99),
                h.max()
            );
        }
        if k.tag != 0 {
            let _ = write!(o, ",\"tag\":{}", k.tag);
        }
        for (p, h) in s.phases.iter().enumerate().take(PHASES) {
            let Some(h) = h else { continue };
            let name = crate::model::phase_name(p as u8);
            let _ = write!(
                o,
                ",\"{name}_p50_ns\":{},\"{name}_p99_ns\":{},\"{name}_max_ns\":{}",
                q(h, 0.5),
                q(h, 0.99),
                h.max()
            );
        }
        o.push('}');
    }
    o.push_str("],\"p2p\":[");
    let mut peers: Vec<_> = f.peers.iter().collect();
    peers.sort_by_key(|(k, _)| **k);
    for (i, ((ctx, func, peer), b)) in peers.into_iter().enumerate() {
        let st = stream_of(streams, *ctx);
        if i > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"comm\":\"{:#x}\",\"rank\":{},\"op\":\"{}\",\"peer\":{peer},\"count\":{},\"bytes\":{}}}",
            st.comm_id,
            st.rank,
            json_esc(&func.as_str()),
            b.count,
            b.bytes
        );
    }
    let mask =
        crate::config::nccl_mask().map_or(String::new(), |m| format!(",\"mask\":{}", m as u32));
    let _ = writeln!(
        o,
        "],\"series_held\":{},\"memory_bytes\":{},\"refused\":{}{mask}}}",
        f.series.len() + f.peers.len(),
        f.memory,
        f.refused
    );
    o
}

fn json_esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

/// A stream's final figures for its footer: per series
/// `metrics/OP/DATATYPE/SIZE/ALGO/PROTO/` + count, bytes, p50_ns, p90_ns,
/// p99_ns, max_ns, algbw_mbps, busbw_mbps (MB/s, integers); per peer
/// `metrics/p2p/OP/PEER/bytes`; and the sink's own counts.
pub fn footer_fields(f: &Figures, ctx: u64, nranks: u32, out: &mut Vec<(String, Field)>) {
    for (k, s) in sorted(f).into_iter().filter(|(k, _)| k.ctx == ctx) {
        let mut p = format!(
            "metrics/{}/{}/{}/{}/{}/",
            or_unknown(&k.func.as_str()),
            or_unknown(&k.datatype.as_str()),
            bucket_label(k.bucket),
            or_unknown(&k.algo.as_str()),
            or_unknown(&k.proto.as_str())
        );
        if k.tag != 0 {
            let _ = write!(p, "tag{:#x}/", k.tag);
        }
        for (i, h) in s.phases.iter().enumerate() {
            if let Some(h) = h {
                let name = crate::model::phase_name(i as u8);
                out.push((
                    format!("{p}{name}_p50_ns"),
                    Field::U64(h.value_at_quantile(0.5)),
                ));
            }
        }
        for (name, v) in [
            ("count", s.count),
            ("bytes", s.bytes),
            ("p50_ns", s.latency.value_at_quantile(0.5)),
            ("p90_ns", s.latency.value_at_quantile(0.9)),
            ("p99_ns", s.latency.value_at_quantile(0.99)),
            ("max_ns", s.latency.max()),
            ("algbw_mbps", (s.algbw() * 1e3).round() as u64),
            ("busbw_mbps", (s.busbw(nranks) * 1e3).round() as u64),
        ] {
            out.push((format!("{p}{name}"), Field::U64(v)));
        }
    }
    let mut peers: Vec<_> = f.peers.iter().filter(|(k, _)| k.0 == ctx).collect();
    peers.sort_by_key(|(k, _)| **k);
    for ((_, func, peer), b) in peers {
        out.push((
            format!("metrics/p2p/{}/{peer}/bytes", func.as_str()),
            Field::U64(b.bytes),
        ));
    }
    out.push((
        "metrics_series".into(),
        Field::U64((f.series.len() + f.peers.len()) as u64),
    ));
    out.push(("metrics_memory_bytes".into(), Field::U64(f.memory as u64)));
    out.push(("metrics_refused".into(), Field::U64(f.refused)));
}
