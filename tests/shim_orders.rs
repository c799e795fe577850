//! The release plugin driven through its C tables with NCCL's real call
//! orders (ABI doc §3.3-3.7), versions v6, v5, v4 and v1.

mod common;
use common::*;
use evring_shim::abi::{state, ty, DescrV6};
use std::collections::HashMap;

fn by_id(evs: &[serde_json::Value]) -> HashMap<String, serde_json::Value> {
    evs.iter()
        .map(|e| (e["args"]["id"].as_str().unwrap().to_string(), e.clone()))
        .collect()
}

/// §3.3 with KernelCh: every KernelCh starts after its Coll stopped, on
/// another thread; the Coll waits for them and ends at the GPU end.
#[test]
fn allreduce_p2p_transport_with_kernel_channels_v6() {
    let (i, ctxs) = Inst::new(
        "ar-v6",
        // The simulator's newest table is v7 now; this one is about v6.
        Some(6),
        &[("NCCL_PROFILE_EVENT_MASK", "70")],
        &[(0xc0ffee, 0)],
    );
    assert_eq!(i.p.version(), 6);
    let ctx = ctxs[0];
    let n = 200u64;
    let nch = 4u8;
    let colls: Vec<u64> = (0..n)
        .map(|s| allreduce_user_thread(&i, ctx, s, nch))
        .collect();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for (k, &c) in colls.iter().enumerate() {
                let t0 = 1_000_000 + k as u64 * 1000;
                let kch: Vec<u64> = (0..nch)
                    .map(|ch| i.start(ctx, &kernel_ch(c, ch, t0 + ch as u64)))
                    .collect();
                for (ch, h) in kch.into_iter().enumerate() {
                    i.rec(h, state::KERNEL_CH_STOP, Some(t0 + 500 + ch as u64));
                    i.stop(h);
                }
            }
        });
    });
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(s.late_children, 0, "{s:?}");
    assert_eq!(s.children_incomplete, 0);
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "Coll"), n as usize);
    assert_eq!(count_cat(&evs, "CollApi"), n as usize);
    assert_eq!(count_cat(&evs, "GroupApi"), n as usize);
    assert_eq!(count_cat(&evs, "KernelCh"), (n * nch as u64) as usize);
    let ids = by_id(&evs);
    for e in &evs {
        let parent = e["args"]["parent"].as_str().unwrap();
        match e["cat"].as_str().unwrap() {
            "KernelCh" => assert_eq!(ids[parent]["cat"], "Coll"),
            "Coll" => assert_eq!(ids[parent]["cat"], "CollApi"),
            "CollApi" => assert_eq!(ids[parent]["cat"], "GroupApi"),
            _ => {}
        }
    }
    for e in evs.iter().filter(|e| e["cat"] == "Coll") {
        assert_eq!(e["args"]["timing"], "gpu", "{e}");
        assert_eq!(e["args"]["channels"], nch);
        assert_eq!(e["args"]["algo"], "RING");
        assert_eq!(e["name"], "AllReduce");
    }
    // The footer closes the array and carries the counters.
    let (_, file) = &i.traces()[0];
    let footer = file.last().unwrap();
    assert_eq!(footer["name"], "evring.summary");
    assert_eq!(footer["args"]["finalized"], true);
    assert_eq!(footer["args"]["complete"], true);
}

