//! # evring-meter
//!
//! An NCCL profiler plugin that measures another one: it exports `ncclProfiler_v4` to
//! `ncclProfiler_v7`, loads the plugin named by `EVRING_METER_PLUGIN` (or a built-in null
//! plugin) at its first init, forwards every call to that plugin's table of the same
//! version, and times each forwarded call with two TSC reads. The time is accounted per
//! calling thread, per function and per event type, and reported at the last finalize and
//! at process exit (docs/meter.md).
//!
//! Contexts and handles are the inner plugin's own, passed through untouched.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod clock;
pub mod handles;
pub mod inner;
pub mod report;
pub mod stats;

use evring_abi::{InitV4, InitV5, Logger, NcclResult, NCCL_SUCCESS};
use inner::{FinalizeFn, Init, Inner, RecordFn, StartFn, StopFn};
use stats::{F_FINALIZE, F_INIT, F_RECORD, F_START, F_STOP, T_NONE};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// The table name NCCL logs.
pub const NAME: &std::ffi::CStr = c"evring-meter";

/// The inner plugin, or why there is none; loaded at the first init.
static INNER: OnceLock<Result<Inner, String>> = OnceLock::new();
/// Inits that returned success with a non-NULL context, minus finalizes.
static LIVE: AtomicI64 = AtomicI64::new(0);
/// Init calls forwarded.
pub(crate) static INITS: AtomicU64 = AtomicU64::new(0);
/// Finalize calls forwarded.
pub(crate) static FINALIZES: AtomicU64 = AtomicU64::new(0);
/// The activation mask as the inner plugin left it at its last init.
pub(crate) static MASK: AtomicI64 = AtomicI64::new(0);

/// The inner plugin, once loaded successfully.
#[inline]
pub(crate) fn inner() -> Option<&'static Inner> {
    INNER.get().and_then(|r| r.as_ref().ok())
}

/// Runs `f`, turning a panic into `fallback` (no panic crosses the C ABI).
#[inline]
fn guard<R>(fallback: impl FnOnce() -> R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| fallback())
}

/// The inner plugin for a call through version `version`: loads it at the first init,
/// says once on stderr why there is none.
fn inner_for(version: u32) -> Option<&'static Inner> {
    static SAID: std::sync::Once = std::sync::Once::new();
    let r = INNER.get_or_init(|| {
        inner::load(version).map_err(|e| {
            let path = std::env::var("EVRING_METER_PLUGIN").unwrap_or_default();
            format!("cannot use inner plugin {path:?} as ncclProfiler_v{version}: {e}")
        })
    });
    let why = match r {
        Ok(i) if i.version == version => return Some(i),
        Ok(i) => format!(
            "called through ncclProfiler_v{version} after ncclProfiler_v{}",
            i.version
        ),
        Err(e) => e.clone(),
    };
    SAID.call_once(|| eprintln!("evring-meter: {why}; profiling disabled"));
    None
}

