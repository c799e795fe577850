//! The inner plugin: loaded from `EVRING_METER_PLUGIN`, or the built-in null plugin.

use crate::stats::{type_slot, T_UNKNOWN};
use evring_abi::{InitV4, InitV5, Logger, NcclResult, NCCL_SUCCESS};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// `startEvent` of any version, with the descriptor left opaque.
pub type StartFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut c_void) -> NcclResult;
/// `stopEvent`.
pub type StopFn = unsafe extern "C" fn(*mut c_void) -> NcclResult;
/// `recordEventState` of any version, with the state arguments left opaque.
pub type RecordFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> NcclResult;
/// `finalize`.
pub type FinalizeFn = unsafe extern "C" fn(*mut c_void) -> NcclResult;

/// The two shapes of `init` among the versions the meter exports: v4's, and the one v5,
/// v6 and v7 share (`commId` before the mask; NCCL's `profiler_v7.h` keeps v6's init).
#[derive(Clone, Copy)]
pub enum Init {
    V4(InitV4),
    V5(InitV5),
}

/// Any `ncclProfiler_vN` table (v1 to v7 all put `name` and the five pointers at offsets
/// 0, 8, …, 40), read as raw pointers.
#[repr(C)]
struct RawTable {
    name: *const c_char,
    fns: [*const c_void; 5],
}

/// A loaded inner plugin.
pub struct Inner {
    /// The table version (the one NCCL called the meter through).
    pub version: u32,
    /// `EVRING_METER_PLUGIN` as given, or "null".
    pub path: String,
    /// The table's `name`.
    pub name: String,
    /// The built-in null plugin: handles carry the event type (see [`null_slot`]).
    pub null: bool,
    pub init: Init,
    pub start: StartFn,
    pub stop: StopFn,
    pub record: RecordFn,
    pub finalize: FinalizeFn,
}

/// Reads the event type of a descriptor of table version `version` as a type slot.
///
/// # Safety
/// `d` is NULL or points at a descriptor of that version.
#[inline]
pub unsafe fn descr_slot(version: u32, d: *const c_void) -> usize {
    if d.is_null() {
        return T_UNKNOWN;
    }
    let ty = if version == 4 {
        // SAFETY: a v4 descriptor starts with its `uint8_t type` (caller).
        u64::from(unsafe { *(d as *const u8) })
    } else {
        // SAFETY: v5 to v7 descriptors start with `uint64_t type`, 8-byte aligned (caller).
        unsafe { *(d as *const u64) }
    };
    type_slot(ty)
}

/// The null plugin's handles are the event's type slot plus one.
#[inline]
pub fn null_slot(h: *mut c_void) -> usize {
    match h as usize {
        n @ 1..=17 => n - 1,
        _ => T_UNKNOWN,
    }
}

/// Parses a mask as C's `strtol(s, 0, 0)` would for a whole-string number.
pub fn parse_mask(s: &str) -> Option<c_int> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        i64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse::<i64>().ok()?
    };
    Some((if neg { -v } else { v }) as c_int)
}

/// The null plugin's init: applies `NCCL_PROFILE_EVENT_MASK` to the mask, context 1.
///
/// # Safety
/// `ctx` and `mask` are NULL or valid for writes.
unsafe fn null_init(ctx: *mut *mut c_void, mask: *mut c_int) -> NcclResult {
    if !mask.is_null() {
        if let Some(m) = std::env::var("NCCL_PROFILE_EVENT_MASK")
            .ok()
            .and_then(|v| parse_mask(&v))
        {
            // SAFETY: `mask` is valid for writes (caller).
            unsafe { *mask = m };
        }
    }
    if !ctx.is_null() {
        // SAFETY: `ctx` is valid for writes (caller).
        unsafe { *ctx = std::ptr::without_provenance_mut(1) };
    }
    NCCL_SUCCESS
}

unsafe extern "C" fn null_init_v4(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    _name: *const c_char,
    _hash: u64,
    _nn: c_int,
    _nr: c_int,
    _rank: c_int,
    _log: Logger,
) -> NcclResult {
    // SAFETY: NCCL passes writable `ctx` and `mask`.
    unsafe { null_init(ctx, mask) }
}

unsafe extern "C" fn null_init_v5(
    ctx: *mut *mut c_void,
    _id: u64,
    mask: *mut c_int,
    _name: *const c_char,
    _nn: c_int,
    _nr: c_int,
    _rank: c_int,
    _log: Logger,
) -> NcclResult {
    // SAFETY: NCCL passes writable `ctx` and `mask`.
    unsafe { null_init(ctx, mask) }
}

unsafe extern "C" fn null_start_v4(
    _ctx: *mut c_void,
    h: *mut *mut c_void,
    d: *mut c_void,
) -> NcclResult {
    if !h.is_null() {
        // SAFETY: `d` is a v4 descriptor or NULL, `h` writable (NCCL's contract).
        unsafe { *h = (descr_slot(4, d) + 1) as *mut c_void };
    }
    NCCL_SUCCESS
}

unsafe extern "C" fn null_start_v5(
    _ctx: *mut c_void,
    h: *mut *mut c_void,
    d: *mut c_void,
) -> NcclResult {
    if !h.is_null() {
        // SAFETY: `d` is a v5+ descriptor or NULL, `h` writable (NCCL's contract).
        unsafe { *h = (descr_slot(5, d) + 1) as *mut c_void };
    }
    NCCL_SUCCESS
}

unsafe extern "C" fn null_stop(_h: *mut c_void) -> NcclResult {
    NCCL_SUCCESS
}

