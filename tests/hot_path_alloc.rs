//! No heap allocation on NCCL's threads in steady state: once a thread has
//! made its first calls, its starts, states and stops (strings, their
//! periodic re-read, every event kind of an all-reduce with its kernel
//! channels and proxy events) neither allocate nor free.
//!
//! A child process runs with an `LD_PRELOAD` interposer (C, compiled here)
//! that counts `malloc`, `calloc`, `realloc`, the aligned allocators and
//! `free` per thread; the plugin's allocator is libc's, so every heap
//! operation it makes on the calling thread is counted. The writer thread's
//! own allocations are its business and not counted.

mod common;
use common::*;
use evring_shim::abi::state;
use std::ffi::c_void;

const COUNTER: &str = r#"
#include <stddef.h>
#include <stdint.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
/* initial-exec: a preloaded library has static TLS, and its access must not
   call __tls_get_addr (which may allocate). */
static __thread __attribute__((tls_model("initial-exec"))) uint64_t allocs, frees;
void *malloc(size_t n) { allocs++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { allocs++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { allocs++; return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { allocs++; return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { allocs++; return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  allocs++;
  void *p = __libc_memalign(a, n);
  if (p == NULL) return 12;
  *out = p;
  return 0;
}
void free(void *p) { if (p != NULL) frees++; __libc_free(p); }
uint64_t evring_test_allocs(void) { return allocs; }
uint64_t evring_test_frees(void) { return frees; }
"#;

/// The calling thread's (allocations, frees) so far, from the interposer.
fn counts() -> (u64, u64) {
    type Count = extern "C" fn() -> u64;
    let get = |name: &std::ffi::CStr| -> Count {
        // SAFETY: a symbol lookup in the process's global scope.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        assert!(!p.is_null(), "the allocation counter is not preloaded");
        // SAFETY: the interposer defines it as `uint64_t f(void)`.
        unsafe { std::mem::transmute::<*mut c_void, Count>(p) }
    };
    (get(c"evring_test_allocs")(), get(c"evring_test_frees")())
}

/// One all-reduce's calls on this thread: the user thread's (GroupApi,
/// CollApi, Group, Coll, with their strings), two kernel channels with their
/// GPU stop, and a proxy op with a step and its state.
fn round(i: &Inst, ctx: u64, s: u64) {
    let c = allreduce_user_thread(i, ctx, s, 2);
    for ch in 0..2 {
        let k = i.start(ctx, &kernel_ch(c, ch, s));
        i.rec(k, state::KERNEL_CH_STOP, Some(s + 1));
        i.stop(k);
    }
    let op = i.start(ctx, &proxy_op(c, pid(), 0, true));
    let st = i.start(ctx, &proxy_step(op, 0));
    i.rec(st, state::PROXY_STEP_SEND_GPU_WAIT, None);
    i.stop(st);
    i.rec(op, state::PROXY_OP_SEND_DONE, None);
    i.stop(op);
}

fn child() {
    let (i, ctxs) = Inst::new(
        "alloc",
        None,
        &[("NCCL_PROFILE_EVENT_MASK", "4095")],
        &[(0xa110c, 0)],
    );
    let ctx = ctxs[0];
    // The thread's first calls: its index, its string memo, the cache.
    for s in 0..2_000 {
        round(&i, ctx, s);
    }
    let before = counts();
    // 2 000 rounds: 4 000 descriptors with strings, several re-read periods
    // (one descriptor in 1 024 is read from memory again).
    for s in 2_000..4_000 {
        round(&i, ctx, s);
    }
    let after = counts();
    i.fin(ctx);
    assert_balanced(&i.stats());
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (0, 0),
        "(allocations, frees) on the calling thread in 2 000 all-reduces after warm-up"
    );
    println!("CHECKED allocations {} frees {}", after.0, after.1);
}

#[cfg(target_os = "linux")]
#[test]
fn steady_state_calls_allocate_nothing() {
    if child_mode().as_deref() == Some("alloc") {
        return child();
    }
    let dir = tempdir("alloc-counter");
    let src = dir.join("count.c");
    std::fs::write(&src, COUNTER).unwrap();
    let so = dir.join("libcount.so");
    cc(&[
        "-O2".as_ref(),
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        so.as_os_str(),
        src.as_os_str(),
    ]);
    let mut c = spawn_child(
        "steady_state_calls_allocate_nothing",
        "alloc",
        &[("LD_PRELOAD", so.to_str().unwrap())],
    );
    let status = wait_or_kill(&mut c, std::time::Duration::from_secs(300), "child");
    let out = c.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "child failed:\n{stdout}\n{stderr}");
    // The child ran the check (a child that skipped it would print nothing).
    assert!(stdout.contains("CHECKED allocations"), "{stdout}\n{stderr}");
}
