//! The simulator's trace checks read both output formats alike: the same
//! records written by the binary (Perfetto) and the JSON encoder give the
//! same summary, and a cut binary file reads up to the cut.

use evring_shim::format::{fields, Format, StreamEncoder};
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::{Anchor, StreamInfo};
use evring_shim::record::flag;
use evring_shim::record::Record;
use evring_shim::strings::Str16;
use evring_sim::trace::TraceSummary;
use std::path::PathBuf;

fn rec(id: u64, parent: u64, kind: Kind, info: Info, start: u64) -> Record {
    let tagged = |i: u64| if i == 0 { 0 } else { 0x8800_0000_0000_0000 | i };
    Record {
        ctx: 1,
        ..Record::stopped(tagged(id), tagged(parent), kind, info, start, start + 100)
    }
}

/// 50 collectives with a KernelCh and a ProxyOp each, one late child, one
/// ProxyOp whose parent is in no file (a link error), one orphan.
fn records() -> Vec<Record> {
    let s = |t: &str| Str16::from_bytes(t.as_bytes());
    let mut v = Vec::new();
    for c in 0..50u64 {
        let t = 1_000_000 + c * 1000;
        let coll = 10 * c + 1;
        v.push(rec(
            10 * c + 2,
            coll,
            Kind::KernelCh,
            Info::KernelCh {
                channel: 0,
                gpu_start: 0,
            },
            t,
        ));
        v.push(rec(
            10 * c + 3,
            coll,
            Kind::ProxyOp,
            Info::ProxyOp {
                pid: 1,
                channel: 0,
                peer: 1,
                n_steps: 1,
                chunk_size: 1,
                is_send: true,
            },
            t,
        ));
        let info = Info::Coll {
            seq: c,
            func: s("AllReduce"),
            count: 1,
            root: 0,
            datatype: s("ncclInt8"),
            n_channels: 1,
            n_warps: 1,
            algo: s("RING"),
            proto: s("SIMPLE"),
            parent_group: 0,
            kernel_variant: Default::default(),
            is_sym_coll: false,
            user_tag: 0,
        };
        v.push(rec(coll, 0, Kind::Coll, info, t - 1));
    }
    let mut late = rec(
        900,
        1,
        Kind::KernelCh,
        Info::KernelCh {
            channel: 1,
            gpu_start: 0,
        },
        2_000_000,
    );
    late.flags |= flag::LATE_CHILD;
    v.push(late);
    v.push(rec(
        901,
        777,
        Kind::ProxyOp,
        Info::ProxyOp {
            pid: 1,
            channel: 0,
            peer: 1,
            n_steps: 1,
            chunk_size: 1,
            is_send: false,
        },
        2_000_000,
    ));
    v.push(rec(
        902,
        0,
        Kind::ProxyOp,
        Info::ProxyOp {
            pid: 1,
            channel: 0,
            peer: 1,
            n_steps: 1,
            chunk_size: 1,
            is_send: false,
        },
        2_000_000,
    ));
    v
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("evring-formats-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stream() -> StreamInfo {
    StreamInfo {
        comm_id: 5,
        rank: 0,
        nranks: 2,
        nnodes: 1,
        abi: 6,
        name: None,
        pid: 3,
        host: "h".into(),
        ctx: 1,
    }
}

const FOOTER: &[(&str, u64)] = &[
    ("stream_records", 154),
    ("drop_ring_full", 0),
    ("records_written", 153),
];

/// The test records through one encoder, header to footer.
fn encode(format: Format) -> Vec<u8> {
    let a = Anchor::now();
    let mut e = StreamEncoder::new(format, stream(), &a);
    let mut out = Vec::new();
    e.header(&mut out, &a);
    for r in records() {
        e.record(&mut out, &r);
    }
    e.footer(
        &mut out,
        &a,
        &fields(&[("finalized", true), ("complete", false)], FOOTER),
    );
    out
}

fn binary() -> Vec<u8> {
    encode(Format::Perfetto)
}

fn json() -> Vec<u8> {
    encode(Format::Json)
}

fn check(s: &TraceSummary) {
    assert_eq!(s.files, 1);
    assert_eq!((s.known_files, s.unknown_files), (1, 0));
    assert_eq!(s.records, 153);
    assert_eq!(
        (s.cat("Coll"), s.cat("KernelCh"), s.cat("ProxyOp")),
        (50, 51, 52)
    );
    assert_eq!(
        s.linked, 102,
        "50 KernelCh, 50 ProxyOp, the stray ProxyOp and the late child"
    );
    assert_eq!(s.link_errors, 1, "{:?}", s.link_examples);
    assert_eq!(s.orphans, 1);
    assert_eq!(s.late, 1);
    assert_eq!(s.duplicate_ids, 0);
    assert_eq!(s.footers.len(), 1);
    let f = &s.footers[0];
    assert!(f.finalized && !f.complete);
    assert_eq!(f.get("stream_records"), 154);
    assert_eq!(f.get("records_written"), 153);
    assert_eq!(s.unterminated, 0);
    assert_eq!(s.bad_lines, 0);
}

#[test]
fn both_formats_give_the_same_summary() {
    let d = dir("both");
    std::fs::write(d.join("t.pftrace"), binary()).unwrap();
    check(&evring_sim::trace::read_dir(&d).unwrap());
    std::fs::remove_file(d.join("t.pftrace")).unwrap();
    std::fs::write(d.join("t.json"), json()).unwrap();
    check(&evring_sim::trace::read_dir(&d).unwrap());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_cut_binary_file_is_read_up_to_the_cut() {
    let d = dir("cut");
    let b = binary();
    std::fs::write(d.join("t.pftrace"), &b[..b.len() / 2]).unwrap();
    let s = evring_sim::trace::read_dir(&d).unwrap();
    assert_eq!(s.unterminated, 1);
    assert!(s.footers.is_empty());
    assert!(s.records > 40 && s.records < 153, "{}", s.records);
    let _ = std::fs::remove_dir_all(&d);
}
