//! The trace encoders alone (no ring, no file): records per second on one
//! writer thread, and bytes per record, for a mask-4095 mix shaped like one
//! collective over a socket transport (per collective: GroupApi, CollApi,
//! KernelLaunch, Coll, 2 KernelCh, 4 ProxyOp, 32 ProxyStep with 3 states,
//! 1 ProxyCtrl). Targets (issue 13, binary format): ≥ 3 M records/s,
//! ≤ 100 bytes/record. The JSON encoder is measured beside it.
//!
//! `encode/assemble+perfetto`: the writer's whole job since the log-only hot
//! path (issue 24): the same events as the calls NCCL's threads log (start,
//! states, stop), put together by the assembler and encoded. Target:
//! ≥ 2 M events/s on one writer thread; measured 5.5–6.2 M (the encoder
//! alone 14.6–15.4 M records/s) on the dev box, CPU-time line, in
//! docs/performance.md's Round 12 (1.5–1.6 M before it).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use evring_shim::assemble::{Assembler, Slots};
use evring_shim::chrome_json::JsonEncoder;
use evring_shim::clock::thread_cpu_ns;
use evring_shim::entry::{Entry, Op, Start};
use evring_shim::model::StateArg;
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::{Anchor, Encoder, StreamInfo};
use evring_shim::record::{Record, Timing};
use evring_shim::strings::Str16;

const COLLS: u64 = 256;

fn rec(id: u64, parent: u64, kind: Kind, info: Info, start: u64, end: u64) -> Record {
    Record {
        ctx: 1,
        ..Record::stopped(id, parent, kind, info, start, end)
    }
}

/// Records in completion order (children first), ids like the slab's
/// (8-bit tag in the top byte, generation, index: 10-byte varints), times from a realistic clock.
fn workload() -> Vec<Record> {
    let s = |t: &str| Str16::from_bytes(t.as_bytes());
    let tag = 0xA5u64 << 56;
    let mut v = Vec::new();
    let mut next = 0u64;
    let mut id = || {
        next += 1;
        tag | ((1 + next / 4096) << 20) | (next % 4096)
    };
    let mut t = 3_600_000_000_000u64;
    for seq in 0..COLLS {
        let (g, api, launch, coll) = (id(), id(), id(), id());
        let mut coll_children = Vec::new();
        for ch in 0..2u8 {
            for send in [true, false] {
                let op = id();
                for k in 0..8u64 {
                    let mut r = rec(
                        id(),
                        op,
                        Kind::ProxyStep,
                        Info::ProxyStep { step: k as i32 },
                        t + 100 * k,
                        t + 100 * k + 250,
                    );
                    r.states[0] = (if send { 8 } else { 10 }, r.start_ns);
                    r.states[1] = (if send { 9 } else { 11 }, r.start_ns + 120);
                    r.states[2] = (if send { 20 } else { 12 }, r.start_ns + 200);
                    r.n_states = 3;
                    r.state_arg = 524_288;
                    v.push(r);
                }
                coll_children.push(rec(
                    op,
                    coll,
                    Kind::ProxyOp,
                    Info::ProxyOp {
                        pid: 4242,
                        channel: ch,
                        peer: 1,
                        n_steps: 8,
                        chunk_size: 524_288,
                        is_send: send,
                    },
                    t,
                    t + 1100,
                ));
            }
            let mut k = rec(
                id(),
                coll,
                Kind::KernelCh,
                Info::KernelCh {
                    channel: ch,
                    gpu_start: t + 7,
                },
                t,
                t + 1200,
            );
            k.gpu_start = t + 7;
            k.gpu_end = t + 1190;
            k.timing = Timing::Gpu;
            coll_children.push(k);
        }
        v.extend(coll_children);
        let info = Info::Coll {
            seq,
            func: s("AllReduce"),
            count: 1 << 22,
            root: 0,
            datatype: s("ncclFloat32"),
            n_channels: 2,
            n_warps: 16,
            algo: s("RING"),
            proto: s("SIMPLE"),
            parent_group: g,
            kernel_variant: Default::default(),
            is_sym_coll: false,
            user_tag: 0,
        };
        let mut c = rec(coll, api, Kind::Coll, info, t - 50, t + 1200);
        c.timing = Timing::Children;
        c.stop_ns = t + 300;
        v.push(c);
        v.push(rec(
            api,
            g,
            Kind::CollApi,
            Info::CollApi {
                func: s("AllReduce"),
                count: 1 << 22,
                datatype: s("ncclFloat32"),
                root: 0,
                stream: 0x7f00_dead_0000,
                graph_captured: false,
                user_tag: 0,
            },
            t - 60,
            t - 55,
        ));
        v.push(rec(
            launch,
            g,
            Kind::KernelLaunch,
            Info::KernelLaunch {
                stream: 0x7f00_dead_0000,
            },
            t - 52,
            t - 51,
        ));
        v.push(rec(
            g,
            0,
            Kind::GroupApi,
            Info::GroupApi {
                graph_captured: false,
                depth: 1,
            },
            t - 70,
            t - 50,
        ));
        let mut ctrl = rec(id(), 0, Kind::ProxyCtrl, Info::None, t, t + 10);
        ctrl.states[0] = (14, t + 1);
        ctrl.n_states = 1;
        v.push(ctrl);
        t += 1500;
    }
    v
}

