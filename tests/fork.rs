//! fork() while threads are inside the plugin (DataLoader workers,
//! `subprocess` through fork): the child never blocks and never writes the
//! parent's files; a child that uses the plugin gets its own state and files.
//! Every child runs under a time limit, so a hang fails the test.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Waits for the forked `pid` at most `limit`; kills it and fails on a hang.
fn wait_pid(pid: libc::pid_t, limit: Duration, what: &str) -> i32 {
    let t0 = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child, non-blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            assert!(
                libc::WIFEXITED(status),
                "{what}: child ended by a signal ({status:#x})"
            );
            return libc::WEXITSTATUS(status);
        }
        if t0.elapsed() > limit {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("{what}: child hung (> {limit:?})");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// In the child: calls the plugin, then exits with 0 (or 1 on a failed check).
/// Only async-signal-safe-ish work before the plugin call: the child of a
/// multi-threaded process.
fn in_child(i: &Inst, mode: u32, parent_ctx: u64, child_prefix: &std::ffi::CStr) -> ! {
    match mode {
        // Only exit(): runs the plugin's exit handler.
        0 => std::process::exit(0),
        // Uses the parent's handles and context (stale in the child), then exits.
        1 => {
            let h = i.start(parent_ctx, &group_api(1));
            i.stop(h);
            i.raw_fin(parent_ctx);
            std::process::exit(if h == 0 { 0 } else { 1 })
        }
        // A communicator of its own: init, traffic, finalize, exit.
        _ => {
            // SAFETY: single-threaded child; setenv before the child's first init.
            unsafe { libc::setenv(c"NCCL_PROFILE_DUMP_FILE".as_ptr(), child_prefix.as_ptr(), 1) };
            // SAFETY: as above. The checks below read the JSON format.
            unsafe { libc::setenv(c"EVRING_FORMAT".as_ptr(), c"json".as_ptr(), 1) };
            let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
            // SAFETY: as in Inst::init.
            unsafe {
                i.p.init(
                    &mut ctx,
                    21,
                    i.mask.as_ptr(),
                    c"child".as_ptr(),
                    1,
                    2,
                    0,
                    None,
                );
            }
            let ctx = ctx as u64;
            for s in 0..50 {
                allreduce_user_thread(i, ctx, s, 1);
            }
            i.raw_fin(ctx);
            // The footer before exit, however busy the machine (the exit
            // handler's own wait is bounded; tests/exit_paths.rs covers it).
            i.settle();
            let s = i.stats();
            let ok = s.inits == 1 && s.finalizes == 1 && s.started == 200 && s.live == 0;
            std::process::exit(if ok { 0 } else { 1 })
        }
    }
}

#[test]
fn fork_with_threads_inside_the_plugin() {
    const FORKS: u32 = 30;
    let (i, ctxs) = Inst::new(
        "fork",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "6")],
        &[(11, 0), (12, 1)],
    );
    let child_dir = i.dir.join("children");
    std::fs::create_dir_all(&child_dir).unwrap();
    let child_prefix = std::ffi::CString::new(child_dir.join("trace").to_str().unwrap()).unwrap();
    let stop = AtomicBool::new(false);
    let mut colls = 0u64;
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for (k, &ctx) in ctxs.iter().enumerate() {
            let (i, stop) = (&i, &stop);
            workers.push(s.spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    allreduce_user_thread(i, ctx, k as u64 * 1_000_000 + n, 1);
                    n += 1;
                    // Flush often, so the writer holds its files busy at fork time.
                    if n.is_multiple_of(64) {
                        i.call_void(c"evring_flush");
                    }
                }
                n
            }));
        }
        // Stops the workers even when a check below panics (else the scope
        // would wait for them forever).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_millis(50));
        for f in 0..FORKS {
            // SAFETY: the child only calls the plugin and exits (in_child).
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                in_child(&i, f % 3, ctxs[0], &child_prefix);
            }
            let code = wait_pid(
                pid,
                Duration::from_secs(10),
                &format!("fork {f} (mode {})", f % 3),
            );
            assert_eq!(code, 0, "fork {f} (mode {}): child's check failed", f % 3);
            std::thread::sleep(Duration::from_millis(3));
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            colls += w.join().unwrap();
        }
    });
    for &c in &ctxs {
        i.fin(c);
    }
    let st = i.stats();
    assert_balanced(&st);
    assert_eq!(st.inits, 2, "children never count in the parent: {st:?}");
    // The parent's files: one footer each, no duplicate ids, nothing a child wrote.
    let run = read_run(&i.dir);
    assert_eq!(run.ending, Ending::Finalized, "{run:?}");
    assert_eq!(run.files, 2, "{run:?}");
    let mut ids = std::collections::HashSet::new();
    let mut parent_colls = 0u64;
    for (path, evs) in i.traces() {
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.matches("\n]").count(),
            1,
            "one closing ] in {}",
            path.display()
        );
        for e in evs.iter().filter(|e| e["ph"] == "X") {
            assert!(
                ids.insert(e["args"]["id"].as_str().unwrap().to_string()),
                "duplicate id {e}"
            );
            assert_eq!(e["pid"], pid(), "record of another process: {e}");
            parent_colls += (e["cat"] == "Coll") as u64;
        }
    }
    // Every Coll the parent issued is in its files or counted as a ring drop.
    assert!(
        parent_colls <= colls && parent_colls + st.drop_ring_full >= colls,
        "{parent_colls} of {colls}: {st:?}"
    );
    // Every child that used the plugin wrote its own file, named with its pid.
    let child_files: Vec<_> = std::fs::read_dir(&child_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(child_files.len() as u32, FORKS / 3, "{child_files:?}");
    for p in &child_files {
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("trace_21_0_pid"), "{name}");
        let evs = parse_trace(&std::fs::read_to_string(p).unwrap());
        let colls = evs
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "Coll")
            .count();
        assert_eq!(colls, 50, "{name}");
        assert_eq!(
            evs.last().unwrap()["args"]["end"],
            "last_finalize",
            "{name}"
        );
    }
}
