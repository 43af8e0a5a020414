//! C1 in the types: a share of an imported buffer is released exactly once (trybuild).
#![cfg(not(loom))]

#[test]
fn compile_fail() {
    trybuild::TestCases::new().compile_fail("tests/compile-fail/*.rs");
}
