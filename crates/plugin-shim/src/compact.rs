//! The completed-event record as it crosses the record ring: 128 bytes
//! where a [`Record`] is 248.
//!
//! The completing thread writes every line of it and the writer thread, on
//! another core, reads them all, so its size is a per-event cost. It is a
//! `Record` with
//! * strings as 2-byte symbols (`symbols.rs`),
//! * the info's small fields (ints, symbols, one byte, one bool) in fixed
//!   places and its 64-bit fields (at most 3: seq, count, stream...) in the
//!   tail,
//! * the words that are often zero (GPU start and end, the state argument,
//!   the v7 user tag) in the tail only when they are not, and the states
//!   after them, packed as the node keeps them (`state << 56 | ns`).
//!
//! The tail holds 6 words: the info's (at most 3) and the optional ones (at
//! most 4) and the states. Every record NCCL's call sequences produce fits:
//! the kinds with 64-bit info fields (Coll, CeColl, CollApi, P2pApi, P2p)
//! are the only ones with a user tag, take no state with an argument, and
//! of them only CeColl takes states at all (which NCCL never sends), so they
//! need at most 3 + 1 + 2 (GPU times folded in from KernelCh children); a
//! GroupApi with GPU times keeps four states. Only a hostile tree does not
//! fit (a KernelCh that names a ProxyStep with four states as its parent
//! folds GPU times into it; a tagged Coll given a state argument): that
//! record keeps its info, times and user tag, and as many states as there
//! is room for (the state argument is the first optional word to go), and
//! is flagged `states_overflow`, like an event with a fifth state.
//!
//! [`Compact::expand`] gives the `Record` back on the writer thread, so the
//! sinks and every output see exactly the records they saw before.

use crate::clock;
use crate::model::{Info, Kind};
use crate::node::{flag, pack_state, unpack_state, Node, STATES};
use crate::record::{Record, Timing};
use crate::symbols::Sym;
use std::ops::DerefMut;
use std::sync::atomic::Ordering;

/// Words in the tail.
const TAIL: usize = 6;

/// `bits`: the info's bool, and which optional words the tail holds (bit
/// `1 + i` for optional word `i`, in tail order).
const BOOL: u8 = 1 << 0;
const HAS_GPU_START: u8 = 1 << 1;
const HAS_GPU_END: u8 = 1 << 2;
const HAS_STATE_ARG: u8 = 1 << 3;
const HAS_USER_TAG: u8 = 1 << 4;
/// Optional words: GPU start, GPU end, state argument, user tag.
const OPTIONAL: usize = 4;

/// A completed event as it travels the record ring (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compact {
    pub id: u64,
    pub parent: u64,
    pub ctx: u64,
    pub start_ns: u64,
    pub stop_ns: u64,
    pub end_ns: u64,
    pub rank: i32,
    pub flags: u32,
    /// The info's ints and symbols, by variant ([`InfoParts`]).
    small: [u32; 4],
    /// Info words, then the optional words `bits` names, then the states.
    tail: [u64; TAIL],
    pub kind: Kind,
    pub timing: Timing,
    /// Which `Info` variant ([`InfoParts`]).
    tag: u8,
    /// The info's one byte (a channel or channel count).
    byte: u8,
    /// The info's bool and the optional words present (`BOOL`, `HAS_*`).
    bits: u8,
    /// States in the tail (after the optional words).
    n_states: u8,
}

const _: () = assert!(std::mem::size_of::<Compact>() <= 128);

/// What the completing thread needs of a record it has pushed (to fold it
/// into the parent), kept aside: the record itself is in the ring by then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Folded {
    /// The event's parent ID as NCCL gave it.
    pub parent: u64,
    /// The event's flags, also the bits the record leaves out (`hide`).
    pub flags: u32,
    pub end_ns: u64,
    /// Raw GPU globaltimer start and end (0 = none).
    pub gpu_start: u64,
    pub gpu_end: u64,
}

impl Compact {
    /// Builds the record of a node that has just been completed.
    pub fn of(id: u64, n: &Node) -> Compact {
        let mut cell = std::mem::MaybeUninit::uninit();
        *Head::of(id, n).write(n, 0, |c| cell.write(c))
    }

