//! Load (issue #6): many events on several threads at once, dlopen/dlclose
//! cycles with events in flight, and communicators initialised and finalized
//! concurrently, over and over. Nothing may crash or leak, every start must be
//! accounted for, and resident memory must stay bounded once warmed up.
//!
//! The tests in this file run one at a time (they measure the process's RSS)
//! and write no trace files except the small, bounded ones of the dlclose and
//! 8-communicator tests, which are removed afterwards. Sizes are CI-sized by
//! default (about 5 s in all); the full 4 x 10 M run and the 2 M-communicator
//! churn are `#[ignore]`d (20-45 s each on 2 cores) and documented, with
//! their figures, in docs/reliability.md:
//!
//!     cargo test --release --test load -- --ignored --nocapture

mod common;
use common::*;
use evring_shim::abi::{state, ty};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests here read the whole process's RSS: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The JSON trace files in `dir`.
fn trace_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect()
}

/// Resident set size of this process, MiB (`/proc/self/statm`).
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    (pages * page) as f64 / (1024.0 * 1024.0)
}

/// Whether RSS bounds mean anything: not under AddressSanitizer (ci/asan.sh),
/// whose quarantine and shadow memory dominate the process's RSS. Its runtime
/// is found by name (ci/asan.sh links the tests with --export-dynamic).
fn rss_bounded() -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks up
    // a symbol; the pointer is not used.
    let asan = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__asan_init".as_ptr()) };
    asan.is_null()
}

/// A barrier that gives up (panics) after a deadline instead of hanging when
/// another thread failed before reaching it.
struct Gate(AtomicUsize);

impl Gate {
    fn new() -> Gate {
        Gate(AtomicUsize::new(0))
    }

