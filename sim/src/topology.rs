//! Who connects to whom, and a small seeded random number generator (the simulation is
//! reproducible from its seed).

use std::collections::HashSet;
use std::fmt;

/// splitmix64: fast, seeded, good enough to pick peers and orders.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c908)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `v` in a random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// The shape of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Every process connected to every other (all-to-all shuffles).
    Mesh,
    /// Every process dials `k` others chosen at random (so about `2k` peers each).
    Random(usize),
    /// Dask's shape: process 0 is the scheduler, every worker connects to it, and every worker
    /// dials `k` other workers chosen at random.
    Dask(usize),
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topology::Mesh => f.write_str("full mesh"),
            Topology::Random(k) => write!(f, "random ({k} dialled per process)"),
            Topology::Dask(k) => write!(
                f,
                "dask (scheduler + workers, {k} worker peers dialled each)"
            ),
        }
    }
}

impl Topology {
    /// The connections among `n` processes as (initiator, acceptor), each pair once, in a
    /// random order.
    pub fn edges(self, n: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
        let mut seen = HashSet::new();
        let mut edges = Vec::new();
        let mut add = |a: usize, b: usize, edges: &mut Vec<(usize, usize)>| {
            if a != b && seen.insert((a.min(b), a.max(b))) {
                edges.push((a, b));
            }
        };
        match self {
            Topology::Mesh => {
                for a in 0..n {
                    for b in a + 1..n {
                        add(a, b, &mut edges);
                    }
                }
            }
            Topology::Random(k) => {
                for a in 0..n {
                    for b in pick(rng, n, a, k, 0) {
                        add(a, b, &mut edges);
                    }
                }
            }
            Topology::Dask(k) => {
                for w in 1..n {
                    add(w, 0, &mut edges);
                }
                for a in 1..n {
                    for b in pick(rng, n, a, k, 1) {
                        add(a, b, &mut edges);
                    }
                }
            }
        }
        rng.shuffle(&mut edges);
        edges
    }
}

/// `k` distinct processes in `from..n` other than `me` (fewer when there are not that many).
fn pick(rng: &mut Rng, n: usize, me: usize, k: usize, from: usize) -> Vec<usize> {
    let others = n.saturating_sub(from + 1);
    let k = k.min(others);
    let mut chosen = HashSet::new();
    while chosen.len() < k {
        let b = from + rng.below(n - from);
        if b != me {
            chosen.insert(b);
        }
    }
    let mut v: Vec<usize> = chosen.into_iter().collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pair_is_connected_once() {
        let mut rng = Rng::new(7);
        let mesh = Topology::Mesh.edges(10, &mut rng);
        assert_eq!(mesh.len(), 45);
        for t in [Topology::Random(3), Topology::Dask(3)] {
            let e = t.edges(50, &mut rng);
            let pairs: HashSet<_> = e.iter().map(|&(a, b)| (a.min(b), a.max(b))).collect();
            assert_eq!(pairs.len(), e.len(), "{t}");
            assert!(e.iter().all(|&(a, b)| a != b && a < 50 && b < 50));
        }
        let dask = Topology::Dask(2).edges(20, &mut rng);
        let hub = dask.iter().filter(|&&(a, b)| a == 0 || b == 0).count();
        assert_eq!(hub, 19, "every worker reaches the scheduler");
    }

    #[test]
    fn few_processes_give_what_they_can() {
        let mut rng = Rng::new(1);
        assert_eq!(Topology::Random(8).edges(3, &mut rng).len(), 3);
        assert_eq!(Topology::Dask(8).edges(2, &mut rng).len(), 1);
    }
}
