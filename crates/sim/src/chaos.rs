//! Seeded chaos: random, mostly-wrong call sequences through a plugin's C ABI.
//!
//! Every choice comes from a [`Source`] of 64-bit words, so the same seed (or the
//! same fuzzer input) replays the same sequence. Calls mix what NCCL does with
//! what a buggy or hostile caller could do: valid, stale, garbage, NULL and
//! foreign handles, contexts and parents; random bytes in the descriptor union
//! (so string fields point anywhere); unknown types and states; channel ids up
//! to 255; double stops; records after stop. The plugin must not crash, and for
//! our shim the counters must balance afterwards (checked by the callers).

use crate::plugin::Plugin;
use evring_abi::{ty, DescrV6, StateArgsV4};
use std::ffi::{c_char, c_int, c_void};

/// Where the random words come from.
pub trait Source {
    fn word(&mut self) -> u64;
}

/// xorshift64*, seeded.
pub struct Seeded(u64);

impl Seeded {
    pub fn new(seed: u64) -> Seeded {
        Seeded(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
}

impl Source for Seeded {
    fn word(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// A fuzzer's input read as words (zeros once exhausted).
pub struct Bytes<'a>(pub &'a [u8]);

impl Source for Bytes<'_> {
    fn word(&mut self) -> u64 {
        let n = self.0.len().min(8);
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(b)
    }
}

/// Calls made, so callers can compare with the plugin's own counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    pub starts: u64,
    pub stops: u64,
    pub records: u64,
}

/// Addresses a caller may pass that are never readable: a PROT_NONE page
/// (mapped once, never unmapped) and a non-canonical address.
pub fn unreadable() -> [u64; 2] {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let page = *PAGE.get_or_init(|| {
        // SAFETY: a fresh anonymous PROT_NONE mapping, deliberately kept forever.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            0x10
        } else {
            p as u64
        }
    });
    [page, 0x8000_0000_0000_0000]
}

const STRINGS: [&std::ffi::CStr; 6] = [
    c"AllReduce",
    c"Send",
    c"ncclFloat32",
    c"RING",
    c"SIMPLE",
    c"a-rather-long-string-beyond-sixteen-bytes",
];

/// One chaos thread against `p`: `ops` random calls using the contexts in
/// `ctxs` (ours) and the values in `foreign` (handles/contexts of another
/// plugin instance). Stops every handle it still holds at the end unless the
/// source says otherwise, like NCCL's normal path. Returns the calls made.
///
/// # Safety
/// `p` must be a loaded profiler plugin whose contexts in `ctxs` are initialised
/// and not finalized for the duration of the call, loaded at ABI v2 or later:
/// the v1 adapter (like NCCL's) converts func/datatype strings by reading them,
/// and this generator passes unreadable string pointers on purpose.
pub unsafe fn run(
    p: &Plugin,
    ctxs: &[u64],
    foreign: &[u64],
    src: &mut dyn Source,
    ops: usize,
) -> Made {
    let mut made = Made::default();
    let mut live: Vec<u64> = Vec::new();
    let mut dead: Vec<u64> = Vec::new();
    let bad = unreadable();
    let pick = |src: &mut dyn Source, v: &[u64]| -> u64 {
        if v.is_empty() {
            0
        } else {
            v[(src.word() % v.len() as u64) as usize]
        }
    };
    for _ in 0..ops {
        let w = src.word();
        match w % 16 {
            0..=6 => {
                // A start: context and parent drawn from every category.
                let ctx = match (w >> 8) % 10 {
                    0 => 0,
                    1 => pick(src, foreign),
                    2 => src.word(),
                    3 => bad[0],
                    _ => pick(src, ctxs),
                };
                let parent = match (w >> 12) % 8 {
                    0 => 0,
                    1 => pick(src, &dead),
                    2 => pick(src, foreign),
                    3 => src.word(),
                    4 => bad[(w >> 16) as usize % 2],
                    _ => pick(src, &live),
                };
                let d = descriptor(src, parent, &bad);
                let mut h: *mut c_void = src.word() as *mut c_void;
                // SAFETY: a valid out-pointer; the descriptor lives on our stack.
                // Its contents are arbitrary on purpose: the plugin must cope.
                unsafe { p.start(ctx as *mut c_void, &mut h, &d) };
                made.starts += 1;
                if !h.is_null() {
                    live.push(h as u64);
                }
            }
            7..=10 => {
                let h = match (w >> 8) % 8 {
                    0 => 0,
                    1 => pick(src, &dead),
                    2 => src.word(),
                    3 => pick(src, foreign),
                    _ if !live.is_empty() => {
                        let i = (src.word() % live.len() as u64) as usize;
                        let h = live.swap_remove(i);
                        dead.push(h);
                        h
                    }
                    _ => 0,
                };
                // SAFETY: any value is a legal argument for a plugin that must
                // tolerate garbage handles.
                unsafe { p.stop(h as *mut c_void) };
                made.stops += 1;
            }
            _ => {
                let h = match (w >> 8) % 6 {
                    0 => pick(src, &dead),
                    1 => src.word(),
                    _ => pick(src, &live),
                };
                let state = match (w >> 12) % 4 {
                    0 => src.word() as c_int,
                    _ => ((w >> 16) % 32) as c_int,
                };
                let args = StateArgsV4 {
                    kernel_ch: evring_abi::KernelChArgs {
                        p_timer: src.word(),
                    },
                };
                let ptr = if (w >> 20).is_multiple_of(3) {
                    std::ptr::null()
                } else {
                    &args as *const _
                };
                // SAFETY: args NULL or a valid union on our stack.
                unsafe { p.record(h as *mut c_void, state, ptr) };
                made.records += 1;
            }
        }
        if dead.len() > 4096 {
            dead.drain(..2048);
        }
    }
    for h in live {
        // SAFETY: handles the plugin returned.
        unsafe { p.stop(h as *mut c_void) };
        made.stops += 1;
    }
    made
}

