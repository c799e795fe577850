//! The JSON trace format for the report: one event per line (the layout
//! `chrome_json.rs` writes), so only the lines that matter are parsed: the
//! `evring.stream` header, the `evring.summary` footer and the complete
//! events of Coll, P2p and CeColl records. Integers above 2^53 are written as
//! decimal strings and ids as hex strings; both read back as numbers here.

use crate::load::{add_phase, identity, Format, Op, OpKind, PhaseTimes, RankTrace, PHASES};
use crate::BadInput;
use evring_perfetto::trace::Value;
use evring_shim::strings::Str16;
use serde_json::Value as Json;
use std::path::Path;

fn num(v: Option<&Json>) -> Option<u64> {
    match v? {
        Json::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Json::String(s) => match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

fn int(v: Option<&Json>) -> Option<i64> {
    match v? {
        Json::Number(n) => n.as_i64(),
        Json::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn s16(v: Option<&Json>) -> Str16 {
    match v {
        Some(Json::String(s)) => Str16::from_bytes(s.as_bytes()),
        _ => Str16::EMPTY,
    }
}

/// Header and footer fields as the binary reader gives them: numbers written
/// as strings (too large for JavaScript, or hex ids) become numbers again.
fn fields(args: &Json) -> Vec<(String, Value)> {
    let Some(obj) = args.as_object() else {
        return Vec::new();
    };
    obj.iter()
        .map(|(k, v)| {
            let val = match v {
                Json::Bool(b) => Value::Bool(*b),
                Json::Number(n) => match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => Value::Uint(u),
                    (None, Some(i)) => Value::Int(i),
                    _ => Value::Str(n.to_string()),
                },
                Json::String(s) => {
                    let numeric = (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        || (s.starts_with("0x") && s.len() > 2);
                    match num(Some(v)) {
                        Some(u) if numeric => Value::Uint(u),
                        _ => Value::Str(s.clone()),
                    }
                }
                other => Value::Str(other.to_string()),
            };
            (k.clone(), val)
        })
        .collect()
}

fn op(ev: &Json, kind: OpKind, ce: bool) -> Option<Op> {
    let a = ev.get("args")?;
    let end_ns = num(a.get("end_ns"))?;
    Some(Op {
        kind,
        func: s16(ev.get("name")),
        seq: num(a.get("seq")).unwrap_or(0),
        count: num(a.get("count")).unwrap_or(0),
        datatype: s16(a.get("datatype")),
        algo: if ce {
            Str16::from_bytes(b"CE")
        } else {
            s16(a.get("algo"))
        },
        proto: s16(a.get("proto")),
        peer: if kind == OpKind::P2p {
            int(a.get("peer")).unwrap_or(-1) as i32
        } else {
            -1
        },
        rank: int(a.get("rank"))? as i32,
        start_ns: num(a.get("start_ns"))?,
        end_ns,
        user_tag: num(a.get("user_tag")).unwrap_or(0),
    })
}

/// Reads a JSON trace (whole, unfinished or cut at any byte).
pub fn load(path: &Path, bytes: &[u8]) -> Result<RankTrace, BadInput> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        BadInput(format!(
            "not a JSON trace (invalid UTF-8 at byte {})",
            e.valid_up_to()
        ))
    })?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let last = lines.len().saturating_sub(1);
    let mut stream: Option<Vec<(String, Value)>> = None;
    let mut footer = None;
    let mut ops = Vec::new();
    let mut phases: [PhaseTimes; PHASES] = Default::default();
    let mut cut = false;
    for (i, line) in lines.iter().enumerate() {
        let body = line.strip_suffix(',').unwrap_or(line);
        if i == 0 {
            if body != "[" {
                return Err(BadInput(
                    "not a JSON trace evring wrote (no `[` line)".into(),
                ));
            }
            continue;
        }
        if body == "]" {
            continue;
        }
        let kind = if body.contains("\"cat\":\"Coll\"") {
            Some((OpKind::Coll, false))
        } else if body.contains("\"cat\":\"P2p\"") {
            Some((OpKind::P2p, false))
        } else if body.contains("\"cat\":\"CeColl\"") {
            Some((OpKind::Coll, true))
        } else {
            None
        };
        let header = body.starts_with("{\"name\":\"evring.stream\"");
        let summary = body.starts_with("{\"name\":\"evring.summary\"");
        let phase = body.contains("\"cat\":\"KernelPhase\"");
        if kind.is_none() && !header && !summary && !phase {
            // Not parsed (metadata, flows, other kinds); a torn last line is a cut.
            if i == last && !body.ends_with('}') {
                cut = true;
            }
            continue;
        }
        let ev: Json = match serde_json::from_str(body) {
            Ok(v) => v,
            Err(_) if i == last => {
                cut = true;
                continue;
            }
            Err(e) => {
                return Err(BadInput(format!(
                    "line {} is not a JSON event ({e})",
                    i + 1
                )))
            }
        };
        if header {
            stream = Some(ev.get("args").map(fields).unwrap_or_default());
        } else if summary {
            footer = Some(ev.get("args").map(fields).unwrap_or_default());
        } else if phase {
            let a = ev.get("args");
            let id = a
                .and_then(|a| a.get("phase"))
                .and_then(Json::as_str)
                .and_then(|p| (0..PHASES as u8).find(|&n| evring_shim::model::phase_name(n) == p));
            if let (Some(id), Some(a)) = (id, a) {
                let g = |k: &str| num(a.get(k)).unwrap_or(0);
                add_phase(&mut phases, id, g("gpu_start"), g("gpu_end"));
            }
        } else if let Some((k, ce)) = kind {
            if ev.get("ph").and_then(Json::as_str) == Some("X") {
                if let Some(o) = op(&ev, k, ce) {
                    ops.push(o);
                }
            }
        }
    }
    let Some(stream) = stream else {
        return Err(BadInput(
            "no evring.stream header: not a trace evring wrote".into(),
        ));
    };
    let mut rt = identity(path, Format::Json, &stream, footer)?;
    rt.cut = cut;
    rt.ops = ops;
    rt.phases = phases;
    Ok(rt)
}
