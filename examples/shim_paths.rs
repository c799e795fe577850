//! Runs one plugin hot path N times through the C ABI: the deterministic
//! counterpart of `benches/shim.rs` for a noisy machine. Under callgrind,
//! collecting only inside [`run`], it gives instructions per iteration
//! (docs/performance.md, "Instruction counts"):
//!
//! ```text
//! cargo build --release --example shim_paths
//! valgrind --tool=callgrind --toggle-collect='shim_paths::run*' \
//!     target/release/examples/shim_paths coll 100000
//! ```
//!
//! Paths: `coll` (Coll start + stop under a live CollApi), `proxystep`
//! (ProxyStep start, 3 records, stop), `allreduce` (the 10 calls of one
//! all-reduce); `handoff-local`, `handoff-remote` and their `-orphan`
//! variants time a Coll start while another thread completes Colls, and
//! that thread's KernelCh stop ([`handoff`]); `scaling ROUNDS` times four
//! workloads alone and at once, each pinned to a core ([`scaling`]).
//! `EVRING_EVICT` / `EVRING_EVICT_CODE` make a run cold ([`cold`]).
//! `EVRING_PLUGIN` picks the `.so` (default: this checkout's release build).

use std::hint::black_box;
use std::time::Instant;

#[path = "../benches/common/shim_paths.rs"]
mod paths;
use paths::*;

/// The measured loop (callgrind's `--toggle-collect` target).
#[inline(never)]
fn run(n: u64, f: &dyn Fn()) {
    for _ in 0..n {
        f();
    }
}

/// What a cold run sweeps between iterations: it stands for the host's own
/// work, which evicts the plugin's lines from the core's caches (outside
/// [`run`], so not collected).
struct Sweep {
    /// Written one byte per cache line (data caches, data TLB).
    data: Vec<u8>,
    /// Executed: a run of 8-byte no-ops ending in `ret`, in pages of its own
    /// (instruction caches, instruction TLB, the unified L2).
    code: Option<extern "C" fn()>,
}

impl Sweep {
    fn new(data: usize, code: usize) -> Sweep {
        if code > 0 && !cfg!(target_arch = "x86_64") {
            eprintln!("EVRING_EVICT_CODE: the code sweep is x86-64 machine code");
            std::process::exit(2);
        }
        Sweep {
            data: sweep_buffer(data),
            code: (code > 0).then(|| nop_sled(code)),
        }
    }

    #[inline(never)]
    fn run(&mut self) {
        for i in (0..self.data.len()).step_by(stride()) {
            self.data[i] = self.data[i].wrapping_add(1);
        }
        black_box(&self.data);
        if let Some(f) = self.code {
            f();
        }
    }
}

/// The data sweep's buffer; with `EVRING_EVICT_HUGE=1` in transparent huge
/// pages where the kernel gives them (`madvise`), so that sweeping it empties
/// the caches but hardly the TLB.
fn sweep_buffer(bytes: usize) -> Vec<u8> {
    if std::env::var_os("EVRING_EVICT_HUGE").is_none() || bytes == 0 {
        return vec![0u8; bytes];
    }
    const HUGE: usize = 2 << 20;
    let mut v = vec![0u8; bytes + HUGE];
    let start = v.as_ptr().align_offset(HUGE);
    // SAFETY: a range inside `v`'s allocation; madvise only changes how
    // the kernel backs it.
    unsafe {
        libc::madvise(
            v.as_mut_ptr().add(start).cast(),
            (bytes / HUGE) * HUGE,
            libc::MADV_HUGEPAGE,
        )
    };
    // Written once now, so the advised range is faulted in as huge pages
    // (the few MiB outside it stay small pages).
    v.truncate(bytes);
    v.iter_mut().for_each(|b| *b = 1);
    v
}

/// Bytes between two writes of the data sweep (`EVRING_EVICT_STRIDE`, default
/// 64: every line; 4096 touches one line per page, which empties the data TLB
/// while leaving most of the caches alone).
fn stride() -> usize {
    static STRIDE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *STRIDE.get_or_init(|| {
        std::env::var("EVRING_EVICT_STRIDE")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&s: &usize| s > 0)
            .unwrap_or(64)
    })
}

