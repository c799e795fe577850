//! The `evring` command's work, as functions the tests call directly.

pub mod load;
mod load_json;
pub mod merge;
pub mod render;
pub mod report;

use evring_perfetto::read::Stop;
use evring_perfetto::trace::{Trace, Value};
use evring_shim::chrome_json::JsonEncoder;
use evring_shim::format::Field;
use evring_shim::perfetto::{decode, Anchor, StreamInfo};
use std::path::PathBuf;

/// What a conversion found besides the records.
#[derive(Debug, Default, PartialEq)]
pub struct Converted {
    pub records: usize,
    /// The input ended inside a packet (a cut run): converted up to the cut.
    pub cut: bool,
    /// The input had no footer (cut, or the process never finished it).
    pub footer: bool,
}

/// Why a file could not be read at all.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn str_of(t: &Trace, k: &str) -> Option<String> {
    match t.stream_value(k)? {
        Value::Str(s) => Some(s.clone()),
        _ => None,
    }
}

fn int_of(t: &Trace, k: &str) -> i64 {
    t.stream_value(k).and_then(Value::as_i64).unwrap_or(0)
}

/// Reads an evring binary trace, refusing input that is not one.
pub fn read(bytes: &[u8]) -> Result<(Trace, Vec<evring_shim::record::Record>), BadInput> {
    let (t, recs) = decode::read(bytes);
    if t.stream.is_empty() {
        let why = match &t.stop {
            Some(Stop::Garbage { offset, why }) => {
                format!("not a Perfetto trace (byte {offset}: {why})")
            }
            Some(Stop::Cut { .. }) | None if bytes.is_empty() => "empty file".to_string(),
            _ => "no evring.stream header: not a trace evring wrote".to_string(),
        };
        return Err(BadInput(why));
    }
    Ok((t, recs))
}

/// Converts an evring binary trace (whole or cut) to the JSON format, as the
/// plugin would have written it with `EVRING_FORMAT=json`.
pub fn to_json(bytes: &[u8], out: &mut Vec<u8>) -> Result<Converted, BadInput> {
    let (t, recs) = read(bytes)?;
    let info = StreamInfo {
        comm_id: t
            .stream_value("comm_id")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        rank: int_of(&t, "rank") as i32,
        nranks: int_of(&t, "nranks") as i32,
        nnodes: int_of(&t, "nnodes") as i32,
        abi: int_of(&t, "abi") as u32,
        name: str_of(&t, "name"),
        pid: int_of(&t, "pid") as i32,
        host: str_of(&t, "host").unwrap_or_default(),
        ctx: 0,
    };
    let anchor = |vals: &dyn Fn(&str) -> Option<u64>| Anchor {
        monotonic_ns: vals("monotonic_ns").unwrap_or(0),
        realtime_ns: vals("realtime_ns").unwrap_or(0),
        boottime_ns: vals("boottime_ns").unwrap_or(0),
    };
    let open = anchor(&|k| t.stream_value(k).and_then(Value::as_u64));
    let mut e = JsonEncoder::new(info, &open);
    e.header(out, &open);
    for (s, r) in t.slices.iter().zip(&recs) {
        e.record_span(out, r, s.begin, s.end);
    }
    if let Some(summary) = &t.summary {
        let close = anchor(&|k| t.summary_value(k).and_then(Value::as_u64));
        let fields: Vec<(&str, Field)> = summary
            .iter()
            // The anchor is written from `close`.
            .filter(|(k, _)| !matches!(k.as_str(), "monotonic_ns" | "realtime_ns" | "boottime_ns"))
            .map(|(k, v)| {
                let f = match v {
                    Value::Bool(b) => Field::Bool(*b),
                    Value::Uint(u) => Field::U64(*u),
                    Value::Int(i) => Field::I64(*i),
                    Value::Str(s) => Field::Str(s.clone()),
                };
                (k.as_str(), f)
            })
            .collect();
        e.footer(out, &close, &fields);
    }
    Ok(Converted {
        records: recs.len(),
        cut: matches!(t.stop, Some(Stop::Cut { .. })),
        footer: t.summary.is_some(),
    })
}

