//! Reads the Chrome-trace JSON files a plugin wrote and checks them.
//!
//! Two formats are known: ours (categories named like the event types, `Coll`, `P2p`,
//! …, and an `evring.summary` footer) and that of NCCL's example profiler plugin
//! (`<prefix>_<commHash>_<rank>.json`: categories `COLL`, `P2P`, `GROUP_API`, …, one
//! begin and one end event per event, the array closed by `{}]`). A file in neither
//! with records is counted in [`TraceSummary::unknown_files`]: its completeness cannot be
//! judged. Our binary format (`*.pftrace`) is read by [`crate::pftrace`].
//!
//! The files are JSON arrays, possibly unterminated (a process that exited or was
//! killed before closing them). Our shim writes one event per line; other plugins may
//! spread an event over several lines, so lines are joined until they parse. Only
//! begin events (`"ph":"b"`, or complete `"ph":"X"`) count as records; end events are
//! skipped without parsing.
//!
//! Linkage (our shim's format): every KernelPhase record's `args.parent` must be the id of
//! a KernelCh record of the same file, and every KernelCh and ProxyOp record's `args.parent` must
//! be the `args.id` of a Coll or P2p record in the same file, unless the record is
//! flagged `foreign_parent` or `detached` (PXN), or has no parent at all (its parent's
//! start was dropped; reported separately).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::driver::TYPE_NAMES;

/// Categories of NCCL's example profiler plugin's trace.
pub const EXAMPLE_CATEGORIES: [&str; 15] = [
    "GROUP_API",
    "COLL_API",
    "P2P_API",
    "KERNEL_LAUNCH",
    "GROUP",
    "COLL",
    "P2P",
    "PROXY",
    "NET",
    "GPU",
    "NET_IB",
    "NET_SOCK",
    "CE_COLL",
    "CE_SYNC",
    "CE_BATCH",
];

/// Whether `cat` is a category of a known trace format.
fn known_category(cat: &str) -> bool {
    TYPE_NAMES.contains(&cat) || EXAMPLE_CATEGORIES.contains(&cat)
}

/// The evring footer (`evring.summary`) of one file.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Footer {
    pub file: PathBuf,
    pub finalized: bool,
    pub complete: bool,
    /// Every numeric field of the footer's `args` (our counters).
    pub counters: BTreeMap<String, u64>,
}

impl Footer {
    pub fn get(&self, k: &str) -> u64 {
        self.counters.get(k).copied().unwrap_or(0)
    }
}

/// What the trace files of one directory hold.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TraceSummary {
    pub files: usize,
    /// Files in one of the known formats (see the module doc).
    pub known_files: usize,
    /// Files with records in neither known format. (A file without any record, e.g.
    /// only `[` so far, is in neither count.)
    pub unknown_files: usize,
    /// Begin (or complete) events.
    pub records: u64,
    /// Records per category.
    pub by_cat: BTreeMap<String, u64>,
    /// KernelCh/ProxyOp records whose parent is not a Coll/P2p of the same file.
    pub link_errors: u64,
    pub link_examples: Vec<String>,
    /// KernelCh/ProxyOp records checked for linkage.
    pub linked: u64,
    /// KernelCh/ProxyOp records with a NULL parent.
    pub orphans: u64,
    /// Records flagged `late_child`.
    pub late: u64,
    /// Coll/P2p IDs that occur more than once in one file.
    pub duplicate_ids: u64,
    pub footers: Vec<Footer>,
    /// Files without the closing `]`.
    pub unterminated: usize,
    /// Lines that are not JSON (a cut last line of an unterminated file included).
    pub bad_lines: u64,
}

impl TraceSummary {
    /// Coll and P2p records (any capitalisation of the category, so that NCCL's example
    /// plugin's `COLL`/`P2P` count too).
    pub fn coll_p2p(&self) -> u64 {
        self.by_cat
            .iter()
            .filter(|(k, _)| {
                let k = k.to_ascii_lowercase();
                k == "coll" || k == "p2p"
            })
            .map(|(_, v)| *v)
            .sum()
    }

    pub fn cat(&self, name: &str) -> u64 {
        self.by_cat.get(name).copied().unwrap_or(0)
    }

