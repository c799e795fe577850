//! Hostile and broken input through the C ABI of the release plugin: nothing
//! may crash, every case is counted, and accounting still balances.

mod common;
use common::*;
use evring_shim::abi::{state, ty, DescrV6};
use std::ffi::c_void;

/// An address no one can read: a page mapped PROT_NONE and never unmapped
/// (an unmapped page could be handed to another test thread's allocation).
fn unmapped_page() -> u64 {
    // SAFETY: a fresh anonymous PROT_NONE mapping, deliberately leaked.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }
}

#[test]
fn bad_handles_are_counted_and_ignored() {
    let (i, ctxs) = Inst::new(
        "handles",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "70")],
        &[(1, 0)],
    );
    let ctx = ctxs[0];
    let bad = unmapped_page();
    // NULL, garbage and pointer-looking values.
    for h in [0u64, 1, 0xdead_beef, bad, u64::MAX, 0x7fff_0000_1000] {
        i.stop(h);
        i.rec(h, state::KERNEL_CH_STOP, Some(5));
    }
    let s = i.stats();
    assert_eq!(s.null_handles, 2);
    assert_eq!(s.unknown_handles + s.stale_handles, 10, "{s:?}");
    // Stale and double stops.
    let leaf = i.start(ctx, &simple(ty::KERNEL_LAUNCH, 0));
    i.stop(leaf);
    i.stop(leaf);
    i.rec(leaf, state::GROUP_END_API_START, None);
    // Both found the leaf completed (stale) or, when the writer had not
    // applied its stop yet, stopped (a double stop, a state after the
    // stop): counted either way, never applied.
    let s2 = i.settled();
    let bad = |s: &evring_shim::StatsV1| s.stale_handles + s.double_stops + s.record_after_stop;
    assert_eq!(bad(&s2) - bad(&s), 2, "{s2:?}");
    // A waiting event (expects KernelCh): second stop and record after stop.
    let c = allreduce_user_thread(&i, ctx, 0, 2);
    i.stop(c);
    i.rec(c, state::KERNEL_CH_STOP, Some(1));
    let s3 = i.settled();
    assert_eq!(s3.double_stops - s2.double_stops, 1, "{s3:?}");
    assert_eq!(
        s3.unknown_states, 1,
        "KernelChStop does not belong to a Coll"
    );
    // Unknown states on a live event.
    let pc = i.start(ctx, &simple(ty::PROXY_CTRL, 0));
    for st in [-1, 99, 1 << 30, state::KERNEL_CH_STOP] {
        i.rec(pc, st, Some(7));
    }
    i.stop(pc);
    i.rec(pc, state::PROXY_CTRL_SLEEP, None);
    assert_eq!(i.settled().unknown_states, 5);
    i.fin(ctx);
    // After finalize: stops, records and starts on the finalized context.
    i.stop(c);
    let late = i.start(ctx, &coll_api(0));
    assert_eq!(late, 0, "start on a finalized context is dropped");
    // ...except ProxyCtrl: a proxy shared by split communicators reports with
    // its creator's context after that one's finalize (recorded detached).
    let pc = i.start(ctx, &simple(ty::PROXY_CTRL, 0));
    assert_ne!(pc, 0);
    i.rec(pc, state::PROXY_CTRL_WAKEUP, None);
    i.stop(pc);
    i.fin(ctx);
    // The ProxyCtrl record completed after the last finalize: drain it.
    i.call_void(c"evring_flush");
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(s.drop_after_finalize, 1);
    assert_eq!(s.late_context_events, 1);
    assert!(i
        .begins()
        .iter()
        .any(|e| e["cat"] == "ProxyCtrl" && e["args"]["flags"][0] == "detached"));
    assert_eq!(s.bad_contexts, 1, "second finalize");
    assert_eq!(
        s.forced_finalize, 3,
        "Coll, its CollApi and GroupApi were waiting: {s:?}"
    );
}

