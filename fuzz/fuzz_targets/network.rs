#![no_main]
// The property lives in src/lib.rs so tests/regressions.rs replays saved inputs through it.
libfuzzer_sys::fuzz_target!(|input: tagspace_fuzz::NetInput| {
    tagspace_fuzz::check_network(&input);
});
