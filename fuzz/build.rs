//! The fuzz target links the shim as an rlib, so libFuzzer instruments the
//! shim's code, and drives it through the simulator's `Plugin`, which finds
//! the `ncclProfiler_v2` to `_v6` tables with `dlopen("")` and `dlsym` on the
//! fuzz binary itself. For that, the tables must be in the binary's dynamic
//! symbol table.
fn main() {
    for v in 2..=6 {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=ncclProfiler_v{v}");
    }
}
