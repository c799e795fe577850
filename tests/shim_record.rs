//! Recording mode (`EVRING_RECORD`): what the release plugin logs is exactly
//! what was driven, in the fixture format the simulator parses, bounded by
//! its queue and byte limit with every lost call counted.

mod common;
use common::*;
use evring_shim::abi::{state, ty, DescrV6};
use evring_sim::fixture::{parse_file, Call, Verb, WORDS};
use std::path::{Path, PathBuf};

/// An instance recording into `dir` (files `<dir>/rec-<pid>.log` and
/// `.times`); `extra` adds settings. Two communicators, ranks 0 and 1.
fn recording(tag: &str, version: Option<u32>, extra: &[(&str, &str)]) -> (Inst, Vec<u64>, PathBuf) {
    let dir = tempdir(tag);
    let prefix = dir.join("rec-").to_string_lossy().into_owned();
    let mut env: Vec<(&str, &str)> = vec![("EVRING_RECORD", &prefix)];
    env.extend_from_slice(extra);
    let (i, ctxs) = Inst::new(tag, version, &env, &[(0xc0ffee, 0), (0xbeef, 1)]);
    (i, ctxs, dir)
}

/// The log and times files of this process.
fn files(dir: &Path) -> (PathBuf, PathBuf) {
    let pid = std::process::id();
    (
        dir.join(format!("rec-{pid}.log")),
        dir.join(format!("rec-{pid}.times")),
    )
}

fn words_of(d: &DescrV6) -> [u64; WORDS] {
    // SAFETY: `d` is a descriptor on our stack; its 88 union bytes are read as
    // plain words, the way the plugin reads them.
    unsafe { std::ptr::read_unaligned(std::ptr::addr_of!(d.u).cast::<[u64; WORDS]>()) }
}

fn func_of(d: &DescrV6) -> Option<String> {
    // SAFETY: the member read is the one `ty` selects; the strings are the
    // static literals of tests/common.
    unsafe {
        let p = match d.ty {
            ty::COLL_API => d.u.coll_api.func,
            ty::P2P_API => d.u.p2p_api.func,
            ty::COLL => d.u.coll.func,
            ty::P2P => d.u.p2p.func,
            _ => return None,
        };
        Some(std::ffi::CStr::from_ptr(p).to_str().unwrap().to_string())
    }
}

/// Drives the plugin and keeps the calls the log must contain.
struct Driver<'a> {
    i: &'a Inst,
    want: Vec<Verb>,
}

impl Driver<'_> {
    fn start(&mut self, ctx: u64, d: &DescrV6) -> u64 {
        let h = self.i.start(ctx, d);
        self.want.push(Verb::Start {
            handle: h,
            ctx,
            ty: d.ty,
            parent: d.parent_obj as u64,
            rank: d.rank,
            name: func_of(d),
            words: words_of(d),
        });
        h
    }

    fn stop(&mut self, h: u64) {
        self.i.stop(h);
        self.want.push(Verb::Stop { handle: h });
    }

    fn rec(&mut self, h: u64, s: i32, arg: Option<u64>) {
        self.i.rec(h, s, arg);
        self.want.push(Verb::Rec {
            handle: h,
            state: s,
            arg,
        });
    }

    fn fin(&mut self, ctx: u64) {
        self.i.fin(ctx);
        self.want.push(Verb::Fin { ctx });
    }
}

fn verbs(calls: &[Call]) -> Vec<Verb> {
    calls.iter().map(|c| c.verb.clone()).collect()
}