/// Everything an init does around the timed call, which `call` makes.
///
/// # Safety
/// `ctx` and `mask` are NULL or valid for writes (NCCL's contract).
unsafe fn init_common(
    version: u32,
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    call: impl FnOnce(&Inner) -> NcclResult,
) -> NcclResult {
    let null_ctx = || {
        if !ctx.is_null() {
            // SAFETY: `ctx` is valid for writes (caller).
            unsafe { *ctx = std::ptr::null_mut() };
        }
        NCCL_SUCCESS
    };
    guard(null_ctx, || {
        // Outside the timed window: calibration, this thread's block, the exit hook.
        clock::calibrate();
        stats::touch();
        report::register_exit();
        let Some(inner) = inner_for(version) else {
            return null_ctx();
        };
        let r = timed(F_INIT, T_NONE, || call(inner));
        INITS.fetch_add(1, Relaxed);
        if !mask.is_null() {
            // SAFETY: `mask` is valid (caller).
            MASK.store(i64::from(unsafe { *mask }), Relaxed);
        }
        // SAFETY: `ctx` is valid (caller).
        if r == NCCL_SUCCESS && !ctx.is_null() && !unsafe { *ctx }.is_null() {
            LIVE.fetch_add(1, Relaxed);
        }
        r
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: Logger,
) -> NcclResult {
    // SAFETY: NCCL's arguments, passed on as received.
    unsafe {
        init_common(4, ctx, mask, |i| match i.init {
            Init::V4(f) => f(
                ctx, mask, comm_name, comm_hash, n_nodes, nranks, rank, logfn,
            ),
            Init::V5(_) => NCCL_SUCCESS,
        })
    }
}

/// Defines the init of a version whose init has v5's shape.
macro_rules! init_v5_shape {
    ($fn:ident, $v:expr) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $fn(
            ctx: *mut *mut c_void,
            comm_id: u64,
            mask: *mut c_int,
            comm_name: *const c_char,
            n_nodes: c_int,
            nranks: c_int,
            rank: c_int,
            logfn: Logger,
        ) -> NcclResult {
            // SAFETY: NCCL's arguments, passed on as received.
            unsafe {
                init_common($v, ctx, mask, |i| match i.init {
                    Init::V5(f) => f(ctx, comm_id, mask, comm_name, n_nodes, nranks, rank, logfn),
                    Init::V4(_) => NCCL_SUCCESS,
                })
            }
        }
    };
}
init_v5_shape!(init_v5, 5);
init_v5_shape!(init_v6, 6);
init_v5_shape!(init_v7, 7);

unsafe extern "C" fn start_event(
    ctx: *mut c_void,
    h: *mut *mut c_void,
    d: *mut c_void,
) -> NcclResult {
    guard(
        || NCCL_SUCCESS,
        || {
            let Some(i) = inner() else {
                if !h.is_null() {
                    // SAFETY: NCCL passes a writable handle slot.
                    unsafe { *h = std::ptr::null_mut() };
                }
                return NCCL_SUCCESS;
            };
            // SAFETY: `d` is NCCL's descriptor of the version `i` was loaded for.
            let t = unsafe { inner::descr_slot(i.version, d) };
            // SAFETY: the inner plugin's startEvent, with NCCL's arguments.
            let r = timed(F_START, t, || unsafe { (i.start)(ctx, h, d) });
            if !i.null && r == NCCL_SUCCESS && !h.is_null() {
                // SAFETY: `h` is writable, so readable, and the inner has just set it.
                handles::insert(unsafe { *h } as usize, t);
            }
            r
        },
    )
}

/// Runs `call` (one forwarded call) between two clock reads and adds its
/// time to function `f`, type `t` of the calling thread.
#[inline(always)]
fn timed(f: usize, t: usize, call: impl FnOnce() -> NcclResult) -> NcclResult {
    let m = clock::mult();
    let t0 = clock::ticks();
    let r = call();
    let t1 = clock::ticks();
    stats::add(f, t, clock::to_ns(t1.wrapping_sub(t0), m));
    r
}

unsafe extern "C" fn stop_event(h: *mut c_void) -> NcclResult {
    guard(
        || NCCL_SUCCESS,
        || {
            let Some(i) = inner() else {
                return NCCL_SUCCESS;
            };
            let t = if i.null {
                inner::null_slot(h)
            } else {
                handles::remove(h as usize)
            };
            // SAFETY: the inner plugin's stopEvent, with NCCL's argument.
            timed(F_STOP, t, || unsafe { (i.stop)(h) })
        },
    )
}

unsafe extern "C" fn record_event_state(
    h: *mut c_void,
    state: c_int,
    args: *mut c_void,
) -> NcclResult {
    guard(
        || NCCL_SUCCESS,
        || {
            let Some(i) = inner() else {
                return NCCL_SUCCESS;
            };
            let t = if i.null {
                inner::null_slot(h)
            } else {
                handles::get(h as usize)
            };
            // SAFETY: the inner plugin's recordEventState, with NCCL's arguments.
            timed(F_RECORD, t, || unsafe { (i.record)(h, state, args) })
        },
    )
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    guard(
        || NCCL_SUCCESS,
        || {
            let Some(i) = inner() else {
                return NCCL_SUCCESS;
            };
            // SAFETY: the inner plugin's finalize, with NCCL's context.
            let r = timed(F_FINALIZE, T_NONE, || unsafe { (i.finalize)(ctx) });
            FINALIZES.fetch_add(1, Relaxed);
            if LIVE.fetch_sub(1, Relaxed) == 1 {
                report::write("finalize");
            }
            r
        },
    )
}

/// A `ncclProfiler_vN` table: `name` and five function pointers.
#[repr(C)]
pub struct Table<I> {
    pub name: *const c_char,
    pub init: I,
    pub start_event: StartFn,
    pub stop_event: StopFn,
    pub record_event_state: RecordFn,
    pub finalize: FinalizeFn,
}

// SAFETY: the tables are immutable; `name` points at a static C string any thread may
// read, and function pointers are Sync.
unsafe impl<I> Sync for Table<I> {}

const _: () = {
    assert!(std::mem::size_of::<Table<InitV5>>() == 48);
    assert!(std::mem::size_of::<Table<InitV4>>() == 48);
};

/// Builds the table of one version.
macro_rules! table {
    ($init:expr) => {
        Table {
            name: NAME.as_ptr(),
            init: $init,
            start_event,
            stop_event,
            record_event_state,
            finalize,
        }
    };
}

/// `ncclProfiler_v4` (NCCL 2.27).
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v4: Table<InitV4> = table!(init_v4);
/// `ncclProfiler_v5` (NCCL 2.28).
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v5: Table<InitV5> = table!(init_v5);
/// `ncclProfiler_v6` (NCCL 2.29, 2.30).
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v6: Table<InitV5> = table!(init_v6);
/// `ncclProfiler_v7` (NCCL 2.31 and later): v6's init and function shapes, with a
/// longer descriptor whose `type` is still its first field.
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v7: Table<InitV5> = table!(init_v7);
