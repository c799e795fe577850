//! The fuzz target links the shim as an rlib, so libFuzzer instruments the
//! shim's code, and drives it through the simulator's `Plugin`, which finds
//! the `ncclProfiler_vN` tables with `dlopen("")` + `dlsym` on the fuzz binary
//! itself. For that the tables must be in the binary's dynamic symbol table.
fn main() {
    for v in 1..=6 {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=ncclProfiler_v{v}");
    }
}