#[test]
fn log_is_what_was_driven() {
    let (i, ctxs, dir) = recording("rec-v6", None, &[("NCCL_PROFILE_EVENT_MASK", "4095")]);
    let (c0, c1) = (ctxs[0], ctxs[1]);
    let mut d = Driver {
        i: &i,
        want: Vec::new(),
    };
    // §3.3 on the user thread, KernelCh on the "proxy" thread (here the same).
    let ga = d.start(c0, &group_api(1));
    d.rec(ga, state::GROUP_START_API_STOP, None);
    let ca = d.start(c0, &coll_api(ga));
    d.stop(ca);
    d.rec(ga, state::GROUP_END_API_START, None);
    let g = d.start(c0, &simple(ty::GROUP, 0));
    let c = d.start(c0, &coll(ca, g, 9, 2));
    d.stop(c);
    d.stop(g);
    d.stop(ga);
    for ch in 0..2u8 {
        let k = d.start(c0, &kernel_ch(c, ch, 1000 + ch as u64));
        d.rec(k, state::KERNEL_CH_STOP, Some(2000 + ch as u64));
        d.stop(k);
    }
    // Socket-style proxy events on the second communicator.
    let pa = d.start(c1, &p2p_api(0, true));
    d.stop(pa);
    let p = d.start(c1, &p2p(pa, 0, true, 0, 1));
    d.stop(p);
    let op = d.start(c1, &proxy_op(p, pid(), 0, true));
    d.rec(op, state::PROXY_OP_IN_PROGRESS_V4, Some(0));
    let st = d.start(c1, &proxy_step(op, 0));
    d.rec(st, state::PROXY_STEP_SEND_GPU_WAIT, Some(0xdead));
    d.rec(st, state::PROXY_STEP_SEND_WAIT, Some(1 << 20));
    d.stop(st);
    d.stop(op);
    // Hostile input is logged as it came: garbage, NULL and double stops.
    d.stop(0);
    d.stop(0x1234_5678);
    d.stop(ca);
    d.rec(0, state::PROXY_CTRL_APPEND_END, Some(24));
    let unknown = d.start(c0, &simple(1 << 40, 0));
    assert_eq!(unknown, 0, "unknown types are dropped (NULL handle)");
    d.fin(c0);
    d.fin(c1);
    let want = d.want;

    let s = i.stats();
    assert_balanced(&s);
    let (log, times) = files(&dir);
    let calls = parse_file(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let got = verbs(&calls);
    // The two INITs came first (from `Inst::new`), with our contexts.
    let Verb::Init { ctx, comm_id, .. } = got[0] else {
        panic!("{:?}", got[0])
    };
    assert_eq!((ctx, comm_id), (c0, 0xc0ffee));
    let Verb::Init {
        ctx, comm_id, rank, ..
    } = got[1]
    else {
        panic!("{:?}", got[1])
    };
    assert_eq!((ctx, comm_id, rank), (c1, 0xbeef, 1));
    assert_eq!(got[2..], want[..]);
    // One thread drove everything: one tid throughout.
    assert!(calls.iter().all(|c| c.tid == calls[0].tid));
    assert_eq!(s.record_lines, calls.len() as u64);
    assert_eq!((s.record_dropped, s.record_over_limit), (0, 0));
    // The sidecar has one non-decreasing CLOCK_MONOTONIC ns per line.
    let ts: Vec<u64> = std::fs::read_to_string(&times)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ts.len(), calls.len());
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
}

