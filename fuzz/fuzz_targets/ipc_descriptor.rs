#![no_main]
// The property lives in src/lib.rs so tests/regressions.rs replays saved inputs through it.
libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tagspace_fuzz::check_ipc_descriptor(input);
});
