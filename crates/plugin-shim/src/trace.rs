//! The Chrome-trace text of one stream: its header, one begin/end pair per
//! record, and the summary footer.

use crate::clock::{gpu_offset, gpu_to_host, now_ns};
use crate::engine::Engine;
use crate::model::{Info, Kind};
use crate::node::flag;
use crate::record::Record;
use crate::writer::StreamMeta;
use std::fmt::Write as _;

/// Why a footer was written (its `end` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// This communicator was finalized; others may still be open.
    Finalize,
    /// The last open communicator was finalized: nothing was live, the
    /// identities of docs/shim.md hold here.
    LastFinalize,
    /// The process exited without finalizing (exit handler).
    Exit,
}

impl End {
    pub fn name(self) -> &'static str {
        match self {
            End::Finalize => "finalize",
            End::LastFinalize => "last_finalize",
            End::Exit => "exit",
        }
    }
}

/// The summary event that closes a stream: why it ends, whether the trace is
/// complete, this file's record count and the process's counters as of now.
///
/// `complete` is true only if nothing was dropped, unwritten or refused so
/// far, the stream was finalized, and, when no communicator is open any more,
/// the accounting identities hold (nothing live, every start completed, every
/// completion consumed).
pub fn footer(engine: &Engine, end: End, stream_records: u64, stream_failed: bool) -> String {
    let stats = engine.stats();
    let open = engine.open_comms().max(0);
    let finalized = end != End::Exit;
    let no_loss = engine.counters.start_drops() == 0
        && stats.drop_ring_full == 0
        && stats.write_errors == 0
        && stats.records_unwritten == 0
        && !stream_failed;
    let identities = stats.live == 0
        && stats.started == stats.completed
        && stats.completed == stats.records_consumed + stats.drop_ring_full;
    let complete = finalized && no_loss && (open > 0 || identities);
    let mut out = String::with_capacity(2048);
    let _ = write!(
        out,
        "{{\"name\":\"evring.summary\",\"cat\":\"evring\",\"ph\":\"i\",\"s\":\"g\",\"pid\":{},\"tid\":0,\"ts\":{},\"args\":{{\"finalized\":{finalized},\"complete\":{complete},\"end\":\"{}\",\"open_comms\":{open},\"stream_records\":{stream_records}",
        engine.pid,
        us(now_ns()),
        end.name(),
    );
    if let Some(off) = gpu_offset() {
        let _ = write!(out, ",\"gpu_offset_ns\":{off}");
    }
    for (k, v) in stats.fields() {
        let _ = write!(out, ",\"{k}\":{v}");
    }
    out.push_str("}}\n]\n");
    out
}

pub fn header(m: &StreamMeta, pid: i32) -> String {
    let mut h = String::from("[\n");
    let mut name = format!("evring rank {} comm {:#x}", m.rank, m.comm_id);
    if let Some(n) = &m.name {
        let _ = write!(name, " ({n})");
    }
    let _ = writeln!(
        h,
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"{}\"}}}},",
        escape(&name)
    );
    let _ = writeln!(
        h,
        "{{\"name\":\"evring.stream\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"comm_id\":{},\"rank\":{},\"nranks\":{},\"nnodes\":{},\"abi\":{},\"clock\":\"CLOCK_MONOTONIC us\"}}}},",
        m.comm_id, m.rank, m.nranks, m.nnodes, m.abi
    );
    for (tid, lane) in [
        (1, "API"),
        (2, "Tasks"),
        (3, "Proxy"),
        (4, "ProxyCtrl"),
        (5, "GPU"),
    ] {
        let _ = writeln!(
            h,
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"{lane}\"}}}},"
        );
    }
    h
}

fn lane(kind: Kind) -> u32 {
    match kind {
        Kind::GroupApi | Kind::CollApi | Kind::P2pApi | Kind::KernelLaunch => 1,
        Kind::Group | Kind::Coll | Kind::P2p | Kind::CeColl | Kind::CeSync | Kind::CeBatch => 2,
        Kind::ProxyOp | Kind::ProxyStep | Kind::NetPlugin => 3,
        Kind::ProxyCtrl => 4,
        Kind::KernelCh => 5,
    }
}

/// Microseconds with three decimals, the unit Chrome traces use.
struct Us(u64);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

fn us(ns: u64) -> Us {
    Us(ns)
}

fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One record as a Chrome-trace async begin/end pair.
pub fn format_record(out: &mut String, r: &Record, pid: i32) {
    let func = r.info.func().map(|f| f.as_str());
    let name = match &func {
        Some(f) if !f.is_empty() => escape(f),
        _ => std::borrow::Cow::Borrowed(r.kind.name()),
    };
    let (mut begin, mut end) = (r.start_ns, r.end_ns);
    if r.kind == Kind::KernelCh {
        // Device lane: GPU times mapped to the host clock when both are known.
        if let (Some(b), Some(e)) = (gpu_to_host(r.gpu_start), gpu_to_host(r.gpu_end)) {
            if e >= b {
                (begin, end) = (b, e);
            }
        }
    }
    let cat = r.kind.name();
    let tid = lane(r.kind);
    let _ = write!(
        out,
        "{{\"name\":\"{name}\",\"cat\":\"{cat}\",\"ph\":\"b\",\"id\":\"{:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"args\":{{\"id\":\"{:#x}\",\"parent\":\"{:#x}\",\"rank\":{},\"timing\":\"{}\",\"start_ns\":{},\"stop_ns\":{},\"end_ns\":{}",
        r.id,
        us(begin),
        r.id,
        r.parent,
        r.rank,
        r.timing.name(),
        r.start_ns,
        r.stop_ns,
        r.end_ns,
    );
    if r.gpu_end != 0 || r.gpu_start != 0 {
        let _ = write!(
            out,
            ",\"gpu_start\":{},\"gpu_end\":{}",
            r.gpu_start, r.gpu_end
        );
    }
    info_args(out, &r.info);
    if r.n_states > 0 {
        out.push_str(",\"states\":[");
        for (i, (s, t)) in r.states[..r.n_states as usize].iter().enumerate() {
            let _ = write!(out, "{}[{s},{t}]", if i > 0 { "," } else { "" });
        }
        out.push(']');
        if r.state_arg != 0 {
            let _ = write!(out, ",\"state_arg\":{}", r.state_arg);
        }
    }
    let flags = r.flags;
    if flags & !flag::STOPPED != 0 {
        out.push_str(",\"flags\":[");
        let mut first = true;
        for (bit, fname) in flag::NAMES {
            if flags & bit != 0 && bit != flag::STOPPED {
                let _ = write!(out, "{}\"{fname}\"", if first { "" } else { "," });
                first = false;
            }
        }
        out.push(']');
    }
    let _ = writeln!(
        out,
        "}}}},\n{{\"name\":\"{name}\",\"cat\":\"{cat}\",\"ph\":\"e\",\"id\":\"{:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{}}},",
        r.id,
        us(end.max(begin)),
    );
}

fn info_args(out: &mut String, info: &Info) {
    let s = |x: &crate::strings::Str16| escape(&x.as_str()).into_owned();
    let _ = match info {
        Info::None => Ok(()),
        Info::GroupApi { graph_captured, depth } => write!(out, ",\"graph_captured\":{graph_captured},\"depth\":{depth}"),
        Info::CollApi { count, datatype, root, stream, graph_captured, .. } => write!(
            out,
            ",\"count\":{count},\"datatype\":\"{}\",\"root\":{root},\"stream\":\"{stream:#x}\",\"graph_captured\":{graph_captured}",
            s(datatype)
        ),
        Info::P2pApi { count, datatype, stream, graph_captured, .. } => write!(
            out,
            ",\"count\":{count},\"datatype\":\"{}\",\"stream\":\"{stream:#x}\",\"graph_captured\":{graph_captured}",
            s(datatype)
        ),
        Info::KernelLaunch { stream } => write!(out, ",\"stream\":\"{stream:#x}\""),
        Info::Coll { seq, count, root, datatype, n_channels, n_warps, algo, proto, parent_group, .. } => write!(
            out,
            ",\"seq\":{seq},\"count\":{count},\"root\":{root},\"datatype\":\"{}\",\"channels\":{n_channels},\"warps\":{n_warps},\"algo\":\"{}\",\"proto\":\"{}\",\"group\":\"{parent_group:#x}\"",
            s(datatype),
            s(algo),
            s(proto)
        ),
        Info::P2p { datatype, count, peer, n_channels, parent_group, .. } => write!(
            out,
            ",\"count\":{count},\"datatype\":\"{}\",\"peer\":{peer},\"channels\":{n_channels},\"group\":\"{parent_group:#x}\"",
            s(datatype)
        ),
        Info::ProxyOp { pid, channel, peer, n_steps, chunk_size, is_send } => write!(
            out,
            ",\"pid\":{pid},\"channel\":{channel},\"peer\":{peer},\"steps\":{n_steps},\"chunk_size\":{chunk_size},\"send\":{is_send}"
        ),
        Info::ProxyStep { step } => write!(out, ",\"step\":{step}"),
        Info::KernelCh { channel, .. } => write!(out, ",\"channel\":{channel}"),
        Info::NetPlugin { id } => write!(out, ",\"net_id\":{id}"),
        Info::CeColl { seq, count, root, datatype, sync, stream, .. } => write!(
            out,
            ",\"seq\":{seq},\"count\":{count},\"root\":{root},\"datatype\":\"{}\",\"sync\":\"{}\",\"stream\":\"{stream:#x}\"",
            s(datatype),
            s(sync)
        ),
        Info::CeSync { complete, n_ranks } => write!(out, ",\"complete\":{complete},\"nranks\":{n_ranks}"),
        Info::CeBatch { num_ops, total_bytes, intra_sync } => write!(
            out,
            ",\"ops\":{num_ops},\"bytes\":{total_bytes},\"intra_sync\":{intra_sync}"
        ),
    };
}
