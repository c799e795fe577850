//! Mapping memory that a hot path will write before it gets there.
//!
//! A process-wide table in `.bss` (or a `.data` one, copy-on-write from the
//! library file) is mapped page by page by the first write into each page:
//! a page fault, microseconds (more under a hypervisor) on whichever thread
//! happens to be first. [`populate`] asks the kernel to map the pages of a
//! value writable now (`MADV_POPULATE_WRITE`, Linux 5.14), on the calling
//! thread, without writing to it: the value's contents are unchanged and
//! other threads may be using it meanwhile. Where the kernel lacks it (or
//! off Linux) nothing happens and the pages stay lazy, as before.

/// The smallest page size: ranges are widened to whole pages of it.
const PAGE: usize = 4096;

/// Maps the pages holding `value` writable now, without changing a byte of
/// them; returns whether the kernel did (false off Linux, before 5.14, or
/// where the memory cannot be written). Best effort, never fails otherwise.
///
/// ```
/// static TABLE: [std::sync::atomic::AtomicU64; 4096] =
///     [const { std::sync::atomic::AtomicU64::new(0) }; 4096];
/// let _mapped = evring::populate(&TABLE);
/// assert_eq!(TABLE[4095].load(std::sync::atomic::Ordering::Relaxed), 0);
/// ```
pub fn populate<T: ?Sized>(value: &T) -> bool {
    if core::mem::size_of_val(value) == 0 {
        return true;
    }
    let (first, len) = pages_of(value);
    populate_range(first, len)
}

/// The page-aligned range (start, length) holding `value`.
fn pages_of<T: ?Sized>(value: &T) -> (usize, usize) {
    let start = value as *const T as *const u8 as usize;
    let first = start & !(PAGE - 1);
    let end = (start + core::mem::size_of_val(value)).next_multiple_of(PAGE);
    (first, end - first)
}

#[cfg(all(target_os = "linux", not(evring_loom)))]
fn populate_range(addr: usize, len: usize) -> bool {
    // SAFETY: `addr` is page-aligned and `[addr, addr + len)` covers the
    // pages of a live value; MADV_POPULATE_WRITE only faults pages in (as a
    // write would, breaking copy-on-write) and changes no byte of them, so
    // no value there, ours or a neighbour's, is altered. An unmapped or
    // read-only page makes the call fail with an error, never a signal.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) == 0 }
}

#[cfg(not(all(target_os = "linux", not(evring_loom))))]
fn populate_range(_addr: usize, _len: usize) -> bool {
    false
}

#[cfg(all(test, target_os = "linux", not(evring_loom)))]
mod tests {
    use super::*;

    /// Pages of `v` not resident now (`mincore`).
    fn absent<T>(v: &T) -> usize {
        let (start, len) = pages_of(v);
        let mut vec = vec![0u8; len / PAGE];
        // SAFETY: a page-aligned range of this process's mapped memory and
        // a vector of one byte per page.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|b| **b & 1 == 0).count()
    }

    #[test]
    fn a_fresh_static_becomes_resident_and_keeps_its_contents() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static T: [AtomicU64; 8 * 1024] = [const { AtomicU64::new(0) }; 8 * 1024];
        T[100].store(7, Ordering::Relaxed);
        let before = absent(&T);
        if !populate(&T) {
            eprintln!("MADV_POPULATE_WRITE not supported here: nothing to check");
            return;
        }
        assert!(before > 0, "a 64 KiB .bss table was resident before use");
        assert_eq!(absent(&T), 0);
        assert_eq!(T[100].load(Ordering::Relaxed), 7);
        assert!(T
            .iter()
            .enumerate()
            .all(|(i, v)| v.load(Ordering::Relaxed) == if i == 100 { 7 } else { 0 }));
    }

    #[test]
    fn read_only_memory_is_refused_not_faulted() {
        static RO: [u8; 3 * PAGE] = [1; 3 * PAGE];
        // In .rodata: the kernel refuses to populate it writable.
        assert!(!populate(&RO));
        assert!(RO.iter().all(|b| *b == 1));
    }
}