fn info() -> StreamInfo {
    StreamInfo {
        comm_id: 0x1234_5678_9abc_def0,
        rank: 0,
        nranks: 8,
        nnodes: 1,
        abi: 6,
        name: None,
        pid: 1,
        host: "bench".into(),
        ctx: 1,
    }
}

fn encode(recs: &[Record], out: &mut Vec<u8>) {
    let a = Anchor::default();
    let mut e = Encoder::new(info(), &a);
    e.header(out, &a);
    for r in recs {
        e.record(out, r);
    }
}

fn encode_json(recs: &[Record], out: &mut Vec<u8>) {
    let a = Anchor::default();
    let mut e = JsonEncoder::new(info(), &a);
    e.header(out, &a);
    for r in recs {
        e.record(out, r);
    }
}

/// Records per second of this thread's CPU time, best of a few rounds.
fn per_cpu_second(recs: &[Record], f: fn(&[Record], &mut Vec<u8>)) -> f64 {
    let mut out = Vec::with_capacity(1 << 24);
    let mut best = f64::MAX;
    for _ in 0..10 {
        out.clear();
        let t0 = thread_cpu_ns();
        f(recs, &mut out);
        best = best.min((thread_cpu_ns() - t0) as f64);
    }
    recs.len() as f64 / (best / 1e9)
}

/// Every ID is live until the assembler retires it (the bench's events
/// are all well-formed).
struct AllLive;

impl Slots for AllLive {
    fn capacity(&self) -> usize {
        4096
    }
    fn index(&self, id: u64) -> Option<usize> {
        Some((id % 4096) as usize)
    }
    fn check(&self, _: u64) -> Result<(), evring::Miss> {
        Ok(())
    }
    fn retire(&self, _: u64) {}
}

/// The calls that produce `recs`, in the order NCCL's threads make them
/// (by time; a start before a state before a stop, a parent's start first).
fn calls(recs: &[Record]) -> Vec<Entry> {
    let parents: std::collections::HashMap<u64, u64> =
        recs.iter().map(|r| (r.id, r.parent)).collect();
    let depth = |mut id: u64| {
        let mut d = 0;
        while let Some(&p) = parents.get(&id) {
            if p == 0 {
                break;
            }
            id = p;
            d += 1;
        }
        d
    };
    let mut v: Vec<(u64, u8, u32, Entry)> = Vec::new();
    for r in recs {
        let (children, gate) = r.info.children(r.rank);
        let expect = if 4095 & u64::from(gate) != 0 {
            children
        } else {
            0
        };
        let start = Start {
            ctx: r.ctx,
            parent: r.parent,
            rank: r.rank,
            kind: r.kind,
            info: r.info.intern(),
            flags: 0,
            expect,
        };
        let d = depth(r.id);
        v.push((
            r.start_ns,
            0,
            d,
            Entry {
                id: r.id,
                t: r.start_ns,
                op: Op::Start(start),
            },
        ));
        for &(s, t) in &r.states[..r.n_states as usize] {
            let arg = if s == 22 {
                Some(r.gpu_end)
            } else {
                Some(r.state_arg)
            };
            let op = Op::State(StateArg {
                state: i32::from(s),
                arg,
            });
            v.push((t, 1, d, Entry { id: r.id, t, op }));
        }
        v.push((
            r.stop_ns,
            2,
            d,
            Entry {
                id: r.id,
                t: r.stop_ns,
                op: Op::Stop,
            },
        ));
    }
    v.sort_by_key(|&(t, class, d, _)| (t, class, d));
    v.into_iter().map(|(.., e)| e).collect()
}