    pub fn merge(&mut self, o: TraceSummary) {
        self.files += o.files;
        self.known_files += o.known_files;
        self.unknown_files += o.unknown_files;
        self.records += o.records;
        for (k, v) in o.by_cat {
            *self.by_cat.entry(k).or_default() += v;
        }
        self.link_errors += o.link_errors;
        self.linked += o.linked;
        self.orphans += o.orphans;
        self.late += o.late;
        self.duplicate_ids += o.duplicate_ids;
        self.footers.extend(o.footers);
        self.unterminated += o.unterminated;
        self.bad_lines += o.bad_lines;
        for e in o.link_examples {
            if self.link_examples.len() < 5 {
                self.link_examples.push(e);
            }
        }
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Linked<'a> {
    #[serde(borrow, default)]
    args: Option<LinkArgs<'a>>,
}

#[derive(Deserialize)]
struct LinkArgs<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    flags: Vec<Cow<'a, str>>,
}

fn hex(s: &str) -> Option<u64> {
    let d = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(d, 16).ok()
}

/// Per-file state of the linkage check.
#[derive(Default)]
struct Links {
    tasks: HashSet<u64>,
    children: Vec<(&'static str, u64, u64)>,
    /// KernelCh ids, and KernelPhase (id, parent): a phase's parent is a KernelCh.
    kernels: HashSet<u64>,
    phases: Vec<(u64, u64)>,
}

/// Reads every `*.json` and `*.pftrace` file directly in `dir` (none is fine: zero files).
pub fn read_dir(dir: &Path) -> Result<TraceSummary, String> {
    let mut total = TraceSummary::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(total),
        Err(e) => return Err(format!("cannot list traces in {}: {e}", dir.display())),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "pftrace"))
        .collect();
    files.sort();
    for f in files {
        if f.extension().is_some_and(|x| x == "pftrace") {
            total.merge(crate::pftrace::read_file(&f)?);
        } else {
            total.merge(read_file(&f)?);
        }
    }
    Ok(total)
}

/// Reads one trace file.
pub fn read_file(path: &Path) -> Result<TraceSummary, String> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read trace {}: {e}", path.display()))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut sum = TraceSummary {
        files: 1,
        ..Default::default()
    };
    let mut links = Links::default();
    let mut line = String::new();
    let mut pending = String::new();
    let mut closed = false;
    // NCCL's example plugin closes its array with an empty object.
    let mut example_end = false;
    loop {
        line.clear();
        let n = r
            .read_line(&mut line)
            .map_err(|e| format!("cannot read trace {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        let t = line.trim();
        if t.is_empty() || t == "[" {
            continue;
        }
        if t == "]" {
            closed = true;
            continue;
        }
        if t == "{}]" {
            closed = true;
            example_end = true;
            continue;
        }
        if pending.is_empty()
            && t.contains("\"ph\":\"e\"")
            && t.starts_with('{')
            && t.ends_with("},")
        {
            continue;
        }
        if pending.is_empty() && quick(&mut sum, &mut links, t) {
            continue;
        }
        pending.push_str(t);
        let body = pending
            .trim_end_matches(',')
            .trim_end_matches(']')
            .trim_end_matches(',');
        match serde_json::from_str::<Event>(body) {
            Ok(ev) => {
                take(&mut sum, &mut links, ev, body, path);
                if t.ends_with(']') {
                    closed = true;
                }
                pending.clear();
            }
            Err(e) if e.is_eof() && pending.len() < 1 << 16 => {}
            Err(_) => {
                sum.bad_lines += 1;
                pending.clear();
            }
        }
    }
    if !pending.is_empty() {
        sum.bad_lines += 1;
    }
    if !closed {
        sum.unterminated = 1;
    }
    let known =
        example_end || !sum.footers.is_empty() || sum.by_cat.keys().any(|c| known_category(c));
    if known {
        sum.known_files = 1;
    } else if sum.records > 0 {
        sum.unknown_files = 1;
    }
    for (id, parent) in links.phases {
        sum.linked += 1;
        if !links.kernels.contains(&parent) {
            sum.link_errors += 1;
            if sum.link_examples.len() < 5 {
                sum.link_examples.push(format!(
                    "{}: KernelPhase {id:#x} has parent {parent:#x}, which is no KernelCh there",
                    path.display()
                ));
            }
        }
    }
    for (cat, id, parent) in links.children {
        sum.linked += 1;
        if !links.tasks.contains(&parent) {
            sum.link_errors += 1;
            if sum.link_examples.len() < 5 {
                sum.link_examples.push(format!(
                    "{}: {cat} {id:#x} has parent {parent:#x}, which is no Coll/P2p there",
                    path.display()
                ));
            }
        }
    }
    Ok(sum)
}

/// The value of `"key":"…"` (first occurrence), for our writer's fixed layout.
fn field<'a>(t: &'a str, key: &str) -> Option<&'a str> {
    let i = t.find(key)? + key.len();
    let rest = &t[i..];
    Some(&rest[..rest.find('"')?])
}

