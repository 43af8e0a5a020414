//! The safety that lives in the types: these programs must not compile (trybuild).
#![cfg(not(loom))]

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}
