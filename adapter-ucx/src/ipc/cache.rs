//! The process-wide cache of imported CUDA IPC memory handles (invariant C1).
//!
//! A handle is opened at most once per (exporting process, device, handle), however many
//! libraries import it; every import returns an [`ImportGuard`], and the mapping is closed when
//! the last guard drops. This is correct under both driver behaviours: the cache never opens a
//! handle twice, so old drivers' `CUDA_ERROR_ALREADY_MAPPED` cannot come from it, and new
//! drivers' reference counting is never relied on.
//!
//! # States of an entry
//!
//! ```text
//!   (absent) --first import--> Opening --open ok--> Open{refs} --last guard drops--> Closing --> (absent)
//!                                 |                    |  ^
//!                                 +--open failed------>+  | more imports: refs += 1
//!                                      (absent)
//! ```
//!
//! Imports take the lock (one hash of the key); releases that are not the last decrement the
//! mapping's counter without it. The last release takes the lock and re-checks, because an
//! import may have revived the mapping in between; only if the count is still zero does it close.
//!
//! The driver is never called with the lock held: an import that finds `Opening` or `Closing`
//! waits on a condition variable for that one entry's outcome, so a slow open of one handle does
//! not stall imports of other handles, and a handle is never re-opened before its close has
//! returned (which old drivers would refuse).
//!
//! When an exporter fails ([`IpcCache::invalidate_exporter`]), its mappings are marked invalid
//! (guards report it) and further imports of its handles fail with [`IpcError::PeerFailed`]; a
//! mapping is closed when its last guard drops, never under a library still holding it.

use super::{IpcBackend, IpcError};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};
use std::collections::{HashMap, HashSet};
use std::fmt;
use tagspace_core::ipc::{ExporterId, IpcDescriptor};

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    exporter: ExporterId,
    device: u32,
    handle: [u8; 64],
}

/// An open mapping. Guards hold it directly, so a release that is not the last is one atomic
/// decrement: no hashing, no lock.
struct Mapping {
    base: u64,
    refs: AtomicUsize,
    valid: AtomicBool,
}

enum Entry {
    Opening,
    Open(Arc<Mapping>),
    Closing,
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    failed: HashSet<ExporterId>,
}

/// Counters, for tests and monitoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Driver opens performed.
    pub opens: u64,
    /// Driver closes performed.
    pub closes: u64,
    /// Imports served from an open mapping.
    pub hits: u64,
    /// Closes the driver refused (the mapping is forgotten anyway).
    pub close_errors: u64,
}

struct Inner<B> {
    backend: B,
    state: Mutex<State>,
    changed: Condvar,
    opens: AtomicU64,
    closes: AtomicU64,
    hits: AtomicU64,
    close_errors: AtomicU64,
}

/// The cache. Cheap to clone (shared); usually one per process (see `IpcCache::global`).
pub struct IpcCache<B: IpcBackend> {
    inner: Arc<Inner<B>>,
}

impl<B: IpcBackend> Clone for IpcCache<B> {
    fn clone(&self) -> Self {
        IpcCache {
            inner: self.inner.clone(),
        }
    }
}

impl<B: IpcBackend> Inner<B> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; if one ever did, the state is still
        // consistent between statements, so carry on rather than poison every importer.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }
}

