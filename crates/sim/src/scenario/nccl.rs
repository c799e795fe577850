//! NCCL's call sequences (docs: `nccl-profiler-abi.md` §3), one function or role per
//! NCCL code path: the user thread's API events and blocking launch, the launch of a
//! plan (shared by the user thread, the async group thread and the CUDA callback
//! thread), the proxy progress thread (ProxyCtrl, KernelCh, ProxyOp, ProxyStep, IB
//! NetPlugin), the socket helper threads, and from ABI v7 on (NCCL 2.31+) the profiler
//! thread, which takes KernelCh (and its KernelPhase children) from the proxy thread.
//!
//! Every event is gated by the mask the way NCCL gates it (§3.1): task events by the
//! snapshot taken when the operation was enqueued, ProxyCtrl by the live mask at each
//! start and record.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void, CStr};

use evring_abi::{
    net, phase, state, ty, CollApiV7, CollV7, DescrV7, GroupApiV5, KernelChArgs, KernelChV4,
    KernelLaunchV5, KernelPhaseV7, NetIbDescrV1, NetIbQpV1, NetPluginD, NetSockDescrV1, NetSockV1,
    P2pApiV7, P2pV7, ProxyCtrlArgs, ProxyOpD, ProxyStepArgs, ProxyStepD, StateArgsV4,
};

use super::lane::{Lane, Role};
use crate::driver::Caller;

/// Which mask bits make NCCL start each event (§3.1, "Gated by").
pub mod gate {
    use evring_abi::ty as t;

    const TASK_CHILDREN: u64 = t::PROXY_OP | t::PROXY_STEP | t::KERNEL_CH | t::NET_PLUGIN;
    pub const GROUP_API: u64 = t::GROUP_API
        | t::P2P_API
        | t::COLL_API
        | t::KERNEL_LAUNCH
        | t::GROUP
        | t::COLL
        | t::P2P
        | TASK_CHILDREN
        | t::CE;
    pub const COLL_API: u64 = t::COLL_API | t::COLL | TASK_CHILDREN | t::CE;
    pub const P2P_API: u64 = t::P2P_API | t::P2P | TASK_CHILDREN;
    pub const GROUP: u64 = t::GROUP | t::COLL | t::P2P | TASK_CHILDREN;
    pub const COLL: u64 = t::COLL | TASK_CHILDREN;
    pub const P2P: u64 = t::P2P | TASK_CHILDREN;
    pub const PROXY_OP: u64 = t::PROXY_OP | t::PROXY_STEP | t::NET_PLUGIN;
    pub const PROXY_STEP: u64 = t::PROXY_STEP | t::NET_PLUGIN;
}

/// How ranks move data, which decides what the proxy thread does (§3.3, §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Transport {
    /// Shared memory: no proxy progress at all.
    Shm,
    /// CUDA P2P: no proxy ops; the proxy thread only polls KernelCh.
    P2p,
    /// NET over sockets: ProxyOp/ProxyStep; NetPlugin only from socket helper threads.
    Socket,
    /// NET over IB: ProxyOp/ProxyStep and NetPlugin QP events on the proxy thread.
    Ib,
}

impl Transport {
    pub fn net(self) -> bool {
        matches!(self, Transport::Socket | Transport::Ib)
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::P2p => "p2p",
            Transport::Socket => "socket",
            Transport::Ib => "ib",
        }
    }

    pub fn parse(s: &str) -> Option<Transport> {
        Some(match s {
            "shm" => Transport::Shm,
            "p2p" => Transport::P2p,
            "socket" | "eth" => Transport::Socket,
            "ib" => Transport::Ib,
            _ => return None,
        })
    }
}

/// Sizes of the simulated work.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Channels per collective or p2p (one KernelCh, and one send/recv ProxyOp pair, each).
    pub channels: u8,
    /// Network steps per ProxyOp.
    pub steps: u32,
    /// IB queue pairs per request (one NetPlugin event each).
    pub qps: u32,
    /// Proxy ops the proxy thread keeps in flight before progressing the oldest.
    pub window: usize,
    pub transport: Transport,
}

// ---------------------------------------------------------------------------------------
// Descriptors. Strings are static literals, as NCCL's are.
// ---------------------------------------------------------------------------------------

const FLOAT: &CStr = c"ncclFloat32";
const RING: &CStr = c"RING";
const SIMPLE: &CStr = c"SIMPLE";

fn descr(t: u64, parent: u64, rank: i32) -> DescrV7 {
    let mut d = DescrV7::zeroed();
    d.ty = t;
    d.parent_obj = parent as *mut c_void;
    d.rank = rank;
    d
}

fn addr(v: u64) -> *mut c_void {
    v as *mut c_void
}

pub fn group_api(depth: i32, captured: bool) -> DescrV7 {
    let mut d = descr(ty::GROUP_API, 0, 0);
    d.u.group_api = GroupApiV5 {
        graph_captured: captured,
        group_depth: depth,
    };
    d
}

/// `tag`: the call's user profiler tag (v7 `userTag`; 0: untagged).
pub fn coll_api(
    parent: u64,
    func: &'static CStr,
    count: usize,
    stream: u64,
    captured: bool,
    tag: u64,
) -> DescrV7 {
    let mut d = descr(ty::COLL_API, parent, 0);
    d.u.coll_api = CollApiV7 {
        func: func.as_ptr(),
        count,
        datatype: FLOAT.as_ptr(),
        root: 0,
        stream: addr(stream),
        graph_captured: captured,
        user_tag: tag,
    };
    d
}

