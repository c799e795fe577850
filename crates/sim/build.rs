fn main() {
    // NCCL's logger is C-variadic; see csrc/logger.c.
    println!("cargo:rerun-if-changed=csrc/logger.c");
    cc::Build::new()
        .file("csrc/logger.c")
        .warnings(true)
        .compile("evring_sim_logger");
}