    fn arrive(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    fn wait_for(&self, n: usize, limit: Duration) {
        let t0 = Instant::now();
        while self.0.load(Ordering::Acquire) < n {
            check_deadline(t0, limit, "waiting at a gate");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Removes a test directory when dropped (also when the test panics).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if std::env::var_os("EVRING_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Fails the test instead of running forever.
fn check_deadline(t0: Instant, limit: Duration, what: &str) {
    assert!(
        t0.elapsed() < limit,
        "{what}: still running after {limit:?}"
    );
}

/// A KernelCh child of `parent` on channel `ch`, with its GPU end recorded.
fn kernel(i: &Inst, ctx: u64, parent: u64, ch: u8, t: u64) {
    let k = i.start(ctx, &kernel_ch(parent, ch, t));
    i.rec(k, state::KERNEL_CH_STOP, Some(t + 1000));
    i.stop(k);
}

/// One NCCL-like operation of kind `kind % 5`, in a call order of the ABI
/// doc §3 (every Coll/P2p gets its `nChannels` KernelCh, so nothing waits for
/// the age sweep). `last` carries a completed Coll between calls (graph
/// replays hang off it). Returns the number of `startEvent` calls made.
fn nccl_op(i: &Inst, ctx: u64, seq: u64, kind: u64, last: &mut u64) -> u64 {
    match kind % 5 {
        // §3.3: all-reduce, kernel time on two channels.
        0 => {
            let c = allreduce_user_thread(i, ctx, seq, 2);
            kernel(i, ctx, c, 0, seq);
            kernel(i, ctx, c, 1, seq);
            *last = c;
            6
        }
        // §3.4: socket network op: ProxyOp, two steps, a NetPlugin per step.
        1 => {
            let c = allreduce_user_thread(i, ctx, seq, 1);
            let op = i.start(ctx, &proxy_op(c, pid(), 0, true));
            i.rec(op, state::PROXY_OP_IN_PROGRESS_V4, None);
            for s in 0..2 {
                let st = i.start(ctx, &proxy_step(op, s));
                i.rec(st, state::PROXY_STEP_SEND_GPU_WAIT, None);
                i.rec(st, state::PROXY_STEP_SEND_PEER_WAIT_V4, None);
                i.rec(st, state::PROXY_STEP_SEND_WAIT, Some(1 << 20));
                let np = i.start(ctx, &simple(ty::NET_PLUGIN, st));
                i.rec(np, state::NET_PLUGIN_UPDATE, None);
                i.stop(np);
                i.stop(st);
            }
            i.stop(op);
            kernel(i, ctx, c, 0, seq);
            10
        }
        // §3.5: grouped send/recv, one kernel launch.
        2 => {
            let ga = i.start(ctx, &group_api(1));
            let sa = i.start(ctx, &p2p_api(ga, true));
            i.stop(sa);
            let ra = i.start(ctx, &p2p_api(ga, false));
            i.stop(ra);
            i.rec(ga, state::GROUP_END_API_START, None);
            let kl = i.start(ctx, &simple(ty::KERNEL_LAUNCH, ga));
            let g = i.start(ctx, &simple(ty::GROUP, 0));
            let ps = i.start(ctx, &p2p(sa, g, true, 1, 1));
            i.stop(ps);
            let pr = i.start(ctx, &p2p(ra, g, false, 1, 1));
            i.stop(pr);
            i.stop(kl);
            i.stop(g);
            i.stop(ga);
            kernel(i, ctx, ps, 0, seq);
            kernel(i, ctx, pr, 1, seq);
            9
        }
        // §3.6: a graph replay: a Coll whose parent completed long ago.
        3 => {
            let g = i.start(ctx, &simple(ty::GROUP, 0));
            let c = i.start(ctx, &coll(*last, g, seq, 1));
            i.stop(c);
            i.stop(g);
            kernel(i, ctx, c, 0, seq);
            3
        }
        // §3.8: the proxy thread waking up, appending, going idle.
        _ => {
            let pc = i.start(ctx, &simple(ty::PROXY_CTRL, 0));
            i.rec(pc, state::PROXY_CTRL_WAKEUP, None);
            i.rec(pc, state::PROXY_CTRL_APPEND, None);
            i.rec(pc, state::PROXY_CTRL_APPEND_END, Some(2));
            i.rec(pc, state::PROXY_CTRL_ACTIVE, None);
            i.rec(pc, state::PROXY_CTRL_IDLE, None);
            i.stop(pc);
            1
        }
    }
}

/// Four threads, each with its own communicator on one plugin instance,
/// issue `per_thread` starts each, mixing all five operation kinds. The main
/// thread samples the number of live events meanwhile. With `strict_slab`, a
/// start dropped for a full slab fails the test (only a few dozen of the
/// 65 536 slots are ever live here).
fn threads_mixed(per_thread: u64, limit: Duration, strict_slab: bool) {
    let _s = serial();
    let (i, _) = Inst::new(
        "load4",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "4095"),
            // Counters only: 40 M events would be gigabytes of JSON.
            ("NCCL_PROFILE_DUMP_FILE", ""),
        ],
        &[],
    );
    // A quarter of the run: by then the ring has been full and the writer's
    // table of pending events laid out as far as this load takes it (both
    // are touched lazily: 6.5 + 12.5 MiB at the defaults), so what RSS does
    // after it is growth, not first touch. At a twentieth it grew 16.4 MiB
    // once in a CI run whose writer was starved (91 % of starts dropped).
    let warm = (per_thread / 4).max(10_000);
    let warmed_up = Gate::new();
    let finished = Gate::new();
    let t0 = Instant::now();
    let (rss_warm, live_peak, issued) = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let (i, warmed_up, finished) = (&i, &warmed_up, &finished);
                sc.spawn(move || {
                    let ctx = i.init(0x4000 + t, t as i32);
                    let (mut n, mut seq, mut last) = (0u64, 0u64, 0u64);
                    let mut warmed = false;
                    while n < per_thread {
                        // Each thread starts at a different kind and cycles.
                        n += nccl_op(i, ctx, seq, seq + t, &mut last);
                        seq += 1;
                        if !warmed && n >= warm {
                            warmed = true;
                            warmed_up.arrive();
                        }
                        if seq % 65_536 == 0 {
                            check_deadline(t0, limit, "4-thread load");
                        }
                    }
                    i.fin(ctx);
                    finished.arrive();
                    n
                })
            })
            .collect();
        warmed_up.wait_for(4, limit);
        let rss_warm = rss_mib();
        let mut live_peak = 0;
        while finished.0.load(Ordering::Acquire) < 4 && hs.iter().all(|h| !h.is_finished()) {
            check_deadline(t0, limit, "4-thread load (sampling)");
            live_peak = live_peak.max(i.stats().live);
            std::thread::sleep(Duration::from_millis(2));
        }
        let issued: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        (rss_warm, live_peak, issued)
    });
    let secs = t0.elapsed().as_secs_f64();
    let rss_end = rss_mib();
    let s = i.stats();
    eprintln!(
        "load: 4 threads x {per_thread} starts: {issued} starts in {secs:.1} s ({:.2} M starts/s); \
         RSS after warm-up {rss_warm:.1} MiB, at end {rss_end:.1} MiB; sampled peak of live events \
         {live_peak}; counters: {}",
        issued as f64 / secs / 1e6,
        nonzero(&s)
    );
    assert_balanced(&s);
    assert_eq!(s.start_calls, issued, "every start seen");
    assert_eq!(
        s.drop_unknown_type + s.drop_null_context + s.drop_after_finalize + s.drop_null_descr,
        0
    );
    assert_eq!(s.stale_handles + s.unknown_handles, 0);
    // A start dropped for a full slab or a full lane hands out NULL, which
    // its stop and records then pass back (counted as NULL handles).
    assert!(
        s.null_handles == 0 || s.drop_slab_full + s.drop_ring_full > 0,
        "{s:?}"
    );
    assert_eq!(s.inits, 4);
    assert_eq!(s.finalizes, 4);
    assert!(
        !rss_bounded() || rss_end - rss_warm < 16.0,
        "RSS grew {rss_warm:.1} -> {rss_end:.1} MiB"
    );
    if strict_slab {
        // The known issue of crates/sim/tests/scenarios.rs
        // (`slab_never_full_far_below_capacity`): with more busy threads than
        // cores, the slab reports Full while almost nothing is live.
        assert_eq!(
            s.drop_slab_full, 0,
            "slab full with a sampled peak of {live_peak} of 65536 slots live"
        );
    }
}