pub fn p2p_api(
    parent: u64,
    send: bool,
    count: usize,
    stream: u64,
    captured: bool,
    tag: u64,
) -> DescrV7 {
    let mut d = descr(ty::P2P_API, parent, 0);
    d.u.p2p_api = P2pApiV7 {
        func: p2p_func(send).as_ptr(),
        count,
        datatype: FLOAT.as_ptr(),
        stream: addr(stream),
        graph_captured: captured,
        user_tag: tag,
    };
    d
}

fn p2p_func(send: bool) -> &'static CStr {
    if send {
        c"Send"
    } else {
        c"Recv"
    }
}

pub fn kernel_launch(parent: u64, stream: u64) -> DescrV7 {
    let mut d = descr(ty::KERNEL_LAUNCH, parent, 0);
    d.u.kernel_launch = KernelLaunchV5 {
        stream: addr(stream),
    };
    d
}

pub fn group() -> DescrV7 {
    descr(ty::GROUP, 0, 0)
}

pub fn proxy_ctrl() -> DescrV7 {
    descr(ty::PROXY_CTRL, 0, 0)
}

/// The kernel variant of the simulator's symmetric-memory collectives, and the `algo`
/// NCCL derives from it (the part after the underscore; `proto` is then "").
pub const SYM_VARIANT: &CStr = c"AGxLL_R";
const SYM_ALGO: &CStr = c"R";
const NO_PROTO: &CStr = c"";

/// `sym`: a symmetric-memory kernel (v7 `isSymColl`, `kernelVariant`, and NCCL's algo
/// override); `tag`: the call's user profiler tag.
#[allow(clippy::too_many_arguments)] // The fields of NCCL's descriptor.
pub fn coll(
    parent: u64,
    rank: i32,
    seq: u64,
    func: &'static CStr,
    count: usize,
    channels: u8,
    parent_group: u64,
    buf: u64,
    tag: u64,
    sym: bool,
) -> DescrV7 {
    let mut d = descr(ty::COLL, parent, rank);
    let (algo, proto, variant) = if sym {
        (SYM_ALGO, NO_PROTO, SYM_VARIANT.as_ptr())
    } else {
        (RING, SIMPLE, std::ptr::null())
    };
    d.u.coll = CollV7 {
        seq_number: seq,
        func: func.as_ptr(),
        send_buff: addr(buf).cast_const(),
        recv_buff: addr(buf),
        count,
        root: 0,
        datatype: FLOAT.as_ptr(),
        n_channels: channels,
        n_warps: 16,
        algo: algo.as_ptr(),
        proto: proto.as_ptr(),
        parent_group: addr(parent_group),
        kernel_variant: variant,
        is_sym_coll: sym,
        user_tag: tag,
    };
    d
}

#[allow(clippy::too_many_arguments)] // The fields of NCCL's descriptor.
pub fn p2p(
    parent: u64,
    rank: i32,
    send: bool,
    count: usize,
    peer: i32,
    channels: u8,
    parent_group: u64,
    tag: u64,
) -> DescrV7 {
    let mut d = descr(ty::P2P, parent, rank);
    d.u.p2p = P2pV7 {
        func: p2p_func(send).as_ptr(),
        buff: addr(0x7f00_0000_0000),
        datatype: FLOAT.as_ptr(),
        count,
        peer,
        n_channels: channels,
        parent_group: addr(parent_group),
        user_tag: tag,
    };
    d
}

#[allow(clippy::too_many_arguments)] // The fields of NCCL's descriptor.
pub fn proxy_op(
    parent: u64,
    rank: i32,
    pid: i32,
    channel: u8,
    peer: i32,
    steps: u32,
    chunk: i32,
    send: bool,
) -> DescrV7 {
    let mut d = descr(ty::PROXY_OP, parent, rank);
    d.u.proxy_op = ProxyOpD {
        pid,
        channel_id: channel,
        peer,
        n_steps: steps as c_int,
        chunk_size: chunk,
        is_send: c_int::from(send),
    };
    d
}

pub fn proxy_step(parent: u64, rank: i32, step: u32) -> DescrV7 {
    let mut d = descr(ty::PROXY_STEP, parent, rank);
    d.u.proxy_step = ProxyStepD {
        step: step as c_int,
    };
    d
}

pub fn kernel_ch(parent: u64, channel: u8, gpu_start: u64) -> DescrV7 {
    let mut d = descr(ty::KERNEL_CH, parent, 0);
    d.u.kernel_ch = KernelChV4 {
        channel_id: channel,
        p_timer: gpu_start,
    };
    d
}

/// NCCL's names of the three kernel phases (`profilerPhaseNames`).
pub const PHASE_NAMES: [&CStr; 3] = [c"initial_sync", c"compute", c"final_sync"];

/// A KernelPhase (v7): phase `id` of channel `channel`, child of the KernelCh `parent`.
pub fn kernel_phase(parent: u64, channel: u8, id: u8, gpu_start: u64) -> DescrV7 {
    let mut d = descr(ty::KERNEL_PHASE, parent, 0);
    d.u.kernel_phase = KernelPhaseV7 {
        channel_id: channel,
        phase_id: id,
        phase_name: PHASE_NAMES[id as usize].as_ptr(),
        p_timer: gpu_start,
    };
    d
}

