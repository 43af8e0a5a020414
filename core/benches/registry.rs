//! Registry throughput vs a `Mutex<HashMap>` baseline, 1 and 2 threads, measured in the same
//! run. Goal: ≥ 5× the baseline under 2 threads (README has the figures).
//!
//! * `register_release`: register a name, drop the lease. Each thread uses its own names.
//! * `lookup_name`: find a live namespace by name. `lookup_id`: by id.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};

/// The obvious alternative: one lock around a name → id map plus a free-id list.
struct MutexRegistry {
    inner: Mutex<(HashMap<String, u16>, Vec<u16>)>,
}

impl MutexRegistry {
    fn new() -> Self {
        MutexRegistry {
            inner: Mutex::new((HashMap::new(), (16..256).rev().collect())),
        }
    }
    fn register(&self, name: &str) -> Option<u16> {
        let mut g = self.inner.lock().unwrap();
        if g.0.contains_key(name) {
            return None;
        }
        let id = g.1.pop()?;
        g.0.insert(name.to_owned(), id);
        Some(id)
    }
    fn release(&self, name: &str) {
        let mut g = self.inner.lock().unwrap();
        if let Some(id) = g.0.remove(name) {
            g.1.push(id);
        }
    }
    fn lookup(&self, name: &str) -> Option<u16> {
        self.inner.lock().unwrap().0.get(name).copied()
    }
}

/// Runs `op(thread, i)` `iters` times split over `threads` threads; returns wall time.
fn run_threads(threads: usize, iters: u64, op: Arc<dyn Fn(usize, u64) + Send + Sync>) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (barrier, op) = (barrier.clone(), op.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..iters / threads as u64 {
                    op(t, i);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed()
}

static REGISTRY: Registry<256> = Registry::new(TagLayout::DEFAULT);

fn bench(c: &mut Criterion) {
    // A realistic background: a handful of libraries already registered.
    let _held: Vec<_> = [
        "dask",
        "cuml",
        "blazingsql",
        "engine-a",
        "engine-b",
        "engine-c",
    ]
    .iter()
    .map(|n| REGISTRY.register(n).unwrap())
    .collect();
    let baseline = Arc::new(MutexRegistry::new());
    for n in [
        "dask",
        "cuml",
        "blazingsql",
        "engine-a",
        "engine-b",
        "engine-c",
    ] {
        baseline.register(n);
    }
    let names: Arc<Vec<String>> = Arc::new((0..2).map(|t| format!("bench-thread-{t}")).collect());

    for threads in [1usize, 2] {
        let mut g = c.benchmark_group(format!("register_release/{threads}t"));
        g.throughput(Throughput::Elements(1));
        let n = names.clone();
        g.bench_function("mutex_hashmap", |b| {
            let (base, n) = (baseline.clone(), n.clone());
            b.iter_custom(|iters| {
                let (base, n) = (base.clone(), n.clone());
                run_threads(
                    threads,
                    iters,
                    Arc::new(move |t, _| {
                        black_box(base.register(&n[t]));
                        base.release(&n[t]);
                    }),
                )
            })
        });
        let n = names.clone();
        g.bench_function("tagspace", |b| {
            let n = n.clone();
            b.iter_custom(|iters| {
                let n = n.clone();
                run_threads(
                    threads,
                    iters,
                    Arc::new(move |t, _| {
                        black_box(REGISTRY.register(&n[t]).unwrap());
                    }),
                )
            })
        });
        g.finish();

        let mut g = c.benchmark_group(format!("lookup_name/{threads}t"));
        g.throughput(Throughput::Elements(1));
        g.bench_function("mutex_hashmap", |b| {
            let base = baseline.clone();
            b.iter_custom(|iters| {
                let base = base.clone();
                run_threads(
                    threads,
                    iters,
                    Arc::new(move |_, _| {
                        black_box(base.lookup(black_box("engine-b")));
                    }),
                )
            })
        });
        g.bench_function("tagspace", |b| {
            b.iter_custom(|iters| {
                run_threads(
                    threads,
                    iters,
                    Arc::new(|_, _| {
                        black_box(REGISTRY.lookup(black_box("engine-b")));
                    }),
                )
            })
        });
        g.bench_function("tagspace_by_id", |b| {
            b.iter_custom(|iters| {
                run_threads(
                    threads,
                    iters,
                    Arc::new(|_, _| {
                        black_box(REGISTRY.name_of(black_box(17)));
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
