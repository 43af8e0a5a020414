// The shared library carries a soname, so hosts link against the ABI (`libtagspace.so.2`) and
// a later 0.x build with the same ABI can replace it. `TAGSPACE_ABI_VERSION` in src/lib.rs
// changes together with this number.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtagspace.so.2");
    }
}
