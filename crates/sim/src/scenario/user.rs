//! The user thread: NCCL API calls (GroupApi, CollApi, P2pApi) and, for blocking
//! communicators, the launch that follows on the same thread (§3.3, §3.5, §3.6).

use std::ffi::CStr;
use std::sync::Arc;

use evring_abi::{state, ty};

use super::lane::Lane;
use super::nccl::{
    coll_api, gate, group_api, kernel_launch, p2p_api, Launcher, Plan, ProfWork, ProxyWork, Task,
    TaskOp, COLL_FUNCS,
};
use crate::driver::{Caller, Proc};

/// What the user thread's operations look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script {
    /// Collective groups and send/recv pairs, alternately.
    Mix,
    /// Grouped send/recv over several plans; every other group closes its GroupApi
    /// before the launch (the depth mismatch of `batch_isend_irecv`, §3.5).
    GroupP2p,
    /// CUDA graph capture, then replays from the callback thread (§3.6).
    Graph,
}

#[derive(Clone, Copy, Debug)]
pub struct UserCfg {
    pub script: Script,
    /// Collectives per group (1 = NCCL's implicit group).
    pub ops_per_group: u32,
    /// Graph replays per capture.
    pub replays: u32,
    /// Elements per operation.
    pub count: usize,
    /// Abort (and replace) the communicator every this many operations.
    pub abort_every: Option<u32>,
    /// Flip the NetPlugin bit of the process-wide mask every this many operations
    /// (rank 0 only), so NetPlugin stops meet starts that were skipped.
    pub toggle_net_every: Option<u64>,
    /// The plugin speaks ABI v7 (NCCL 2.31+): some AllGathers run symmetric-memory
    /// kernels (`isSymColl`, `kernelVariant`), which older versions never see.
    pub abi7: bool,
}

/// Operations per "layer": the user tag changes every this many operations.
pub const TAG_LAYER_OPS: u64 = 3;
/// Layers per cycle; the last layer of each cycle is untagged (tag 0).
pub const TAG_LAYERS: u64 = 6;
/// The first layer's tag.
pub const TAG_BASE: u64 = 0x7a90_0000;

/// The user tag of operation `ops` (1-based): one per "layer" of `TAG_LAYER_OPS`
/// operations, `TAG_BASE + layer`, with every `TAG_LAYERS`-th layer untagged.
/// Deterministic, the same on every rank.
pub fn user_tag(ops: u64) -> u64 {
    let layer = (ops.saturating_sub(1) / TAG_LAYER_OPS) % TAG_LAYERS;
    if layer == TAG_LAYERS - 1 {
        0
    } else {
        TAG_BASE + layer
    }
}

/// Whether the collective `func`/`seq` runs a symmetric-memory kernel (v7 runs only).
pub fn symmetric(func: &CStr, seq: u64) -> bool {
    func == c"AllGather" && seq % 4 == 3
}

/// One rank's user thread.
pub struct User {
    pub c: Caller,
    pub rank: i32,
    pub nranks: i32,
    pub comm_id: u64,
    pub ctx: u64,
    /// Split: the parent communicator, used by every other operation until it is
    /// destroyed half-way through the run (the child keeps the shared proxy).
    pub parent_ctx: Option<u64>,
    pub launcher: Launcher,
    /// Non-blocking communicators: plans run on NCCL's async group thread.
    pub async_lane: Option<Lane<Plan>>,
    /// Graph replays run on the CUDA callback thread.
    pub cb_lane: Option<Lane<Plan>>,
    /// Abort notices go to this rank's proxy.
    pub proxy: Option<Lane<ProxyWork>>,
    /// NCCL 2.31+: this rank's profiler thread, which sees an abort first.
    pub prof: Option<Lane<ProfWork>>,
    pub cfg: UserCfg,
    seq: [u64; COLL_FUNCS.len()],
    ops: u64,
    comm_ops: u32,
    comms: u64,
    stream: u64,
}

impl User {
    #[allow(clippy::too_many_arguments)] // One rank's wiring, spelled out at one call site.
    pub fn new(
        c: Caller,
        rank: i32,
        nranks: i32,
        comm_id: u64,
        ctx: u64,
        parent_ctx: Option<u64>,
        launcher: Launcher,
        async_lane: Option<Lane<Plan>>,
        cb_lane: Option<Lane<Plan>>,
        proxy: Option<Lane<ProxyWork>>,
        cfg: UserCfg,
    ) -> User {
        let prof = launcher.prof.clone();
        User {
            c,
            rank,
            nranks,
            comm_id,
            ctx,
            parent_ctx,
            launcher,
            async_lane,
            cb_lane,
            prof,
            proxy,
            cfg,
            seq: [0; COLL_FUNCS.len()],
            ops: 0,
            comm_ops: 0,
            comms: 1,
            stream: 0x5000_0000 + rank as u64 * 0x100,
        }
    }

