//! The same trace checks as [`crate::trace`], on the plugin's binary
//! (Perfetto) files: records per category, linkage of KernelCh/ProxyOp to a
//! Coll/P2p of the same file (and of KernelPhase to a KernelCh), late children,
//! duplicate ids, the footer.
//! A cut file counts as unterminated and is read up to the cut.

use crate::trace::{Footer, TraceSummary};
use evring_perfetto::ids;
use evring_perfetto::read::Stop;
use evring_perfetto::trace::{read, Value};
use std::collections::HashSet;
use std::path::Path;

/// Reads one `.pftrace` file.
pub fn read_file(path: &Path) -> Result<TraceSummary, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read trace {}: {e}", path.display()))?;
    let t = read(&bytes);
    let mut sum = TraceSummary {
        files: 1,
        ..Default::default()
    };
    let mut tasks = HashSet::new();
    let mut children = Vec::new();
    let mut kernels = HashSet::new();
    let mut phases = Vec::new();
    for s in &t.slices {
        sum.records += 1;
        *sum.by_cat.entry(s.category.clone()).or_default() += 1;
        let flags = match s.arg("flags") {
            Some(Value::Str(f)) => f.as_str(),
            _ => "",
        };
        let has = |f: &str| flags.split(',').any(|x| x == f);
        if has("late_child") {
            sum.late += 1;
        }
        let id = ids::event_id(s, ids::flow_key(&t, s.seq)).unwrap_or(0);
        let parent = ids::id_arg(s, "parent");
        if s.category == "KernelCh" {
            kernels.insert(id);
        }
        match s.category.as_str() {
            "Coll" | "P2p" if !tasks.insert(id) => sum.duplicate_ids += 1,
            "KernelPhase" if !(has("foreign_parent") || has("detached")) => {
                if parent == 0 {
                    sum.orphans += 1;
                } else {
                    phases.push((id, parent));
                }
            }
            "KernelCh" | "ProxyOp" if !(has("foreign_parent") || has("detached")) => {
                if parent == 0 {
                    sum.orphans += 1;
                } else {
                    children.push((s.category.clone(), id, parent));
                }
            }
            _ => {}
        }
    }
    for (cat, id, parent) in children {
        sum.linked += 1;
        if !tasks.contains(&parent) {
            sum.link_errors += 1;
            if sum.link_examples.len() < 5 {
                sum.link_examples.push(format!(
                    "{}: {cat} {id:#x} has parent {parent:#x}, which is no Coll/P2p there",
                    path.display()
                ));
            }
        }
    }
    for (id, parent) in phases {
        sum.linked += 1;
        if !kernels.contains(&parent) {
            sum.link_errors += 1;
            if sum.link_examples.len() < 5 {
                sum.link_examples.push(format!(
                    "{}: KernelPhase {id:#x} has parent {parent:#x}, which is no KernelCh there",
                    path.display()
                ));
            }
        }
    }
    if let Some(fields) = &t.summary {
        let mut f = Footer {
            file: path.to_path_buf(),
            ..Default::default()
        };
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("finalized", Value::Bool(b)) => f.finalized = *b,
                ("complete", Value::Bool(b)) => f.complete = *b,
                (_, Value::Uint(n)) => {
                    f.counters.insert(k.clone(), *n);
                }
                _ => {}
            }
        }
        sum.footers.push(f);
    } else {
        sum.unterminated = 1;
    }
    match &t.stop {
        Some(Stop::Garbage { .. }) => sum.bad_lines += 1,
        // A cut inside a packet: the torn packet is the cut file's "bad last line".
        Some(Stop::Cut { .. }) => sum.bad_lines += 1,
        None => {}
    }
    sum.bad_lines += t.malformed as u64;
    // Our binary format: completeness can be judged from it (report.rs).
    if !t.slices.is_empty() || t.summary.is_some() {
        sum.known_files = 1;
    }
    Ok(sum)
}