/// `bytes` of executable 8-byte no-ops and a `ret` (leaked: lives until exit).
fn nop_sled(bytes: usize) -> extern "C" fn() {
    const NOP8: [u8; 8] = [0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00];
    let len = bytes.next_multiple_of(4096) + 4096;
    // SAFETY: a fresh private anonymous mapping; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of the code sweep failed");
    // SAFETY: `len` writable bytes at `p`, ours alone.
    let code = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    for c in code[..bytes / 8 * 8].chunks_exact_mut(8) {
        c.copy_from_slice(&NOP8);
    }
    // The last byte: `ret`.
    code[bytes / 8 * 8] = 0xc3;
    // SAFETY: the mapping made above, now read-only and executable.
    let ok = unsafe { libc::mprotect(p, len, libc::PROT_READ | libc::PROT_EXEC) };
    assert_eq!(ok, 0, "mprotect of the code sweep failed");
    // SAFETY: the bytes are x86-64 no-ops ending in `ret`: a function of no
    // arguments that returns.
    unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn()>(p) }
}

/// Empties the ring (a run of many iterations would fill it), or exits.
fn drain(drv: &Drv) {
    if !drv.drain() {
        eprintln!("the plugin's writer did not drain the ring");
        std::process::exit(1);
    }
}

/// The median and the mean of per-iteration times.
fn median_mean(mut ns: Vec<f64>) -> (f64, f64) {
    ns.sort_by(f64::total_cmp);
    (ns[ns.len() / 2], ns.iter().sum::<f64>() / ns.len() as f64)
}

/// A cold run: `n` iterations, each after the sweep, the ring drained every
/// 128 iterations (neither timed). Prints the median and mean time of one
/// iteration, less the median time of the same timing around nothing. Under
/// callgrind with `--cache-sim=yes` the D1 misses per iteration are the data
/// lines the path touches.
fn cold(drv: &Drv, f: &dyn Fn(), n: u64, mut sweep: Sweep) {
    let mut time = |f: &dyn Fn(), n: u64| {
        let mut ns = Vec::with_capacity(n as usize);
        for i in 0..n {
            if i % 128 == 0 {
                drain(drv);
            }
            sweep.run();
            let t = Instant::now();
            run(1, f);
            ns.push(t.elapsed().as_nanos() as f64);
        }
        median_mean(ns)
    };
    let (base, _) = time(&|| (), n.min(2000));
    let (median, mean) = time(f, n);
    println!(
        "cold: median {:.1} ns, mean {:.1} ns per iteration (timer {base:.1} ns subtracted)",
        median - base,
        mean - base
    );
}

