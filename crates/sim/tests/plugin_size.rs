//! The release plugin users load is small: release builds carry no DWARF (debug info
//! would make it 6.2 MB; benches keep theirs through `[profile.bench]`).

#[allow(dead_code)]
mod common;

#[test]
fn release_plugin_is_under_two_mib() {
    let so = common::plugin();
    let len = std::fs::metadata(&so).unwrap().len();
    assert!(
        len < 2 << 20,
        "{} is {len} bytes: debug info left in the release plugin?",
        so.display()
    );
}
