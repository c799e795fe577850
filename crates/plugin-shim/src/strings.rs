//! Copying C strings out of descriptors without trusting the pointer.
//!
//! NCCL's `func`, `datatype`, `algo` and `proto` point at string literals in
//! libnccl, so a handful of distinct addresses recur millions of times. Each
//! address is read once with `process_vm_readv` on our own pid, which reports
//! a bad pointer as an error instead of faulting, and the bytes are cached by
//! address. A garbage pointer costs one syscall and yields `"?"`; it never
//! crashes the host. What the cache keeps per address is the string's symbol
//! (`symbols.rs`): a hit hands out the 2-byte symbol events carry, so the
//! table is only consulted on a miss or a re-read.
//!
//! Each cache entry is a seqlock: a reader takes the entry's symbol only if
//! its sequence number was even and unchanged around the read and the key is
//! the address asked for, so a name is always the string that one read of
//! that address returned, never another string's symbol that shares the entry.
//! The cache cannot see a string changed in place; each thread re-reads one
//! descriptor's strings in `REREAD_EVERY` from memory and refreshes the
//! entries, so such a change shows at the first re-read that falls on a
//! descriptor naming the string (a re-read that finds a different string
//! interns it: its own symbol).
//!
//! In front of the shared cache each thread keeps a [`Memo`] (part of its
//! `local::Local` block): per descriptor kind with strings, the pointers of
//! the last four descriptors read and their symbols. NCCL passes the same literals
//! event after event, so most descriptors are answered by comparing their
//! pointers with the memo's (no hashing, no shared cache line). The memo
//! holds only pointers that read cleanly (no bad pointer, no full table), so
//! a hit sets no flag and counts nothing, and it is bypassed and refreshed
//! by the same re-read as the cache (a re-read refreshes the entry holding
//! its pointers in place): a string changed in place still shows at the
//! first re-read of a descriptor naming it, within `REREAD_EVERY`
//! descriptors when one descriptor repeats. The re-read countdown lives in
//! the memo too: no thread-local access of its own.

use crate::symbols::{self, Sym};
use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const LEN: usize = 16;

/// Up to 16 bytes of a C string, NUL-padded (longer strings are truncated).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Str16([u8; LEN]);

impl Str16 {
    pub const EMPTY: Str16 = Str16([0; LEN]);
    pub const UNREADABLE: Str16 = Str16(*b"?\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");

    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut out = [0u8; LEN];
        let n = bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(bytes.len())
            .min(LEN);
        out[..n].copy_from_slice(&bytes[..n]);
        Str16(out)
    }

    pub fn as_bytes(&self) -> &[u8] {
        let n = self.0.iter().position(|&b| b == 0).unwrap_or(LEN);
        &self.0[..n]
    }

    /// Lossy text form for output.
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.as_bytes())
    }

    pub fn is_empty(&self) -> bool {
        self.0[0] == 0
    }

    pub(crate) fn words(&self) -> (u64, u64) {
        let (a, b) = self.0.split_at(8);
        (
            u64::from_ne_bytes(a.try_into().unwrap_or_default()),
            u64::from_ne_bytes(b.try_into().unwrap_or_default()),
        )
    }

    pub(crate) fn from_words(a: u64, b: u64) -> Self {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(&a.to_ne_bytes());
        out[8..].copy_from_slice(&b.to_ne_bytes());
        Str16(out)
    }
}

impl std::fmt::Debug for Str16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// One direct-mapped cache line: a seqlock (`seq` odd while being written)
/// over the address and its string's symbol.
struct Entry {
    seq: AtomicU64,
    key: AtomicUsize,
    sym: AtomicU32,
}

impl Entry {
    /// The cached symbol for `addr`, if this entry holds it, consistently.
    #[inline]
    fn lookup(&self, addr: usize) -> Option<Sym> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let key = self.key.load(Ordering::Relaxed);
        let sym = self.sym.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let s2 = self.seq.load(Ordering::Relaxed);
        (s1 == s2 && key == addr).then(|| Sym::from_raw(sym as u16))
    }

    /// Stores `s` for `addr`, unless another thread is storing right now
    /// (then the entry is left to it: caching is only an optimisation).
    fn fill(&self, addr: usize, s: Sym) {
        let s0 = self.seq.load(Ordering::Relaxed);
        if s0 & 1 != 0
            || self
                .seq
                .compare_exchange(s0, s0.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        self.key.store(addr, Ordering::Relaxed);
        self.sym.store(u32::from(s.index()), Ordering::Relaxed);
        self.seq.store(s0.wrapping_add(2), Ordering::Release);
    }
}

