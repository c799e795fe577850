//! Loads a profiler plugin library and calls it through its C ABI the way NCCL does.
//!
//! NCCL's core speaks v7 (2.31 and later; v6 before). When a plugin exports an older table,
//! a per-version shim (`src/plugin/profiler/profiler_vN.cc`) converts every call; [`Plugin`]
//! reproduces those shims, quirks included (`docs/nccl-profiler-abi.md` §1.4):
//!
//! * v6 (NCCL 2.31's adapter): a zeroed v6 descriptor with the v7-only fields dropped;
//!   KernelPhase events and state 31 are not passed, the KernelPhase bit is cleared from
//!   the activation mask after `init`, and the state args are a zeroed local, passed even
//!   where NCCL has none. The older versions get the v6 descriptor converted further, as
//!   NCCL 2.30's shims did.
//! * v7 gets the core's descriptor as it is; after `init` a KernelPhase bit in the mask
//!   turns KernelCh on (NCCL's `ncclProfilerEnforceMaskDeps`).
//!
//! * Which event types and states each version is given. Coll/P2p `parentObj` becomes the
//!   Group handle (`parentGroup`) for v1–v4, and v1 gets numeric codes instead of strings.
//! * The v4 and v5 shims build their descriptor and state args in uninitialised locals, so
//!   every byte NCCL does not assign (padding, other union members, the v4 `p2p.nChannels`
//!   it never copies, the args of states 19, 23 and 24) is stack garbage. Here those bytes
//!   are [`SHIM_GARBAGE`], so a plugin that reads them goes visibly wrong instead of
//!   accidentally right. The v1–v3 shims zero their copies, and so does this module.
//! * After a v5 `init`, the copy-engine bits are cleared from the activation mask.
//!
//! One deliberate difference: when a type is not passed to the loaded version, `*handle` is
//! set to NULL. NCCL's v4 shim (for API, KernelLaunch and CE types) and v5 shim (for types
//! it does not know) leave `*handle` as it was.
//!
//! The function table is copied once when the library is opened. NCCL re-reads the slots of
//! v1–v5 tables at each `init` and uses a v6 table in place, which only differs for a
//! plugin that rewrites its own table.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::mem::{size_of, MaybeUninit};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicI32, Ordering};

use evring_abi::{
    ty, DescrV1, DescrV2, DescrV3, DescrV4, DescrV6, DescrV7, KernelChArgs, Logger, NcclResult,
    ProfilerV1, ProfilerV2, ProfilerV3, ProfilerV4, ProfilerV5, ProfilerV6, ProfilerV7, State,
    StateArgsV1, StateArgsV4, NCCL_SUCCESS,
};

mod convert;

pub use convert::{
    algo_code, args_to_v1, args_to_v4, args_to_v5, args_to_v6, datatype_code, descr_to_v1,
    descr_to_v2, descr_to_v3, descr_to_v4, descr_to_v5, descr_to_v6, descr_v6_to_v7, func_code,
    proto_code,
};

/// The newest profiler ABI version the simulator speaks.
pub const NEWEST: u32 = 7;

/// The byte that fills whatever the v4 and v5 shims leave uninitialised.
pub const SHIM_GARBAGE: u8 = 0xA5;

/// Exported table symbols, indexed by version - 1.
pub const SYMBOLS: [&CStr; NEWEST as usize] = [
    c"ncclProfiler_v1",
    c"ncclProfiler_v2",
    c"ncclProfiler_v3",
    c"ncclProfiler_v4",
    c"ncclProfiler_v5",
    c"ncclProfiler_v6",
    c"ncclProfiler_v7",
];

/// C names of the five function slots after `name`, for error messages.
const SLOTS: [&str; 5] = [
    "init",
    "startEvent",
    "stopEvent",
    "recordEventState",
    "finalize",
];

#[derive(Clone, Copy)]
enum Table {
    V1(ProfilerV1),
    V2(ProfilerV2),
    V3(ProfilerV3),
    V4(ProfilerV4),
    V5(ProfilerV5),
    V6(ProfilerV6),
    V7(ProfilerV7),
}

/// A `dlopen` handle, closed on drop.
struct Library(NonNull<c_void>);

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful `dlopen` and is closed exactly once.
        // Nothing taken from the library (the copied table's function pointers) is used
        // after this: `Plugin` drops its library last and hands out no pointers into it
        // except through `symbol`, whose results are documented as borrowed.
        unsafe { libc::dlclose(self.0.as_ptr()) };
    }
}