/// Same orders through the v5 table (NCCL 2.28 picks v5).
#[test]
fn allreduce_v5_and_group_p2p() {
    let (i, ctxs) = Inst::new(
        "v5",
        Some(5),
        &[("NCCL_PROFILE_EVENT_MASK", "6")],
        &[(7, 1)],
    );
    assert_eq!(i.p.version(), 5);
    let ctx = ctxs[0];
    for s in 0..100 {
        allreduce_user_thread(&i, ctx, s, 2);
    }
    // §3.5 grouped send/recv, GroupApi closed early (batch_isend_irecv).
    for _ in 0..50 {
        let ga = i.start(ctx, &group_api(3));
        i.rec(ga, state::GROUP_START_API_STOP, None);
        let sa = i.start(ctx, &p2p_api(ga, true));
        i.stop(sa);
        let ra = i.start(ctx, &p2p_api(ga, false));
        i.stop(ra);
        i.rec(ga, state::GROUP_END_API_START, None);
        i.stop(ga);
        let kl = i.start(ctx, &simple(ty::KERNEL_LAUNCH, ga));
        i.stop(kl);
        let g = i.start(ctx, &simple(ty::GROUP, 0));
        let s = i.start(ctx, &p2p(sa, g, true, 0, 2));
        let r = i.start(ctx, &p2p(ra, g, false, 0, 2));
        i.stop(s);
        i.stop(r);
        i.stop(g);
    }
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    // KernelLaunch starts after the early GroupApi stop, but the GroupApi is
    // still live (its P2pApi children wait for their P2p), so it links.
    assert_eq!(s.late_children, 0, "{s:?}");
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "Coll"), 100);
    assert_eq!(count_cat(&evs, "P2p"), 100);
    let ids = by_id(&evs);
    for e in evs.iter().filter(|e| e["cat"] == "P2p") {
        assert_eq!(ids[e["args"]["parent"].as_str().unwrap()]["cat"], "P2pApi");
    }
    for e in evs.iter().filter(|e| e["cat"] == "KernelLaunch") {
        assert_eq!(
            ids[e["args"]["parent"].as_str().unwrap()]["cat"],
            "GroupApi"
        );
    }
    assert_eq!(count_cat(&evs, "KernelLaunch"), 50);
}

/// v4 (NCCL 2.27): no API events; Coll's parent is the Group. ProxyOp and
/// ProxyStep on the proxy thread after the Coll stopped (§3.4, socket).
#[test]
fn net_socket_v4() {
    let (i, ctxs) = Inst::new(
        "v4",
        Some(4),
        &[("NCCL_PROFILE_EVENT_MASK", "0x1e")],
        &[(9, 0)],
    );
    assert_eq!(i.p.version(), 4);
    let ctx = ctxs[0];
    let mut colls = Vec::new();
    for s in 0..100 {
        let g = i.start(ctx, &simple(ty::GROUP, 0));
        let c = i.start(ctx, &coll(0, g, s, 2));
        assert_ne!(c, 0);
        i.stop(c);
        i.stop(g);
        colls.push(c);
    }
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for &c in &colls {
                for send in [true, false] {
                    let op = i.start(ctx, &proxy_op(c, pid(), 0, send));
                    i.rec(op, state::PROXY_OP_IN_PROGRESS_V4, None);
                    for k in 0..4 {
                        let st = i.start(ctx, &proxy_step(op, k));
                        let seq: &[(i32, Option<u64>)] = if send {
                            &[(8, None), (20, None), (20, None), (9, Some(1 << 20))]
                        } else {
                            &[(10, None), (11, Some(1 << 20)), (12, None)]
                        };
                        for &(sv, a) in seq {
                            i.rec(st, sv, a);
                        }
                        i.stop(st);
                    }
                    i.stop(op);
                }
            }
        });
    });
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "Coll"), 100);
    assert_eq!(count_cat(&evs, "ProxyOp"), 200);
    assert_eq!(count_cat(&evs, "ProxyStep"), 800);
    let ids = by_id(&evs);
    for e in evs.iter().filter(|e| e["cat"] == "Coll") {
        assert_eq!(ids[e["args"]["parent"].as_str().unwrap()]["cat"], "Group");
    }
    for e in evs.iter().filter(|e| e["cat"] == "ProxyStep") {
        // States by NCCL's names: 8, 20, 9 (send) or 10, 11, 12 (recv).
        let states: Vec<&str> = e["args"]["states"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap())
            .collect();
        assert!(
            states == ["SendGPUWait", "SendPeerWait", "SendWait"]
                || states == ["RecvWait", "RecvFlushWait", "RecvGPUWait"],
            "{states:?}"
        );
        assert_eq!(e["args"]["state_arg"], 1 << 20);
    }
}

