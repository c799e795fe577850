//! Prefetch hints: ask the core for the lines of a value this thread will
//! touch soon, so that the access finds them in its own cache.
//!
//! On NCCL's threads the plugin's next write often lands on lines another
//! core wrote last (a slab slot freed by the proxy thread, a ring slot the
//! writer thread read). A hint issued at the end of one call fetches them
//! while NCCL runs its own code; the next call then finds them local instead
//! of waiting for each in turn (docs/performance.md, "Round 7").
//!
//! A hint changes no value and never faults: it only moves lines between
//! caches. x86-64 gets `prefetchw` (a no-op on cores without it); other
//! targets and the loom models get nothing.

/// A hint function issuing `$insn` for every line of a value.
macro_rules! hint_fn {
    ($(#[$doc:meta])* $name:ident, $insn:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub(crate) fn $name<T>(value: *const T) {
            for_lines::<T>(value.cast(), |line| {
                #[cfg(all(target_arch = "x86_64", not(evring_loom)))]
                // SAFETY: a prefetch reads and writes nothing
                // architecturally and never faults, whatever the address; it
                // changes no register but its operand's (read only) and no
                // flags.
                unsafe {
                    core::arch::asm!(
                        concat!($insn, " byte ptr [{0}]"),
                        in(reg) line,
                        options(nostack, preserves_flags, readonly)
                    );
                }
                let _ = line;
            });
        }
    };
}

hint_fn!(
    /// Hints that the lines holding `value` will be written soon.
    prefetch_write,
    "prefetchw"
);

/// Calls `f` with the address of each cache line a `T` at `value` covers
/// (none when hints are off).
#[inline(always)]
fn for_lines<T>(value: *const u8, f: impl FnMut(usize)) {
    if cfg!(any(not(target_arch = "x86_64"), evring_loom)) {
        return;
    }
    each_line(
        value as usize,
        core::mem::size_of::<T>(),
        core::mem::align_of::<T>(),
        f,
    );
}

const LINE: usize = 64;

/// Calls `f` with the first byte of each cache line that `size` bytes at
/// `addr` touch (one line for a zero-sized value), in order. Where `size` is
/// a constant this is straight-line code: the lines every placement touches
/// (`(size - 1) / 64 + 1`), then one test for the line a value that
/// straddles one more boundary also touches. A value aligned to its own size
/// (`size <= align <= 64`, as the slab's 16-byte slots) never straddles: no
/// test (`align` is the type's, so the address is a multiple of it).
#[inline(always)]
fn each_line(addr: usize, size: usize, align: usize, mut f: impl FnMut(usize)) {
    let size = size.max(1);
    let first = addr & !(LINE - 1);
    let sure = (size - 1) / LINE + 1;
    for k in 0..sure {
        f(first + k * LINE);
    }
    if size <= align && align <= LINE {
        return;
    }
    let more = first + sure * LINE;
    if more <= addr.saturating_add(size - 1) {
        f(more);
    }
}

#[cfg(test)]
mod tests {
    use super::each_line;

    /// The lines of a value of `size` bytes with no alignment known.
    fn all(addr: usize, size: usize) -> Vec<usize> {
        aligned(addr, size, 1)
    }

    fn aligned(addr: usize, size: usize, align: usize) -> Vec<usize> {
        let mut v = Vec::new();
        each_line(addr, size, align, |l| v.push(l));
        v
    }

    #[test]
    fn covers_exactly_the_lines_touched() {
        // Aligned: whole lines only, none past the end.
        assert_eq!(all(0x1000, 64), [0x1000]);
        assert_eq!(all(0x1000, 128), [0x1000, 0x1040]);
        // A slab slot (168 bytes) at every offset within a line: each line
        // from the first byte's to the last byte's, once.
        for off in 0..64 {
            let addr = 0x2000 + off;
            let want: Vec<usize> = (0x2000..addr + 168).step_by(64).collect();
            assert_eq!(all(addr, 168), want, "offset {off}");
        }
        // Straddling a boundary with a small value: both lines.
        assert_eq!(all(0x103c, 12), [0x1000, 0x1040]);
        assert_eq!(all(0x1030, 12), [0x1000]);
        // Zero-sized: the line of the address.
        assert_eq!(all(0x1041, 0), [0x1040]);
    }

    #[test]
    fn a_value_aligned_to_its_size_is_one_line_and_others_still_straddle() {
        // The slab's 16-byte, 16-aligned slots: every placement in one line.
        for addr in (0x3000..0x3100).step_by(16) {
            assert_eq!(aligned(addr, 16, 16), [addr & !63], "{addr:#x}");
        }
        // Smaller than its alignment, and a whole aligned line.
        assert_eq!(aligned(0x3030, 8, 16), [0x3000]);
        assert_eq!(aligned(0x3040, 64, 64), [0x3040]);
        // Larger than its alignment (a 104-byte log entry, 8-aligned): the
        // straddle test stays.
        assert_eq!(aligned(0x3038, 104, 8), [0x3000, 0x3040, 0x3080]);
        assert_eq!(aligned(0x3040, 104, 8), [0x3040, 0x3080]);
    }
}
