//! Every scenario with at least 100 k events against our shim (NCCL's thread
//! structure), plus a few on one thread: no leak, nothing uncounted, every Coll/P2p in
//! the trace, children linked to parents by ID.

mod common;

use common::{assert_exact, params, EVENTS};
use evring_sim::scenario::lane::Mode;
use evring_sim::scenario::{run, run_all_variants, Params, Scenario};

fn check(sc: Scenario, p: &Params) -> evring_sim::report::Outcome {
    let o = run(sc, p).unwrap_or_else(|e| panic!("{}: {e}", sc.name()));
    assert!(
        o.counts().total_starts() >= p.events,
        "{}: {} starts",
        sc.name(),
        o.counts().total_starts()
    );
    if sc != Scenario::NoFinalize {
        assert_exact(&o);
    }
    o
}

#[test]
fn shm() {
    let o = check(Scenario::Shm, &params());
    let t = o.trace();
    // Mask Coll|P2p: no proxy thread, so no proxy or kernel events at all.
    assert_eq!(t.cat("KernelCh") + t.cat("ProxyOp") + t.cat("ProxyCtrl"), 0);
    assert!(t.cat("Coll") > 0 && t.cat("P2p") > 0 && t.cat("GroupApi") > 0);
}

#[test]
fn p2p_kernel() {
    let o = check(Scenario::P2pKernel, &params());
    let t = o.trace();
    assert!(t.cat("KernelCh") > 0 && t.cat("ProxyCtrl") > 0 && t.cat("KernelLaunch") > 0);
    assert_eq!(t.cat("ProxyOp"), 0, "P2P has no proxy ops");
    assert!(t.linked >= t.cat("KernelCh"));
}

#[test]
fn eth() {
    let o = check(Scenario::Eth, &params());
    let t = o.trace();
    assert!(t.cat("ProxyOp") > 0 && t.cat("ProxyStep") > 0 && t.cat("NetPlugin") > 0);
}

#[test]
fn ib() {
    let o = check(Scenario::Ib, &params());
    let s = o.procs[0].stats.unwrap();
    assert!(o.trace().cat("NetPlugin") > 0);
    // Double stops and stops without start reach the plugin and are counted.
    assert!(s.stale_handles > 0, "{s:?}");
    assert!(s.null_handles > 0, "{s:?}");
}

#[test]
fn pxn() {
    let o = check(Scenario::Pxn, &params());
    assert_eq!(o.procs.len(), 2);
    for p in &o.procs {
        let s = p.stats.unwrap();
        assert!(
            s.foreign_parents > 0 && s.foreign_contexts > 0,
            "{}: {s:?}",
            p.label
        );
    }
}

#[test]
fn group_p2p() {
    let o = check(Scenario::GroupP2p, &params());
    let t = o.trace();
    assert!(t.cat("P2p") > 0 && t.cat("P2pApi") > 0 && t.cat("Coll") == 0);
}

#[test]
fn graph() {
    let o = check(Scenario::Graph, &params());
    let s = o.procs[0].stats.unwrap();
    // Replays after the first find the capture's CollApi long completed.
    assert!(s.late_children > 0, "{s:?}");
}

#[test]
fn nonblocking() {
    check(Scenario::Nonblocking, &params());
}

#[test]
fn split() {
    let o = check(Scenario::Split, &params());
    let s = o.procs[0].stats.unwrap();
    // ProxyCtrl with the parent's context after the parent's finalize: the
    // shared proxy's activity is recorded on the detached stream.
    assert!(s.late_context_events > 0, "{s:?}");
    assert_eq!(s.inits, 4);
}

#[test]
fn abort() {
    let o = check(Scenario::Abort, &params());
    let s = o.procs[0].stats.unwrap();
    assert!(
        s.forced_finalize > 0,
        "open proxy events completed by finalize: {s:?}"
    );
    assert!(s.inits > 4, "several aborted communicators: {s:?}");
}

