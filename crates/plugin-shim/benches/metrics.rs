//! The metrics sink's cost per record on the writer thread: Coll records
//! over 10 size buckets and 2 algorithms (20 series) and p2p records to 8
//! peers, measured in this thread's CPU time (holds on a loaded machine).
//! The writer's throughput target is 3 M records/s; this is what the metrics
//! add to each Coll/P2p record (other kinds return at the first match).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use evring_shim::clock::thread_cpu_ns;
use evring_shim::metrics::{MetricsConfig, MetricsSink};
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::StreamInfo;
use evring_shim::record::Record;
use evring_shim::sink::Sink;
use evring_shim::strings::Str16;

fn s(t: &str) -> Str16 {
    Str16::from_bytes(t.as_bytes())
}

fn records() -> Vec<Record> {
    (0..100_000u64)
        .map(|i| {
            let info = if i % 5 == 4 {
                Info::P2p {
                    func: s(if i % 2 == 0 { "Send" } else { "Recv" }),
                    datatype: s("ncclBfloat16"),
                    count: 1 << 16,
                    peer: (i % 8) as i32,
                    n_channels: 1,
                    parent_group: 0,
                    user_tag: 0,
                }
            } else {
                Info::Coll {
                    seq: i,
                    func: s("AllReduce"),
                    count: 1 << (10 + i % 10),
                    root: 0,
                    datatype: s("ncclFloat32"),
                    n_channels: 4,
                    n_warps: 16,
                    algo: s(if i % 3 == 0 { "TREE" } else { "RING" }),
                    proto: s("SIMPLE"),
                    parent_group: 0,
                    kernel_variant: Default::default(),
                    is_sym_coll: false,
                    user_tag: 0,
                }
            };
            let start = 1_000_000 + i * 1000;
            let kind = if i % 5 == 4 { Kind::P2p } else { Kind::Coll };
            let end = start + 5_000 + (i * 7919) % 100_000;
            Record {
                ctx: 7,
                gpu_start: 1 << 40,
                gpu_end: (1 << 40) + 3_000 + (i * 31) % 50_000,
                ..Record::stopped(i, 0, kind, info, start, end)
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let recs = records();
    let cfg = MetricsConfig {
        prefix: "unused".into(),
        interval_ns: u64::MAX,
        max_series: 512,
    };
    let mut sink = MetricsSink::new(cfg, "bench".into(), 1);
    sink.open(
        7,
        &StreamInfo {
            comm_id: 1,
            rank: 0,
            nranks: 8,
            nnodes: 1,
            abi: 6,
            name: None,
            pid: 1,
            host: "bench".into(),
            ctx: 7,
        },
    );
    let mut g = c.benchmark_group("metrics");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("record", |b| {
        b.iter_custom(|iters| {
            let t0 = thread_cpu_ns();
            for _ in 0..iters {
                for r in &recs {
                    sink.record(7, r);
                }
            }
            std::time::Duration::from_nanos(thread_cpu_ns() - t0)
        })
    });
    g.finish();
    eprintln!(
        "metrics: {} series, {} bytes held",
        sink.figures().series.len() + sink.figures().peers.len(),
        sink.figures().memory
    );
    let t0 = thread_cpu_ns();
    let text = sink.prometheus();
    eprintln!(
        "prometheus text: {} bytes in {} us of CPU",
        text.len(),
        (thread_cpu_ns() - t0) / 1000
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
