//! Writing the report: `EVRING_METER_OUT=PREFIX` gives `PREFIX<host>-<pid>.json`, and a
//! table goes to stderr unless `EVRING_METER_QUIET=1`. Written at the last finalize and
//! again at exit if calls were made since.

use crate::stats::{self, Meta};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, Once};

struct State {
    /// Calls counted when the last report was written.
    written_calls: Option<u64>,
    /// The file this meter instance writes (claimed at its first report).
    path: Option<PathBuf>,
}

static STATE: Mutex<State> = Mutex::new(State {
    written_calls: None,
    path: None,
});

extern "C" fn on_exit() {
    let _ = std::panic::catch_unwind(|| write("exit"));
}

/// Registers the exit hook (once).
pub fn register_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `on_exit` takes no arguments and never unwinds (it catches panics);
        // the library is linked `-z nodelete`, so its code outlives any dlclose.
        unsafe { libc::atexit(on_exit) };
    });
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The metadata of this process's report.
pub fn meta(reason: &str) -> Meta {
    let (plugin, plugin_name, abi, null) = match crate::inner() {
        Some(i) => (i.path.clone(), i.name.clone(), i.version, i.null),
        None => (
            std::env::var("EVRING_METER_PLUGIN").unwrap_or_else(|_| "null".into()),
            String::new(),
            0,
            false,
        ),
    };
    Meta {
        host: hostname(),
        pid: i64::from(std::process::id()),
        plugin,
        plugin_name,
        abi,
        mask: crate::MASK.load(Relaxed),
        ns_per_tick: crate::clock::ns_per_tick(),
        reason: reason.into(),
        inits: crate::INITS.load(Relaxed),
        finalizes: crate::FINALIZES.load(Relaxed),
        unattributed: stats::UNATTRIBUTED.load(Relaxed),
        attribution: if null { "handle" } else { "map" }.into(),
    }
}

/// Claims `PREFIX<host>-<pid>.json`, or `…-<pid>-2.json` and on if another meter instance
/// in this process (or a stale file) has it.
fn claim(prefix: &str, host: &str) -> Option<PathBuf> {
    let pid = std::process::id();
    for k in 1..100 {
        let p = if k == 1 {
            PathBuf::from(format!("{prefix}{host}-{pid}.json"))
        } else {
            PathBuf::from(format!("{prefix}{host}-{pid}-{k}.json"))
        };
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(_) => return Some(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                eprintln!("evring-meter: cannot create {}: {e}", p.display());
                return None;
            }
        }
    }
    None
}

/// Writes the report now, unless it is the exit report and nothing happened since the last.
pub fn write(reason: &str) {
    let mut st = match STATE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let snap = stats::snapshot();
    let calls = stats::total_calls(&snap);
    if reason == "exit" && st.written_calls == Some(calls) {
        return;
    }
    if reason == "exit" && calls == 0 {
        return;
    }
    st.written_calls = Some(calls);
    let m = meta(reason);
    if let Ok(prefix) = std::env::var("EVRING_METER_OUT") {
        if st.path.is_none() {
            st.path = claim(&prefix, &m.host);
        }
        if let Some(p) = &st.path {
            let tmp = p.with_extension("json.tmp");
            let text = stats::render_json(&m, &snap);
            let r = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, p));
            if let Err(e) = r {
                eprintln!("evring-meter: cannot write {}: {e}", p.display());
            }
        }
    }
    if std::env::var("EVRING_METER_QUIET").map_or(true, |v| v != "1") {
        eprint!("{}", stats::render_table(&m, &snap));
    }
}
