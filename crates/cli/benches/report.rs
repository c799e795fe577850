//! Reading rank traces for `evring report`: records per second of a binary
//! trace in memory, at mask 4095's mix (per collective: Coll, KernelCh, two
//! ProxyOps, eight ProxySteps). `EVRING_BENCH_RECORDS` sets the trace size
//! (default 1 M records; docs/report.md has the 10 M figure). Times are the
//! reading thread's CPU time (a file is read by one thread), so the figure
//! holds on a loaded machine.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::{Anchor, Encoder, StreamInfo};
use evring_shim::record::{flag, STATES};
use evring_shim::record::{Record, Timing};
use evring_shim::strings::Str16;
use std::path::Path;

fn rec(id: u64, parent: u64, kind: Kind, info: Info, start: u64) -> Record {
    Record {
        id,
        parent,
        ctx: 7,
        kind,
        rank: 0,
        info,
        start_ns: start,
        stop_ns: start + 900,
        end_ns: start + 1000,
        timing: Timing::Host,
        gpu_start: 0,
        gpu_end: 0,
        states: [(0, 0); STATES],
        n_states: 0,
        state_arg: 0,
        flags: flag::STOPPED,
    }
}

/// A binary trace of about `n` records.
pub fn trace(n: u64) -> Vec<u8> {
    let s = |t: &str| Str16::from_bytes(t.as_bytes());
    let a = Anchor {
        monotonic_ns: 1,
        realtime_ns: 2,
        boottime_ns: 3,
    };
    let info = StreamInfo {
        comm_id: 42,
        rank: 0,
        nranks: 8,
        nnodes: 1,
        abi: 5,
        name: None,
        pid: 1,
        host: "bench".into(),
        ctx: 7,
    };
    let mut e = Encoder::new(info, &a);
    let mut out = Vec::with_capacity(n as usize * 90);
    e.header(&mut out, &a);
    let mut id = 1u64;
    for c in 0..n / 12 {
        let t = 1_000_000 + c * 10_000;
        let coll = id;
        id += 1;
        for p in 0..2u64 {
            let op = id;
            id += 1;
            for k in 0..4u64 {
                let mut st = rec(
                    id,
                    op,
                    Kind::ProxyStep,
                    Info::ProxyStep { step: k as i32 },
                    t + k * 100,
                );
                st.states[0] = (8, t + k * 100 + 10);
                st.states[1] = (9, t + k * 100 + 50);
                st.n_states = 2;
                e.record(&mut out, &st);
                id += 1;
            }
            let po = Info::ProxyOp {
                pid: 1,
                channel: p as u8,
                peer: 1,
                n_steps: 4,
                chunk_size: 1 << 19,
                is_send: p == 0,
            };
            e.record(&mut out, &rec(op, coll, Kind::ProxyOp, po, t));
        }
        let kc = Info::KernelCh {
            channel: 0,
            gpu_start: 0,
        };
        e.record(&mut out, &rec(id, coll, Kind::KernelCh, kc, t));
        id += 1;
        let ci = Info::Coll {
            seq: c,
            func: s("AllReduce"),
            count: 1 << 20,
            root: 0,
            datatype: s("ncclFloat32"),
            n_channels: 2,
            n_warps: 16,
            algo: s("RING"),
            proto: s("SIMPLE"),
            parent_group: 0,
            kernel_variant: Default::default(),
            is_sym_coll: false,
            user_tag: 0,
        };
        e.record(&mut out, &rec(coll, 0, Kind::Coll, ci, t));
    }
    out
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into our local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn bench(c: &mut Criterion) {
    let n: u64 = std::env::var("EVRING_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let bytes = trace(n);
    let mut g = c.benchmark_group("report_read");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n / 12 * 12));
    g.bench_function(format!("{n}_records"), |b| {
        b.iter_custom(|iters| {
            let t0 = thread_cpu_ns();
            for _ in 0..iters {
                let t = evring_cli::load::load_bytes(Path::new("bench"), &bytes).unwrap();
                assert_eq!(t.ops.len() as u64, n / 12);
            }
            std::time::Duration::from_nanos(thread_cpu_ns() - t0)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
