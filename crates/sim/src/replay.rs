//! Replays a recorded call log (the format of `tests/fixtures/nccl-2.28.9/README.md`)
//! through a plugin.
//!
//! * Each log is one process: it gets its own private plugin instance.
//! * Handles and contexts in the log are symbols. Each START's recorded handle is mapped
//!   to what the plugin under test returned, and later uses (STOP, REC, parents,
//!   `parentGroup`) go through that map. A symbol no earlier START or INIT produced is
//!   passed through unchanged: to the plugin it is a foreign value, as another process's
//!   handle would be under PXN (counted in the outcome's notes).
//! * Calls run in file order on one thread. The log is in call order within the
//!   process, so this keeps every happens-before the recording saw; it does not replay
//!   the cross-thread races themselves (the scenario generators do that).
//! * NCCL skips `stopEvent`/`recordEventState` for a NULL handle except on the NetPlugin
//!   path; the replay does the same with the handles the plugin under test returned.
//! * The recorded runs never reached `finalize` (PyTorch exits without it). A replay
//!   finalizes every context it initialised, after the last call, so that the no-leak
//!   property can be checked: nothing may be live after that finalize.
//! * The mask the recorder asked for (0x7FFF, all events) is the one the plugin is
//!   given, so that it expects the children the log contains.
//! * `proxyOp.pid` holds the recording process's pid for its own ops. That pid is
//!   learnt from the first ProxyOp whose parent the log started, and replaced by this
//!   process's pid, so the plugin sees local ops as local; any other pid (PXN ops of
//!   another process) is kept.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use evring_abi::{ty, DescrV6};

use crate::driver::{intern, rss_bytes, Proc, Settings, Shared};
use crate::fixture::{
    descr_v6, func_names, parse_file, parse_log, resolve_name, state_args, Rebase, Verb,
};
use crate::report::{Outcome, ProcOutcome};
use crate::scenario::{finish_dir, trace_dir, Params, Watch};

/// The mask the fixtures' recorder set (every v6 event).
pub const RECORDED_MASK: i32 = ty::ALL_V6 as i32;

struct Remap {
    handles: HashMap<u64, u64>,
    unknown: u64,
}

impl Rebase for Remap {
    fn handle(&mut self, recorded: u64) -> *mut c_void {
        match self.handles.get(&recorded) {
            Some(&h) => h as *mut c_void,
            None => {
                self.unknown += 1;
                recorded as *mut c_void
            }
        }
    }

    fn string(&mut self, s: &str) -> *const c_char {
        intern(s)
    }
}

/// Replays the log at `log` through the plugin of `p` (only the plugin, version, ring,
/// capacity, mask, trace and progress settings of `p` apply).
pub fn replay(log: &Path, p: &Params) -> Result<Outcome, String> {
    let calls = parse_file(log).map_err(|e| {
        if e.line == 0 {
            e.msg
        } else {
            format!("{}: {e}", log.display())
        }
    })?;
    let stem = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "log".into());
    replay_calls(&stem, &calls, p)
}

/// Replays a log given as text (e.g. one of [`crate::RECORDED_LOGS`]); `stem` names
/// the run.
pub fn replay_text(stem: &str, text: &str, p: &Params) -> Result<Outcome, String> {
    let calls = parse_log(text).map_err(|e| format!("{stem}: {e}"))?;
    replay_calls(stem, &calls, p)
}

fn replay_calls(stem: &str, calls: &[crate::fixture::Call], p: &Params) -> Result<Outcome, String> {
    let dir = trace_dir(p.trace_root.as_deref(), &format!("replay-{stem}"))?;
    let out = replay_calls_in(stem, calls, p, &dir);
    finish_dir(out, &dir, p.keep)
}

/// Replays `calls` with the plugin's traces in `dir` (which the caller owns).
pub fn replay_calls_in(
    stem: &str,
    calls: &[crate::fixture::Call],
    p: &Params,
    dir: &Path,
) -> Result<Outcome, String> {
    replay_in(&format!("replay {stem}"), calls, p, dir)
}

/// The settings of a replay's plugin instance with its traces in `dir`.
pub fn settings(p: &Params, dir: &Path) -> Settings {
    Settings {
        mask: Some(p.mask.unwrap_or(RECORDED_MASK)),
        trace_dir: dir.to_path_buf(),
        ring: p.ring,
        capacity: p.capacity,
        no_output: p.no_output,
        process_env: p.process_env,
    }
}

/// The pid the recording process put in its own ProxyOp descriptors: that of the first
/// ProxyOp whose parent is a handle the log itself started.
fn recorded_pid(calls: &[crate::fixture::Call]) -> Option<i32> {
    let mut started = std::collections::HashSet::new();
    for c in calls {
        if let Verb::Start {
            handle,
            ty,
            parent,
            words,
            ..
        } = &c.verb
        {
            if *ty == ty::PROXY_OP && started.contains(parent) {
                // `pid` is the first 4 bytes of the union (ProxyOpD at offset 0).
                return Some(words[0] as u32 as i32);
            }
            started.insert(*handle);
        }
    }
    None
}