/// Entries of the shared cache, in sets of two: an address maps to one set
/// (the top bits of a multiplicative hash) and may sit in either entry, so
/// two strings NCCL uses all the time thrash each other only if a third
/// lands in their set too. (Direct-mapped on the address's low bits in 256
/// entries, two of a job's ~20 literals share an entry about half the time,
/// and would then re-read each other's strings with a system call.)
const ENTRIES: usize = 1024;
const SET_BITS: u32 = (ENTRIES / 2).trailing_zeros();

/// The two entries `addr` may occupy.
#[inline]
fn set_of(addr: usize) -> [&'static Entry; 2] {
    let set = ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SET_BITS)) as usize;
    [&CACHE[2 * set], &CACHE[2 * set + 1]]
}

/// One descriptor (with strings) in this many per thread bypasses the memo
/// and the cache (see module doc).
pub(crate) const REREAD_EVERY: u32 = 1024;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: Entry = Entry {
    seq: AtomicU64::new(0),
    key: AtomicUsize::new(0),
    sym: AtomicU32::new(0),
};
static CACHE: [Entry; ENTRIES] = [EMPTY_ENTRY; ENTRIES];
static SAFE_READ_BROKEN: AtomicBool = AtomicBool::new(false);

/// Maps the cache's pages now (see `Engine::new`).
pub(crate) fn populate() {
    evring::populate(&CACHE);
}

/// In a forked child (atfork handler, one thread): a fill interrupted by the
/// fork would leave its entry locked forever; empty every entry instead.
pub(crate) fn forget_after_fork() {
    for e in &CACHE {
        e.key.store(0, Ordering::Relaxed);
        let s = e.seq.load(Ordering::Relaxed);
        e.seq.store((s | 1).wrapping_add(1), Ordering::Release);
    }
}

/// Result of reading a string pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// NULL pointer: empty string.
    Null,
    Ok(Sym),
    /// The pointer did not point at readable memory.
    Bad,
}

/// Descriptor kinds with strings, one [`Memo`] slot each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Slot {
    Coll,
    CollApi,
    P2p,
    P2pApi,
    CeColl,
    /// v7 Coll's `kernelVariant`.
    CollVariant,
}

const SLOTS: usize = 6;
/// The most strings a descriptor has (Coll: func, datatype, algo, proto).
pub const MAX_STRS: usize = 4;

/// The last string pointers one slot saw, and their symbols.
#[derive(Clone, Copy)]
struct Last {
    ptrs: [usize; MAX_STRS],
    syms: [Sym; MAX_STRS],
}

impl Last {
    /// NULL pointers, whose symbol is [`Sym::EMPTY`]: what reading them gives.
    const EMPTY: Last = Last {
        ptrs: [0; MAX_STRS],
        syms: [Sym::EMPTY; MAX_STRS],
    };

