//! Bytes, algorithm bandwidth and bus bandwidth of a collective or p2p
//! operation, as NCCL's own performance tests define them (their
//! `doc/PERFORMANCE.md`): `algbw = size / time`, `busbw = algbw × factor`,
//! where the factor turns the operation's size into the bytes each rank's
//! slowest link must carry, so every collective compares with the link speed.
//!
//! | operation | size | busBw factor |
//! |---|---|---|
//! | AllReduce | count × type size | 2(n−1)/n |
//! | AllGather | count × type size × n (the output) | (n−1)/n |
//! | ReduceScatter | count × type size × n (the input) | (n−1)/n |
//! | AllToAll | count × type size × n | (n−1)/n |
//! | Broadcast, Reduce | count × type size | 1 |
//! | Send, Recv | count × type size | 1 |
//!
//! `count` is the profiler's: NCCL reports AllGather and Broadcast with the
//! byte type (`ncclInt8`) and the count in bytes, which the size above
//! already handles, since it multiplies by the reported type's size.
//! docs/report.md has the same table.

/// Size in bytes of one element of NCCL's datatype `name` (`ncclFloat32`,
/// `float32`, `Float32`...); `None` for a name NCCL does not have.
pub fn type_size(name: &str) -> Option<u64> {
    let n = name.trim();
    let n = n.strip_prefix("ncclDataType_").unwrap_or(n);
    let n = n.strip_prefix("nccl").unwrap_or(n).to_ascii_lowercase();
    Some(match n.as_str() {
        "int8" | "char" | "uint8" | "float8e4m3" | "float8e5m2" | "fp8e4m3" | "fp8e5m2" => 1,
        "float16" | "half" | "bfloat16" => 2,
        "int32" | "int" | "uint32" | "float32" | "float" => 4,
        "int64" | "uint64" | "float64" | "double" => 8,
        _ => return None,
    })
}

/// How an operation's size and bus factor are defined (the table above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    AllReduce,
    /// AllGather, ReduceScatter, AllToAll: size counts every rank's part.
    Gathered,
    /// Broadcast, Reduce, Send, Recv and anything unknown.
    OneToOne,
}

impl Shape {
    pub fn of(func: &str) -> Shape {
        match func.to_ascii_lowercase().as_str() {
            "allreduce" => Shape::AllReduce,
            "allgather" | "reducescatter" | "alltoall" | "alltoallv" => Shape::Gathered,
            _ => Shape::OneToOne,
        }
    }

    /// Bytes of one operation of `count` elements of `type_size` bytes on `n` ranks.
    pub fn bytes(self, count: u64, type_size: u64, n: u32) -> u64 {
        let b = count.saturating_mul(type_size);
        match self {
            Shape::Gathered => b.saturating_mul(n.max(1) as u64),
            _ => b,
        }
    }

    /// busBw / algBw on `n` ranks.
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Shape::AllReduce => 2.0 * (n - 1.0) / n,
            Shape::Gathered => (n - 1.0) / n,
            Shape::OneToOne => 1.0,
        }
    }
}

/// Bytes per nanosecond is GB/s (10^9 bytes per second), NCCL's unit.
pub fn gb_per_s(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        bytes as f64 / ns as f64
    }
}

/// The power-of-two size bucket of `bytes`: 0 for 0 bytes, else `k + 1` for
/// `2^k <= bytes < 2^(k+1)`.
pub fn size_bucket(bytes: u64) -> u8 {
    if bytes == 0 {
        0
    } else {
        64 - bytes.leading_zeros() as u8
    }
}

/// The label of a bucket: its lower bound, `0`, `1`, `2`, ... `512`, `1K`,
/// ... `1M`, `1G`, `1T` (binary units); the bucket holds sizes from there to
/// just below twice that.
pub fn bucket_label(bucket: u8) -> String {
    if bucket == 0 {
        return "0".into();
    }
    let low = 1u64 << (bucket - 1);
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if low >= 1 << shift {
            return format!("{}{unit}", low >> shift);
        }
    }
    low.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_factors() {
        assert_eq!(Shape::of("AllReduce").bus_factor(8), 2.0 * 7.0 / 8.0);
        assert_eq!(Shape::of("AllGather").bus_factor(8), 7.0 / 8.0);
        assert_eq!(Shape::of("ReduceScatter").bus_factor(4), 0.75);
        assert_eq!(Shape::of("AllToAll").bus_factor(2), 0.5);
        assert_eq!(Shape::of("Broadcast").bus_factor(8), 1.0);
        assert_eq!(Shape::of("Reduce").bus_factor(8), 1.0);
        assert_eq!(Shape::of("Send").bus_factor(8), 1.0);
        assert_eq!(Shape::of("Recv").bus_factor(2), 1.0);
    }

    #[test]
    fn sizes() {
        assert_eq!(type_size("ncclFloat32"), Some(4));
        assert_eq!(type_size("ncclBfloat16"), Some(2));
        assert_eq!(type_size("ncclInt8"), Some(1));
        assert_eq!(type_size("ncclUint64"), Some(8));
        assert_eq!(type_size("nope"), None);
        assert_eq!(Shape::of("AllGather").bytes(1000, 4, 8), 32_000);
        assert_eq!(Shape::of("AllReduce").bytes(1000, 4, 8), 4000);
    }

    #[test]
    fn buckets() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1), 1);
        assert_eq!(size_bucket(4095), 12);
        assert_eq!(size_bucket(4096), 13);
        assert_eq!(bucket_label(size_bucket(4096)), "4K");
        assert_eq!(bucket_label(size_bucket(8191)), "4K");
        assert_eq!(bucket_label(size_bucket(3 << 20)), "2M");
        assert_eq!(bucket_label(size_bucket(100)), "64");
        assert_eq!(bucket_label(0), "0");
        assert_eq!(gb_per_s(2000, 1000), 2.0);
    }
}