unsafe extern "C" fn null_record(_h: *mut c_void, _s: c_int, _a: *mut c_void) -> NcclResult {
    NCCL_SUCCESS
}

unsafe extern "C" fn null_finalize(_ctx: *mut c_void) -> NcclResult {
    NCCL_SUCCESS
}

/// The built-in null plugin as table version `version`.
pub fn null(version: u32) -> Inner {
    Inner {
        version,
        path: "null".into(),
        name: "null".into(),
        null: true,
        init: if version == 4 {
            Init::V4(null_init_v4)
        } else {
            Init::V5(null_init_v5)
        },
        start: if version == 4 {
            null_start_v4
        } else {
            null_start_v5
        },
        stop: null_stop,
        record: null_record,
        finalize: null_finalize,
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// A private copy of `path` in the temp dir, for `EVRING_METER_ISOLATE=1`: two meter
/// instances in one process (the simulator opens one copy of the plugin per simulated
/// process) then get two instances of the inner plugin too, as they would without the
/// meter. The copy is unlinked once loaded.
fn private_copy(path: &str) -> Result<std::path::PathBuf, String> {
    static MARK: u8 = 0;
    let dst = std::env::temp_dir().join(format!(
        "evring-meter-inner-{}-{:x}.so",
        std::process::id(),
        &MARK as *const u8 as usize
    ));
    std::fs::copy(path, &dst).map_err(|e| format!("cannot copy it to {}: {e}", dst.display()))?;
    Ok(dst)
}

/// Loads the inner plugin named by `EVRING_METER_PLUGIN` (unset, empty or "null": the
/// built-in one) and takes its table of version `version`.
pub fn load(version: u32) -> Result<Inner, String> {
    let path = std::env::var("EVRING_METER_PLUGIN").unwrap_or_default();
    if path.is_empty() || path == "null" {
        return Ok(null(version));
    }
    let isolate = std::env::var("EVRING_METER_ISOLATE").is_ok_and(|v| v == "1");
    let file = if isolate {
        private_copy(&path)?
    } else {
        std::path::PathBuf::from(&path)
    };
    let c = CString::new(file.as_os_str().as_encoded_bytes())
        .map_err(|_| "the path contains a NUL byte".to_string())?;
    // SAFETY: `c` is a NUL-terminated path; loading runs the library's initialisers,
    // which is what the user asked for by naming it.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if isolate {
        let _ = std::fs::remove_file(&file);
    }
    if lib.is_null() {
        return Err(dlerror());
    }
    let sym = CString::new(format!("ncclProfiler_v{version}")).map_err(|e| e.to_string())?;
    // SAFETY: `lib` is an open handle and `sym` NUL-terminated.
    let t = unsafe { libc::dlsym(lib, sym.as_ptr()) } as *const RawTable;
    if t.is_null() {
        return Err(format!("it exports no {}", sym.to_string_lossy()));
    }
    // SAFETY: a non-NULL `ncclProfiler_vN` symbol is that version's table, which starts
    // with a name pointer and five function pointers (RawTable's layout); the library is
    // never closed, so the table stays valid.
    let raw = unsafe { t.read() };
    if raw.fns.iter().any(|f| f.is_null()) {
        return Err(format!("its {} has a NULL function", sym.to_string_lossy()));
    }
    let name = if raw.name.is_null() {
        String::new()
    } else {
        // SAFETY: a non-NULL `name` is a NUL-terminated string in the library.
        unsafe { CStr::from_ptr(raw.name) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: slot 0 is a non-NULL function pointer of the table's C init type, which is
    // v4's for version 4 and v5's for versions 5 to 7, as NCCL's headers declare it.
    let init = unsafe {
        if version == 4 {
            Init::V4(std::mem::transmute::<*const c_void, InitV4>(raw.fns[0]))
        } else {
            Init::V5(std::mem::transmute::<*const c_void, InitV5>(raw.fns[0]))
        }
    };
    // SAFETY: slots 1 to 4 are non-NULL function pointers of the table's C types; the
    // opaque-pointer types here have the same ABI (pointers and ints in, int out).
    let (start, stop, record, finalize) = unsafe {
        (
            std::mem::transmute::<*const c_void, StartFn>(raw.fns[1]),
            std::mem::transmute::<*const c_void, StopFn>(raw.fns[2]),
            std::mem::transmute::<*const c_void, RecordFn>(raw.fns[3]),
            std::mem::transmute::<*const c_void, FinalizeFn>(raw.fns[4]),
        )
    };
    Ok(Inner {
        version,
        path,
        name,
        null: false,
        init,
        start,
        stop,
        record,
        finalize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_parse_like_strtol() {
        assert_eq!(parse_mask("70"), Some(70));
        assert_eq!(parse_mask("0xFFF"), Some(4095));
        assert_eq!(parse_mask("010"), Some(8));
        assert_eq!(parse_mask("0"), Some(0));
        assert_eq!(parse_mask("-1"), Some(-1));
        assert_eq!(parse_mask("x"), None);
    }

    #[test]
    fn null_handles_carry_the_type() {
        let mut d = [0u64; 14];
        d[0] = 1 << 4;
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: `d` is large and aligned enough for a v5 descriptor's first field.
        unsafe { null_start_v5(std::ptr::null_mut(), &mut h, d.as_mut_ptr().cast()) };
        assert_eq!(null_slot(h), 4);
        d[0] = 3;
        // SAFETY: as above.
        unsafe { null_start_v5(std::ptr::null_mut(), &mut h, d.as_mut_ptr().cast()) };
        assert_eq!(null_slot(h), T_UNKNOWN);
        assert_eq!(null_slot(std::ptr::null_mut()), T_UNKNOWN);
    }
}
