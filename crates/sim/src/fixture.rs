//! Parser for the NCCL profiler call logs in `tests/fixtures/<nccl version>/`, and the
//! rebuilding of event descriptors from them.
//!
//! The logs were written by that directory's `recorder.c`, a minimal plugin printing one
//! line per call. Its printf formats decide how each field is encoded:
//!
//! | Field | Format | Encoding |
//! |---|---|---|
//! | thread id | `%lx` | hex without `0x` |
//! | handle, context, parent, mask pointer | `%p` | `0x…` hex, `(nil)` for NULL |
//! | comm id, union words, REC arg | `%lx` | hex without `0x` |
//! | type | `%lu` | decimal |
//! | rank, state | `%d` | decimal |
//! | name | `%s` | func string of Coll/CollApi/P2pApi, `-` otherwise (P2p too) |
//!
//! Hex fields are accepted with or without `0x`. A REC arg of `dead` means a NULL args
//! pointer: the recorder prints the value 0xdead in that case, so a real first word of
//! 0xdead reads as NULL too (none occurs in the recorded logs).
//!
//! A recorder line always ends with a newline, so a last line without one is reported as
//! truncated even if its fields happen to parse: a cut hex number still looks like a number.
//!
//! Pointers inside the union words (strings, buffers, streams, handles) are addresses in the
//! recording process. [`descr_v6`] never dereferences them: it asks a [`Rebase`] for live
//! handles and function-name strings and points every other string at [`UNKNOWN_STR`].

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::ptr;
use std::str::FromStr;

use evring_abi::{
    ty, CeBatchV6, CeCollV6, CeSyncV6, CollApiV5, CollV5, DescrUnionV6, DescrV6, GroupApiV5,
    KernelChArgs, KernelChV4, KernelLaunchV5, NetPluginD, P2pApiV5, P2pV5, ProxyOpD, ProxyStepD,
    StateArgsV4,
};

/// Number of 8-byte words of the v5/v6 descriptor union that a START line carries.
pub const WORDS: usize = 11;

const _: () = assert!(WORDS * 8 == size_of::<DescrUnionV6>());

/// What one recorded call did. Handles and contexts are the recording plugin's values
/// (small integers); they only identify events within one log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `init` returned context `ctx` for the communicator `comm_id`; `mask_ptr` is the
    /// address of NCCL's activation mask in the recording process.
    Init {
        ctx: u64,
        comm_id: u64,
        rank: i32,
        mask_ptr: u64,
    },
    /// `startEvent` returned `handle`. `parent` is 0 for a NULL `parentObj`; `name` is the
    /// func string when the recorder printed one; `words` are the descriptor union.
    Start {
        handle: u64,
        ctx: u64,
        ty: u64,
        parent: u64,
        rank: i32,
        name: Option<String>,
        words: [u64; WORDS],
    },
    /// `stopEvent(handle)`.
    Stop { handle: u64 },
    /// `recordEventState(handle, state, args)`; `arg` is the first args word, `None` when
    /// the args pointer was NULL.
    Rec {
        handle: u64,
        state: i32,
        arg: Option<u64>,
    },
    /// `finalize(ctx)`.
    Fin { ctx: u64 },
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// `pthread_self()` of the calling thread, as printed.
    pub tid: u64,
    pub verb: Verb,
    /// 1-based line number in the log.
    pub line: usize,
}

/// A log that cannot be parsed: the 1-based line (0 when the file could not be read at all)
/// and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

impl std::error::Error for ParseError {}

/// Parses a whole log. Blank lines are skipped but still counted for line numbers.
pub fn parse_log(text: &str) -> Result<Vec<Call>, ParseError> {
    let pieces: Vec<&str> = text.split('\n').collect();
    // `split` yields a final piece after the last newline; it is empty for complete input.
    let last = pieces.len() - 1;
    let mut calls = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let line = i + 1;
        let body = piece.strip_suffix('\r').unwrap_or(piece);
        if body.trim().is_empty() {
            continue;
        }
        let call = parse_line(body, line).map_err(|mut e| {
            if i == last {
                e.msg.push_str(" (last line has no newline: truncated?)");
            }
            e
        })?;
        if i == last {
            return Err(ParseError {
                line,
                msg: "truncated: last line has no newline".to_string(),
            });
        }
        calls.push(call);
    }
    Ok(calls)
}

