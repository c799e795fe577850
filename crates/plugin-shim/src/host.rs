//! This machine's name, for trace headers and file names (files of many
//! hosts and containers often land in one shared directory).

use std::sync::OnceLock;

/// The host name (`gethostname`), cached; `unknown-host` if it cannot be read.
pub fn name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `len` bytes into our buffer.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let s = String::from_utf8_lossy(&buf[..n]).into_owned();
        if rc != 0 || s.is_empty() {
            "unknown-host".to_string()
        } else {
            s
        }
    })
}

/// The host name made safe for a file name: letters, digits, `.` and `-`
/// kept, anything else `-`, at most 64 characters.
pub fn file_part() -> String {
    name()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}