fn local_pid(d: &mut DescrV6, recorded: Option<i32>, ours: i32) {
    if d.ty == ty::PROXY_OP {
        // SAFETY: `descr_v6` wrote the ProxyOp member for this type.
        let pid = unsafe { d.u.proxy_op.pid };
        if Some(pid) == recorded {
            d.u.proxy_op.pid = ours;
        }
    }
}

fn replay_in(
    name: &str,
    calls: &[crate::fixture::Call],
    p: &Params,
    dir: &Path,
) -> Result<Outcome, String> {
    let starts = calls
        .iter()
        .filter(|c| matches!(c.verb, Verb::Start { .. }))
        .count() as u64;
    let shared = Shared::new(starts.max(1));
    let settings = settings(p, dir);
    let rss_before = rss_bytes();
    let warnings_before = crate::logger::logged().0;
    let proc = Proc::open(name, &p.plugin, p.version, settings, Arc::clone(&shared))?;
    let watch = Watch::start(
        name,
        Arc::clone(&shared),
        p.progress,
        vec![Arc::clone(&proc)],
    );
    let names = func_names(calls);
    let mut remap = Remap {
        handles: HashMap::new(),
        unknown: 0,
    };
    let mut ctxs: HashMap<u64, u64> = HashMap::new();
    let mut types: HashMap<u64, u64> = HashMap::new();
    let nranks = calls
        .iter()
        .filter_map(|c| match c.verb {
            Verb::Init { rank, .. } => Some(rank + 1),
            _ => None,
        })
        .max()
        .unwrap_or(1)
        .max(2);
    let rec_pid = recorded_pid(calls);
    // SAFETY: getpid has no preconditions.
    let our_pid = unsafe { libc::getpid() };
    let t0 = Instant::now();
    let mut c = proc.caller();
    for call in calls {
        match &call.verb {
            Verb::Init {
                ctx, comm_id, rank, ..
            } => {
                let live = proc.init(*comm_id, *rank, nranks);
                ctxs.insert(*ctx, live);
            }
            Verb::Start {
                handle,
                ctx,
                ty,
                parent,
                rank,
                name,
                words,
            } => {
                let fname = resolve_name(*ty, name.as_deref(), words, &names);
                let mut d = descr_v6(*ty, *parent, *rank, fname, words, &mut remap);
                local_pid(&mut d, rec_pid, our_pid);
                let live_ctx = ctxs.get(ctx).copied().unwrap_or(*ctx);
                // The recorded descriptors are v6; a v7 core sends them with the v7
                // fields unset.
                // SAFETY: `descr_v6` initialises the member the recorded type selects.
                let d = unsafe { crate::plugin::descr_v6_to_v7(&d) };
                let h = c.start(live_ctx, &d);
                remap.handles.insert(*handle, h);
                types.insert(*handle, *ty);
            }
            Verb::Stop { handle } => {
                let live = remap.handles.get(handle).copied().unwrap_or(*handle);
                if types.get(handle) == Some(&ty::NET_PLUGIN) {
                    c.stop_always(live);
                } else {
                    c.stop(live);
                }
            }
            Verb::Rec { handle, state, arg } => {
                let live = remap.handles.get(handle).copied().unwrap_or(*handle);
                let args = arg.map(state_args);
                c.record(live, *state, args.as_ref());
            }
            Verb::Fin { ctx } => {
                let live = ctxs.get(ctx).copied().unwrap_or(*ctx);
                proc.finalize(live);
            }
        }
    }
    drop(c);
    let memory = watch.memory().filter(|_| p.judge_memory);
    proc.finalize_all();
    let wall = t0.elapsed();
    let (rss_peak, live_peak) = watch.finish();
    let mut outcome = Outcome {
        name: name.to_string(),
        wall,
        rss_before,
        rss_peak,
        live_peak,
        rss_after: rss_bytes(),
        memory,
        ..Default::default()
    };
    outcome.procs.push(ProcOutcome {
        label: name.to_string(),
        counts: proc.counts(),
        stats: proc.stats().filter(|_| !p.opaque),
        trace: crate::trace::read_dir(dir)?,
        finalized: true,
        abi: proc.version(),
    });
    outcome.judge();
    crate::logger::note_warnings(&mut outcome, warnings_before);
    if remap.unknown > 0 {
        outcome.notes.push(format!(
            "{name}: {} handles had no START in the log (passed through as foreign)",
            remap.unknown
        ));
    }
    Ok(outcome)
}
