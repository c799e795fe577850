//! `EVRING_WRITER_NICE`: the release plugin's writer thread lowers its own
//! priority to the nice value given, and keeps the process's without it.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Nice values of this process's threads named `evring-writer`
/// (`/proc/self/task/*/stat`: field 19, counted after the name's `)`).
fn writer_nices() -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != "evring-writer" {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        // After the name: state (3), ppid (4), ... nice is field 19.
        if let Some(n) = after.split_whitespace().nth(19 - 3) {
            out.push(n.parse().unwrap());
        }
    }
    out.sort_unstable();
    out
}

#[test]
fn the_writer_thread_takes_the_nice_value_given() {
    // Two plugin copies, two engines, two writers: one at nice 7, one unset.
    let (a, ca) = Inst::new("nice7", None, &[("EVRING_WRITER_NICE", "7")], &[(1, 0)]);
    let (b, cb) = Inst::new("nice0", None, &[], &[(2, 0)]);
    // The writer sets its priority as it starts: wait for it.
    let t0 = Instant::now();
    while writer_nices() != [0, 7] && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(writer_nices(), [0, 7]);
    a.fin(ca[0]);
    b.fin(cb[0]);
    assert_balanced(&a.stats());
    assert_balanced(&b.stats());
}
