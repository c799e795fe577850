//! Every way a process can end leaves trace files a reader can trust
//! (docs/shim.md, "Reading a trace"): complete lines are intact records,
//! every footer's counters agree with the lines before it, and the reader can
//! tell a finalized, an exited and a cut run apart. Real processes (this test
//! binary run again as a child) with the release `.so`.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Paced traffic on `ctx` until `stop` (or 5 s, so a child that was not
/// killed cannot run on).
fn traffic(i: &Inst, ctx: u64, stop: &AtomicBool, base: u64) {
    let t0 = Instant::now();
    let mut seq = base;
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(5) {
        let c = allreduce_user_thread(i, ctx, seq, 2);
        for ch in 0..2 {
            let k = i.start(ctx, &kernel_ch(c, ch, 1000 + seq));
            i.rec(k, evring_shim::abi::state::KERNEL_CH_STOP, Some(2000 + seq));
            i.stop(k);
        }
        seq += 1;
        if seq.is_multiple_of(16) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The child: three communicators, one finalized early; threads inside the
/// plugin until the process ends the way `mode` says.
fn child(mode: &str) -> ! {
    let (i, ctxs) = Inst::new(
        "exit-child",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "70"), ("EVRING_RING", "262144")],
        &[(21, 0), (22, 1), (23, 0)],
    );
    let mut i = i;
    i.keep = true; // the parent reads and removes it
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for (k, &ctx) in ctxs.iter().enumerate().skip(1) {
            let (i, stop) = (&i, &stop);
            s.spawn(move || traffic(i, ctx, stop, k as u64 * 1_000_000));
        }
        // Comm 21: some traffic, then its finalize (a footer mid-run).
        let one = AtomicBool::new(false);
        std::thread::scope(|s2| {
            s2.spawn(|| traffic(&i, ctxs[0], &one, 0));
            std::thread::sleep(Duration::from_millis(100));
            one.store(true, Ordering::Relaxed);
        });
        i.raw_fin(ctxs[0]);
        // Its footer on disk before the end (however loaded the machine);
        // only then does the parent start its clock.
        i.settle();
        println!("DIR {}", i.dir.display());
        std::thread::sleep(Duration::from_millis(300));
        match mode {
            // SAFETY: ends the process at once, no exit handlers (os._exit).
            "_exit" => unsafe { libc::_exit(0) },
            // exit() with the traffic threads still inside the plugin.
            "exit" => std::process::exit(0),
            "finalize" => {
                stop.store(true, Ordering::Relaxed);
            }
            // Wait for the parent's signal.
            _ => std::thread::sleep(Duration::from_secs(10)),
        }
    });
    for &ctx in &ctxs[1..] {
        i.raw_fin(ctx);
    }
    std::process::exit(0)
}

fn run(mode: &str, signal: Option<i32>) -> (Run, std::process::ExitStatus) {
    let mut c = spawn_child("exit_paths", mode, &[]);
    let dir = child_dir(&mut c);
    if let Some(sig) = signal {
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(c.id() as i32, sig) };
    }
    let status = wait_or_kill(&mut c, Duration::from_secs(30), mode);
    let r = read_run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    (r, status)
}

#[test]
fn exit_paths() {
    if let Some(mode) = child_mode() {
        child(&mode);
    }
    use std::os::unix::process::ExitStatusExt;
    // Cut runs: SIGTERM (Slurm's and Kubernetes' end of job, no handler),
    // os._exit, SIGKILL. The footer of the communicator finalized mid-run is
    // there and agrees with its file; the reader says "cut".
    for (mode, sig) in [
        ("sigterm", Some(libc::SIGTERM)),
        ("_exit", None),
        ("sigkill", Some(libc::SIGKILL)),
    ] {
        let (r, st) = run(mode, sig);
        match sig {
            Some(s) => assert_eq!(st.signal(), Some(s), "{mode}: {st:?}"),
            None => assert_eq!(st.code(), Some(0), "{mode}"),
        }
        assert_eq!(r.ending, Ending::Cut, "{mode}: {r:?}");
        assert!(r.footers.len() == 1, "{mode}: comm 21's footer: {r:?}");
        assert!(r.records > 0, "{mode}");
        eprintln!("{mode}: {} files, {} records, cut", r.files, r.records);
    }
    // exit() with threads still inside the plugin: every file has its exit
    // footer and nothing is written after it (no stray file without one).
    let (r, st) = run("exit", None);
    assert_eq!(st.code(), Some(0));
    assert_eq!(r.ending, Ending::Exited, "{r:?}");
    assert_eq!(r.files, 3, "one file per communicator, no stray: {r:?}");
    assert_eq!(r.footers.len(), 3);
    // Finalize of every communicator: the identities hold in the last footer.
    let (r, st) = run("finalize", None);
    assert_eq!(st.code(), Some(0));
    assert_eq!(r.ending, Ending::Finalized, "{r:?}");
    let last = r
        .footers
        .iter()
        .find(|f| f["args"]["end"] == "last_finalize")
        .unwrap();
    assert_eq!(last["args"]["live"], 0, "{last}");
    assert_eq!(last["args"]["open_comms"], 0, "{last}");
    assert_eq!(last["args"]["complete"], true, "{last}");
}
