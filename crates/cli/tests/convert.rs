//! Binary → JSON conversion: the same events the JSON encoder writes, cut
//! files up to the cut, bad input refused with one line and exit status 2.

use evring_shim::format::{fields, Format, StreamEncoder};
use evring_shim::model::{Info, Kind};
use evring_shim::perfetto::{Anchor, StreamInfo};
use evring_shim::record::{Record, Timing};
use evring_shim::strings::Str16;
use serde_json::Value;

fn rec(id: u64, parent: u64, kind: Kind, info: Info, start: u64, end: u64) -> Record {
    let tagged = |i: u64| if i == 0 { 0 } else { 0xC300_0000_0010_0000 | i };
    Record {
        ctx: 7,
        rank: 2,
        ..Record::stopped(tagged(id), tagged(parent), kind, info, start, end)
    }
}

fn records() -> Vec<Record> {
    let s = |t: &str| Str16::from_bytes(t.as_bytes());
    let t = 5_000_000_000u64;
    let mut v = Vec::new();
    for c in 0..20u64 {
        let base = t + c * 1000;
        let coll = 100 * c + 1;
        for k in 0..3u64 {
            let mut st = rec(
                100 * c + 10 + k,
                100 * c + 5,
                Kind::ProxyStep,
                Info::ProxyStep { step: k as i32 },
                base + 100 * k,
                base + 100 * k + 150,
            );
            st.states[0] = (10, st.start_ns);
            st.states[1] = (11, st.start_ns + 70);
            st.n_states = 2;
            st.state_arg = 1 << 20;
            v.push(st);
        }
        v.push(rec(
            100 * c + 5,
            coll,
            Kind::ProxyOp,
            Info::ProxyOp {
                pid: 9,
                channel: 0,
                peer: 1,
                n_steps: 3,
                chunk_size: 1 << 20,
                is_send: false,
            },
            base,
            base + 500,
        ));
        let mut kc = rec(
            100 * c + 6,
            coll,
            Kind::KernelCh,
            Info::KernelCh {
                channel: 0,
                gpu_start: 1 << 60,
            },
            base,
            base + 600,
        );
        kc.gpu_start = 1 << 60;
        kc.gpu_end = (1 << 60) + 590;
        v.push(kc);
        let info = Info::Coll {
            seq: c,
            func: s("ReduceScatter"),
            count: 1 << 30,
            root: 0,
            datatype: s("ncclBfloat16"),
            n_channels: 1,
            n_warps: 8,
            algo: s("RING"),
            proto: s("LL128"),
            parent_group: 0,
            kernel_variant: Default::default(),
            is_sym_coll: false,
            user_tag: 0,
        };
        let mut co = rec(coll, 0, Kind::Coll, info, base - 10, base + 600);
        co.timing = Timing::Children;
        co.stop_ns = base + 20;
        v.push(co);
    }
    v
}

fn stream() -> StreamInfo {
    StreamInfo {
        comm_id: u64::MAX - 1,
        rank: 2,
        nranks: 4,
        nnodes: 1,
        abi: 5,
        name: None,
        pid: 77,
        host: "h1".into(),
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

/// The test records through one encoder, header to footer.
fn encode(format: Format) -> Vec<u8> {
    let mut e = StreamEncoder::new(format, stream(), &anchor(10));
    let mut out = Vec::new();
    e.header(&mut out, &anchor(10));
    for r in records() {
        e.record(&mut out, &r);
    }
    e.footer(
        &mut out,
        &anchor(20),
        &fields(
            &[("finalized", true), ("complete", true)],
            &[("stream_records", 101), ("drop_ring_full", 0)],
        ),
    );
    out
}

fn binary() -> Vec<u8> {
    encode(Format::Perfetto)
}

fn json_direct() -> Vec<u8> {
    encode(Format::Json)
}

fn events(bytes: &[u8]) -> Vec<Value> {
    serde_json::from_slice::<Value>(bytes)
        .expect("JSON array")
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn conversion_writes_what_the_json_encoder_writes() {
    let mut out = Vec::new();
    let c = evring_cli::to_json(&binary(), &mut out).unwrap();
    assert_eq!(
        c,
        evring_cli::Converted {
            records: 120,
            cut: false,
            footer: true
        }
    );
    let (a, b) = (events(&out), events(&json_direct()));
    let xs = |v: &[Value]| {
        v.iter()
            .filter(|e| e["ph"] == "X" || e["ph"] == "M")
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(xs(&a), xs(&b), "same complete events, tracks and metadata");
    let count = |v: &[Value], ph: &str| v.iter().filter(|e| e["ph"] == ph).count();
    assert_eq!(
        (count(&a, "s"), count(&a, "f")),
        (count(&b, "s"), count(&b, "f"))
    );
    assert_eq!(
        count(&a, "f"),
        120 - 20,
        "every record but the collectives has a parent"
    );
    let footer =
        |v: &[Value]| v.iter().find(|e| e["name"] == "evring.summary").unwrap()["args"].clone();
    let (fa, fb) = (footer(&a), footer(&b));
    for k in [
        "finalized",
        "complete",
        "stream_records",
        "drop_ring_full",
        "realtime_ns",
    ] {
        assert_eq!(fa[k], fb[k], "{k}");
    }
}

#[test]
fn a_cut_binary_converts_up_to_the_cut() {
    let bytes = binary();
    let cut = &bytes[..bytes.len() * 2 / 3];
    let mut out = Vec::new();
    let c = evring_cli::to_json(cut, &mut out).unwrap();
    assert!(c.cut && !c.footer);
    assert!(c.records > 50 && c.records < 120, "{}", c.records);
    // Like a cut JSON trace: every line but the first is one whole event.
    let text = String::from_utf8(out).unwrap();
    let xs: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l.trim_end_matches(',')).expect("whole line"))
        .filter(|v: &Value| v["ph"] == "X")
        .collect();
    assert_eq!(xs.len(), c.records);
    let full = events(&json_direct());
    for x in &xs {
        assert!(full.contains(x), "{x} is in the uncut conversion");
    }
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("evring-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in [
        ("garbage", b"{\"not\": \"a trace\"}".to_vec()),
        ("empty", Vec::new()),
        ("json", json_direct()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_evring"))
            .arg("convert")
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("evring: "), "{err}");
    }
    let p = dir.join("ok.pftrace");
    std::fs::write(&p, binary()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_evring"))
        .args(["info"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("records   ProxyStep    60"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
