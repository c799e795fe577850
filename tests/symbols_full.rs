//! More distinct descriptor strings than the string table holds, through the
//! C ABI of the release plugin: the overflow is written as "?", counted per
//! event (`symbols_full`), and strings seen before keep their names.

mod common;
use common::*;
use std::ffi::CString;

/// The table's size (crates/plugin-shim/src/symbols.rs) less its two
/// reserved entries ("" and "?").
const ROOM: usize = 4096 - 2;

#[test]
fn a_full_string_table_writes_question_marks_and_counts_them() {
    let (i, ctxs) = Inst::new("symfull", None, &[], &[(1, 0)]);
    let ctx = ctxs[0];
    let names: Vec<CString> = (0..ROOM + 100)
        .map(|k| CString::new(format!("fn{k}")).unwrap())
        .collect();
    let start = |name: &CString| {
        let mut d = coll_api(0);
        d.u.coll_api.func = name.as_ptr();
        let h = i.start(ctx, &d);
        assert_ne!(h, 0);
        i.stop(h);
    };
    for n in &names {
        start(n);
    }
    // A name seen before the table filled keeps its own.
    start(&names[7]);
    i.fin(ctx);
    let s = i.stats();
    assert_balanced(&s);
    // The datatype takes one entry; the names take the rest.
    let fit = ROOM - 1;
    assert_eq!(s.symbols_full, (names.len() - fit) as u64, "{s:?}");
    assert_eq!(s.bad_strings, 0);
    let recs = i.begins();
    let named = |n: &str| recs.iter().filter(|e| e["name"] == n).count();
    assert_eq!(named("?"), names.len() - fit);
    assert_eq!(named("fn7"), 2);
    assert_eq!(named(&format!("fn{}", fit - 1)), 1);
    assert_eq!(named(&format!("fn{fit}")), 0);
}