#[test]
fn bad_contexts_types_and_descriptors() {
    let (i, ctxs) = Inst::new(
        "ctx",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "4095")],
        &[(1, 0)],
    );
    let ctx = ctxs[0];
    // NULL context: dropped, handle NULL.
    assert_eq!(i.start(0, &group_api(1)), 0);
    // Unknown types: dropped (1 << 15 is KernelPhase in v7, the table driven here).
    for t in [0u64, 3, 1 << 16, 1 << 40, u64::MAX] {
        assert_eq!(i.start(ctx, &simple(t, 0)), 0, "type {t:#x}");
    }
    // Foreign / unmapped context pointers: recorded detached, never dereferenced.
    let bad = unmapped_page();
    for fctx in [bad, 0x10, 0xffff_ffff_ffff_0000] {
        let h = i.start(fctx, &group_api(1));
        assert_ne!(h, 0);
        i.stop(h);
    }
    // Foreign parents: pointers, unmapped memory, IDs of another instance.
    let (other, octx) = Inst::new("other", None, &[], &[(9, 0)]);
    let foreign_id = other.start(octx[0], &group_api(1));
    for parent in [bad, 0x1000, foreign_id] {
        let h = i.start(ctx, &coll_api(parent));
        assert_ne!(h, 0);
        i.stop(h);
    }
    // Garbage string pointers and channel ids up to 255.
    let mut dsc = coll(0, 0, 1, 255);
    // Writing a union field is safe; only reading one needs `unsafe`.
    dsc.u.coll.func = bad as *const _;
    dsc.u.coll.algo = 0x8 as *const _;
    let c = i.start(ctx, &dsc);
    let ks: Vec<u64> = (0..=255u8)
        .map(|ch| i.start(ctx, &kernel_ch(c, ch, 10)))
        .collect();
    for k in ks {
        i.rec(k, state::KERNEL_CH_STOP, Some(20));
        i.stop(k);
    }
    i.stop(c);
    for ch in [0u8, 63, 64, 255] {
        let op = i.start(ctx, &proxy_op(0, pid(), ch, true));
        i.stop(op);
    }
    // NULL descriptor and NULL out-pointer go through the raw table.
    // SAFETY: deliberately NULL arguments; the plugin must cope.
    unsafe {
        let t: &evring_shim::abi::ProfilerV6 =
            &*(i.p.symbol(c"ncclProfiler_v6").unwrap() as *const _);
        let mut h: *mut c_void = 0x55 as *mut c_void;
        assert_eq!(
            (t.start_event)(ctx as *mut c_void, &mut h, std::ptr::null_mut()),
            0
        );
        assert!(h.is_null(), "*eHandle written NULL on drop");
        let d: DescrV6 = group_api(1);
        assert_eq!(
            (t.start_event)(
                ctx as *mut c_void,
                std::ptr::null_mut(),
                &d as *const _ as *mut _
            ),
            0
        );
        assert_eq!(
            (t.init)(
                std::ptr::null_mut(),
                1,
                std::ptr::null_mut(),
                std::ptr::null(),
                0,
                0,
                0,
                None
            ),
            0
        );
        assert_eq!((t.finalize)(std::ptr::null_mut()), 0);
    }
    i.fin(ctx);
    other.fin(octx[0]);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(s.drop_null_context, 1);
    assert_eq!(s.drop_unknown_type, 5);
    assert_eq!(s.foreign_contexts, 3);
    assert_eq!(s.foreign_parents, 3);
    assert_eq!(s.drop_null_descr, 1);
    assert!(s.bad_strings >= 1 || s.bad_contexts >= 1);
    let evs = i.begins();
    let c = evs.iter().find(|e| e["cat"] == "Coll").unwrap();
    assert_eq!(c["name"], "?", "unreadable func shown as ?");
    assert_eq!(c["args"]["flags"][0], "bad_string");
    assert_eq!(count_cat(&evs, "KernelCh"), 256);
    assert!(evs.iter().filter(|e| e["cat"] == "GroupApi").count() >= 3);
    assert!(i
        .traces()
        .iter()
        .any(|(p, _)| p.to_string_lossy().contains("detached")));
}

/// PXN (§3.7): a proxy thread of another process calls us with its context,
/// its parent and its pid; children then use the handle we returned.
#[test]
fn pxn_foreign_proxy_ops() {
    let (i, ctxs) = Inst::new(
        "pxn",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "0xff")],
        &[(1, 0)],
    );
    let (other, octx) = Inst::new(
        "pxn-peer",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "0xff")],
        &[(1, 1)],
    );
    let remote_coll = other.start(octx[0], &coll(0, 0, 1, 1));
    for k in 0..100 {
        let op = i.start(
            octx[0],
            &proxy_op(remote_coll, pid() + 1, (k % 4) as u8, true),
        );
        assert_ne!(op, 0);
        let st = i.start(octx[0], &proxy_step(op, 0));
        i.rec(st, state::PROXY_STEP_SEND_WAIT, Some(64));
        i.stop(st);
        // IB NetPlugin: stop twice, then a stop of a handle never started.
        let np = i.start(octx[0], &simple(ty::NET_PLUGIN, st));
        i.stop(np);
        i.stop(np);
        i.stop(0);
        i.stop(op);
    }
    i.fin(ctxs[0]);
    other.stop(remote_coll);
    other.fin(octx[0]);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(s.foreign_parents, 100);
    assert!(s.foreign_contexts >= 300, "{s:?}");
    assert_eq!(
        s.stale_handles + s.double_stops,
        100,
        "second NetPlugin stop (stale once the writer has applied the first)"
    );
    assert_eq!(s.null_handles, 100);
    let evs = i.begins();
    assert_eq!(count_cat(&evs, "ProxyOp"), 100);
    assert!(evs
        .iter()
        .filter(|e| e["cat"] == "ProxyOp")
        .all(|e| e["args"]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "foreign_parent")));
}

