//! The simulator judges any plugin fairly: small, deliberately broken C plugins
//! (`tests/plugins/*.c`, compiled here with `cc`) each get the verdict they deserve
//! from the `evring-sim` binary, and a correct one is not failed.
//!
//! | plugin | what it does wrong | verdict |
//! |---|---|---|
//! | `nothing` | hands out a dummy handle, writes nothing | `unverified` (exit 3) |
//! | `leak` | keeps 4 KiB per event | `FAIL` (memory) |
//! | `dummy8` | keeps 8 collectives, returns non-NULL dummy handles | `FAIL` (trace) |
//! | `crash` | segfaults at its 1000th start | `FAIL` naming SIGSEGV, every run still reported |
//! | `every_init` | nothing: reads `NCCL_PROFILE_DUMP_FILE` at every `init` | `ok` |
//! | `logs` | calls NCCL's logger at `init` without a NULL check | no crash; message noted |
//! | `hang` | never returns from `finalize` | `FAIL` when `--timeout` kills the run |

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const EXE: &str = env!("CARGO_BIN_EXE_evring-sim");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("evring-sim-judge-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `tests/plugins/<name>.c` built as a shared library (once per test binary), in
/// cargo's scratch directory for integration tests.
fn plugin(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
        // Builds of earlier runs (always rebuilt: the sources may have changed).
        for e in std::fs::read_dir(scratch).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with("judge-plugins-")
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let d = scratch.join(format!("judge-plugins-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    });
    let so = dir.join(format!("{name}.so"));
    if !so.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/plugins")
            .join(format!("{name}.c"));
        let tmp_so = dir.join(format!("{name}.{:?}.so", std::thread::current().id()));
        let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-pthread", "-Wall", "-o"])
            .arg(&tmp_so)
            .arg(&src)
            .output()
            .expect("a C compiler `cc` is needed for these tests (CI installs one)");
        assert!(
            out.status.success(),
            "cc {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp_so, &so).unwrap();
    }
    so
}

struct Run {
    out: Output,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The result column of every table row (the header excluded).
    fn verdicts(&self) -> Vec<(String, String)> {
        self.stdout
            .lines()
            .skip(1)
            .filter_map(|l| {
                let name = l.split("  ").next()?.trim().to_string();
                let verdict = l.split_whitespace().last()?.to_string();
                Some((name, verdict))
            })
            .collect()
    }

    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }

    fn context(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

fn sim(args: &[&str], plugin: &Path, trace_dir: &Path) -> Run {
    let out = Command::new(EXE)
        .args(args)
        .args(["-q", "--plugin"])
        .arg(plugin)
        .arg("--trace-dir")
        .arg(trace_dir)
        .output()
        .expect("run evring-sim");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        out,
    }
}

/// Nothing the runs created may be left behind (traces, plugin copies).
fn assert_cleaned(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn do_nothing_plugin_is_unverified() {
    let d = tmp("nothing");
    let r = sim(&["run", "eth", "--events", "20000"], &plugin("nothing"), &d);
    assert_eq!(
        r.verdicts(),
        [("eth".into(), "unverified".into())],
        "{}",
        r.context()
    );
    assert_eq!(r.code(), Some(3), "{}", r.context());
    assert!(r.stderr.contains("no trace file found"), "{}", r.context());
    assert_cleaned(&d);
}

/// NCCL always passes a real logger; a plugin may call it unchecked and with printf
/// arguments.
#[test]
fn plugin_calling_the_logger_gets_a_real_one() {
    let d = tmp("logs");
    let r = sim(&["run", "eth", "--events", "5000"], &plugin("logs"), &d);
    assert_eq!(
        r.verdicts(),
        [("eth".into(), "unverified".into())],
        "{}",
        r.context()
    );
    assert!(
        r.stderr
            .contains("logs.c: init of rank 0 (formatted by the logger)"),
        "{}",
        r.context()
    );
    assert_cleaned(&d);
}

/// A run that never ends is killed at the time limit and fails.
#[test]
fn hanging_plugin_fails_at_the_time_limit() {
    let d = tmp("hang");
    let r = sim(
        &["run", "eth", "--events", "2000", "--timeout", "1"],
        &plugin("hang"),
        &d,
    );
    assert_eq!(
        r.verdicts(),
        [("eth".into(), "FAIL".into())],
        "{}",
        r.context()
    );
    assert!(
        r.stderr.contains("did not end within 1 s"),
        "{}",
        r.context()
    );
    assert_eq!(r.code(), Some(1), "{}", r.context());
    assert_cleaned(&d);
}

#[test]
fn leaking_plugin_fails_on_memory() {
    let d = tmp("leak");
    let r = sim(&["run", "shm", "--events", "60000"], &plugin("leak"), &d);
    assert_eq!(
        r.verdicts(),
        [("shm".into(), "FAIL".into())],
        "{}",
        r.context()
    );
    assert_eq!(r.code(), Some(1), "{}", r.context());
    assert!(r.stderr.contains("memory: RSS grew"), "{}", r.context());
    assert_cleaned(&d);
}

#[test]
fn plugin_keeping_eight_collectives_fails() {
    let d = tmp("dummy8");
    let r = sim(&["run", "eth", "--events", "20000"], &plugin("dummy8"), &d);
    assert_eq!(
        r.verdicts(),
        [("eth".into(), "FAIL".into())],
        "{}",
        r.context()
    );
    assert_eq!(r.code(), Some(1), "{}", r.context());
    assert!(r.stderr.contains("are in its trace"), "{}", r.context());
    assert_cleaned(&d);
}

/// Every run crashes; each is a FAIL row naming the signal, and every later run
/// still runs and is reported.
#[test]
fn crashing_plugin_is_a_verdict_per_run() {
    let d = tmp("crash");
    let r = sim(&["all", "--events", "5000"], &plugin("crash"), &d);
    let v = r.verdicts();
    let expected = evring_sim::scenario::Scenario::ALL.len() + 1 + 4;
    assert_eq!(v.len(), expected, "{}", r.context());
    // The recorded logs have fewer than 1000 starts: those replays do not crash.
    for (name, verdict) in &v {
        if name.starts_with("replay") {
            assert_ne!(verdict, "FAIL", "{name}: {}", r.context());
        } else {
            assert_eq!(verdict, "FAIL", "{name}: {}", r.context());
        }
    }
    assert_eq!(r.code(), Some(1), "{}", r.context());
    assert!(
        r.stderr.contains("killed by signal 11 (SIGSEGV"),
        "{}",
        r.context()
    );
    assert_cleaned(&d);
}

/// A correct plugin that reads its dump path at every init (and at finalize writes
/// its closing bracket) gets `ok` in every scenario and replay.
#[test]
fn plugin_reading_the_dump_path_at_every_init_is_ok() {
    let d = tmp("every-init");
    let r = sim(&["all", "--events", "30000"], &plugin("every_init"), &d);
    let v = r.verdicts();
    assert_eq!(
        v.len(),
        evring_sim::scenario::Scenario::ALL.len() + 1 + 4,
        "{}",
        r.context()
    );
    for (name, verdict) in &v {
        assert_eq!(verdict, "ok", "{name}: {}", r.context());
    }
    assert_eq!(r.code(), Some(0), "{}", r.context());
    assert_cleaned(&d);
}
