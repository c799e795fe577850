//! Metrics-only mode: `NCCL_PROFILE_DUMP_FILE=""` (no trace files) with
//! `EVRING_METRICS=PREFIX` still writes the metrics files, with the
//! communicator's labels, and no trace file.

mod common;
use common::*;

#[test]
fn metrics_are_written_without_trace_files() {
    let dir = tempdir("metrics-only");
    let prefix = dir.join("m").to_string_lossy().into_owned();
    let (p, ctxs) = Inst::new(
        "metrics-only-plugin",
        None,
        &[("NCCL_PROFILE_DUMP_FILE", ""), ("EVRING_METRICS", &prefix)],
        &[(0xC0FFEE, 1)],
    );
    let ctx = ctxs[0];
    for seq in 0..4 {
        let c = p.start(ctx, &coll(0, 0, seq, 2));
        let k = p.start(ctx, &kernel_ch(c, 0, 1_000 + seq * 100));
        p.rec(k, 22, Some(1_050 + seq * 100));
        p.stop(k);
        p.stop(c);
    }
    // The last finalize ends every stream: the sink's final export.
    p.fin(ctx);
    assert_balanced(&p.stats());
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let prom = files.iter().find(|f| f.ends_with(".prom"));
    let jsonl = files.iter().find(|f| f.ends_with(".jsonl"));
    let (Some(prom), Some(jsonl)) = (prom, jsonl) else {
        panic!("no metrics files in {}: {files:?}", dir.display());
    };
    let text = std::fs::read_to_string(dir.join(prom)).unwrap();
    assert!(text.contains("AllReduce"), "{text}");
    assert!(text.contains("rank=\"1\""), "{text}");
    let lines = std::fs::read_to_string(dir.join(jsonl)).unwrap();
    assert!(!lines.trim().is_empty());
    // And no trace file anywhere: not in the test dir, not under the default prefix.
    assert!(
        !std::fs::read_dir(&p.dir).unwrap().any(|e| e
            .unwrap()
            .path()
            .extension()
            .is_some_and(|x| x == "json")),
        "a trace file was written"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