    pub fn proc(&self) -> &Arc<Proc> {
        self.c.proc()
    }

    /// Whether the run has reached its target.
    pub fn done(&self) -> bool {
        self.c.done()
    }

    /// One user-level operation (one NCCL group).
    pub fn op(&mut self) {
        self.ops += 1;
        if let (Some(every), 0) = (self.cfg.toggle_net_every, self.rank) {
            if self.ops.is_multiple_of(every) {
                let m = self.c.mask() ^ ty::NET_PLUGIN;
                self.proc().set_mask(m as i32);
            }
        }
        let ctx = self.pick_ctx();
        let stall = self.abort_due();
        match self.cfg.script {
            Script::Mix if self.ops.is_multiple_of(2) => self.coll_group(ctx, stall),
            Script::Mix => self.p2p_group(ctx, 1, 1, false, stall),
            Script::GroupP2p => {
                let pairs = self.cfg.ops_per_group.max(2);
                self.p2p_group(ctx, pairs, 2, self.ops % 2 == 1, stall)
            }
            Script::Graph => self.graph(ctx),
        }
        if stall {
            self.abort();
        }
    }

    fn pick_ctx(&mut self) -> u64 {
        let Some(parent) = self.parent_ctx else {
            return self.ctx;
        };
        if self.c.proc().shared.progress() >= 0.5 {
            // Destroy the parent while the shared proxy keeps serving the child.
            self.parent_ctx = None;
            self.c.publish();
            self.proc().finalize(parent);
            return self.ctx;
        }
        if self.ops.is_multiple_of(2) {
            parent
        } else {
            self.ctx
        }
    }

    fn abort_due(&mut self) -> bool {
        let Some(every) = self.cfg.abort_every else {
            return false;
        };
        self.comm_ops += 1;
        self.comm_ops >= every
    }

    /// `ncclCommAbort` with ops in flight, then a fresh communicator for this rank.
    fn abort(&mut self) {
        self.comm_ops = 0;
        self.comms += 1;
        let old = self.ctx;
        let comm_id = self.comm_id.wrapping_add(self.comms);
        let next = self.proc().init(comm_id, self.rank, self.nranks);
        self.ctx = next;
        match (&self.prof, &self.proxy) {
            (Some(pt), proxy) => pt.post(ProfWork::Abort {
                ctx: old,
                next_ctrl_ctx: next,
                proxy: proxy.clone(),
            }),
            (None, Some(p)) => p.post(ProxyWork::Abort {
                ctx: old,
                next_ctrl_ctx: next,
            }),
            (None, None) => self.proc().finalize(old),
        }
    }

    fn next_seq(&mut self, i: usize) -> u64 {
        let s = self.seq[i];
        self.seq[i] += 1;
        s
    }

    fn begin_group(&mut self, ctx: u64, m: u64, depth: i32, captured: bool) -> u64 {
        let ga = if m & gate::GROUP_API != 0 {
            self.c.start(ctx, &group_api(depth, captured))
        } else {
            0
        };
        self.c.record(ga, state::GROUP_START_API_STOP, None);
        ga
    }

    fn coll_tasks(&mut self, ctx: u64, m: u64, ga: u64, captured: bool) -> Vec<Task> {
        let k = self.cfg.ops_per_group.max(1);
        let tag = user_tag(self.ops);
        let mut tasks = Vec::with_capacity(k as usize);
        for j in 0..k {
            let i = ((self.ops + u64::from(j)) % COLL_FUNCS.len() as u64) as usize;
            let func: &'static CStr = COLL_FUNCS[i];
            let ca = if m & gate::COLL_API != 0 {
                self.c.start(
                    ctx,
                    &coll_api(ga, func, self.cfg.count, self.stream, captured, tag),
                )
            } else {
                0
            };
            self.c.stop(ca);
            let seq = self.next_seq(i);
            let sym = self.cfg.abi7 && symmetric(func, seq);
            tasks.push(Task {
                api: ca,
                op: TaskOp::Coll { func, seq, sym },
                count: self.cfg.count,
                tag,
            });
        }
        tasks
    }

