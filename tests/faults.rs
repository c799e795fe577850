//! Faults around the plugin: the process killed at random points (the trace
//! written so far must still load as a Chrome-trace array), a full disk, a
//! trace file removed under the writer.

mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD: &str = "EVRING_FAULT_CHILD";

/// In the child: paced traffic on two communicators until killed. It stops
/// by itself after 5 s so a parent that failed to kill it cannot fill a disk.
fn child_traffic() -> ! {
    let (i, ctxs) = Inst::new(
        "kill-child",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "70")],
        &[(11, 0), (12, 1)],
    );
    println!("DIR {}", i.dir.display());
    let mut seq = 0;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        for &ctx in &ctxs {
            let c = allreduce_user_thread(&i, ctx, seq, 2);
            for ch in 0..2 {
                let k = i.start(ctx, &kernel_ch(c, ch, 1000 + seq));
                i.rec(k, evring_shim::abi::state::KERNEL_CH_STOP, Some(2000 + seq));
                i.stop(k);
            }
        }
        seq += 1;
        if seq % 16 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::process::exit(3)
}

#[test]
fn sigkill_leaves_loadable_traces() {
    if std::env::var_os(CHILD).is_some() {
        child_traffic();
    }
    let exe = std::env::current_exe().unwrap();
    // Kill points spread over the first second (flushes happen every 200 ms).
    for (k, delay_ms) in [150u64, 330, 520, 700, 950].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "sigkill_leaves_loadable_traces",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let dir = loop {
            line.clear();
            use std::io::BufRead;
            assert!(out.read_line(&mut line).unwrap() > 0, "child said nothing");
            // libtest may print "test <name> ... " before it on the same line.
            if let Some(at) = line.find("DIR ") {
                break std::path::PathBuf::from(line[at + 4..].trim());
            }
        };
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert_eq!(status.code(), None, "killed by a signal, not exited");
        let mut colls = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(text.starts_with("[\n"), "array form: {}", p.display());
                let evs = parse_trace(&text);
                colls += count_cat(&evs, "Coll");
            }
        }
        // After the first flush (200 ms) something must be on disk.
        if delay_ms > 300 {
            assert!(colls > 0, "kill #{k} at {delay_ms} ms: nothing flushed");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn full_disk_counts_and_continues() {
    if !std::path::Path::new("/dev/full").exists() {
        panic!("/dev/full missing: this test needs it");
    }
    // A prefix whose files are created in a directory we control; then the
    // trace file is replaced by a symlink to /dev/full, which fails every write.
    let (i, ctxs) = Inst::new("devfull", None, &[("NCCL_PROFILE_EVENT_MASK", "6")], &[]);
    let path = i.dir.join("trace_77_0.json");
    std::os::unix::fs::symlink("/dev/full", &path).unwrap();
    let ctx = i.init(77, 0);
    assert!(ctxs.is_empty());
    for s in 0..20_000 {
        allreduce_user_thread(&i, ctx, s, 1);
    }
    i.fin(ctx);
    let st = i.stats();
    assert_balanced(&st);
    assert!(st.write_errors >= 1, "{st:?}");
    assert!(st.records_unwritten > 0, "{st:?}");
}

#[test]
fn trace_removed_under_the_writer() {
    let (i, ctxs) = Inst::new(
        "removed",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "6")],
        &[(5, 0)],
    );
    for s in 0..100 {
        allreduce_user_thread(&i, ctxs[0], s, 1);
    }
    i.call_void(c"evring_flush");
    let path = i.dir.join("trace_5_0.json");
    assert!(path.exists());
    std::fs::remove_file(&path).unwrap();
    for s in 100..200 {
        allreduce_user_thread(&i, ctxs[0], s, 1);
    }
    i.fin(ctxs[0]);
    let st = i.stats();
    assert_balanced(&st);
    // Writing to an unlinked file succeeds on Linux: the job simply goes on.
    assert_eq!(st.write_errors, 0);
    assert_eq!(st.panics, 0);
}