    /// Lays the record out (`state(k)`: the event's `k`th of `n` states,
    /// read only if some fit) and hands it to `write`: the fixed fields and
    /// the info's words (always at the tail's start) in one value, then the
    /// optional words present and the states that fit at their places in
    /// the tail through `write`'s result (the rest of the tail stays 0).
    #[inline(always)]
    fn assemble<W: DerefMut<Target = Compact>>(
        f: Fixed,
        info: &Info<Sym>,
        optional: [u64; 3],
        state: impl Fn(usize) -> u64,
        n: u8,
        write: impl FnOnce(Compact) -> W,
    ) -> W {
        let parts = InfoParts::of(info);
        let mut bits = if parts.flag { BOOL } else { 0 };
        let mut used = parts.n_words;
        let mut flags = f.flags;
        let [o0, o1, mut o2] = optional;
        // Only a hostile tree has all four optional words beside 3 info
        // words: the state argument gives way (module doc).
        if parts.n_words + 4 > TAIL && o0 != 0 && o1 != 0 && o2 != 0 && parts.user_tag != 0 {
            o2 = 0;
            flags |= flag::STATES_OVERFLOW;
        }
        let optional = [o0, o1, o2, parts.user_tag];
        // Most records carry no optional word: one test for the four.
        if o0 | o1 | o2 | parts.user_tag != 0 {
            for (i, &w) in optional.iter().enumerate() {
                bits |= u8::from(w != 0) << (i + 1);
                used += usize::from(w != 0);
            }
        }
        // The optional words fit (above); the states take what is left.
        let keep = (n as usize).min(TAIL - used);
        if keep < n as usize {
            flags |= flag::STATES_OVERFLOW;
        }
        let [w0, w1, w2] = parts.words;
        let mut c = write(Compact {
            id: f.id,
            parent: f.parent,
            ctx: f.ctx,
            start_ns: f.start_ns,
            stop_ns: f.stop_ns,
            end_ns: f.end_ns,
            rank: f.rank,
            flags,
            small: parts.small,
            // Words past the variant's own are 0 in `parts.words`.
            tail: [w0, w1, w2, 0, 0, 0],
            kind: f.kind,
            timing: f.timing,
            tag: parts.tag,
            byte: parts.byte,
            bits,
            n_states: keep as u8,
        });
        if used > parts.n_words || keep > 0 {
            let tail = &mut c.tail;
            let mut at = parts.n_words;
            for w in optional {
                if w != 0 {
                    tail[at] = w;
                    at += 1;
                }
            }
            for k in 0..keep {
                tail[at + k] = state(k);
            }
        }
        c
    }

    /// Cost attribution build (`--cfg evring_ablate="floor"`, `floor.rs`):
    /// one call's fragment laid out as a record: `info` converted, the time
    /// as start (a start), stop (`stop`) or in the one state word `state`.
    #[cfg(evring_ablate = "floor")]
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn fragment<W: DerefMut<Target = Compact>>(
        id: u64,
        parent: u64,
        ctx: u64,
        rank: i32,
        kind: Kind,
        info: &Info<Sym>,
        ns: u64,
        state: u64,
        stop: bool,
        write: impl FnOnce(Compact) -> W,
    ) -> W {
        Compact::assemble(
            Fixed {
                id,
                parent,
                ctx,
                start_ns: ns,
                stop_ns: if stop { ns } else { 0 },
                end_ns: ns,
                rank,
                flags: 0,
                kind,
                timing: Timing::Host,
            },
            info,
            [0; 3],
            |_| state,
            u8::from(state != 0),
            write,
        )
    }

    /// The optional words in tail order, 0 where absent, and where the
    /// states begin.
    #[inline]
    fn optional(&self) -> ([u64; OPTIONAL], usize) {
        let mut at = InfoParts::words_of(self.tag);
        let mut out = [0u64; OPTIONAL];
        for (o, bit) in
            out.iter_mut()
                .zip([HAS_GPU_START, HAS_GPU_END, HAS_STATE_ARG, HAS_USER_TAG])
        {
            if self.bits & bit != 0 {
                *o = self.tail[at];
                at += 1;
            }
        }
        (out, at)
    }

    /// Raw GPU globaltimer start (0 = none).
    #[inline]
    pub fn gpu_start(&self) -> u64 {
        self.optional().0[0]
    }

    /// Raw GPU globaltimer end (0 = none).
    #[inline]
    pub fn gpu_end(&self) -> u64 {
        self.optional().0[1]
    }