    fn plan(&self, ctx: u64, m: u64, ga: u64, tasks: Vec<Task>) -> Plan {
        Plan {
            ctx,
            rank: self.rank,
            nranks: self.nranks,
            mask: m,
            ga,
            stream: self.stream,
            tasks,
        }
    }

    /// `ncclAllReduce` & co. (one, or several inside `ncclGroupStart/End`).
    fn coll_group(&mut self, ctx: u64, stall: bool) {
        let m = self.c.mask();
        let depth = if self.cfg.ops_per_group > 1 { 2 } else { 1 };
        let ga = self.begin_group(ctx, m, depth, false);
        let tasks = self.coll_tasks(ctx, m, ga, false);
        self.c.record(ga, state::GROUP_END_API_START, None);
        let plan = self.plan(ctx, m, ga, tasks);
        self.run_plan(plan, stall);
        self.c.stop(ga);
    }

    /// Blocking: launch here, before the GroupApi stop. Non-blocking: hand the plan to
    /// the async thread, whose events then start after the GroupApi stop.
    fn run_plan(&mut self, plan: Plan, stall: bool) {
        match &self.async_lane {
            Some(l) => l.post(plan),
            None => self.launcher.launch(&mut self.c, &plan, false, stall),
        }
    }

    /// `ncclGroupStart(); ncclSend/ncclRecv…; ncclGroupEnd()` with the tasks spread
    /// over `plans` kernel plans.
    fn p2p_group(&mut self, ctx: u64, pairs: u32, plans: u32, early_close: bool, stall: bool) {
        let m = self.c.mask();
        let depth = if early_close { 3 } else { 2 };
        let ga = self.begin_group(ctx, m, depth, false);
        let n = self.nranks.max(1);
        let tag = user_tag(self.ops);
        let mut tasks = Vec::with_capacity(pairs as usize * 2);
        for p in 0..pairs as i32 {
            for send in [true, false] {
                let peer = if send {
                    (self.rank + 1 + p) % n
                } else {
                    (self.rank + n - 1 - p % n) % n
                };
                let pa = if m & gate::P2P_API != 0 {
                    self.c.start(
                        ctx,
                        &p2p_api(ga, send, self.cfg.count, self.stream, false, tag),
                    )
                } else {
                    0
                };
                self.c.stop(pa);
                tasks.push(Task {
                    api: pa,
                    op: TaskOp::P2p { send, peer },
                    count: self.cfg.count,
                    tag,
                });
            }
        }
        self.c.record(ga, state::GROUP_END_API_START, None);
        if early_close {
            self.c.stop(ga);
        }
        let per = tasks.len().div_ceil(plans.max(1) as usize).max(1);
        for chunk in tasks.chunks(per) {
            let plan = self.plan(ctx, m, ga, chunk.to_vec());
            self.run_plan(plan, stall);
        }
        if !early_close {
            self.c.stop(ga);
        }
    }

    /// Capture: API events marked captured and a KernelLaunch bracketing the recorded
    /// launch. A plan with proxy work gets Group/Coll events on every replay, from the
    /// callback thread, whose parent is the CollApi handle stopped here; one without
    /// runs its task events once, now, and replays emit nothing.
    fn graph(&mut self, ctx: u64) {
        let m = self.c.mask();
        let ga = self.begin_group(ctx, m, 1, true);
        let tasks = self.coll_tasks(ctx, m, ga, true);
        self.c.record(ga, state::GROUP_END_API_START, None);
        let replayed = self.launcher.has_proxy_work(m);
        let plan = self.plan(ctx, m, ga, tasks);
        if replayed {
            if m & ty::KERNEL_LAUNCH != 0 {
                let kl = self.c.start(ctx, &kernel_launch(ga, self.stream));
                self.c.stop(kl);
            }
        } else {
            self.launcher.launch(&mut self.c, &plan, false, false);
        }
        self.c.stop(ga);
        let Some(cb) = self.cb_lane.clone() else {
            return;
        };
        if !replayed {
            return;
        }
        for r in 0..self.cfg.replays.max(1) {
            let mut p = plan.clone();
            // The per-function counter only advances for graphs with KernelCh on.
            if m & ty::KERNEL_CH != 0 && r > 0 {
                for t in &mut p.tasks {
                    if let TaskOp::Coll { func, seq, sym } = t.op {
                        let i = COLL_FUNCS.iter().position(|f| *f == func).unwrap_or(0);
                        let _ = seq;
                        t.op = TaskOp::Coll {
                            func,
                            seq: self.next_seq(i),
                            sym,
                        };
                    }
                }
            }
            cb.post(p);
        }
    }
}