/// A descriptor of a random type: mostly a known type with plausible fields,
/// sometimes entirely random union bytes or an unknown type.
fn descriptor(src: &mut dyn Source, parent: u64, bad: &[u64; 2]) -> DescrV6 {
    let mut d = DescrV6::zeroed();
    let w = src.word();
    d.ty = match w % 10 {
        0 => src.word(),
        1 => 0,
        _ => 1 << ((w >> 4) % 15),
    };
    d.parent_obj = parent as *mut c_void;
    d.rank = (src.word() % 16) as c_int;
    // Union: random words, then (usually) sensible strings on top.
    let words: [u64; 11] = std::array::from_fn(|_| src.word());
    // SAFETY: the union is 88 plain bytes; any bit pattern is a valid value of
    // the u64 words we write, and reading it back is the plugin's concern.
    unsafe {
        std::ptr::copy_nonoverlapping(
            words.as_ptr().cast::<u8>(),
            &mut d.u as *mut _ as *mut u8,
            88,
        )
    };
    if !(w >> 8).is_multiple_of(4) {
        let s = |src: &mut dyn Source| -> *const c_char {
            match src.word() % 10 {
                0 => std::ptr::null(),
                1 => bad[0] as *const c_char,
                2 => bad[1] as *const c_char,
                _ => STRINGS[(src.word() % STRINGS.len() as u64) as usize].as_ptr(),
            }
        };
        // Writing union fields is safe; the type decides which one NCCL means.
        match d.ty {
            ty::COLL => {
                d.u.coll.func = s(src);
                d.u.coll.datatype = s(src);
                d.u.coll.algo = s(src);
                d.u.coll.proto = s(src);
            }
            ty::P2P => {
                d.u.p2p.func = s(src);
                d.u.p2p.datatype = s(src);
            }
            ty::COLL_API => {
                d.u.coll_api.func = s(src);
                d.u.coll_api.datatype = s(src);
            }
            ty::P2P_API => {
                d.u.p2p_api.func = s(src);
                d.u.p2p_api.datatype = s(src);
            }
            ty::CE_COLL => {
                d.u.ce_coll.func = s(src);
                d.u.ce_coll.datatype = s(src);
                d.u.ce_coll.sync_strategy = s(src);
            }
            // Half the proxy ops keep a random pid: they claim to come from
            // another process (PXN).
            ty::PROXY_OP if src.word().is_multiple_of(2) => {
                d.u.proxy_op.pid = std::process::id() as i32;
            }
            _ => {}
        }
    }
    d
}
