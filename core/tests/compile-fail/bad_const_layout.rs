// T5: a bad layout in a const is a compile error.
use tagspace_core::TagLayout;

const L: TagLayout = TagLayout::builder(56, 8).field("seq", 40, 20).build_or_panic();

fn main() {
    let _ = L;
}