/// Reads and parses a log file. An unreadable file is reported as line 0.
pub fn parse_file(path: &Path) -> Result<Vec<Call>, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|e| ParseError {
        line: 0,
        msg: format!("cannot read {}: {e}", path.display()),
    })?;
    parse_log(&text)
}

fn parse_line(body: &str, line: usize) -> Result<Call, ParseError> {
    let mut f = Fields {
        toks: body.split_ascii_whitespace(),
        line,
        verb: "line",
    };
    let tid = f.hex("thread id")?;
    let verb_tok = f.next("verb")?;
    let verb = match verb_tok {
        "INIT" => {
            f.verb = "INIT";
            Verb::Init {
                ctx: f.ptr("context")?,
                comm_id: f.hex("comm id")?,
                rank: f.dec("rank")?,
                mask_ptr: f.ptr("mask pointer")?,
            }
        }
        "START" => {
            f.verb = "START";
            let handle = f.ptr("handle")?;
            let ctx = f.ptr("context")?;
            let ty = f.dec("type")?;
            let parent = f.ptr("parent")?;
            let rank = f.dec("rank")?;
            let name = match f.next("name")? {
                "-" => None,
                s => Some(s.to_string()),
            };
            let mut words = [0u64; WORDS];
            for (i, w) in words.iter_mut().enumerate() {
                *w = f.hex(WORD_NAMES[i])?;
            }
            Verb::Start {
                handle,
                ctx,
                ty,
                parent,
                rank,
                name,
                words,
            }
        }
        "STOP" => {
            f.verb = "STOP";
            Verb::Stop {
                handle: f.ptr("handle")?,
            }
        }
        "REC" => {
            f.verb = "REC";
            let handle = f.ptr("handle")?;
            let state = f.dec("state")?;
            let arg = match f.next("arg")? {
                "dead" => None,
                s => Some(parse_hex(s).ok_or_else(|| f.bad("arg", s, "hex or `dead`"))?),
            };
            Verb::Rec { handle, state, arg }
        }
        "FIN" => {
            f.verb = "FIN";
            Verb::Fin {
                ctx: f.ptr("context")?,
            }
        }
        other => {
            return Err(ParseError {
                line,
                msg: format!("unknown verb {other:?} (expected INIT, START, STOP, REC or FIN)"),
            })
        }
    };
    f.end()?;
    Ok(Call { tid, verb, line })
}

const WORD_NAMES: [&str; WORDS] = [
    "word 0", "word 1", "word 2", "word 3", "word 4", "word 5", "word 6", "word 7", "word 8",
    "word 9", "word 10",
];

/// Cursor over the space-separated fields of one line, producing errors that name the verb
/// and field.
struct Fields<'a> {
    toks: std::str::SplitAsciiWhitespace<'a>,
    line: usize,
    verb: &'static str,
}

impl<'a> Fields<'a> {
    fn err(&self, msg: String) -> ParseError {
        ParseError {
            line: self.line,
            msg: format!("{}: {msg}", self.verb),
        }
    }

    fn bad(&self, what: &str, tok: &str, expected: &str) -> ParseError {
        self.err(format!("bad {what} {tok:?} (expected {expected})"))
    }

    fn next(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.toks
            .next()
            .ok_or_else(|| self.err(format!("missing {what}")))
    }

    fn hex(&mut self, what: &str) -> Result<u64, ParseError> {
        let tok = self.next(what)?;
        parse_hex(tok).ok_or_else(|| self.bad(what, tok, "hex"))
    }

    /// A `%p` field: hex, or `(nil)` for NULL.
    fn ptr(&mut self, what: &str) -> Result<u64, ParseError> {
        let tok = self.next(what)?;
        if tok == "(nil)" {
            return Ok(0);
        }
        parse_hex(tok).ok_or_else(|| self.bad(what, tok, "pointer"))
    }

