fn main() {
    // Keep the plugin mapped after dlclose: NCCL unloads it after the last
    // finalize and may load it again; our globals, writer thread and atexit
    // handler must outlive that.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