/// A loaded profiler plugin.
pub struct Plugin {
    table: Table,
    name: String,
    path: PathBuf,
    /// `None` only for tables built in-process by tests.
    lib: Option<Library>,
}

// SAFETY: the plugin's table and name are copied out at open time and the `dlopen` handle
// is only used for `dlsym`/`dlclose`, which are thread-safe. Calling into the plugin from
// several threads is what NCCL itself does; the `unsafe` methods leave the plugin's own
// thread-safety to their callers.
unsafe impl Send for Plugin {}
// SAFETY: as for `Send`: `&Plugin` exposes only immutable copies and thread-safe dl* calls.
unsafe impl Sync for Plugin {}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("version", &self.version())
            .finish()
    }
}

impl Plugin {
    /// Loads `path` with `dlopen(RTLD_NOW | RTLD_LOCAL)`, as NCCL does, and picks the newest
    /// `ncclProfiler_v7` … `ncclProfiler_v1` table it exports, or only version
    /// `force_version`. A path without `/` is searched for like any `dlopen` name.
    pub fn open(path: &Path, force_version: Option<u32>) -> Result<Plugin, String> {
        if let Some(v) = force_version {
            if !(1..=NEWEST).contains(&v) {
                return Err(format!(
                    "profiler ABI version {v} does not exist (known: 1 to {NEWEST})"
                ));
            }
        }
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{}: path contains a NUL byte", path.display()))?;
        // SAFETY: `c_path` is NUL-terminated. Loading runs the library's constructors,
        // which is inherent to loading a plugin at all.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        let lib = match NonNull::new(handle) {
            Some(h) => Library(h),
            None => {
                return Err(format!(
                    "cannot load profiler plugin {}: {}",
                    path.display(),
                    dl_error()
                ))
            }
        };
        let versions: Vec<u32> = match force_version {
            Some(v) => vec![v],
            None => (1..=NEWEST).rev().collect(),
        };
        for v in &versions {
            let symbol = SYMBOLS[*v as usize - 1];
            // SAFETY: the handle is open and `symbol` is NUL-terminated.
            let sym = unsafe { libc::dlsym(lib.0.as_ptr(), symbol.as_ptr()) };
            if sym.is_null() {
                continue;
            }
            // SAFETY: a non-NULL `ncclProfiler_vN` is the plugin's table of that version,
            // which stays mapped while `lib` is open.
            let (table, name) = unsafe { read_table(*v, sym) }
                .map_err(|e| format!("{}: {}: {e}", path.display(), symbol.to_string_lossy()))?;
            return Ok(Plugin {
                table,
                name,
                path: path.to_path_buf(),
                lib: Some(lib),
            });
        }
        let wanted: Vec<_> = versions
            .iter()
            .map(|v| SYMBOLS[*v as usize - 1].to_string_lossy())
            .collect();
        Err(format!(
            "{}: not a profiler plugin: it exports none of {}",
            path.display(),
            wanted.join(", ")
        ))
    }

    /// Like [`open`](Self::open), but on a private copy of the library, so that this
    /// `Plugin` gets its own global state (counters, settings read from the environment,
    /// threads) even when another `Plugin` has the same file open.
    ///
    /// glibc keeps one instance per file for the life of the process when the library
    /// cannot be unloaded (ours is linked `-z nodelete`), so reopening the same path would
    /// share state. The copy goes to a fresh file in `std::env::temp_dir()`, named from the
    /// pid and a counter, and is removed as soon as `dlopen` has mapped it.
    pub fn open_isolated(path: &Path, force_version: Option<u32>) -> Result<Plugin, String> {
        use std::sync::atomic::AtomicU64;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot load profiler plugin {}: {e}", path.display()))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into());
        let copy =
            std::env::temp_dir().join(format!("{stem}.evring-sim.{}.{n}.so", std::process::id()));
        std::fs::write(&copy, &bytes).map_err(|e| {
            format!(
                "cannot copy profiler plugin {} to {}: {e}",
                path.display(),
                copy.display()
            )
        })?;
        let opened = Self::open(&copy, force_version);
        // The mapping outlives the name; a failed open must not leave the copy behind.
        let _ = std::fs::remove_file(&copy);
        let mut plugin =
            opened.map_err(|e| e.replace(&*copy.to_string_lossy(), &path.to_string_lossy()))?;
        plugin.path = path.to_path_buf();
        Ok(plugin)
    }

    /// Whether NCCL hands events of type `ty` to a plugin of the loaded version (its
    /// per-version shim drops the others before the plugin sees them, as [`start`](Self::start)
    /// does).
    pub fn passes_type(&self, ty: u64) -> bool {
        let all = match self.table {
            Table::V7(_) => ty::ALL_V7,
            Table::V6(_) => ty::ALL_V6,
            Table::V5(_) => ty::ALL_V5,
            Table::V4(_) | Table::V3(_) => ty::ALL_V3,
            Table::V2(_) | Table::V1(_) => ty::ALL_V1,
        };
        ty.count_ones() == 1 && ty & all != 0
    }

    /// The ABI version of the table in use (1 to 7).
    pub fn version(&self) -> u32 {
        match self.table {
            Table::V7(_) => 7,
            Table::V1(_) => 1,
            Table::V2(_) => 2,
            Table::V3(_) => 3,
            Table::V4(_) => 4,
            Table::V5(_) => 5,
            Table::V6(_) => 6,
        }
    }

    /// The table's `name`, as read when the library was opened.
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// The path the plugin was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Looks up another exported symbol (e.g. a plugin's own control functions). The
    /// pointer is only valid while this `Plugin` lives.
    pub fn symbol(&self, name: &CStr) -> Option<*mut c_void> {
        let lib = self.lib.as_ref()?;
        // SAFETY: the handle is open and `name` is NUL-terminated.
        let sym = unsafe { libc::dlsym(lib.0.as_ptr(), name.as_ptr()) };
        (!sym.is_null()).then_some(sym)
    }

    /// Calls `init` with the v7 arguments, reordered or dropped for the loaded version. For
    /// v5, a successful `init` is followed by clearing the CE bits from `*mask`; below v7
    /// the KernelPhase bit is cleared (NCCL 2.31's v6 adapter), and for v7 a KernelPhase
    /// bit turns KernelCh on.
    ///
    /// # Safety
    ///
    /// `ctx` must be valid for writes; `mask` must be NULL or valid for atomic reads and
    /// writes of a `c_int` for as long as the plugin keeps it (it may store the pointer);
    /// `comm_name` must be NULL or a NUL-terminated string; `logfn` must be safe to call
    /// from any thread. The plugin's own `init` contract applies.
    #[allow(clippy::too_many_arguments)] // NCCL's signature.
    pub unsafe fn init(
        &self,
        ctx: *mut *mut c_void,
        comm_id: u64,
        mask: *mut c_int,
        comm_name: *const c_char,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: Logger,
    ) -> NcclResult {
        // SAFETY: the caller upholds the pointer contracts that each version's `init`
        // expects; older versions just receive fewer arguments, in their own order.
        let rc = unsafe {
            match &self.table {
                Table::V7(t) => {
                    (t.init)(ctx, comm_id, mask, comm_name, n_nodes, nranks, rank, logfn)
                }
                Table::V6(t) => {
                    (t.init)(ctx, comm_id, mask, comm_name, n_nodes, nranks, rank, logfn)
                }
                Table::V5(t) => {
                    (t.init)(ctx, comm_id, mask, comm_name, n_nodes, nranks, rank, logfn)
                }
                Table::V4(t) => {
                    (t.init)(ctx, mask, comm_name, comm_id, n_nodes, nranks, rank, logfn)
                }
                Table::V3(t) => (t.init)(ctx, mask),
                Table::V2(t) => (t.init)(ctx, mask),
                Table::V1(t) => (t.init)(ctx, mask),
            }
        };
        if matches!(self.table, Table::V5(_)) && rc == NCCL_SUCCESS && !mask.is_null() {
            // SAFETY: `mask` is non-NULL and valid for atomic access (caller); the plugin may
            // store to it from another thread, hence an atomic read-modify-write.
            let m = unsafe { AtomicI32::from_ptr(mask) };
            m.fetch_and(!(ty::CE as c_int), Ordering::Relaxed);
        }
        if !mask.is_null() {
            // SAFETY: as above.
            let m = unsafe { AtomicI32::from_ptr(mask) };
            if matches!(self.table, Table::V7(_)) {
                if m.load(Ordering::Relaxed) & ty::KERNEL_PHASE as c_int != 0 {
                    m.fetch_or(ty::KERNEL_CH as c_int, Ordering::Relaxed);
                }
            } else {
                m.fetch_and(!(ty::KERNEL_PHASE as c_int), Ordering::Relaxed);
            }
        }
        rc
    }

    /// Calls `startEvent` with `d7`, the descriptor of NCCL's v7 core, converted to the
    /// loaded version's descriptor (NCCL 2.31's v6 adapter, then the older shims). For a
    /// type that version is not given, writes NULL to `*handle` and returns success without
    /// calling the plugin.
    ///
    /// # Safety
    ///
    /// `handle` must be valid for writes. The union member of `d7` selected by `d7.ty` must be
    /// initialised, and its string pointers must be NULL or NUL-terminated strings (the v1
    /// conversion reads them; every version's plugin may). `ctx` and `d7.parent_obj` are
    /// passed through as the plugin's own contract requires.
    pub unsafe fn start7(
        &self,
        ctx: *mut c_void,
        handle: *mut *mut c_void,
        d7: &DescrV7,
    ) -> NcclResult {
        if let Table::V7(t) = &self.table {
            // The plugin gets a mutable copy, like NCCL's own local descriptor.
            let mut local = *d7;
            // SAFETY: caller's contract; `local` outlives the call.
            return unsafe { (t.start_event)(ctx, handle, &mut local) };
        }
        let mut v6 = DescrV6::zeroed();
        // SAFETY: the selected member of `d7` is initialised (caller).
        if !unsafe { descr_to_v6(d7, &mut v6) } {
            // SAFETY: `handle` is valid for writes (caller).
            unsafe { *handle = ptr::null_mut() };
            return NCCL_SUCCESS;
        }
        // SAFETY: caller's contract; `descr_to_v6` initialised the selected member.
        unsafe { self.start_v6(ctx, handle, &v6) }
    }

    /// As [`start7`](Self::start7), from a v6 descriptor (the one NCCL's core built before
    /// 2.31): a v7 table gets it with the v7 fields unset ([`descr_v6_to_v7`]), older
    /// tables get it as NCCL 2.30 passed it.
    ///
    /// # Safety
    ///
    /// As for [`start7`](Self::start7), with `d` for `d7`.
    pub unsafe fn start(
        &self,
        ctx: *mut c_void,
        handle: *mut *mut c_void,
        d: &DescrV6,
    ) -> NcclResult {
        if matches!(self.table, Table::V7(_)) {
            // SAFETY: the selected member of `d` is initialised (caller).
            let d7 = unsafe { descr_v6_to_v7(d) };
            // SAFETY: caller's contract.
            return unsafe { self.start7(ctx, handle, &d7) };
        }
        // SAFETY: caller's contract.
        unsafe { self.start_v6(ctx, handle, d) }
    }

    /// `startEvent` of a v1 to v6 table with a v6 descriptor, through that version's shim.
    ///
    /// # Safety
    ///
    /// As for [`start`](Self::start).
    unsafe fn start_v6(
        &self,
        ctx: *mut c_void,
        handle: *mut *mut c_void,
        d: &DescrV6,
    ) -> NcclResult {
        let not_passed = || {
            // SAFETY: `handle` is valid for writes (caller).
            unsafe { *handle = ptr::null_mut() };
            NCCL_SUCCESS
        };
        match &self.table {
            Table::V7(_) => unreachable!("v7 tables take v7 descriptors"),
            Table::V6(t) => {
                // The plugin gets a mutable copy, like NCCL's own local descriptor.
                let mut local = *d;
                // SAFETY: caller's contract; `local` outlives the call.
                unsafe { (t.start_event)(ctx, handle, &mut local) }
            }
            Table::V5(t) => {
                let mut local = Garbage::<DescrV6>::new();
                // SAFETY: the selected member of `d` is initialised (caller).
                if !unsafe { descr_to_v5(d, local.get()) } {
                    return not_passed();
                }
                // SAFETY: caller's contract; `local` outlives the call.
                unsafe { (t.start_event)(ctx, handle, local.as_mut_ptr()) }
            }
            Table::V4(t) => {
                let mut local = Garbage::<DescrV4>::new();
                // SAFETY: as for v5.
                if !unsafe { descr_to_v4(d, local.get()) } {
                    return not_passed();
                }
                // SAFETY: as for v5.
                unsafe { (t.start_event)(ctx, handle, local.as_mut_ptr()) }
            }
            Table::V3(t) => {
                // The v1-v3 shims clear the handle before looking at the type.
                not_passed();
                let mut local = DescrV3::zeroed();
                // SAFETY: as for v5.
                if !unsafe { descr_to_v3(d, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.start_event)(ctx, handle, &mut local) }
            }
            Table::V2(t) => {
                // The v1-v3 shims clear the handle before looking at the type.
                not_passed();
                let mut local = DescrV2::zeroed();
                // SAFETY: as for v5.
                if !unsafe { descr_to_v2(d, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.start_event)(ctx, handle, &mut local) }
            }
            Table::V1(t) => {
                // The v1-v3 shims clear the handle before looking at the type.
                not_passed();
                let mut local = DescrV1::zeroed();
                // SAFETY: as for v5, and the strings are readable (caller).
                if !unsafe { descr_to_v1(d, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.start_event)(ctx, handle, &mut local) }
            }
        }
    }

    /// Calls `stopEvent(h)`. NCCL skips NULL handles for most types but not for NetPlugin;
    /// that choice is the caller's.
    ///
    /// # Safety
    ///
    /// Whatever the plugin requires of `h`; NCCL passes back handles it was given.
    pub unsafe fn stop(&self, h: *mut c_void) -> NcclResult {
        // SAFETY: caller's contract.
        unsafe {
            match &self.table {
                Table::V1(t) => (t.stop_event)(h),
                Table::V2(t) => (t.stop_event)(h),
                Table::V3(t) => (t.stop_event)(h),
                Table::V4(t) => (t.stop_event)(h),
                Table::V5(t) => (t.stop_event)(h),
                Table::V6(t) => (t.stop_event)(h),
                Table::V7(t) => (t.stop_event)(h),
            }
        }
    }

    /// Calls `recordEventState` with `args` converted for the loaded version, or returns
    /// success without calling when that version is not given `state`. `args` may be NULL
    /// (NCCL passes NULL for states 23 and 24); the v4 and v5 shims still hand the plugin a
    /// pointer to their own (here garbage-filled) args.
    ///
    /// # Safety
    ///
    /// `args` must be NULL or valid for reads, with the member that `state` selects
    /// initialised. Whatever the plugin requires of `h`.
    pub unsafe fn record(
        &self,
        h: *mut c_void,
        state: State,
        args: *const StateArgsV4,
    ) -> NcclResult {
        // SAFETY: `args` is NULL or valid for reads (caller).
        let src = unsafe { args.as_ref() };
        match &self.table {
            Table::V7(t) => {
                let mut local = src.copied();
                let p = local
                    .as_mut()
                    .map_or(ptr::null_mut(), |a| a as *mut StateArgsV4);
                // SAFETY: caller's contract; `local` outlives the call.
                unsafe { (t.record_event_state)(h, state, p) }
            }
            Table::V6(t) => {
                let mut local = StateArgsV4 {
                    kernel_ch: KernelChArgs { p_timer: 0 },
                };
                // SAFETY: the member `state` selects is initialised (caller).
                if !unsafe { args_to_v6(state, src, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: caller's contract; `local` outlives the call.
                unsafe { (t.record_event_state)(h, state, &mut local) }
            }
            Table::V5(t) => {
                let mut local = Garbage::<StateArgsV4>::new();
                // SAFETY: the member `state` selects is initialised (caller).
                // (State 31 is not among the states v5 is given.)
                if !unsafe { args_to_v5(state, src, local.get()) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: caller's contract; `local` outlives the call.
                unsafe { (t.record_event_state)(h, state, local.as_mut_ptr()) }
            }
            Table::V4(t) => {
                let mut local = Garbage::<StateArgsV4>::new();
                // SAFETY: as for v5.
                if !unsafe { args_to_v4(state, src, local.get()) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.record_event_state)(h, state, local.as_mut_ptr()) }
            }
            Table::V3(t) => {
                let mut local = StateArgsV1::zeroed();
                // SAFETY: as for v5.
                if !unsafe { args_to_v1(state, src, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.record_event_state)(h, state, &mut local) }
            }
            Table::V2(t) => {
                let mut local = StateArgsV1::zeroed();
                // SAFETY: as for v5.
                if !unsafe { args_to_v1(state, src, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.record_event_state)(h, state, &mut local) }
            }
            Table::V1(t) => {
                let mut local = StateArgsV1::zeroed();
                // SAFETY: as for v5.
                if !unsafe { args_to_v1(state, src, &mut local) } {
                    return NCCL_SUCCESS;
                }
                // SAFETY: as for v5.
                unsafe { (t.record_event_state)(h, state, &mut local) }
            }
        }
    }

    /// Calls `finalize(ctx)`. NCCL skips it for a NULL context; that choice is the caller's.
    ///
    /// # Safety
    ///
    /// Whatever the plugin requires of `ctx`; NCCL passes a context its `init` returned.
    pub unsafe fn finalize(&self, ctx: *mut c_void) -> NcclResult {
        // SAFETY: caller's contract.
        unsafe {
            match &self.table {
                Table::V1(t) => (t.finalize)(ctx),
                Table::V2(t) => (t.finalize)(ctx),
                Table::V3(t) => (t.finalize)(ctx),
                Table::V4(t) => (t.finalize)(ctx),
                Table::V5(t) => (t.finalize)(ctx),
                Table::V6(t) => (t.finalize)(ctx),
                Table::V7(t) => (t.finalize)(ctx),
            }
        }
    }
}

/// The last `dlopen`/`dlsym` error of this thread.
fn dl_error() -> String {
    // SAFETY: `dlerror` has no preconditions.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "unknown dlopen error".to_string();
    }
    // SAFETY: a non-NULL `dlerror` result is a NUL-terminated string valid until the next
    // dl* call on this thread; it is copied at once.
    unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}

