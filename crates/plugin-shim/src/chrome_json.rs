//! The JSON trace format (Chrome trace event JSON), laid out so that
//! Perfetto's JSON importer shows it the way the binary format shows.
//!
//! Perfetto keys async (`b`/`e`) events by category and id per process and
//! ignores their `tid`, which would give every event a track of its own. So
//! each record is a complete event (`"ph":"X"`) on a thread track: one `tid`
//! per lane track ([`crate::lanes`], named by `thread_name` metadata), where
//! slices nest. Parent → child arrows are flow events (`s` on the parent's
//! track, `f` with `"bp":"e"` on the child's, both 1 ns inside the slice so
//! they bind to it). JavaScript viewers round integers above 2^53, so such
//! values are written as decimal strings and ids/handles as hex strings.
//!
//! One event per line; the array is closed by the footer. A file cut short
//! (killed process) is still loaded by Perfetto and chrome://tracing, which
//! accept a missing `]`.

use crate::flows::Flows;
use crate::format::Field;
use crate::lanes::{span, Lane, Lanes, NewTrack};
use crate::model::Info;
use crate::perfetto::keys::state_name;
use crate::perfetto::{Anchor, StreamInfo};
use crate::record::flag;
use crate::record::Record;
use crate::strings::Str16;
use std::hash::{Hash, Hasher};
use std::io::Write;

/// Largest integer a JavaScript number holds exactly.
const JS_EXACT: u64 = 1 << 53;

/// A u64 as a JSON number when exact in JavaScript, else as a decimal string.
struct Num(u64);

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 <= JS_EXACT {
            write!(f, "{}", self.0)
        } else {
            write!(f, "\"{}\"", self.0)
        }
    }
}

/// Nanoseconds as microseconds with three decimals (the unit of `ts`/`dur`).
struct Us(u64);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// JSON string contents (quotes, backslashes and control characters escaped).
struct Esc<'a>(&'a str);

impl std::fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
                c => write!(f, "{c}")?,
            }
        }
        Ok(())
    }
}

fn s16(s: &Str16) -> String {
    Esc(&s.as_str()).to_string()
}

/// Encodes one JSON trace file. One per stream, on the writer thread.
pub struct JsonEncoder {
    info: StreamInfo,
    lanes: Lanes,
    flows: Flows,
    records: u64,
}