fn nonzero(s: &evring_shim::StatsV1) -> String {
    s.fields()
        .into_iter()
        .filter(|&(_, v)| v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// CI size: 4 x 250 k starts (1 M in all).
#[test]
fn four_threads_mixed_1m() {
    // Not strict about slab-full drops: they are load-dependent (see below).
    threads_mixed(250_000, Duration::from_secs(300), false);
}

/// The issue's figure: 4 x 10 M starts. 20-45 s of both cores of the 2-core
/// CI machine, so not part of the default run. At the time of writing it
/// fails intermittently (1 run in 5) on slab-full drops, a known issue
/// (docs/reliability.md, "Findings").
#[test]
#[ignore = "4 x 10 M events, 20-45 s on 2 cores: run with --ignored"]
fn four_threads_mixed_10m_each() {
    threads_mixed(10_000_000, Duration::from_secs(1200), true);
}

/// 100 dlopen/dlclose cycles of one plugin file with events in flight at each
/// close. The library is linked `-z nodelete`, so every dlopen finds the same
/// instance: its counters continue, handles started through an earlier
/// `dlopen` are stopped through the next one, and finalizing everything at the
/// end leaves nothing live. A second thread opens, uses and closes its own
/// handle of the same file during each cycle, racing the main thread's
/// dlopen/dlclose.
#[test]
fn dlclose_cycles_with_events_in_flight() {
    let _s = serial();
    const CYCLES: u64 = 100;
    let (mut first, _) = Inst::new("dlcycle", None, &[("NCCL_PROFILE_EVENT_MASK", "4095")], &[]);
    first.keep = true;
    let dir = first.dir.clone();
    // Every `Inst` below keeps the directory; this removes it, even on panic.
    let _cleanup = RemoveOnDrop(dir.clone());
    let path = dir.join("libnccl-profiler-evring.so");
    let mask: &'static AtomicI32 = first.mask;
    // The first init reads the settings: one communicator, at once finalized.
    let c0 = first.init(0xff, 0);
    first.fin(c0);
    let base = first.stats();
    drop(first); // dlclose before any communicator exists
    let open = || Inst::reopen(&path, mask, true);
    // (context, handles in flight) of the previous cycle.
    let mut prev: Option<(u64, Vec<u64>)> = None;
    let mut expected_colls = 0u64;
    let mut rss = Vec::new();
    let t0 = Instant::now();
    for cycle in 0..CYCLES {
        check_deadline(t0, Duration::from_secs(120), "dlclose cycles");
        let i = open();
        let ctx = i.init(0x100 + cycle, 0);
        // Stop what the previous cycle left open, through the new handle,
        // then finalize its communicator; every 10th cycle finalizes with
        // the events still open (forced_finalize) and stops them afterwards
        // (stale handles, counted).
        if let Some((pctx, open_hs)) = prev.take() {
            if cycle % 10 == 0 {
                i.fin(pctx);
                for h in open_hs {
                    i.stop(h);
                }
            } else {
                for h in open_hs.into_iter().rev() {
                    i.stop(h);
                }
                i.fin(pctx);
            }
        }
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let j = open();
                let c = allreduce_user_thread(&j, ctx, 1_000_000 + cycle, 1);
                kernel(&j, ctx, c, 0, cycle);
                drop(j); // dlclose while the main thread is inside the plugin
            });
            let mut last = 0;
            for k in 0..20 {
                nccl_op(&i, ctx, cycle * 100 + k, k, &mut last);
            }
        });
        expected_colls += 1 + 4 * 2 + 4; // helper thread + kinds 0, 1 (4 each) and 3
                                         // In flight at the close: an API call, its Coll waiting for a KernelCh,
                                         // a ProxyOp with an open step, and a ProxyCtrl.
        let ga = i.start(ctx, &group_api(1));
        let ca = i.start(ctx, &coll_api(ga));
        let g = i.start(ctx, &simple(ty::GROUP, 0));
        let c = i.start(ctx, &coll(ca, g, cycle, 1));
        i.stop(c);
        let op = i.start(ctx, &proxy_op(c, pid(), 0, false));
        let st = i.start(ctx, &proxy_step(op, 0));
        i.rec(st, state::PROXY_STEP_RECV_WAIT, None);
        let pc = i.start(ctx, &simple(ty::PROXY_CTRL, 0));
        expected_colls += 1;
        let s = i.stats();
        assert_eq!(
            s.inits,
            base.inits + cycle + 1,
            "same instance after dlclose"
        );
        assert!(s.live >= 7, "events in flight at the close: {s:?}");
        assert_eq!(s.panics, 0);
        drop(i); // dlclose with all of the above open
        prev = Some((ctx, vec![ga, ca, g, op, st, pc]));
        if cycle == 10 || cycle == CYCLES - 1 {
            rss.push(rss_mib());
        }
    }
    let i = open();
    let (pctx, open_hs) = prev.take().unwrap();
    for h in open_hs.into_iter().rev() {
        i.stop(h);
    }
    i.fin(pctx);
    let s = i.stats();
    eprintln!(
        "dlclose: {CYCLES} cycles in {:.1} s, RSS after cycle 10 {:.1} MiB, after {CYCLES} {:.1} MiB; counters: {}",
        t0.elapsed().as_secs_f64(),
        rss[0],
        rss[1],
        nonzero(&s)
    );
    assert_balanced(&s);
    assert_eq!(s.inits, base.inits + CYCLES);
    assert_eq!(s.finalizes, base.finalizes + CYCLES);
    assert!(s.forced_finalize > 0 && s.stale_handles > 0, "{s:?}");
    let colls = count_cat(&i.begins(), "Coll") as u64;
    assert_eq!(
        colls + s.drop_ring_full,
        expected_colls,
        "every Coll written or counted as a ring drop: {s:?}"
    );
    assert!(!rss_bounded() || rss[1] - rss[0] < 8.0, "RSS grew: {rss:?}");
}

