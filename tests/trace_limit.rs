//! `EVRING_TRACE_LIMIT` / `EVRING_TRACE_PARTS`: a stream continues in new
//! parts at the size limit, every part is a whole trace with its footer, old
//! parts beyond the kept count are removed and their records counted.

mod common;
use common::*;
use evring_perfetto::trace::{read, Value};
use std::path::PathBuf;

const LIMIT: u64 = 64 << 10;

fn parts(i: &Inst) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(&i.dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pftrace"))
        .collect();
    v.sort();
    v
}

fn run(keep: &str) -> (Inst, evring_shim::StatsV1) {
    let (i, ctxs) = Inst::new(
        "limit",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "6"),
            ("EVRING_FORMAT", "perfetto"),
            ("EVRING_TRACE_LIMIT", "64K"),
            ("EVRING_TRACE_PARTS", keep),
        ],
        &[(5, 0)],
    );
    for s in 0..3000 {
        allreduce_user_thread(&i, ctxs[0], s, 1);
    }
    i.fin(ctxs[0]);
    let st = i.stats();
    assert_balanced(&st);
    (i, st)
}

#[test]
fn files_rotate_at_the_limit_and_every_record_is_in_one() {
    let (i, st) = run("0");
    let files = parts(&i);
    assert!(files.len() >= 3, "{files:?}");
    assert_eq!(st.trace_rotations, files.len() as u64 - 1, "{st:?}");
    let (mut colls, mut ends) = (0, Vec::new());
    for p in &files {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            bytes.len() as u64 <= LIMIT,
            "{} is {} bytes",
            p.display(),
            bytes.len()
        );
        let t = read(&bytes);
        assert_eq!(t.stop, None, "{}", p.display());
        assert!(
            !t.stream.is_empty(),
            "every part has its header: {}",
            p.display()
        );
        colls += t.slices.iter().filter(|s| s.category == "Coll").count();
        match t.summary_value("end") {
            Some(Value::Str(e)) => ends.push(e.clone()),
            other => panic!("{}: footer end {other:?}", p.display()),
        }
    }
    ends.sort();
    let mut want = vec!["rotated".to_string(); files.len() - 1];
    want.insert(0, "last_finalize".to_string());
    assert_eq!(ends, want, "each part ends rotated, the last at finalize");
    assert_eq!(colls, 3000, "every Coll in exactly one part");
    assert_eq!(st.records_rotated_away, 0);
}

#[test]
fn only_the_newest_parts_are_kept_and_the_rest_is_counted() {
    let (i, st) = run("2");
    let files = parts(&i);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(st.trace_rotations >= 2, "{st:?}");
    let mut in_files = 0u64;
    for p in &files {
        let t = read(&std::fs::read(p).unwrap());
        in_files += t.slices.len() as u64 + t.summary.is_some() as u64;
    }
    assert!(st.records_rotated_away > 0, "{st:?}");
    assert_eq!(
        in_files + st.records_rotated_away,
        st.records_written,
        "written = still on disk + counted as rotated away: {st:?}"
    );
}