#[test]
fn no_finalize_in_process_and_child_process() {
    let p = params();
    let all = run_all_variants(Scenario::NoFinalize, &p);
    assert_eq!(all.len(), 2);
    let inproc = all[0].as_ref().unwrap();
    assert!(inproc.ok(), "{:?}", inproc.problems);
    let pr = &inproc.procs[0];
    let s = pr.stats.unwrap();
    // Without finalize only the Sleep events the proxies left open are live
    // (usually a few; none when every proxy happened to be busy at the end,
    // which a loaded machine makes likelier, so no lower bound).
    assert_eq!(s.live, pr.counts.left_open);
    assert_eq!(s.start_calls, s.completed + s.live);
    assert_eq!(pr.trace.coll_p2p(), pr.counts.coll_p2p_accepted());

    let child = all[1].as_ref().unwrap();
    assert!(child.ok(), "{:?}", child.problems);
    let t = &child.procs[0].trace;
    assert!(t.files > 0 && !t.footers.is_empty());
    assert!(t.footers.iter().all(|f| !f.finalized && f.get("live") == 0));
    assert_eq!(t.coll_p2p(), child.procs[0].counts.coll_p2p_accepted());
    assert!(child.counts().total_starts() >= EVENTS);
}

#[test]
fn single_thread_mode() {
    let mut p = params();
    p.mode = Mode::Single;
    for sc in [
        Scenario::Shm,
        Scenario::Ib,
        Scenario::Graph,
        Scenario::Split,
    ] {
        check(sc, &p);
    }
}

#[test]
fn older_abi_versions() {
    let mut p = params();
    p.events = 20_000;
    for v in [4, 5] {
        p.version = Some(v);
        let o = check(Scenario::Eth, &p);
        assert!(
            o.counts().filtered > 0 || v == 5,
            "v{v} is not given API events"
        );
    }
}

#[test]
fn third_party_measurements() {
    let mut p = params();
    p.opaque = true;
    // What is checked is the judging of an opaque plugin, not throughput: a
    // quarter of the default rate and a slab four times the default, so
    // that a writer thread starved by the other tests of this binary on a
    // 2-core CI machine (for more than the ~160 ms the default slab holds
    // at full rate) does not make the plugin refuse starts. The simulator's
    // main job measures throughput, alone.
    p.rate /= 4;
    p.capacity = Some(1 << 18);
    let o = run(Scenario::Eth, &p).unwrap();
    assert!(o.ok(), "{:?}", o.problems);
    let pr = &o.procs[0];
    assert!(pr.stats.is_none());
    assert_eq!(evring_sim::report::acceptance(&pr.counts), 1.0);
    assert!(pr.counts.steady_starts > 0);
    assert_eq!(pr.trace.coll_p2p(), pr.counts.coll_p2p());
    assert!(o.rss_peak > 0);
}

/// With NCCL's thread structure on a busy 2-core machine, the epoch-reclaimed slab
/// used to report Full while only a few hundred events were live (sampled peak ≈ 780
/// of 8192 slots): a preempted thread's pin held back every retired slot. Slots are
/// now reclaimed per slot (docs/ring.md): a stalled reader holds up one slot only.
/// Since the log-only hot path the writer retires every slot (docs/shim.md).
#[test]
fn slab_never_full_far_below_capacity() {
    let mut p = params();
    p.events = 3_000_000;
    p.capacity = Some(8192);
    p.ring = None;
    for _ in 0..4 {
        let o = run(Scenario::Eth, &p).unwrap();
        let s = o.procs[0].stats.unwrap();
        // Live counts events still in the log too (the writer completes
        // them as it reads it, every 0.5–2 ms), so the occupancy follows the
        // writer's share of the two cores: 1.4 k alone on the dev box, the
        // whole slab for a moment when other tests take the cores (then a
        // start is refused, counted, and the pressure sweep acts). The
        // sampled peak can miss such a moment, so it proves nothing either
        // way. What the epoch bug broke cannot come back: retired slots go
        // to per-thread caches of at most 32 that other threads steal from
        // (`free.rs`), so Full means the slab is full. What must hold is the
        // accounting: every start recorded, still live, or counted.
        eprintln!("eth at capacity 8192: live peak {}", o.live_peak);
        assert!(o.ok(), "{:?}", o.problems);
        let drops = s.drop_slab_full
            + s.drop_unknown_type
            + s.drop_null_context
            + s.drop_after_finalize
            + s.drop_null_descr
            + s.masked_starts;
        assert_eq!(s.start_calls, s.completed + s.live + drops, "{s:?}");
    }
}
