// T1: the crate's own unchecked constructor is not public.
use tagspace_core::Matcher;

fn main() {
    let _m = Matcher::new_unchecked(0, 0);
}
