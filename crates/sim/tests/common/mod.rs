//! Shared by the integration tests: our shim, built once per test binary.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use evring_sim::report::Outcome;
use evring_sim::scenario::Params;

/// Events per scenario in CI (the issue asks for at least 100 k).
pub const EVENTS: u64 = 100_000;

/// `EVRING_PLUGIN` if set, else the release shim built with cargo (once), found
/// the way `evring-sim` finds it. Tests may run cargo; the simulator never does.
pub fn plugin() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        evring_sim::locate::build_release_plugin(&workspace).unwrap_or_else(|e| panic!("{e}"))
    })
    .clone()
}

/// CI sizes: a ring large enough that no record is lost, so every check is exact.
pub fn params() -> Params {
    let mut p = Params::new(plugin());
    p.events = EVENTS;
    p.ring = Some(1 << 18);
    p.ops_per_comm = 50;
    p.self_exe = Some(PathBuf::from(env!("CARGO_BIN_EXE_evring-sim")));
    p
}

/// The properties every run against our shim must have, spelled out one by one so a
/// failure names the broken one.
pub fn assert_exact(o: &Outcome) {
    assert!(o.ok(), "{}: {:?}", o.name, o.problems);
    for p in &o.procs {
        let s = p
            .stats
            .unwrap_or_else(|| panic!("{}: no evring counters", p.label));
        let c = &p.counts;
        let drops = s.drop_slab_full
            + s.drop_unknown_type
            + s.drop_null_context
            + s.drop_after_finalize
            + s.drop_null_descr;
        assert_eq!(s.live, 0, "{}: live after finalize", p.label);
        assert_eq!(
            s.start_calls,
            c.total_starts(),
            "{}: plugin saw every start",
            p.label
        );
        assert_eq!(
            s.start_calls,
            s.completed + drops,
            "{}: issued = completed + drops",
            p.label
        );
        assert_eq!(s.drop_ring_full, 0, "{}: ring sized for CI", p.label);
        assert_eq!(s.panics, 0, "{}", p.label);
        assert_eq!(
            p.trace.coll_p2p(),
            c.coll_p2p_accepted(),
            "{}: every accepted Coll/P2p is in the trace",
            p.label
        );
        assert_eq!(
            p.trace.link_errors, 0,
            "{}: {:?}",
            p.label, p.trace.link_examples
        );
        assert_eq!(p.trace.unterminated, 0, "{}: files closed", p.label);
        assert_eq!(p.trace.bad_lines, 0, "{}: trace parses", p.label);
    }
}