/// The writer's job on `calls`: drained in passes of 4096 entries, applied
/// in time order, each pass's records encoded. Returns the records written.
fn assemble_encode(calls: &[Entry], out: &mut Vec<u8>) -> usize {
    let a = Anchor::default();
    let mut e = Encoder::new(info(), &a);
    e.header(out, &a);
    let mut asm = Assembler::new(4096);
    let c = evring_shim::counters::Counters::default();
    let mut recs = Vec::with_capacity(8192);
    let mut n = 0;
    for chunk in calls.chunks(4096) {
        for x in chunk {
            asm.push(*x);
        }
        asm.advance_all(chunk.last().map_or(0, |x| x.t), &AllLive, &c);
        recs.clear();
        asm.take(&mut recs);
        for r in &recs {
            e.record(out, r);
        }
        n += recs.len();
    }
    asm.advance_all(u64::MAX, &AllLive, &c);
    recs.clear();
    asm.take(&mut recs);
    for r in &recs {
        e.record(out, r);
    }
    n + recs.len()
}

fn bench(c: &mut Criterion) {
    let recs = workload();
    let log = calls(&recs);
    {
        let mut out = Vec::with_capacity(1 << 24);
        assert_eq!(
            assemble_encode(&log, &mut out),
            recs.len(),
            "every event assembled"
        );
        let mut best = f64::MAX;
        for _ in 0..10 {
            out.clear();
            let t0 = thread_cpu_ns();
            assemble_encode(&log, &mut out);
            best = best.min((thread_cpu_ns() - t0) as f64);
        }
        eprintln!(
            "CPU-time throughput (one thread): assemble+perfetto {:.2} M events/s ({} log entries, {:.1} per event, {} bytes each)",
            recs.len() as f64 / (best / 1e9) / 1e6,
            log.len(),
            log.len() as f64 / recs.len() as f64,
            std::mem::size_of::<Entry>()
        );
    }
    let mut out = Vec::with_capacity(1 << 22);
    encode(&recs, &mut out);
    let mut body = Vec::new();
    {
        // Bytes per record without the one-off header.
        let a = Anchor::default();
        let mut e = Encoder::new(info(), &a);
        let mut head = Vec::new();
        e.header(&mut head, &a);
        for r in &recs {
            e.record(&mut body, r);
        }
    }
    eprintln!(
        "perfetto: {} records, {} bytes with header, {:.1} bytes/record (records only)",
        recs.len(),
        out.len(),
        body.len() as f64 / recs.len() as f64
    );
    eprintln!(
        "CPU-time throughput (one thread): perfetto {:.2} M records/s, json {:.2} M records/s",
        per_cpu_second(&recs, encode) / 1e6,
        per_cpu_second(&recs, encode_json) / 1e6
    );
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("perfetto", |b| {
        b.iter(|| {
            out.clear();
            encode(&recs, &mut out);
            out.len()
        })
    });
    let mut json = Vec::with_capacity(1 << 24);
    encode_json(&recs, &mut json);
    eprintln!(
        "json: {} bytes, {:.1} bytes/record (with header)",
        json.len(),
        json.len() as f64 / recs.len() as f64
    );
    g.bench_function("assemble+perfetto", |b| {
        let mut out = Vec::with_capacity(1 << 24);
        b.iter(|| {
            out.clear();
            assemble_encode(&log, &mut out)
        })
    });
    g.bench_function("json", |b| {
        b.iter(|| {
            json.clear();
            encode_json(&recs, &mut json);
            json.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