#[test]
fn concurrent_init_traffic_and_finalize_of_8_comms() {
    let (i, _) = Inst::new("8comms", None, &[("NCCL_PROFILE_EVENT_MASK", "70")], &[]);
    for round in 0..3u64 {
        let ctxs: Vec<u64> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8)
                .map(|r| {
                    let i = &i;
                    sc.spawn(move || {
                        let ctx = i.init(round * 100 + r as u64, r);
                        assert_ne!(ctx, 0);
                        for s in 0..200 {
                            let c = allreduce_user_thread(i, ctx, s, 1);
                            let k = i.start(ctx, &kernel_ch(c, 0, 1));
                            i.rec(k, state::KERNEL_CH_STOP, Some(2));
                            i.stop(k);
                        }
                        ctx
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut uniq = ctxs.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), 8, "distinct contexts");
        // Finalize on other threads, in reverse order, concurrently.
        std::thread::scope(|sc| {
            for &c in ctxs.iter().rev() {
                let i = &i;
                sc.spawn(move || i.fin(c));
            }
        });
        let s = i.stats();
        assert_balanced(&s);
    }
    let s = i.stats();
    assert_eq!(s.inits, 24);
    assert_eq!(s.finalizes, 24);
    assert_eq!(count_cat(&i.begins(), "Coll"), 24 * 200);
}

#[test]
fn pressure_completes_oldest_waiting_events() {
    let (i, ctxs) = Inst::new(
        "pressure",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "70"),
            ("EVRING_CAPACITY", "64"),
            ("EVRING_HIGH_WATER", "50"),
        ],
        &[(1, 0)],
    );
    let ctx = ctxs[0];
    // Colls that expect 4 KernelCh each, which never come (e.g. a lost proxy).
    let mut colls = Vec::new();
    for s in 0..12 {
        colls.push(allreduce_user_thread(&i, ctx, s, 4));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // 12 x (GroupApi + CollApi + Coll) = 36 live > 32: the sweep must act.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let s = i.stats();
    assert!(s.forced_pressure > 0, "{s:?}");
    assert!(s.live <= 32, "{s:?}");
    assert_eq!(s.drop_slab_full, 0);
    // The oldest went first: the first Coll is gone, the last still live.
    let k = i.start(ctx, &kernel_ch(colls[0], 0, 1));
    i.stop(k);
    assert_eq!(i.settled().late_children, 1);
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    assert!(s.children_incomplete > 0);
    assert_eq!(count_cat(&i.begins(), "Coll"), 12);
}

#[test]
fn age_limit_completes_stuck_parents() {
    let (i, ctxs) = Inst::new(
        "age",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "70"),
            ("EVRING_MAX_AGE_MS", "50"),
        ],
        &[(1, 0)],
    );
    let ctx = ctxs[0];
    allreduce_user_thread(&i, ctx, 0, 2);
    // The writer's sweep runs every 50 ms; on a loaded machine it may be
    // scheduled late, so wait for it (bounded) rather than a fixed time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut s = i.stats();
    while s.live != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        s = i.stats();
    }
    assert_eq!(
        s.live, 0,
        "the age sweep never completed the parents: {s:?}"
    );
    assert_eq!(
        s.forced_age, 1,
        "only the Coll is forced; its parents follow: {s:?}"
    );
    i.fin(ctx);
    assert_balanced(&i.stats());
}

