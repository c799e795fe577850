//! One simulated process's copy of a plugin ([`Proc`]) and the per-thread [`Caller`]s
//! that make, and count, every call the simulator sends into it.
//!
//! NCCL gives every `init` of a process the same activation-mask `int`, and reads it
//! with relaxed atomic loads; a [`Proc`] owns one such `int` (leaked, so it outlives
//! any plugin that keeps the pointer). Each simulated thread owns a [`Caller`] whose
//! counts are plain integers, merged into the [`Proc`] when the caller is dropped, so
//! that counting costs no shared writes on the hot path.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use evring_abi::StatsV1;
use evring_abi::{DescrV7, State, StateArgsV4};

use crate::pace::Pace;
use crate::plugin::Plugin;

/// Number of NCCL event-type bits (`ncclProfileGroup` … `ncclProfileKernelPhase`).
pub const TYPES: usize = 16;

/// Trace-name spelling of each type bit, as our shim writes it in `"cat"`.
pub use evring_abi::ty::NAMES as TYPE_NAMES;

/// What the simulator did to one plugin instance (summed over its threads).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// `startEvent` calls that reached the plugin, per type bit.
    pub starts: [u64; TYPES],
    /// Of those, the ones that got a non-NULL handle back.
    pub accepted: [u64; TYPES],
    /// Starts the loaded ABI version is not given (NCCL's shim drops them).
    pub filtered: u64,
    pub stops: u64,
    pub records: u64,
    pub inits: u64,
    pub finalizes: u64,
    /// Starts and non-NULL handles once the run passed half its target (steady state).
    pub steady_starts: u64,
    pub steady_accepted: u64,
    /// Events the simulator deliberately never stops and never finalizes (e.g. the
    /// ProxyCtrl Sleep that a process exiting without finalize leaves open).
    pub left_open: u64,
}

impl Counts {
    pub fn merge(&mut self, o: &Counts) {
        for i in 0..TYPES {
            self.starts[i] += o.starts[i];
            self.accepted[i] += o.accepted[i];
        }
        self.filtered += o.filtered;
        self.stops += o.stops;
        self.records += o.records;
        self.inits += o.inits;
        self.finalizes += o.finalizes;
        self.steady_starts += o.steady_starts;
        self.steady_accepted += o.steady_accepted;
        self.left_open += o.left_open;
    }

    pub fn total_starts(&self) -> u64 {
        self.starts.iter().sum()
    }

    pub fn total_accepted(&self) -> u64 {
        self.accepted.iter().sum()
    }

    /// Every call into the plugin.
    pub fn calls(&self) -> u64 {
        self.total_starts() + self.stops + self.records + self.inits + self.finalizes
    }

    /// Coll and P2p starts.
    pub fn coll_p2p(&self) -> u64 {
        self.starts[1] + self.starts[2]
    }

    /// Coll and P2p starts that got a handle.
    pub fn coll_p2p_accepted(&self) -> u64 {
        self.accepted[1] + self.accepted[2]
    }
}

/// Progress shared by every thread of one run.
#[derive(Debug, Default)]
pub struct Shared {
    /// Starts issued so far (updated in batches).
    pub issued: AtomicU64,
    /// Starts to issue before stopping.
    pub target: u64,
    /// RSS and starts when a quarter of the target was first published (0: not yet):
    /// the end of the warm-up, after which memory must stop growing.
    pub warm_rss: AtomicU64,
    pub warm_starts: AtomicU64,
    /// The rate the run's starts are held to (`None`: as fast as the threads go).
    pub pace: Option<Pace>,
}

impl Shared {
    pub fn new(target: u64) -> Arc<Shared> {
        Shared::paced(target, 0)
    }

    /// As [`new`](Self::new), the run's starts held to `per_sec` per second (0: unpaced).
    pub fn paced(target: u64, per_sec: u64) -> Arc<Shared> {
        Arc::new(Shared {
            issued: AtomicU64::new(0),
            target,
            warm_rss: AtomicU64::new(0),
            warm_starts: AtomicU64::new(0),
            pace: Pace::new(per_sec),
        })
    }

    /// Whether the warm-up point has been passed (and sampled).
    pub fn warm(&self) -> bool {
        self.warm_rss.load(Ordering::Acquire) != 0
    }