/// `handoff-local` / `handoff-remote`: the user thread (this one) starts a
/// Coll under a live CollApi, a second thread (NCCL's proxy thread) starts
/// a KernelCh under it; the Coll is completed by the user thread's stop
/// (local: the child stopped first) or by the child's stop on the other
/// thread (remote: the Coll stopped first, so its slot is freed there).
/// Prints the median and mean time of the user thread's Coll start alone,
/// and of the other thread's KernelCh stop (in `remote`, the stop that
/// completes the Coll and folds it into the CollApi the user thread holds:
/// NCCL's proxy thread at mask 70).
fn handoff(drv: &Drv, coll: &evring_shim::abi::DescrV6, n: u64, remote: bool) {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
    let handle = AtomicUsize::new(0);
    // 1: child started; 2: child stopped. Reset to 0 by the user thread.
    let step = AtomicU64::new(0);
    let go = AtomicU64::new(0);
    let wait = |a: &AtomicU64, v: u64| {
        while a.load(Acquire) != v {
            std::hint::spin_loop();
        }
    };
    let mut ns = Vec::with_capacity(n as usize);
    let child_ns = std::thread::scope(|s| {
        let child = s.spawn(|| {
            let mut ns = Vec::with_capacity(n as usize);
            for i in 1..=n {
                wait(&go, i);
                let parent = handle.load(Acquire) as *mut std::ffi::c_void;
                let mut kd = descr(evring_shim::abi::ty::KERNEL_CH, parent);
                kd.u.kernel_ch.channel_id = 0;
                let k = drv.start(&kd);
                step.store(1, Release);
                if remote {
                    wait(&step, 3);
                }
                let t = Instant::now();
                // SAFETY: a handle the plugin returned.
                unsafe { drv.p.stop(k) };
                ns.push(t.elapsed().as_nanos() as f64);
                step.store(2, Release);
            }
            ns
        });
        for i in 1..=n {
            if i % 128 == 0 {
                drain(drv);
            }
            let t = Instant::now();
            let c = drv.start(coll);
            ns.push(t.elapsed().as_nanos() as f64);
            handle.store(c as usize, Release);
            step.store(0, Release);
            go.store(i, Release);
            if remote {
                wait(&step, 1);
                // SAFETY: a handle the plugin returned.
                unsafe { drv.p.stop(c) };
                step.store(3, Release);
                wait(&step, 2);
            } else {
                wait(&step, 2);
                // SAFETY: as above.
                unsafe { drv.p.stop(c) };
            }
        }
        child.join().unwrap_or_else(|_| {
            eprintln!("the KernelCh thread panicked");
            std::process::exit(1)
        })
    });
    let (median, mean) = median_mean(ns);
    let (child_median, child_mean) = median_mean(child_ns);
    println!(
        "handoff ({}): Coll start median {median:.1} ns, mean {mean:.1} ns; \
         KernelCh stop median {child_median:.1} ns, mean {child_mean:.1} ns",
        if remote { "remote" } else { "local" },
    );
}

/// `kcold N`: NCCL's proxy (or profiler) thread at mask 70, call by call: a
/// KernelCh start under a live Coll, its KernelChStop state and its stop,
/// the start and the state each after a sweep (`EVRING_EVICT` bytes of data,
/// `EVRING_EVICT_CODE` of code: the pause in which NCCL runs its own work),
/// the stop right after the state, as NCCL makes them. Prints the median,
/// mean and 10th percentile of each call. The ring is drained every 128 iterations where the
/// plugin exports `evring_flush_wait` (behind the meter it does not: the
/// writer's own passes drain it then).
fn kernel_cold(drv: &Drv, coll: &evring_shim::abi::DescrV6, n: u64, mut sweep: Sweep) {
    use evring_shim::abi::{state, ty, KernelChArgs, StateArgsV4};
    let parent = drv.start(coll);
    let can_drain = drv.p.symbol(c"evring_flush_wait").is_some();
    let mut kd = descr(ty::KERNEL_CH, parent);
    kd.u.kernel_ch.channel_id = 1;
    let mut t = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..n {
        if can_drain && i % 128 == 0 {
            drain(drv);
        }
        let args = StateArgsV4 {
            kernel_ch: KernelChArgs { p_timer: 1_000 + i },
        };
        sweep.run();
        let t0 = Instant::now();
        let k = drv.start(black_box(&kd));
        let t1 = t0.elapsed();
        sweep.run();
        let t2 = Instant::now();
        // SAFETY: a handle the plugin returned; args on our stack.
        unsafe { drv.p.record(k, state::KERNEL_CH_STOP, &args) };
        let t3 = Instant::now();
        // SAFETY: as above.
        unsafe { drv.p.stop(k) };
        let t4 = t3.elapsed();
        t[0].push(t1.as_nanos() as f64);
        t[1].push((t3 - t2).as_nanos() as f64);
        t[2].push(t4.as_nanos() as f64);
    }
    for (name, mut v) in ["start", "state", "stop"].iter().zip(t) {
        v.sort_by(f64::total_cmp);
        let p10 = v[v.len() / 10];
        let (median, mean) = median_mean(v);
        println!("kcold {name}: median {median:.1} ns, mean {mean:.1} ns, p10 {p10:.1} ns");
    }
}

