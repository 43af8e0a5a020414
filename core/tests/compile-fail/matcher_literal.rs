// T1: a matcher cannot be made outside a namespace, so it cannot miss the namespace field.
use tagspace_core::Matcher;

fn main() {
    let _m = Matcher { tag: 0, mask: 0 };
}
