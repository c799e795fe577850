//! Root package of the evring workspace: holds cross-crate tests and benches only.
