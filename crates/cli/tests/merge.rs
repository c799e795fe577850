//! `evring merge`: four ranks on two hosts whose monotonic clocks differ by
//! 7 s and whose wall clocks disagree by 300 us end up in one Perfetto file,
//! one process per rank, with every collective's completions lined up to
//! within the per-rank jitter; JSON input is refused with one line.

use evring_perfetto::trace::read;
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::{Anchor, Encoder, StreamInfo};
use evring_shim::record::{flag, STATES};
use evring_shim::record::{Record, Timing};
use evring_shim::strings::Str16;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const SKEW: u64 = 7_000_000_000; // host b's CLOCK_MONOTONIC is ahead by this
const WALL_ERR: u64 = 300_000; // and its wall clock by this much more
const COLLS: u64 = 50;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(t: &str) -> Str16 {
    Str16::from_bytes(t.as_bytes())
}

/// Per-rank jitter of a completion (a few us).
fn jitter(rank: i32, i: u64) -> u64 {
    ((rank as u64 * 7 + i * 13) % 5) * 1000
}

fn file(dir: &Path, rank: i32) -> PathBuf {
    let host_b = rank >= 2;
    let skew = if host_b { SKEW } else { 0 };
    let a = Anchor {
        monotonic_ns: 1_000 + skew,
        realtime_ns: 1_700_000_000_000_000_000 + 1_000 + if host_b { WALL_ERR } else { 0 },
        boottime_ns: 1_000,
    };
    let info = StreamInfo {
        comm_id: 0x77,
        rank,
        nranks: 4,
        nnodes: 2,
        abi: 5,
        name: None,
        pid: 100, // the same pid on both hosts
        host: if host_b { "host-b" } else { "host-a" }.into(),
        ctx: 1,
    };
    let mut e = Encoder::new(info, &a);
    let mut out = Vec::new();
    e.header(&mut out, &a);
    for i in 0..COLLS {
        let t = 2_000_000_000 + i * 1_000_000 + skew;
        let end = t + 150_000 + jitter(rank, i);
        e.record(
            &mut out,
            &Record {
                id: 0x10_0000 + i,
                parent: 0,
                ctx: 1,
                kind: Kind::Coll,
                rank,
                info: Info::Coll {
                    seq: i,
                    func: s("AllReduce"),
                    count: 1 << 20,
                    root: 0,
                    datatype: s("ncclFloat32"),
                    n_channels: 2,
                    n_warps: 8,
                    algo: s("RING"),
                    proto: s("SIMPLE"),
                    parent_group: 0,
                    kernel_variant: Default::default(),
                    is_sym_coll: false,
                    user_tag: 0,
                },
                start_ns: t + rank as u64 * 10_000,
                stop_ns: end,
                end_ns: end,
                timing: Timing::Host,
                gpu_start: 0,
                gpu_end: 0,
                states: [(0, 0); STATES],
                n_states: 0,
                state_arg: 0,
                flags: flag::STOPPED,
            },
        );
    }
    e.footer(&mut out, &a, &[]);
    let p = dir.join(format!("r{rank}.pftrace"));
    std::fs::write(&p, out).unwrap();
    p
}

