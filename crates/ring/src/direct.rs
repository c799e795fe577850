//! [`direct_static!`]: a reference to a static whose address is computed
//! from the instruction pointer, not loaded from the GOT.
//!
//! Code compiled as position-independent (every shared library, and the
//! `.so` NCCL loads) reaches a static of another crate, or of another
//! codegen unit of its own crate, through the global offset table: one load
//! of the static's address from a table of the module, then the access. On a
//! hot path that runs after a pause (a profiler call on NCCL's proxy thread,
//! milliseconds after the last), the GOT's line is a cache miss of its own
//! before the static's line can even be asked for: rustc does not mark its
//! statics as local to the module (nor does it let the linker turn the load
//! into an address computation), LTO included. On x86-64 Linux the macro
//! computes the address with one `lea` relative to the instruction pointer:
//! no load at all.

/// `&STATIC` for a static of the calling crate or of a crate linked into the
/// same module (executable or shared library), with its address computed
/// from the instruction pointer instead of loaded from the GOT, on x86-64
/// Linux; elsewhere plain `&STATIC`.
///
/// The static must be defined in the module being linked: a static exported
/// by another shared library (a Rust `dylib` the caller links against) fails
/// to link. Statics of `rlib`s linked into the module, which is how Cargo
/// builds a `cdylib` or a binary, always are.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// static HITS: AtomicU32 = AtomicU32::new(0);
/// let hits: &'static AtomicU32 = evring::direct_static!(HITS);
/// hits.fetch_add(1, Ordering::Relaxed);
/// assert!(core::ptr::eq(hits, &HITS));
/// assert_eq!(HITS.load(Ordering::Relaxed), 1);
/// ```
#[macro_export]
macro_rules! direct_static {
    ($s:path) => {{
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        let r = {
            let addr: usize;
            // SAFETY: `lea` only computes the address of the symbol `$s`
            // (no memory access, no stack, no flags); `sym` names the static
            // itself, so the address is the static's.
            unsafe {
                ::core::arch::asm!(
                    "lea {addr}, [rip + {s}]",
                    addr = out(reg) addr,
                    s = sym $s,
                    options(pure, nomem, nostack, preserves_flags)
                );
            }
            // SAFETY: `addr` is the address of the static `$s` (above), whose
            // type `addr_of!` gives; a static lives for the whole program.
            unsafe { $crate::__at(::core::ptr::addr_of!($s), addr) }
        };
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        let r = &$s;
        r
    }};
}

/// The `&'static T` at `addr`, typed after `_ty` (only its type is used: an
/// unused `addr_of!` of a static costs no load).
///
/// # Safety
/// `addr` must be the address of a static of type `T`.
#[doc(hidden)]
#[inline(always)]
pub unsafe fn __at<T>(_ty: *const T, addr: usize) -> &'static T {
    // SAFETY: the caller guarantees `addr` is a static of type `T`.
    unsafe { &*(addr as *const T) }
}
