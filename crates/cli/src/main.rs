//! `evring`: reads the trace files the evring plugin writes.
//!
//!     evring convert rank0.pftrace -o rank0.json   # binary trace -> JSON trace
//!     evring info rank0.pftrace                     # header, footer, counts
//!     evring report trace_*.pftrace [--json]        # per communicator: ops, completeness, stragglers
//!     evring report DUMP_DIR                        # every trace in a directory
//!     evring merge trace_*.pftrace -o job.pftrace   # every rank in one Perfetto file, one clock
//!
//! Bad input gives one line on stderr and exit status 2.

use clap::{Parser, Subcommand};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "evring", about = "Read and convert evring trace files")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Convert a binary (Perfetto) trace to the JSON trace format; a cut file
    /// converts up to the cut.
    Convert {
        input: PathBuf,
        /// Output file (default: standard output).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print a binary trace's header, footer and record counts.
    Info { input: PathBuf },
    /// Merge every rank's binary trace into one Perfetto file: one process
    /// per rank, all on one clock (same host: as recorded; other hosts:
    /// wall-clock anchors refined by matching collective completions).
    /// Prints each host's shift and its estimated error. A directory stands
    /// for the binary traces (`.pftrace`) in it.
    Merge {
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// The merged trace.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Per communicator: operation table (count, bytes, latency quantiles,
    /// algbw/busbw per size bucket), completeness of every rank's file, and
    /// stragglers (who arrived last at each collective). Reads binary and
    /// JSON traces, cut ones too; a directory stands for the traces in it
    /// (`.pftrace` and evring `.json`, sorted). docs/report.md explains the tables.
    Report {
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// How many stragglers to list per communicator.
        #[arg(long, default_value_t = 5)]
        top: usize,
    },
}

fn fail(msg: String) -> ExitCode {
    eprintln!("evring: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Convert { input, output } => {
            let bytes = match std::fs::read(&input) {
                Ok(b) => b,
                Err(e) => return fail(format!("{}: {e}", input.display())),
            };
            let mut out = Vec::with_capacity(bytes.len() * 4);
            let c = match evring_cli::to_json(&bytes, &mut out) {
                Ok(c) => c,
                Err(e) => return fail(format!("{}: {e}", input.display())),
            };
            let written = match &output {
                Some(p) => std::fs::write(p, &out),
                None => std::io::Write::write_all(&mut std::io::stdout().lock(), &out),
            };
            if let Err(e) = written {
                return fail(format!("cannot write output: {e}"));
            }
            if c.cut || !c.footer {
                eprintln!(
                    "evring: {}: {} records; the file {} (no footer: the run did not finish it)",
                    input.display(),
                    c.records,
                    if c.cut { "was cut" } else { "ends cleanly" }
                );
            }
            ExitCode::SUCCESS
        }
        Cmd::Report { inputs, json, top } => {
            let inputs = match evring_cli::expand_inputs(&inputs, evring_cli::Traces::Any, None) {
                Ok(x) => x.paths,
                Err(e) => return fail(e.to_string()),
            };
            let r = match evring_cli::report_files(&inputs, top) {
                Ok(r) => r,
                Err(e) => return fail(e.to_string()),
            };
            let text = if json {
                let mut t = evring_cli::render::json(&r).to_string();
                t.push('\n');
                t
            } else {
                evring_cli::render::text(&r)
            };
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
            ExitCode::SUCCESS
        }
        Cmd::Merge { inputs, output } => {
            let inputs =
                match evring_cli::expand_inputs(&inputs, evring_cli::Traces::Binary, Some(&output))
                {
                    Ok(x) => {
                        for (dir, n) in &x.skipped_json {
                            eprintln!(
                            "evring: {}: {n} JSON trace(s) left out (merge reads binary traces)",
                            dir.display()
                        );
                        }
                        x.paths
                    }
                    Err(e) => return fail(e.to_string()),
                };
            let mut all = Vec::new();
            for p in &inputs {
                match evring_cli::merge::read(p) {
                    Ok(i) => all.push(i),
                    Err(e) => return fail(e.to_string()),
                }
            }
            let mut out = Vec::new();
            let shifts = evring_cli::merge::merge(&all, &mut out);
            if let Err(e) = std::fs::write(&output, &out) {
                return fail(format!("{}: {e}", output.display()));
            }
            let mut o = format!(
                "{}: {} files, {} bytes\n{:<24} {:>16} {:>16} {:>9} {:>12}\n",
                output.display(),
                all.len(),
                out.len(),
                "host",
                "shift ns",
                "anchors say",
                "matched",
                "error ns"
            );
            for s in &shifts {
                let _ = writeln!(
                    o,
                    "{:<24} {:>16} {:>16} {:>9} {:>12}",
                    s.host,
                    s.offset_ns,
                    s.wall_offset_ns,
                    s.matched,
                    s.error_ns.map_or("-".to_string(), |e| e.to_string())
                );
            }
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), o.as_bytes());
            ExitCode::SUCCESS
        }
        Cmd::Info { input } => {
            let bytes = match std::fs::read(&input) {
                Ok(b) => b,
                Err(e) => return fail(format!("{}: {e}", input.display())),
            };
            let (t, recs) = match evring_cli::read(&bytes) {
                Ok(x) => x,
                Err(e) => return fail(format!("{}: {e}", input.display())),
            };
            // Written as one block: a closed pipe (`| head`) is not an error here.
            let mut o = String::new();
            let _ = writeln!(o, "file      {}", input.display());
            for (k, v) in &t.stream {
                let _ = writeln!(o, "stream    {k} = {v:?}");
            }
            let mut by_kind = std::collections::BTreeMap::<&str, u64>::new();
            for r in &recs {
                *by_kind.entry(r.kind.name()).or_default() += 1;
            }
            for (k, n) in by_kind {
                let _ = writeln!(o, "records   {k:<12} {n}");
            }
            let _ = writeln!(o, "tracks    {}", t.tracks.len());
            match &t.summary {
                Some(s) => {
                    for (k, v) in s {
                        let _ = writeln!(o, "footer    {k} = {v:?}");
                    }
                }
                None => {
                    let _ = writeln!(o, "footer    none (the file was cut or not finished)");
                }
            }
            if let Some(stop) = &t.stop {
                let _ = writeln!(o, "stopped   {stop:?}");
            }
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), o.as_bytes());
            ExitCode::SUCCESS
        }
    }
}