#[test]
fn two_hosts_line_up_by_anchors_and_collective_ends() {
    let dir = Dir(std::env::temp_dir().join(format!("evring-merge-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let inputs: Vec<PathBuf> = (0..4).map(|r| file(&dir.0, r)).collect();
    let merged = dir.0.join("job.pftrace");
    let o = Command::new(env!("CARGO_BIN_EXE_evring"))
        .arg("merge")
        .args(&inputs)
        .arg("-o")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let b = text.lines().find(|l| l.starts_with("host-b")).unwrap();
    let cols: Vec<&str> = b.split_whitespace().collect();
    // Shift = −7 s within the completions' jitter; the anchors alone said
    // −7 s + 300 us; each of host b's ranks matched with each of host a's.
    let shift: i64 = cols[1].parse().unwrap();
    assert!((shift + SKEW as i64).abs() <= 4_000, "{text}");
    assert_eq!(cols[2], (-(SKEW as i64) + WALL_ERR as i64).to_string());
    assert_eq!(cols[3], (2 * 2 * COLLS).to_string());
    assert!(cols[4].parse::<u64>().unwrap() <= 4_000, "{text}");

    let t = read(&std::fs::read(&merged).unwrap());
    assert_eq!(t.stop, None);
    assert_eq!(t.slices.len() as u64, 4 * COLLS);
    // One process per rank, four distinct pids.
    let procs: Vec<_> = t.tracks.values().filter_map(|tr| tr.pid).collect();
    let mut pids = procs.clone();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!((procs.len(), pids.len()), (4, 4), "{procs:?}");
    // Every collective's four completions within the jitter (4 us) and the
    // shift's own error (the median residual, 1 us here).
    let mut ends: HashMap<u64, Vec<u64>> = HashMap::new();
    for sl in &t.slices {
        let seq = sl.arg("seq").and_then(|v| v.as_u64()).unwrap();
        ends.entry(seq).or_default().push(sl.end);
    }
    assert_eq!(ends.len() as u64, COLLS);
    for (seq, e) in ends {
        let spread = e.iter().max().unwrap() - e.iter().min().unwrap();
        assert_eq!(e.len(), 4);
        assert!(spread <= 5_000, "seq {seq}: {e:?}");
    }
}

#[test]
fn json_input_is_refused_with_one_line() {
    let dir = Dir(std::env::temp_dir().join(format!("evring-merge-j-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let p = dir.0.join("r.json");
    std::fs::write(&p, "[\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_evring"))
        .args(["merge", p.to_str().unwrap(), "-o"])
        .arg(dir.0.join("out.pftrace"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("JSON trace"), "{err}");
    assert!(!dir.0.join("out.pftrace").exists());
}

/// `evring merge DIR -o DIR/job.pftrace`: the binary traces in the
/// directory (JSON traces and other files left out, with a note), never the
/// merge's own output, even on a second run.
#[test]
fn a_directory_stands_for_its_binary_traces() {
    let dir = Dir(std::env::temp_dir().join(format!("evring-merge-d-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    for r in 0..4 {
        file(&dir.0, r);
    }
    std::fs::write(dir.0.join("evring_node_5.prom"), "evring_ops_total 1\n").unwrap();
    std::fs::write(dir.0.join("rec-0.log"), "START 1 2\n").unwrap();
    std::fs::write(
        dir.0.join("evring_1_0.json"),
        "[\n{\"name\":\"evring.stream\",\"ph\":\"M\",\"pid\":1,\"args\":{}},\n",
    )
    .unwrap();
    let merged = dir.0.join("job.pftrace");
    for round in 0..2 {
        let o = Command::new(env!("CARGO_BIN_EXE_evring"))
            .arg("merge")
            .arg(&dir.0)
            .arg("-o")
            .arg(&merged)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "round {round}: {err}");
        assert!(err.contains("1 JSON trace(s) left out"), "{err}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(": 4 files,"), "round {round}: {text}");
        let t = read(&std::fs::read(&merged).unwrap());
        assert_eq!(t.slices.len() as u64, 4 * COLLS);
    }
}

#[test]
fn a_directory_of_json_traces_only_is_refused() {
    let dir = Dir(std::env::temp_dir().join(format!("evring-merge-dj-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::write(
        dir.0.join("evring_1_0.json"),
        "[\n{\"name\":\"evring.stream\",\"ph\":\"M\",\"pid\":1,\"args\":{}},\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_evring"))
        .arg("merge")
        .arg(&dir.0)
        .arg("-o")
        .arg(dir.0.join("out.pftrace"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("only 1 JSON trace(s)"), "{err}");
    assert!(!dir.0.join("out.pftrace").exists());
}
