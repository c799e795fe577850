//! Settings, read once from the environment at the first `init`.

use crate::abi::ty;
use crate::format::Format;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicPtr, Ordering};

/// Mask used when `NCCL_PROFILE_EVENT_MASK` is unset: collectives and p2p with
/// their GPU kernel timings (Coll | P2p | KernelCh = 70). It records every
/// operation with device time at the lowest cost that still gives device time.
pub const DEFAULT_MASK: i32 = (ty::COLL | ty::P2P | ty::KERNEL_CH) as i32;

/// `mask` with the bits its bits imply: KernelPhase (v7) events are children
/// of KernelCh ones, and NCCL turns KernelCh on whenever KernelPhase is
/// asked for; the mask evring writes says so too.
pub fn with_implied(mask: i32) -> i32 {
    if mask as u64 & ty::KERNEL_PHASE != 0 {
        mask | ty::KERNEL_CH as i32
    } else {
        mask
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Activation mask written through NCCL's pointer.
    pub mask: i32,
    /// Trace file prefix (`NCCL_PROFILE_DUMP_FILE`); `None` = no trace files.
    pub prefix: Option<String>,
    /// Event slots (`EVRING_CAPACITY`).
    pub capacity: usize,
    /// Completed-record ring size (`EVRING_RING`).
    pub ring: usize,
    /// Contexts kept at once (`EVRING_MAX_COMMS`).
    pub max_comms: usize,
    /// Above this many live events the writer completes the oldest waiting ones
    /// (`EVRING_HIGH_WATER`, percent of capacity).
    pub high_water: u64,
    /// ... down to this many.
    pub low_water: u64,
    /// A stopped event waiting on children longer than this is completed
    /// (`EVRING_MAX_AGE_MS`).
    pub max_age_ns: u64,
    /// `EVRING_DISABLE=1`: init returns a NULL context, NCCL skips us.
    pub disabled: bool,
    /// Trace file format (`EVRING_FORMAT`: `perfetto`, the default, or `json`).
    pub format: Format,
    /// Largest trace file in bytes before the stream continues in a new part
    /// (`EVRING_TRACE_LIMIT`, 0 = no limit).
    pub trace_limit: u64,
    /// Parts of one stream kept on disk, oldest removed first
    /// (`EVRING_TRACE_PARTS`, 0 = all).
    pub trace_parts: u32,
    /// The metrics sink (`EVRING_METRICS=PREFIX`; off when unset or empty).
    pub metrics: Option<crate::metrics::MetricsConfig>,
    /// Nice value the writer thread gives itself (`EVRING_WRITER_NICE`, 0–19;
    /// 0 = the process's own priority).
    pub writer_nice: i32,
    /// `EVRING_MASK_STRICT=1`: a start whose type is outside the mask is
    /// answered NULL (NCCL then sends nothing more for it), instead of being
    /// recorded as every event NCCL sends is by default.
    pub strict_mask: bool,
}

impl Config {
    pub fn from_env() -> Config {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As `from_env`, printing one warning per bad value on stderr (the
    /// engine, and so NCCL's logger, does not exist yet).
    pub fn from_env_warn() -> Config {
        let (cfg, warnings) = Self::checked(|k| std::env::var(k).ok());
        for w in warnings {
            eprintln!("evring WARN evring: {w}");
        }
        cfg
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        Self::checked(get).0
    }

    /// The settings, and one message for each value that was not used as given.
    pub fn checked(get: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let warnings = std::cell::RefCell::new(Vec::new());
        let num = |k: &str, default: u64, min: u64, max: u64| -> u64 {
            let Some(v) = get(k) else { return default };
            match parse_int(&v) {
                Some(n) if (min as i64..=max as i64).contains(&n) => n as u64,
                Some(n) => {
                    let used = n.clamp(min as i64, max as i64) as u64;
                    warnings
                        .borrow_mut()
                        .push(format!("{k}={v} is outside {min}..={max}; using {used}"));
                    used
                }
                None => {
                    warnings.borrow_mut().push(format!(
                        "{k}={v:?} is not a number; using the default {default}"
                    ));
                    default
                }
            }
        };
        let capacity = num("EVRING_CAPACITY", 1 << 16, 64, 1 << 20) as usize;
        let hw_pct = num("EVRING_HIGH_WATER", 75, 10, 95);
        let high_water = capacity as u64 * hw_pct / 100;
        let mask = match get("NCCL_PROFILE_EVENT_MASK") {
            None => DEFAULT_MASK,
            Some(v) => match parse_int(&v) {
                Some(m) if (0..=i32::MAX as i64).contains(&m) => with_implied(m as i32),
                _ => {
                    warnings.borrow_mut().push(format!(
                        "NCCL_PROFILE_EVENT_MASK={v:?} is not a mask; using the default {DEFAULT_MASK}"
                    ));
                    DEFAULT_MASK
                }
            },
        };
        let prefix = match get("NCCL_PROFILE_DUMP_FILE") {
            Some(p) if p.is_empty() => None,
            Some(p) => Some(p),
            None => Some("evring".to_string()),
        };
        let disabled = match get("EVRING_DISABLE").as_deref() {
            None | Some("") | Some("0") => false,
            Some("1") => true,
            Some(v) => {
                warnings.borrow_mut().push(format!(
                    "EVRING_DISABLE={v:?} is neither 0 nor 1; using the default 0 (enabled)"
                ));
                false
            }
        };
        let strict_mask = match get("EVRING_MASK_STRICT").as_deref() {
            None | Some("") | Some("0") => false,
            Some("1") => true,
            Some(v) => {
                warnings.borrow_mut().push(format!(
                    "EVRING_MASK_STRICT={v:?} is neither 0 nor 1; using the default 0 (record every event NCCL sends)"
                ));
                false
            }
        };
        let format = match get("EVRING_FORMAT") {
            None => Format::default(),
            Some(v) if v.is_empty() => Format::default(),
            Some(v) => Format::parse(&v).unwrap_or_else(|| {
                warnings.borrow_mut().push(format!(
                    "EVRING_FORMAT={v:?} is neither perfetto nor json; using perfetto"
                ));
                Format::default()
            }),
        };
        let trace_limit = match get("EVRING_TRACE_LIMIT") {
            None => 0,
            Some(v) => match crate::recorder::parse_size(&v) {
                // Below 64 KiB a file would hold little more than its header.
                Some(0) => 0,
                Some(n) if n < 1 << 16 => {
                    warnings
                        .borrow_mut()
                        .push(format!("EVRING_TRACE_LIMIT={v} is below 64K; using 64K"));
                    1 << 16
                }
                Some(n) => n,
                None => {
                    warnings.borrow_mut().push(format!(
                        "EVRING_TRACE_LIMIT={v:?} is not a size (e.g. 512M); no limit"
                    ));
                    0
                }
            },
        };
        let trace_parts = num("EVRING_TRACE_PARTS", 0, 0, 1 << 20) as u32;
        let metrics = match get("EVRING_METRICS") {
            Some(prefix) if !prefix.is_empty() => {
                let interval_ns = match get("EVRING_METRICS_INTERVAL") {
                    None => 10_000_000_000,
                    Some(v) => match crate::metrics::parse_interval(&v) {
                        Some(ns) if ns >= 100_000_000 => ns,
                        Some(_) => {
                            warnings.borrow_mut().push(format!(
                                "EVRING_METRICS_INTERVAL={v} is below 100ms; using 100ms"
                            ));
                            100_000_000
                        }
                        None => {
                            warnings.borrow_mut().push(format!(
                                "EVRING_METRICS_INTERVAL={v:?} is not a duration (10, 10s, 250ms); using 10s"
                            ));
                            10_000_000_000
                        }
                    },
                };
                Some(crate::metrics::MetricsConfig {
                    prefix,
                    interval_ns,
                    max_series: num("EVRING_METRICS_MAX_SERIES", 512, 1, 1 << 20) as usize,
                })
            }
            _ => None,
        };
        let cfg = Config {
            mask,
            prefix,
            capacity,
            ring: num("EVRING_RING", 1 << 16, 16, 1 << 22) as usize,
            max_comms: num("EVRING_MAX_COMMS", 1024, 4, 1 << 16) as usize,
            high_water,
            low_water: high_water - high_water / 5,
            max_age_ns: num("EVRING_MAX_AGE_MS", 30_000, 1, 86_400_000) * 1_000_000,
            disabled,
            format,
            trace_limit,
            trace_parts,
            metrics,
            writer_nice: num("EVRING_WRITER_NICE", 0, 0, 19) as i32,
            strict_mask,
        };
        (cfg, warnings.into_inner())
    }
}

/// NCCL's activation-mask int, as the last `init` passed it. NCCL may change
/// the mask out of band (and re-applies it after each init), so footers and
/// metrics read the mask in force through it rather than trusting the one
/// evring asked for.
static NCCL_MASK: AtomicPtr<i32> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps the mask pointer an `init` was given (NULL and misaligned ones are ignored).
pub fn remember_nccl_mask(p: *mut i32) {
    if !p.is_null() && p.is_aligned() {
        NCCL_MASK.store(p, Ordering::Release);
    }
}

/// The mask in force: NCCL's int, read now; `None` before any init gave one.
pub fn nccl_mask() -> Option<i32> {
    let p = NCCL_MASK.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is the non-null, aligned pointer NCCL passed to init: its
    // process-wide mask int, which lives as long as libnccl and which NCCL
    // itself reads and writes atomically (the engine writes it the same way).
    Some(unsafe { AtomicI32::from_ptr(p) }.load(Ordering::Relaxed))
}

/// Settings given through the control functions before the first init. They
/// are applied when the engine is built (at the first init), so a call such as
/// `evring_get_mask` before init never freezes the environment of its moment.
static PENDING_MASK: AtomicI64 = AtomicI64::new(NONE);
static PENDING_OUTPUT: AtomicI32 = AtomicI32::new(-1);
const NONE: i64 = i64::MIN;

pub struct Pending {
    pub mask: Option<i32>,
    pub output: Option<bool>,
}

pub fn set_pending_mask(mask: i32) {
    PENDING_MASK.store(i64::from(mask), Ordering::Release);
}

pub fn set_pending_output(on: bool) {
    PENDING_OUTPUT.store(i32::from(on), Ordering::Release);
}

/// The mask the first init will use: a pending `evring_set_mask`, else the
/// environment's.
pub fn pending_or_env_mask() -> i32 {
    match PENDING_MASK.load(Ordering::Acquire) {
        NONE => Config::from_env().mask,
        m => m as i32,
    }
}

/// Takes the pending settings (once, when the engine is built).
pub fn take_pending() -> Pending {
    let m = PENDING_MASK.swap(NONE, Ordering::AcqRel);
    let o = PENDING_OUTPUT.swap(-1, Ordering::AcqRel);
    Pending {
        mask: (m != NONE).then_some(m as i32),
        output: (o >= 0).then_some(o == 1),
    }
}

/// Decimal, or hex with a 0x prefix (NCCL's example plugin accepts both).
pub fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = Config::from_lookup(|_| None);
        assert_eq!(c.mask, 70);
        assert_eq!(c.prefix.as_deref(), Some("evring"));
        assert_eq!(c.capacity, 65536);
        // Log entries (one per start, stop, state): docs/shim.md, "Settings".
        assert_eq!(c.ring, 65536);
        assert!(
            !c.strict_mask,
            "every event NCCL sends is recorded by default"
        );
        let (c, w) = Config::checked(|k| (k == "EVRING_MASK_STRICT").then(|| "1".into()));
        assert!(c.strict_mask && w.is_empty());
        let (c, w) = Config::checked(|k| (k == "EVRING_MASK_STRICT").then(|| "yes".into()));
        assert!(!c.strict_mask);
        assert!(
            w.len() == 1 && w[0].contains("EVRING_MASK_STRICT=\"yes\""),
            "{w:?}"
        );
        assert!(c.low_water < c.high_water && c.high_water < c.capacity as u64);
        let c = Config::from_lookup(|k| match k {
            "NCCL_PROFILE_EVENT_MASK" => Some("0xFFF".into()),
            "NCCL_PROFILE_DUMP_FILE" => Some(String::new()),
            "EVRING_CAPACITY" => Some("1".into()),
            _ => None,
        });
        assert_eq!((c.mask, c.prefix, c.capacity), (4095, None, 64));
        assert_eq!(parse_int(" 6 "), Some(6));
        // KernelPhase (1 << 15) brings KernelCh (1 << 6) with it.
        let c = Config::from_lookup(|k| (k == "NCCL_PROFILE_EVENT_MASK").then(|| "0x8002".into()));
        assert_eq!(c.mask, 0x8042);
        assert_eq!(with_implied(2), 2);
        assert_eq!(parse_int("zz"), None);
    }

    #[test]
    fn bad_values_warn_once_each_naming_value_and_default() {
        let (c, w) = Config::checked(|k| match k {
            "EVRING_CAPACITY" => Some("lots".into()),
            "EVRING_RING" => Some("3".into()),
            "EVRING_DISABLE" => Some("yes".into()),
            "NCCL_PROFILE_EVENT_MASK" => Some("-1".into()),
            "EVRING_MAX_COMMS" => Some("64".into()),
            _ => None,
        });
        assert_eq!(
            (c.capacity, c.ring, c.disabled, c.mask, c.max_comms),
            (65536, 16, false, 70, 64)
        );
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(
            w[0].contains("EVRING_CAPACITY=\"lots\"") && w[0].contains("65536"),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|m| m.contains("EVRING_RING=3") && m.contains("using 16")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|m| m.contains("EVRING_DISABLE") && m.contains("yes")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|m| m.contains("NCCL_PROFILE_EVENT_MASK") && m.contains("70")),
            "{w:?}"
        );
        assert!(Config::checked(|_| None).1.is_empty());
    }

    #[test]
    fn trace_format_and_limits() {
        let c = Config::from_lookup(|_| None);
        assert_eq!(
            (c.format, c.trace_limit, c.trace_parts),
            (Format::Perfetto, 0, 0)
        );
        let (c, w) = Config::checked(|k| match k {
            "EVRING_FORMAT" => Some("JSON".into()),
            "EVRING_TRACE_LIMIT" => Some("512M".into()),
            "EVRING_TRACE_PARTS" => Some("3".into()),
            _ => None,
        });
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            (c.format, c.trace_limit, c.trace_parts),
            (Format::Json, 512 << 20, 3)
        );
        let (c, w) = Config::checked(|k| match k {
            "EVRING_FORMAT" => Some("xml".into()),
            "EVRING_TRACE_LIMIT" => Some("1K".into()),
            _ => None,
        });
        assert_eq!((c.format, c.trace_limit), (Format::Perfetto, 64 << 10));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("xml") || w[1].contains("xml"), "{w:?}");
        let (c, w) = Config::checked(|k| (k == "EVRING_TRACE_LIMIT").then(|| "big".to_string()));
        assert_eq!((c.trace_limit, w.len()), (0, 1));
    }

    #[test]
    fn writer_nice_is_read_and_clamped() {
        assert_eq!(Config::checked(|_| None).0.writer_nice, 0);
        let nice = |v: &str| {
            let (c, w) = Config::checked(|k| (k == "EVRING_WRITER_NICE").then(|| v.to_string()));
            (c.writer_nice, w.len())
        };
        assert_eq!(nice("10"), (10, 0));
        assert_eq!(nice("40").0, 19);
        assert_eq!(nice("-5").1, 1, "not a number in range: warned");
    }
}
