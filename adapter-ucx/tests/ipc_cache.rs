//! The IPC cache on the mock CUDA driver, under both driver behaviours (C1).

use std::sync::Arc;
use tagspace_core::ipc::{ExporterId, IpcDescriptor};
use tagspace_mock::cuda::{CudaError, DriverBehavior, IpcHandle, MockCudaDriver};
use tagspace_ucx::ipc::{IpcBackend, IpcCache, IpcError};

const IMPORTER: u32 = 2;

/// The mock driver as seen from one importing process. `slow` makes each call take as long as
/// a real driver call does (tens of microseconds), so races around open and close have room to
/// happen on a 2-core machine.
struct MockBackend {
    driver: Arc<MockCudaDriver>,
    process: u32,
    slow: bool,
}

impl MockBackend {
    fn pause(&self) {
        if self.slow {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
}

impl IpcBackend for MockBackend {
    fn open(&self, _device: u32, handle: &[u8; 64]) -> Result<u64, IpcError> {
        self.pause();
        let r = self
            .driver
            .open(self.process, &IpcHandle(*handle))
            .map(|p| p.0)
            .map_err(map_err);
        self.pause();
        r
    }
    fn close(&self, _device: u32, base: u64) -> Result<(), IpcError> {
        self.pause();
        let r = self
            .driver
            .close(self.process, tagspace_mock::cuda::DevicePtr(base))
            .map_err(map_err);
        self.pause();
        r
    }
}

fn map_err(e: CudaError) -> IpcError {
    match e {
        CudaError::AlreadyMapped => IpcError::AlreadyMapped,
        e => IpcError::Driver {
            call: "mock",
            code: 0,
            name: e.to_string(),
        },
    }
}

fn exporter(pid: u32) -> ExporterId {
    ExporterId {
        boot_id: [1; 16],
        pid_namespace: 4026531836,
        pid,
        start_time: 1000 + pid as u64,
    }
}

fn setup(b: DriverBehavior) -> (Arc<MockCudaDriver>, IpcCache<MockBackend>) {
    setup_with(b, false)
}

fn setup_with(b: DriverBehavior, slow: bool) -> (Arc<MockCudaDriver>, IpcCache<MockBackend>) {
    let driver = Arc::new(MockCudaDriver::new(b, 2));
    let cache = IpcCache::new(MockBackend {
        driver: driver.clone(),
        process: IMPORTER,
        slow,
    });
    (driver, cache)
}

fn export(driver: &MockCudaDriver, pid: u32, bytes: &[u8], offset: u64, len: u64) -> IpcDescriptor {
    let (_, h) = driver.alloc_and_export(pid, 0, bytes).unwrap();
    IpcDescriptor {
        exporter: exporter(pid),
        device: 0,
        handle: h.0,
        offset,
        len,
    }
}

const BOTH: [DriverBehavior; 2] = [DriverBehavior::AlreadyMapped, DriverBehavior::RefCounted];

#[test]
fn three_libraries_share_one_open() {
    for b in BOTH {
        let (driver, cache) = setup(b);
        let d = export(&driver, 1, b"peer buffer", 0, 11);
        let dask = cache.import(&d).unwrap();
        let cuml = cache.import(&d).unwrap();
        let blazing = cache.import(&d).unwrap();
        assert_eq!(
            driver.open_count(IMPORTER, &IpcHandle(d.handle)),
            1,
            "{b:?}"
        );
        assert_eq!(cache.stats().opens, 1);
        assert_eq!(cache.stats().hits, 2);
        assert_eq!(dask.device_ptr(), cuml.device_ptr());
        assert_eq!(
            driver
                .read(
                    IMPORTER,
                    tagspace_mock::cuda::DevicePtr(blazing.mapping_base())
                )
                .unwrap(),
            b"peer buffer"
        );
        drop((dask, cuml, blazing));
        assert_eq!(driver.open_count(IMPORTER, &IpcHandle(d.handle)), 0);
        assert_eq!(cache.open_mappings(), 0);
    }
}

#[test]
fn release_order_does_not_matter() {
    for b in BOTH {
        for order in [[0usize, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0]] {
            let (driver, cache) = setup(b);
            let d = export(&driver, 1, b"x", 0, 1);
            let mut guards: Vec<Option<_>> =
                (0..3).map(|_| Some(cache.import(&d).unwrap())).collect();
            for (n, &i) in order.iter().enumerate() {
                guards[i] = None;
                let still_open = n < 2;
                assert_eq!(cache.open_mappings() == 1, still_open, "{b:?} {order:?}");
            }
            assert_eq!(cache.stats().opens, 1);
            assert_eq!(cache.stats().closes, 1);
            // A fresh import after the last release opens again (and old drivers allow it,
            // because the close happened first).
            let again = cache.import(&d).unwrap();
            assert_eq!(cache.stats().opens, 2);
            drop(again);
        }
    }
}

#[test]
fn offsets_into_one_allocation_share_the_mapping() {
    for b in BOTH {
        let (driver, cache) = setup(b);
        let whole = export(&driver, 1, &[0u8; 4096], 0, 4096);
        let second_half = IpcDescriptor {
            offset: 2048,
            len: 2048,
            ..whole
        };
        let a = cache.import(&whole).unwrap();
        let h = cache.import(&second_half).unwrap();
        assert_eq!(h.device_ptr(), a.device_ptr() + 2048);
        assert_eq!(cache.stats().opens, 1);
    }
}

#[test]
fn exporters_never_alias() {
    // Same pid, restarted (another start time): a different exporter even with equal handle
    // bytes, so the cache does not hand out the old mapping.
    let (driver, cache) = setup(DriverBehavior::RefCounted);
    let d = export(&driver, 1, b"a", 0, 1);
    let mut reborn = d;
    reborn.exporter.start_time += 1;
    let _a = cache.import(&d).unwrap();
    let _b = cache.import(&reborn).unwrap();
    assert_eq!(cache.stats().opens, 2);
    assert_eq!(cache.stats().hits, 0);
}

#[test]
fn peer_failure_invalidates_and_later_imports_fail() {
    for b in BOTH {
        let (driver, cache) = setup(b);
        let dead = export(&driver, 1, b"dead", 0, 4);
        let alive = export(&driver, 3, b"alive", 0, 5);
        let held = cache.import(&dead).unwrap();
        let other = cache.import(&alive).unwrap();
        cache.invalidate_exporter(&exporter(1));
        assert!(!held.is_valid());
        assert!(other.is_valid());
        let err = cache.import(&dead).unwrap_err();
        assert_eq!(err, IpcError::PeerFailed { pid: 1 });
        assert!(err.to_string().contains("pid 1"));
        assert!(cache.import(&alive).is_ok());
        drop(held); // closed now that no library holds it
        assert_eq!(driver.open_count(IMPORTER, &IpcHandle(dead.handle)), 0);
        assert!(cache.import(&dead).is_err());
    }
}

#[test]
fn a_handle_opened_outside_the_cache_is_reported() {
    let (driver, cache) = setup(DriverBehavior::AlreadyMapped);
    let d = export(&driver, 1, b"z", 0, 1);
    driver.open(IMPORTER, &IpcHandle(d.handle)).unwrap(); // e.g. UCX's own cuda_ipc cache
    let err = cache.import(&d).unwrap_err();
    assert_eq!(err, IpcError::AlreadyMappedElsewhere);
    assert!(err.to_string().contains("outside"));
    assert_eq!(
        cache.open_mappings(),
        0,
        "a failed open leaves nothing behind"
    );
}

#[test]
fn concurrent_imports_and_releases() {
    // With old-driver semantics any second open of a handle by this process is an error, so a
    // single race that opened twice (or re-opened before a close returned) fails the test.
    for b in BOTH {
        let (driver, cache) = setup_with(b, true);
        let descs: Vec<IpcDescriptor> = (0..4)
            .map(|i| export(&driver, 10 + i, &[i as u8; 8], 0, 8))
            .collect();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (cache, descs) = (cache.clone(), descs.clone());
                std::thread::spawn(move || {
                    let mut seed = 0x9e37_79b9u64 + t;
                    let mut held = Vec::new();
                    for _ in 0..2000 {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        if seed.is_multiple_of(3) && !held.is_empty() {
                            held.swap_remove((seed as usize / 3) % held.len());
                        } else {
                            let d = &descs[(seed % 4) as usize];
                            let g = cache.import(d).expect("import under contention");
                            assert!(g.is_valid());
                            held.push(g);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = cache.stats();
        assert_eq!(s.opens, s.closes, "{b:?}: every open closed once");
        assert_eq!(s.close_errors, 0);
        assert_eq!(cache.open_mappings(), 0);
        assert_eq!(driver.totals(), (s.opens, s.closes));
        assert!(s.hits > 0, "the test must exercise sharing");
    }
}