    fn dec<T: FromStr>(&mut self, what: &str) -> Result<T, ParseError> {
        let tok = self.next(what)?;
        let digits = tok.strip_prefix('-').unwrap_or(tok);
        let ok = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        ok.then(|| tok.parse().ok())
            .flatten()
            .ok_or_else(|| self.bad(what, tok, "decimal"))
    }

    fn end(mut self) -> Result<(), ParseError> {
        match self.toks.next() {
            None => Ok(()),
            Some(extra) => Err(self.err(format!("unexpected extra field {extra:?}"))),
        }
    }
}

/// Hex with an optional `0x`/`0X`; `from_str_radix` alone would also take a sign.
fn parse_hex(tok: &str) -> Option<u64> {
    let digits = tok
        .strip_prefix("0x")
        .or_else(|| tok.strip_prefix("0X"))
        .unwrap_or(tok);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

// ---------------------------------------------------------------------------------------
// Rebuilding descriptors.
// ---------------------------------------------------------------------------------------

/// Supplies live values for what a recorded descriptor can only name by its old address.
pub trait Rebase {
    /// The live handle standing for `recorded`, a non-zero handle returned by an earlier
    /// START of the same log (a parent, or a Coll/P2p `parentGroup`).
    fn handle(&mut self, recorded: u64) -> *mut c_void;
    /// A NUL-terminated copy of `s` that stays valid for as long as the plugin may read it.
    fn string(&mut self, s: &str) -> *const c_char;
}

/// Placeholder for strings whose text the log does not carry (datatype, algo, proto, CE
/// sync strategy, and func when no name is known).
pub const UNKNOWN_STR: &CStr = c"?";

/// Builds the v6 descriptor of a recorded START.
///
/// `words` are the 88 union bytes as little-endian words. Only the fields of the member
/// selected by `ty` are decoded; the rest of the union stays zero, as in NCCL's own
/// zero-initialised descriptor. `parent` and a Coll/P2p `parentGroup` go through
/// [`Rebase::handle`] (0 stays NULL); the func string of CollApi, P2pApi, Coll, P2p and
/// CeColl comes from [`Rebase::string`] with `name`, or `"?"` when `name` is `None`.
/// `netPlugin.data` is set to NULL because the recorded address points into the recording
/// process's net plugin. Buffers and streams keep their recorded values: they are opaque
/// to a profiler, but a plugin that dereferences them will crash.
pub fn descr_v6(
    ty: u64,
    parent: u64,
    rank: i32,
    name: Option<&str>,
    words: &[u64; WORDS],
    rebase: &mut dyn Rebase,
) -> DescrV6 {
    let w = UnionBytes::new(words);
    let unknown = UNKNOWN_STR.as_ptr();
    let func = name.unwrap_or("?");
    let mut d = DescrV6::zeroed();
    d.ty = ty;
    d.parent_obj = live_handle(rebase, parent);
    d.rank = rank;
    match ty {
        ty::GROUP_API => {
            d.u.group_api = GroupApiV5 {
                graph_captured: w.flag(offset_of!(GroupApiV5, graph_captured)),
                group_depth: w.i32(offset_of!(GroupApiV5, group_depth)),
            }
        }
        ty::COLL_API => {
            d.u.coll_api = CollApiV5 {
                func: rebase.string(func),
                count: w.usize(offset_of!(CollApiV5, count)),
                datatype: unknown,
                root: w.i32(offset_of!(CollApiV5, root)),
                stream: w.addr(offset_of!(CollApiV5, stream)),
                graph_captured: w.flag(offset_of!(CollApiV5, graph_captured)),
            }
        }
        ty::P2P_API => {
            d.u.p2p_api = P2pApiV5 {
                func: rebase.string(func),
                count: w.usize(offset_of!(P2pApiV5, count)),
                datatype: unknown,
                stream: w.addr(offset_of!(P2pApiV5, stream)),
                graph_captured: w.flag(offset_of!(P2pApiV5, graph_captured)),
            }
        }
        ty::KERNEL_LAUNCH => {
            d.u.kernel_launch = KernelLaunchV5 {
                stream: w.addr(offset_of!(KernelLaunchV5, stream)),
            }
        }
        ty::COLL => {
            d.u.coll = CollV5 {
                seq_number: w.u64(offset_of!(CollV5, seq_number)),
                func: rebase.string(func),
                send_buff: w.addr(offset_of!(CollV5, send_buff)),
                recv_buff: w.addr(offset_of!(CollV5, recv_buff)),
                count: w.usize(offset_of!(CollV5, count)),
                root: w.i32(offset_of!(CollV5, root)),
                datatype: unknown,
                n_channels: w.u8(offset_of!(CollV5, n_channels)),
                n_warps: w.u8(offset_of!(CollV5, n_warps)),
                algo: unknown,
                proto: unknown,
                parent_group: live_handle(rebase, w.u64(offset_of!(CollV5, parent_group))),
            }
        }
        ty::P2P => {
            d.u.p2p = P2pV5 {
                func: rebase.string(func),
                buff: w.addr(offset_of!(P2pV5, buff)),
                datatype: unknown,
                count: w.usize(offset_of!(P2pV5, count)),
                peer: w.i32(offset_of!(P2pV5, peer)),
                n_channels: w.u8(offset_of!(P2pV5, n_channels)),
                parent_group: live_handle(rebase, w.u64(offset_of!(P2pV5, parent_group))),
            }
        }
        ty::PROXY_OP => {
            d.u.proxy_op = ProxyOpD {
                pid: w.i32(offset_of!(ProxyOpD, pid)),
                channel_id: w.u8(offset_of!(ProxyOpD, channel_id)),
                peer: w.i32(offset_of!(ProxyOpD, peer)),
                n_steps: w.i32(offset_of!(ProxyOpD, n_steps)),
                chunk_size: w.i32(offset_of!(ProxyOpD, chunk_size)),
                is_send: w.i32(offset_of!(ProxyOpD, is_send)),
            }
        }
        ty::PROXY_STEP => {
            d.u.proxy_step = ProxyStepD {
                step: w.i32(offset_of!(ProxyStepD, step)),
            }
        }
        ty::KERNEL_CH => {
            d.u.kernel_ch = KernelChV4 {
                channel_id: w.u8(offset_of!(KernelChV4, channel_id)),
                p_timer: w.u64(offset_of!(KernelChV4, p_timer)),
            }
        }
        ty::NET_PLUGIN => {
            d.u.net_plugin = NetPluginD {
                id: w.u64(offset_of!(NetPluginD, id)) as i64,
                data: ptr::null_mut(),
            }
        }
        ty::CE_COLL => {
            d.u.ce_coll = CeCollV6 {
                seq_number: w.u64(offset_of!(CeCollV6, seq_number)),
                func: rebase.string(func),
                send_buff: w.addr(offset_of!(CeCollV6, send_buff)),
                recv_buff: w.addr(offset_of!(CeCollV6, recv_buff)),
                count: w.usize(offset_of!(CeCollV6, count)),
                root: w.i32(offset_of!(CeCollV6, root)),
                datatype: unknown,
                sync_strategy: unknown,
                intra_batch_sync: w.flag(offset_of!(CeCollV6, intra_batch_sync)),
                batch_size: w.u32(offset_of!(CeCollV6, batch_size)),
                num_batches: w.u32(offset_of!(CeCollV6, num_batches)),
                ce_seq_num: w.u32(offset_of!(CeCollV6, ce_seq_num)),
                stream: w.addr(offset_of!(CeCollV6, stream)),
            }
        }
        ty::CE_SYNC => {
            d.u.ce_sync = CeSyncV6 {
                is_complete: w.flag(offset_of!(CeSyncV6, is_complete)),
                n_ranks: w.i32(offset_of!(CeSyncV6, n_ranks)),
            }
        }
        ty::CE_BATCH => {
            d.u.ce_batch = CeBatchV6 {
                num_ops: w.i32(offset_of!(CeBatchV6, num_ops)),
                total_bytes: w.usize(offset_of!(CeBatchV6, total_bytes)),
                use_intra_sync: w.flag(offset_of!(CeBatchV6, use_intra_sync)),
            }
        }
        // Group and ProxyCtrl have no union member; unknown types are left zeroed rather
        // than guessed at.
        _ => {}
    }
    d
}

/// The state args of a recorded REC: the one recorded word fills all 8 bytes, so whichever
/// member the state selects reads initialised data.
pub fn state_args(arg: u64) -> StateArgsV4 {
    StateArgsV4 {
        kernel_ch: KernelChArgs { p_timer: arg },
    }
}

/// Index of the union word holding the `func` string pointer of type `ty`, if it has one.
pub fn func_word_index(ty: u64) -> Option<usize> {
    let off = match ty {
        ty::COLL_API => offset_of!(CollApiV5, func),
        ty::P2P_API => offset_of!(P2pApiV5, func),
        ty::COLL => offset_of!(CollV5, func),
        ty::P2P => offset_of!(P2pV5, func),
        ty::CE_COLL => offset_of!(CeCollV6, func),
        _ => return None,
    };
    Some(off / 8)
}

/// Maps recorded func-string addresses to their text, learnt from the START lines that
/// print a name.
///
/// The recorder prints no name for P2p, but NCCL points P2p's `func` at the same string
/// literal as the P2pApi event's, so the address identifies it (see [`resolve_name`]).
pub fn func_names(calls: &[Call]) -> HashMap<u64, String> {
    let mut names = HashMap::new();
    for call in calls {
        if let Verb::Start {
            ty,
            name: Some(name),
            words,
            ..
        } = &call.verb
        {
            if let Some(i) = func_word_index(*ty) {
                names.insert(words[i], name.clone());
            }
        }
    }
    names
}

/// The func name of a START: the printed one, else the one its func address had elsewhere
/// in the log.
pub fn resolve_name<'a>(
    ty: u64,
    name: Option<&'a str>,
    words: &[u64; WORDS],
    names: &'a HashMap<u64, String>,
) -> Option<&'a str> {
    name.or_else(|| {
        let i = func_word_index(ty)?;
        names.get(&words[i]).map(String::as_str)
    })
}

