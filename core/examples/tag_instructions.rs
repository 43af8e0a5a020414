//! A fixed workload for instruction counting with callgrind (`scripts/callgrind-tags.sh`):
//! `tag_instructions VARIANT N` builds (or matches) N tags, one at a time: each payload passes
//! through `black_box` on the way in and each result on the way out, so the compiler can neither
//! vectorise nor fold the loop, the same as on a send path. The script runs two N and
//! differences the counts, which cancels start-up and leaves instructions per operation.
use std::hint::black_box;
use tagspace_core::{Registry, Tag, TagLayout};

#[inline(never)]
fn run(n: u64, payloads: &[u64], f: impl Fn(u64) -> u64) -> u64 {
    let mut acc = 0;
    for i in 0..n as usize {
        acc ^= black_box(f(black_box(payloads[i & (payloads.len() - 1)])));
    }
    acc
}

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_default();
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let registry: Registry<256> = Registry::new(TagLayout::DEFAULT);
    let ns = registry.register("bench").unwrap();
    let id = black_box(ns.id() as u64);
    // the bits no payload may set: the namespace field and the pair field
    let mask = black_box(!TagLayout::DEFAULT.payload_mask());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let payloads: Vec<u64> = (0..1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & 0xffff_fff0
        })
        .collect();
    let m = ns.matcher_exact(payloads[5]).unwrap();
    let (mt, mm) = (black_box(m.tag()), black_box(m.mask()));
    let out = match variant.as_str() {
        "build-baseline" => run(n, &payloads, |p| (id << 56) | p),
        "build-checked" => run(n, &payloads, |p| {
            if (p & mask != 0) | (p == !mask) {
                0
            } else {
                (id << 56) | p
            }
        }),
        "build-tagspace" => run(n, &payloads, |p| ns.tag(p).map(Tag::raw).unwrap_or(0)),
        "match-baseline" => run(n, &payloads, |p| ((((id << 56) | p) ^ mt) & mm == 0) as u64),
        "match-tagspace" => run(n, &payloads, |p| {
            m.matches(Tag::from_raw((id << 56) | p)) as u64
        }),
        other => {
            eprintln!("unknown variant {other:?}");
            std::process::exit(2);
        }
    };
    println!("{out}");
}