    /// Samples RSS at the warm-up point, once per run (the first caller wins).
    fn sample_warm(&self, starts: u64) {
        if self.warm() {
            return;
        }
        let rss = rss_bytes().max(1);
        self.warm_starts.store(starts, Ordering::Relaxed);
        let _ = self
            .warm_rss
            .compare_exchange(0, rss, Ordering::AcqRel, Ordering::Relaxed);
    }

    pub fn done(&self) -> bool {
        self.issued.load(Ordering::Relaxed) >= self.target
    }

    /// The fraction of the target reached, 0.0 to 1.0 and beyond.
    pub fn progress(&self) -> f64 {
        self.issued.load(Ordering::Relaxed) as f64 / self.target.max(1) as f64
    }
}

/// Environment and output settings of one plugin instance.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// `NCCL_PROFILE_EVENT_MASK` for the instance; `None` leaves the plugin's default.
    pub mask: Option<i32>,
    /// Directory for its trace files (`NCCL_PROFILE_DUMP_FILE=<dir>/evring`).
    pub trace_dir: PathBuf,
    /// `EVRING_RING` (completed-record ring slots of our shim).
    pub ring: Option<usize>,
    /// `EVRING_CAPACITY` (event slots of our shim).
    pub capacity: Option<usize>,
    /// Turn our shim's trace output off (`evring_set_output(0)`) after its first
    /// `init`: records are still produced and counted, not written.
    pub no_output: bool,
    /// The process's own environment already holds [`Settings::env`] (the instance
    /// runs in a child process of its own, as under NCCL). Otherwise the variables are
    /// set around each `init` and `finalize` of the instance, under one lock.
    pub process_env: bool,
}

impl Settings {
    /// The environment the plugin instance reads its settings from.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![(
            "NCCL_PROFILE_DUMP_FILE",
            self.trace_dir.join("evring").to_string_lossy().into_owned(),
        )];
        if let Some(m) = self.mask {
            v.push(("NCCL_PROFILE_EVENT_MASK", m.to_string()));
        }
        if let Some(r) = self.ring {
            v.push(("EVRING_RING", r.to_string()));
        }
        if let Some(c) = self.capacity {
            v.push(("EVRING_CAPACITY", c.to_string()));
        }
        v
    }
}

/// Plugins read their settings from the environment at moments of their choosing
/// (ours: the first `init`; NCCL's example: `init` and `finalize`). When several
/// instances share one process, each gets its variables around its `init` and
/// `finalize` calls, under one lock.
static ENV_LOCK: Mutex<()> = Mutex::new(());