/// Fresh copies of the library (`Plugin::open_isolated`-style: each `Inst`
/// copies the `.so`): each copy is its own instance with its own counters.
/// Each is closed with one communicator finalized and another still open with
/// events in flight. A copy can never be unloaded (`-z nodelete`): it keeps its
/// mapping (~6 MB of address space, mostly not resident), its slab and its
/// writer thread until the process exits, so this is bounded at 20 copies
/// with a small slab, and RSS per copy is checked.
#[test]
fn fresh_copies_closed_with_events_in_flight() {
    let _s = serial();
    const COPIES: usize = 20;
    let rss0 = rss_mib();
    let t0 = Instant::now();
    for n in 0..COPIES {
        check_deadline(t0, Duration::from_secs(120), "fresh copies");
        let (i, ctxs) = Inst::new(
            "copy",
            None,
            &[
                ("NCCL_PROFILE_EVENT_MASK", "4095"),
                // The exit handler of a never-finalized copy would write into
                // a removed directory: write nothing at all.
                ("NCCL_PROFILE_DUMP_FILE", ""),
                ("EVRING_CAPACITY", "1024"),
                ("EVRING_RING", "1024"),
            ],
            &[(1, 0), (2, 1)],
        );
        let mut last = 0;
        for k in 0..200 {
            nccl_op(&i, ctxs[k as usize % 2], k, k, &mut last);
        }
        // The writer completes events (and frees their slots) as it reads
        // the log: let it catch up with the burst before the events that
        // must stay in flight.
        i.settle();
        let ga = i.start(ctxs[0], &group_api(1));
        let _ca = i.start(ctxs[0], &coll_api(ga));
        let gb = i.start(ctxs[1], &group_api(1));
        let _cb = i.start(ctxs[1], &coll_api(gb));
        i.fin(ctxs[0]);
        let s = i.stats();
        assert_eq!(s.inits, 2, "a fresh instance per copy (copy {n})");
        assert_eq!(s.finalizes, 1);
        assert!(s.live >= 2, "comm 2's events in flight: {s:?}");
        assert_eq!(s.panics, 0);
        // A burst faster than the writer frees slots finds the small slab
        // full: counted drops.
        assert_eq!(
            s.start_calls,
            s.started + s.drop_unknown_type + s.drop_slab_full
        );
        drop(i); // dlclose (and the file removed) with comm 2 never finalized
    }
    let rss1 = rss_mib();
    let per_copy = (rss1 - rss0) / COPIES as f64;
    eprintln!(
        "fresh copies: {COPIES} in {:.1} s, RSS {rss0:.1} -> {rss1:.1} MiB ({per_copy:.2} MiB per copy)",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        !rss_bounded() || per_copy < 8.0,
        "RSS per copy {per_copy:.2} MiB"
    );
}

