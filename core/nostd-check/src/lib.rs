#![no_std]

use tagspace_core::{Registry, TagLayout};

static REGISTRY: Registry<64> = Registry::new(TagLayout::DEFAULT);

/// Exercises the core from C: registers a namespace and returns a tag, or 0 on error.
#[no_mangle]
pub extern "C" fn tagspace_nostd_tag(payload: u64) -> u64 {
    match REGISTRY.register("nostd-check") {
        Ok(ns) => ns.tag(payload).map(|t| t.raw()).unwrap_or(0),
        Err(_) => 0,
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}
