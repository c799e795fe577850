//! include/evring.h matches the plugin: a C program compiled against the
//! header with `cc` prints every counter's offset (compared with the Rust
//! layout) and calls each control function through the real release `.so`,
//! with a C logger (NCCL's variadic signature) passed to init.

mod common;
use common::*;
use std::process::Command;

const PROGRAM: &str = r#"
#include "evring.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef void (*logger_t)(int, unsigned long, const char *, int, const char *, ...);
typedef struct {
  const char *name;
  int (*init)(void **, uint64_t, int *, const char *, int, int, int, logger_t);
  void *start, *stop, *record;
  int (*finalize)(void *);
} profiler_v6;
extern profiler_v6 ncclProfiler_v6;

static int logged;
static void logger(int level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)level; (void)flags; (void)file; (void)line; (void)fmt;
  logged++;
}

int main(void) {
  struct evring_stats_v1 s;
  printf("size %zu\n", sizeof s);
#define F(x) printf("field %s %zu\n", #x, offsetof(struct evring_stats_v1, x));
  FIELDS
  evring_set_mask(4095); /* before init: kept for it */
  if (evring_get_mask() != 4095) return 2;
  evring_set_output(1);
  evring_flush();
  if (evring_flush_wait(100) != 1) return 3;
  memset(&s, 0, sizeof s);
  if (evring_stats(&s, sizeof s) != sizeof s || s.inits != 0) return 4;
  void *ctx = 0;
  int mask = 0;
  ncclProfiler_v6.init(&ctx, 7, &mask, "c-test", 1, 2, 0, logger);
  if (!ctx || mask != 4095) return 5;
  ncclProfiler_v6.finalize(ctx);
  if (evring_flush_wait(5000) != 1) return 6;
  if (evring_stats(&s, sizeof s) != sizeof s) return 7;
  printf("version %s inits %llu finalizes %llu write_errors %llu logged %d\n",
         evring_version(), (unsigned long long)s.inits,
         (unsigned long long)s.finalizes, (unsigned long long)s.write_errors, logged);
  return 0;
}
"#;

#[test]
fn c_program_against_the_header() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempdir("c-header");
    let names: Vec<&str> = evring_shim::StatsV1::default()
        .fields()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let fields: String = names.iter().map(|n| format!("F({n}) ")).collect();
    let src = dir.join("prog.c");
    std::fs::write(&src, PROGRAM.replace("FIELDS", &fields)).unwrap();
    let so = dir.join("libevring_shim.so");
    std::fs::copy(plugin_so(), &so).unwrap();
    let exe = dir.join("prog");
    let include = root.join("include");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(&[
        "-std=c11".as_ref(),
        "-Wall".as_ref(),
        "-Werror".as_ref(),
        "-o".as_ref(),
        exe.as_os_str(),
        "-I".as_ref(),
        include.as_os_str(),
        src.as_os_str(),
        so.as_os_str(),
        rpath.as_ref(),
    ]);
    // The dump directory cannot be created (its parent is a file): the
    // warning goes through the logger and, once, to stderr.
    std::fs::write(dir.join("blocker"), b"x").unwrap();
    let run = Command::new(&exe)
        .env("NCCL_PROFILE_DUMP_FILE", dir.join("blocker/sub/trace"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    let size: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("size "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(size, std::mem::size_of::<evring_shim::StatsV1>());
    // live, started, completed, then the counters: u64s after the 8-byte header.
    for (k, n) in names.iter().enumerate() {
        let want = format!("field {n} {}", 8 + 8 * k);
        assert!(stdout.lines().any(|l| l == want), "{want}\n{stdout}");
    }
    let last = stdout.lines().last().unwrap();
    assert!(last.starts_with("version evring "), "{last}");
    assert!(last.contains("inits 1 finalizes 1"), "{last}");
    assert!(!last.contains("write_errors 0"), "{last}");
    assert!(!last.ends_with("logged 0"), "the logger was used: {last}");
    assert_eq!(stderr.matches("evring WARN").count(), 1, "{stderr}");
    assert!(stderr.contains("cannot create"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
