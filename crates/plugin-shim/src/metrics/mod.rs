//! The metrics sink: live figures of every communicator on the writer thread
//! (never on NCCL's threads), exported every `EVRING_METRICS_INTERVAL` as a
//! Prometheus text file and a JSON line, and written into each stream's
//! footer when it ends.
//!
//! `EVRING_METRICS=PREFIX` turns it on. Files: `PREFIX_HOST_PID.prom`
//! (replaced at each export: written to `.prom.tmp`, then renamed, as
//! node_exporter's textfile collector expects, so a reader never sees half a
//! file) and `PREFIX_HOST_PID.jsonl` (one line appended per export). The
//! series and what each means: docs/report.md.

pub mod export;
pub mod series;

use crate::clock::now_ns;
use crate::format::Field;
use crate::perfetto::StreamInfo;
use crate::record::Record;
use crate::sink::Sink;
use crate::trace::End;
use export::StreamLabels;
use series::Figures;
use std::collections::HashMap;
use std::io::Write;

/// `EVRING_METRICS*` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// File prefix (`EVRING_METRICS`).
    pub prefix: String,
    /// Export period (`EVRING_METRICS_INTERVAL`: seconds, or `250ms`; default 10 s).
    pub interval_ns: u64,
    /// Series (plus p2p peers) held at most (`EVRING_METRICS_MAX_SERIES`, default 512).
    pub max_series: usize,
}

/// Parses `EVRING_METRICS_INTERVAL`: `10`, `10s`, `2.5s` or `250ms`.
pub fn parse_interval(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, scale) = if let Some(ms) = s.strip_suffix("ms") {
        (ms, 1e6)
    } else {
        (s.strip_suffix('s').unwrap_or(s), 1e9)
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some((v * scale) as u64)
}

pub struct MetricsSink {
    cfg: MetricsConfig,
    host: String,
    pid: i32,
    figures: Figures,
    streams: HashMap<u64, StreamLabels>,
    /// Streams ended since the last export: dropped after it.
    ended: Vec<u64>,
    last_export: u64,
    /// Exports written, and those that failed (counted, never retried in a loop).
    pub exports: u64,
    pub export_errors: u64,
}

impl MetricsSink {
    pub fn new(cfg: MetricsConfig, host: String, pid: i32) -> MetricsSink {
        MetricsSink {
            figures: Figures::new(cfg.max_series),
            cfg,
            host,
            pid,
            streams: HashMap::new(),
            ended: Vec::new(),
            last_export: now_ns(),
            exports: 0,
            export_errors: 0,
        }
    }

    fn path(&self, ext: &str) -> String {
        let host: String = self
            .host
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        format!("{}_{host}_{}.{ext}", self.cfg.prefix, self.pid)
    }

    /// The Prometheus text now (what the next export writes).
    pub fn prometheus(&self) -> String {
        export::prometheus(&self.host, &self.figures, &self.streams)
    }

    pub fn figures(&self) -> &Figures {
        &self.figures
    }

    /// Writes both files now; then forgets streams that ended.
    pub fn export(&mut self) {
        self.last_export = now_ns();
        let ok = self.write_files().is_ok();
        self.exports += 1;
        self.export_errors += u64::from(!ok);
        for ctx in std::mem::take(&mut self.ended) {
            self.figures.remove(ctx);
            self.streams.remove(&ctx);
        }
    }

    fn write_files(&self) -> std::io::Result<()> {
        let prom = self.path("prom");
        if let Some(dir) = std::path::Path::new(&prom).parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                let _ = std::fs::create_dir_all(dir);
            }
        }
        let tmp = format!("{prom}.tmp");
        std::fs::write(&tmp, self.prometheus())?;
        std::fs::rename(&tmp, &prom)?;
        let realtime = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let line = export::json_line(&self.host, self.pid, realtime, &self.figures, &self.streams);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("jsonl"))?
            .write_all(line.as_bytes())
    }

    fn nranks(&self, ctx: u64) -> u32 {
        self.streams.get(&ctx).map_or(1, |s| s.nranks.max(1) as u32)
    }
}

impl Sink for MetricsSink {
    fn open(&mut self, ctx: u64, s: &StreamInfo) {
        self.streams.insert(
            ctx,
            StreamLabels {
                comm_id: s.comm_id,
                rank: s.rank,
                nranks: s.nranks,
            },
        );
        self.ended.retain(|&c| c != ctx);
    }

    fn record(&mut self, ctx: u64, rec: &Record) {
        let n = self.nranks(ctx);
        self.figures.add(ctx, rec, n);
    }

    fn footer(&mut self, ctx: u64, out: &mut Vec<(String, Field)>) {
        let n = self.nranks(ctx);
        export::footer_fields(&self.figures, ctx, n, out);
        out.push(("metrics_exports".into(), Field::U64(self.exports)));
        out.push((
            "metrics_export_errors".into(),
            Field::U64(self.export_errors),
        ));
    }

    fn flush(&mut self) {
        if now_ns().saturating_sub(self.last_export) >= self.cfg.interval_ns {
            self.export();
        }
    }

    fn close(&mut self, ctx: u64, end: End) {
        if end == End::Rotated {
            return;
        }
        self.ended.push(ctx);
        let all_ended = self.streams.keys().all(|c| self.ended.contains(c));
        if matches!(end, End::LastFinalize | End::Exit) && all_ended {
            // The final figures, now: nothing may come after.
            self.export();
        }
    }
}

#[cfg(test)]
mod tests;
