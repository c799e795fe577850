//! Finds our plugin library next to the `evring-sim` executable, so that the binary
//! never runs cargo: `cargo build --release -p evring-shim` leaves the library in the
//! executable's directory (`target/release`), and any build that depends on the shim
//! compiles it into `deps/` below (where test executables live).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// File names our plugin has in a target directory: cargo's name, and the name
/// `ci/build-plugin.sh` gives it for `NCCL_PROFILER_PLUGIN=evring`.
pub const PLUGIN_NAMES: [&str; 2] = ["libevring_shim.so", "libnccl-profiler-evring.so"];

/// Where our plugin may lie for an executable in `exe_dir`: the directory itself
/// (`target/release` for the binary) and `deps/` below it (where cargo compiles the
/// library; test executables live in `deps/` themselves).
pub fn candidates(exe_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![exe_dir.to_path_buf(), exe_dir.join("deps")];
    if exe_dir.file_name().is_some_and(|n| n == "deps") {
        if let Some(up) = exe_dir.parent() {
            dirs.push(up.to_path_buf());
        }
    }
    dirs.iter()
        .flat_map(|d| PLUGIN_NAMES.iter().map(move |n| d.join(n)))
        .collect()
}

/// The newest existing candidate for `exe_dir`: after a code change cargo rebuilds
/// `deps/libevring_shim.so` first, and a copy elsewhere may be older.
pub fn plugin_near(exe_dir: &Path) -> Result<PathBuf, String> {
    let tried = candidates(exe_dir);
    tried
        .iter()
        .filter_map(|p| {
            let m = std::fs::metadata(p).ok().filter(|m| m.is_file())?;
            Some((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), p))
        })
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p.clone())
        .ok_or_else(|| {
            format!(
                "no plugin found next to evring-sim: tried {} (build it with \
                 `cargo build --release -p evring-shim`, or pass --plugin PATH)",
                tried[0].display()
            ) + &tried[1..]
                .iter()
                .map(|p| format!(", {}", p.display()))
                .collect::<String>()
        })
}

/// Our plugin next to the running executable.
pub fn plugin_near_self() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the evring-sim executable ({e}); pass --plugin PATH"))?;
    plugin_near(exe.parent().unwrap_or(Path::new(".")))
}

/// For tests and scripts, never called by `evring-sim` itself: `EVRING_PLUGIN` if
/// set, else builds the release plugin in `workspace` as the README does (`cargo
/// build --release -p evring-shim`) and finds it as the binary would.
pub fn build_release_plugin(workspace: &Path) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("EVRING_PLUGIN") {
        return Ok(PathBuf::from(p));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let ok = std::process::Command::new(&cargo)
        .current_dir(workspace)
        .args(["build", "--release", "-q", "-p", "evring-shim", "--lib"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?
        .success();
    if !ok {
        return Err("cargo build --release -p evring-shim failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    plugin_near(&target.join("release"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("evring-locate-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("deps")).unwrap();
        d
    }

    #[test]
    fn missing_plugin_names_every_path_tried() {
        let d = tmp("none");
        let e = plugin_near(&d).unwrap_err();
        assert!(!e.contains('\n'), "one line: {e}");
        for c in candidates(&d) {
            assert!(e.contains(&c.display().to_string()), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn newest_candidate_wins() {
        let d = tmp("newest");
        let old = d.join("libevring_shim.so");
        let new = d.join("deps/libevring_shim.so");
        std::fs::write(&old, b"old").unwrap();
        let f = std::fs::File::options().write(true).open(&old).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
            .unwrap();
        std::fs::write(&new, b"new").unwrap();
        assert_eq!(plugin_near(&d).unwrap(), new);
        // A test executable lives in deps/: the directory above is searched too.
        assert_eq!(plugin_near(&d.join("deps")).unwrap(), new);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