    /// The full record (writer thread: strings from the symbol table).
    pub fn expand(&self) -> Record {
        let ([gpu_start, gpu_end, state_arg, user_tag], at) = self.optional();
        let mut states = [(0u8, 0u64); STATES];
        let n = self.n_states as usize;
        for (s, &w) in states.iter_mut().zip(&self.tail[at..at + n]) {
            *s = unpack_state(w);
        }
        let mut words = [0u64; 3];
        let nw = InfoParts::words_of(self.tag);
        words[..nw].copy_from_slice(&self.tail[..nw]);
        let info = InfoParts {
            tag: self.tag,
            small: self.small,
            byte: self.byte,
            flag: self.bits & BOOL != 0,
            words,
            n_words: nw,
            user_tag,
        }
        .info();
        Record {
            id: self.id,
            parent: self.parent,
            ctx: self.ctx,
            kind: self.kind,
            rank: self.rank,
            info: info.resolve(),
            start_ns: self.start_ns,
            stop_ns: self.stop_ns,
            end_ns: self.end_ns,
            timing: self.timing,
            gpu_start,
            gpu_end,
            states,
            n_states: self.n_states,
            state_arg,
            flags: self.flags,
        }
    }

    /// The compact form of `r` (interns its strings; state times keep their
    /// low 56 bits, as the node keeps them; what does not fit is treated as
    /// in [`Compact::of`]). Tests and tools.
    pub fn from_record(r: &Record) -> Compact {
        let n = r.n_states.min(STATES as u8);
        let mut states = [0u64; STATES];
        for (w, &(s, ns)) in states.iter_mut().zip(&r.states).take(n as usize) {
            *w = pack_state(s, ns);
        }
        let mut cell = std::mem::MaybeUninit::uninit();
        *Compact::assemble(
            Fixed {
                id: r.id,
                parent: r.parent,
                ctx: r.ctx,
                start_ns: r.start_ns,
                stop_ns: r.stop_ns,
                end_ns: r.end_ns,
                rank: r.rank,
                flags: r.flags,
                kind: r.kind,
                timing: r.timing,
            },
            &r.info.intern(),
            [r.gpu_start, r.gpu_end, r.state_arg],
            |k| states[k],
            n,
            |c| cell.write(c),
        )
    }
}

/// A just-completed node's scalars as its record keeps them (everything
/// but the info and the states), read once: [`Head::write`] lays the
/// record out from it (inlined into the closure that writes the ring's
/// slot, so the fields go straight there), and [`Head::folded`] is what the
/// parent needs, without reading the record back.
#[derive(Clone, Copy)]
pub struct Head {
    /// `flags`: every bit, also those the record leaves out (`hide`).
    f: Fixed,
    gpu_start: u64,
    gpu_end: u64,
    state_arg: u64,
}

impl Head {
    /// Reads the node.
    #[inline(always)]
    pub fn of(id: u64, n: &Node) -> Head {
        let mut flags = n.flags();
        let stop_ns = if flags & flag::STOPPED != 0 {
            n.stop_ns.load(Ordering::Relaxed)
        } else {
            0
        };
        let child_end = n.child_end_ns();
        // Derived here rather than set by each child (one locked `or` fewer
        // per completion): a child ended after this event's own stop.
        if stop_ns != 0 && child_end > stop_ns {
            flags |= flag::CHILD_EXTENDED;
        }
        let gpu_start = match n.gpu_start.load(Ordering::Relaxed) {
            u64::MAX => 0,
            g => g,
        };
        let gpu_end = n.gpu_end.load(Ordering::Relaxed);
        // The GPU clock offset is only read for events with GPU times.
        let gpu_end_host = if flags & flag::GPU_TIMED != 0 {
            clock::gpu_to_host(gpu_end).unwrap_or(0)
        } else {
            0
        };
        // Only events NCCL never stopped need the clock read here.
        let now = if stop_ns == 0 {
            clock::now_ns()
        } else {
            stop_ns
        };
        let base = now;
        let (end_ns, timing) = if gpu_end_host > 0 {
            (base.max(gpu_end_host).max(child_end), Timing::Gpu)
        } else if child_end > base {
            (child_end, Timing::Children)
        } else if stop_ns == 0 {
            (now, Timing::Forced)
        } else {
            (stop_ns, Timing::Host)
        };
        Head {
            f: Fixed {
                id,
                parent: n.parent,
                ctx: n.ctx,
                start_ns: n.start_ns,
                stop_ns,
                end_ns: end_ns.max(n.start_ns),
                rank: n.rank,
                flags,
                kind: n.kind,
                timing,
            },
            gpu_start,
            gpu_end,
            state_arg: n.state_arg.load(Ordering::Relaxed),
        }
    }

    /// What the parent needs of this record.
    #[inline(always)]
    pub fn folded(&self) -> Folded {
        Folded {
            parent: self.f.parent,
            flags: self.f.flags,
            end_ns: self.f.end_ns,
            gpu_start: self.gpu_start,
            gpu_end: self.gpu_end,
        }
    }