/// v1 (NCCL 2.23): numeric codes, 16-byte state args.
#[test]
fn v1_table() {
    let (i, ctxs) = Inst::new(
        "v1",
        Some(1),
        &[("NCCL_PROFILE_EVENT_MASK", "0x3f")],
        &[(0, 0)],
    );
    assert_eq!(i.p.version(), 1);
    let ctx = ctxs[0];
    for s in 0..20 {
        let g = i.start(ctx, &simple(ty::GROUP, 0));
        let c = i.start(ctx, &coll(0, g, s, 1));
        i.stop(c);
        i.stop(g);
    }
    let pc = i.start(ctx, &simple(ty::PROXY_CTRL, 0));
    i.rec(pc, state::PROXY_CTRL_APPEND_END, Some(3));
    i.stop(pc);
    i.fin(ctx);
    assert_balanced(&i.stats());
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "Coll"), 20);
    let c = evs.iter().find(|e| e["cat"] == "Coll").unwrap();
    assert_eq!(c["name"], "AllReduce");
    let pc = evs.iter().find(|e| e["cat"] == "ProxyCtrl").unwrap();
    assert_eq!(pc["args"]["state_arg"], 3);
}

/// The headline failure of the example plugin: SHM/P2P-only traffic with
/// mask Coll|P2p. Every one of 1005 all-reduces must be recorded.
#[test]
fn shm_mask6_records_every_allreduce() {
    let (i, ctxs) = Inst::new(
        "shm",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "6")],
        &[(1, 0), (2, 1)],
    );
    for s in 0..1005 {
        for &ctx in &ctxs {
            allreduce_user_thread(&i, ctx, s, 8);
        }
    }
    for &ctx in &ctxs {
        i.fin(ctx);
    }
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(
        s.forced_age + s.forced_pressure + s.forced_finalize,
        0,
        "{s:?}"
    );
    let traces = i.traces();
    assert_eq!(traces.len(), 2);
    for (_, evs) in &traces {
        let b: Vec<_> = evs.iter().filter(|e| e["ph"] == "X").cloned().collect();
        assert_eq!(count_cat(&b, "Coll"), 1005);
    }
}

/// CUDA graph replays (§3.6): Coll starts on a callback thread with the
/// capture-time CollApi as parent, long after it completed.
#[test]
fn graph_replays_are_late_children_linked_by_id() {
    let (i, ctxs) = Inst::new(
        "graph",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "70")],
        &[(3, 0)],
    );
    let ctx = ctxs[0];
    let ga = i.start(ctx, &group_api(1));
    let ca = i.start(ctx, &coll_api(ga));
    i.stop(ca);
    i.stop(ga);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for r in 0..50 {
                let g = i.start(ctx, &simple(ty::GROUP, 0));
                let c = i.start(ctx, &coll(ca, g, r, 1));
                i.stop(c);
                i.stop(g);
                let k = i.start(ctx, &kernel_ch(c, 0, 100 + r));
                i.rec(k, state::KERNEL_CH_STOP, Some(200 + r));
                i.stop(k);
            }
        });
    });
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    let evs = i.begins();
    let colls: Vec<_> = evs.iter().filter(|e| e["cat"] == "Coll").collect();
    assert_eq!(colls.len(), 50);
    let ca_id = format!("{ca:#x}");
    assert!(colls.iter().all(|c| c["args"]["parent"] == ca_id.as_str()));
    // The first replay satisfies the CollApi's one expected child; later ones are late.
    assert_eq!(s.late_children, 49, "{s:?}");
}

/// all_to_all's send and recv to the rank itself: NCCL 2.28.9 gives that P2p
/// one channel but never a KernelCh or ProxyOp child (two-rank recordings in
/// tests/fixtures/nccl-2.28.9-2rank-net). It must complete at its stop, not
/// wait for children that never come (and vanish if the job is killed).
#[test]
fn self_peer_p2p_completes_at_stop() {
    let rank = 1;
    let (i, ctxs) = Inst::new(
        "self-p2p",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "70")],
        &[(0xa2a, rank)],
    );
    let ctx = ctxs[0];
    let ga = i.start(ctx, &group_api(1));
    let sa = i.start(ctx, &p2p_api(ga, true));
    i.stop(sa);
    i.stop(ga);
    let g = i.start(ctx, &simple(ty::GROUP, 0));
    // The descriptor's rank is the rank the event belongs to.
    let on_rank = |mut x: DescrV6| {
        x.rank = rank;
        x
    };
    let own = i.start(ctx, &on_rank(p2p(sa, g, true, rank, 1)));
    let other = i.start(ctx, &on_rank(p2p(sa, g, true, 0, 1)));
    i.stop(own);
    i.stop(other);
    i.stop(g);
    // Before finalize: the self-peer P2p is complete, the other one still
    // waits for its KernelCh (and so holds its P2pApi and GroupApi).
    let s = i.settled();
    assert_eq!(s.live, 3, "only the peer P2p and its ancestors wait: {s:?}");
    let k = i.start(ctx, &kernel_ch(other, 0, 1_000));
    i.rec(k, state::KERNEL_CH_STOP, Some(2_000));
    i.stop(k);
    let s = i.settled();
    assert_eq!(s.live, 0, "{s:?}");
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(s.children_incomplete, 0, "{s:?}");
    assert_eq!(count_cat(&i.begins(), "P2p"), 2);
}

