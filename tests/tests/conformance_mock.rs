//! The conformance suite on the mock adapter.
tagspace_tests::conformance_suite!(tagspace_tests::mock::MockCluster::new());
