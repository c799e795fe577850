//! libFuzzer target: the seeded chaos generator of `tests/chaos.rs`
//! (`evring_sim::chaos`), fed by the fuzzer's bytes instead of a seed, against
//! the shim's C ABI (tables v2 to v6).
//!
//! The shim is linked in as an rlib, so its code is coverage-instrumented and
//! libFuzzer steers towards new paths in it. The simulator's `Plugin` loads the
//! tables from this very binary (`dlopen("")`, see `build.rs`), so every call
//! goes through the same version conversions NCCL applies. A second instance,
//! the release `.so` (`EVRING_PLUGIN`, default `../target/release/libevring_shim.so`,
//! optional), supplies foreign handles and contexts.
//!
//! Input: byte 0 picks one or two communicators, the table version (v2 to
//! v6), the finalize order, an `evring_flush` before finalizing and the
//! number of calls (32 to 80); byte 1 the activation mask; the rest are the
//! chaos words (zeros once exhausted). After each input every communicator is
//! finalized and the counters must balance exactly: nothing live, every start
//! either started or dropped with a reason, every started event completed,
//! every completion consumed or counted as a ring drop, no panic caught.
//! A panic anywhere (even one the shim would catch) aborts: libfuzzer-sys
//! installs an aborting panic hook.
#![no_main]

use evring_shim::abi::{ty, DescrV6, GroupApiV5};
use evring_shim::StatsV1;
use evring_sim::chaos::{self, Bytes};
use evring_sim::plugin::Plugin;
use libfuzzer_sys::fuzz_target;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI32;
use std::sync::OnceLock;

/// The oldest table driven (see the version choice below).
const FIRST: usize = 2;

/// The mask NCCL would pass to every `init` (one int per process).
static MASK: AtomicI32 = AtomicI32::new(0);
/// A second mask for the peer instance.
static PEER_MASK: AtomicI32 = AtomicI32::new(0);

struct World {
    /// Index `v - FIRST`: this binary's `ncclProfiler_vN`, N = FIRST..=6, through `Plugin`.
    tables: Vec<Plugin>,
    /// Handles and contexts of another instance (or made-up values).
    foreign: Vec<u64>,
    /// Keeps the peer instance loaded.
    _peer: Option<Plugin>,
    comm: std::sync::atomic::AtomicU64,
}

fn stats() -> StatsV1 {
    let mut s = StatsV1::default();
    // SAFETY: `s` is a writable StatsV1 of the size passed.
    let n = unsafe { evring_shim::exports::evring_stats(&mut s, std::mem::size_of::<StatsV1>()) };
    assert_eq!(n, std::mem::size_of::<StatsV1>());
    s
}

fn init(p: &Plugin, mask: &AtomicI32, comm_id: u64, rank: c_int) -> u64 {
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer, a static mask, a static name.
    let rc = unsafe {
        p.init(
            &mut ctx,
            comm_id,
            mask.as_ptr(),
            c"fuzz-comm".as_ptr(),
            1,
            2,
            rank,
            None,
        )
    };
    assert_eq!(rc, 0);
    ctx as u64
}

fn peer_values() -> (Option<Plugin>, Vec<u64>) {
    let path = std::env::var_os("EVRING_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/libevring_shim.so")
        });
    // Made-up values when there is no peer: they are at least not ours.
    let made_up = vec![0x0123_4567_89ab_cdef, 0xff00_0000_0001, 0x10_0000_0001];
    let Ok(peer) = Plugin::open_isolated(&path, None) else {
        eprintln!(
            "abi_chaos: no peer plugin at {} (build it with `cargo build --release -p evring-shim`); \
             using made-up foreign values",
            path.display()
        );
        return (None, made_up);
    };
    let ctx = init(&peer, &PEER_MASK, 0xf00d, 1);
    let mut foreign = vec![ctx];
    for _ in 0..8 {
        let mut d = DescrV6::zeroed();
        d.ty = ty::GROUP_API;
        d.u.group_api = GroupApiV5 {
            graph_captured: false,
            group_depth: 1,
        };
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer and descriptor; the context is initialised
        // and never finalized (its events stay live as foreign parents).
        unsafe { peer.start(ctx as *mut c_void, &mut h, &d) };
        foreign.push(h as u64);
    }
    (Some(peer), foreign)
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        // Read by each instance at its first init: counters only, no files, a
        // small slab so that "slab full" is reachable within one input.
        std::env::set_var("NCCL_PROFILE_DUMP_FILE", "");
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", "0x7fff");
        std::env::set_var("EVRING_CAPACITY", "256");
        std::env::set_var("EVRING_RING", "1024");
        std::env::remove_var("EVRING_RECORD");
        std::env::remove_var("EVRING_DISABLE");
        // Keep the tables linked (they are only reached through dlsym).
        std::hint::black_box((
            &evring_shim::exports::ncclProfiler_v2,
            &evring_shim::exports::ncclProfiler_v3,
            &evring_shim::exports::ncclProfiler_v4,
            &evring_shim::exports::ncclProfiler_v5,
            &evring_shim::exports::ncclProfiler_v6,
        ));
        let tables = (FIRST as u32..=6)
            .map(|v| {
                // An empty path is dlopen(""): this executable.
                Plugin::open(Path::new(""), Some(v)).unwrap_or_else(|e| {
                    panic!("ncclProfiler_v{v} not exported by the fuzz binary: {e}")
                })
            })
            .collect();
        let (peer, foreign) = peer_values();
        World {
            tables,
            foreign,
            _peer: peer,
            comm: std::sync::atomic::AtomicU64::new(1),
        }
    })
}

