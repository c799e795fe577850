//! The report as text for people and as JSON for machines.

use crate::load::{Format, OpKind};
use crate::report::{Clock, Report};
use serde_json::json;
use std::fmt::Write as _;

/// Nanoseconds as a short duration (`850ns`, `12.3us`, `4.05ms`, `1.20s`).
pub fn dur(ns: u128) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", f / 1e6)
    } else {
        format!("{:.2}s", f / 1e9)
    }
}

/// Bytes in binary units (`512B`, `4.0KiB`, `16.0MiB`).
pub fn bytes(b: u64) -> String {
    let f = b as f64;
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift {
            return format!("{:.1}{unit}", f / (1u64 << shift) as f64);
        }
    }
    format!("{b}B")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

pub fn text(r: &Report) -> String {
    let mut o = String::new();
    for c in &r.comms {
        let present = c.ranks.len();
        let _ = writeln!(
            o,
            "communicator {:#018x}: {present} of {} ranks read{}",
            c.comm_id,
            c.nranks,
            match c.clock {
                Clock::Monotonic => " (one host: CLOCK_MONOTONIC)",
                Clock::WallClock => " (several hosts: wall-clock anchors)",
            }
        );
        if !c.missing_ranks.is_empty() {
            let _ = writeln!(o, "  missing ranks: {:?}", c.missing_ranks);
        }
        let _ = writeln!(
            o,
            "\n  operations (all ranks' records; latency = enqueue to completion)"
        );
        let _ = writeln!(
            o,
            "  {:<14} {:>6} {:>8} {:>10} {:>9} {:>9} {:>9} {:>11} {:>11}",
            "op", "size", "count", "bytes", "p50", "p99", "max", "algbw GB/s", "busbw GB/s"
        );
        for row in &c.ops {
            let _ = writeln!(
                o,
                "  {:<14} {:>6} {:>8} {:>10} {:>9} {:>9} {:>9} {:>11.3} {:>11.3}{}",
                row.func,
                row.size,
                row.count,
                bytes(row.bytes),
                dur(row.p50_ns as u128),
                dur(row.p99_ns as u128),
                dur(row.max_ns as u128),
                row.algbw,
                row.busbw,
                if row.unknown_type > 0 {
                    format!("  ({} of unknown datatype size)", row.unknown_type)
                } else {
                    String::new()
                }
            );
        }
        if !c.tags.is_empty() {
            let _ = writeln!(
                o,
                "\n  user tags (NCCL 2.31+ userTag; 0 = untagged; latency = enqueue to completion)"
            );
            let _ = writeln!(
                o,
                "  {:<18} {:>8} {:>10} {:>9} {:>9} {:>9}",
                "tag", "ops", "bytes", "p50", "p99", "max"
            );
            for t in &c.tags {
                let _ = writeln!(
                    o,
                    "  {:<18} {:>8} {:>10} {:>9} {:>9} {:>9}",
                    format!("{:#x}", t.tag),
                    t.ops,
                    bytes(t.bytes),
                    dur(t.p50_ns as u128),
                    dur(t.p99_ns as u128),
                    dur(t.max_ns as u128)
                );
            }
        }
        if !c.phases.is_empty() {
            let _ = writeln!(
                o,
                "\n  kernel phases (GPU time per channel, all ranks; NCCL 2.31+ KernelPhase)"
            );
            let _ = writeln!(
                o,
                "  {:<14} {:>8} {:>9} {:>9} {:>9} {:>9}",
                "phase", "count", "mean", "p50", "p99", "max"
            );
            for p in &c.phases {
                let _ = writeln!(
                    o,
                    "  {:<14} {:>8} {:>9} {:>9} {:>9} {:>9}",
                    p.phase,
                    p.count,
                    dur(p.mean_ns as u128),
                    dur(p.p50_ns as u128),
                    dur(p.p99_ns as u128),
                    dur(p.max_ns as u128)
                );
            }
        }
        let _ = writeln!(o, "\n  completeness");
        let _ = writeln!(
            o,
            "  {:>5} {:<16} {:>8} {:>7} {:<8} {:<14} {:>6} {:>6} {:>4}  file",
            "rank", "host", "pid", "ops", "footer", "end", "drops", "live", "cut"
        );
        for rr in &c.ranks {
            let _ = writeln!(
                o,
                "  {:>5} {:<16} {:>8} {:>7} {:<8} {:<14} {:>6} {:>6} {:>4}  {} ({}{})",
                rr.rank,
                rr.host,
                rr.pid,
                rr.ops,
                match (rr.footer, rr.complete) {
                    (false, _) => "none",
                    (true, Some(true)) => "complete",
                    (true, _) => "partial",
                },
                opt(rr.end.clone()),
                opt(rr.drops),
                opt(rr.live),
                if rr.cut { "yes" } else { "no" },
                rr.file,
                match rr.format {
                    Format::Perfetto => "perfetto",
                    Format::Json => "json",
                },
                if rr.parts > 1 {
                    format!(", last of {} parts", rr.parts)
                } else {
                    String::new()
                }
            );
        }
        let s = &c.stragglers;
        if c.ranks.len() < 2 {
            let _ = writeln!(
                o,
                "\n  stragglers: one rank read, no collective to match across ranks\n"
            );
            continue;
        }
        let _ = writeln!(
            o,
            "\n  stragglers: {} collectives matched on every rank read ({} with no single last rank), {} seen on fewer ranks, total waiting {}",
            s.matched,
            s.tied,
            s.partial,
            dur(s.wait_ns)
        );
        if !s.offenders.is_empty() {
            let _ = writeln!(
                o,
                "  {:>5} {:<16} {:>8} {:>8} {:>10} {:>10} {:>10}  worst",
                "rank", "host", "last", "share", "waiting", "mean late", "max late"
            );
            for f in &s.offenders {
                let _ = writeln!(
                    o,
                    "  {:>5} {:<16} {:>8} {:>7.1}% {:>10} {:>10} {:>10}  {} seq {}",
                    f.rank,
                    f.host,
                    f.last,
                    f.share * 100.0,
                    dur(f.wait_ns),
                    dur(f.mean_late_ns as u128),
                    dur(f.max_late_ns as u128),
                    f.worst_func,
                    f.worst_seq
                );
            }
        }
        o.push('\n');
    }
    if !r.detached.is_empty() {
        let _ = writeln!(
            o,
            "detached streams (events of no communicator of their process: PXN peers', late proxy events), not in the tables:"
        );
        for d in &r.detached {
            let _ = writeln!(o, "  {d}");
        }
    }
    o
}