    /// The record of `n` (the node this was read from), with the flag bits
    /// `hide` left out, handed to `write` (which puts it where it belongs:
    /// the ring's slot, via `RecordSlot::write`); returns `write`'s result.
    #[inline(always)]
    pub fn write<W: DerefMut<Target = Compact>>(
        self,
        n: &Node,
        hide: u32,
        write: impl FnOnce(Compact) -> W,
    ) -> W {
        // The count now, the words only if there are any.
        Compact::assemble(
            Fixed {
                flags: self.f.flags & !hide,
                ..self.f
            },
            &n.info,
            [self.gpu_start, self.gpu_end, self.state_arg],
            |k| n.state_word(k),
            n.n_states(),
            write,
        )
    }
}

/// The fields a `Compact` keeps as they are.
#[derive(Clone, Copy)]
struct Fixed {
    id: u64,
    parent: u64,
    ctx: u64,
    start_ns: u64,
    stop_ns: u64,
    end_ns: u64,
    rank: i32,
    flags: u32,
    kind: Kind,
    timing: Timing,
}

/// An `Info<Sym>` taken apart: its variant, up to four 32-bit fields (ints,
/// pairs of symbols, halves of a word), one byte, one bool, up to three
/// 64-bit words and the user tag (an optional word of the tail).
struct InfoParts {
    tag: u8,
    small: [u32; 4],
    byte: u8,
    flag: bool,
    words: [u64; 3],
    n_words: usize,
    user_tag: u64,
}

/// Two symbols in one field.
fn pair(a: Sym, b: Sym) -> u32 {
    u32::from(a.index()) | u32::from(b.index()) << 16
}

fn unpair(x: u32) -> (Sym, Sym) {
    (Sym::from_raw(x as u16), Sym::from_raw((x >> 16) as u16))
}

/// A 64-bit field in two 32-bit ones.
fn halves(x: u64) -> [u32; 2] {
    [x as u32, (x >> 32) as u32]
}

fn whole(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | u64::from(hi) << 32
}

mod tag {
    pub const NONE: u8 = 0;
    pub const GROUP_API: u8 = 1;
    pub const COLL_API: u8 = 2;
    pub const P2P_API: u8 = 3;
    pub const KERNEL_LAUNCH: u8 = 4;
    pub const COLL: u8 = 5;
    pub const P2P: u8 = 6;
    pub const PROXY_OP: u8 = 7;
    pub const PROXY_STEP: u8 = 8;
    pub const KERNEL_CH: u8 = 9;
    pub const NET_PLUGIN: u8 = 10;
    pub const CE_COLL: u8 = 11;
    pub const CE_SYNC: u8 = 12;
    pub const CE_BATCH: u8 = 13;
    pub const KERNEL_PHASE: u8 = 14;
}

impl InfoParts {
    fn new(tag: u8) -> InfoParts {
        InfoParts {
            tag,
            small: [0; 4],
            byte: 0,
            flag: false,
            words: [0; 3],
            n_words: 0,
            user_tag: 0,
        }
    }

    fn with_words(mut self, w: &[u64]) -> InfoParts {
        self.words[..w.len()].copy_from_slice(w);
        self.n_words = w.len();
        self
    }

    /// How many tail words the variant `tag` takes.
    #[inline]
    fn words_of(tag: u8) -> usize {
        match tag {
            tag::COLL | tag::CE_COLL => 3,
            tag::COLL_API | tag::P2P_API | tag::P2P => 2,
            _ => 0,
        }
    }