/// Iterations per timed chunk of [`scaling`]: at most 512 records per thread
/// (4 per all-reduce), a quarter of one owned ring lane at the benches' ring
/// size (`EVRING_RING=65536`, `plugin()`), so no push finds its lane full; the
/// ring is drained between chunks.
const SCALING_CHUNK: u64 = 128;
/// Timed chunks per workload and measurement.
const SCALING_CHUNKS: u64 = 200;

/// The CPUs of `EVRING_CPUS` (comma-separated), else the first four this
/// process may run on (with fewer, they are reused and the ratio means
/// nothing: the run still exercises the paths).
fn scaling_cpus() -> Vec<usize> {
    if let Ok(v) = std::env::var("EVRING_CPUS") {
        let cpus: Vec<usize> = v
            .split(',')
            .filter_map(|c| c.trim().parse().ok())
            .filter(|&c| c < libc::CPU_SETSIZE as usize)
            .collect();
        if cpus.len() != 4 {
            eprintln!(
                "EVRING_CPUS: four CPU numbers below {}, comma-separated",
                libc::CPU_SETSIZE
            );
            std::process::exit(2);
        }
        return cpus;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; `set` is a valid cpu_set_t of that size.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        eprintln!("sched_getaffinity failed");
        std::process::exit(1);
    }
    // SAFETY: CPU_ISSET reads the set within its size.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .take(4)
        .collect();
    if cpus.len() < 4 {
        eprintln!("scaling: fewer than four CPUs ({cpus:?}): threads share cores, the ratios mean nothing here");
    }
    cpus.iter().copied().cycle().take(4).collect()
}

/// Pins the calling thread to `cpu`, or exits.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (`scaling_cpus` keeps no other) and
    // `set` is ours; pid 0 is the calling thread.
    let ok = unsafe {
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
    };
    if !ok {
        eprintln!("cannot pin a thread to CPU {cpu}");
        std::process::exit(1);
    }
}

