//! Tag building and matching through tagspace vs the hand-written shift/or a library would
//! otherwise write, measured in the same run. Goal: ratio ≤ 1.05 (README has the figures).
//!
//! Each iteration processes a batch of 1024 payloads so the measured work dwarfs loop overhead.
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use tagspace_core::{Registry, Tag, TagLayout};

const BATCH: usize = 1024;

fn payloads() -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..BATCH)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & 0x00ff_ffff_ffff_fff0 // never in the namespace field, never the inbox
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let registry: Registry<256> = Registry::new(TagLayout::DEFAULT);
    let ns = registry.register("bench").unwrap();
    let id = ns.id() as u64;
    let input = payloads();
    let mut out = vec![0u64; BATCH];

    let mut g = c.benchmark_group("build_tag");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("baseline_shift_or", |b| {
        b.iter(|| {
            let id = black_box(id);
            for (o, &p) in out.iter_mut().zip(black_box(&input)) {
                *o = (id << 56) | p;
            }
            black_box(&out);
        })
    });
    // The same check tagspace makes (T3: no payload bits in the namespace field, not the inbox),
    // written by hand: separates the cost of checking from the cost of the abstraction.
    g.bench_function("baseline_checked", |b| {
        b.iter(|| {
            let id = black_box(id);
            let mask = black_box(0xffu64 << 56);
            for (o, &p) in out.iter_mut().zip(black_box(&input)) {
                *o = if (p & mask != 0) | (p == !mask) {
                    0
                } else {
                    (id << 56) | p
                };
            }
            black_box(&out);
        })
    });
    g.bench_function("tagspace", |b| {
        b.iter(|| {
            let ns = black_box(&ns);
            for (o, &p) in out.iter_mut().zip(black_box(&input)) {
                *o = match ns.tag(p) {
                    Ok(t) => t.raw(),
                    Err(_) => 0,
                };
            }
            black_box(&out);
        })
    });
    g.finish();

    // One tag at a time, each depending on the last, as on a send path: nothing vectorizes,
    // and the cost per tag is latency.
    let mut g = c.benchmark_group("build_tag_chain");
    g.throughput(Throughput::Elements(BATCH as u64));
    let payload_mask = TagLayout::DEFAULT.payload_mask() & !0xf;
    g.bench_function("baseline_shift_or", |b| {
        b.iter(|| {
            let id = black_box(id);
            let mut p = black_box(input[0]);
            for _ in 0..BATCH {
                let t = (id << 56) | p;
                p = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) & payload_mask;
            }
            black_box(p)
        })
    });
    g.bench_function("baseline_checked", |b| {
        b.iter(|| {
            let id = black_box(id);
            let mask = black_box(0xffu64 << 56);
            let mut p = black_box(input[0]);
            for _ in 0..BATCH {
                let t = if (p & mask != 0) | (p == !mask) {
                    0
                } else {
                    (id << 56) | p
                };
                p = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) & payload_mask;
            }
            black_box(p)
        })
    });
    g.bench_function("tagspace", |b| {
        b.iter(|| {
            let ns = black_box(&ns);
            let mut p = black_box(input[0]);
            for _ in 0..BATCH {
                let t = match ns.tag(p) {
                    Ok(t) => t.raw(),
                    Err(_) => 0,
                };
                p = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) & payload_mask;
            }
            black_box(p)
        })
    });
    g.finish();

    let tags: Vec<Tag> = input.iter().map(|&p| ns.tag(p).unwrap()).collect();
    let raw: Vec<u64> = tags.iter().map(|t| t.raw()).collect();
    let m = ns.matcher_exact(input[7]).unwrap();
    let (mt, mm) = (m.tag(), m.mask());
    let mut g = c.benchmark_group("match_tag");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("baseline_xor_and", |b| {
        b.iter_batched_ref(
            || 0usize,
            |hits| {
                let (mt, mm) = (black_box(mt), black_box(mm));
                for &t in black_box(&raw) {
                    *hits += ((t ^ mt) & mm == 0) as usize;
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("tagspace", |b| {
        b.iter_batched_ref(
            || 0usize,
            |hits| {
                let m = black_box(m);
                for &t in black_box(&tags) {
                    *hits += m.matches(t) as usize;
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