/// 8 communicators on 8 threads, initialised at once, with traffic of
/// different lengths, each finalized by its own thread as soon as its traffic
/// is done (so finalizes overlap each other and other communicators'
/// traffic); 20 rounds on one instance. After every round the
/// counters balance exactly; traces are checked and removed each round.
#[test]
fn eight_comms_init_finalize_concurrently_20_rounds() {
    let _s = serial();
    const ROUNDS: u64 = 20;
    let (i, _) = Inst::new(
        "8x20",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "4095"),
            ("EVRING_RING", "65536"),
        ],
        &[],
    );
    let t0 = Instant::now();
    let mut rss = Vec::new();
    let mut issued = 0u64;
    for round in 0..ROUNDS {
        check_deadline(t0, Duration::from_secs(180), "8 comms x 20 rounds");
        let ready = Gate::new();
        let per_comm: Vec<(u64, u64)> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8u64)
                .map(|r| {
                    let (i, ready) = (&i, &ready);
                    sc.spawn(move || {
                        // All eight initialise at once.
                        ready.arrive();
                        ready.wait_for(8, Duration::from_secs(60));
                        let ctx = i.init((round << 8) | r, r as i32);
                        assert_ne!(ctx, 0);
                        let (mut n, mut colls, mut last) = (0, 0, 0);
                        for k in 0..(50 + 25 * r) {
                            let kind = k + r;
                            n += nccl_op(i, ctx, k, kind, &mut last);
                            colls += matches!(kind % 5, 0 | 1 | 3) as u64;
                        }
                        i.fin(ctx);
                        (n, colls)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        issued += per_comm.iter().map(|x| x.0).sum::<u64>();
        let s = i.stats();
        assert_balanced(&s);
        assert_eq!(s.inits, 8 * (round + 1));
        assert_eq!(s.finalizes, 8 * (round + 1));
        assert_eq!(s.start_calls, issued);
        assert_eq!(s.drop_ring_full + s.records_unwritten + s.write_errors, 0);
        // One trace per communicator with all its Colls; then remove them so
        // the directory stays small. The RSS is read first: parsing the
        // traces into JSON trees is this test's own memory (it raised the
        // RSS floor by up to 6 MiB over 20 rounds through fragmentation,
        // while the plugin's own stayed within 0.5 MiB), so only rounds 1-3
        // parse them; the others count Coll lines in the text.
        i.settle();
        rss.push(rss_mib());
        let expected: u64 = per_comm.iter().map(|x| x.1).sum();
        let colls: u64 = if round < 3 {
            let traces = i.traces();
            assert_eq!(traces.len(), 8, "round {round}");
            traces
                .iter()
                .map(|(_, evs)| {
                    evs.iter()
                        .filter(|e| e["ph"] == "X" && e["cat"] == "Coll")
                        .count() as u64
                })
                .sum()
        } else {
            let files = trace_files(&i.dir);
            assert_eq!(files.len(), 8, "round {round}");
            files
                .iter()
                .map(|p| {
                    let text = std::fs::read_to_string(p).unwrap();
                    text.lines()
                        .filter(|l| l.contains(r#""ph":"X""#) && l.contains(r#""cat":"Coll""#))
                        .count() as u64
                })
                .sum()
        };
        assert_eq!(colls, expected, "round {round}");
        for p in trace_files(&i.dir) {
            std::fs::remove_file(p).unwrap();
        }
    }
    let s = i.stats();
    // A leak raises the floor of the RSS; transient buffers (the writer's
    // batches) come and go between rounds. Compare the lowest of rounds 3-5
    // with the lowest of the last three.
    let floor = |r: &[f64]| r.iter().copied().fold(f64::INFINITY, f64::min);
    let (early, late) = (floor(&rss[2..5]), floor(&rss[rss.len() - 3..]));
    eprintln!(
        "8 comms x {ROUNDS} rounds: {issued} starts in {:.1} s, RSS floor rounds 3-5 {early:.1} MiB, last 3 rounds {late:.1} MiB; counters: {}",
        t0.elapsed().as_secs_f64(),
        nonzero(&s)
    );
    assert!(!rss_bounded() || late - early < 8.0, "RSS grew: {rss:?}");
}

/// Communicator churn: `n` communicators created and destroyed one after the
/// other (as a job that splits and frees communicators in a loop does), each
/// with a little traffic. Returns the RSS growth in MiB between 10 % and the
/// end, the growth over each of two equal windows (20 % to 60 %, 60 % to the
/// end), and the counters.
fn comm_churn(n: u64) -> (f64, [f64; 2], evring_shim::StatsV1) {
    let (i, _) = Inst::new(
        "churn",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "70"),
            ("NCCL_PROFILE_DUMP_FILE", ""),
            // finalize scans every slot of the slab (twice when it is the
            // last communicator): ~0.5 ms at the default 65 536 slots.
            ("EVRING_CAPACITY", "256"),
        ],
        &[],
    );
    let t0 = Instant::now();
    let mut rss_warm = 0.0;
    let mut marks = [0.0; 2];
    for k in 0..n {
        if k % 4096 == 0 {
            check_deadline(t0, Duration::from_secs(300), "communicator churn");
        }
        if k == n / 10 {
            rss_warm = rss_mib();
        }
        if k == n / 5 {
            marks[0] = rss_mib();
        }
        if k == n * 3 / 5 {
            marks[1] = rss_mib();
        }
        let ctx = i.init(k, 0);
        let c = allreduce_user_thread(&i, ctx, k, 1);
        kernel(&i, ctx, c, 0, k);
        i.raw_fin(ctx);
    }
    i.settle();
    let end = rss_mib();
    let grew = end - rss_warm;
    let windows = [marks[1] - marks[0], end - marks[1]];
    let s = i.stats();
    eprintln!(
        "churn: {n} communicators in {:.1} s, RSS growth after warm-up {grew:.1} MiB \
         (windows 20-60 % / 60-100 %: {:.1} / {:.1} MiB); counters: {}",
        t0.elapsed().as_secs_f64(),
        windows[0],
        windows[1],
        nonzero(&s)
    );
    assert_balanced(&s);
    assert_eq!(s.inits, n);
    (grew, windows, s)
}

/// CI size: 20 000 communicators one after the other. A leak per
/// communicator grows both windows (8 000 communicators each); the process's
/// one-time growth (another instance's writer thread, left by an earlier test
/// of this binary, growing its heap; a malloc arena's first use) lands in one
/// of them, which is why the smaller of the two is bounded: 2 MiB, about 260
/// bytes per communicator.
#[test]
fn communicator_churn_20k() {
    let _s = serial();
    let (_, windows, _) = comm_churn(20_000);
    let least = windows[0].min(windows[1]);
    assert!(
        !rss_bounded() || least < 2.0,
        "RSS grew {:.1} / {:.1} MiB over two windows of 8 000 communicators each",
        windows[0],
        windows[1]
    );
}

/// 2 M communicators one after the other: memory must not grow with the
/// number of communicators ever created (it did: the writer kept one entry
/// per finalized communicator; docs/reliability.md, "Findings" 1, fixed).
#[test]
#[ignore = "2 M communicators, about 20 s: run with --ignored"]
fn communicator_churn_2m() {
    let _s = serial();
    let (grew, _, _) = comm_churn(2_000_000);
    assert!(
        !rss_bounded() || grew < 8.0,
        "RSS grew {grew:.1} MiB over 1.8 M communicators"
    );
}