fn live_handle(rebase: &mut dyn Rebase, recorded: u64) -> *mut c_void {
    if recorded == 0 {
        ptr::null_mut()
    } else {
        rebase.handle(recorded)
    }
}

/// The union bytes of a START, read at member-struct offsets.
struct UnionBytes([u8; WORDS * 8]);

impl UnionBytes {
    fn new(words: &[u64; WORDS]) -> Self {
        let mut bytes = [0u8; WORDS * 8];
        for (chunk, w) in bytes.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        Self(bytes)
    }

    fn array<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[off..off + N]);
        a
    }

    fn u8(&self, off: usize) -> u8 {
        self.0[off]
    }

    /// C++ `bool`: any non-zero byte is true; NCCL only writes 0 or 1.
    fn flag(&self, off: usize) -> bool {
        self.0[off] != 0
    }

    fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.array(off))
    }

    fn i32(&self, off: usize) -> i32 {
        i32::from_le_bytes(self.array(off))
    }

    fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.array(off))
    }

    fn usize(&self, off: usize) -> usize {
        self.u64(off) as usize
    }

    /// A recorded address, kept as an opaque pointer value.
    fn addr(&self, off: usize) -> *mut c_void {
        self.usize(off) as *mut c_void
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evring_abi::state;
    use std::collections::HashSet;
    use std::ffi::CString;

    fn fixture(name: &str) -> (String, Vec<Call>) {
        let path = crate::fixtures_dir().join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("fixture {} must exist: {e}", path.display()));
        let calls = parse_log(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (text, calls)
    }

    /// Hands out fake live handles (recorded value + 1000) and owns the interned strings,
    /// refusing handles that no earlier START returned.
    #[derive(Default)]
    struct TestRebase {
        started: HashSet<u64>,
        strings: HashMap<String, CString>,
    }

    impl Rebase for TestRebase {
        fn handle(&mut self, recorded: u64) -> *mut c_void {
            assert!(
                self.started.contains(&recorded),
                "handle {recorded:#x} used before its START"
            );
            (recorded + 1000) as usize as *mut c_void
        }

        fn string(&mut self, s: &str) -> *const c_char {
            self.strings
                .entry(s.to_string())
                .or_insert_with(|| CString::new(s).unwrap())
                .as_ptr()
        }
    }

    fn start_of(calls: &[Call], handle: u64) -> &Verb {
        calls
            .iter()
            .map(|c| &c.verb)
            .find(|v| matches!(v, Verb::Start { handle: h, .. } if *h == handle))
            .unwrap_or_else(|| panic!("no START {handle:#x}"))
    }

    fn build(v: &Verb, names: &HashMap<u64, String>, rb: &mut TestRebase) -> DescrV6 {
        let Verb::Start {
            ty,
            parent,
            rank,
            name,
            words,
            ..
        } = v
        else {
            panic!("not a START: {v:?}")
        };
        let name = resolve_name(*ty, name.as_deref(), words, names);
        descr_v6(*ty, *parent, *rank, name, words, rb)
    }

    fn func_of(d: &DescrV6) -> Option<*const c_char> {
        // SAFETY: `descr_v6` wrote the member that `d.ty` selects.
        unsafe {
            match d.ty {
                ty::COLL_API => Some(d.u.coll_api.func),
                ty::P2P_API => Some(d.u.p2p_api.func),
                ty::COLL => Some(d.u.coll.func),
                ty::P2P => Some(d.u.p2p.func),
                ty::CE_COLL => Some(d.u.ce_coll.func),
                _ => None,
            }
        }
    }

    fn c_str(p: *const c_char) -> String {
        // SAFETY: every string pointer `descr_v6` produces is `UNKNOWN_STR` or comes from
        // `TestRebase::string`, whose CStrings outlive this call.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
    }

    #[test]
    fn fixture_counts_match_grep() {
        // (file, INIT, START, STOP, REC, FIN) as counted by `grep -c ' VERB '`.
        let expected = [
            ("A655.log", 1, 134, 133, 129, 0),
            ("A656.log", 1, 134, 133, 129, 0),
            ("B861.log", 1, 410, 409, 1109, 0),
            ("B862.log", 1, 492, 491, 1191, 0),
        ];
        for (file, init, start, stop, rec, fin) in expected {
            let (text, calls) = fixture(file);
            let count = |f: fn(&Verb) -> bool| calls.iter().filter(|c| f(&c.verb)).count();
            let got = (
                count(|v| matches!(v, Verb::Init { .. })),
                count(|v| matches!(v, Verb::Start { .. })),
                count(|v| matches!(v, Verb::Stop { .. })),
                count(|v| matches!(v, Verb::Rec { .. })),
                count(|v| matches!(v, Verb::Fin { .. })),
            );
            assert_eq!(got, (init, start, stop, rec, fin), "{file}");
            let grep = |verb: &str| text.lines().filter(|l| l.contains(verb)).count();
            assert_eq!(
                (
                    grep(" START "),
                    grep(" STOP "),
                    grep(" REC "),
                    grep(" INIT ")
                ),
                (start, stop, rec, init),
                "{file}: text and parse disagree"
            );
            assert_eq!(calls.len(), text.lines().count(), "{file}");
        }
    }

    #[test]
    fn fixture_fields_decode() {
        let (_, calls) = fixture("A655.log");
        assert_eq!(
            calls[0],
            Call {
                tid: 0x7faf_f4d0_1140,
                verb: Verb::Init {
                    ctx: 0x10001,
                    comm_id: 0xe03c_a480_0d78_d6f6,
                    rank: 0,
                    mask_ptr: 0x7faf_7b32_8120,
                },
                line: 1,
            }
        );
        assert_eq!(
            calls[2].verb,
            Verb::Rec {
                handle: 2,
                state: state::GROUP_START_API_STOP,
                arg: None
            }
        );
        // `REC 0x9 18 18`: AppendEnd with 0x18 = 24 ops, one per channel of the run.
        assert_eq!(
            calls[22].verb,
            Verb::Rec {
                handle: 9,
                state: state::PROXY_CTRL_APPEND_END,
                arg: Some(24)
            }
        );
        let Verb::Start { parent, name, .. } = start_of(&calls, 3) else {
            unreachable!()
        };
        assert_eq!((*parent, name.as_deref()), (2, Some("AllReduce")));
        let Verb::Start { parent, name, .. } = start_of(&calls, 2) else {
            unreachable!()
        };
        assert_eq!((*parent, name.as_deref()), (0, None));
    }

    #[test]
    fn every_fixture_start_builds_with_known_parents() {
        for file in ["A655.log", "A656.log", "B861.log", "B862.log"] {
            let (_, calls) = fixture(file);
            let names = func_names(&calls);
            let mut rb = TestRebase::default();
            for call in &calls {
                if let Verb::Start { handle, ty, .. } = &call.verb {
                    let d = build(&call.verb, &names, &mut rb);
                    assert_eq!(d.ty, *ty);
                    if let Some(func) = func_of(&d) {
                        assert_ne!(c_str(func), "?", "{file}:{}: unresolved func", call.line);
                    }
                    rb.started.insert(*handle);
                }
            }
        }
    }

    #[test]
    fn coll_descriptor_fields() {
        let (_, calls) = fixture("A655.log");
        let names = func_names(&calls);
        let mut rb = TestRebase::default();
        rb.started.extend([3, 7]);
        let d = build(start_of(&calls, 8), &names, &mut rb);
        assert_eq!(d.ty, ty::COLL);
        assert_eq!(d.parent_obj as usize, 1003);
        // SAFETY: `ty` is Coll, so `descr_v6` wrote the `coll` member.
        let c = unsafe { d.u.coll };
        assert_eq!(c.seq_number, 0);
        assert_eq!(c_str(c.func), "AllReduce");
        assert_eq!(c.send_buff as usize, 0x7fac_c2c0_0000);
        assert_eq!(c.count, 0x40_0000);
        assert_eq!(c.root, 0);
        assert_eq!((c.n_channels, c.n_warps), (0x18, 0x11));
        assert_eq!(c_str(c.datatype), "?");
        assert_eq!(c_str(c.algo), "?");
        assert_eq!(c.parent_group as usize, 1007);
    }

    #[test]
    fn api_kernel_and_proxy_descriptor_fields() {
        let (_, a) = fixture("A655.log");
        let names = func_names(&a);
        let mut rb = TestRebase::default();
        rb.started.extend(1..=0x60);

        let d = build(start_of(&a, 0x24), &names, &mut rb);
        // SAFETY: GroupApi START.
        let g = unsafe { d.u.group_api };
        assert_eq!((g.graph_captured, g.group_depth), (false, 3));
        let d = build(start_of(&a, 0x4d), &names, &mut rb);
        // SAFETY: GroupApi START.
        let g = unsafe { d.u.group_api };
        assert_eq!((g.graph_captured, g.group_depth), (true, 1));

        let d = build(start_of(&a, 0xb), &names, &mut rb);
        // SAFETY: KernelCh START.
        let k = unsafe { d.u.kernel_ch };
        assert_eq!((k.channel_id, k.p_timer), (1, 0x18ec_87e6_4040_54a0));

        // P2p: name resolved through the P2pApi's func address, peer and nChannels packed
        // in one word.
        let d = build(start_of(&a, 0x29), &names, &mut rb);
        // SAFETY: P2p START.
        let p = unsafe { d.u.p2p };
        assert_eq!(c_str(p.func), "Send");
        assert_eq!((p.peer, p.n_channels, p.count), (1, 16, 0x40_0000));
        assert_eq!(p.parent_group as usize, 1000 + 0x28);

        let (_, b) = fixture("B861.log");
        let d = build(start_of(&b, 0xb), &func_names(&b), &mut rb);
        // SAFETY: ProxyOp START.
        let op = unsafe { d.u.proxy_op };
        assert_eq!(
            (
                op.pid,
                op.channel_id,
                op.peer,
                op.n_steps,
                op.chunk_size,
                op.is_send
            ),
            (861, 0, 1, 8, 4 << 20, 1)
        );
    }

    #[test]
    fn unknown_and_net_plugin_types() {
        let mut rb = TestRebase::default();
        let words = [u64::MAX; WORDS];
        let d = descr_v6(1 << 40, 0, 0, None, &words, &mut rb);
        assert!(d.parent_obj.is_null());
        // SAFETY: `descr_v6` leaves the union zeroed for unknown types.
        assert_eq!(unsafe { d.u.coll.seq_number }, 0);
        let d = descr_v6(ty::NET_PLUGIN, 0, 0, None, &words, &mut rb);
        // SAFETY: NetPlugin START.
        let n = unsafe { d.u.net_plugin };
        assert_eq!(n.id, -1);
        assert!(
            n.data.is_null(),
            "recorded net data must not reach a plugin"
        );
        // SAFETY: all 8 bytes are initialised by `state_args`.
        let size = unsafe { state_args(0x20000).proxy_step.trans_size };
        assert_eq!(size, 0x20000);
    }

    #[test]
    fn accepts_optional_0x_nil_and_blank_lines() {
        let text = "\n7f START 2 0x1 512 (nil) -1 AllReduce 0x1 2 0X3 4 5 6 7 8 9 a B\n\n\
                    7f rec 2 3 4\n";
        let err = parse_log(text).unwrap_err();
        assert_eq!(err.line, 4, "verbs are case-sensitive: {err}");
        let calls = parse_log(&text.replace("rec", "REC")).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].line, 2);
        assert_eq!(
            calls[0].verb,
            Verb::Start {
                handle: 2,
                ctx: 1,
                ty: 512,
                parent: 0,
                rank: -1,
                name: Some("AllReduce".into()),
                words: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            }
        );
        assert_eq!(calls[1].line, 4);
        assert_eq!(parse_log("").unwrap(), vec![]);
        assert_eq!(parse_log("\n \n").unwrap(), vec![]);
    }

    #[test]
    fn malformed_lines_report_their_number() {
        let good = "1 STOP 0x1\n";
        let cases = [
            ("zz STOP 0x1\n", "thread id"),
            ("1 BOGUS 0x1\n", "unknown verb"),
            ("1 STOP\n", "missing handle"),
            ("1 STOP 0x1 0x2\n", "extra field"),
            ("1 STOP 0xg\n", "bad handle"),
            ("1 REC 0x1 +3 0\n", "bad state"),
            ("1 REC 0x1 3 deadbeefz\n", "bad arg"),
            ("1 INIT 0x1 abc 0 (nil) 7\n", "extra field"),
            (
                "1 START 0x2 0x1 2.5 (nil) 0 - 0 0 0 0 0 0 0 0 0 0 0\n",
                "bad type",
            ),
            (
                "1 START 0x2 0x1 2 (nil) 0 - 0 0 0 0 0 0 0 0 0 0\n",
                "missing word 10",
            ),
            ("1 FIN 12345678901234567\n", "bad context"),
        ];
        for (bad, what) in cases {
            let text = format!("{good}\n{good}{bad}{good}");
            let err = parse_log(&text).unwrap_err();
            assert_eq!(err.line, 4, "{bad:?}: {err}");
            assert!(err.msg.contains(what), "{bad:?}: {err}");
            assert!(err.to_string().starts_with("line 4: "), "{err}");
        }
    }

    #[test]
    fn truncated_last_line_is_an_error() {
        let (text, _) = fixture("B861.log");
        let lines = text.lines().count();
        // Cut inside the last line: the stub still parses as far as it goes.
        let cut = &text[..text.len() - 3];
        let err = parse_log(cut).unwrap_err();
        assert_eq!(err.line, lines, "{err}");
        // A cut inside a long START leaves it short of words.
        let start = "7f START 0x2 0x1 256 (nil) 0 - 100000000 0 0";
        let err = parse_log(&format!("1 STOP 0x1\n{start}")).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.msg.contains("missing word 3") && err.msg.contains("truncated"));
        // Complete-looking but unterminated: a hex field may have lost digits.
        let err = parse_log("1 STOP 0x1\n1 STOP 0x1").unwrap_err();
        assert_eq!((err.line, err.msg.contains("truncated")), (2, true));
    }

    #[test]
    fn unreadable_file_is_line_zero() {
        let path = Path::new("/nonexistent/evring/fixture.log");
        let err = parse_file(path).unwrap_err();
        assert_eq!(err.line, 0);
        assert!(err.msg.contains("/nonexistent/evring/fixture.log"), "{err}");
        let ok = parse_file(&crate::fixtures_dir().join("A656.log")).unwrap();
        assert_eq!(ok.len(), 397);
    }
}