#[test]
fn slab_full_is_a_counted_drop_and_parents_are_released() {
    let (i, ctxs) = Inst::new(
        "full",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "0x1f"),
            ("EVRING_CAPACITY", "64"),
        ],
        &[(1, 0)],
    );
    let ctx = ctxs[0];
    let op = i.start(ctx, &proxy_op(0, pid(), 0, true));
    let mut steps = Vec::new();
    for k in 0..200 {
        steps.push(i.start(ctx, &proxy_step(op, k)));
    }
    let s = i.stats();
    assert!(s.drop_slab_full > 0, "{s:?}");
    assert!(steps.contains(&0));
    for h in steps {
        if h != 0 {
            i.stop(h);
        }
    }
    i.stop(op);
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    assert_eq!(count_cat(&i.begins(), "ProxyOp"), 1);
}

#[test]
fn a_child_refused_for_a_full_slab_does_not_hold_its_parent() {
    let (i, ctxs) = Inst::new(
        "refused-child",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "70"), ("EVRING_CAPACITY", "64")],
        &[(1, 0)],
    );
    let ctx = ctxs[0];
    // A Coll that waits for two KernelCh: the first comes, then the slab
    // fills (Colls left running), and the second's start is refused.
    let c = i.start(ctx, &coll(0, 0, 1, 2));
    let k1 = i.start(ctx, &kernel_ch(c, 0, 0));
    assert!(c != 0 && k1 != 0);
    let mut fill = Vec::new();
    while i.stats().drop_slab_full == 0 {
        let h = i.start(ctx, &coll(0, 0, 2, 0));
        if h != 0 {
            fill.push(h);
        }
        assert!(fill.len() <= 64, "the slab never filled");
    }
    let refused_before = i.stats().drop_slab_full;
    let k2 = i.start(ctx, &kernel_ch(c, 1, 0));
    assert_eq!(k2, 0, "the slab is full");
    assert_eq!(i.stats().drop_slab_full, refused_before + 1);
    i.stop(k1);
    i.stop(c);
    // Without the refusal logged against it, the Coll would wait for its
    // second KernelCh until the age limit (30 s), or be forced out by the
    // pressure sweep (the slab is past its high-water mark): it must be in
    // the trace now, completed with its one child and flagged.
    i.settle();
    let coll = |i: &Inst| -> Vec<serde_json::Value> {
        i.begins()
            .into_iter()
            .filter(|b| b["cat"] == "Coll" && b["args"]["seq"] == 1)
            .collect()
    };
    let colls = coll(&i);
    assert_eq!(colls.len(), 1, "the Coll is written, before any finalize");
    let flags = colls[0]["args"]["flags"].to_string();
    assert!(flags.contains("children_incomplete"), "flags: {flags}");
    assert!(!flags.contains("forced"), "completed, not forced: {flags}");
    for h in fill {
        i.stop(h);
    }
    i.fin(ctx);
    assert_balanced(&i.stats());
    assert_eq!(coll(&i).len(), 1, "written once");
}

#[test]
fn unwritable_output_warns_counts_and_continues() {
    // A directory that cannot be created: its parent is a regular file.
    let blocker = tempdir("unwritable-blocker");
    std::fs::write(blocker.join("file"), b"x").unwrap();
    let prefix = blocker.join("file/sub/trace");
    let (i, ctxs) = Inst::new(
        "unwritable",
        None,
        &[("NCCL_PROFILE_DUMP_FILE", prefix.to_str().unwrap())],
        &[(1, 0)],
    );
    for s in 0..50 {
        allreduce_user_thread(&i, ctxs[0], s, 1);
    }
    i.fin(ctxs[0]);
    let s = i.stats();
    assert_balanced(&s);
    assert!(s.write_errors >= 1, "{s:?}");
    assert_eq!(s.records_unwritten, s.records_consumed, "{s:?}");
    let _ = std::fs::remove_dir_all(&blocker);
}

#[test]
fn dlclose_and_reopen_keeps_working() {
    let (mut i, ctxs) = Inst::new("reopen", None, &[], &[(1, 0)]);
    i.keep = true;
    // Reopen the very same file (same inode, so the same instance).
    let path = i.dir.join("libnccl-profiler-evring.so");
    allreduce_user_thread(&i, ctxs[0], 0, 1);
    i.fin(ctxs[0]);
    let before = i.stats();
    drop(i);
    for round in 0..5 {
        let mask = Box::leak(Box::new(std::sync::atomic::AtomicI32::new(0)));
        let again = Inst::reopen(&path, mask, round < 4);
        let ctx = again.init(10 + round, 0);
        allreduce_user_thread(&again, ctx, 1, 1);
        again.fin(ctx);
        let s = again.stats();
        assert_eq!(
            s.inits,
            before.inits + round + 1,
            "same instance survives dlclose"
        );
        assert_balanced(&s);
    }
}
