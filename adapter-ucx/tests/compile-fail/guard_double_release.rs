// Releasing is dropping the guard; a guard cannot be copied, so it cannot be released twice.
use tagspace_ucx::ipc::{CudaDriverBackend, ImportGuard};

fn release_twice(g: ImportGuard<CudaDriverBackend>) {
    let copy = g.clone();
    drop(g);
    drop(copy);
}

fn main() {}
