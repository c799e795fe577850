//! Cost attribution builds: a diagnostic, never part of a normal build.
//!
//! `benches/ablate.sh` builds the shim once as is and once per
//! `--cfg evring_ablate="…"` value, then times the same benches on each
//! build, to say how much of a hot path each cost is (docs/performance.md,
//! "Round 5: where the time goes"). With `--cfg evring_ablate="locks"`,
//! [`CasWeak::cas_weak`] — the compare-exchange of the slab's retire and of
//! the shim's reference word — is a load and a store: what the path would
//! cost without those locked instructions. Such a build is wrong as soon as
//! two threads touch one event; it exists to time single-thread benches.
//! Without the cfg, `cas_weak` is `compare_exchange_weak` itself.
//!
//! One more value takes nothing out: `evring_ablate="selftime"` (the shim's
//! `selftime` module) times every entry point of the plugin from inside, for
//! the plugin's own cost on real NCCL's threads ("Round 6"); it combines with
//! the others. And `evring_ablate="prefetch"` takes out the prefetch hints of
//! the `hint` module (correct, only slower where the hints help: "Round 7").
//! `evring_ablate="floor"` replaces the shim's whole event path by a log of
//! the calls (the shim's `floor` module: what any design pays on NCCL's
//! thread, "Round 9"); with `ring` and `clock` it shows what the record write
//! and the clock read of each call cost.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// `compare_exchange_weak`, or under `evring_ablate="locks"` an unlocked
/// load and store with the same result on one thread.
pub trait CasWeak {
    /// The atomic's value type.
    type Value;

    /// As the atomic's `compare_exchange_weak`.
    fn cas_weak(
        &self,
        current: Self::Value,
        new: Self::Value,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Value, Self::Value>;
}

macro_rules! cas_weak_for {
    ($atomic:ty, $value:ty) => {
        impl CasWeak for $atomic {
            type Value = $value;

            #[inline(always)]
            fn cas_weak(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                #[cfg(evring_ablate = "locks")]
                {
                    let _ = (success, failure);
                    let now = self.load(Ordering::Relaxed);
                    if now != current {
                        return Err(now);
                    }
                    self.store(new, Ordering::Relaxed);
                    Ok(now)
                }
                #[cfg(not(evring_ablate = "locks"))]
                self.compare_exchange_weak(current, new, success, failure)
            }
        }
    };
}

cas_weak_for!(AtomicU64, u64);
cas_weak_for!(AtomicU32, u32);

#[cfg(all(test, not(evring_loom)))]
mod tests {
    use super::CasWeak;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    fn add_one<A: CasWeak>(
        a: &A,
        load: impl Fn(&A) -> A::Value,
        next: impl Fn(A::Value) -> A::Value,
    ) where
        A::Value: Copy,
    {
        let mut cur = load(a);
        while let Err(now) = a.cas_weak(cur, next(cur), Ordering::AcqRel, Ordering::Relaxed) {
            cur = now;
        }
    }

    /// In a normal build `cas_weak` is a real compare-exchange: increments
    /// from several threads are never lost (the `locks` ablation loses them).
    #[test]
    fn cas_weak_is_atomic_in_a_normal_build() {
        let (a64, a32) = (AtomicU64::new(0), AtomicU32::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50_000 {
                        add_one(&a64, |a| a.load(Ordering::Relaxed), |v| v + 1);
                        add_one(&a32, |a| a.load(Ordering::Relaxed), |v| v + 1);
                    }
                });
            }
        });
        assert_eq!(a64.load(Ordering::Relaxed), 200_000);
        assert_eq!(a32.load(Ordering::Relaxed), 200_000);
        // A failed exchange reports the value it found.
        assert_eq!(
            a64.cas_weak(7, 8, Ordering::AcqRel, Ordering::Relaxed),
            Err(200_000)
        );
    }
}
