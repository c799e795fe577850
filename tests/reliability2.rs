//! Reliability round 2 (issue 11): a blocking output, finalize under load,
//! garbage finalize, torn names, control calls before init, and the messages
//! a user must see. Release `.so`; real processes where a hang or stderr is
//! what is checked.

mod common;
use common::*;
use evring_shim::abi::ty;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn child_output(test: &str, mode: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = spawn_child(test, mode, env);
    let mut out = c.stdout.take().unwrap();
    let mut err = c.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let st = wait_or_kill(&mut c, Duration::from_secs(60), mode);
    (
        st.code().unwrap_or(-1),
        t_out.join().unwrap(),
        t_err.join().unwrap(),
    )
}

// ---- 2. a FIFO at the trace path -----------------------------------------

fn fifo_child() -> ! {
    let (i, _) = Inst::new("fifo", None, &[("NCCL_PROFILE_EVENT_MASK", "6")], &[]);
    let fifo = std::ffi::CString::new(i.dir.join("trace_31_0.json").to_str().unwrap()).unwrap();
    // SAFETY: a path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let t = Instant::now();
    let a = i.init(31, 0);
    let first_init = t.elapsed(); // builds the engine (allocates every slot)
    for s in 0..1000 {
        allreduce_user_thread(&i, a, s, 1);
    }
    let t = Instant::now();
    let b = i.init(32, 0);
    let second_init = t.elapsed();
    for s in 0..1000 {
        allreduce_user_thread(&i, b, s, 1);
    }
    let mut fins = Vec::new();
    for ctx in [a, b] {
        let t = Instant::now();
        i.raw_fin(ctx);
        fins.push(t.elapsed());
    }
    i.settle();
    let st = i.stats();
    assert_balanced(&st);
    assert!(st.write_errors >= 1, "{st:?}");
    assert!(
        st.records_unwritten >= 4000,
        "the FIFO's records are counted: {st:?}"
    );
    let evs = parse_trace(&std::fs::read_to_string(i.dir.join("trace_32_0.json")).unwrap());
    assert_eq!(
        evs.iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "Coll")
            .count(),
        1000
    );
    println!("TIMES first init {first_init:?}, second init {second_init:?}, finalize {:?}, last finalize {:?}", fins[0], fins[1]);
    // exit() skips destructors: remove the directory (Inst's Drop would).
    let _ = std::fs::remove_dir_all(&i.dir);
    std::process::exit(0) // the exit handler must not block either
}

#[test]
fn fifo_at_the_trace_path_never_blocks() {
    if child_mode().as_deref() == Some("fifo") {
        fifo_child();
    }
    let (code, out, err) = child_output("fifo_at_the_trace_path_never_blocks", "fifo", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("not a regular file"),
        "one warning names the cause: {err}"
    );
    eprintln!(
        "{}",
        out.lines().find(|l| l.contains("WORST")).unwrap_or("")
    );
}

// ---- 3. finalize of one communicator while others are flooded -------------

