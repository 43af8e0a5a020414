// A lease cannot outlive its registry.
use tagspace_core::{Namespace, Registry, TagLayout};

fn main() {
    let ns: Namespace<'_, 64>;
    {
        let r: Registry<64> = Registry::new(TagLayout::DEFAULT);
        ns = r.register("x").unwrap();
    }
    let _ = ns.tag(1);
}