/// `scaling ROUNDS`: the four workloads of the bench's `threads` groups
/// (all-reduce on communicator A, ProxySteps of A, all-reduces on B and on
/// C), each on a thread pinned to a core of its own, timed alone (one after
/// the other) and then all four at once, in chunks with the ring drained
/// between them (the `threads_drained` group's method). Prints, per round,
/// each workload's time per call both ways and the ratio. The ratio compares
/// a workload with itself on the same core, so cores of unequal speed (a
/// VM's: up to 25 % apart) do not enter it, where the bench's
/// `4t / 1t` ratio compares the slowest of four cores with one.
fn scaling(drv: &Drv, op: H, rounds: u64) {
    let cpus = scaling_cpus();
    let (a, b, c) = (
        H(drv.ctx),
        H(init_comm(&drv.p, 43)),
        H(init_comm(&drv.p, 44)),
    );
    type Work<'a> = (&'static str, u32, Box<dyn Fn() + Sync + 'a>);
    let work: [Work; 4] = [
        (
            "allreduce A",
            ALLREDUCE_CALLS,
            Box::new(move || allreduce(drv, a.p())),
        ),
        (
            "proxystep A",
            PROXY_STEP_CALLS,
            Box::new(move || proxy_step(drv, a.p(), op)),
        ),
        (
            "allreduce B",
            ALLREDUCE_CALLS,
            Box::new(move || allreduce(drv, b.p())),
        ),
        (
            "allreduce C",
            ALLREDUCE_CALLS,
            Box::new(move || allreduce(drv, c.p())),
        ),
    ];
    // Workload `k`'s ns per call over SCALING_CHUNKS chunks, on its core; the
    // threads measured together meet at `barrier` around each chunk, and
    // `lead` drains the ring before it. The warm-up is one chunk: no more
    // records than a chunk's before the first drain.
    let timed = |k: usize, barrier: &(SpinBarrier, SpinBarrier), lead: bool| {
        pin(cpus[k]);
        let (_, calls, f) = &work[k];
        run(SCALING_CHUNK, &**f);
        let mut total = std::time::Duration::ZERO;
        for _ in 0..SCALING_CHUNKS {
            if lead {
                drain(drv);
            }
            barrier.0.wait();
            let t = Instant::now();
            run(SCALING_CHUNK, &**f);
            total += t.elapsed();
            barrier.1.wait();
        }
        total.as_nanos() as f64 / (SCALING_CHUNKS * SCALING_CHUNK * u64::from(*calls)) as f64
    };
    println!("scaling: CPUs {cpus:?}; ns per call, alone / all four at once (ratio)");
    let mut worst = Vec::new();
    for r in 1..=rounds {
        let alone: Vec<f64> = (0..4)
            .map(|k| {
                let one = (SpinBarrier::new(1), SpinBarrier::new(1));
                std::thread::scope(|s| s.spawn(|| timed(k, &one, true)).join().unwrap())
            })
            .collect();
        let four = (SpinBarrier::new(4), SpinBarrier::new(4));
        let together: Vec<f64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|k| {
                    let four = &four;
                    s.spawn(move || timed(k, four, k == 0))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ratios: Vec<f64> = together.iter().zip(&alone).map(|(t, a)| t / a).collect();
        let max = ratios.iter().copied().fold(0.0, f64::max);
        worst.push(max);
        let cells: Vec<String> = (0..4)
            .map(|k| {
                format!(
                    "{} {:.1} / {:.1} ({:.2})",
                    work[k].0, alone[k], together[k], ratios[k]
                )
            })
            .collect();
        println!("round {r}: {}; worst {max:.2}", cells.join(", "));
    }
    let (median, _) = median_mean(worst);
    println!("scaling: median over {rounds} rounds of the worst workload's ratio: {median:.2}");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "coll".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let drv = Drv::new("6");
    let ga = drv.start(&descr(
        evring_shim::abi::ty::GROUP_API,
        std::ptr::null_mut(),
    ));
    let ca = drv.start(&coll_api_descr(ga));
    let coll = coll_descr(ca);
    let op = live_proxy_op(&drv, drv.ctx);
    if path == "scaling" {
        scaling(&drv, op, n);
        return;
    }
    let bytes = |var: &str| -> Option<usize> { std::env::var(var).ok()?.parse().ok() };
    if path == "kcold" {
        let sweep = Sweep::new(
            bytes("EVRING_EVICT").unwrap_or(0),
            bytes("EVRING_EVICT_CODE").unwrap_or(0),
        );
        kernel_cold(&drv, &coll, n, sweep);
        return;
    }
    if let Some(mode) = path.strip_prefix("handoff-") {
        let (mode, coll) = match mode.strip_suffix("-orphan") {
            // The Coll with no parent: only its own slot moves between threads.
            Some(m) => (m, coll_descr(std::ptr::null_mut())),
            None => (mode, coll),
        };
        handoff(&drv, &coll, n, mode == "remote");
        return;
    }
    let f: Box<dyn Fn()> = match path.as_str() {
        "coll" => Box::new(|| coll_pair(&drv, &coll)),
        "proxystep" => Box::new(|| proxy_step(&drv, drv.ctx, op)),
        "allreduce" => Box::new(|| allreduce(&drv, drv.ctx)),
        other => {
            eprintln!(
                "unknown path {other:?}: coll, proxystep, allreduce, scaling or handoff-{{local,remote}}[-orphan]"
            );
            std::process::exit(2);
        }
    };
    // Warm-up outside the count: the thread's caches and indices are set up.
    for _ in 0..n / 10 + 1 {
        f();
    }
    // A cold run: `EVRING_EVICT=BYTES` of data written and/or
    // `EVRING_EVICT_CODE=BYTES` of code executed between iterations.
    match (bytes("EVRING_EVICT"), bytes("EVRING_EVICT_CODE")) {
        (None, None) => run(black_box(n), &*f),
        (data, code) => cold(
            &drv,
            &*f,
            n,
            Sweep::new(data.unwrap_or(0), code.unwrap_or(0)),
        ),
    }
    println!("{path}: {n} iterations");
}