    #[inline(always)]
    fn of(info: &Info<Sym>) -> InfoParts {
        match *info {
            Info::None => InfoParts::new(tag::NONE),
            Info::GroupApi {
                graph_captured,
                depth,
            } => InfoParts {
                small: [depth as u32, 0, 0, 0],
                flag: graph_captured,
                ..InfoParts::new(tag::GROUP_API)
            },
            Info::CollApi {
                func,
                count,
                datatype,
                root,
                stream,
                graph_captured,
                user_tag,
            } => InfoParts {
                small: [root as u32, pair(func, datatype), 0, 0],
                flag: graph_captured,
                user_tag,
                ..InfoParts::new(tag::COLL_API)
            }
            .with_words(&[count, stream]),
            Info::P2pApi {
                func,
                count,
                datatype,
                stream,
                graph_captured,
                user_tag,
            } => InfoParts {
                small: [pair(func, datatype), 0, 0, 0],
                flag: graph_captured,
                user_tag,
                ..InfoParts::new(tag::P2P_API)
            }
            .with_words(&[count, stream]),
            Info::KernelLaunch { stream } => {
                let [lo, hi] = halves(stream);
                InfoParts {
                    small: [lo, hi, 0, 0],
                    ..InfoParts::new(tag::KERNEL_LAUNCH)
                }
            }
            Info::Coll {
                seq,
                func,
                count,
                root,
                datatype,
                n_channels,
                n_warps,
                algo,
                proto,
                parent_group,
                kernel_variant,
                is_sym_coll,
                user_tag,
            } => InfoParts {
                small: [
                    root as u32,
                    pair(func, datatype),
                    pair(algo, proto),
                    u32::from(n_warps) | u32::from(kernel_variant.index()) << 8,
                ],
                byte: n_channels,
                flag: is_sym_coll,
                user_tag,
                ..InfoParts::new(tag::COLL)
            }
            .with_words(&[seq, count, parent_group]),
            Info::P2p {
                func,
                datatype,
                count,
                peer,
                n_channels,
                parent_group,
                user_tag,
            } => InfoParts {
                small: [peer as u32, pair(func, datatype), 0, 0],
                byte: n_channels,
                user_tag,
                ..InfoParts::new(tag::P2P)
            }
            .with_words(&[count, parent_group]),
            Info::ProxyOp {
                pid,
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
            } => InfoParts {
                small: [pid as u32, peer as u32, n_steps as u32, chunk_size as u32],
                byte: channel,
                flag: is_send,
                ..InfoParts::new(tag::PROXY_OP)
            },
            Info::ProxyStep { step } => InfoParts {
                small: [step as u32, 0, 0, 0],
                ..InfoParts::new(tag::PROXY_STEP)
            },
            Info::KernelCh { channel, gpu_start } => {
                let [lo, hi] = halves(gpu_start);
                InfoParts {
                    small: [lo, hi, 0, 0],
                    byte: channel,
                    ..InfoParts::new(tag::KERNEL_CH)
                }
            }
            Info::NetPlugin { id } => {
                let [lo, hi] = halves(id as u64);
                InfoParts {
                    small: [lo, hi, 0, 0],
                    ..InfoParts::new(tag::NET_PLUGIN)
                }
            }
            Info::CeColl {
                seq,
                func,
                count,
                root,
                datatype,
                sync,
                stream,
                user_tag,
            } => InfoParts {
                small: [
                    root as u32,
                    pair(func, datatype),
                    u32::from(sync.index()),
                    0,
                ],
                user_tag,
                ..InfoParts::new(tag::CE_COLL)
            }
            .with_words(&[seq, count, stream]),
            Info::CeSync { complete, n_ranks } => InfoParts {
                small: [n_ranks as u32, 0, 0, 0],
                flag: complete,
                ..InfoParts::new(tag::CE_SYNC)
            },
            Info::CeBatch {
                num_ops,
                total_bytes,
                intra_sync,
            } => {
                let [lo, hi] = halves(total_bytes);
                InfoParts {
                    small: [num_ops as u32, lo, hi, 0],
                    flag: intra_sync,
                    ..InfoParts::new(tag::CE_BATCH)
                }
            }
            Info::KernelPhase {
                channel,
                phase,
                gpu_start,
            } => {
                let [lo, hi] = halves(gpu_start);
                InfoParts {
                    small: [lo, hi, u32::from(phase), 0],
                    byte: channel,
                    ..InfoParts::new(tag::KERNEL_PHASE)
                }
            }
        }
    }

