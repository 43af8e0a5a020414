//! Cache hit cost: importing a handle some library already has open, then releasing it, 1 and 2
//! threads, against the hand-rolled alternative (a Mutex<HashMap> of reference counts) measured
//! in the same run. The backend does nothing, so only the cache is measured. Goal: well under a
//! microsecond per hit.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use tagspace_core::ipc::{ExporterId, IpcDescriptor};
use tagspace_ucx::ipc::{IpcBackend, IpcCache, IpcError};

struct NoDriver;
impl IpcBackend for NoDriver {
    fn open(&self, _: u32, h: &[u8; 64]) -> Result<u64, IpcError> {
        Ok(0x1000 + h[0] as u64)
    }
    fn close(&self, _: u32, _: u64) -> Result<(), IpcError> {
        Ok(())
    }
}

fn desc(i: u8) -> IpcDescriptor {
    IpcDescriptor {
        exporter: ExporterId {
            boot_id: [3; 16],
            pid_namespace: 1,
            pid: 77,
            start_time: 5,
        },
        device: 0,
        handle: [i; 64],
        offset: 0,
        len: 4096,
    }
}

fn run_threads(threads: usize, iters: u64, op: Arc<dyn Fn(usize) + Send + Sync>) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (b, op) = (barrier.clone(), op.clone());
            std::thread::spawn(move || {
                b.wait();
                for _ in 0..iters / threads as u64 {
                    op(t);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in hs {
        h.join().unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let cache = IpcCache::new(NoDriver);
    let descs: Arc<Vec<IpcDescriptor>> = Arc::new((0..2).map(desc).collect());
    // Keep both mappings open so every import below is a hit.
    let _keep: Vec<_> = descs.iter().map(|d| cache.import(d).unwrap()).collect();
    type Key = (ExporterId, u32, [u8; 64]);
    let baseline: Arc<Mutex<HashMap<Key, (u64, usize)>>> = Arc::new(Mutex::new(HashMap::new()));
    for d in descs.iter() {
        baseline
            .lock()
            .unwrap()
            .insert((d.exporter, d.device, d.handle), (0x1000, 1));
    }
    for threads in [1usize, 2] {
        let mut g = c.benchmark_group(format!("ipc_hit/{threads}t"));
        g.throughput(Throughput::Elements(1));
        g.bench_function("mutex_hashmap_refcount", |b| {
            let (base, descs) = (baseline.clone(), descs.clone());
            b.iter_custom(|iters| {
                let (base, descs) = (base.clone(), descs.clone());
                run_threads(
                    threads,
                    iters,
                    Arc::new(move |t| {
                        let d = &descs[t];
                        let key = (d.exporter, d.device, d.handle);
                        let ptr = {
                            let mut m = base.lock().unwrap();
                            let e = m.get_mut(&key).unwrap();
                            e.1 += 1;
                            e.0
                        };
                        black_box(ptr);
                        base.lock().unwrap().get_mut(&key).unwrap().1 -= 1;
                    }),
                )
            })
        });
        g.bench_function("tagspace_cache", |b| {
            let (cache, descs) = (cache.clone(), descs.clone());
            b.iter_custom(|iters| {
                let (cache, descs) = (cache.clone(), descs.clone());
                run_threads(
                    threads,
                    iters,
                    Arc::new(move |t| {
                        let g = cache.import(&descs[t]).unwrap();
                        black_box(g.device_ptr());
                    }),
                )
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
