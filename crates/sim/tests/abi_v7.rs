//! Profiler ABI v7 (NCCL 2.31+) against our shim. Gated on the plugin, never skipped:
//!
//! * the plugin exports `ncclProfiler_v7`: the simulator drives that table, and the runs
//!   must carry what only v7 has (KernelPhase events from the profiler thread, three per
//!   KernelCh, each linked to its KernelCh; user tags and symmetric-kernel fields on the
//!   Coll/P2p records); a plugin that exports the symbol but loses these events fails;
//! * it does not: the simulator falls back to `ncclProfiler_v6`, and nothing v7-only
//!   reaches the plugin (no KernelPhase start, the KernelPhase bit cleared from the mask).
//!
//! `--abi 6` on a v7 plugin is the fallback too.

mod common;

use common::{assert_exact, params};
use evring_abi::ty;
use evring_perfetto::trace::{read, Value};
use evring_sim::plugin::Plugin;
use evring_sim::report::Outcome;
use evring_sim::scenario::user::{symmetric, user_tag, TAG_BASE};
use evring_sim::scenario::{run, Params, Scenario};
use std::ffi::CStr;

/// Index of the KernelPhase bit in the per-type counts.
const PHASE: usize = ty::KERNEL_PHASE.trailing_zeros() as usize;
const KCH: usize = ty::KERNEL_CH.trailing_zeros() as usize;

fn exports_v7() -> bool {
    Plugin::open_isolated(&common::plugin(), Some(7)).is_ok()
}

fn small() -> Params {
    let mut p = params();
    p.events = 30_000;
    p
}