    /// Whether the first `N` pointers are `ptrs` (one branch for all).
    #[inline(always)]
    fn holds<const N: usize>(&self, ptrs: &[usize; N]) -> bool {
        ptrs.iter().zip(&self.ptrs).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// Descriptors memoized per kind: four, so that a thread cycling through a
/// few collectives (FSDP's all-gather, reduce-scatter and all-reduce; two
/// algorithm/protocol choices) hits for each.
const WAYS: usize = 4;

/// One thread's memo of the last descriptors' strings per kind, and its re-read
/// countdown (see module doc). Starts with NULL pointers, whose symbol is
/// [`Sym::EMPTY`]: what reading them gives.
pub struct Memo {
    /// Descriptors until this thread's next re-read from memory.
    countdown: Cell<u32>,
    /// Per slot, the most recently read first.
    last: [[Cell<Last>; WAYS]; SLOTS],
}

/// What the memo knows about a descriptor's strings.
pub enum Memoed<const N: usize> {
    /// The same pointers as one of the slot's last descriptors: their symbols.
    Hit([Sym; N]),
    /// Other pointers: look them up in the cache.
    Miss,
    /// This thread's re-read is due: read them from memory.
    Reread,
}

impl Memo {
    pub const fn new() -> Memo {
        Memo {
            // Zero (all of a new memo is zero bytes, so a table of them
            // takes no room in the library file): its first descriptor is
            // read from memory, which starts the countdown.
            countdown: Cell::new(0),
            last: [const { [const { Cell::new(Last::EMPTY) }; WAYS] }; SLOTS],
        }
    }

    /// Looks a descriptor's string pointers up (one per descriptor: it
    /// also counts down to the next re-read).
    #[inline(always)]
    pub fn lookup<const N: usize>(&self, slot: Slot, ptrs: [usize; N]) -> Memoed<N> {
        let v = self.countdown.get();
        if v == 0 {
            self.countdown.set(REREAD_EVERY);
            return Memoed::Reread;
        }
        self.countdown.set(v - 1);
        for way in &self.last[slot as usize] {
            let e = way.get();
            if e.holds(&ptrs) {
                return Memoed::Hit(std::array::from_fn(|i| e.syms[i]));
            }
        }
        Memoed::Miss
    }

    /// Remembers symbols read cleanly (no bad pointer, no full table) for
    /// `ptrs`: in place of the entry holding the same pointers (a re-read),
    /// else as the most recent, the oldest entry giving way.
    #[inline]
    pub fn keep<const N: usize>(&self, slot: Slot, ptrs: [usize; N], syms: [Sym; N]) {
        let ways = &self.last[slot as usize];
        if let Some(way) = ways.iter().find(|w| w.get().holds(&ptrs)) {
            let mut e = way.get();
            e.syms[..N].copy_from_slice(&syms);
            way.set(e);
            return;
        }
        for i in (1..WAYS).rev() {
            ways[i].set(ways[i - 1].get());
        }
        let mut e = Last::EMPTY;
        e.ptrs[..N].copy_from_slice(&ptrs);
        e.syms[..N].copy_from_slice(&syms);
        ways[0].set(e);
    }
}

impl Default for Memo {
    fn default() -> Self {
        Memo::new()
    }
}

/// Reads the C string at `ptr` (never faults, whatever `ptr` is), through
/// the shared cache.
#[cfg(test)]
pub fn read(ptr: *const std::ffi::c_char) -> Read {
    read_with(ptr, false)
}

/// Reads the C string at `ptr` (never faults, whatever `ptr` is); `reread`:
/// from memory, refreshing the cache (the caller's [`Memo`] decides).
#[inline]
pub fn read_with(ptr: *const std::ffi::c_char, reread: bool) -> Read {
    let addr = ptr as usize;
    if addr == 0 {
        return Read::Null;
    }
    let set = set_of(addr);
    if !reread {
        if let Some(s) = set.iter().find_map(|e| e.lookup(addr)) {
            return Read::Ok(s);
        }
    }
    match read_uncached(addr) {
        Some(s) => {
            let sym = symbols::intern(s);
            // The entry holding this address (a re-read), else an empty
            // one, else the one its address bit picks.
            let key = |e: &Entry| e.key.load(Ordering::Relaxed);
            let entry = set
                .iter()
                .find(|e| key(e) == addr)
                .or_else(|| set.iter().find(|e| key(e) == 0))
                .unwrap_or(&set[(addr >> 4) & 1]);
            entry.fill(addr, sym);
            Read::Ok(sym)
        }
        None => Read::Bad,
    }
}

/// Reads a string as a symbol, mapping NULL to empty and bad pointers to
/// `"?"`; the bool says whether the pointer was bad.
#[inline]
pub fn read_sym_with(ptr: *const std::ffi::c_char, reread: bool) -> (Sym, bool) {
    match read_with(ptr, reread) {
        Read::Null => (Sym::EMPTY, false),
        Read::Ok(s) => (s, false),
        Read::Bad => (Sym::UNREADABLE, true),
    }
}

/// [`read_sym_with`] as the string itself.
#[cfg(test)]
fn read16(ptr: *const std::ffi::c_char) -> (Str16, bool) {
    let (s, bad) = read_sym_with(ptr, false);
    (symbols::resolve(s), bad)
}

/// Reads up to `max` bytes of a C string (cold path: init's commName).
pub fn read_long(ptr: *const std::ffi::c_char, max: usize) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    let mut out = Vec::new();
    let mut addr = ptr as usize;
    let mut buf = [0u8; LEN];
    while out.len() < max {
        let n = safe_copy(addr, &mut buf)?;
        let chunk = &buf[..n];
        let nul = chunk.iter().position(|&b| b == 0);
        out.extend_from_slice(&chunk[..nul.unwrap_or(chunk.len())]);
        if nul.is_some() || n < LEN {
            break;
        }
        addr += LEN;
    }
    out.truncate(max);
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// On NCCL's thread (a memo or cache miss, a re-read): into a buffer on the
/// stack, no allocation.
fn read_uncached(addr: usize) -> Option<Str16> {
    let mut buf = [0u8; LEN];
    safe_copy(addr, &mut buf).map(|n| Str16::from_bytes(&buf[..n]))
}

/// Copies up to `buf.len()` bytes from our own address space into `buf`,
/// stopping at the first unreadable page; returns how many. `None` if not
/// even the first byte is readable.
fn safe_copy(addr: usize, buf: &mut [u8]) -> Option<usize> {
    let len = buf.len();
    // Split at the page boundary so a string ending just before an unmapped
    // page still reads: the kernel transfers whole iovec elements only.
    let page = 4096usize;
    let first = (page - addr % page).min(len);
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = [
        libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: first,
        },
        libc::iovec {
            iov_base: addr.wrapping_add(first) as *mut libc::c_void,
            iov_len: len - first,
        },
    ];
    let nremote = if first == len { 1 } else { 2 };
    if !SAFE_READ_BROKEN.load(Ordering::Relaxed) {
        // SAFETY: process_vm_readv only writes into `buf` (which we own, `len`
        // bytes) and validates the remote addresses itself, returning EFAULT
        // instead of faulting.
        let n = unsafe {
            libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), nremote, 0)
        };
        if n > 0 {
            return Some(n as usize);
        }
        let err = std::io::Error::last_os_error().raw_os_error();
        if matches!(err, Some(libc::ENOSYS) | Some(libc::EPERM)) {
            SAFE_READ_BROKEN.store(true, Ordering::Relaxed);
        } else {
            return None;
        }
    }
    pipe_copy(addr, &mut buf[..first])
}