/// Our shim's one-line records without a JSON parser (the bulk of a trace); false for
/// anything else, which then goes through serde.
fn quick(sum: &mut TraceSummary, links: &mut Links, t: &str) -> bool {
    if !t.starts_with("{\"name\":\"") || !t.ends_with("},") || t.contains("evring.summary") {
        return false;
    }
    let (Some(cat), Some(ph)) = (field(t, "\"cat\":\""), field(t, "\"ph\":\"")) else {
        return false;
    };
    if ph != "b" && ph != "X" {
        // Ends, metadata and flow arrows carry nothing the checks count.
        return matches!(ph, "e" | "M" | "s" | "f");
    }
    let id = field(t, "\"args\":{\"id\":\"").and_then(hex);
    let parent = field(t, "\"parent\":\"").and_then(hex);
    let (Some(id), Some(parent)) = (id, parent) else {
        return false;
    };
    let flags = t
        .find("\"flags\":[")
        .map(|i| &t[i..])
        .and_then(|r| r.find(']').map(|j| &r[..j]))
        .unwrap_or("");
    sum.records += 1;
    match sum.by_cat.get_mut(cat) {
        Some(n) => *n += 1,
        None => {
            sum.by_cat.insert(cat.to_string(), 1);
        }
    }
    if flags.contains("\"late_child\"") {
        sum.late += 1;
    }
    link(
        sum,
        links,
        cat,
        id,
        parent,
        flags.contains("\"foreign_parent\"") || flags.contains("\"detached\""),
    );
    true
}

fn child_kind(cat: &str) -> Option<&'static str> {
    match cat {
        "KernelCh" => Some("KernelCh"),
        "ProxyOp" => Some("ProxyOp"),
        _ => None,
    }
}

fn link(sum: &mut TraceSummary, links: &mut Links, cat: &str, id: u64, parent: u64, foreign: bool) {
    if cat == "KernelCh" {
        links.kernels.insert(id);
    }
    if cat == "KernelPhase" {
        match (foreign, parent) {
            (true, _) => {}
            (false, 0) => sum.orphans += 1,
            (false, p) => links.phases.push((id, p)),
        }
    } else if matches!(cat, "Coll" | "P2p") {
        if !links.tasks.insert(id) {
            sum.duplicate_ids += 1;
        }
    } else if let (Some(kind), false) = (child_kind(cat), foreign) {
        if parent == 0 {
            sum.orphans += 1;
        } else {
            links.children.push((kind, id, parent));
        }
    }
}

fn take(sum: &mut TraceSummary, links: &mut Links, ev: Event<'_>, body: &str, path: &Path) {
    if ev.name.as_deref() == Some("evring.summary") {
        sum.footers.push(footer(body, path));
        return;
    }
    let ph = ev.ph.as_deref().unwrap_or("");
    if ph != "b" && ph != "X" {
        return;
    }
    sum.records += 1;
    let cat = ev.cat.as_deref().unwrap_or("");
    match sum.by_cat.get_mut(cat) {
        Some(n) => *n += 1,
        None => {
            sum.by_cat.insert(cat.to_string(), 1);
        }
    }
    let task = matches!(cat, "Coll" | "P2p");
    let child = matches!(cat, "KernelCh" | "ProxyOp");
    if !task && !child && !body.contains("late_child") {
        return;
    }
    let Ok(l) = serde_json::from_str::<Linked>(body) else {
        return;
    };
    let Some(a) = l.args else { return };
    if a.flags.iter().any(|f| f == "late_child") {
        sum.late += 1;
    }
    let id = a.id.as_deref().and_then(hex).unwrap_or(0);
    let parent = a.parent.as_deref().and_then(hex).unwrap_or(0);
    let foreign = a
        .flags
        .iter()
        .any(|f| f == "foreign_parent" || f == "detached");
    link(sum, links, cat, id, parent, foreign);
}