#[test]
fn finalize_cost_is_independent_of_other_communicators_load() {
    const ROUNDS: u64 = 30;
    let (i, ctxs) = Inst::new(
        "fin-load",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "6"), ("EVRING_RING", "65536")],
        &[(41, 0)],
    );
    // Without load first: the cost of finalize itself.
    let mut idle = Vec::new();
    for r in 0..ROUNDS {
        let a = i.init(1000 + r, 0);
        for s in 0..10 {
            allreduce_user_thread(&i, a, s, 1);
        }
        let t = Instant::now();
        i.raw_fin(a);
        idle.push(t.elapsed());
    }
    idle.sort();
    let stop = AtomicBool::new(false);
    let mut times = Vec::new();
    let mut inits = Vec::new();
    std::thread::scope(|s| {
        for k in 0..3u64 {
            let (i, stop, ctx) = (&i, &stop, ctxs[0]);
            s.spawn(move || {
                let mut n = k << 40;
                while !stop.load(Ordering::Relaxed) {
                    allreduce_user_thread(i, ctx, n, 1);
                    n += 1;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        for r in 0..ROUNDS {
            let t = Instant::now();
            let a = i.init(100 + r, 0);
            inits.push(t.elapsed());
            for s in 0..10 {
                allreduce_user_thread(&i, a, s, 1);
            }
            let t = Instant::now();
            i.raw_fin(a);
            times.push(t.elapsed());
            // Generous: it must return at all (was 9-84 s); the target of
            // <= 10 ms is reported, not asserted (docs/reliability.md).
            assert!(times[times.len() - 1] < Duration::from_secs(5), "{times:?}");
        }
        stop.store(true, Ordering::Relaxed);
    });
    i.fin(ctxs[0]);
    assert_balanced(&i.stats());
    times.sort();
    inits.sort();
    eprintln!(
        "finalize without load: median {:?}, max {:?}",
        idle[idle.len() / 2],
        idle[idle.len() - 1]
    );
    eprintln!(
        "under load of 3 flooding threads: finalize median {:?}, max {:?}; init median {:?}, max {:?} ({ROUNDS} rounds)",
        times[times.len() / 2],
        times[times.len() - 1],
        inits[inits.len() / 2],
        inits[inits.len() - 1]
    );
}

// ---- 4. garbage, unknown and repeated finalize ----------------------------

#[test]
fn garbage_unknown_and_double_finalize_are_refused() {
    let (i, ctxs) = Inst::new("fin-garbage", None, &[], &[(51, 0), (52, 1)]);
    let (a, b) = (ctxs[0], ctxs[1]);
    let open_b = i.start(b, &group_api(1));
    assert_ne!(open_b, 0);
    i.raw_fin(u64::MAX); // the plugin's own "registry full" context, never handed out
    i.raw_fin(0x1234_5678);
    i.raw_fin(a);
    i.raw_fin(a);
    let s = i.stats();
    assert_eq!((s.finalizes, s.bad_contexts), (1, 3), "{s:?}");
    // B's open GroupApi survived A's finalize: its own stop completes it.
    assert_eq!(s.live, 1, "{s:?}");
    i.stop(open_b);
    i.fin(b);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(
        (s.finalizes, s.stale_handles, s.forced_finalize),
        (2, 0, 0),
        "{s:?}"
    );
    let run = read_run(&i.dir);
    assert_eq!(run.ending, Ending::Finalized);
    for f in &run.footers {
        assert_eq!(f["args"]["complete"], true, "{f}");
    }

    // Overflow contexts: as many finalizes accepted as inits handed out.
    let (o, _) = Inst::new("fin-overflow", None, &[("EVRING_MAX_COMMS", "4")], &[]);
    let ctxs: Vec<u64> = (0..6).map(|k| o.init(60 + k, 0)).collect();
    assert_eq!(ctxs.iter().filter(|&&c| c == u64::MAX).count(), 2);
    for &c in ctxs.iter().rev() {
        o.raw_fin(c);
    }
    o.raw_fin(u64::MAX);
    o.settle();
    let s = o.stats();
    assert_eq!(
        (s.finalizes, s.bad_contexts, s.context_full),
        (6, 1, 2),
        "{s:?}"
    );
}

#[test]
fn complete_is_false_when_records_were_lost() {
    // A 16-record ring and no pause: records are dropped, so no footer may
    // claim a complete trace.
    let (i, ctxs) = Inst::new(
        "incomplete",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "6"), ("EVRING_RING", "16")],
        &[(71, 0)],
    );
    for s in 0..5000 {
        allreduce_user_thread(&i, ctxs[0], s, 1);
    }
    i.fin(ctxs[0]);
    let s = i.stats();
    assert!(s.drop_ring_full > 0, "{s:?}");
    for (_, evs) in i.traces() {
        let f = evs.last().unwrap();
        assert_eq!(f["args"]["complete"], false, "{f}");
    }
}

// ---- 5. names are never torn ----------------------------------------------

/// Two strings at addresses that share a cache entry (the index depends on
/// bits 3..10 of the address only).
fn colliding_strings(buf: &mut [u8]) -> (*const i8, *const i8) {
    let base = buf.as_ptr() as usize;
    let off = (8 - base % 8) % 8;
    buf[off..off + 16].copy_from_slice(b"AAAAAAAAAAAAAAA\0");
    buf[off + 2048..off + 2048 + 16].copy_from_slice(b"bbbbbbbbbbbbbbb\0");
    (
        buf[off..].as_ptr().cast(),
        buf[off + 2048..].as_ptr().cast(),
    )
}

#[test]
fn names_sharing_a_cache_entry_are_never_mixed() {
    const PER_THREAD: u64 = 100_000;
    let (i, ctxs) = Inst::new(
        "torn",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "2"), ("EVRING_RING", "262144")],
        &[(81, 0)],
    );
    let mut buf = vec![0u8; 4096];
    let (a, b) = colliding_strings(&mut buf);
    let (a, b) = (a as usize, b as usize);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (i, ctx) = (&i, ctxs[0]);
            s.spawn(move || {
                for n in 0..PER_THREAD {
                    let mut d = coll(0, 0, n, 0);
                    d.u.coll.func = if (n + t) % 2 == 0 { a } else { b } as *const i8;
                    let h = i.start(ctx, &d);
                    i.stop(h);
                }
            });
        }
    });
    i.fin(ctxs[0]);
    let mut seen = 0;
    for e in i.begins() {
        let name = e["name"].as_str().unwrap();
        assert!(
            name == "AAAAAAAAAAAAAAA" || name == "bbbbbbbbbbbbbbb",
            "torn name {name:?}"
        );
        seen += 1;
    }
    assert!(seen > 0);
    drop(buf);
}