pub fn net_plugin(parent: u64, id: u32, data: *mut c_void) -> DescrV7 {
    let mut d = descr(ty::NET_PLUGIN, parent, 0);
    d.u.net_plugin = NetPluginD {
        id: i64::from(id),
        data,
    };
    d
}

fn size_args(n: usize) -> StateArgsV4 {
    StateArgsV4 {
        proxy_step: ProxyStepArgs { trans_size: n },
    }
}

fn ops_args(n: usize) -> StateArgsV4 {
    // The union is 8 bytes and `appendedProxyOps` only 4: start from a zeroed word so
    // the whole union is initialised.
    let mut a = StateArgsV4 {
        kernel_ch: KernelChArgs { p_timer: 0 },
    };
    a.proxy_ctrl = ProxyCtrlArgs {
        appended_proxy_ops: n as c_int,
    };
    a
}

fn timer_args(t: u64) -> StateArgsV4 {
    StateArgsV4 {
        kernel_ch: KernelChArgs { p_timer: t },
    }
}

fn zero_args() -> StateArgsV4 {
    timer_args(0)
}

// ---------------------------------------------------------------------------------------
// Plans and their launch.
// ---------------------------------------------------------------------------------------

/// The collective functions the simulator cycles through (Broadcast is left out: on
/// NCCL's default AllGatherV path it produces API events only, §3.1).
pub const COLL_FUNCS: [&CStr; 3] = [c"AllReduce", c"AllGather", c"ReduceScatter"];

