//! The figures the metrics keep: per communicator stream and per (operation,
//! datatype, size bucket, algorithm, protocol) a count, bytes, latency and
//! GPU kernel time histograms; per p2p peer the bytes sent and received.
//! The number of series is capped; records that would need one more are
//! counted, not aggregated, so memory stays bounded.
//!
//! v7: an operation's user tag (`userTag`, when non-zero) is part of its
//! series' key, and its KernelPhase records give per-phase GPU time
//! histograms: the phases of each channel are summed per phase on their
//! KernelCh, and the operation keeps, per phase, its slowest channel's time.
//! Records come in end order (a phase before its KernelCh, a KernelCh before
//! its Coll), so the pending sums wait in two bounded maps.

use crate::bandwidth::{gb_per_s, size_bucket, type_size, Shape};
use crate::model::Info;
use crate::record::Record;
use crate::strings::Str16;
use hdrhistogram::Histogram;
use rustc_hash::FxHashMap as HashMap;

/// Which series a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub ctx: u64,
    pub func: Str16,
    pub datatype: Str16,
    pub bucket: u8,
    pub algo: Str16,
    pub proto: Str16,
    /// v7 `userTag` (0: none).
    pub tag: u64,
}

/// KernelPhase phases with a histogram of their own (`phaseId` 0, 1, 2).
pub const PHASES: usize = 3;

/// Pending phase times held at most, per map: past it the oldest are not
/// kept apart, the maps are cleared (records NCCL never completed).
const PENDING_MAX: usize = 1 << 14;

/// Latencies with 2 significant digits (quantiles within 1 %); the
/// histogram grows with the largest value seen, so its memory follows the
/// latencies, not a worst case.
fn histogram() -> Histogram<u64> {
    Histogram::new(2).expect("2 significant digits is valid")
}

/// Records `v`, growing the histogram to hold it (clamped only if it cannot grow).
fn record(h: &mut Histogram<u64>, v: u64) {
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

pub struct Series {
    pub count: u64,
    pub bytes: u64,
    pub latency_sum_ns: u64,
    /// Enqueue → completion.
    pub latency: Histogram<u64>,
    /// GPU kernel time (first kernel channel start to last end), when timed.
    pub kernel: Option<Histogram<u64>>,
    /// GPU time per KernelPhase phase (v7, when NCCL sent phases): the
    /// slowest channel's, per operation.
    pub phases: [Option<Histogram<u64>>; PHASES],
    pub shape: Shape,
}

impl Series {
    pub fn algbw(&self) -> f64 {
        gb_per_s(self.bytes, self.latency_sum_ns)
    }

    pub fn busbw(&self, nranks: u32) -> f64 {
        self.algbw() * self.shape.bus_factor(nranks)
    }

    fn memory(&self) -> usize {
        let h = |h: &Histogram<u64>| h.distinct_values() * std::mem::size_of::<u64>();
        std::mem::size_of::<Self>()
            + h(&self.latency)
            + self.kernel.as_ref().map_or(0, h)
            + self.phases.iter().flatten().map(h).sum::<usize>()
    }
}

/// Bytes of p2p operations with one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerBytes {
    pub count: u64,
    pub bytes: u64,
}

/// (stream, Send or Recv, peer).
pub type PeerKey = (u64, Str16, i32);

/// Everything aggregated so far.
pub struct Figures {
    pub series: HashMap<Key, Series>,
    pub peers: HashMap<PeerKey, PeerBytes>,
    pub max_series: usize,
    /// Records not aggregated because a new series would pass `max_series`.
    pub refused: u64,
    /// Bytes held by series and peers (histograms included), as of the last `add`.
    pub memory: usize,
    /// Per-phase GPU ns of KernelPhase records, by their KernelCh's id.
    by_channel: HashMap<u64, [u64; PHASES]>,
    /// Per-phase GPU ns (slowest channel) by the operation's id.
    by_op: HashMap<u64, [u64; PHASES]>,
}

impl Figures {
    pub fn new(max_series: usize) -> Figures {
        Figures {
            series: HashMap::default(),
            peers: HashMap::default(),
            max_series,
            refused: 0,
            memory: 0,
            by_channel: HashMap::default(),
            by_op: HashMap::default(),
        }
    }