#[test]
fn a_string_changed_in_place_is_read_again() {
    let (i, ctxs) = Inst::new(
        "inplace",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "2")],
        &[(82, 0)],
    );
    let mut name = *b"Before\0\0\0\0\0\0\0\0\0\0";
    let start = |i: &Inst, p: *const u8| {
        let mut d = coll(0, 0, 0, 0);
        d.u.coll.func = p.cast();
        let h = i.start(ctxs[0], &d);
        i.stop(h);
    };
    start(&i, name.as_ptr());
    name[..6].copy_from_slice(b"After!");
    // Within one re-read period of this thread (docs/shim.md).
    for _ in 0..2100 {
        start(&i, std::hint::black_box(name.as_ptr()));
    }
    i.fin(ctxs[0]);
    let names: Vec<String> = i
        .begins()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.first().map(String::as_str), Some("Before"));
    assert_eq!(
        names.last().map(String::as_str),
        Some("After!"),
        "stale cache"
    );
}

// ---- 6. control calls before the first init -------------------------------

#[test]
fn control_calls_before_init_do_not_freeze_the_settings() {
    let (i, _) = Inst::new("preinit", None, &[("NCCL_PROFILE_EVENT_MASK", "4095")], &[]);
    let get = i.p.symbol(c"evring_get_mask").unwrap();
    // SAFETY: exported `extern "C" fn() -> c_int`.
    let get: extern "C" fn() -> i32 = unsafe { std::mem::transmute(get) };
    let set_output = i.p.symbol(c"evring_set_output").unwrap();
    // SAFETY: exported `extern "C" fn(c_int)`.
    let set_output: extern "C" fn(i32) = unsafe { std::mem::transmute(set_output) };
    // Before init, with the variables not set yet (a monitor thread polling).
    let _ = get();
    set_output(1);
    i.call_void(c"evring_flush");
    let s = i.stats();
    assert_eq!(s.inits, 0);
    let ctx = i.init(91, 0); // the environment of the first init applies
    assert_eq!(get(), 4095, "mask read at the first init");
    assert_eq!(i.mask.load(Ordering::Relaxed), 4095);
    allreduce_user_thread(&i, ctx, 0, 1);
    i.fin(ctx);
    let run = read_run(&i.dir);
    assert_eq!(run.files, 1, "trace under NCCL_PROFILE_DUMP_FILE");

    // A mask set before init is kept and applied by the first init.
    let (j, _) = Inst::new(
        "preinit-set",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "6")],
        &[],
    );
    j.set_mask(ty::COLL as i32);
    let ctx = j.init(92, 0);
    assert_eq!(j.mask.load(Ordering::Relaxed), ty::COLL as i32);
    j.fin(ctx);
}

// ---- 8 and issue 9: what the user is told ---------------------------------

