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
//! all-reduce). `EVRING_PLUGIN` picks the `.so` (default: this checkout's
//! release build).

use std::hint::black_box;

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
    let f: Box<dyn Fn()> = match path.as_str() {
        "coll" => Box::new(|| coll_pair(&drv, &coll)),
        "proxystep" => Box::new(|| proxy_step(&drv, drv.ctx, op)),
        "allreduce" => Box::new(|| allreduce(&drv, drv.ctx)),
        other => {
            eprintln!("unknown path {other:?}: coll, proxystep or allreduce");
            std::process::exit(2);
        }
    };
    // Warm-up outside the count: the thread's caches and indices are set up.
    for _ in 0..n / 10 + 1 {
        f();
    }
    run(black_box(n), &*f);
    println!("{path}: {n} iterations");
}
