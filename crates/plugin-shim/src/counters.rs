//! Every counter the shim keeps. The list itself lives in the ABI crate
//! ([`evring_abi::with_stats_v1_counters`]): the live counters here, the
//! exported C stats layout ([`StatsV1`]), the trace footer and the NCCL log
//! line all derive from it.

use evring::Counter;
pub use evring_abi::StatsV1;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Process-wide counters (striped; exact when summed at a quiet point).
        #[derive(Default)]
        pub struct Counters { $($(#[doc = $doc])* pub $name: Counter,)* }

        impl Counters {
            /// `completed` is passed in: the record ring counts it (pushed + dropped).
            pub fn snapshot(&self, live: u64, completed: u64) -> StatsV1 {
                StatsV1 {
                    version: 1,
                    size: core::mem::size_of::<StatsV1>() as u32,
                    live,
                    started: self.start_calls.get().saturating_sub(self.start_drops()),
                    completed,
                    $($name: self.$name.get(),)*
                }
            }
        }
    };
}

evring_abi::with_stats_v1_counters!(counters);

impl Counters {
    /// Drops of any kind: starts refused plus records lost.
    pub fn start_drops(&self) -> u64 {
        self.drop_slab_full.get()
            + self.drop_unknown_type.get()
            + self.drop_null_context.get()
            + self.drop_after_finalize.get()
            + self.drop_null_descr.get()
            + self.masked_starts.get()
    }
}
