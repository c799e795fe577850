//! Descriptor strings as 2-byte symbols on the hot path.
//!
//! NCCL names a few dozen distinct strings (functions, datatypes, algorithms,
//! protocols). Events carry a [`Sym`] instead of a 16-byte [`Str16`]: the
//! slab's nodes and the completed-record ring move 2 bytes per string, and
//! the writer thread turns symbols back into [`Str16`] ([`resolve`]) before
//! any sink sees a record.
//!
//! The table is process-wide and append-only: a symbol's string is written
//! once, before the symbol is published, and never changes. Interning never
//! waits: a thread claims a free entry with one `fetch_add`, writes the
//! string, and publishes it with a compare-and-swap on a slot of an
//! open-addressing index. If another thread published the same string in that
//! slot first, the loser takes the winner's symbol (its claimed entry stays
//! unused: at most one per racing thread per string), so every string has
//! exactly one symbol. A full table hands out [`Sym::FULL`], which renders as
//! `"?"` (counted per event as `symbols_full`).
//!
//! Interning hashes and probes; it runs when the address cache in
//! `strings.rs` misses or re-reads, not per event.

use crate::strings::Str16;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Distinct strings the table holds (two are reserved: `""` and `"?"`).
pub const CAPACITY: usize = 4096;
/// Index slots: twice the entries, so a probe always ends at an empty slot
/// or the string's own.
const SLOTS: usize = 2 * CAPACITY;

/// A string of the table.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(u16);

impl Sym {
    /// `""` (a NULL string pointer).
    pub const EMPTY: Sym = Sym(0);
    /// `"?"`: a string pointer that did not point at readable memory.
    pub const UNREADABLE: Sym = Sym(1);
    /// `"?"`: the table was full when this string was first seen.
    pub const FULL: Sym = Sym(u16::MAX);

    /// The table index.
    pub fn index(self) -> u16 {
        self.0
    }

    /// The symbol with table index `i` (what [`Sym::index`] gave).
    pub(crate) fn from_raw(i: u16) -> Sym {
        Sym(i)
    }
}

impl std::fmt::Debug for Sym {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sym({}={:?})", self.0, resolve(*self))
    }
}

struct Entry {
    w0: AtomicU64,
    w1: AtomicU64,
}

impl Entry {
    const fn new(first: u8) -> Entry {
        Entry {
            w0: AtomicU64::new(u64::from_ne_bytes([first, 0, 0, 0, 0, 0, 0, 0])),
            w1: AtomicU64::new(0),
        }
    }

    fn words(&self) -> (u64, u64) {
        (
            self.w0.load(Ordering::Relaxed),
            self.w1.load(Ordering::Relaxed),
        )
    }
}

/// Entries 0 and 1 hold `""` and `"?"` from the start.
const RESERVED: u32 = 2;

/// A table of `CAP` strings with an index of `SLOTS` (> `CAP`) slots. The
/// process has one ([`intern`], [`resolve`]); tests build small ones.
pub(crate) struct Table<const CAP: usize, const SLOTS: usize> {
    entries: [Entry; CAP],
    /// The next entry to claim (stays at `CAP` once the table is full).
    next: AtomicU32,
    /// Open-addressing index: 0 = empty, else the entry of a published string.
    index: [AtomicU32; SLOTS],
}

impl<const CAP: usize, const SLOTS: usize> Table<CAP, SLOTS> {
    pub(crate) const fn new() -> Self {
        assert!(SLOTS > CAP && CAP > RESERVED as usize && CAP < u16::MAX as usize);
        let mut entries = [const { Entry::new(0) }; CAP];
        entries[Sym::UNREADABLE.0 as usize] = Entry::new(b'?');
        Table {
            entries,
            next: AtomicU32::new(RESERVED),
            index: [const { AtomicU32::new(0) }; SLOTS],
        }
    }

    /// The symbol of `s`, adding it on first sight; [`Sym::FULL`] once the
    /// table is full and `s` is not in it. Never waits (see module doc).
    pub(crate) fn intern(&self, s: Str16) -> Sym {
        if s == Str16::EMPTY {
            return Sym::EMPTY;
        }
        if s == Str16::UNREADABLE {
            return Sym::UNREADABLE;
        }
        let (a, b) = s.words();
        let h = (a ^ b.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let start = (h >> 32) as usize % SLOTS;
        let mut claimed: Option<u32> = None;
        for probe in 0..SLOTS {
            let slot = &self.index[(start + probe) % SLOTS];
            let mut cur = slot.load(Ordering::Acquire);
            if cur == 0 {
                let idx = match claimed {
                    Some(i) => i,
                    None => {
                        let Some(i) = self.claim() else {
                            return Sym::FULL;
                        };
                        let e = &self.entries[i as usize];
                        e.w0.store(a, Ordering::Relaxed);
                        e.w1.store(b, Ordering::Relaxed);
                        claimed = Some(i);
                        i
                    }
                };
                // Release: the entry's words are visible to whoever sees `idx`.
                match slot.compare_exchange(0, idx, Ordering::Release, Ordering::Acquire) {
                    Ok(_) => return Sym(idx as u16),
                    Err(other) => cur = other,
                }
            }
            if self.entries[cur as usize].words() == (a, b) {
                return Sym(cur as u16);
            }
        }
        // Not reached: fewer strings than slots, so an empty slot remains.
        Sym::FULL
    }

    /// A fresh entry, or None when the table is full.
    fn claim(&self) -> Option<u32> {
        self.next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                ((n as usize) < CAP).then_some(n + 1)
            })
            .ok()
    }

    /// The string of `sym` (`"?"` for [`Sym::FULL`] and anything out of range).
    #[inline]
    pub(crate) fn resolve(&self, sym: Sym) -> Str16 {
        match self.entries.get(sym.0 as usize) {
            Some(e) => {
                let (a, b) = e.words();
                Str16::from_words(a, b)
            }
            None => Str16::UNREADABLE,
        }
    }

    /// Entries claimed (reserved ones included).
    pub(crate) fn len(&self) -> usize {
        self.next.load(Ordering::Relaxed) as usize
    }
}

