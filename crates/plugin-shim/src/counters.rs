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
            /// `inserted`: the event slab's inserts (every start that got an ID).
            pub fn snapshot(&self, live: u64, completed: u64, inserted: u64) -> StatsV1 {
                let mut s = StatsV1 {
                    version: 1,
                    size: core::mem::size_of::<StatsV1>() as u32,
                    live,
                    started: inserted,
                    completed,
                    $($name: self.$name.get(),)*
                };
                // Not counted on the hot path: every start either got an ID
                // (the slab counts its inserts per thread anyway) or was
                // refused and counted as such.
                s.start_calls = inserted + self.start_drops();
                s
            }
        }
    };
}

evring_abi::with_stats_v1_counters!(counters);

impl Counters {
    /// Starts refused before they got an ID (`start_calls` is these plus
    /// the slab's inserts: the `start_calls` counter itself is never
    /// bumped, which keeps a line off every start).
    pub fn start_drops(&self) -> u64 {
        self.drop_slab_full.get()
            + self.drop_unknown_type.get()
            + self.drop_null_context.get()
            + self.drop_after_finalize.get()
            + self.drop_null_descr.get()
            + self.masked_starts.get()
    }
}
