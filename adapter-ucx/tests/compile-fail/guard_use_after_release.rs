// A released share cannot be used: the pointer is gone with the guard.
use tagspace_ucx::ipc::{CudaDriverBackend, ImportGuard};

fn use_after(g: ImportGuard<CudaDriverBackend>) -> u64 {
    drop(g);
    g.device_ptr()
}

fn main() {}