/// One task of a kernel plan.
#[derive(Clone, Copy, Debug)]
pub enum TaskOp {
    /// `sym`: a symmetric-memory kernel (v7 only).
    Coll {
        func: &'static CStr,
        seq: u64,
        sym: bool,
    },
    P2p {
        send: bool,
        peer: i32,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Task {
    /// The CollApi/P2pApi handle saved in the task at append time: the Coll/P2p parent.
    pub api: u64,
    pub op: TaskOp,
    pub count: usize,
    /// The call's user profiler tag (0: untagged), on its API event and its Coll/P2p.
    pub tag: u64,
}

/// One kernel plan, as `doLaunches`/`hostStreamPlanTask` see it.
#[derive(Clone, Debug)]
pub struct Plan {
    pub ctx: u64,
    pub rank: i32,
    pub nranks: i32,
    /// The mask snapshot of the plan's first task.
    pub mask: u64,
    /// GroupApi handle stored in the first task (KernelLaunch's parent).
    pub ga: u64,
    pub stream: u64,
    pub tasks: Vec<Task>,
}

/// Where a task's proxy work goes.
pub struct Launcher {
    pub proxy: Option<Lane<ProxyWork>>,
    /// PXN: the proxy of another process that runs every other NET op.
    pub remote: Option<Lane<ProxyWork>>,
    /// NCCL 2.31+ (ABI v7): the profiler thread, which delivers KernelCh (and
    /// KernelPhase) instead of the proxy thread.
    pub prof: Option<Lane<ProfWork>>,
    pub shape: Shape,
    /// Our process's pid as NCCL puts it in ProxyOp descriptors.
    pub pid: i32,
    handles: Vec<u64>,
    routed: u64,
}

impl Launcher {
    pub fn new(
        proxy: Option<Lane<ProxyWork>>,
        remote: Option<Lane<ProxyWork>>,
        shape: Shape,
    ) -> Self {
        Launcher {
            proxy,
            remote,
            prof: None,
            shape,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            handles: Vec::new(),
            routed: 0,
        }
    }

    /// Whether tasks of this plan have proxy work (the proxy thread runs, and a graph
    /// plan gets a host callback per replay).
    pub fn has_proxy_work(&self, mask: u64) -> bool {
        self.shape.transport.net() || mask & ty::KERNEL_CH != 0
    }

    /// KernelLaunch (unless a graph replay), Group, the tasks with their proxy work
    /// posted, then the stops: `enqueue.cc:1436-1450` and `ncclLaunchKernel`.
    pub fn launch(&mut self, c: &mut Caller, plan: &Plan, replay: bool, stall: bool) {
        let m = plan.mask;
        if !replay && m & ty::KERNEL_LAUNCH != 0 {
            let kl = c.start(plan.ctx, &kernel_launch(plan.ga, plan.stream));
            c.stop(kl);
        }
        let g = if m & gate::GROUP != 0 {
            c.start(plan.ctx, &group())
        } else {
            0
        };
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        for t in &plan.tasks {
            let h = match t.op {
                TaskOp::Coll { func, seq, sym } if m & gate::COLL != 0 => c.start(
                    plan.ctx,
                    &coll(
                        t.api,
                        plan.rank,
                        seq,
                        func,
                        t.count,
                        self.shape.channels,
                        g,
                        0x7f00_0000_0000,
                        t.tag,
                        sym,
                    ),
                ),
                TaskOp::P2p { send, peer } if m & gate::P2P != 0 => c.start(
                    plan.ctx,
                    &p2p(
                        t.api,
                        plan.rank,
                        send,
                        t.count,
                        peer,
                        self.shape.channels,
                        g,
                        t.tag,
                    ),
                ),
                _ => 0,
            };
            handles.push(h);
            self.post(plan, t, h, stall);
        }
        for &h in &handles {
            c.stop(h);
        }
        c.stop(g);
        self.handles = handles;
    }

    fn post(&mut self, plan: &Plan, t: &Task, parent: u64, stall: bool) {
        let kernel = plan.mask & ty::KERNEL_CH != 0;
        let net = self.shape.transport.net();
        if !kernel && !net {
            return;
        }
        let (send, recv, peer) = match t.op {
            TaskOp::Coll { .. } => (true, true, (plan.rank + 1) % plan.nranks.max(1)),
            // A send/recv to the rank itself is a local copy: NCCL emits no
            // KernelCh or ProxyOp for it (tests/fixtures/nccl-2.28.9-2rank-net).
            TaskOp::P2p { peer, .. } if peer == plan.rank => return,
            TaskOp::P2p { send, peer } => (send, !send, peer),
        };
        // NCCL 2.31+: the profiler thread delivers the task's KernelCh events.
        let kernel = match (&self.prof, kernel) {
            (Some(prof), true) => {
                prof.post(ProfWork::Kernel(KernelWork {
                    ctx: plan.ctx,
                    mask: plan.mask,
                    parent,
                    channels: self.shape.channels,
                    stall,
                }));
                false
            }
            _ => kernel,
        };
        if !kernel && !net {
            return;
        }
        let work = OpWork {
            ctx: plan.ctx,
            mask: plan.mask,
            parent,
            rank: plan.rank,
            pid: self.pid,
            peer,
            send,
            recv,
            kernel,
            net,
            stall,
            bytes: t.count * 4,
        };
        // PXN: every other NET op is run by the other process's proxy, which sees our
        // context, our parent and a pid that is not its own. KernelCh stays local.
        if let (Some(remote), true) = (&self.remote, net) {
            self.routed += 1;
            if self.routed.is_multiple_of(2) {
                remote.post(ProxyWork::Op(OpWork {
                    kernel: false,
                    pid: self.pid.wrapping_add(1),
                    ..work
                }));
                if kernel {
                    self.post_local(OpWork { net: false, ..work });
                }
                return;
            }
        }
        self.post_local(work);
    }

    fn post_local(&self, w: OpWork) {
        if let Some(p) = &self.proxy {
            p.post(ProxyWork::Op(w));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The proxy progress thread.
// ---------------------------------------------------------------------------------------

/// The proxy ops of one task (all its channels), as `ncclProxyStart` posts them.
#[derive(Clone, Copy, Debug)]
pub struct OpWork {
    pub ctx: u64,
    pub mask: u64,
    /// The Coll/P2p handle (`sub->taskEventHandle`).
    pub parent: u64,
    pub rank: i32,
    /// `proxyOp.pid`: the originating process.
    pub pid: i32,
    pub peer: i32,
    pub send: bool,
    pub recv: bool,
    /// KernelCh events for every channel (local proxy only).
    pub kernel: bool,
    /// NET proxy ops (ProxyOp, ProxyStep, NetPlugin).
    pub net: bool,
    /// The network never completes these (the ops an abort finds in flight).
    pub stall: bool,
    pub bytes: usize,
}

pub enum ProxyWork {
    Op(OpWork),
    /// `ncclCommAbort` of `ctx`: the loop exits with everything in flight left open,
    /// then the comm is finalized (from this thread). The proxy then serves the next
    /// communicator, whose context ProxyCtrl events carry.
    Abort {
        ctx: u64,
        next_ctrl_ctx: u64,
    },
}

/// What the proxy does when its lane closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyEnd {
    /// Destroy: progress everything, wake up (closing the Sleep event), exit.
    Clean,
    /// Process exit without destroy: the Sleep event stays open (§3.12).
    LeaveSleep,
}

struct InFlight {
    w: OpWork,
    /// KernelCh handles per channel.
    kch: Vec<u64>,
    /// ProxyOp handles with (is_send, channel).
    ops: Vec<(u64, bool, u8)>,
}

/// IB request bookkeeping that NCCL keeps per proxy (`net_ib/p2p.cc`).
struct Ib {
    /// NetPlugin handle slots of the request structure; never cleared, so a stop after
    /// a skipped start sends whatever the slot held (NULL or a stale handle).
    slots: Vec<u64>,
    requests: u64,
    /// Recv descriptors leave opcode and length unset: they keep the last values.
    opcode: c_int,
    length: usize,
}

pub struct Proxy {
    c: Caller,
    /// `proxyState->profilerContext`: the comm that created the proxy state.
    ctrl_ctx: u64,
    shape: Shape,
    window: VecDeque<InFlight>,
    spare: Vec<InFlight>,
    /// Open ProxyCtrl Sleep event.
    sleep: u64,
    end: ProxyEnd,
    helper: Option<Lane<Vec<SockJob>>>,
    /// Socket tasks of the op being progressed, handed to the helper in one batch.
    sock_jobs: Vec<SockJob>,
    gpu_clock: u64,
    ib: Ib,
    /// Step handle of the current occupant of the first request slot: what socket
    /// helper threads report as their parent (`net_socket.cc:576-577`).
    slot0_step: u64,
    stalled: Vec<InFlight>,
}

impl Proxy {
    pub fn new(
        c: Caller,
        ctrl_ctx: u64,
        shape: Shape,
        end: ProxyEnd,
        helper: Option<Lane<Vec<SockJob>>>,
    ) -> Proxy {
        let qps = shape.qps.max(1) as usize;
        Proxy {
            c,
            ctrl_ctx,
            shape,
            window: VecDeque::new(),
            spare: Vec::new(),
            sleep: 0,
            end,
            helper,
            sock_jobs: Vec::new(),
            gpu_clock: 1 << 40,
            ib: Ib {
                slots: vec![0; qps * 2],
                requests: 0,
                opcode: 0,
                length: 0,
            },
            slot0_step: 0,
            stalled: Vec::new(),
        }
    }

    fn ctrl_on(&self) -> bool {
        self.c.mask() & ty::PROXY_CTRL != 0
    }

    /// A ProxyCtrl start, gated by the live mask.
    fn ctrl_start(&mut self) -> u64 {
        if self.ctrl_on() {
            self.c.start(self.ctrl_ctx, &proxy_ctrl())
        } else {
            0
        }
    }

    fn ctrl_record(&mut self, h: u64, s: c_int, args: &StateArgsV4) {
        if self.ctrl_on() {
            self.c.record(h, s, Some(args));
        }
    }

    /// start, one state, stop: Idle (13) and Active (14).
    fn ctrl_blip(&mut self, s: c_int) {
        let h = self.ctrl_start();
        self.ctrl_record(h, s, &zero_args());
        self.c.stop(h);
    }

    fn wake(&mut self) {
        if self.sleep != 0 {
            let h = std::mem::take(&mut self.sleep);
            self.ctrl_record(h, state::PROXY_CTRL_WAKEUP, &zero_args());
            self.c.stop(h);
            self.ctrl_blip(state::PROXY_CTRL_ACTIVE);
        }
    }

    fn gpu_now(&mut self) -> u64 {
        self.gpu_clock += 640;
        self.gpu_clock
    }

    fn append(&mut self, w: OpWork) {
        self.wake();
        let mut f = self.spare.pop().unwrap_or(InFlight {
            w,
            kch: Vec::new(),
            ops: Vec::new(),
        });
        f.w = w;
        f.kch.clear();
        f.ops.clear();
        let ctrl = self.ctrl_start();
        self.ctrl_record(ctrl, state::PROXY_CTRL_APPEND, &zero_args());
        if w.net && w.mask & gate::PROXY_OP != 0 {
            let chunk =
                (w.bytes / self.shape.channels.max(1) as usize / self.shape.steps.max(1) as usize)
                    .max(1) as i32;
            for ch in 0..self.shape.channels {
                for send in [true, false] {
                    if (send && !w.send) || (!send && !w.recv) {
                        continue;
                    }
                    let d = proxy_op(
                        w.parent,
                        w.rank,
                        w.pid,
                        ch,
                        w.peer,
                        self.shape.steps,
                        chunk,
                        send,
                    );
                    let h = self.c.start(w.ctx, &d);
                    f.ops.push((h, send, ch));
                }
            }
        } else if w.net {
            // No ProxyOp events, but the ops still run: keep their places.
            for ch in 0..self.shape.channels {
                if w.send {
                    f.ops.push((0, true, ch));
                }
                if w.recv {
                    f.ops.push((0, false, ch));
                }
            }
        }
        let n = f.ops.len();
        self.ctrl_record(ctrl, state::PROXY_CTRL_APPEND_END, &ops_args(n));
        self.c.stop(ctrl);
        if w.kernel {
            for ch in 0..self.shape.channels {
                let t = self.gpu_now();
                let h = self.c.start(w.ctx, &kernel_ch(w.parent, ch, t));
                f.kch.push(h);
            }
        }
        if w.stall {
            self.stalled.push(f);
            return;
        }
        self.window.push_back(f);
        while self.window.len() > self.shape.window {
            if let Some(old) = self.window.pop_front() {
                self.progress(old);
            }
        }
    }

    /// Runs one task's ops to completion: InProgress, every step, the ProxyOp stops,
    /// then the kernel's end on every channel.
    fn progress(&mut self, mut f: InFlight) {
        let w = f.w;
        for i in 0..f.ops.len() {
            let (op, send, _) = f.ops[i];
            self.c
                .record(op, state::PROXY_OP_IN_PROGRESS_V4, Some(&zero_args()));
            let chunk =
                (w.bytes / self.shape.channels.max(1) as usize / self.shape.steps.max(1) as usize)
                    .max(1);
            for k in 0..self.shape.steps {
                if send {
                    self.send_step(&w, op, k, chunk);
                } else {
                    self.recv_step(&w, op, k, chunk);
                }
            }
        }
        for i in 0..f.ops.len() {
            let op = f.ops[i].0;
            self.c.stop(op);
        }
        if let (Some(h), false) = (&self.helper, self.sock_jobs.is_empty()) {
            h.post(std::mem::take(&mut self.sock_jobs));
        }
        for i in 0..f.kch.len() {
            let h = f.kch[i];
            let t = self.gpu_now();
            self.c
                .record(h, state::KERNEL_CH_STOP, Some(&timer_args(t)));
            self.c.stop(h);
        }
        f.ops.clear();
        f.kch.clear();
        self.spare.push(f);
    }

    fn step_start(&mut self, w: &OpWork, op: u64, k: u32) -> u64 {
        if w.mask & gate::PROXY_STEP != 0 {
            let s = self.c.start(w.ctx, &proxy_step(op, w.rank, k));
            if k.is_multiple_of(8) {
                self.slot0_step = s;
            }
            s
        } else {
            0
        }
    }

    /// `net.cc` send progress of one step: 8 at post, 20 (sometimes repeated while
    /// `isend` cannot post), 9 with the size handed to `isend`, stop at completion.
    fn send_step(&mut self, w: &OpWork, op: u64, k: u32, chunk: usize) {
        let s = self.step_start(w, op, k);
        self.c
            .record(s, state::PROXY_STEP_SEND_GPU_WAIT, Some(&size_args(chunk)));
        self.c.record(
            s,
            state::PROXY_STEP_SEND_PEER_WAIT_V4,
            Some(&size_args(chunk)),
        );
        if k % 4 == 3 {
            self.c.record(
                s,
                state::PROXY_STEP_SEND_PEER_WAIT_V4,
                Some(&size_args(chunk)),
            );
        }
        let ib = self.shape.transport == Transport::Ib;
        if ib {
            self.ib_post(w, s, true, chunk);
        }
        self.c
            .record(s, state::PROXY_STEP_SEND_WAIT, Some(&size_args(chunk)));
        if ib {
            self.ib_test(true);
        } else {
            self.socket_helper(w, chunk, true);
        }
        self.c.stop(s);
    }

    /// Recv progress: 10 when `irecv` is posted, 11 with the bytes received, 12 after
    /// the flush, stop when the GPU consumed the buffer.
    fn recv_step(&mut self, w: &OpWork, op: u64, k: u32, chunk: usize) {
        let s = self.step_start(w, op, k);
        let ib = self.shape.transport == Transport::Ib;
        if ib {
            self.ib_post(w, s, false, chunk);
        }
        self.c
            .record(s, state::PROXY_STEP_RECV_WAIT, Some(&size_args(chunk)));
        self.c.record(
            s,
            state::PROXY_STEP_RECV_FLUSH_WAIT,
            Some(&size_args(chunk)),
        );
        if ib {
            self.ib_test(false);
        } else {
            self.socket_helper(w, chunk, false);
        }
        self.c
            .record(s, state::PROXY_STEP_RECV_GPU_WAIT, Some(&size_args(chunk)));
        self.c.stop(s);
    }

    /// `isend`/`irecv`: one NetPlugin start per QP (per QP and receive for a
    /// multi-recv, here every other recv request has two receives).
    fn ib_post(&mut self, w: &OpWork, step: u64, send: bool, chunk: usize) {
        let qps = self.shape.qps.max(1) as usize;
        let n = if !send && self.ib.requests % 2 == 1 {
            qps * 2
        } else {
            qps
        };
        if send {
            self.ib.opcode = 2; // IBV_WR_RDMA_WRITE_WITH_IMM
            self.ib.length = chunk;
        }
        if w.mask & ty::NET_PLUGIN == 0 {
            return;
        }
        for q in 0..n {
            let mut d = NetIbDescrV1 {
                ty: net::PROFILE_QP,
                qp: NetIbQpV1 {
                    device: 0,
                    wr_id: self.ib.requests,
                    opcode: self.ib.opcode,
                    qp_num: 0x100 + q as c_int,
                    length: self.ib.length,
                },
            };
            let data = (&mut d as *mut NetIbDescrV1).cast::<c_void>();
            self.ib.slots[q] = self
                .c
                .start(w.ctx, &net_plugin(step, net::TYPE_IB | net::IB_VER, data));
        }
    }

    /// `test`: a stop per work completion, then `ncclIbRequestComplete` stops every
    /// handle of the request again. Some requests fail the QP lookup (a further stop of
    /// slot 0), and every eighth one stops a slot this request never started.
    fn ib_test(&mut self, send: bool) {
        let qps = self.shape.qps.max(1) as usize;
        let n = if !send && self.ib.requests % 2 == 1 {
            qps * 2
        } else {
            qps
        };
        for q in 0..n {
            let h = self.ib.slots[q];
            self.c.stop_always(h);
        }
        for q in 0..n {
            let h = self.ib.slots[q];
            self.c.stop_always(h);
        }
        self.ib.requests += 1;
        if self.ib.requests.is_multiple_of(16) {
            let h = self.ib.slots[0];
            self.c.stop_always(h);
        }
        if self.ib.requests.is_multiple_of(8) && n < self.ib.slots.len() {
            let h = self.ib.slots[n];
            self.c.stop_always(h);
        }
    }

    fn socket_helper(&mut self, w: &OpWork, chunk: usize, send: bool) {
        if self.helper.is_some() {
            self.sock_jobs.push(SockJob {
                ctx: w.ctx,
                mask: w.mask,
                parent: self.slot0_step,
                op: c_int::from(!send),
                length: chunk,
            });
        }
    }

    /// Abort: every op of `ctx` in flight stays open, some in the middle of a step.
    fn abort(&mut self, ctx: u64, next: u64) {
        let mut flights: Vec<InFlight> = self.stalled.drain(..).collect();
        let mut keep = VecDeque::new();
        for f in self.window.drain(..) {
            if f.w.ctx == ctx {
                flights.push(f);
            } else {
                keep.push_back(f);
            }
        }
        self.window = keep;
        for f in flights {
            let w = f.w;
            let chunk = (w.bytes / self.shape.channels.max(1) as usize).max(1);
            for &(op, send, _) in &f.ops {
                self.c
                    .record(op, state::PROXY_OP_IN_PROGRESS_V4, Some(&zero_args()));
                let s = self.step_start(&w, op, 0);
                if send {
                    self.c
                        .record(s, state::PROXY_STEP_SEND_GPU_WAIT, Some(&size_args(chunk)));
                } else if self.shape.transport == Transport::Ib {
                    self.ib_post(&w, s, false, chunk);
                    self.c
                        .record(s, state::PROXY_STEP_RECV_WAIT, Some(&size_args(chunk)));
                }
            }
        }
        self.c.proc().finalize(ctx);
        self.ctrl_ctx = next;
    }
}

impl Role<ProxyWork> for Proxy {
    fn handle(&mut self, w: ProxyWork) {
        match w {
            ProxyWork::Op(w) => self.append(w),
            ProxyWork::Abort { ctx, next_ctrl_ctx } => self.abort(ctx, next_ctrl_ctx),
        }
    }

    /// Nothing queued: finish what is in flight, then Idle and a Sleep that stays
    /// open until the next wake-up.
    fn idle(&mut self) {
        while let Some(f) = self.window.pop_front() {
            self.progress(f);
        }
        if self.sleep == 0 {
            self.ctrl_blip(state::PROXY_CTRL_IDLE);
            let h = self.ctrl_start();
            self.ctrl_record(h, state::PROXY_CTRL_SLEEP, &zero_args());
            self.sleep = h;
        }
    }

    fn finish(&mut self) {
        while let Some(f) = self.window.pop_front() {
            self.progress(f);
        }
        if self.end == ProxyEnd::LeaveSleep {
            // A process that exits without destroying its comms finds its proxy asleep.
            self.idle();
        }
        match self.end {
            ProxyEnd::Clean => {
                let h = std::mem::take(&mut self.sleep);
                self.ctrl_record(h, state::PROXY_CTRL_WAKEUP, &zero_args());
                self.c.stop(h);
            }
            ProxyEnd::LeaveSleep => {
                let h = self.sleep;
                self.c.leave_open(h);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Socket helper threads, the CUDA callback thread, the async group thread.
// ---------------------------------------------------------------------------------------

/// A socket task progressed by a helper thread (`net_socket.cc:290-345`).
pub struct SockJob {
    ctx: u64,
    mask: u64,
    /// Whatever step the helper's captured `pHandle` names now: possibly another
    /// request's, possibly stopped.
    parent: u64,
    op: c_int,
    length: usize,
}

pub struct SockHelper {
    pub c: Caller,
    pub fd: c_int,
}

impl Role<Vec<SockJob>> for SockHelper {
    fn handle(&mut self, jobs: Vec<SockJob>) {
        for j in jobs {
            self.task(j);
        }
    }
}

impl SockHelper {
    fn task(&mut self, j: SockJob) {
        // The start checks the mask; the stop is unconditional (`profiler.cc:797-811`).
        let h = if j.mask & ty::NET_PLUGIN != 0 {
            let mut d = NetSockDescrV1 {
                ty: net::PROFILE_SOCKET,
                sock: NetSockV1 {
                    fd: self.fd,
                    op: j.op,
                    length: j.length,
                },
            };
            let data = (&mut d as *mut NetSockDescrV1).cast::<c_void>();
            self.c.start(
                j.ctx,
                &net_plugin(j.parent, net::TYPE_SOCK | net::SOCKET_VER, data),
            )
        } else {
            0
        };
        self.c.stop_always(h);
    }
}

/// Runs plans on a thread other than the user's: the CUDA host-callback thread for
/// graph replays, NCCL's async group thread for non-blocking communicators.
pub struct Launching {
    pub c: Caller,
    pub launcher: Launcher,
    pub replay: bool,
}

impl Role<Plan> for Launching {
    fn handle(&mut self, plan: Plan) {
        self.launcher.launch(&mut self.c, &plan, self.replay, false);
    }
}

// ---------------------------------------------------------------------------------------
// The profiler thread (NCCL 2.31+, ABI v7).
// ---------------------------------------------------------------------------------------

/// One task's kernel work, as `ncclProfilerPostPlanWork` hands it to the profiler thread.
#[derive(Clone, Copy, Debug)]
pub struct KernelWork {
    pub ctx: u64,
    pub mask: u64,
    /// The Coll/P2p handle (`op->taskEventHandle`).
    pub parent: u64,
    pub channels: u8,
    /// The kernel never completes (the ops an abort finds in flight).
    pub stall: bool,
}

pub enum ProfWork {
    Kernel(KernelWork),
    /// `ncclCommAbort` of `ctx`: kernels that completed are delivered, the stalled ones
    /// stay open (NCCL drains them without calling the plugin), then the abort goes on to
    /// the proxy thread, or the comm is finalized here when there is none.
    Abort {
        ctx: u64,
        next_ctrl_ctx: u64,
        proxy: Option<Lane<ProxyWork>>,
    },
}

/// One kernel channel on the profiler thread: (KernelCh handle, channel, GPU start).
type Chan = (u64, u8, u64);

/// Kernels in flight on the profiler thread before the oldest completes.
const PROF_WINDOW: usize = 4;

/// NCCL's "[Profiler Thread]" (`ncclProfilerThreadFunc`): one per communicator, shared
/// by communicators that share resources (a split's child uses its parent's). Per task
/// channel it starts the KernelCh when the kernel starts on the GPU and, when the
/// kernel is done, delivers the channel's three phases (each start → state 31 with its
/// GPU end → stop, parent = the KernelCh; only with KernelPhase in the task's mask),
/// then the KernelCh's `KernelChStop` state (with the GPU end) and stop.
pub struct ProfilerThread {
    c: Caller,
    /// Per task in flight: the work and its channels.
    window: VecDeque<(KernelWork, Vec<Chan>)>,
    gpu_clock: u64,
}

impl ProfilerThread {
    pub fn new(c: Caller) -> ProfilerThread {
        ProfilerThread {
            c,
            window: VecDeque::new(),
            gpu_clock: 1 << 41,
        }
    }

    fn gpu_now(&mut self) -> u64 {
        self.gpu_clock += 160;
        self.gpu_clock
    }

    fn kernel(&mut self, w: KernelWork) {
        let mut chans = Vec::with_capacity(w.channels as usize);
        for ch in 0..w.channels {
            let t = self.gpu_now();
            let h = self.c.start(w.ctx, &kernel_ch(w.parent, ch, t));
            chans.push((h, ch, t));
        }
        if w.stall {
            // Never completes: left open, as NCCL's drain leaves it.
            return;
        }
        self.window.push_back((w, chans));
        while self.window.len() > PROF_WINDOW {
            if let Some((w, chans)) = self.window.pop_front() {
                self.complete(&w, &chans);
            }
        }
    }

    /// `profilerFireKernelPhaseEvents` then `ncclProfilerStopKernelChEvent`, per channel.
    fn complete(&mut self, w: &KernelWork, chans: &[Chan]) {
        for &(h, ch, t0) in chans {
            // Phase boundaries: begin, after open, before close, end.
            let b = [t0, t0 + 40, t0 + 200, t0 + 240];
            if w.mask & ty::KERNEL_PHASE != 0 {
                for id in [phase::INITIAL_SYNC, phase::COMPUTE, phase::FINAL_SYNC] {
                    let i = id as usize;
                    let ph = self.c.start(w.ctx, &kernel_phase(h, ch, id, b[i]));
                    self.c
                        .record(ph, state::KERNEL_PHASE_STOP, Some(&timer_args(b[i + 1])));
                    self.c.stop(ph);
                }
            }
            self.c
                .record(h, state::KERNEL_CH_STOP, Some(&timer_args(b[3])));
            self.c.stop(h);
        }
        self.gpu_clock = self.gpu_clock.max(chans.last().map_or(0, |c| c.2 + 240));
    }

    fn drain(&mut self) {
        while let Some((w, chans)) = self.window.pop_front() {
            self.complete(&w, &chans);
        }
    }
}

impl Role<ProfWork> for ProfilerThread {
    fn handle(&mut self, w: ProfWork) {
        match w {
            ProfWork::Kernel(k) => self.kernel(k),
            ProfWork::Abort {
                ctx,
                next_ctrl_ctx,
                proxy,
            } => {
                self.drain();
                match proxy {
                    Some(p) => p.post(ProxyWork::Abort { ctx, next_ctrl_ctx }),
                    None => self.c.proc().finalize(ctx),
                }
            }
        }
    }

    /// Nothing queued: every kernel posted so far has completed on the GPU.
    fn idle(&mut self) {
        self.drain();
    }

    fn finish(&mut self) {
        self.drain();
    }
}

/// Checks NCCL's gating table against a few rows of §3.1.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_follow_the_reference_table() {
        // Mask Coll|P2p: GroupApi, CollApi, P2pApi, Group, Coll, P2p; no proxy events.
        let m = ty::COLL | ty::P2P;
        for g in [
            gate::GROUP_API,
            gate::COLL_API,
            gate::P2P_API,
            gate::GROUP,
            gate::COLL,
            gate::P2P,
        ] {
            assert_ne!(m & g, 0);
        }
        assert_eq!(m & (gate::PROXY_OP | gate::PROXY_STEP), 0);
        // KernelCh alone still makes NCCL start the whole task chain.
        let k = ty::KERNEL_CH;
        assert_ne!(k & gate::GROUP_API, 0);
        assert_ne!(k & gate::COLL, 0);
        assert_eq!(k & gate::PROXY_OP, 0);
        // ProxyCtrl gates nothing but itself.
        assert_eq!(
            ty::PROXY_CTRL & (gate::GROUP_API | gate::COLL | gate::PROXY_OP),
            0
        );
        assert_eq!(ty::NET_PLUGIN & gate::PROXY_STEP, ty::NET_PLUGIN);
    }

    #[test]
    fn ops_args_fill_the_union() {
        let a = ops_args(24);
        // SAFETY: `ops_args` initialises all 8 bytes.
        let word = unsafe { a.kernel_ch.p_timer };
        assert_eq!(word & 0xffff_ffff, 24);
        assert_eq!(word >> 32, 0);
    }
}
