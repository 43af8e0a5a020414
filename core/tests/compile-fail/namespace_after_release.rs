// R3: a released lease cannot build tags.
use tagspace_core::{Registry, TagLayout};

fn main() {
    let r: Registry<64> = Registry::new(TagLayout::DEFAULT);
    let ns = r.register("x").unwrap();
    ns.release();
    let _t = ns.tag(1);
}
