//! The one place that chooses between loom's model-checked atomics and the real ones.
//!
//! Every other module imports atomics, fences and spin hints from here, so a `--cfg loom` build
//! checks exactly the code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU64, Ordering};

/// A hint inside retry loops; under loom it yields so the model can schedule the other threads.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