/// A parent that completes at its own stop on one thread after its child
/// completed on another: the two records reach the writer through different
/// lanes of the record ring, in either order. The writer still writes every
/// child before its parent, so every arrow is drawn (none unmatched).
#[test]
fn arrows_drawn_when_parent_and_child_complete_on_different_threads() {
    let (i, ctxs) = Inst::new(
        "arrows",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "4095")],
        &[(0xa770, 0)],
    );
    let ctx = ctxs[0];
    let n = 4000u64;
    let (to_b, from_a) = std::sync::mpsc::channel::<u64>();
    let (to_a, from_b) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|sc| {
        let i = &i;
        sc.spawn(move || {
            // Thread B: one ProxyStep per parent, started and stopped here.
            for (k, p) in from_a.iter().enumerate() {
                let h = i.start(ctx, &proxy_step(p, k as i32));
                i.stop(h);
                to_a.send(()).unwrap();
            }
        });
        for _ in 0..n {
            let p = i.start(ctx, &proxy_op(0, pid(), 0, true));
            to_b.send(p).unwrap();
            from_b.recv().unwrap();
            // Thread A: the parent completes here, right after its child.
            i.stop(p);
        }
        drop(to_b);
    });
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    let evs: Vec<serde_json::Value> = i.traces().into_iter().flat_map(|(_, e)| e).collect();
    assert_eq!(count_cat(&evs, "ProxyOp"), n as usize);
    assert_eq!(count_cat(&evs, "ProxyStep"), n as usize);
    let footer = evs
        .iter()
        .find(|e| e["name"] == "evring.summary")
        .expect("footer");
    assert_eq!(footer["args"]["json_flows_unmatched"], 0, "{footer}");
    let starts = evs.iter().filter(|e| e["ph"] == "s").count();
    assert_eq!(starts, n as usize, "one arrow per child");
}

/// `EVRING_MASK_STRICT=1`: starts outside the mask are answered NULL before
/// anything is converted and counted (`masked_starts`); NCCL then sends no
/// stop for them, and the Coll is recorded without those ancestors.
#[test]
fn strict_mask_answers_null_outside_the_mask() {
    let (i, ctxs) = Inst::new(
        "strict",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "70"),
            ("EVRING_MASK_STRICT", "1"),
        ],
        &[(0x5717, 0)],
    );
    let ctx = ctxs[0];
    let ga = i.start(ctx, &group_api(1));
    let ca = i.start(ctx, &coll_api(ga));
    let g = i.start(ctx, &simple(ty::GROUP, 0));
    assert_eq!(
        (ga, ca, g),
        (0, 0, 0),
        "GroupApi, CollApi, Group are not in mask 70"
    );
    let c = i.start(ctx, &coll(ca, g, 0, 1));
    assert_ne!(c, 0, "Coll is in the mask");
    i.stop(c);
    let k = i.start(ctx, &kernel_ch(c, 0, 100));
    i.rec(k, state::KERNEL_CH_STOP, Some(200));
    i.stop(k);
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(s.masked_starts, 3, "{s:?}");
    assert_eq!(s.start_calls, 5, "{s:?}");
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "Coll"), 1);
    assert_eq!(count_cat(&evs, "KernelCh"), 1);
    assert_eq!(count_cat(&evs, "CollApi") + count_cat(&evs, "GroupApi"), 0);
}