fn check(s: &StatsV1) {
    assert_eq!(s.live, 0, "live events with no communicator left: {s:?}");
    let drops = s.drop_slab_full
        + s.drop_unknown_type
        + s.drop_null_context
        + s.drop_after_finalize
        + s.drop_null_descr;
    assert_eq!(s.start_calls, s.started + drops, "start accounting: {s:?}");
    assert_eq!(s.started, s.completed, "started but not completed: {s:?}");
    assert_eq!(
        s.completed,
        s.records_consumed + s.drop_ring_full,
        "ring accounting: {s:?}"
    );
    assert_eq!(s.panics, 0, "panic caught in the shim: {s:?}");
}

/// Activation masks an input can choose (the mask decides which children a
/// Coll/P2p or API event expects, hence which events wait or are forced).
const MASKS: [c_int; 8] = [0x7fff, 0xfff, 70, 6, 0x5e, 0x40, 0x1f, 0];

fuzz_target!(|data: &[u8]| {
    let w = world();
    let (cfg, mask_sel, rest) = match data {
        [a, b, rest @ ..] => (*a, *b, rest),
        [a] => (*a, 0, &[][..]),
        [] => (0, 0, &[][..]),
    };
    // v2 to v6 (v6 for half the inputs). Not v1: NCCL's v1 adapter (and the
    // simulator's copy of it) turns the descriptor's strings into codes with
    // strcmp, i.e. the caller itself reads them, so the chaos generator's
    // unreadable string pointers fault before the plugin is reached.
    let version = match (cfg >> 1) % 8 {
        0 => 2,
        1 => 3,
        2 => 4,
        3 => 5,
        _ => 6,
    };
    let p = &w.tables[version - FIRST];
    let ncomms = 1 + (cfg & 1) as usize;
    let reverse = cfg & 0x10 != 0;
    let flush_first = cfg & 0x20 != 0;
    let ops = 32 + (cfg >> 6) as usize * 16;

    let before = stats();
    // Set on every input, so an input behaves the same whatever ran before.
    evring_shim::exports::evring_set_mask(MASKS[mask_sel as usize % MASKS.len()]);
    let ctxs: Vec<u64> = (0..ncomms)
        .map(|r| {
            let id = w.comm.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            init(p, &MASK, id, r as c_int)
        })
        .collect();
    assert!(ctxs.iter().all(|&c| c != 0), "init gave a NULL context");
    let mut src = Bytes(rest);
    // SAFETY: the contexts stay initialised until `run` returns.
    let made = unsafe { chaos::run(p, &ctxs, &w.foreign, &mut src, ops) };
    if flush_first {
        evring_shim::exports::evring_flush();
    }
    let order: Vec<u64> = if reverse {
        ctxs.iter().rev().copied().collect()
    } else {
        ctxs.clone()
    };
    for c in order {
        // SAFETY: a context this instance returned, finalized once.
        assert_eq!(unsafe { p.finalize(c as *mut c_void) }, 0);
    }
    let after = stats();
    check(&after);
    let calls = after.start_calls - before.start_calls;
    if version == 6 {
        assert_eq!(calls, made.starts, "every start seen: {after:?}");
    } else {
        // Older tables are not given some types (NCCL's adapters drop them).
        assert!(calls <= made.starts, "{after:?}");
    }
    assert_eq!(after.inits - before.inits, ncomms as u64);
    assert_eq!(after.finalizes - before.finalizes, ncomms as u64);
});