pub fn json(r: &Report) -> serde_json::Value {
    let comms: Vec<_> = r
        .comms
        .iter()
        .map(|c| {
            json!({
                "comm_id": format!("{:#x}", c.comm_id),
                "nranks": c.nranks,
                "clock": match c.clock { Clock::Monotonic => "monotonic", Clock::WallClock => "wall_clock" },
                "missing_ranks": c.missing_ranks,
                "operations": c.ops.iter().map(|o| json!({
                    "kind": match o.kind { OpKind::Coll => "coll", OpKind::P2p => "p2p" },
                    "op": o.func,
                    "size_bucket": o.size,
                    "count": o.count,
                    "bytes": o.bytes,
                    "p50_ns": o.p50_ns,
                    "p99_ns": o.p99_ns,
                    "max_ns": o.max_ns,
                    "algbw_gbps": o.algbw,
                    "busbw_gbps": o.busbw,
                    "unknown_datatype": o.unknown_type,
                })).collect::<Vec<_>>(),
                "tags": c.tags.iter().map(|t| json!({
                    "tag": t.tag,
                    "ops": t.ops,
                    "bytes": t.bytes,
                    "p50_ns": t.p50_ns,
                    "p99_ns": t.p99_ns,
                    "max_ns": t.max_ns,
                })).collect::<Vec<_>>(),
                "kernel_phases": c.phases.iter().map(|p| json!({
                    "phase": p.phase,
                    "count": p.count,
                    "mean_ns": p.mean_ns,
                    "p50_ns": p.p50_ns,
                    "p99_ns": p.p99_ns,
                    "max_ns": p.max_ns,
                })).collect::<Vec<_>>(),
                "ranks": c.ranks.iter().map(|r| json!({
                    "rank": r.rank,
                    "host": r.host,
                    "pid": r.pid,
                    "file": r.file,
                    "parts": r.parts,
                    "format": match r.format { Format::Perfetto => "perfetto", Format::Json => "json" },
                    "ops": r.ops,
                    "footer": r.footer,
                    "complete": r.complete,
                    "end": r.end,
                    "drops": r.drops,
                    "live": r.live,
                    "cut": r.cut,
                })).collect::<Vec<_>>(),
                "stragglers": {
                    "matched": c.stragglers.matched,
                    "partial": c.stragglers.partial,
                    "tied": c.stragglers.tied,
                    "wait_ns": c.stragglers.wait_ns as u64,
                    "offenders": c.stragglers.offenders.iter().map(|f| json!({
                        "rank": f.rank,
                        "host": f.host,
                        "last": f.last,
                        "share": f.share,
                        "wait_ns": f.wait_ns as u64,
                        "mean_late_ns": f.mean_late_ns,
                        "max_late_ns": f.max_late_ns,
                        "worst_seq": f.worst_seq,
                        "worst_op": f.worst_func,
                    })).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    json!({ "communicators": comms, "detached_files": r.detached })
}
