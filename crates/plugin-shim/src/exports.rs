//! The C entry points NCCL (and the simulator) call: the `ncclProfiler_vN`
//! tables and evring's own control functions.
//!
//! Every entry point catches panics, always writes `*eHandle` (the ID, or
//! NULL when dropping) and always returns `ncclSuccess`: a profiler must never
//! make NCCL fail or unwind into C.

use crate::abi::*;
use crate::convert;
use crate::counters::StatsV1;
use crate::engine::Engine;
use crate::writer::StreamMeta;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

const NAME: *const c_char = c"evring".as_ptr();

/// Runs `f`, turning a panic into a counted no-op.
#[inline]
fn guarded(f: impl FnOnce()) -> NcclResult {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        if let Some(e) = Engine::try_get() {
            e.counters.panics.incr();
        }
    }
    NCCL_SUCCESS
}

#[allow(clippy::too_many_arguments)]
fn init_common(
    context: *mut *mut c_void,
    mask: *mut c_int,
    meta: StreamMeta,
    logfn: Logger,
) -> NcclResult {
    guarded(|| {
        if context.is_null() {
            return;
        }
        // Write NULL first: if anything below panics, NCCL sees "disabled".
        // SAFETY: NCCL passes a valid out-pointer; checked non-null above.
        unsafe { context.write(std::ptr::null_mut()) };
        let (comm_id, rank) = (meta.comm_id, meta.rank);
        crate::config::remember_nccl_mask(mask);
        let id = Engine::get().init(mask, meta, logfn);
        crate::recorder::init(id, comm_id, rank, mask);
        // SAFETY: as above.
        unsafe { context.write(id as *mut c_void) };
    })
}

fn meta(
    abi: u32,
    comm_id: u64,
    name: *const c_char,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
) -> StreamMeta {
    StreamMeta {
        comm_id,
        rank,
        nranks,
        nnodes: n_nodes,
        name: crate::strings::read_long(name, 256),
        abi,
    }
}

macro_rules! init_v5_like {
    ($fn:ident, $abi:literal) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $fn(
            context: *mut *mut c_void,
            comm_id: u64,
            mask: *mut c_int,
            comm_name: *const c_char,
            n_nodes: c_int,
            nranks: c_int,
            rank: c_int,
            logfn: Logger,
        ) -> NcclResult {
            init_common(
                context,
                mask,
                meta($abi, comm_id, comm_name, n_nodes, nranks, rank),
                logfn,
            )
        }
    };
}
init_v5_like!(init_v5, 5);
init_v5_like!(init_v6, 6);
init_v5_like!(init_v7, 7);

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    context: *mut *mut c_void,
    mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: Logger,
) -> NcclResult {
    init_common(
        context,
        mask,
        meta(4, comm_hash, comm_name, n_nodes, nranks, rank),
        logfn,
    )
}

unsafe extern "C" fn init_v1(context: *mut *mut c_void, mask: *mut c_int) -> NcclResult {
    init_common(context, mask, meta(1, 0, std::ptr::null(), 0, 0, 0), None)
}