/// Copies the version-`v` table at `sym` and its name, refusing NULL function slots (which
/// the typed table cannot hold).
///
/// # Safety
///
/// `sym` must point to 48 readable bytes laid out as a profiler table of version `v`, whose
/// `name` is NULL or a NUL-terminated string.
unsafe fn read_table(v: u32, sym: *mut c_void) -> Result<(Table, String), String> {
    // SAFETY: `sym` points to 48 readable bytes (caller); alignment is not assumed.
    let slots = unsafe { (sym as *const [*const c_void; 6]).read_unaligned() };
    if let Some(i) = slots[1..].iter().position(|p| p.is_null()) {
        return Err(format!("the {} slot is NULL", SLOTS[i]));
    }
    let name = if slots[0].is_null() {
        String::new()
    } else {
        // SAFETY: a non-NULL `name` is a NUL-terminated string (caller).
        unsafe { CStr::from_ptr(slots[0].cast()) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: every slot is non-NULL, so the bytes are a valid table of the version the
    // symbol names.
    let table = unsafe {
        match v {
            1 => Table::V1(read_slots(sym)),
            2 => Table::V2(read_slots(sym)),
            3 => Table::V3(read_slots(sym)),
            4 => Table::V4(read_slots(sym)),
            5 => Table::V5(read_slots(sym)),
            6 => Table::V6(read_slots(sym)),
            7 => Table::V7(read_slots(sym)),
            _ => unreachable!("version checked by the caller"),
        }
    };
    Ok((table, name))
}

/// # Safety
///
/// `sym` must point to a readable, valid `T`.
unsafe fn read_slots<T: Copy>(sym: *mut c_void) -> T {
    assert_eq!(size_of::<T>(), 48, "profiler tables are 48 bytes");
    // SAFETY: caller's contract; alignment is not assumed.
    unsafe { (sym as *const T).read_unaligned() }
}

/// Types for which any initialised bytes, `SHIM_GARBAGE` included, form a valid value.
///
/// # Safety
///
/// Implementors must consist only of integers, raw pointers and unions (padding aside).
unsafe trait AnyBits: Copy {}

// SAFETY: integers, a raw pointer and a union.
unsafe impl AnyBits for DescrV6 {}
// SAFETY: integers, a raw pointer and a union.
unsafe impl AnyBits for DescrV4 {}
// SAFETY: a union.
unsafe impl AnyBits for StateArgsV4 {}

/// Storage whose every byte, padding included, is [`SHIM_GARBAGE`] until written: the
/// uninitialised local of NCCL's v4/v5 shims. Never copied by value, so padding survives.
struct Garbage<T: AnyBits>(MaybeUninit<T>);

impl<T: AnyBits> Garbage<T> {
    fn new() -> Self {
        let mut m = MaybeUninit::<T>::uninit();
        // SAFETY: writes `size_of::<T>()` bytes into storage of exactly that size.
        unsafe { m.as_mut_ptr().write_bytes(SHIM_GARBAGE, 1) };
        Self(m)
    }

    fn get(&mut self) -> &mut T {
        // SAFETY: every byte is initialised and any initialised bytes are a valid `T`
        // (`AnyBits`).
        unsafe { self.0.assume_init_mut() }
    }

    fn as_mut_ptr(&mut self) -> *mut T {
        self.0.as_mut_ptr()
    }
}

#[cfg(test)]
mod tests_v7;

#[cfg(test)]
mod tests {
    use super::convert::tests::{addr, coll_v6, of_type};
    use super::*;
    use evring_abi::{state, ProxyStepArgs};
    use std::cell::RefCell;

    #[test]
    fn open_missing_path_names_the_path() {
        let path = Path::new("/nonexistent/evring/libnccl-profiler-missing.so");
        let err = Plugin::open(path, None).unwrap_err();
        assert!(err.contains(path.to_str().unwrap()), "{err}");
        assert!(err.contains("cannot load"), "{err}");
    }

    #[test]
    fn open_library_without_profiler_symbols() {
        let err = Plugin::open(Path::new("libm.so.6"), None).unwrap_err();
        assert!(
            err.contains("ncclProfiler_v6") && err.contains("ncclProfiler_v1"),
            "{err}"
        );
        let err = Plugin::open(Path::new("libm.so.6"), Some(3)).unwrap_err();
        assert!(
            err.contains("ncclProfiler_v3") && !err.contains("_v4"),
            "{err}"
        );
    }

    #[test]
    fn rejects_unknown_forced_version() {
        for v in [0, 8] {
            let err = Plugin::open(Path::new("libm.so.6"), Some(v)).unwrap_err();
            assert!(err.contains("version"), "{err}");
        }
    }

    // An in-process v4 and v5 "plugin": the dispatch through `Plugin` without a library.

    thread_local! {
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn seen() -> Vec<String> {
        SEEN.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    fn note(s: String) {
        SEEN.with(|v| v.borrow_mut().push(s));
    }

    extern "C" fn init_v4(
        ctx: *mut *mut c_void,
        _mask: *mut c_int,
        _name: *const c_char,
        hash: u64,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        _log: Logger,
    ) -> NcclResult {
        // SAFETY: `Plugin::init` passes the caller's valid `ctx`.
        unsafe { *ctx = addr(0xc0) };
        note(format!("init hash={hash:#x} {n_nodes}/{nranks}/{rank}"));
        NCCL_SUCCESS
    }

    extern "C" fn start_v4(_ctx: *mut c_void, h: *mut *mut c_void, d: *mut DescrV4) -> NcclResult {
        // SAFETY: `Plugin::start` passes a valid descriptor and handle slot.
        unsafe {
            note(format!("start ty={} parent={:?}", (*d).ty, (*d).parent_obj));
            *h = addr(0x1234);
        }
        NCCL_SUCCESS
    }

    extern "C" fn stop(h: *mut c_void) -> NcclResult {
        note(format!("stop {h:?}"));
        NCCL_SUCCESS
    }

    extern "C" fn record_v4(h: *mut c_void, s: State, a: *mut StateArgsV4) -> NcclResult {
        // SAFETY: `Plugin::record` always passes its own 8-byte args to v4/v5.
        let word = unsafe { a.cast::<u64>().read() };
        note(format!("rec {h:?} {s} {word:#x}"));
        NCCL_SUCCESS
    }

    extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
        note(format!("fin {ctx:?}"));
        NCCL_SUCCESS
    }

    extern "C" fn init_v5(
        ctx: *mut *mut c_void,
        _comm_id: u64,
        mask: *mut c_int,
        _name: *const c_char,
        _n_nodes: c_int,
        _nranks: c_int,
        _rank: c_int,
        _log: Logger,
    ) -> NcclResult {
        // SAFETY: `Plugin::init` passes the caller's valid pointers.
        unsafe {
            *ctx = addr(0xc5);
            *mask = ty::ALL_V6 as c_int;
        }
        NCCL_SUCCESS
    }

    extern "C" fn start_v5(_ctx: *mut c_void, h: *mut *mut c_void, d: *mut DescrV6) -> NcclResult {
        // SAFETY: `Plugin::start` passes a valid descriptor and handle slot.
        unsafe {
            note(format!("start ty={}", (*d).ty));
            *h = addr(0x55);
        }
        NCCL_SUCCESS
    }

    /// The v7 descriptor the core builds for a v6 one (the v7 fields unset).
    fn v7(d: DescrV6) -> DescrV7 {
        // SAFETY: the test descriptors initialise the member their type selects.
        unsafe { descr_v6_to_v7(&d) }
    }

    fn in_process(table: Table) -> Plugin {
        Plugin {
            table,
            name: "test".into(),
            path: PathBuf::from("(in process)"),
            lib: None,
        }
    }

    #[test]
    fn v4_dispatch_filters_and_converts() {
        let p = in_process(Table::V4(ProfilerV4 {
            name: c"t4".as_ptr(),
            init: init_v4,
            start_event: start_v4,
            stop_event: stop,
            record_event_state: record_v4,
            finalize,
        }));
        assert_eq!(p.version(), 4);
        let mut ctx = ptr::null_mut();
        let mut mask: c_int = 0;
        // SAFETY: valid out-pointers; the test plugin keeps nothing.
        let rc = unsafe { p.init(&mut ctx, 0xabc, &mut mask, ptr::null(), 1, 2, 1, None) };
        assert_eq!((rc, ctx), (NCCL_SUCCESS, addr(0xc0)));

        let mut h = addr(0xdead);
        // SAFETY: `h` is writable; GroupApi reads no member.
        unsafe { p.start7(ctx, &mut h, &v7(of_type(ty::GROUP_API))) };
        assert!(h.is_null(), "filtered start must clear the handle");
        // SAFETY: the Coll member is initialised with static strings.
        unsafe { p.start7(ctx, &mut h, &v7(coll_v6())) };
        assert_eq!(h, addr(0x1234));
        let size = StateArgsV4 {
            proxy_step: ProxyStepArgs { trans_size: 5 },
        };
        // SAFETY: NULL args for 23; initialised `proxy_step` for 9.
        unsafe {
            p.record(h, state::GROUP_START_API_STOP, ptr::null());
            p.record(h, state::PROXY_STEP_SEND_WAIT, &size);
            p.stop(h);
            p.finalize(ctx);
        }
        assert_eq!(
            seen(),
            [
                "init hash=0xabc 1/2/1".to_string(),
                format!("start ty=2 parent={:?}", addr(0x77)),
                format!("rec {:?} 9 0x5", addr(0x1234)),
                format!("stop {:?}", addr(0x1234)),
                format!("fin {:?}", addr(0xc0)),
            ]
        );
    }

    #[test]
    fn v5_dispatch_clears_ce_bits_and_drops_ce_events() {
        let p = in_process(Table::V5(ProfilerV5 {
            name: c"t5".as_ptr(),
            init: init_v5,
            start_event: start_v5,
            stop_event: stop,
            record_event_state: record_v4,
            finalize,
        }));
        let mut ctx = ptr::null_mut();
        let mut mask: c_int = 0;
        // SAFETY: valid out-pointers; the test plugin keeps nothing.
        unsafe { p.init(&mut ctx, 1, &mut mask, c"comm".as_ptr(), 1, 2, 0, None) };
        assert_eq!(mask as u64, ty::ALL_V5);
        let mut h = addr(0xdead);
        // SAFETY: `h` is writable; CE types read no member here.
        unsafe { p.start7(ctx, &mut h, &v7(of_type(ty::CE_COLL))) };
        assert!(h.is_null());
        // SAFETY: GroupApi member zeroed; state 24 with NULL args.
        unsafe {
            p.start7(ctx, &mut h, &v7(of_type(ty::GROUP_API)));
            p.record(h, state::GROUP_END_API_START, ptr::null());
            p.record(h, state::CE_COLL_START, ptr::null());
        }
        assert_eq!(
            seen(),
            [
                format!("start ty={}", ty::GROUP_API),
                format!(
                    "rec {:?} 24 {:#x}",
                    addr(0x55),
                    u64::from_ne_bytes([SHIM_GARBAGE; 8])
                ),
            ]
        );
    }
}
