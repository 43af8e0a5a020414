// A static registry with more ids than the layout can express does not compile.
use tagspace_core::{Registry, TagLayout};

static R: Registry<512> = Registry::new(TagLayout::DEFAULT);

fn main() {
    let _ = R.capacity();
}