/// One `startEvent` per descriptor version: convert, then hand to the engine.
macro_rules! start_fn {
    ($fn:ident, $descr:ty, $convert:path) => {
        unsafe extern "C" fn $fn(
            context: *mut c_void,
            handle: *mut *mut c_void,
            descr: *mut $descr,
        ) -> NcclResult {
            guarded(|| {
                // No engine: no init yet (or a forked child that has not
                // called init): nothing can be valid.
                let engine = Engine::try_get();
                if handle.is_null() {
                    if let Some(e) = engine {
                        e.counters.null_handles.incr();
                    }
                    return;
                }
                // SAFETY: NCCL passes a valid out-pointer; checked non-null.
                unsafe { handle.write(std::ptr::null_mut()) };
                let Some(engine) = engine else { return };
                let id = if descr.is_null() {
                    engine.counters.drop_null_descr.incr();
                    0
                } else if engine.strict_mask()
                    // SAFETY: a non-null descriptor of this version, for the
                    // duration of the call; `ty` is an integer field.
                    && !engine.wants(u64::from(unsafe { (*descr).ty }))
                {
                    // Outside the mask and the mask is honoured: NULL before
                    // anything is converted (NCCL's first calls of an
                    // operation, so the cheapest answer matters).
                    engine.masked_start();
                    // SAFETY: as above.
                    unsafe { crate::recorder::start(context as u64, descr, None, 0) };
                    0
                } else {
                    engine.start(
                        context as u64,
                        // SAFETY: non-null descriptors point to NCCL's
                        // descriptor of this version for the duration of the call.
                        |memo| unsafe { $convert(descr, memo) },
                        // Logged before NCCL can see (and pass on) the handle.
                        // SAFETY: as above.
                        |arg, id| unsafe { crate::recorder::start(context as u64, descr, arg, id) },
                    )
                };
                // SAFETY: as above.
                unsafe { handle.write(id as *mut c_void) };
            })
        }
    };
}
start_fn!(start_v7, DescrV7, convert::start_v7);
start_fn!(start_v6, DescrV6, convert::start_v6);
start_fn!(start_v4, DescrV4, convert::start_v4);
start_fn!(start_v3, DescrV3, convert::start_v3);
start_fn!(start_v2, DescrV2, convert::start_v2);
start_fn!(start_v1, DescrV1, convert::start_v1);

unsafe extern "C" fn stop(handle: *mut c_void) -> NcclResult {
    guarded(|| {
        crate::recorder::stop(handle as u64);
        if let Some(e) = Engine::try_get() {
            e.stop(handle as u64)
        }
    })
}

/// One `recordEventState` per state-args version: convert, then hand to the engine.
macro_rules! record_fn {
    ($fn:ident, $args:ty, $convert:path) => {
        unsafe extern "C" fn $fn(
            handle: *mut c_void,
            state: State,
            args: *mut $args,
        ) -> NcclResult {
            guarded(|| {
                // SAFETY: args is NULL or NCCL's state-args union of this
                // version (8 bytes from v4, 16 before) for this call.
                unsafe { crate::recorder::rec(handle as u64, state, args.cast()) };
                if let Some(e) = Engine::try_get() {
                    // SAFETY: as above.
                    e.record(handle as u64, unsafe { $convert(state, args) })
                }
            })
        }
    };
}
record_fn!(record_v4, StateArgsV4, convert::state_v4);
record_fn!(record_v1, StateArgsV1, convert::state_v1);

unsafe extern "C" fn finalize(context: *mut c_void) -> NcclResult {
    guarded(|| {
        crate::recorder::fin(context as u64);
        if let Some(e) = Engine::try_get() {
            e.finalize(context as u64);
        }
        crate::recorder::nudge();
    })
}

/// NCCL 2.31 and later. The v7 state args have v4's layout (the
/// KernelPhase stop reuses the `kernelCh` member), so `record_v4` serves.
#[no_mangle]
#[used]
pub static ncclProfiler_v7: ProfilerV7 = ProfilerV7 {
    name: NAME,
    init: init_v7,
    start_event: start_v7,
    stop_event: stop,
    record_event_state: record_v4,
    finalize,
};

#[no_mangle]
#[used]
pub static ncclProfiler_v6: ProfilerV6 = ProfilerV6 {
    name: NAME,
    init: init_v6,
    start_event: start_v6,
    stop_event: stop,
    record_event_state: record_v4,
    finalize,
};

#[no_mangle]
#[used]
pub static ncclProfiler_v5: ProfilerV5 = ProfilerV5 {
    name: NAME,
    init: init_v5,
    start_event: start_v6,
    stop_event: stop,
    record_event_state: record_v4,
    finalize,
};

#[no_mangle]
#[used]
pub static ncclProfiler_v4: ProfilerV4 = ProfilerV4 {
    name: NAME,
    init: init_v4,
    start_event: start_v4,
    stop_event: stop,
    record_event_state: record_v4,
    finalize,
};

#[no_mangle]
#[used]
pub static ncclProfiler_v3: ProfilerV3 = ProfilerV3 {
    name: NAME,
    init: init_v1,
    start_event: start_v3,
    stop_event: stop,
    record_event_state: record_v1,
    finalize,
};