fn messages_child(mode: &str) -> ! {
    match mode {
        "overflow" => {
            let (i, _) = Inst::new("overflow", None, &[("EVRING_MAX_COMMS", "4")], &[]);
            let ctxs: Vec<u64> = (0..300).map(|k| i.init(k, 0)).collect();
            for c in ctxs {
                i.raw_fin(c);
            }
            assert_eq!(i.stats().context_full, 296);
        }
        "settings" => {
            let (i, c) = Inst::new(
                "settings",
                None,
                &[("EVRING_CAPACITY", "lots"), ("EVRING_RING", "3")],
                &[(1, 0)],
            );
            i.fin(c[0]);
        }
        "no-thread" => {
            let (i, _) = Inst::new(
                "no-thread",
                None,
                &[
                    ("EVRING_CAPACITY", "64"),
                    ("EVRING_RING", "16"),
                    ("NCCL_PROFILE_EVENT_MASK", "6"),
                ],
                &[],
            );
            // Room for small allocations, none for a thread's stack.
            let vm = std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("VmSize:")
                        .map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap())
                })
                .unwrap();
            let lim = libc::rlimit {
                rlim_cur: (vm + 1024) * 1024,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: lowering our own soft limit.
            unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
            let c = i.init(1, 0);
            for s in 0..100 {
                allreduce_user_thread(&i, c, s, 1);
            }
            let s = i.stats();
            let inf = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: restoring our own limit.
            unsafe { libc::setrlimit(libc::RLIMIT_AS, &inf) };
            assert!(s.drop_ring_full > 0, "{s:?}");
        }
        _ => unreachable!(),
    }
    std::process::exit(0)
}

#[test]
fn messages_are_said_once_and_name_the_cause() {
    if let Some(m) = child_mode() {
        messages_child(&m);
    }
    let t = "messages_are_said_once_and_name_the_cause";
    let (code, _, err) = child_output(t, "overflow", &[]);
    assert_eq!(code, 0, "{err}");
    let warns = err
        .lines()
        .filter(|l| l.contains("context registry full"))
        .count();
    assert!(
        (1..=10).contains(&warns),
        "rate-limited: {warns} lines\n{err}"
    );

    let (code, _, err) = child_output(t, "settings", &[]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("evring WARN")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("EVRING_CAPACITY=\"lots\"") && l.contains("65536")),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("EVRING_RING=3") && l.contains("16")),
        "{err}"
    );

    let (code, _, err) = child_output(t, "no-thread", &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.matches("cannot start the writer thread").count(),
        1,
        "{err}"
    );
}

#[test]
fn missing_dump_directory_is_created() {
    let base = tempdir("mkdir");
    let prefix = base.join("not/yet/there/trace");
    let (i, c) = Inst::new(
        "mkdir-inst",
        None,
        &[("NCCL_PROFILE_DUMP_FILE", prefix.to_str().unwrap())],
        &[(5, 0)],
    );
    allreduce_user_thread(&i, c[0], 0, 1);
    i.fin(c[0]);
    assert!(base.join("not/yet/there/trace_5_0.json").exists());
    assert_eq!(i.stats().write_errors, 0);
    let _ = std::fs::remove_dir_all(&base);
}

// ---- 8. memory of one instance at the default settings ---------------------

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap()
}

/// What one instance (a fresh copy of the `.so`) costs at the default
/// settings, reported for docs/shim.md ("Memory"); the bound only catches a
/// gross regression. Runs in a child so other tests' memory does not count.
#[test]
fn default_settings_memory_per_instance() {
    if child_mode().as_deref() == Some("rss") {
        let before = rss_kib();
        let (i, c) = Inst::new("rss", None, &[("NCCL_PROFILE_DUMP_FILE", "")], &[(1, 0)]);
        let built = rss_kib();
        for s in 0..10_000 {
            allreduce_user_thread(&i, c[0], s, 1);
        }
        i.fin(c[0]);
        let used = rss_kib();
        println!("RSS_KIB {} {}", built - before, used - before);
        drop(i);
        std::process::exit(0);
    }
    let (code, out, err) = child_output("default_settings_memory_per_instance", "rss", &[]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find_map(|l| l.split("RSS_KIB ").nth(1))
        .unwrap();
    let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    eprintln!(
        "one instance at the default settings: +{:.1} MiB at init, +{:.1} MiB after 10 000 all-reduces",
        v[0] as f64 / 1024.0,
        v[1] as f64 / 1024.0
    );
    assert!(v[1] < 64 * 1024, "{v:?}");
}
