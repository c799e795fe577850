//! Tests next to the code: unit and property tests in normal builds, loom
//! models under `--cfg evring_loom` (run by `ci/loom.sh`).

#[cfg(not(evring_loom))]
mod slab_prop;
#[cfg(not(evring_loom))]
mod slab_reuse;
#[cfg(not(evring_loom))]
mod slab_unit;

#[cfg(evring_loom)]
mod loom_log;
#[cfg(evring_loom)]
mod loom_owned_lane;
#[cfg(evring_loom)]
mod loom_queue;
#[cfg(evring_loom)]
mod loom_ring;
#[cfg(evring_loom)]
mod loom_slab;
#[cfg(evring_loom)]
mod loom_tp_table;