fn footer(body: &str, path: &Path) -> Footer {
    let mut f = Footer {
        file: path.to_path_buf(),
        ..Default::default()
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return f;
    };
    if let Some(args) = v.get("args").and_then(|a| a.as_object()) {
        for (k, v) in args {
            match v {
                serde_json::Value::Bool(b) if k == "finalized" => f.finalized = *b,
                serde_json::Value::Bool(b) if k == "complete" => f.complete = *b,
                serde_json::Value::Number(n) => {
                    if let Some(n) = n.as_u64() {
                        f.counters.insert(k.clone(), n);
                    }
                }
                _ => {}
            }
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "evring-sim-trace-test-{}-{name}",
            std::process::id()
        ))
    }

    const OURS: &str = r#"[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"x"}},
{"name":"AllReduce","cat":"Coll","ph":"b","id":"0x10","pid":1,"tid":2,"ts":1.000,"args":{"id":"0x10","parent":"0x5","rank":0}},
{"name":"AllReduce","cat":"Coll","ph":"e","id":"0x10","pid":1,"tid":2,"ts":2.000},
{"name":"KernelCh","cat":"KernelCh","ph":"b","id":"0x11","pid":1,"tid":5,"ts":1.000,"args":{"id":"0x11","parent":"0x10","rank":0,"flags":["late_child"]}},
{"name":"KernelCh","cat":"KernelCh","ph":"e","id":"0x11","pid":1,"tid":5,"ts":1.500},
{"name":"ProxyOp","cat":"ProxyOp","ph":"b","id":"0x12","pid":1,"tid":3,"ts":1.000,"args":{"id":"0x12","parent":"0x99","rank":0}},
{"name":"ProxyOp","cat":"ProxyOp","ph":"b","id":"0x13","pid":1,"tid":3,"ts":1.000,"args":{"id":"0x13","parent":"0x98","rank":0,"flags":["foreign_parent","detached"]}},
{"name":"evring.summary","cat":"evring","ph":"i","s":"g","pid":1,"tid":0,"ts":3.000,"args":{"finalized":true,"complete":false,"live":0,"completed":4}}
]
"#;

    #[test]
    fn counts_links_and_footer() {
        let d = tmp("ours");
        let p = write(&d, "a.json", OURS);
        let s = read_file(&p).unwrap();
        assert_eq!(s.records, 4);
        assert_eq!(s.coll_p2p(), 1);
        assert_eq!((s.linked, s.link_errors, s.late), (2, 1, 1));
        assert_eq!(s.unterminated, 0);
        assert_eq!(s.footers.len(), 1);
        assert!(s.footers[0].finalized && !s.footers[0].complete);
        assert_eq!(s.footers[0].get("completed"), 4);
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn unterminated_cut_and_multiline_files() {
        let d = tmp("cut");
        let cut = &OURS[..OURS.find("{\"name\":\"evring.summary\"").unwrap() + 20];
        let p = write(&d, "b.json", cut);
        let s = read_file(&p).unwrap();
        assert_eq!((s.unterminated, s.bad_lines, s.records), (1, 1, 4));
        let pretty = "[\n{\n  \"name\": \"AllReduce\",\n  \"cat\": \"COLL\",\n  \"ph\": \"b\"\n},\n{\"name\": \"x\", \"cat\": \"P2P\", \"ph\": \"b\"}\n{}]\n";
        let p = write(&d, "c.json", pretty);
        let s = read_file(&p).unwrap();
        assert_eq!((s.coll_p2p(), s.bad_lines, s.unterminated), (2, 0, 0));
        let all = read_dir(&d).unwrap();
        assert_eq!(all.files, 2);
        assert!(read_dir(&d.join("missing")).unwrap().files == 0);
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn formats_are_told_apart() {
        let d = tmp("formats");
        let ours = read_file(&write(&d, "ours.json", OURS)).unwrap();
        assert_eq!((ours.known_files, ours.unknown_files), (1, 0));
        let example = "[\n{\"name\": \"AllReduce\", \"cat\": \"COLL\", \"ph\": \"b\", \"id\": 0},\n{\"name\": \"AllReduce\", \"cat\": \"COLL\", \"ph\": \"e\", \"id\": 0},\n{}]\n";
        let ex = read_file(&write(&d, "ex.json", example)).unwrap();
        assert_eq!((ex.known_files, ex.unknown_files, ex.coll_p2p()), (1, 0, 1));
        let empty_example = read_file(&write(&d, "empty.json", "[\n{}]\n")).unwrap();
        assert_eq!(empty_example.known_files, 1);
        let other = "[\n{\"name\": \"x\", \"cat\": \"Mine\", \"ph\": \"b\"},\n]\n";
        let o = read_file(&write(&d, "other.json", other)).unwrap();
        assert_eq!((o.known_files, o.unknown_files), (0, 1));
        // Nothing written yet: in neither count.
        let started = read_file(&write(&d, "started.json", "[\n")).unwrap();
        assert_eq!((started.known_files, started.unknown_files), (0, 0));
        let _ = std::fs::remove_dir_all(d);
    }
}
