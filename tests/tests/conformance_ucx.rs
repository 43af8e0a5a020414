//! The conformance suite, unchanged, on real UCX workers talking over loopback TCP.
tagspace_tests::conformance_suite!(tagspace_tests::ucx::UcxCluster::tcp());

/// The same suite over shared memory.
mod shm {
    tagspace_tests::conformance_suite!(tagspace_tests::ucx::UcxCluster::shm());
}