fn with_env<T>(vars: &[(&'static str, String)], f: impl FnOnce() -> T) -> T {
    let _guard = ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let saved: Vec<_> = vars
        .iter()
        .map(|(k, _)| (*k, std::env::var_os(k)))
        .collect();
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let out = f();
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    out
}

/// The control functions our shim exports besides the tables.
#[derive(Clone, Copy)]
pub struct Evring {
    stats: unsafe extern "C" fn(*mut StatsV1, usize) -> usize,
    flush: Option<extern "C" fn()>,
    flush_wait: Option<extern "C" fn(c_int) -> c_int>,
    set_mask: Option<extern "C" fn(c_int)>,
    set_output: Option<extern "C" fn(c_int)>,
}

impl Evring {
    fn find(p: &Plugin) -> Option<Evring> {
        let stats = p.symbol(c"evring_stats")?;
        // SAFETY: our shim exports these symbols with exactly these signatures
        // (crates/plugin-shim/src/exports.rs); a foreign library exporting `evring_stats`
        // under another signature is not supported.
        unsafe {
            Some(Evring {
                stats: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut StatsV1, usize) -> usize,
                >(stats),
                flush: p
                    .symbol(c"evring_flush")
                    .map(|f| std::mem::transmute::<*mut c_void, extern "C" fn()>(f)),
                flush_wait: p
                    .symbol(c"evring_flush_wait")
                    .map(|f| std::mem::transmute::<*mut c_void, extern "C" fn(c_int) -> c_int>(f)),
                set_mask: p
                    .symbol(c"evring_set_mask")
                    .map(|f| std::mem::transmute::<*mut c_void, extern "C" fn(c_int)>(f)),
                set_output: p
                    .symbol(c"evring_set_output")
                    .map(|f| std::mem::transmute::<*mut c_void, extern "C" fn(c_int)>(f)),
            })
        }
    }
}

/// One communicator the simulator initialised.
#[derive(Clone, Copy, Debug)]
struct CtxEntry {
    ctx: u64,
    finalized: bool,
}

/// One simulated process: a private instance of the plugin, its activation mask and
/// its communicators.
pub struct Proc {
    pub label: String,
    pub plugin: Plugin,
    /// NCCL's process-wide activation mask, whose address every `init` gets.
    mask: &'static AtomicI32,
    evring: Option<Evring>,
    /// Type bits the loaded ABI version is given.
    passed: u64,
    settings: Settings,
    /// Held while the first `init` runs with the instance's environment.
    first_init: Mutex<bool>,
    ctxs: Mutex<Vec<CtxEntry>>,
    counts: Mutex<Counts>,
    pub shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Proc {
    /// Opens a private copy of the plugin at `path` (see [`Plugin::open_isolated`]).
    pub fn open(
        label: &str,
        path: &Path,
        version: Option<u32>,
        settings: Settings,
        shared: Arc<Shared>,
    ) -> Result<Arc<Proc>, String> {
        let open = || Plugin::open_isolated(path, version);
        let plugin = if settings.process_env {
            open()?
        } else {
            with_env(&settings.env(), open)?
        };
        let passed = (0..TYPES as u32)
            .map(|b| 1u64 << b)
            .filter(|t| plugin.passes_type(*t))
            .fold(0, |a, t| a | t);
        let evring = Evring::find(&plugin);
        Ok(Arc::new(Proc {
            label: label.to_string(),
            plugin,
            mask: Box::leak(Box::new(AtomicI32::new(0))),
            evring,
            passed,
            settings,
            first_init: Mutex::new(false),
            ctxs: Mutex::new(Vec::new()),
            counts: Mutex::new(Counts::default()),
            shared,
        }))
    }

    /// The profiler ABI version of the table in use.
    pub fn version(&self) -> u32 {
        self.plugin.version()
    }

    /// Whether this is our shim (it exports `evring_stats`).
    pub fn is_evring(&self) -> bool {
        self.evring.is_some()
    }

    pub fn trace_dir(&self) -> &Path {
        &self.settings.trace_dir
    }

    /// The activation mask as NCCL would read it now.
    #[inline]
    pub fn mask(&self) -> u64 {
        self.mask.load(Ordering::Relaxed) as u32 as u64
    }

    /// Changes the mask the way a user of our shim can at run time.
    pub fn set_mask(&self, m: i32) {
        match self.evring.and_then(|e| e.set_mask) {
            Some(f) => f(m),
            None => self.mask.store(m, Ordering::Relaxed),
        }
    }

    /// NCCL's `init` for one communicator; returns the context (NULL allowed).
    pub fn init(&self, comm_id: u64, rank: i32, nranks: i32) -> u64 {
        let mut ctx: *mut c_void = ptr::null_mut();
        let mut call = || {
            // SAFETY: `ctx` is a valid out-pointer; the mask is a leaked, aligned int
            // that lives for the rest of the process and is only accessed atomically;
            // the name is a static C string; the logger, like NCCL's, is a real
            // function that lives for the whole program.
            unsafe {
                self.plugin.init(
                    &mut ctx,
                    comm_id,
                    self.mask.as_ptr(),
                    COMM_NAME.as_ptr(),
                    1,
                    nranks,
                    rank,
                    crate::logger::nccl_logger(),
                )
            }
        };
        {
            let mut first = lock(&self.first_init);
            if !*first {
                self.in_env(&mut call);
                *first = true;
                if self.settings.no_output {
                    if let Some(f) = self.evring.and_then(|e| e.set_output) {
                        f(0);
                    }
                }
            } else {
                drop(first);
                self.in_env(call);
            }
        }
        lock(&self.counts).inits += 1;
        let ctx = ctx as u64;
        lock(&self.ctxs).push(CtxEntry {
            ctx,
            finalized: false,
        });
        ctx
    }

    /// NCCL's `finalize` of `ctx`, once; NCCL skips it for a NULL context.
    pub fn finalize(&self, ctx: u64) {
        {
            let mut ctxs = lock(&self.ctxs);
            match ctxs.iter_mut().find(|c| c.ctx == ctx && !c.finalized) {
                Some(c) => c.finalized = true,
                None => return,
            }
        }
        if ctx != 0 {
            // SAFETY: `ctx` is a context this plugin's `init` returned, finalized once.
            self.in_env(|| unsafe { self.plugin.finalize(ctx as *mut c_void) });
            lock(&self.counts).finalizes += 1;
        }
    }

    /// Runs `f` (an `init` or `finalize`) with the instance's environment.
    fn in_env<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.settings.process_env {
            f()
        } else {
            with_env(&self.settings.env(), f)
        }
    }

    /// Finalizes every context not finalized yet, in `init` order.
    pub fn finalize_all(&self) {
        let open: Vec<u64> = lock(&self.ctxs)
            .iter()
            .filter(|c| !c.finalized)
            .map(|c| c.ctx)
            .collect();
        for ctx in open {
            self.finalize(ctx);
        }
        // Our shim writes footers on its writer thread and finalize waits for
        // them only briefly; wait for the files before they are read.
        self.flush();
    }

    /// Our shim's counters, if this is our shim.
    pub fn stats(&self) -> Option<StatsV1> {
        let e = self.evring?;
        let mut s = StatsV1::default();
        // SAFETY: `s` is a writable StatsV1 of the size passed.
        let n = unsafe { (e.stats)(&mut s, std::mem::size_of::<StatsV1>()) };
        (n > 0).then_some(s)
    }

    /// Drains our shim's log and completed records into its trace files (no-op for
    /// others). With a fixed budget (`evring_flush_wait`, 30 s) where the shim has it:
    /// on a loaded machine its writer may not run for a while, and the counters read
    /// next are exact only once it has read the log.
    pub fn flush(&self) {
        let Some(e) = self.evring else { return };
        match (e.flush_wait, e.flush) {
            (Some(w), _) => {
                w(30_000);
            }
            (None, Some(f)) => f(),
            (None, None) => {}
        }
    }

    pub fn counts(&self) -> Counts {
        lock(&self.counts).clone()
    }

    /// A caller for one simulated thread.
    pub fn caller(self: &Arc<Self>) -> Caller {
        Caller {
            proc: Arc::clone(self),
            c: Counts::default(),
            pending: 0,
            steady: false,
        }
    }
}

/// What our simulated communicators call themselves.
const COMM_NAME: &CStr = c"evring-sim";

/// How many starts a caller accumulates before publishing progress.
const PUBLISH_EVERY: u64 = 256;

/// The calls one simulated thread makes into one plugin instance, counted locally.
pub struct Caller {
    proc: Arc<Proc>,
    c: Counts,
    pending: u64,
    steady: bool,
}

impl Caller {
    pub fn proc(&self) -> &Arc<Proc> {
        &self.proc
    }

    /// The activation mask now (NCCL snapshots it per operation).
    #[inline]
    pub fn mask(&self) -> u64 {
        self.proc.mask()
    }

    /// `startEvent`; returns the handle (0 = NULL). A type the loaded version is not
    /// given is not sent (as NCCL's shims do) and yields NULL.
    #[inline]
    pub fn start(&mut self, ctx: u64, d: &DescrV7) -> u64 {
        if d.ty & self.proc.passed == 0 {
            self.c.filtered += 1;
            return 0;
        }
        let mut h: *mut c_void = ptr::null_mut();
        // SAFETY: `h` is writable; every descriptor the simulator builds has the member
        // its type selects initialised, with static strings or NULL; contexts and
        // parents are values the plugin returned, or deliberately foreign values, which
        // NCCL also passes and never dereferences.
        unsafe { self.proc.plugin.start7(ctx as *mut c_void, &mut h, d) };
        let i = d.ty.trailing_zeros() as usize;
        let accepted = !h.is_null();
        if let Some(s) = self.c.starts.get_mut(i) {
            *s += 1;
            self.c.accepted[i] += u64::from(accepted);
        }
        if self.steady {
            self.c.steady_starts += 1;
            self.c.steady_accepted += u64::from(accepted);
        }
        self.pending += 1;
        if self.pending >= PUBLISH_EVERY {
            self.publish();
        }
        h as u64
    }

    /// `stopEvent`, skipped for NULL as NCCL does for every type but NetPlugin.
    #[inline]
    pub fn stop(&mut self, h: u64) {
        if h != 0 {
            self.stop_always(h);
        }
    }

    /// `stopEvent` without a NULL check (NCCL's NetPlugin path).
    #[inline]
    pub fn stop_always(&mut self, h: u64) {
        // SAFETY: `h` is a handle this plugin returned (possibly stopped already or
        // stale), or NULL on the NetPlugin path; NCCL passes exactly these.
        unsafe { self.proc.plugin.stop(h as *mut c_void) };
        self.c.stops += 1;
    }

    /// `recordEventState`, skipped for NULL handles as NCCL does.
    #[inline]
    pub fn record(&mut self, h: u64, state: State, args: Option<&StateArgsV4>) {
        if h == 0 {
            return;
        }
        let p = args.map_or(ptr::null(), |a| a as *const StateArgsV4);
        // SAFETY: `args` is NULL or a fully initialised 8-byte union; `h` as in `stop`.
        unsafe { self.proc.plugin.record(h as *mut c_void, state, p) };
        self.c.records += 1;
    }

    /// Notes an event this thread leaves open on purpose.
    pub fn leave_open(&mut self, h: u64) {
        if h != 0 {
            self.c.left_open += 1;
        }
    }

    /// Publishes progress now (also done every few hundred starts), and waits
    /// there while the run is ahead of its pace.
    pub fn publish(&mut self) {
        let shared = &self.proc.shared;
        let now = shared.issued.fetch_add(self.pending, Ordering::Relaxed) + self.pending;
        self.pending = 0;
        if let Some(p) = &shared.pace {
            p.wait(now);
        }
        self.steady = now >= shared.target / 2;
        if now >= shared.target / 4 {
            shared.sample_warm(now);
        }
    }

    /// Whether the run has issued its target number of starts.
    pub fn done(&self) -> bool {
        self.proc.shared.done()
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.publish();
        lock(&self.proc.counts).merge(&self.c);
    }
}

/// Resident set size of this process in bytes, from `/proc/self/statm`.
pub fn rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(0) as u64
}