    /// A KernelPhase or KernelCh record: its phase times wait for the
    /// operation's record.
    fn add_phase(&mut self, r: &Record) {
        match r.info {
            Info::KernelPhase { phase, .. } => {
                let p = phase as usize;
                if p < PHASES && r.gpu_start != 0 && r.gpu_end > r.gpu_start {
                    if self.by_channel.len() >= PENDING_MAX {
                        self.by_channel.clear();
                    }
                    let e = self.by_channel.entry(r.parent).or_default();
                    e[p] = e[p].saturating_add(r.gpu_end - r.gpu_start);
                }
            }
            Info::KernelCh { .. } => {
                let Some(ch) = self.by_channel.remove(&r.id) else {
                    return;
                };
                if self.by_op.len() >= PENDING_MAX {
                    self.by_op.clear();
                }
                let e = self.by_op.entry(r.parent).or_default();
                for (o, c) in e.iter_mut().zip(ch) {
                    *o = (*o).max(c);
                }
            }
            _ => {}
        }
    }

    /// Adds a completed record: Coll, CeColl and P2p count; KernelPhase and
    /// KernelCh give their operation's phase times; anything else is ignored.
    pub fn add(&mut self, ctx: u64, r: &Record, nranks: u32) {
        if matches!(r.info, Info::KernelPhase { .. } | Info::KernelCh { .. }) {
            return self.add_phase(r);
        }
        let phases = if self.by_op.is_empty() {
            None
        } else {
            self.by_op.remove(&r.id)
        };
        let (func, datatype, count, algo, proto, peer) = match r.info {
            Info::Coll {
                func,
                datatype,
                count,
                algo,
                proto,
                ..
            } => (func, datatype, count, algo, proto, None),
            Info::CeColl {
                func,
                datatype,
                count,
                ..
            } => (
                func,
                datatype,
                count,
                Str16::from_bytes(b"CE"),
                Str16::EMPTY,
                None,
            ),
            Info::P2p {
                func,
                datatype,
                count,
                peer,
                ..
            } => (
                func,
                datatype,
                count,
                Str16::EMPTY,
                Str16::EMPTY,
                Some(peer),
            ),
            _ => return,
        };
        let fname = func.as_str();
        let shape = Shape::of(&fname);
        let bytes = shape.bytes(count, type_size(&datatype.as_str()).unwrap_or(0), nranks);
        let key = Key {
            ctx,
            func,
            datatype,
            bucket: size_bucket(bytes),
            algo,
            proto,
            tag: r.info.user_tag(),
        };
        let new_series = !self.series.contains_key(&key);
        let grows = new_series || peer.is_some_and(|p| !self.peers.contains_key(&(ctx, func, p)));
        if grows && self.series.len() + self.peers.len() >= self.max_series {
            self.refused += 1;
            return;
        }
        let s = self.series.entry(key).or_insert_with(|| Series {
            count: 0,
            bytes: 0,
            latency_sum_ns: 0,
            latency: histogram(),
            kernel: None,
            phases: [None, None, None],
            shape,
        });
        let before = if new_series { 0 } else { s.memory() };
        let lat = r.end_ns.saturating_sub(r.start_ns);
        s.count += 1;
        s.bytes = s.bytes.saturating_add(bytes);
        s.latency_sum_ns = s.latency_sum_ns.saturating_add(lat);
        record(&mut s.latency, lat.max(1));
        // GPU timer values of one device: their difference is kernel time.
        if r.gpu_start != 0 && r.gpu_end > r.gpu_start {
            record(
                s.kernel.get_or_insert_with(histogram),
                r.gpu_end - r.gpu_start,
            );
        }
        for (h, ns) in s.phases.iter_mut().zip(phases.unwrap_or_default()) {
            if ns > 0 {
                record(h.get_or_insert_with(histogram), ns);
            }
        }
        self.memory += s.memory().saturating_sub(before);
        if let Some(p) = peer {
            let e = self.peers.entry((ctx, func, p)).or_insert_with(|| {
                self.memory += std::mem::size_of::<(PeerKey, PeerBytes)>();
                PeerBytes::default()
            });
            e.count += 1;
            e.bytes = e.bytes.saturating_add(bytes);
        }
    }

    /// Forgets a stream's series (its communicator ended and was exported).
    pub fn remove(&mut self, ctx: u64) {
        self.series.retain(|k, _| k.ctx != ctx);
        self.peers.retain(|k, _| k.0 != ctx);
        self.memory = self.series.values().map(Series::memory).sum::<usize>()
            + self.peers.len() * std::mem::size_of::<(PeerKey, PeerBytes)>();
    }
}
