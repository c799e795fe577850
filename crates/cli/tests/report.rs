//! `evring report` on traces made through the encoders with known sizes and
//! times: a four-rank job in which rank 2 arrives late at most collectives
//! (the report must name it), both formats mixed, a cut file, and bad input
//! (garbage, cut before the header, two runs mixed) refused with one line
//! and exit status 2.

use evring_shim::chrome_json::JsonEncoder;
use evring_shim::format::Field;
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::{Anchor, Encoder, StreamInfo};
use evring_shim::record::{flag, STATES};
use evring_shim::record::{Record, Timing};
use evring_shim::strings::Str16;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const COMM: u64 = 0xABCD_0000_1234_5678;
const NRANKS: i32 = 4;
const COLLS: u64 = 200;
const COUNT: u64 = 1 << 20; // float32: 4 MiB per all-reduce
const LATE: u64 = 300_000; // rank 2, on 3 of every 4 collectives
const LATE0: u64 = 50_000; // rank 0, on the others
const P2P_COUNT: u64 = 1000; // bfloat16: 2000 bytes

/// A temp dir removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("evring-report-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(t: &str) -> Str16 {
    Str16::from_bytes(t.as_bytes())
}

fn rec(id: u64, rank: i32, kind: Kind, info: Info, start: u64, end: u64) -> Record {
    Record {
        id: 0xC300_0000_0010_0000 | id,
        parent: 0,
        ctx: 7,
        kind,
        rank,
        info,
        start_ns: start,
        stop_ns: end,
        end_ns: end,
        timing: Timing::Gpu,
        gpu_start: 0,
        gpu_end: 0,
        states: [(0, 0); STATES],
        n_states: 0,
        state_arg: 0,
        flags: flag::STOPPED,
    }
}

/// Arrival of `rank` at collective `i` (1 ms apart; rank 2 late on 3 of 4,
/// rank 0 late on the fourth).
fn arrival(rank: i32, i: u64) -> u64 {
    let base = 1_000_000_000 + i * 1_000_000;
    match (rank, i % 4) {
        (2, 1..=3) => base + LATE,
        (0, 0) => base + LATE0,
        _ => base,
    }
}

/// Latency of every collective: 100 us + (i % 10) × 10 us.
fn latency(i: u64) -> u64 {
    100_000 + (i % 10) * 10_000
}

fn records(rank: i32) -> Vec<Record> {
    let mut v = Vec::new();
    for i in 0..COLLS {
        let info = Info::Coll {
            seq: i,
            func: s("AllReduce"),
            count: COUNT,
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
        };
        let t = arrival(rank, i);
        v.push(rec(10 * i + 1, rank, Kind::Coll, info, t, t + latency(i)));
    }
    for i in 0..10u64 {
        let (func, peer) = if i % 2 == 0 {
            ("Send", (rank + 1) % NRANKS)
        } else {
            ("Recv", (rank + NRANKS - 1) % NRANKS)
        };
        let info = Info::P2p {
            func: s(func),
            datatype: s("ncclBfloat16"),
            count: P2P_COUNT,
            peer,
            n_channels: 1,
            parent_group: 0,
            user_tag: 0,
        };
        let t = 5_000_000_000 + i * 100_000;
        v.push(rec(100_000 + i, rank, Kind::P2p, info, t, t + 20_000));
    }
    v
}

fn stream(rank: i32) -> StreamInfo {
    StreamInfo {
        comm_id: COMM,
        rank,
        nranks: NRANKS,
        nnodes: 1,
        abi: 5,
        name: None,
        pid: 1000 + rank,
        host: "node-a".into(),
        ctx: 7,
    }
}

fn anchor(m: u64) -> Anchor {
    Anchor {
        monotonic_ns: m,
        realtime_ns: 1_700_000_000_000_000_000 + m,
        boottime_ns: m,
    }
}

fn footer() -> Vec<(&'static str, Field)> {
    vec![
        ("finalized", Field::Bool(true)),
        ("complete", Field::Bool(true)),
        ("end", Field::Str("last_finalize".into())),
        ("live", Field::U64(0)),
        ("drop_ring_full", Field::U64(0)),
    ]
}

