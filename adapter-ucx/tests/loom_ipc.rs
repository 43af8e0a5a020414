//! Loom models of the IPC cache's reference counting (C1): releases that are not the last are
//! lock-free, and the last one re-checks under the lock, so the interleavings matter.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p tagspace-ucx --test loom_ipc
//! --release --target-dir target-loom` (`.ci/run` does).
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use tagspace_core::ipc::{ExporterId, IpcDescriptor};
use tagspace_ucx::ipc::{IpcBackend, IpcCache, IpcError};

/// Old-driver semantics: opening a handle that is open fails. Also counts.
#[derive(Default)]
struct Strict {
    /// Guards the test holds (incremented after import, decremented before drop): a close
    /// while this is non-zero would pull memory from under a library.
    held: AtomicUsize,
    open: AtomicUsize,
    opens: AtomicUsize,
    closes: AtomicUsize,
}

/// The backend the cache owns; the test keeps another handle to read the counters.
struct Shared(Arc<Strict>);

impl IpcBackend for Shared {
    fn open(&self, _: u32, _: &[u8; 64]) -> Result<u64, IpcError> {
        if self.0.open.fetch_add(1, Ordering::SeqCst) != 0 {
            return Err(IpcError::AlreadyMapped);
        }
        self.0.opens.fetch_add(1, Ordering::SeqCst);
        Ok(0x1000)
    }
    fn close(&self, _: u32, _: u64) -> Result<(), IpcError> {
        assert_eq!(
            self.0.held.load(Ordering::SeqCst),
            0,
            "closed under a live guard"
        );
        assert_eq!(
            self.0.open.fetch_sub(1, Ordering::SeqCst),
            1,
            "closed a mapping not open"
        );
        self.0.closes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn desc() -> IpcDescriptor {
    IpcDescriptor {
        exporter: ExporterId {
            boot_id: [1; 16],
            pid_namespace: 1,
            pid: 9,
            start_time: 1,
        },
        device: 0,
        handle: [5; 64],
        offset: 0,
        len: 8,
    }
}

/// A release racing with an import that revives the mapping: never a close under a live guard,
/// never a second open while open, and every open closed once.
#[test]
fn release_races_import() {
    loom::model(|| {
        let b = Arc::new(Strict::default());
        let cache = IpcCache::new(Shared(b.clone()));
        let first = cache.import(&desc()).unwrap();
        let c2 = cache.clone();
        let b2 = b.clone();
        let t = thread::spawn(move || {
            let g = c2.import(&desc()).expect("import while another releases");
            b2.held.fetch_add(1, Ordering::SeqCst);
            assert_eq!(b_open(&g), 0x1000);
            assert_eq!(b2.open.load(Ordering::SeqCst), 1, "mapping closed under us");
            b2.held.fetch_sub(1, Ordering::SeqCst);
            drop(g);
        });
        drop(first);
        t.join().unwrap();
        assert_eq!(b.open.load(Ordering::SeqCst), 0);
        assert_eq!(
            b.opens.load(Ordering::SeqCst),
            b.closes.load(Ordering::SeqCst)
        );
    });
}

/// Two first imports at once: one opens, the other waits and shares.
#[test]
fn concurrent_first_imports_open_once() {
    loom::model(|| {
        let b = Arc::new(Strict::default());
        let cache = IpcCache::new(Shared(b.clone()));
        let c2 = cache.clone();
        let t = thread::spawn(move || c2.import(&desc()).map(|g| drop(g)));
        let mine = cache.import(&desc());
        assert!(mine.is_ok());
        assert!(t.join().unwrap().is_ok());
        drop(mine);
        assert_eq!(b.open.load(Ordering::SeqCst), 0);
        assert_eq!(
            b.opens.load(Ordering::SeqCst),
            b.closes.load(Ordering::SeqCst)
        );
    });
}

fn b_open(g: &tagspace_ucx::ipc::ImportGuard<Shared>) -> u64 {
    g.mapping_base()
}