/// Fallback where process_vm_readv is forbidden (seccomp): `write` into a pipe
/// also reports EFAULT for unreadable memory.
fn pipe_copy(addr: usize, out: &mut [u8]) -> Option<usize> {
    let len = out.len();
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return None;
    }
    // SAFETY: write reads `len` bytes at `addr` in the kernel, which returns
    // EFAULT rather than faulting if they are not mapped.
    let n = unsafe { libc::write(fds[1], addr as *const libc::c_void, len) };
    let got = if n > 0 {
        // SAFETY: reading back at most `len` bytes into our own buffer.
        unsafe { libc::read(fds[0], out.as_mut_ptr().cast(), n as usize) }
    } else {
        -1
    };
    // SAFETY: closing the descriptors we just created.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    (got > 0).then_some(got as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_literals_and_caches_them() {
        let s = c"AllReduce";
        for _ in 0..3 {
            assert_eq!(read16(s.as_ptr()).0.as_str(), "AllReduce");
        }
        assert_eq!(read(std::ptr::null()), Read::Null);
        let long = c"a-very-long-function-name";
        assert_eq!(read16(long.as_ptr()).0.as_str(), "a-very-long-func");
    }

    #[test]
    fn a_reread_of_a_changed_string_gets_its_own_symbol() {
        let mut buf = *b"strtest-one\0\0\0\0\0";
        let p = buf.as_ptr().cast::<std::ffi::c_char>();
        let (one, bad) = read_sym_with(p, true);
        assert!(!bad);
        assert_eq!(read_sym_with(p, false).0, one, "cached");
        buf[8..11].copy_from_slice(b"two");
        let p = buf.as_ptr().cast::<std::ffi::c_char>();
        let (two, _) = read_sym_with(p, true);
        assert_ne!(two, one);
        assert_eq!(symbols::resolve(two).as_str(), "strtest-two");
        assert_eq!(
            symbols::resolve(one).as_str(),
            "strtest-one",
            "symbols never change"
        );
        assert_eq!(
            read_sym_with(p, false).0,
            two,
            "the re-read refreshed the entry"
        );
        assert_eq!(read_sym_with(std::ptr::null(), false), (Sym::EMPTY, false));
        assert_eq!(read_sym_with(8 as *const _, false), (Sym::UNREADABLE, true));
    }

    #[test]
    fn memo_keeps_four_descriptors_per_kind() {
        let m = Memo::new();
        assert!(
            matches!(m.lookup(Slot::P2p, [0, 0]), Memoed::Reread),
            "a new memo reads its first descriptor from memory"
        );
        let hit = |p: [usize; 2]| match m.lookup(Slot::P2p, p) {
            Memoed::Hit(s) => Some(s),
            Memoed::Miss => None,
            Memoed::Reread => panic!("no re-read due this early"),
        };
        let s = |i: u16| [Sym::from_raw(i), Sym::from_raw(i + 1)];
        assert_eq!(hit([0, 0]), Some([Sym::EMPTY; 2]), "NULL pointers: empty");
        let (x, y, z) = ([0x10, 0x18], [0x20, 0x28], [0x30, 0x38]);
        let (w, v) = ([0x40, 0x48], [0x50, 0x58]);
        m.keep(Slot::P2p, x, s(10));
        m.keep(Slot::P2p, y, s(20));
        for _ in 0..3 {
            assert_eq!(hit(x), Some(s(10)), "alternating: both hit");
            assert_eq!(hit(y), Some(s(20)));
        }
        assert_eq!(hit(z), None);
        assert!(
            matches!(m.lookup(Slot::CollApi, x), Memoed::Miss),
            "slots are separate"
        );
        // A re-read of the older entry refreshes it in place: both stay.
        m.keep(Slot::P2p, x, s(30));
        assert_eq!(hit(x), Some(s(30)));
        assert_eq!(hit(y), Some(s(20)));
        // And of the newer one likewise.
        m.keep(Slot::P2p, y, s(40));
        assert_eq!(hit(y), Some(s(40)));
        assert_eq!(hit(x), Some(s(30)));
        // Four descriptors cycling: all hit.
        m.keep(Slot::P2p, z, s(50));
        m.keep(Slot::P2p, w, s(60));
        for _ in 0..3 {
            assert_eq!(hit(x), Some(s(30)));
            assert_eq!(hit(y), Some(s(40)));
            assert_eq!(hit(z), Some(s(50)));
            assert_eq!(hit(w), Some(s(60)));
        }
        // A fifth: the oldest entry (x) gives way.
        m.keep(Slot::P2p, v, s(70));
        assert_eq!(hit(v), Some(s(70)));
        assert_eq!(hit(y), Some(s(40)));
        assert_eq!(hit(w), Some(s(60)));
        assert_eq!(hit(x), None);
    }

    #[test]
    fn literals_spread_over_the_cache_sets() {
        // Addresses like a library's string literals (a few bytes apart, in
        // one page, at any alignment): no set of two entries gets three of
        // 64, so none of them evicts another.
        for base in [0x7f00_1234_5000usize, 0x5555_0000_0a13, 0x1000] {
            for step in [6usize, 8, 13, 16, 24] {
                let mut per_set = std::collections::HashMap::new();
                for k in 0..64 {
                    let [e, _] = set_of(base + k * step);
                    *per_set.entry(e as *const Entry as usize).or_insert(0) += 1;
                }
                let most = per_set.values().copied().max().unwrap_or(0);
                assert!(most <= 2, "base {base:#x} step {step}: {most} in one set");
            }
        }
    }

    #[test]
    fn bad_pointers_do_not_fault() {
        for bad in [1usize, 0xdead_beef, 0x7fff_ffff_f000, usize::MAX - 8] {
            assert_eq!(read(bad as *const _), Read::Bad, "{bad:#x}");
        }
        assert_eq!(read_long(16 as *const _, 64), None);
    }

    #[test]
    fn string_before_unmapped_page_reads() {
        // SAFETY: anonymous mapping of two pages, second made inaccessible.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
            assert_eq!(libc::mprotect(p.add(4096).cast(), 4096, libc::PROT_NONE), 0);
            let s = p.add(4096 - 5);
            std::ptr::copy_nonoverlapping(c"RING".as_ptr().cast::<u8>(), s, 5);
            assert_eq!(read16(s.cast()).0.as_str(), "RING");
            assert_eq!(read(p.add(4096).cast()), Read::Bad);
            libc::munmap(p.cast(), 8192);
        }
    }

    #[test]
    fn pipe_fallback_works() {
        let s = c"SIMPLE";
        let mut buf = [0u8; 7];
        assert_eq!(pipe_copy(s.as_ptr() as usize, &mut buf), Some(7));
        assert_eq!(&buf, b"SIMPLE\0");
        assert_eq!(pipe_copy(8, &mut buf), None);
    }
}
