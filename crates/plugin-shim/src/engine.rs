//! The engine: the process's one instance of the plugin, its settings,
//! communicators (contexts) and the shared state of the hot path.
//!
//! * Contexts are IDs in their own slab; `init` never fails.
//! * The mask is process-wide: written through NCCL's pointer, kept for
//!   run-time changes.
//! * Events: `hot.rs` is what NCCL's threads run (an ID, a clock read, one
//!   log entry); `assemble.rs` is what the writer thread makes of the log
//!   (parents, completion, bounded waiting); finalize and exit ask the
//!   writer to complete what is still open.
//! * Everything is counted (`counters.rs`).

use crate::config::Config;
use crate::counters::{Counters, StatsV1};
use crate::entry::Entry;
// The process's engine is `line().engine`: a pointer rather than a `OnceLock`
// so that a forked child can drop its parent's engine (see `fork.rs`): the
// child never touches the parent's state, whose locks other threads may have
// held at fork time.
use crate::hotline::line;
use crate::writer::{StreamMeta, Writer};
use evring::{EventId, RecordRing, TaggedSlab};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU64, Ordering};

/// Stream of events whose context is not ours (PXN) or unknown.
pub const DETACHED: u64 = 0;

/// One communicator as NCCL announced it in `init`.
pub struct Ctx {
    pub meta: StreamMeta,
    pub finalized: AtomicBool,
}

// `repr(C)` (and the engine's alignment, at least a line): what every call
// reads comes first. Line 0: the slab's 48 bytes (slots, tag, free-slot
// shards) and the log's owned-lane table, all a stop or a state reads of
// the engine; line 1: the rest of the log's header, then the mask, pid,
// finalize epoch and strict flag, which a start reads as well. With cold
// caches each line read is a miss (docs/performance.md, Round 14).
#[repr(C)]
pub struct Engine {
    /// Event IDs: a slot per event from its start until the assembler
    /// completes it. Holds nothing but the ID's validity.
    pub events: TaggedSlab<()>,
    /// The call log: one owned lane per NCCL thread (`hot.rs`), drained by
    /// the writer into the assembler.
    pub log: RecordRing<Entry>,
    /// Mask we want (and wrote); NCCL's own int is updated alongside.
    mask: AtomicI32,
    pub pid: i32,
    /// Bumped by every finalize: invalidates the per-thread context cache.
    /// Starts at a value no earlier engine of this process used.
    pub(crate) finalize_epoch: AtomicU64,
    /// `cfg.strict_mask`, beside the mask.
    strict_mask: bool,
    pub cfg: Config,
    pub ctxs: TaggedSlab<Ctx>,
    pub counters: Counters,
    mask_ptr: AtomicPtr<i32>,
    active: AtomicI64,
    /// Inits answered with `CONTEXT_OVERFLOW` and not yet finalized.
    overflow_open: AtomicI64,
    pub writer: Writer,
    logger: AtomicPtr<()>,
    /// The exit handler ran: nothing is written after its footers.
    exited: AtomicBool,
}

// The layout above, checked.
const _: () = {
    use std::mem::{align_of, offset_of};
    assert!(align_of::<Engine>() >= 64);
    assert!(offset_of!(Engine, log) == 48, "slab header not 48 bytes");
    assert!(
        offset_of!(Engine, strict_mask) < 128,
        "start's fields past line 1"
    );
};