/// An event's start and stop times are host times read during those calls
/// (inside the lane's reservation: `hot.rs`), not later: the time between
/// them lies between the shortest and the longest the test's own clock reads
/// around the two calls allow (a start read late, at the stop, would make it
/// shorter than the 50 µs between the calls; a stop read late, by the writer,
/// longer than the window). Differences only, since the plugin's TSC clock is
/// calibrated against CLOCK_MONOTONIC and may drift from it by parts per
/// million over a run; the absolute times are checked to within 10 ms.
#[test]
fn start_and_stop_times_are_read_during_their_calls() {
    fn mono_ns() -> u64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    }
    let (i, ctxs) = Inst::new(
        "times",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "4095")],
        &[(0x7105, 0)],
    );
    let ctx = ctxs[0];
    let mut windows = HashMap::new();
    for _ in 0..100 {
        let t0 = mono_ns();
        let h = i.start(ctx, &group_api(0));
        let t1 = mono_ns();
        std::thread::sleep(std::time::Duration::from_micros(50));
        let t2 = mono_ns();
        i.stop(h);
        let t3 = mono_ns();
        assert_ne!(h, 0);
        windows.insert(format!("{h:#x}"), (t0, t1, t2, t3));
    }
    i.fin(ctx);
    assert_balanced(&i.stats());
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "GroupApi"), 100);
    // One microsecond of slack: the two clocks round differently.
    const SLACK: u64 = 1_000;
    for e in evs.iter().filter(|e| e["cat"] == "GroupApi") {
        let (t0, t1, t2, t3) = windows[e["args"]["id"].as_str().unwrap()];
        let start = e["args"]["start_ns"].as_u64().unwrap();
        let stop = e["args"]["stop_ns"].as_u64().unwrap();
        let d = stop - start;
        assert!(
            (t2 - t1).saturating_sub(SLACK) <= d && d <= t3 - t0 + SLACK,
            "stop - start = {d} ns, outside [{}, {}]: {e}",
            t2 - t1,
            t3 - t0
        );
        assert!(
            start.abs_diff(t0) < 10_000_000,
            "start {start} far from {t0}: {e}"
        );
    }
}

/// The process-wide tables NCCL's threads write on first use (per-thread
/// blocks, thread-pointer table, string cache, symbol table) are mapped at
/// the first init, not by the first thread to write each page: a thread's
/// calls after its first take no page fault, however many new strings they
/// bring. (Without `evring::populate` at init, each new string's cache and
/// symbol-table pages cost this thread a fault: 10-20 here.)
#[cfg(target_os = "linux")]
#[test]
fn calls_after_a_threads_first_take_no_page_fault() {
    fn minor_faults() -> i64 {
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_THREAD with a valid out-pointer.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
        u.ru_minflt
    }
    // Whether the plugin's `evring::populate` works on this kernel
    // (MADV_POPULATE_WRITE, Linux 5.14): without it the tables stay lazy.
    static PROBE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let probe = evring::populate(&PROBE);
    if !probe {
        eprintln!("kernel without MADV_POPULATE_WRITE: the tables stay lazy, nothing to check");
        return;
    }
    let (i, ctxs) = Inst::new(
        "faults",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "4095")],
        &[(0xfa17, 0)],
    );
    let ctx = ctxs[0];
    // 96 distinct strings, made (and their heap pages touched) before.
    let names: Vec<std::ffi::CString> = (0..96)
        .map(|k| std::ffi::CString::new(format!("fault-probe-{k}")).unwrap())
        .collect();
    let faults = std::thread::scope(|sc| {
        sc.spawn(|| {
            // The thread's first call: its index, its thread-locals.
            let g = i.start(ctx, &group_api(0));
            i.stop(g);
            let mut descrs: Vec<DescrV6> = Vec::with_capacity(names.len());
            for (k, n) in names.iter().enumerate() {
                let mut d = coll(0, 0, k as u64, 1);
                d.u.coll.func = n.as_ptr();
                descrs.push(d);
            }
            let mut handles = Vec::with_capacity(names.len());
            // Once over, so that the stack and this test's own memory are
            // mapped; then the new strings, counted.
            let h = i.start(ctx, &coll(0, 0, 0, 1));
            i.stop(h);
            let before = minor_faults();
            for d in &descrs {
                handles.push(i.start(ctx, d));
            }
            for h in &handles {
                i.stop(*h);
            }
            let after = minor_faults();
            assert!(handles.iter().all(|h| *h != 0));
            after - before
        })
        .join()
        .unwrap()
    });
    i.fin(ctx);
    assert_balanced(&i.stats());
    assert_eq!(
        faults, 0,
        "page faults in the plugin on a thread's later calls"
    );
}
