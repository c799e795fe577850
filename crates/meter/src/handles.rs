//! Which event type each live handle was started with, so that stopEvent and
//! recordEventState calls can be accounted to a type.
//!
//! Used for inner plugins other than the built-in null one (whose handles carry the type
//! themselves). Updated outside the timed windows, but on the calling thread: the meter's
//! own cost, not the inner plugin's. 64 shards, each a mutex around a hash map.
//!
//! A handle that is started again while still live (an inner plugin that hands out one
//! handle for many events) is marked [`T_UNKNOWN`](crate::stats::T_UNKNOWN); so is any
//! handle the map does not hold (NULL, or already stopped).

use crate::stats::T_UNKNOWN;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// Multiplicative hash of one pointer-sized key.
#[derive(Default)]
pub struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map = HashMap<usize, u8, BuildHasherDefault<PtrHasher>>;

const SHARDS: usize = 64;

static MAP: [Mutex<Option<Map>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];

fn shard(h: usize) -> &'static Mutex<Option<Map>> {
    let x = (h as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &MAP[(x >> 58) as usize % SHARDS]
}

/// Remembers that `h` was started with type slot `t`.
pub fn insert(h: usize, t: usize) {
    if h == 0 {
        return;
    }
    if let Ok(mut g) = shard(h).lock() {
        let m = g.get_or_insert_with(Map::default);
        m.entry(h)
            .and_modify(|old| *old = T_UNKNOWN as u8)
            .or_insert(t as u8);
    }
}

/// The type slot `h` was started with, or [`T_UNKNOWN`].
pub fn get(h: usize) -> usize {
    if h == 0 {
        return T_UNKNOWN;
    }
    shard(h)
        .lock()
        .ok()
        .and_then(|g| g.as_ref().and_then(|m| m.get(&h).copied()))
        .map_or(T_UNKNOWN, |t| t as usize)
}

/// Forgets `h` (at its stop) and returns the type slot it was started with.
pub fn remove(h: usize) -> usize {
    if h == 0 {
        return T_UNKNOWN;
    }
    shard(h)
        .lock()
        .ok()
        .and_then(|mut g| g.as_mut().and_then(|m| m.remove(&h)))
        .map_or(T_UNKNOWN, |t| t as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_semantics() {
        insert(0x1000, 3);
        assert_eq!(get(0x1000), 3);
        assert_eq!(remove(0x1000), 3);
        assert_eq!(get(0x1000), T_UNKNOWN);
        insert(0x2000, 1);
        insert(0x2000, 2); // shared handle: unknown until stopped
        assert_eq!(get(0x2000), T_UNKNOWN);
        assert_eq!(remove(0x2000), T_UNKNOWN);
        insert(0x2000, 2);
        assert_eq!(remove(0x2000), 2);
        insert(0, 1);
        assert_eq!(get(0), T_UNKNOWN);
    }
}