#[no_mangle]
#[used]
pub static ncclProfiler_v2: ProfilerV2 = ProfilerV2 {
    name: NAME,
    init: init_v1,
    start_event: start_v2,
    stop_event: stop,
    record_event_state: record_v1,
    finalize,
};

#[no_mangle]
#[used]
pub static ncclProfiler_v1: ProfilerV1 = ProfilerV1 {
    name: NAME,
    init: init_v1,
    start_event: start_v1,
    stop_event: stop,
    record_event_state: record_v1,
    finalize,
};

/// Copies the counters into `out` (at most `size` bytes of `StatsV1`);
/// returns the number of bytes written, or 0 if `out` is NULL.
///
/// # Safety
/// `out` is NULL or points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn evring_stats(out: *mut StatsV1, size: usize) -> usize {
    let mut written = 0;
    guarded(|| {
        if out.is_null() {
            return;
        }
        // Never builds the engine: that would take its settings from the
        // environment of this moment rather than that of the first init (a
        // monitor polling before init got the default trace prefix).
        let s = Engine::try_get().map_or_else(
            || crate::counters::Counters::default().snapshot(0, 0, 0),
            Engine::stats,
        );
        let n = size.min(std::mem::size_of::<StatsV1>());
        // SAFETY: the caller provides `size` writable bytes; we copy at most
        // that many from a local.
        unsafe {
            std::ptr::copy_nonoverlapping((&s as *const StatsV1).cast::<u8>(), out.cast::<u8>(), n)
        };
        written = n;
    });
    written
}

/// Sets the activation mask for this process (applies to operations NCCL
/// enqueues afterwards; ProxyCtrl reacts at once). Before the first init the
/// value is kept and applied by that init.
#[no_mangle]
pub extern "C" fn evring_set_mask(mask: c_int) {
    let mask = crate::config::with_implied(mask);
    guarded(|| match Engine::try_get() {
        Some(e) => e.set_mask(mask),
        None => crate::config::set_pending_mask(mask),
    });
}

/// The activation mask in force (before the first init: the one it will use).
#[no_mangle]
pub extern "C" fn evring_get_mask() -> c_int {
    let mut m = 0;
    guarded(|| m = Engine::try_get().map_or_else(crate::config::pending_or_env_mask, Engine::mask));
    m
}

/// Starts (non-zero) or stops (0) writing trace files; events are still
/// tracked and counted while stopped. Before the first init the value is kept
/// and applied by that init.
#[no_mangle]
pub extern "C" fn evring_set_output(enabled: c_int) {
    guarded(|| match Engine::try_get() {
        Some(e) => e.writer.set_enabled(enabled != 0),
        None => crate::config::set_pending_output(enabled != 0),
    });
}

/// Has the writer thread write every record completed so far and flush every
/// open trace file, and waits for it while it makes progress: a stalled output
/// (full NFS server) is given up on after 1 s without progress. Never takes
/// a lock the writer holds during I/O. For a fixed budget use
/// `evring_flush_wait`.
#[no_mangle]
pub extern "C" fn evring_flush() {
    guarded(|| {
        if let Some(e) = Engine::try_get() {
            e.writer.flush_progress();
        }
        crate::recorder::flush();
    });
}

/// As `evring_flush`, then waits up to `timeout_ms` for the writer to finish
/// it. Returns 1 if everything completed before the call is written and
/// flushed (or there is nothing to write: no init yet), 0 on timeout (the
/// output is slow or blocked).
#[no_mangle]
pub extern "C" fn evring_flush_wait(timeout_ms: c_int) -> c_int {
    let mut ok = 1;
    guarded(|| {
        if let Some(e) = Engine::try_get() {
            let budget = std::time::Duration::from_millis(timeout_ms.max(0) as u64);
            ok = c_int::from(e.writer.flush(budget));
        }
        crate::recorder::flush();
    });
    ok
}

/// Version string of this plugin build.
#[no_mangle]
pub extern "C" fn evring_version() -> *const c_char {
    concat!("evring ", env!("CARGO_PKG_VERSION"), "\0")
        .as_ptr()
        .cast()
}