fn kept(sc: Scenario, p: &Params, tag: &str) -> (Outcome, std::path::PathBuf) {
    let root = std::env::temp_dir().join(format!("evring-sim-abi7-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let mut p = p.clone();
    p.trace_root = Some(root.clone());
    p.keep = true;
    let o = run(sc, &p).unwrap_or_else(|e| panic!("{}: {e}", sc.name()));
    (o, root)
}

/// The run went through v6: nothing v7-only reached the plugin.
fn assert_v6(o: &Outcome) {
    assert_exact(o);
    for p in &o.procs {
        assert_eq!(p.abi, 6, "{}", p.label);
        assert_eq!(
            p.counts.starts[PHASE], 0,
            "{}: KernelPhase given to v6",
            p.label
        );
    }
    assert_eq!(o.trace().cat("KernelPhase"), 0);
}

#[test]
fn v7_when_exported_else_the_v6_fallback() {
    let p = small();
    if !exports_v7() {
        // The fallback: the newest the plugin has.
        let o = run(Scenario::P2pKernel, &p).unwrap();
        assert_v6(&o);
        assert!(o.trace().cat("KernelCh") > 0);
        return;
    }
    let (o, root) = kept(Scenario::P2pKernel, &p, "p2p");
    assert_exact(&o);
    let pr = &o.procs[0];
    assert_eq!(pr.abi, 7);
    // Three phases per KernelCh, every one accepted, in the trace and linked.
    let c = &pr.counts;
    assert!(c.starts[KCH] > 0);
    assert_eq!(c.starts[PHASE], 3 * c.starts[KCH], "{c:?}");
    assert_eq!(c.accepted[PHASE], c.starts[PHASE], "KernelPhase handles");
    let t = o.trace();
    assert_eq!(t.cat("KernelPhase"), c.starts[PHASE], "KernelPhase records");
    assert!(t.linked >= t.cat("KernelPhase") + t.cat("KernelCh"));

    // User tags and symmetric kernels, as the descriptors carried them.
    let mut tagged = 0;
    let mut sym = 0;
    let mut phases = [0u64; 3];
    for f in walk(&root) {
        let tr = read(&std::fs::read(&f).unwrap());
        for s in &tr.slices {
            match s.category.as_str() {
                "Coll" | "P2p" | "CollApi" | "P2pApi" => {
                    if let Some(Value::Uint(tag)) = s.arg("user_tag") {
                        assert!(
                            (TAG_BASE..TAG_BASE + 5).contains(tag),
                            "{}: tag {tag:#x}",
                            s.name
                        );
                        tagged += 1;
                    }
                    if s.category == "Coll" {
                        let seq = s.arg("seq").and_then(Value::as_u64).unwrap();
                        let func = std::ffi::CString::new(s.name.clone()).unwrap();
                        let want = symmetric(&func, seq);
                        let is = matches!(s.arg("sym_coll"), Some(Value::Bool(true)));
                        assert_eq!(is, want, "{} seq {seq}", s.name);
                        if is {
                            sym += 1;
                            let v = match s.arg("kernel_variant") {
                                Some(Value::Str(v)) => v.clone(),
                                other => panic!("no kernel variant: {other:?}"),
                            };
                            let want = evring_sim::scenario::nccl::SYM_VARIANT;
                            assert_eq!(v.as_bytes(), want.to_bytes());
                        }
                    }
                }
                "KernelPhase" => {
                    let name = match s.arg("phase") {
                        Some(Value::Str(n)) => n.clone(),
                        other => panic!("phase name: {other:?}"),
                    };
                    let i = evring_sim::scenario::nccl::PHASE_NAMES
                        .iter()
                        .position(|n| n.to_bytes() == name.as_bytes())
                        .unwrap_or_else(|| panic!("unknown phase {name}"));
                    phases[i] += 1;
                }
                _ => {}
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(tagged > 0, "no user tag in the traces");
    assert!(sym > 0, "no symmetric collective in the traces");
    assert_eq!(phases[0], phases[1]);
    assert_eq!(phases[1], phases[2]);
    assert_eq!(phases.iter().sum::<u64>(), t.cat("KernelPhase"));
    // Untagged operations exist too (every sixth layer).
    assert_eq!(user_tag(16), 0);
}

/// The profiler thread next to NET proxies, an abort (stalled kernels left open, the
/// abort passed on to the proxy), a split (the thread shared with the parent, which is
/// finalized half-way) and a graph (replays from the callback thread).
#[test]
fn v7_profiler_thread_in_net_abort_split_graph() {
    let p = small();
    let v7 = exports_v7();
    for sc in [
        Scenario::Eth,
        Scenario::Abort,
        Scenario::Split,
        Scenario::Graph,
    ] {
        let o = run(sc, &p).unwrap_or_else(|e| panic!("{}: {e}", sc.name()));
        if !v7 {
            assert_v6(&o);
            continue;
        }
        assert_exact(&o);
        let c = o.counts();
        assert_eq!(o.procs[0].abi, 7);
        assert!(c.starts[PHASE] > 0, "{}: no KernelPhase", sc.name());
        if sc != Scenario::Abort {
            // Aborted kernels never finish: no phases for them.
            assert_eq!(c.starts[PHASE], 3 * c.starts[KCH], "{}", sc.name());
        }
    }
}

#[test]
fn abi_6_forced_on_any_plugin_is_the_fallback() {
    let mut p = small();
    p.version = Some(6);
    let o = run(Scenario::P2pKernel, &p).unwrap();
    assert_v6(&o);
}

#[test]
fn the_tags_are_deterministic_and_some_are_zero() {
    let tags: Vec<u64> = (1..=18).map(user_tag).collect();
    assert_eq!(&tags[..3], &[TAG_BASE; 3]);
    assert_eq!(tags[3], TAG_BASE + 1);
    assert_eq!(&tags[15..18], &[0, 0, 0]);
    assert!(symmetric(c"AllGather", 3) && !symmetric(c"AllReduce", 3));
    let _: &CStr = evring_sim::scenario::nccl::SYM_VARIANT;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "pftrace") {
            out.push(p);
        }
    }
    out
}
