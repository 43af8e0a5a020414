// R3: a lease cannot be copied, so no copy can outlive the release.
use tagspace_core::{Registry, TagLayout};

fn main() {
    let r: Registry<64> = Registry::new(TagLayout::DEFAULT);
    let ns = r.register("x").unwrap();
    let _copy = ns.clone();
}
