fn main() {
    // Keep the meter mapped after dlclose: its atexit handler, thread-local destructors
    // and the inner plugin it loaded must outlive NCCL unloading it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