impl JsonEncoder {
    pub fn new(info: StreamInfo, anchor: &Anchor) -> JsonEncoder {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&info.host, info.pid, info.ctx, info.comm_id, info.rank).hash(&mut h);
        anchor.realtime_ns.hash(&mut h);
        JsonEncoder {
            info,
            // Lane tracks are thread ids 1, 2, ...
            lanes: Lanes::new(1),
            flows: Flows::new(h.finish()),
            records: 0,
        }
    }

    pub fn header(&mut self, out: &mut Vec<u8>, a: &Anchor) {
        let i = &self.info;
        let pid = i.pid;
        let mut name = format!("evring rank {} comm {:#x}", i.rank, i.comm_id);
        if let Some(n) = &i.name {
            name.push_str(&format!(" ({n})"));
        }
        if !i.host.is_empty() {
            name.push_str(&format!(" @{}", i.host));
        }
        let _ = writeln!(
            out,
            "[\n{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"{}\"}}}},",
            Esc(&name)
        );
        let _ = write!(
            out,
            "{{\"name\":\"evring.stream\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"comm_id\":\"{:#x}\",\"rank\":{},\"nranks\":{},\"nnodes\":{},\"abi\":{},\"host\":\"{}\",\"pid\":{pid},\"clock\":\"CLOCK_MONOTONIC us\",\"monotonic_ns\":{},\"realtime_ns\":{},\"boottime_ns\":{}",
            i.comm_id,
            i.rank,
            i.nranks,
            i.nnodes,
            i.abi,
            Esc(&i.host),
            Num(a.monotonic_ns),
            Num(a.realtime_ns),
            Num(a.boottime_ns),
        );
        if let Some(n) = &i.name {
            let _ = write!(out, ",\"name\":\"{}\"", Esc(n));
        }
        out.extend_from_slice(b"}},\n");
    }

    fn describe(&mut self, out: &mut Vec<u8>, t: &NewTrack) {
        let mut name = t.lane.name();
        if t.rank != self.info.rank {
            name = format!("rank {} {name}", t.rank);
        }
        let _ = writeln!(
            out,
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}},",
            self.info.pid,
            t.uuid,
            Esc(&name)
        );
    }

    /// One record: its complete event, and the flow events of its arrows.
    pub fn record(&mut self, out: &mut Vec<u8>, r: &Record) {
        let (begin, end) = span(r);
        self.record_span(out, r, begin, end);
    }

    /// As [`record`](Self::record), with the slice's begin and end given
    /// (a converter passes the times the binary trace already mapped).
    pub fn record_span(&mut self, out: &mut Vec<u8>, r: &Record, begin: u64, end: u64) {
        self.records += 1;
        let end = end.max(begin);
        let tid = match self
            .lanes
            .place(r.rank, Lane::of(r.kind, &r.info), begin, end)
        {
            Ok(t) => t,
            Err(new) => {
                self.describe(out, &new);
                new.uuid
            }
        };
        let pid = self.info.pid;
        let name = match r.info.func() {
            Some(f) if !f.is_empty() => s16(f),
            _ => r.kind.name().to_string(),
        };
        let _ = write!(
            out,
            "{{\"name\":\"{name}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{},\"args\":{{\"id\":\"{:#x}\",\"parent\":\"{:#x}\",\"rank\":{},\"timing\":\"{}\",\"start_ns\":{},\"stop_ns\":{},\"end_ns\":{}",
            r.kind.name(),
            Us(begin),
            Us(end - begin),
            r.id,
            r.parent,
            r.rank,
            r.timing.name(),
            Num(r.start_ns),
            Num(r.stop_ns),
            Num(r.end_ns),
        );
        if r.gpu_end != 0 || r.gpu_start != 0 {
            let _ = write!(
                out,
                ",\"gpu_start\":{},\"gpu_end\":{}",
                Num(r.gpu_start),
                Num(r.gpu_end)
            );
        }
        info_args(out, &r.info);
        if r.n_states > 0 {
            out.extend_from_slice(b",\"states\":[");
            for (i, (s, t)) in r.states[..(r.n_states as usize).min(r.states.len())]
                .iter()
                .enumerate()
            {
                let sep = if i > 0 { "," } else { "" };
                let _ = write!(out, "{sep}[\"{}\",{}]", state_name(*s), Num(*t));
            }
            out.push(b']');
            if r.state_arg != 0 {
                let _ = write!(out, ",\"state_arg\":{}", Num(r.state_arg));
            }
        }
        let flags = r.flags & !flag::STOPPED;
        if flags != 0 {
            out.extend_from_slice(b",\"flags\":[");
            let mut first = true;
            for (bit, fname) in flag::NAMES {
                if flags & bit != 0 {
                    let _ = write!(out, "{}\"{fname}\"", if first { "" } else { "," });
                    first = false;
                }
            }
            out.push(b']');
        }
        out.extend_from_slice(b"}},\n");
        // Arrows: bound 1 ns inside the slice so they attach to it, not to a neighbour.
        let at = Us(begin + (end - begin).min(1));
        if let Some(children) = self.flows.out_of(r.id) {
            for &f in &children {
                let _ = writeln!(
                    out,
                    "{{\"name\":\"child\",\"cat\":\"evring.flow\",\"ph\":\"s\",\"id\":\"{f:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{at}}},"
                );
            }
            self.flows.recycle(children);
        }
        if let Some(f) = self.flows.into_child(r) {
            let _ = writeln!(
                out,
                "{{\"name\":\"child\",\"cat\":\"evring.flow\",\"ph\":\"f\",\"bp\":\"e\",\"id\":\"{f:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{at}}},"
            );
        }
    }

    /// The footer (`evring.summary`, every counter and the clock anchor) and the closing `]`.
    pub fn footer(&mut self, out: &mut Vec<u8>, a: &Anchor, fields: &[(&str, Field)]) {
        let _ = write!(
            out,
            "{{\"name\":\"evring.summary\",\"cat\":\"evring\",\"ph\":\"i\",\"s\":\"g\",\"pid\":{},\"tid\":0,\"ts\":{},\"args\":{{",
            self.info.pid,
            Us(a.monotonic_ns)
        );
        let mut sep = "";
        for (k, v) in fields {
            let _ = write!(out, "{sep}\"{}\":", Esc(k));
            let _ = match v {
                Field::Bool(b) => write!(out, "{b}"),
                Field::U64(u) => write!(out, "{}", Num(*u)),
                Field::I64(i) if i.unsigned_abs() <= JS_EXACT => write!(out, "{i}"),
                Field::I64(i) => write!(out, "\"{i}\""),
                Field::Str(t) => write!(out, "\"{}\"", Esc(t)),
            };
            sep = ",";
        }
        let own = [
            ("json_tracks", self.lanes.tracks() as u64),
            ("json_overlaps", self.lanes.overlaps),
            ("json_flows", self.flows.linked),
            ("json_flows_unmatched", self.flows.unmatched()),
            ("monotonic_ns", a.monotonic_ns),
            ("realtime_ns", a.realtime_ns),
            ("boottime_ns", a.boottime_ns),
        ];
        for (k, v) in own {
            let _ = write!(out, "{sep}\"{k}\":{}", Num(v));
            sep = ",";
        }
        out.extend_from_slice(b"}}\n]\n");
    }
}

