//! `init_global`: a runtime chooses the process-global registry's layout before first use.
//! One test in its own binary: the global registry is per process.
#![cfg(not(loom))]

use tagspace_core::registry::GlobalInitError;
use tagspace_core::{global, init_global, TagLayout};

#[test]
fn the_first_use_fixes_the_layout() {
    // A namespace field narrower than 8 bits cannot hold the global registry's 256 ids, and
    // the refusal leaves the registry untouched.
    let narrow = TagLayout::builder(0, 6).build().unwrap();
    assert_eq!(
        init_global(narrow).err(),
        Some(GlobalInitError::TooNarrow { ids: 64 })
    );
    let wide = TagLayout::builder(48, 12)
        .field("seq", 0, 32)
        .build()
        .unwrap();
    let r = init_global(wide).unwrap();
    assert_eq!(r.layout().fingerprint(), wide.fingerprint());
    assert!(std::ptr::eq(r, global()));
    assert!(init_global(wide).is_ok(), "the same layout again is fine");
    let err = init_global(TagLayout::DEFAULT).err().unwrap();
    assert_eq!(
        err,
        GlobalInitError::AlreadyInitialized {
            fingerprint: wide.fingerprint()
        }
    );
    assert!(err.to_string().contains("before anything registers"));
    let dask = global().register("dask").unwrap();
    assert_eq!(dask.id(), 2);
    assert_eq!(dask.tag(1).unwrap().raw() >> 48, 2);
}
