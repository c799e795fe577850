//! Diagnostic build only (`--cfg evring_ablate="selftime"`; a normal build
//! has none of this): the time the host threads spend inside the plugin's
//! entry points, measured with the TSC around each call, so that a real job's
//! per-operation plugin time (caches as the job leaves them) can be read
//! directly instead of inferred from job-to-job timings.
//!
//! Calls are binned by the mask in force (0, 6, 70, 4095, other), by the
//! calling thread's class (the size of the last Coll it started: up to 64 Ki
//! elements or more; threads that never started one, NCCL's proxy threads,
//! apart) and by entry (start per event type, stop, recordEventState). At
//! process exit, and at the last finalize, each process appends its bins to
//! the file named by `EVRING_SELFTIME` (nothing if unset):
//! `pid mask class entry calls ns_total` per line.

use crate::clock::{monotonic_ns, rdtsc};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

const MASKS: [i32; 4] = [0, 6, 70, 4095];
const CLASSES: usize = 3;
/// A start per type (its bit's position, 0..15), a start of no known type,
/// stop, record.
const ENTRIES: usize = 18;
const UNKNOWN: usize = 15;
pub const STOP: usize = 16;
pub const RECORD: usize = 17;

#[repr(align(64))]
struct Bin {
    calls: AtomicU64,
    cycles: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Bin = Bin {
    calls: AtomicU64::new(0),
    cycles: AtomicU64::new(0),
};
static BINS: [Bin; (MASKS.len() + 1) * CLASSES * ENTRIES] =
    [EMPTY; (MASKS.len() + 1) * CLASSES * ENTRIES];

thread_local! {
    static CLASS: Cell<u8> = const { Cell::new(2) };
}

/// (TSC, monotonic ns) at the first timed call: the calibration's start.
static T0: OnceLock<(u64, u64)> = OnceLock::new();

/// Entry index of a start from its descriptor's `(type, Coll count)` (the
/// count is read whatever the type; used only for a Coll), `None` for a
/// NULL descriptor. A Coll start also sets the thread's class.
pub fn start_entry(d: Option<(u64, u64)>) -> usize {
    let Some((ty, count)) = d else {
        return UNKNOWN;
    };
    if ty == crate::abi::ty::COLL {
        let _ = CLASS.try_with(|c| c.set(u8::from(count > 65536)));
    }
    if ty.count_ones() == 1 && (ty.trailing_zeros() as usize) < UNKNOWN {
        ty.trailing_zeros() as usize
    } else {
        UNKNOWN
    }
}

/// Runs `f`, adding its time to the bin of `entry`.
#[inline(always)]
pub fn timed<R>(entry: usize, f: impl FnOnce() -> R) -> R {
    T0.get_or_init(|| (rdtsc(), monotonic_ns()));
    let t = rdtsc();
    let r = f();
    let dt = rdtsc().wrapping_sub(t);
    let mask = crate::engine::Engine::try_get().map_or(-1, |e| e.mask());
    let m = MASKS.iter().position(|&x| x == mask).unwrap_or(MASKS.len());
    let class = CLASS.try_with(Cell::get).unwrap_or(2) as usize;
    let b = &BINS[(m * CLASSES + class) * ENTRIES + entry];
    b.calls.fetch_add(1, Relaxed);
    b.cycles.fetch_add(dt, Relaxed);
    r
}

/// Appends this process's bins to `EVRING_SELFTIME` (once a call; the bins
/// are cumulative, the reader takes each pid's last dump).
pub fn dump() {
    let Some(path) = std::env::var_os("EVRING_SELFTIME") else {
        return;
    };
    let Some(&(c0, n0)) = T0.get() else { return };
    let (c1, n1) = (rdtsc(), monotonic_ns());
    let per_ns = (c1 - c0) as f64 / (n1 - n0).max(1) as f64;
    let pid = std::process::id();
    let mut s = format!("dump {pid} {per_ns:.4}\n");
    for (i, b) in BINS.iter().enumerate() {
        let calls = b.calls.load(Relaxed);
        if calls == 0 {
            continue;
        }
        let (m, rest) = (i / (CLASSES * ENTRIES), i % (CLASSES * ENTRIES));
        let mask = MASKS.get(m).map_or(-1, |&x| x);
        let ns = b.cycles.load(Relaxed) as f64 / per_ns;
        s += &format!(
            "{pid} {mask} {} {} {calls} {ns:.0}\n",
            rest / ENTRIES,
            rest % ENTRIES
        );
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(s.as_bytes());
    }
}