/// Rank `rank`'s trace: binary for ranks 0 and 1, JSON for 2 and 3.
fn trace(rank: i32) -> (Vec<u8>, &'static str) {
    let mut out = Vec::new();
    if rank < 2 {
        let mut e = Encoder::new(stream(rank), &anchor(10));
        e.header(&mut out, &anchor(10));
        for r in records(rank) {
            e.record(&mut out, &r);
        }
        e.footer(&mut out, &anchor(9_000_000_000), &footer());
        (out, "pftrace")
    } else {
        let mut e = JsonEncoder::new(stream(rank), &anchor(10));
        e.header(&mut out, &anchor(10));
        for r in records(rank) {
            e.record(&mut out, &r);
        }
        e.footer(&mut out, &anchor(9_000_000_000), &footer());
        (out, "json")
    }
}

fn write_job(dir: &Path) -> Vec<PathBuf> {
    (0..NRANKS)
        .map(|r| {
            let (bytes, ext) = trace(r);
            let p = dir.join(format!("evring_{COMM}_{r}.{ext}"));
            std::fs::write(&p, bytes).unwrap();
            p
        })
        .collect()
}

fn evring(args: &[&Path], json: bool) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_evring"));
    c.arg("report");
    if json {
        c.arg("--json");
    }
    let o = c.args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn report_json(paths: &[PathBuf]) -> Value {
    let args: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let (rc, out, err) = evring(&args, true);
    assert_eq!(rc, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= want.abs() * rel
}

#[test]
fn slow_rank_is_named_and_figures_match_hand_computed_ones() {
    let dir = Dir::new("slow");
    let paths = write_job(&dir.0);
    let r = report_json(&paths);
    let c = &r["communicators"][0];
    assert_eq!(r["communicators"].as_array().unwrap().len(), 1);
    assert_eq!(c["comm_id"], format!("{COMM:#x}"));
    assert_eq!(c["clock"], "monotonic");

    // The all-reduce row: 800 records of 4 MiB.
    let ops = c["operations"].as_array().unwrap();
    let ar = ops.iter().find(|o| o["op"] == "AllReduce").unwrap();
    assert_eq!(ar["size_bucket"], "4M");
    assert_eq!(ar["count"], 4 * COLLS);
    assert_eq!(ar["bytes"], 4 * COLLS * COUNT * 4);
    // Latencies 100..190 us, 80 records each: the 400th is 140 us, the 792nd 190 us.
    let q = |k: &str| ar[k].as_u64().unwrap() as f64;
    assert!(close(q("p50_ns"), 140_000.0, 1e-3), "{ar}");
    assert!(close(q("p99_ns"), 190_000.0, 1e-3), "{ar}");
    assert!(close(q("max_ns"), 190_000.0, 1e-3), "{ar}");
    // algbw = Σ bytes / Σ latency; busbw = algbw × 2(n−1)/n.
    let lat_sum: u64 = (0..COLLS).map(latency).sum::<u64>() * 4;
    let algbw = (4 * COLLS * COUNT * 4) as f64 / lat_sum as f64;
    assert!(
        close(ar["algbw_gbps"].as_f64().unwrap(), algbw, 1e-9),
        "{ar}"
    );
    assert!(
        close(ar["busbw_gbps"].as_f64().unwrap(), algbw * 1.5, 1e-9),
        "{ar}"
    );
    // P2p: 20 sends of 2000 bytes in 20 us each, bus factor 1.
    let send = ops.iter().find(|o| o["op"] == "Send").unwrap();
    assert_eq!(send["count"], 20);
    assert_eq!(send["size_bucket"], "1K");
    assert!(close(send["algbw_gbps"].as_f64().unwrap(), 0.1, 1e-9));
    assert_eq!(send["algbw_gbps"], send["busbw_gbps"]);

    // Every rank complete, both formats read.
    let ranks = c["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 4);
    for (i, rr) in ranks.iter().enumerate() {
        assert_eq!(rr["rank"], i);
        assert_eq!(rr["ops"], COLLS + 10);
        assert_eq!(rr["complete"], true);
        assert_eq!(rr["cut"], false);
        assert_eq!(rr["drops"], 0);
        assert_eq!(rr["format"], if i < 2 { "perfetto" } else { "json" });
    }

    // Stragglers: rank 2 last on 150, waiting 3 × 300 us each; rank 0 on 50, 3 × 50 us.
    let st = &c["stragglers"];
    assert_eq!(st["matched"], COLLS);
    assert_eq!(st["partial"], 0);
    let total = 150 * 3 * LATE + 50 * 3 * LATE0;
    assert_eq!(st["wait_ns"], total);
    let off = st["offenders"].as_array().unwrap();
    assert_eq!(off[0]["rank"], 2);
    assert_eq!(off[0]["last"], 150);
    assert_eq!(off[0]["mean_late_ns"], LATE);
    assert!(close(
        off[0]["share"].as_f64().unwrap(),
        (150 * 3 * LATE) as f64 / total as f64,
        1e-12
    ));
    assert_eq!(off[1]["rank"], 0);
    assert_eq!(off[1]["last"], 50);
    assert_eq!(off.len(), 2);

    // The text names it too.
    let args: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let (rc, text, _) = evring(&args, false);
    assert_eq!(rc, 0);
    let line = text
        .lines()
        .skip_while(|l| !l.contains("stragglers:"))
        .nth(2)
        .unwrap();
    assert!(line.trim_start().starts_with("2 "), "{text}");
    assert!(line.contains("94.7%"), "{line}");
}

#[test]
fn a_cut_file_is_read_up_to_the_cut() {
    let dir = Dir::new("cut");
    let paths = write_job(&dir.0);
    // Rank 1's binary file loses its second half (and footer); rank 3's JSON too.
    for p in [&paths[1], &paths[3]] {
        let b = std::fs::read(p).unwrap();
        std::fs::write(p, &b[..b.len() / 2 + 3]).unwrap();
    }
    let r = report_json(&paths);
    let c = &r["communicators"][0];
    let ranks = c["ranks"].as_array().unwrap();
    for i in [1, 3] {
        assert_eq!(ranks[i]["footer"], false, "{}", ranks[i]);
        assert_eq!(ranks[i]["cut"], true, "{}", ranks[i]);
        let ops = ranks[i]["ops"].as_u64().unwrap();
        assert!(ops > 50 && ops < COLLS, "{ops}");
    }
    let st = &c["stragglers"];
    let matched = st["matched"].as_u64().unwrap();
    assert!(matched > 50 && matched < COLLS, "{st}");
    assert_eq!(matched + st["partial"].as_u64().unwrap(), COLLS);
    assert_eq!(st["offenders"][0]["rank"], 2);
}

#[test]
fn ranks_on_several_hosts_are_aligned_by_wall_clock_anchors() {
    let dir = Dir::new("hosts");
    // Rank 3 on another host whose monotonic clock is 7 s ahead: its anchor says so.
    let mut paths = Vec::new();
    for r in 0..NRANKS {
        let skew = if r == 3 { 7_000_000_000 } else { 0 };
        let mut si = stream(r);
        if r == 3 {
            si.host = "node-b".into();
        }
        let a = Anchor {
            monotonic_ns: 10 + skew,
            realtime_ns: 1_700_000_000_000_000_000 + 10,
            boottime_ns: 10,
        };
        let mut e = Encoder::new(si, &a);
        let mut out = Vec::new();
        e.header(&mut out, &a);
        for mut rec in records(r) {
            rec.start_ns += skew;
            rec.stop_ns += skew;
            rec.end_ns += skew;
            e.record(&mut out, &rec);
        }
        let p = dir.0.join(format!("r{r}.pftrace"));
        std::fs::write(&p, out).unwrap();
        paths.push(p);
    }
    let r = report_json(&paths);
    let c = &r["communicators"][0];
    assert_eq!(c["clock"], "wall_clock");
    assert_eq!(c["stragglers"]["offenders"][0]["rank"], 2, "{c}");
    assert_eq!(
        c["stragglers"]["wait_ns"],
        150 * 3 * LATE + 50 * 3 * LATE0,
        "the 7 s skew is taken out"
    );
}

fn refused(paths: &[&Path], want: &str) {
    let (rc, out, err) = evring(paths, false);
    assert_eq!(rc, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(want), "{err} lacks {want}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = Dir::new("bad");
    let paths = write_job(&dir.0);
    let garbage = dir.0.join("garbage.pftrace");
    std::fs::write(
        &garbage,
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xffnot a trace",
    )
    .unwrap();
    refused(&[&paths[0], &garbage], "garbage.pftrace");
    let text = dir.0.join("notes.txt");
    std::fs::write(&text, "hello\n").unwrap();
    refused(&[&text], "notes.txt");
    let empty = dir.0.join("empty.pftrace");
    std::fs::write(&empty, b"").unwrap();
    refused(&[&empty], "empty file");
    // Cut before its header was whole: nothing to report.
    let head = dir.0.join("head.pftrace");
    std::fs::write(&head, &std::fs::read(&paths[0]).unwrap()[..40]).unwrap();
    refused(&[&head], "head.pftrace");
    // A JSON file whose middle is garbage.
    let j = std::fs::read_to_string(&paths[2]).unwrap();
    let mut lines: Vec<&str> = j.lines().collect();
    let mid = lines.len() / 2;
    let at = lines
        .iter()
        .skip(mid)
        .position(|l| l.contains("\"cat\":\"Coll\""))
        .unwrap()
        + mid;
    lines[at] = "{\"name\":\"AllReduce\",\"cat\":\"Coll\",\"ph\":\"X\",garbage";
    let broken = dir.0.join("broken.json");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    refused(&[&broken], "is not a JSON event");
    // Two runs mixed: rank 0 twice; a communicator with two sizes.
    let again = dir.0.join("again.pftrace");
    std::fs::copy(&paths[0], &again).unwrap();
    refused(
        &[&paths[0], &paths[1], &again],
        "the same trace given twice",
    );
    let mut e = Encoder::new(
        StreamInfo {
            pid: 4242,
            ..stream(0)
        },
        &anchor(10),
    );
    let mut out = Vec::new();
    e.header(&mut out, &anchor(10));
    let other = dir.0.join("other-run.pftrace");
    std::fs::write(&other, out).unwrap();
    refused(&[&paths[0], &paths[1], &other], "both are rank 0");
    let mut e = Encoder::new(
        StreamInfo {
            nranks: 8,
            ..stream(1)
        },
        &anchor(10),
    );
    let mut out = Vec::new();
    e.header(&mut out, &anchor(10));
    let eight = dir.0.join("eight.pftrace");
    std::fs::write(&eight, out).unwrap();
    refused(&[&paths[0], &eight], "mixed versions or runs");
    let missing = dir.0.join("missing.pftrace");
    refused(&[&missing], "missing.pftrace");
}

#[test]
fn a_binary_trace_and_its_json_conversion_report_the_same() {
    let dir = Dir::new("conv");
    let paths = write_job(&dir.0);
    let bin = report_json(&paths[..2]);
    let mut conv = Vec::new();
    for p in &paths[..2] {
        let mut out = Vec::new();
        evring_cli::to_json(&std::fs::read(p).unwrap(), &mut out).unwrap();
        let j = p.with_extension("json");
        std::fs::write(&j, out).unwrap();
        conv.push(j);
    }
    let json = report_json(&conv);
    let c = |r: &Value, k: &str| r["communicators"][0][k].clone();
    assert_eq!(c(&bin, "operations"), c(&json, "operations"));
    assert_eq!(c(&bin, "stragglers"), c(&json, "stragglers"));
    // Two ranks: rank 0 last on 50; the other 150 arrive together.
    assert_eq!(c(&bin, "stragglers")["tied"], 150);
    assert_eq!(c(&bin, "stragglers")["offenders"][0]["rank"], 0);
}

#[test]
fn rotated_parts_of_a_stream_are_joined() {
    let dir = Dir::new("parts");
    let mut paths = write_job(&dir.0);
    // Rank 1 again, in two parts: the first ends `rotated` at collective 120.
    let recs = records(1);
    let (a, b) = recs.split_at(120);
    for (i, (part, open)) in [(a, 10u64), (b, 2_000_000_000)].into_iter().enumerate() {
        let mut e = Encoder::new(stream(1), &anchor(open));
        let mut out = Vec::new();
        e.header(&mut out, &anchor(open));
        for r in part {
            e.record(&mut out, r);
        }
        let mut f = footer();
        if i == 0 {
            f[2] = ("end", Field::Str("rotated".into()));
            f[1] = ("complete", Field::Bool(false));
        }
        e.footer(&mut out, &anchor(open + 1), &f);
        let p = if i == 0 {
            paths[1].clone()
        } else {
            paths[1].with_extension("part2.pftrace")
        };
        std::fs::write(&p, out).unwrap();
        if i == 1 {
            paths.push(p);
        }
    }
    let r = report_json(&paths);
    let c = &r["communicators"][0];
    let r1 = &c["ranks"][1];
    assert_eq!(r1["parts"], 2, "{r1}");
    assert_eq!(r1["ops"], COLLS + 10);
    assert_eq!(r1["end"], "last_finalize");
    assert_eq!(r1["complete"], true);
    assert_eq!(c["stragglers"]["matched"], COLLS);
    assert_eq!(c["stragglers"]["offenders"][0]["rank"], 2);
}

#[test]
fn one_rank_has_no_stragglers_to_match() {
    let dir = Dir::new("one");
    let paths = write_job(&dir.0);
    let r = report_json(&paths[..1]);
    let c = &r["communicators"][0];
    assert_eq!(c["missing_ranks"], serde_json::json!([1, 2, 3]));
    assert_eq!(c["stragglers"]["matched"], 0);
    assert_eq!(c["stragglers"]["partial"], 0);
    // No v7 data: no tag or phase table.
    assert_eq!(c["tags"], serde_json::json!([]));
    assert_eq!(c["kernel_phases"], serde_json::json!([]));
    let (rc, text, _) = evring(&[&paths[0]], false);
    assert_eq!(rc, 0);
    assert!(
        text.contains("one rank read, no collective to match"),
        "{text}"
    );
}

#[test]
fn detached_streams_are_listed_apart() {
    let dir = Dir::new("detached");
    let mut paths = write_job(&dir.0);
    // Two processes' detached streams (no communicator: id 0, size 0), same host and pid.
    for sub in ["p0", "p1"] {
        std::fs::create_dir_all(dir.0.join(sub)).unwrap();
        let info = StreamInfo {
            pid: 5,
            host: "node-a".into(),
            ..StreamInfo::default()
        };
        let mut e = Encoder::new(info, &anchor(10));
        let mut out = Vec::new();
        e.header(&mut out, &anchor(10));
        e.footer(&mut out, &anchor(20), &footer());
        let p = dir.0.join(sub).join("evring_detached_5_node-a.pftrace");
        std::fs::write(&p, out).unwrap();
        paths.push(p);
    }
    let r = report_json(&paths);
    assert_eq!(r["communicators"].as_array().unwrap().len(), 1);
    assert_eq!(r["detached_files"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(
        r["communicators"][0]["stragglers"]["offenders"][0]["rank"],
        2
    );
}

/// `evring report DIR`: the traces in a dump directory (binary and evring
/// JSON, sorted), everything else there left out.
#[test]
fn a_directory_stands_for_the_traces_in_it() {
    let dir = Dir::new("dir");
    let paths = write_job(&dir.0);
    // What else a dump directory holds: metrics, a call log, other JSON, a
    // temp file, a subdirectory with a trace of another job in it.
    std::fs::write(dir.0.join("evring_node_5.prom"), "evring_ops_total 1\n").unwrap();
    std::fs::write(dir.0.join("evring_node_5.prom.tmp"), "x").unwrap();
    std::fs::write(dir.0.join("evring_node_5.jsonl"), "{\"series\":[]}\n").unwrap();
    std::fs::write(dir.0.join("rec-0.log"), "START 1 2\n").unwrap();
    std::fs::write(dir.0.join("config.json"), "{\"a\": 1}\n").unwrap();
    std::fs::write(
        dir.0.join("nccl_example_1_0.json"),
        "[\n{\"name\":\"x\"},\n{}]\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.0.join("sub")).unwrap();
    std::fs::write(dir.0.join("sub").join("garbage.pftrace"), "garbage").unwrap();

    let from_files = report_json(&paths);
    let from_dir = report_json(std::slice::from_ref(&dir.0));
    assert_eq!(from_dir, from_files);
    let c = &from_dir["communicators"][0];
    assert_eq!(c["ranks"].as_array().unwrap().len(), NRANKS as usize, "{c}");

    // The tables name the files in name order.
    let (rc, text, err) = evring(&[&dir.0], false);
    assert_eq!(rc, 0, "{err}");
    let at = |r: i32| text.find(&format!("evring_{COMM}_{r}.")).unwrap();
    assert!(at(0) < at(1) && at(1) < at(2) && at(2) < at(3), "{text}");
}

#[test]
fn a_directory_without_traces_is_one_line_and_exit_2() {
    let dir = Dir::new("emptydir");
    std::fs::write(dir.0.join("evring_node_5.prom"), "evring_ops_total 1\n").unwrap();
    std::fs::write(dir.0.join("config.json"), "{\"a\": 1}\n").unwrap();
    let (rc, out, err) = evring(&[&dir.0], false);
    assert_eq!(rc, 2);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no evring trace"), "{err}");
    assert!(err.contains(&dir.0.display().to_string()), "{err}");
}

/// v7 traces: collectives with user tags (0x10 on even sequence numbers,
/// none on odd ones) and KernelPhase records, rank 0 binary and rank 1 JSON.
/// The report tabulates each tag (ops, bytes, latency; untagged as 0) and
/// the GPU time of each phase.
#[test]
fn v7_user_tags_and_kernel_phases_are_tabulated() {
    let dir = Dir::new("v7");
    let mut paths = Vec::new();
    for rank in 0..2 {
        let mut v = Vec::new();
        for i in 0..20u64 {
            let info = Info::Coll {
                seq: i,
                func: s("AllReduce"),
                count: COUNT,
                root: 0,
                datatype: s("ncclFloat32"),
                n_channels: 1,
                n_warps: 16,
                algo: s("sym_ll"),
                proto: s(""),
                parent_group: 0,
                kernel_variant: s("AllReduce_ST_LL"),
                is_sym_coll: true,
                user_tag: if i % 2 == 0 { 0x10 } else { 0 },
            };
            let t = 1_000_000_000 + i * 1_000_000;
            // Tagged: 100 us; untagged: 300 us.
            let lat = if i % 2 == 0 { 100_000 } else { 300_000 };
            // Its channel's three phases: 1, 5 and 2 us of GPU time.
            for (p, us) in [1u64, 5, 2].into_iter().enumerate() {
                let g = 7_000_000_000 + i * 1_000_000 + p as u64 * 10_000;
                let mut r = rec(
                    1000 * i + 100 + p as u64,
                    rank,
                    Kind::KernelPhase,
                    Info::KernelPhase {
                        channel: 0,
                        phase: p as u8,
                        gpu_start: g,
                    },
                    t + 10,
                    t + 20,
                );
                (r.gpu_start, r.gpu_end) = (g, g + us * 1000);
                v.push(r);
            }
            v.push(rec(1000 * i + 1, rank, Kind::Coll, info, t, t + lat));
        }
        let mut out = Vec::new();
        let ext = if rank == 0 {
            let mut e = Encoder::new(stream(rank), &anchor(10));
            e.header(&mut out, &anchor(10));
            v.iter().for_each(|r| e.record(&mut out, r));
            e.footer(&mut out, &anchor(9_000_000_000), &footer());
            "pftrace"
        } else {
            let mut e = JsonEncoder::new(stream(rank), &anchor(10));
            e.header(&mut out, &anchor(10));
            v.iter().for_each(|r| e.record(&mut out, r));
            e.footer(&mut out, &anchor(9_000_000_000), &footer());
            "json"
        };
        let p = dir.0.join(format!("evring_{COMM}_{rank}.{ext}"));
        std::fs::write(&p, out).unwrap();
        paths.push(p);
    }
    let r = report_json(&paths);
    let c = &r["communicators"][0];
    let tags = c["tags"].as_array().unwrap();
    assert_eq!(tags.len(), 2, "{tags:?}");
    // Tag 0 (untagged) first: 10 per rank, 300 us; tag 0x10: 100 us.
    assert_eq!(
        (tags[0]["tag"].as_u64(), tags[0]["ops"].as_u64()),
        (Some(0), Some(20))
    );
    assert_eq!(
        (tags[1]["tag"].as_u64(), tags[1]["ops"].as_u64()),
        (Some(0x10), Some(20))
    );
    assert_eq!(tags[1]["bytes"].as_u64(), Some(20 * COUNT * 4));
    let p50 = |t: &Value| t["p50_ns"].as_f64().unwrap();
    assert!(close(p50(&tags[0]), 300_000.0, 0.01), "{tags:?}");
    assert!(close(p50(&tags[1]), 100_000.0, 0.01), "{tags:?}");
    let phases = c["kernel_phases"].as_array().unwrap();
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["initial_sync", "compute", "final_sync"]);
    for (p, us) in phases.iter().zip([1.0, 5.0, 2.0]) {
        assert_eq!(p["count"].as_u64(), Some(40), "{p}");
        assert!(
            close(p["p50_ns"].as_f64().unwrap(), us * 1000.0, 0.01),
            "{p}"
        );
        assert!(
            close(p["mean_ns"].as_f64().unwrap(), us * 1000.0, 0.01),
            "{p}"
        );
    }
    let (rc, text, _) = evring(&[&paths[0], &paths[1]], false);
    assert_eq!(rc, 0);
    assert!(text.contains("user tags"), "{text}");
    assert!(text.contains("0x10 "), "{text}");
    assert!(text.contains("kernel phases"), "{text}");
    assert!(text.contains("compute"), "{text}");
}