fn info_args(out: &mut Vec<u8>, info: &Info) {
    v7_args(out, info);
    let _ = match info {
        Info::None => Ok(()),
        Info::GroupApi { graph_captured, depth } => {
            write!(out, ",\"graph_captured\":{graph_captured},\"depth\":{depth}")
        }
        Info::CollApi { count, datatype, root, stream, graph_captured, .. } => write!(
            out,
            ",\"count\":{},\"datatype\":\"{}\",\"root\":{root},\"stream\":\"{stream:#x}\",\"graph_captured\":{graph_captured}",
            Num(*count),
            s16(datatype)
        ),
        Info::P2pApi { count, datatype, stream, graph_captured, .. } => write!(
            out,
            ",\"count\":{},\"datatype\":\"{}\",\"stream\":\"{stream:#x}\",\"graph_captured\":{graph_captured}",
            Num(*count),
            s16(datatype)
        ),
        Info::KernelLaunch { stream } => write!(out, ",\"stream\":\"{stream:#x}\""),
        Info::Coll { seq, count, root, datatype, n_channels, n_warps, algo, proto, parent_group, .. } => write!(
            out,
            ",\"seq\":{},\"count\":{},\"root\":{root},\"datatype\":\"{}\",\"channels\":{n_channels},\"warps\":{n_warps},\"algo\":\"{}\",\"proto\":\"{}\",\"group\":\"{parent_group:#x}\"",
            Num(*seq),
            Num(*count),
            s16(datatype),
            s16(algo),
            s16(proto)
        ),
        Info::P2p { datatype, count, peer, n_channels, parent_group, .. } => write!(
            out,
            ",\"count\":{},\"datatype\":\"{}\",\"peer\":{peer},\"channels\":{n_channels},\"group\":\"{parent_group:#x}\"",
            Num(*count),
            s16(datatype)
        ),
        Info::ProxyOp { pid, channel, peer, n_steps, chunk_size, is_send } => write!(
            out,
            ",\"pid\":{pid},\"channel\":{channel},\"peer\":{peer},\"steps\":{n_steps},\"chunk_size\":{chunk_size},\"send\":{is_send}"
        ),
        Info::ProxyStep { step } => write!(out, ",\"step\":{step}"),
        Info::KernelCh { channel, .. } => write!(out, ",\"channel\":{channel}"),
        Info::KernelPhase { channel, phase, .. } => write!(
            out,
            ",\"channel\":{channel},\"phase\":\"{}\"",
            crate::model::phase_name(*phase)
        ),
        Info::NetPlugin { id } => write!(out, ",\"net_id\":{id}"),
        Info::CeColl { seq, count, root, datatype, sync, stream, .. } => write!(
            out,
            ",\"seq\":{},\"count\":{},\"root\":{root},\"datatype\":\"{}\",\"sync\":\"{}\",\"stream\":\"{stream:#x}\"",
            Num(*seq),
            Num(*count),
            s16(datatype),
            s16(sync)
        ),
        Info::CeSync { complete, n_ranks } => write!(out, ",\"complete\":{complete},\"nranks\":{n_ranks}"),
        Info::CeBatch { num_ops, total_bytes, intra_sync } => write!(
            out,
            ",\"ops\":{num_ops},\"bytes\":{},\"intra_sync\":{intra_sync}",
            Num(*total_bytes)
        ),
    };
}

/// The v7 fields, where a v7 core set them: `user_tag` when non-zero,
/// Coll's `kernel_variant` when named and `sym_coll` when true.
fn v7_args(out: &mut Vec<u8>, info: &Info) {
    if let Info::Coll {
        kernel_variant,
        is_sym_coll,
        ..
    } = info
    {
        if !kernel_variant.is_empty() {
            let _ = write!(out, ",\"kernel_variant\":\"{}\"", s16(kernel_variant));
        }
        if *is_sym_coll {
            out.extend_from_slice(b",\"sym_coll\":true");
        }
    }
    let tag = info.user_tag();
    if tag != 0 {
        let _ = write!(out, ",\"user_tag\":{}", Num(tag));
    }
}

#[cfg(test)]
mod tests;
