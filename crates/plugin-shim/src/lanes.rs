//! Which track each event goes on (both trace formats).
//!
//! Perfetto draws the slices of one track as a stack: a slice must end
//! before its neighbour starts or lie wholly inside it. NCCL's events of one
//! lane overlap (several collectives in flight, pipelined proxy steps), so a
//! lane is a set of tracks with the same name: an event goes on the first
//! whose slices all end by its start, or on a new one. Events complete in
//! roughly end order, so "ends by its start" is one comparison with the
//! track's latest end.

use crate::clock::gpu_to_host;
use crate::model::{Info, Kind};
use crate::record::Record;
use rustc_hash::FxHashMap;

/// Where a record's slice begins and ends: its host times, except on the
/// device lane, where GPU times mapped to the host clock are used when both
/// are known.
pub fn span(r: &Record) -> (u64, u64) {
    let (mut begin, mut end) = (r.start_ns, r.end_ns);
    if matches!(r.kind, Kind::KernelCh | Kind::KernelPhase) {
        if let (Some(b), Some(e)) = (gpu_to_host(r.gpu_start), gpu_to_host(r.gpu_end)) {
            if e >= b {
                (begin, end) = (b, e);
            }
        }
    }
    (begin, end.max(begin))
}

/// A lane: one kind of activity of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// GroupApi and Group.
    Groups,
    /// CollApi, P2pApi, KernelLaunch.
    Api,
    /// Coll, P2p and the copy-engine events.
    Colls,
    /// KernelCh of one channel.
    Kernel { channel: u8 },
    /// KernelPhase (v7) of one channel: the track just below the channel's.
    KernelPhase { channel: u8 },
    /// ProxyOp of one channel, peer and direction.
    Proxy { channel: u8, peer: i32, send: bool },
    /// ProxyStep (a step names no channel; its ProxyOp is linked by a flow).
    ProxySteps,
    /// ProxyCtrl.
    ProxyCtrl,
    /// NetPlugin.
    Network,
}

impl Lane {
    pub fn of(kind: Kind, info: &Info) -> Lane {
        match (kind, info) {
            (Kind::GroupApi | Kind::Group, _) => Lane::Groups,
            (Kind::CollApi | Kind::P2pApi | Kind::KernelLaunch, _) => Lane::Api,
            (Kind::Coll | Kind::P2p | Kind::CeColl | Kind::CeSync | Kind::CeBatch, _) => {
                Lane::Colls
            }
            (_, Info::KernelCh { channel, .. }) => Lane::Kernel { channel: *channel },
            (_, Info::KernelPhase { channel, .. }) => Lane::KernelPhase { channel: *channel },
            (Kind::KernelPhase, _) => Lane::KernelPhase { channel: u8::MAX },
            (Kind::KernelCh, _) => Lane::Kernel { channel: u8::MAX },
            (
                _,
                Info::ProxyOp {
                    channel,
                    peer,
                    is_send,
                    ..
                },
            ) => Lane::Proxy {
                channel: *channel,
                peer: *peer,
                send: *is_send,
            },
            (Kind::ProxyOp, _) => Lane::Proxy {
                channel: u8::MAX,
                peer: -1,
                send: false,
            },
            (Kind::ProxyStep, _) => Lane::ProxySteps,
            (Kind::ProxyCtrl, _) => Lane::ProxyCtrl,
            (Kind::NetPlugin, _) => Lane::Network,
        }
    }

    /// Track name as the UI shows it.
    pub fn name(&self) -> String {
        match self {
            Lane::Groups => "Groups".into(),
            Lane::Api => "API".into(),
            Lane::Colls => "Coll/P2p".into(),
            Lane::Kernel { channel } => format!("Kernel ch{channel}"),
            Lane::KernelPhase { channel } => format!("Kernel ch{channel} phases"),
            Lane::Proxy {
                channel,
                peer,
                send,
            } => format!(
                "Proxy ch{channel} {} peer {peer}",
                if *send { "send" } else { "recv" }
            ),
            Lane::ProxySteps => "Proxy steps".into(),
            Lane::ProxyCtrl => "Proxy ctrl".into(),
            Lane::Network => "Network".into(),
        }
    }