/// Calls from many threads at once: all logged, each thread's in its order.
#[test]
fn concurrent_threads_keep_their_order() {
    let (i, ctxs, dir) = recording("rec-mt", None, &[("NCCL_PROFILE_EVENT_MASK", "70")]);
    let ctx = ctxs[0];
    let threads = 4;
    let per = 2000u64;
    let handles: Vec<Vec<u64>> = std::thread::scope(|sc| {
        let js: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| {
                    (0..per)
                        .map(|k| {
                            let h = i.start(ctx, &proxy_step(0, k as i32));
                            i.stop(h);
                            h
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        js.into_iter().map(|j| j.join().unwrap()).collect()
    });
    i.fin(ctx);
    i.fin(ctxs[1]);
    let s = i.stats();
    assert_balanced(&s);
    let (log, _) = files(&dir);
    let calls = parse_file(&log).unwrap();
    let total = 2 + threads as u64 * per * 2 + 2;
    assert_eq!(
        s.record_lines + s.record_dropped,
        total,
        "every call is logged or counted: {s:?}"
    );
    assert_eq!(s.record_lines, calls.len() as u64);
    if s.record_dropped == 0 {
        // Per thread: START h, STOP h for each of its handles, in order.
        let mut tids: Vec<u64> = calls[2..calls.len() - 2].iter().map(|c| c.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        assert_eq!(tids.len(), threads);
        let mut seqs: Vec<Vec<u64>> = tids
            .iter()
            .map(|t| {
                calls
                    .iter()
                    .filter(|c| c.tid == *t)
                    .filter_map(|c| match c.verb {
                        Verb::Start { handle, .. } => Some(handle),
                        Verb::Stop { handle } => Some(handle | 1 << 63),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let mut want: Vec<Vec<u64>> = handles
            .iter()
            .map(|hs| hs.iter().flat_map(|&h| [h, h | 1 << 63]).collect())
            .collect();
        seqs.sort();
        want.sort();
        assert_eq!(seqs, want);
    }
}

/// The v4 table carries no v6 union: the log lays the converted fields out
/// as v6, so the simulator rebuilds the same event.
#[test]
fn pre_v5_tables_are_logged_in_v6_layout() {
    let (i, ctxs, dir) = recording("rec-v4", Some(4), &[("NCCL_PROFILE_EVENT_MASK", "70")]);
    assert_eq!(i.p.version(), 4);
    let ctx = ctxs[0];
    let g = i.start(ctx, &simple(ty::GROUP, 0));
    // v4 has no parentGroup: NCCL's v4 shim makes the Group the parent.
    let c = i.start(ctx, &coll(g, g, 42, 3));
    i.stop(c);
    i.stop(g);
    i.fin(ctx);
    i.fin(ctxs[1]);
    let (log, _) = files(&dir);
    let calls = parse_file(&log).unwrap();
    let starts: Vec<&Verb> = calls
        .iter()
        .map(|c| &c.verb)
        .filter(|v| matches!(v, Verb::Start { .. }))
        .collect();
    let Verb::Start {
        handle,
        ty: t,
        parent,
        name,
        words,
        ..
    } = starts[1]
    else {
        unreachable!()
    };
    assert_eq!((*handle, *t, *parent), (c, ty::COLL, g));
    assert_eq!(name.as_deref(), Some("AllReduce"));
    // seqNumber, count, root, nChannels|nWarps<<8 at the v6 offsets; the
    // string pointers and parentGroup (none in v4) are 0.
    assert_eq!(words[0], 42);
    assert_eq!(words[4], 1 << 20);
    assert_eq!(words[5], 0);
    assert_eq!(words[7], 3 | 16 << 8);
    assert_eq!(words[1] | words[6] | words[8] | words[9] | words[10], 0);
}

/// Past the byte limit nothing more is logged; the log stays whole lines,
/// and every call not logged is counted.
#[test]
fn byte_limit_keeps_a_parseable_prefix() {
    let (i, ctxs, dir) = recording(
        "rec-limit",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "70"),
            ("EVRING_RECORD_LIMIT", "4096"),
        ],
    );
    let ctx = ctxs[0];
    let n = 200;
    for s in 0..n {
        allreduce_user_thread(&i, ctx, s, 0);
    }
    i.fin(ctx);
    i.fin(ctxs[1]);
    let s = i.stats();
    assert_balanced(&s);
    let (log, times) = files(&dir);
    let size = std::fs::metadata(&log).unwrap().len() + std::fs::metadata(&times).unwrap().len();
    assert!(size <= 4096, "{size}");
    let calls = parse_file(&log).unwrap();
    assert_eq!(s.record_lines, calls.len() as u64);
    assert!(s.record_over_limit > 0);
    // 2 INIT, 10 calls per all-reduce, 2 FIN.
    assert_eq!(s.record_lines + s.record_over_limit, 2 + 10 * n + 2);
}

/// A full queue drops the call and counts it; it never waits.
#[test]
fn full_queue_is_a_counted_drop() {
    let (i, ctxs, dir) = recording(
        "rec-queue",
        None,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "70"),
            ("EVRING_RECORD_QUEUE", "16"),
        ],
    );
    let n = 20_000u64;
    for _ in 0..n {
        i.stop(0);
    }
    i.fin(ctxs[0]);
    i.fin(ctxs[1]);
    let s = i.stats();
    let calls = parse_file(&files(&dir).0).unwrap();
    assert_eq!(s.record_lines, calls.len() as u64);
    assert_eq!(s.record_lines + s.record_dropped, 2 + n + 2, "{s:?}");
    assert!(s.record_dropped > 0, "{s:?}");
}

/// Off by default: no files, nothing counted.
#[test]
fn off_without_the_variable() {
    let (i, ctxs) = Inst::new("rec-off", None, &[], &[(1, 0)]);
    let h = i.start(ctxs[0], &group_api(1));
    i.stop(h);
    i.fin(ctxs[0]);
    let s = i.stats();
    assert_eq!(
        (s.record_lines, s.record_dropped, s.record_over_limit),
        (0, 0, 0)
    );
    let logs = std::fs::read_dir(&i.dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log" || x == "times")
        })
        .count();
    assert_eq!(logs, 0);
}
