//! Settings, read once from the environment at the first `init`.

use crate::abi::ty;

/// Mask used when `NCCL_PROFILE_EVENT_MASK` is unset: collectives and p2p with
/// their GPU kernel timings (Coll | P2p | KernelCh = 70). It records every
/// operation with device time at the lowest cost that still gives device time.
pub const DEFAULT_MASK: i32 = (ty::COLL | ty::P2P | ty::KERNEL_CH) as i32;

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
}

impl Config {
    pub fn from_env() -> Config {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let num = |k: &str, default: u64, min: u64, max: u64| -> u64 {
            get(k)
                .and_then(|v| parse_int(&v))
                .map(|v| v.clamp(min as i64, max as i64) as u64)
                .unwrap_or(default)
        };
        let capacity = num("EVRING_CAPACITY", 1 << 16, 64, 1 << 20) as usize;
        let hw_pct = num("EVRING_HIGH_WATER", 75, 10, 95);
        let high_water = capacity as u64 * hw_pct / 100;
        let mask = get("NCCL_PROFILE_EVENT_MASK")
            .and_then(|v| parse_int(&v))
            .map(|m| m as i32)
            .unwrap_or(DEFAULT_MASK);
        let prefix = match get("NCCL_PROFILE_DUMP_FILE") {
            Some(p) if p.is_empty() => None,
            Some(p) => Some(p),
            None => Some("evring".to_string()),
        };
        Config {
            mask,
            prefix,
            capacity,
            ring: num("EVRING_RING", 1 << 14, 16, 1 << 22) as usize,
            max_comms: num("EVRING_MAX_COMMS", 1024, 4, 1 << 16) as usize,
            high_water,
            low_water: high_water - high_water / 5,
            max_age_ns: num("EVRING_MAX_AGE_MS", 30_000, 1, 86_400_000) * 1_000_000,
            disabled: get("EVRING_DISABLE").is_some_and(|v| v == "1"),
        }
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
        assert!(c.low_water < c.high_water && c.high_water < c.capacity as u64);
        let c = Config::from_lookup(|k| match k {
            "NCCL_PROFILE_EVENT_MASK" => Some("0xFFF".into()),
            "NCCL_PROFILE_DUMP_FILE" => Some(String::new()),
            "EVRING_CAPACITY" => Some("1".into()),
            _ => None,
        });
        assert_eq!((c.mask, c.prefix, c.capacity), (4095, None, 64));
        assert_eq!(parse_int(" 6 "), Some(6));
        assert_eq!(parse_int("zz"), None);
    }
}