    /// How many variants there are (the length of [`Lanes`]' memo).
    const VARIANTS: usize = 9;

    /// Which of the variants this is (an index for [`Lanes`]' memo, below
    /// [`Lane::VARIANTS`]: an exhaustive match, checked by a test).
    fn variant(&self) -> usize {
        match self {
            Lane::Groups => 0,
            Lane::Api => 1,
            Lane::Colls => 2,
            Lane::Kernel { .. } => 3,
            Lane::KernelPhase { .. } => 4,
            Lane::Proxy { .. } => 5,
            Lane::ProxySteps => 6,
            Lane::ProxyCtrl => 7,
            Lane::Network => 8,
        }
    }

    /// Position among a rank's tracks, top to bottom.
    pub fn order(&self) -> i32 {
        match self {
            Lane::Groups => 0,
            Lane::Api => 1,
            Lane::Colls => 2,
            Lane::Kernel { channel } => 1000 + 2 * *channel as i32,
            Lane::KernelPhase { channel } => 1001 + 2 * *channel as i32,
            Lane::Proxy {
                channel,
                peer,
                send,
            } => 100_000 + (*channel as i32) * 4096 + (peer & 0x7FF) * 2 + *send as i32,
            Lane::ProxySteps => 2_000_000,
            Lane::ProxyCtrl => 2_000_001,
            Lane::Network => 2_000_002,
        }
    }
}

/// One track of a lane: its uuid and the latest end placed on it.
struct Track {
    uuid: u64,
    max_end: u64,
}

/// Tracks a lane may grow to; beyond it events share the least-busy one
/// (the overlap is counted: Perfetto then nests them imperfectly). Deep
/// enough for a long burst of collectives to be in flight at once: the
/// simulator's default run keeps ~70 per rank in flight, and 64 tracks made
/// 4 % of its events overlap. The first-fit search stays a short scan in
/// the common case (the first track is usually free); only lanes that are
/// that deep pay for scanning that many tracks.
pub const MAX_TRACKS_PER_LANE: usize = 1024;

/// A new track the caller must describe before using it.
pub struct NewTrack {
    pub uuid: u64,
    pub rank: i32,
    pub lane: Lane,
    /// 0 for a lane's first track.
    pub index: usize,
}

/// Lanes of one file and the tracks placed so far.
#[derive(Default)]
pub struct Lanes {
    /// Where each lane's tracks are in `tracks`.
    index: FxHashMap<(i32, Lane), usize>,
    tracks: Vec<Vec<Track>>,
    /// Per variant of [`Lane`], the last lane of that variant placed on and
    /// its index: most events go where the last one of their kind went (one
    /// rank per file, one lane of most variants), so most need no lookup.
    memo: [Option<(i32, Lane, usize)>; Lane::VARIANTS],
    next_uuid: u64,
    /// Events placed on a track they overlap (lane at its track limit).
    pub overlaps: u64,
}

impl Lanes {
    pub fn new(first_uuid: u64) -> Lanes {
        Lanes {
            next_uuid: first_uuid,
            ..Lanes::default()
        }
    }

    /// Tracks created so far.
    pub fn tracks(&self) -> usize {
        self.tracks.iter().map(Vec::len).sum()
    }