impl<B: IpcBackend> IpcCache<B> {
    /// A cache over `backend`.
    pub fn new(backend: B) -> Self {
        IpcCache {
            inner: Arc::new(Inner {
                backend,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                opens: AtomicU64::new(0),
                closes: AtomicU64::new(0),
                hits: AtomicU64::new(0),
                close_errors: AtomicU64::new(0),
            }),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Imports the buffer `d` describes: opens its handle if no library in this process has it
    /// open, otherwise shares the open mapping.
    pub fn import(&self, d: &IpcDescriptor) -> Result<ImportGuard<B>, IpcError> {
        let key = Key {
            exporter: d.exporter,
            device: d.device,
            handle: d.handle,
        };
        let inner = &self.inner;
        let mut g = inner.lock();
        loop {
            if g.failed.contains(&key.exporter) {
                return Err(IpcError::PeerFailed {
                    pid: key.exporter.pid,
                });
            }
            match g.entries.get(&key) {
                Some(Entry::Open(m)) => {
                    if !m.valid.load(Ordering::Relaxed) {
                        return Err(IpcError::PeerFailed {
                            pid: key.exporter.pid,
                        });
                    }
                    // Under the lock: the last releaser re-checks this count under the same
                    // lock before closing, so an increment here always wins against a close.
                    m.refs.fetch_add(1, Ordering::Relaxed);
                    inner.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(self.guard(key, m.clone(), d));
                }
                Some(Entry::Opening | Entry::Closing) => g = inner.wait(g),
                None => break,
            }
        }
        g.entries.insert(key, Entry::Opening);
        drop(g);
        let opened = inner.backend.open(key.device, &key.handle);
        let mut g = inner.lock();
        let result = match opened {
            Ok(base) => {
                inner.opens.fetch_add(1, Ordering::Relaxed);
                let m = Arc::new(Mapping {
                    base,
                    refs: AtomicUsize::new(1),
                    valid: AtomicBool::new(!g.failed.contains(&key.exporter)),
                });
                g.entries.insert(key, Entry::Open(m.clone()));
                Ok(self.guard(key, m, d))
            }
            Err(e) => {
                g.entries.remove(&key);
                Err(match e {
                    // We never open a handle twice, so someone outside this cache has it open
                    // (UCX's own cuda_ipc cache, or a library that bypassed tagspace).
                    IpcError::AlreadyMapped => IpcError::AlreadyMappedElsewhere,
                    e => e,
                })
            }
        };
        drop(g);
        inner.changed.notify_all();
        result
    }

    fn guard(&self, key: Key, mapping: Arc<Mapping>, d: &IpcDescriptor) -> ImportGuard<B> {
        ImportGuard {
            inner: self.inner.clone(),
            key,
            mapping,
            offset: d.offset,
            len: d.len,
        }
    }

    /// The exporter failed: its mappings become invalid (guards say so), new imports of its
    /// handles fail, and each mapping closes when its last guard drops.
    pub fn invalidate_exporter(&self, exporter: &ExporterId) {
        let mut g = self.inner.lock();
        g.failed.insert(*exporter);
        for (k, e) in g.entries.iter_mut() {
            if k.exporter == *exporter {
                if let Entry::Open(m) = e {
                    m.valid.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    /// Mappings currently open.
    pub fn open_mappings(&self) -> usize {
        self.inner
            .lock()
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Open(_)))
            .count()
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        let i = &self.inner;
        CacheStats {
            opens: i.opens.load(Ordering::Relaxed),
            closes: i.closes.load(Ordering::Relaxed),
            hits: i.hits.load(Ordering::Relaxed),
            close_errors: i.close_errors.load(Ordering::Relaxed),
        }
    }
}

/// A library's share of an imported buffer. The mapping stays open while any guard lives; not
/// `Clone`, so a share is released exactly once (import again for another share).
pub struct ImportGuard<B: IpcBackend> {
    inner: Arc<Inner<B>>,
    key: Key,
    mapping: Arc<Mapping>,
    offset: u64,
    len: u64,
}

impl<B: IpcBackend> ImportGuard<B> {
    /// Device pointer to the buffer (mapping base plus the descriptor's offset).
    pub fn device_ptr(&self) -> u64 {
        self.mapping.base.wrapping_add(self.offset)
    }

    /// Base of the whole mapped allocation.
    pub fn mapping_base(&self) -> u64 {
        self.mapping.base
    }

    /// Length of the buffer.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the buffer is empty (never: descriptors refuse empty buffers).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// False once the exporter has been reported failed: the memory may be gone.
    pub fn is_valid(&self) -> bool {
        self.mapping.valid.load(Ordering::Relaxed)
    }

    /// The device it lives on.
    pub fn device(&self) -> u32 {
        self.key.device
    }
}

impl<B: IpcBackend> Drop for ImportGuard<B> {
    fn drop(&mut self) {
        // AcqRel: the last releaser sees every other guard's use of the mapping as finished.
        if self.mapping.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let inner = &self.inner;
        let mut g = inner.lock();
        // An import may have revived the mapping (under the lock) since our decrement, or a
        // second releaser that also saw zero may already be closing it.
        let ours = matches!(
            g.entries.get(&self.key),
            Some(Entry::Open(m)) if Arc::ptr_eq(m, &self.mapping)
        );
        if !ours || self.mapping.refs.load(Ordering::Acquire) != 0 {
            return;
        }
        g.entries.insert(self.key, Entry::Closing);
        drop(g);
        let r = inner.backend.close(self.key.device, self.mapping.base);
        inner.closes.fetch_add(1, Ordering::Relaxed);
        if r.is_err() {
            inner.close_errors.fetch_add(1, Ordering::Relaxed);
        }
        let mut g = inner.lock();
        g.entries.remove(&self.key);
        drop(g);
        inner.changed.notify_all();
    }
}

impl<B: IpcBackend> fmt::Debug for ImportGuard<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportGuard")
            .field("exporter_pid", &self.key.exporter.pid)
            .field("device", &self.key.device)
            .field("ptr", &format_args!("{:#x}", self.device_ptr()))
            .field("len", &self.len)
            .finish()
    }
}