    fn info(&self) -> Info<Sym> {
        let [s0, s1, s2, s3] = self.small;
        let w = self.words;
        match self.tag {
            tag::GROUP_API => Info::GroupApi {
                graph_captured: self.flag,
                depth: s0 as i32,
            },
            tag::COLL_API => {
                let (func, datatype) = unpair(s1);
                Info::CollApi {
                    func,
                    count: w[0],
                    datatype,
                    root: s0 as i32,
                    stream: w[1],
                    graph_captured: self.flag,
                    user_tag: self.user_tag,
                }
            }
            tag::P2P_API => {
                let (func, datatype) = unpair(s0);
                Info::P2pApi {
                    func,
                    count: w[0],
                    datatype,
                    stream: w[1],
                    graph_captured: self.flag,
                    user_tag: self.user_tag,
                }
            }
            tag::KERNEL_LAUNCH => Info::KernelLaunch {
                stream: whole(s0, s1),
            },
            tag::COLL => {
                let (func, datatype) = unpair(s1);
                let (algo, proto) = unpair(s2);
                Info::Coll {
                    seq: w[0],
                    func,
                    count: w[1],
                    root: s0 as i32,
                    datatype,
                    n_channels: self.byte,
                    n_warps: s3 as u8,
                    algo,
                    proto,
                    parent_group: w[2],
                    kernel_variant: Sym::from_raw((s3 >> 8) as u16),
                    is_sym_coll: self.flag,
                    user_tag: self.user_tag,
                }
            }
            tag::P2P => {
                let (func, datatype) = unpair(s1);
                Info::P2p {
                    func,
                    datatype,
                    count: w[0],
                    peer: s0 as i32,
                    n_channels: self.byte,
                    parent_group: w[1],
                    user_tag: self.user_tag,
                }
            }
            tag::PROXY_OP => Info::ProxyOp {
                pid: s0 as i32,
                channel: self.byte,
                peer: s1 as i32,
                n_steps: s2 as i32,
                chunk_size: s3 as i32,
                is_send: self.flag,
            },
            tag::PROXY_STEP => Info::ProxyStep { step: s0 as i32 },
            tag::KERNEL_CH => Info::KernelCh {
                channel: self.byte,
                gpu_start: whole(s0, s1),
            },
            tag::NET_PLUGIN => Info::NetPlugin {
                id: whole(s0, s1) as i64,
            },
            tag::CE_COLL => {
                let (func, datatype) = unpair(s1);
                Info::CeColl {
                    seq: w[0],
                    func,
                    count: w[1],
                    root: s0 as i32,
                    datatype,
                    sync: Sym::from_raw(s2 as u16),
                    stream: w[2],
                    user_tag: self.user_tag,
                }
            }
            tag::CE_SYNC => Info::CeSync {
                complete: self.flag,
                n_ranks: s0 as i32,
            },
            tag::CE_BATCH => Info::CeBatch {
                num_ops: s0 as i32,
                total_bytes: whole(s1, s2),
                intra_sync: self.flag,
            },
            tag::KERNEL_PHASE => Info::KernelPhase {
                channel: self.byte,
                phase: s2 as u8,
                gpu_start: whole(s0, s1),
            },
            _ => Info::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strings::Str16;

    fn s(t: &str) -> Str16 {
        Str16::from_bytes(t.as_bytes())
    }

    /// One info of every variant, every field set (strings of full length).
    fn infos() -> Vec<(Kind, Info)> {
        vec![
            (Kind::Group, Info::None),
            (
                Kind::GroupApi,
                Info::GroupApi {
                    graph_captured: true,
                    depth: -3,
                },
            ),
            (
                Kind::CollApi,
                Info::CollApi {
                    func: s("AllReduce"),
                    count: u64::MAX,
                    datatype: s("ncclBfloat16-xyz"),
                    root: i32::MIN,
                    stream: 0xdead_beef_0000,
                    graph_captured: true,
                    user_tag: 7,
                },
            ),
            (
                Kind::P2pApi,
                Info::P2pApi {
                    func: s("Send"),
                    count: 7,
                    datatype: s("ncclInt8"),
                    stream: 9,
                    graph_captured: false,
                    user_tag: 0,
                },
            ),
            (Kind::KernelLaunch, Info::KernelLaunch { stream: u64::MAX }),
            (
                Kind::Coll,
                Info::Coll {
                    seq: u64::MAX - 1,
                    func: s("ReduceScatter"),
                    count: 1 << 40,
                    root: -1,
                    datatype: s("ncclFloat32"),
                    n_channels: 255,
                    n_warps: 16,
                    algo: s("NVLS_TREE"),
                    proto: s("LL128"),
                    parent_group: 0xFFFF_FFFF_FFFF_0001,
                    kernel_variant: s("AllReduce_ST_LL"),
                    is_sym_coll: true,
                    user_tag: u64::MAX,
                },
            ),
            (
                Kind::P2p,
                Info::P2p {
                    func: s("Recv"),
                    datatype: s(""),
                    count: 3,
                    peer: 7,
                    n_channels: 4,
                    parent_group: 11,
                    user_tag: 1 << 63,
                },
            ),
            (
                Kind::ProxyOp,
                Info::ProxyOp {
                    pid: 4242,
                    channel: 31,
                    peer: -2,
                    n_steps: 8,
                    chunk_size: 1 << 20,
                    is_send: true,
                },
            ),
            (Kind::ProxyStep, Info::ProxyStep { step: i32::MAX }),
            (Kind::ProxyCtrl, Info::None),
            (
                Kind::KernelCh,
                Info::KernelCh {
                    channel: 63,
                    gpu_start: 1 << 62,
                },
            ),
            (Kind::NetPlugin, Info::NetPlugin { id: i64::MIN }),
            (
                Kind::CeColl,
                Info::CeColl {
                    seq: 5,
                    func: s("AllGather"),
                    count: 6,
                    root: 0,
                    datatype: s("ncclUint64"),
                    sync: s("?"),
                    stream: 8,
                    user_tag: 0x1234,
                },
            ),
            (
                Kind::CeSync,
                Info::CeSync {
                    complete: true,
                    n_ranks: 8,
                },
            ),
            (
                Kind::CeBatch,
                Info::CeBatch {
                    num_ops: 3,
                    total_bytes: u64::MAX,
                    intra_sync: true,
                },
            ),
            (
                Kind::KernelPhase,
                Info::KernelPhase {
                    channel: 254,
                    phase: crate::abi::phase::FINAL_SYNC,
                    gpu_start: u64::MAX - 3,
                },
            ),
        ]
    }

    fn all_flags() -> u32 {
        flag::NAMES.iter().fold(0, |a, (f, _)| a | f)
    }

    /// What `expand(from_record(r))` must give: `r` itself when its tail
    /// words fit, else `r` with the states that fit and `states_overflow`.
    fn expected(r: &Record) -> Record {
        let parts = InfoParts::of(&r.info.intern());
        let mut e = *r;
        let words = [r.gpu_start, r.gpu_end, r.state_arg, parts.user_tag];
        let mut optional = words.iter().filter(|&&w| w != 0).count();
        // Seven words: the state argument gives way.
        if parts.n_words + optional > TAIL {
            e.state_arg = 0;
            e.flags |= flag::STATES_OVERFLOW;
            optional -= 1;
        }
        let room = TAIL - parts.n_words - optional;
        if (r.n_states as usize) <= room {
            return e;
        }
        e.n_states = room as u8;
        for s in &mut e.states[room..] {
            *s = (0, 0);
        }
        e.flags |= flag::STATES_OVERFLOW;
        e
    }

    #[test]
    fn compact_round_trips_every_kind_and_field() {
        let mut recs = crate::test_records::records();
        let timings = [Timing::Host, Timing::Children, Timing::Gpu, Timing::Forced];
        for (i, (kind, info)) in infos().into_iter().enumerate() {
            let base = Record::stopped(i as u64 + 1, 99, kind, info, 1_000 + i as u64, 5_000);
            // Plain; every word set, states full, every flag; forced.
            recs.push(base);
            recs.push(Record {
                ctx: u64::MAX,
                rank: -1,
                stop_ns: 4_000,
                end_ns: u64::MAX,
                timing: timings[i % 4],
                gpu_start: 1,
                gpu_end: u64::MAX,
                states: [(0, 1), (30, (1 << 56) - 1), (255, 0), (22, 12_345)],
                n_states: 4,
                state_arg: u64::MAX,
                flags: all_flags(),
                ..base
            });
            recs.push(Record {
                stop_ns: 0,
                timing: Timing::Forced,
                flags: flag::FORCED_FINALIZE | flag::CHILDREN_INCOMPLETE,
                states: [(8, 77), (0, 0), (0, 0), (0, 0)],
                n_states: 1,
                ..base
            });
        }
        let kinds: std::collections::HashSet<_> = recs.iter().map(|r| r.kind).collect();
        assert_eq!(kinds.len(), Kind::ALL.len(), "every kind covered");
        let mut cut = 0;
        for r in &recs {
            let c = Compact::from_record(r);
            let want = expected(r);
            cut += usize::from(want != *r);
            assert_eq!(c.expand(), want, "{c:?}");
        }
        assert!(cut > 0, "the overflow path was exercised");
    }

    /// The most any kind carries in records the engine builds: GPU times
    /// where KernelCh children fold them in (their ancestors), four states
    /// where the kind takes states (two for CeColl, whose states NCCL never
    /// sends), a state argument where one of its states carries one.
    #[test]
    fn the_engines_records_always_fit() {
        use crate::abi::state;
        for (kind, info) in infos() {
            let gpu = matches!(
                kind,
                Kind::Group
                    | Kind::GroupApi
                    | Kind::Coll
                    | Kind::CollApi
                    | Kind::P2p
                    | Kind::P2pApi
                    | Kind::KernelCh
                    | Kind::KernelPhase
            );
            let accepted: Vec<i32> = (0..64).filter(|&s| kind.accepts_state(s)).collect();
            // Repeats of a state fold (one accepted state is one entry);
            // two or more can alternate up to the node's four.
            let n = match (kind, accepted.len()) {
                (Kind::CeColl, _) => 2,
                (_, k) if k < 2 => k,
                _ => STATES,
            };
            let arg = accepted.iter().any(|&s| {
                matches!(
                    s,
                    state::PROXY_STEP_SEND_WAIT
                        | state::PROXY_STEP_RECV_FLUSH_WAIT
                        | state::PROXY_CTRL_APPEND_END
                        | state::KERNEL_CH_STOP
                        | state::KERNEL_PHASE_STOP
                )
            });
            let mut r = Record::stopped(1, 2, kind, info, 10, 20);
            if gpu {
                (r.gpu_start, r.gpu_end) = (u64::MAX, u64::MAX);
            }
            for (k, s) in r.states.iter_mut().take(n).enumerate() {
                *s = (accepted[k % accepted.len()] as u8, 100 + k as u64);
            }
            r.n_states = n as u8;
            r.state_arg = u64::from(arg) * 7;
            assert_eq!(Compact::from_record(&r).expand(), r, "{kind:?}");
        }
    }

    #[test]
    fn compact_of_a_node_matches_its_record() {
        let info = Info::Coll {
            seq: 3,
            func: s("AllReduce"),
            count: 10,
            root: 0,
            datatype: s("ncclFloat32"),
            n_channels: 2,
            n_warps: 8,
            algo: s("RING"),
            proto: s("SIMPLE"),
            parent_group: 0,
            kernel_variant: Default::default(),
            is_sym_coll: false,
            user_tag: 0,
        };
        let n = Node::new(Kind::Coll, 7, 5, 2, info.intern(), flag::BAD_STRING);
        n.stop(n.start_ns + 100);
        let r = Compact::of(42, &n).expand();
        assert_eq!(r.info, info);
        assert_eq!((r.id, r.parent, r.ctx, r.rank), (42, 5, 7, 2));
        assert_eq!(r.stop_ns, n.start_ns + 100);
        assert_eq!((r.end_ns, r.timing), (n.start_ns + 100, Timing::Host));
        assert_eq!(r.flags, flag::BAD_STRING | flag::STOPPED);

        // Six states on a ProxyOp: the node keeps four and flags the rest.
        let op = Info::ProxyOp {
            pid: 1,
            channel: 2,
            peer: 3,
            n_steps: 4,
            chunk_size: 5,
            is_send: false,
        };
        let n = Node::new(Kind::ProxyOp, 7, 5, 2, op, 0);
        for st in 0..6 {
            n.record(
                crate::model::StateArg {
                    state: st,
                    arg: Some(100 + st as u64),
                },
                n.start_ns + 10 * st as u64,
            );
        }
        let r = Compact::of(43, &n).expand();
        assert_eq!(r.info, op.resolve());
        assert_eq!(r.n_states, 4);
        assert_eq!(r.states[3], (3, (n.start_ns + 30) & ((1 << 56) - 1)));
        assert_eq!(r.state_arg, 105);
        assert_eq!((r.stop_ns, r.timing), (0, Timing::Forced));
        assert_eq!(r.flags, flag::STATES_OVERFLOW);
    }

    /// `Head::write` leaves the hidden bits out of the record, `folded` hands them back
    /// in `Folded`, with the end and GPU times the record carries.
    #[test]
    fn head_hides_bits_and_reports_what_the_parent_needs() {
        let hidden = 1 << 31;
        let n = Node::new(Kind::Coll, 7, 5, 2, Info::None, flag::BAD_STRING | hidden);
        n.gpu_start.store(1_000, Ordering::Relaxed);
        n.gpu_end.store(2_000, Ordering::Relaxed);
        n.set_flag(flag::GPU_TIMED);
        n.stop(n.start_ns + 50);
        let mut cell = std::mem::MaybeUninit::uninit();
        let head = Head::of(9, &n);
        let c = *head.write(&n, hidden, |c| cell.write(c));
        let folded = head.folded();
        assert_eq!(c.flags & hidden, 0, "hidden bit left out of the record");
        assert_eq!(folded.flags & hidden, hidden, "and handed back");
        assert_eq!(folded.flags & !hidden, c.flags);
        assert_eq!(
            (
                folded.parent,
                folded.end_ns,
                folded.gpu_start,
                folded.gpu_end
            ),
            (5, c.end_ns, c.gpu_start(), c.gpu_end())
        );
        assert_eq!((c.gpu_start(), c.gpu_end()), (1_000, 2_000));
        // The same record as without hiding, but for the bit.
        let plain = Compact::of(9, &n);
        assert_eq!(
            Compact {
                flags: plain.flags & !hidden,
                ..plain
            },
            c
        );
    }

    #[test]
    fn compact_is_small() {
        assert_eq!(std::mem::size_of::<Compact>(), 128);
        assert!(std::mem::size_of::<Record>() >= 240);
    }
}