static TABLE: Table<CAPACITY, SLOTS> = Table::new();

/// Maps the table's pages now (see `Engine::new`).
pub(crate) fn populate() {
    evring::populate(&TABLE);
}

/// The process-wide symbol of `s` ([`Table::intern`]).
#[inline]
pub fn intern(s: Str16) -> Sym {
    TABLE.intern(s)
}

/// The string of `sym` in the process-wide table.
#[inline]
pub fn resolve(sym: Sym) -> Str16 {
    TABLE.resolve(sym)
}

/// Strings the process-wide table holds (the two reserved ones included).
pub fn len() -> usize {
    TABLE.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn s(t: &str) -> Str16 {
        Str16::from_bytes(t.as_bytes())
    }

    #[test]
    fn reserved_and_dedup() {
        assert_eq!(intern(Str16::EMPTY), Sym::EMPTY);
        assert_eq!(intern(Str16::UNREADABLE), Sym::UNREADABLE);
        assert_eq!(intern(s("?")), Sym::UNREADABLE);
        assert_eq!(resolve(Sym::EMPTY).as_str(), "");
        assert_eq!(resolve(Sym::UNREADABLE).as_str(), "?");
        assert_eq!(resolve(Sym::FULL).as_str(), "?");
        let a = intern(s("symtest-AllReduce"));
        let b = intern(s("symtest-Sum"));
        assert_ne!(a, b);
        assert_eq!(intern(s("symtest-AllReduce")), a);
        assert_eq!(resolve(a), s("symtest-AllReduce"));
        assert_eq!(resolve(b).as_str(), "symtest-Sum");
    }

    #[test]
    fn full_table_gives_full_and_keeps_known_strings() {
        let t: Table<6, 16> = Table::new();
        let known: Vec<Sym> = (0..4).map(|i| t.intern(s(&format!("k{i}")))).collect();
        assert_eq!(t.len(), 6);
        assert!(known.iter().all(|&k| k != Sym::FULL));
        for i in 0..10 {
            let x = t.intern(s(&format!("new{i}")));
            assert_eq!(x, Sym::FULL);
            assert_eq!(t.resolve(x).as_str(), "?");
        }
        assert_eq!(t.len(), 6, "a full table claims nothing more");
        for (i, &k) in known.iter().enumerate() {
            assert_eq!(
                t.intern(s(&format!("k{i}"))),
                k,
                "known strings keep their symbol"
            );
            assert_eq!(t.resolve(k).as_str(), format!("k{i}"));
        }
        assert_eq!(t.intern(Str16::EMPTY), Sym::EMPTY);
    }

    #[test]
    fn concurrent_interning_in_a_small_table() {
        // 4 threads race on the same 12 strings in a fresh table:
        // one symbol per string; each string costs at most one
        // unused entry per thread that lost its race.
        for _ in 0..50 {
            let t: Table<64, 128> = Table::new();
            let names: Vec<Str16> = (0..12).map(|i| s(&format!("r{i}"))).collect();
            let got: Vec<Vec<Sym>> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..4)
                    .map(|_| sc.spawn(|| names.iter().map(|&n| t.intern(n)).collect::<Vec<_>>()))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for g in &got[1..] {
                assert_eq!(g, &got[0]);
            }
            for (n, &y) in names.iter().zip(&got[0]) {
                assert_eq!(t.resolve(y), *n);
            }
            assert!(t.len() >= 2 + 12 && t.len() <= 2 + 12 * 4);
        }
    }

    #[test]
    fn concurrent_interning_gives_one_symbol_per_string() {
        let names: Vec<Str16> = (0..64).map(|i| s(&format!("conc-{i}"))).collect();
        let per_thread: Vec<HashMap<Str16, Sym>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4)
                .map(|t| {
                    let names = &names;
                    sc.spawn(move || {
                        let mut m = HashMap::new();
                        // Each thread walks the names in its own order.
                        for k in 0..names.len() {
                            let n = names[(k * (2 * t + 1)) % names.len()];
                            m.insert(n, intern(n));
                        }
                        m
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for n in &names {
            let first = per_thread[0][n];
            assert_ne!(first, Sym::FULL);
            for m in &per_thread[1..] {
                assert_eq!(m[n], first, "{n:?}");
            }
            assert_eq!(resolve(first), *n);
        }
        let mut syms: Vec<Sym> = names.iter().map(|n| per_thread[0][n]).collect();
        syms.sort();
        syms.dedup();
        assert_eq!(
            syms.len(),
            names.len(),
            "distinct strings, distinct symbols"
        );
    }
}