/// A C string that stays at one address for the rest of the process. Plugins may cache
/// descriptor strings by address (ours does), so a recycled buffer would alias.
pub fn intern(s: &str) -> *const c_char {
    use std::collections::HashMap;
    use std::ffi::CString;
    static TABLE: Mutex<Option<HashMap<String, &'static CStr>>> = Mutex::new(None);
    let mut t = lock(&TABLE);
    let map = t.get_or_insert_with(HashMap::new);
    if let Some(c) = map.get(s) {
        return c.as_ptr();
    }
    let owned = CString::new(s.replace('\0', " ")).unwrap_or_default();
    let leaked: &'static CStr = Box::leak(owned.into_boxed_c_str());
    map.insert(s.to_string(), leaked);
    leaked.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_is_stable() {
        let a = intern("AllReduce");
        let b = intern("AllReduce");
        assert_eq!(a, b);
        // SAFETY: interned strings live forever.
        assert_eq!(unsafe { CStr::from_ptr(a) }, c"AllReduce");
        assert_ne!(intern("Send"), a);
    }

    #[test]
    fn rss_is_readable() {
        assert!(rss_bytes() > 0);
    }

    #[test]
    fn env_is_restored() {
        std::env::set_var("EVRING_SIM_TEST_VAR", "before");
        let seen = with_env(&[("EVRING_SIM_TEST_VAR", "during".into())], || {
            std::env::var("EVRING_SIM_TEST_VAR").unwrap()
        });
        assert_eq!(seen, "during");
        assert_eq!(std::env::var("EVRING_SIM_TEST_VAR").unwrap(), "before");
        std::env::remove_var("EVRING_SIM_TEST_VAR");
    }
}