/// `evring report`: loads every file (in parallel, one thread per core at
/// most) and builds the report; the first bad file stops it.
pub fn report_files(paths: &[std::path::PathBuf], top: usize) -> Result<report::Report, BadInput> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(paths.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Vec<(usize, Result<load::RankTrace, BadInput>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(p) = paths.get(i) else { break };
                        out.push((i, load::load(p)));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut all: Vec<(usize, Result<load::RankTrace, BadInput>)> =
        results.into_iter().flatten().collect();
    all.sort_by_key(|(i, _)| *i);
    if all.len() != paths.len() {
        return Err(BadInput("a reader thread failed".into()));
    }
    let traces = all
        .into_iter()
        .map(|(_, r)| r)
        .collect::<Result<Vec<_>, _>>()?;
    report::build(&traces, top)
}

/// Which trace files a directory given on the command line stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traces {
    /// Binary (`.pftrace`) and JSON (`.json`) traces: `evring report`.
    Any,
    /// Binary traces only: `evring merge` (it refuses JSON).
    Binary,
}

/// Whether `path` (a `.json` file) starts as a JSON trace evring wrote: its
/// `evring.stream` header line comes within the first few lines.
fn is_evring_json(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = Vec::with_capacity(8192);
    match std::fs::File::open(path) {
        Ok(f) => {
            if f.take(8192).read_to_end(&mut head).is_err() {
                return false;
            }
        }
        Err(_) => return false,
    }
    head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
        && head.windows(15).any(|w| w == b"\"evring.stream\"")
}

/// What [`expand_inputs`] found.
#[derive(Debug, Default, PartialEq)]
pub struct Expanded {
    pub paths: Vec<PathBuf>,
    /// Per directory, the evring JSON traces left out (`Traces::Binary`).
    pub skipped_json: Vec<(PathBuf, usize)>,
}

/// Expands the command line's inputs: a file stays as it is; a directory
/// (a dump directory) stands for the trace files directly in it, sorted by
/// name: `.pftrace` files and `.json` files that begin as evring's JSON
/// traces (with `Traces::Binary`, only the former). Everything else there
/// (metrics `.prom`/`.jsonl`, call logs, other JSON, subdirectories) is
/// skipped, as is `exclude` (`merge`'s own output). A directory without any
/// trace is an error.
pub fn expand_inputs(
    inputs: &[PathBuf],
    want: Traces,
    exclude: Option<&std::path::Path>,
) -> Result<Expanded, BadInput> {
    let excluded = exclude.and_then(|p| std::fs::canonicalize(p).ok());
    let mut out = Expanded::default();
    for input in inputs {
        if !input.is_dir() {
            out.paths.push(input.clone());
            continue;
        }
        let entries =
            std::fs::read_dir(input).map_err(|e| BadInput(format!("{}: {e}", input.display())))?;
        let mut found = Vec::new();
        let mut json = 0;
        for e in entries {
            let e = e.map_err(|e| BadInput(format!("{}: {e}", input.display())))?;
            let p = e.path();
            if !p.is_file() {
                continue;
            }
            if excluded.is_some() && std::fs::canonicalize(&p).ok() == excluded {
                continue;
            }
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".pftrace") {
                found.push(p);
            } else if name.ends_with(".json") && is_evring_json(&p) {
                match want {
                    Traces::Any => found.push(p),
                    Traces::Binary => json += 1,
                }
            }
        }
        if found.is_empty() {
            return Err(BadInput(match (want, json) {
                (Traces::Binary, 1..) => format!(
                    "{}: no binary trace (.pftrace) in the directory, only {json} JSON \
                     trace(s): merge reads binary traces (EVRING_FORMAT=perfetto)",
                    input.display()
                ),
                (Traces::Binary, _) => format!(
                    "{}: no evring trace (.pftrace) in the directory",
                    input.display()
                ),
                (Traces::Any, _) => format!(
                    "{}: no evring trace (.pftrace or evring .json) in the directory",
                    input.display()
                ),
            }));
        }
        found.sort();
        out.paths.extend(found);
        if json > 0 {
            out.skipped_json.push((input.clone(), json));
        }
    }
    Ok(out)
}