    /// The track for an event `[begin, end]` of `rank` on `lane`; `Err` with
    /// a new track when one had to be made (describe it, then use its uuid).
    pub fn place(&mut self, rank: i32, lane: Lane, begin: u64, end: u64) -> Result<u64, NewTrack> {
        let memo = &mut self.memo[lane.variant()];
        let i = match *memo {
            Some((r, l, i)) if r == rank && l == lane => i,
            _ => {
                let next = self.tracks.len();
                let i = *self.index.entry((rank, lane)).or_insert(next);
                if i == next {
                    self.tracks.push(Vec::new());
                }
                *memo = Some((rank, lane, i));
                i
            }
        };
        let tracks = &mut self.tracks[i];
        if let Some(t) = tracks.iter_mut().find(|t| t.max_end <= begin) {
            t.max_end = end;
            return Ok(t.uuid);
        }
        if tracks.len() >= MAX_TRACKS_PER_LANE {
            self.overlaps += 1;
            let t = tracks
                .iter_mut()
                .min_by_key(|t| t.max_end)
                .expect("a lane at its limit has tracks");
            t.max_end = t.max_end.max(end);
            return Ok(t.uuid);
        }
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        tracks.push(Track { uuid, max_end: end });
        Err(NewTrack {
            uuid,
            rank,
            lane,
            index: tracks.len() - 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(r: Result<u64, NewTrack>) -> u64 {
        r.unwrap_or_else(|n| n.uuid)
    }

    #[test]
    fn every_variant_has_its_own_memo_entry() {
        let all = [
            Lane::Groups,
            Lane::Api,
            Lane::Colls,
            Lane::Kernel { channel: 3 },
            Lane::KernelPhase { channel: 3 },
            Lane::Proxy {
                channel: 1,
                peer: 2,
                send: true,
            },
            Lane::ProxySteps,
            Lane::ProxyCtrl,
            Lane::Network,
        ];
        let mut seen: Vec<usize> = all.iter().map(Lane::variant).collect();
        assert!(seen.iter().all(|&v| v < Lane::VARIANTS));
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len(),
            Lane::VARIANTS,
            "two variants share a memo entry, or one is unused"
        );
    }

    #[test]
    fn sequential_events_share_a_track_overlapping_ones_do_not() {
        let mut l = Lanes::new(10);
        let a = uuid(l.place(0, Lane::Colls, 0, 10));
        let b = uuid(l.place(0, Lane::Colls, 10, 20));
        assert_eq!(a, b, "touching events share a track");
        let c = uuid(l.place(0, Lane::Colls, 15, 30));
        assert_ne!(c, a, "an overlap opens a second track");
        let d = uuid(l.place(0, Lane::Colls, 25, 40));
        assert_eq!(d, a, "the first free track is reused");
        assert_eq!(l.tracks(), 2);
        assert_eq!(l.overlaps, 0);
        let e = uuid(l.place(1, Lane::Colls, 100, 110));
        assert_ne!(e, a, "another rank has its own tracks");
    }

    #[test]
    fn lanes_of_one_variant_keep_their_own_tracks() {
        // Two channels' kernels and two ranks, interleaved: the memo of the
        // last lane per variant must never hand one lane's track to another.
        let mut l = Lanes::new(1);
        let k = |channel| Lane::Kernel { channel };
        let a = uuid(l.place(0, k(0), 0, 10));
        let b = uuid(l.place(0, k(1), 0, 10));
        let c = uuid(l.place(1, k(0), 0, 10));
        assert!(a != b && b != c && a != c);
        for t in 1..5u64 {
            assert_eq!(uuid(l.place(0, k(0), 10 * t, 10 * t + 10)), a);
            assert_eq!(uuid(l.place(1, k(0), 10 * t, 10 * t + 10)), c);
            assert_eq!(uuid(l.place(0, k(1), 10 * t, 10 * t + 10)), b);
        }
        assert_eq!(l.tracks(), 3);
    }

    #[test]
    fn a_full_lane_counts_overlaps() {
        let mut l = Lanes::new(1);
        for i in 0..MAX_TRACKS_PER_LANE as u64 {
            assert!(l.place(0, Lane::ProxySteps, i, 1_000_000 + i).is_err());
        }
        let shared = l.place(0, Lane::ProxySteps, 5, 6);
        assert_eq!(shared.ok(), Some(1), "the track that frees first");
        assert_eq!(l.overlaps, 1);
    }

    #[test]
    fn a_deep_queue_nests_without_overlaps() {
        // 200 collectives in flight at once (a burst), then 200 more after
        // them: 200 tracks, no overlap, and the later ones reuse them.
        let mut l = Lanes::new(1);
        for i in 0..200u64 {
            assert!(l.place(0, Lane::Colls, i, 10_000 + i).is_err());
        }
        for i in 0..200u64 {
            assert!(l.place(0, Lane::Colls, 20_000 + i, 30_000 + i).is_ok());
        }
        assert_eq!((l.tracks(), l.overlaps), (200, 0));
    }
}
