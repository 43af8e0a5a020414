//! ucx-py's `EndpointReuse`, computed from its protocol for the same connections in the same
//! order — the design tagspace is compared with.
//!
//! Its protocol, per virtual connection (each library's connect to a peer): the client opens a
//! new UCX endpoint to the server and sends a header (two `u64`: how many ids follow, and the
//! virtual tag) and then the id of **every endpoint it has open**, to any peer; the server
//! looks each up among its own endpoints and answers with one `u64`, the match or 0. A match
//! closes the new endpoint (the pair goes on over the old one); no match keeps it, and both
//! sides add it to their open endpoints. So a connect costs `24 + 8 × open endpoints` bytes and
//! a UCX endpoint wire-up, and the open endpoints grow with the peers a process talks to —
//! every connect of a process with `E` peers carries `8 × E` bytes.

/// The model's figures for a sequence of virtual connects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReuseCost {
    /// Virtual connects (one per library per pair).
    pub connects: u64,
    /// Control bytes of all of them (both directions).
    pub bytes: u64,
    /// The largest single connect's bytes.
    pub max_connect: u64,
    /// The last connect's bytes (when every endpoint is open).
    pub last_connect: u64,
    /// UCX endpoints created (one per connect, matched or not).
    pub endpoints_created: u64,
    /// Server-side id lookups (one per id received, at most).
    pub lookups: u64,
}

impl ReuseCost {
    /// One virtual connect of `a` to `b` (`open`: each process's open endpoints); `first`: the
    /// pair shares no endpoint yet, so the new one is kept.
    fn connect(&mut self, open: &mut [u64], a: usize, b: usize, first: bool) {
        let ids = open[a];
        let bytes = HEADER + ID * ids + ANSWER;
        self.connects += 1;
        self.bytes += bytes;
        self.max_connect = self.max_connect.max(bytes);
        self.last_connect = bytes;
        self.endpoints_created += 1;
        // The server scans the list until it finds the endpoint the pair shares: with none it
        // looks at every id; with one, on average half of them.
        if first {
            self.lookups += ids;
            open[a] += 1;
            open[b] += 1;
        } else {
            self.lookups += ids.div_ceil(2);
        }
    }

    /// Bytes per virtual connect, rounded down.
    pub fn per_connect(&self) -> u64 {
        self.bytes.checked_div(self.connects).unwrap_or(0)
    }
}

/// Header the client sends: the number of ids, and the virtual tag (`u64` each).
pub const HEADER: u64 = 16;
/// The server's answer: the matching id or 0.
pub const ANSWER: u64 = 8;
/// One endpoint id.
pub const ID: u64 = 8;

/// The cost of `libs` rounds of virtual connects over `edges` (client, server) among `procs`
/// processes: library 0 connects every pair in edge order, then library 1, and so on (every
/// library of a process connects to the same peers, as tagspace's libraries share one
/// connection per pair).
pub fn endpoint_reuse(procs: usize, edges: &[(usize, usize)], libs: usize) -> ReuseCost {
    let mut open = vec![0u64; procs];
    let mut shared = std::collections::HashSet::new();
    let mut c = ReuseCost::default();
    for _ in 0..libs {
        for &(a, b) in edges {
            c.connect(&mut open, a, b, shared.insert((a.min(b), a.max(b))));
        }
    }
    c
}

/// [`endpoint_reuse`] over a full mesh of `procs` processes, pairs in order (process `a`
/// dials every `b > a`), without building the list of pairs (a mesh of 4 096 has 8 million).
pub fn endpoint_reuse_mesh(procs: usize, libs: usize) -> ReuseCost {
    let mut open = vec![0u64; procs];
    let mut c = ReuseCost::default();
    for round in 0..libs {
        for a in 0..procs {
            for b in a + 1..procs {
                // Every pair's first connect is in the first round.
                c.connect(&mut open, a, b, round == 0);
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_carries_every_open_endpoint() {
        // A star: process 0 connects to 1, 2, 3 in turn; its list grows by one each time.
        let c = endpoint_reuse(4, &[(0, 1), (0, 2), (0, 3)], 1);
        assert_eq!(c.connects, 3);
        assert_eq!(c.bytes, 3 * (HEADER + ANSWER) + ID * (1 + 2));
        assert_eq!(c.last_connect, HEADER + ANSWER + 2 * ID);
        // A second library finds the endpoints open: each of its connects carries all three.
        let c2 = endpoint_reuse(4, &[(0, 1), (0, 2), (0, 3)], 2);
        assert_eq!(c2.bytes - c.bytes, 3 * (HEADER + ANSWER + 3 * ID));
        assert_eq!(c2.endpoints_created, 6);
    }

    #[test]
    fn a_full_mesh_grows_with_the_processes() {
        let mesh = |n: usize| -> Vec<(usize, usize)> {
            (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                .collect()
        };
        let small = endpoint_reuse(16, &mesh(16), 1);
        let large = endpoint_reuse(64, &mesh(64), 1);
        // The mesh shortcut is the same model.
        assert_eq!(endpoint_reuse_mesh(16, 3), endpoint_reuse(16, &mesh(16), 3));
        // Per connect, the bytes grow about linearly in N.
        assert!(large.per_connect() > 3 * small.per_connect());
    }
}