impl Engine {
    /// The process-wide engine, built on first use from the environment.
    /// Only `init` calls this: settings are read at the first init.
    pub fn get() -> &'static Engine {
        if let Some(e) = Self::try_get() {
            return e;
        }
        let fresh = Box::into_raw(Box::new(Engine::new(Config::from_env_warn())));
        // The clock is calibrated before any call can read it through the
        // engine (the first read calibrates and publishes it).
        crate::clock::now_ns();
        match line().engine.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                crate::exit::register();
                crate::fork::register();
                // SAFETY: just published; engines are never freed.
                let e = unsafe { &*fresh };
                // Settings given before this first init, taken by the engine
                // that won (a losing candidate must not consume them).
                let pending = crate::config::take_pending();
                if let Some(m) = pending.mask {
                    e.set_mask(m);
                }
                if let Some(on) = pending.output {
                    e.writer.set_enabled(on);
                }
                e
            }
            Err(winner) => {
                // SAFETY: `fresh` was never shared; `winner` is published and
                // never freed.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*winner
                }
            }
        }
    }

    /// The engine if it exists already (for entry points that must not create it).
    #[inline]
    pub fn try_get() -> Option<&'static Engine> {
        let p = line().engine.load(Ordering::Acquire);
        // SAFETY: non-null values are published engines, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// In a forked child: forget the parent's engine (leaked, never touched
    /// again) so the child's first init builds its own. Async-signal-safe.
    pub(crate) fn forget_after_fork() {
        line().engine.store(std::ptr::null_mut(), Ordering::Release);
    }

    fn new(cfg: Config) -> Engine {
        // The process-wide tables NCCL's threads write on first use (the
        // per-thread blocks, the thread-pointer table, the string cache and
        // the symbol table: ~380 KiB) are mapped now, here, once: otherwise
        // each page's first writer, a thread of NCCL's, takes a page fault
        // (Round 16). Best effort: nothing changes where the kernel cannot.
        crate::local::populate();
        crate::strings::populate();
        crate::symbols::populate();
        evring::populate_thread_table();
        let engine = Engine {
            events: TaggedSlab::new(cfg.capacity),
            ctxs: TaggedSlab::new(cfg.max_comms),
            // Resident now: otherwise the first pushes into each page of a
            // thread's lane take a page fault on NCCL's thread (Round 14).
            log: RecordRing::new_resident(cfg.ring),
            counters: Counters::default(),
            mask: AtomicI32::new(cfg.mask),
            strict_mask: cfg.strict_mask,
            mask_ptr: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicI64::new(0),
            overflow_open: AtomicI64::new(0),
            finalize_epoch: AtomicU64::new(crate::hot::ctx_cache::first_epoch()),
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            writer: Writer::new(cfg.prefix.clone(), crate::fork::is_child(), true),
            logger: AtomicPtr::new(std::ptr::null_mut()),
            exited: AtomicBool::new(false),
            cfg,
        };
        if let Some(m) = &engine.cfg.metrics {
            engine
                .writer
                .add_sink(Box::new(crate::metrics::MetricsSink::new(
                    m.clone(),
                    crate::host::name().to_string(),
                    engine.pid,
                )));
        }
        engine
    }

    /// The counters. `completed` is what the writer took from the
    /// assembler plus the starts whose entry found no room (completed and
    /// lost at the call): exact once the writer has written what it
    /// completed (after a flush, a finalize, exit).
    pub fn stats(&self) -> StatsV1 {
        let c = &self.counters;
        c.snapshot(
            self.events.live(),
            c.records_consumed.get() + c.drop_ring_full.get(),
            self.events.inserted(),
        )
    }

    #[inline(always)]
    pub fn mask(&self) -> i32 {
        self.mask.load(Ordering::Relaxed)
    }

    /// `EVRING_MASK_STRICT`: starts outside the mask are answered NULL.
    #[inline(always)]
    pub fn strict_mask(&self) -> bool {
        self.strict_mask
    }

    /// Changes the activation mask at run time (NCCL applies it to operations
    /// enqueued afterwards).
    pub fn set_mask(&self, mask: i32) {
        self.mask.store(mask, Ordering::Relaxed);
        let p = self.mask_ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `p` is the pointer NCCL passed to init: a live, aligned
            // process-wide int that NCCL itself reads atomically.
            unsafe { AtomicI32::from_ptr(p) }.store(mask, Ordering::Relaxed);
        }
    }

    pub fn logger(&self) -> crate::abi::Logger {
        let p = self.logger.load(Ordering::Acquire);
        if p.is_null() {
            None
        } else {
            // SAFETY: only ever stored from a non-null `Logger` function pointer.
            Some(unsafe { std::mem::transmute::<*mut (), crate::log::LogFn>(p) })
        }
    }

    // ---- init / finalize -------------------------------------------------

    /// NCCL's init: returns the context ID (0 only when disabled). Never
    /// waits on the writer: the trace file is opened by the writer thread.
    pub fn init(
        &'static self,
        mask_ptr: *mut i32,
        meta: StreamMeta,
        logfn: crate::abi::Logger,
    ) -> u64 {
        self.counters.inits.incr();
        if let Some(f) = logfn {
            self.logger.store(f as *mut (), Ordering::Release);
        }
        if self.cfg.disabled {
            return 0;
        }
        if !mask_ptr.is_null() && mask_ptr.is_aligned() {
            self.mask_ptr.store(mask_ptr, Ordering::Release);
            self.set_mask(self.mask());
        }
        self.writer.ensure_started(self);
        let ctx = Ctx {
            meta: meta.clone(),
            finalized: AtomicBool::new(false),
        };
        let id = match self.ctxs.insert(ctx) {
            Ok(id) => id,
            Err(full) => {
                self.retire_finalized_contexts();
                match self.ctxs.insert(full.0) {
                    Ok(id) => id,
                    Err(_) => return self.overflow_init(),
                }
            }
        };
        self.active.fetch_add(1, Ordering::AcqRel);
        self.writer.open(id.get(), meta);
        id.get()
    }

    /// The context registry is full: the communicator's events go to the
    /// detached stream. Warned at the 1st, 2nd, 4th, 8th... refusal, not at
    /// every one (a job creating thousands of communicators printed 981 lines).
    fn overflow_init(&self) -> u64 {
        self.counters.context_full.incr();
        let n = self.counters.context_full.get();
        if n.is_power_of_two() {
            crate::log::warn(
                self,
                &format!(
                    "context registry full ({} slots, EVRING_MAX_COMMS); events go to the detached stream ({n} inits so far)",
                    self.cfg.max_comms
                ),
            );
        }
        self.overflow_open.fetch_add(1, Ordering::AcqRel);
        self.active.fetch_add(1, Ordering::AcqRel);
        CONTEXT_OVERFLOW
    }

    /// NCCL's finalize: asks the writer to complete the context's open
    /// events and write its footer, and waits for that at most
    /// `FINALIZE_WAIT` (the last finalize: while the writer makes progress,
    /// so that nothing is live when it returns). Unknown, garbage and repeated contexts are
    /// refused and counted (`bad_contexts`).
    pub fn finalize(&'static self, ctx: u64) {
        if ctx == CONTEXT_OVERFLOW {
            // Only as many overflow finalizes as overflow inits were handed out.
            let ok = self
                .overflow_open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n > 0).then(|| n - 1)
                })
                .is_ok();
            if !ok {
                self.counters.bad_contexts.incr();
                return;
            }
            self.counters.finalizes.incr();
            self.context_closed(None);
            return;
        }
        let won = EventId::from_raw(ctx)
            .and_then(|id| {
                self.ctxs
                    .with(id, |c| !c.finalized.swap(true, Ordering::AcqRel))
                    .ok()
            })
            .unwrap_or(false);
        if !won {
            self.counters.bad_contexts.incr();
            return;
        }
        // Release, after the flag: a start that sees the new epoch misses its
        // context cache and then sees the flag.
        self.finalize_epoch.fetch_add(1, Ordering::Release);
        self.counters.finalizes.incr();
        self.context_closed(Some(ctx));
        crate::log::summary(self, ctx);
    }

    /// One communicator fewer; the last one also completes whatever is still
    /// live (nothing may stay live once no communicator is open).
    fn context_closed(&'static self, ctx: Option<u64>) {
        let last = self.active.fetch_sub(1, Ordering::AcqRel) == 1;
        self.writer.close(ctx, last, self);
        if last {
            self.retire_finalized_contexts();
        }
    }

    /// Communicators initialised and not finalized.
    pub fn open_comms(&self) -> i64 {
        self.active.load(Ordering::Acquire)
    }

    fn retire_finalized_contexts(&self) {
        let done: Vec<EventId> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.finalized.load(Ordering::Acquire))
            .map(|(id, _)| id)
            .collect();
        for id in done {
            drop(self.ctxs.retire(id));
        }
    }

    /// Process exit without finalize: complete everything, then let the
    /// writer write every stream's footer. Waits for the writer only while it
    /// makes progress (`writer::Writer::exit`); nothing is written afterwards,
    /// so the footers are the last lines of every file.
    pub fn exit(&'static self) {
        if self.exited.swap(true, Ordering::AcqRel) {
            return;
        }
        self.writer.exit(self);
    }
}

/// Context handed out when the registry is full: events go to the detached
/// stream. Well-formed for no slab (all high bits set), never 0.
pub const CONTEXT_OVERFLOW: u64 = u64::MAX;
