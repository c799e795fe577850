//! The four recorded NCCL 2.28.9 logs replayed through our shim: no leak after the
//! replayer's final finalize, nothing uncounted, every Coll/P2p in the trace, every
//! KernelCh/ProxyOp linked to its Coll/P2p by ID.

mod common;

use common::{assert_exact, params};

fn replay(name: &str) -> evring_sim::report::Outcome {
    let log = evring_sim::fixtures_dir().join(name);
    let o = evring_sim::replay::replay(&log, &params()).unwrap_or_else(|e| panic!("{e}"));
    assert_exact(&o);
    assert!(
        o.notes.iter().all(|n| !n.contains("no START")),
        "{:?}",
        o.notes
    );
    o
}

#[test]
fn a655_p2p_transport() {
    let o = replay("A655.log");
    let t = o.trace();
    assert_eq!(t.cat("Coll") + t.cat("P2p"), o.counts().coll_p2p());
    assert!(t.cat("KernelCh") > 0 && t.linked >= t.cat("KernelCh"));
}

#[test]
fn a656_p2p_transport() {
    replay("A656.log");
}

#[test]
fn b861_socket_transport() {
    let o = replay("B861.log");
    let t = o.trace();
    // 16 ProxyOps and 352 ProxySteps over both ranks (ABI doc §3.12).
    assert!(t.cat("ProxyOp") > 0 && t.cat("ProxyStep") > 0);
    assert!(t.linked >= t.cat("ProxyOp") + t.cat("KernelCh"));
}

#[test]
fn b862_socket_transport() {
    replay("B862.log");
}
