//! A tag matcher built the way UCX's is (`ucp_tag_match.c`), so that costs can be compared.
//!
//! * Expected receives with a full mask go into one of [`HASH_BUCKETS`] buckets by tag; any
//!   partial mask goes to a single wildcard queue. Every receive carries a post sequence number.
//! * An arriving message searches only its bucket while the wildcard queue is empty; otherwise
//!   it walks its bucket and the wildcard queue together in post order (UCX's merge), comparing
//!   each entry it passes. The first receive that matches, in post order, wins.
//! * A message that matches nothing joins the unexpected queue, which is kept both in arrival
//!   order and hashed by tag. A full-mask receive or probe searches its tag's bucket; a partial
//!   mask scans every unexpected message from the oldest.
//!
//! [`TagMatcher::comparisons`] counts every `(tag, mask)` comparison made, which is what a
//! partial mask makes expensive for every library on the worker.

use std::collections::{BTreeMap, VecDeque};

/// Buckets of the expected and unexpected hashes (UCX: `UCP_TAG_MATCH_HASH_SIZE`).
pub const HASH_BUCKETS: usize = 1021;

fn bucket(tag: u64) -> usize {
    (tag % HASH_BUCKETS as u64) as usize
}

fn matches(sent: u64, tag: u64, mask: u64) -> bool {
    (sent ^ tag) & mask == 0
}

#[derive(Clone, Debug)]
struct Expected<T> {
    sn: u64,
    tag: u64,
    mask: u64,
    token: T,
}

/// The matching state of one worker. `T` identifies a posted receive; `M` is the message.
#[derive(Debug)]
pub struct TagMatcher<T, M> {
    sn: u64,
    buckets: Vec<VecDeque<Expected<T>>>,
    wildcard: VecDeque<Expected<T>>,
    /// Unexpected messages by arrival sequence number.
    unexpected: BTreeMap<u64, (u64, M)>,
    /// Arrival sequence numbers by tag bucket; entries already taken are skipped lazily.
    unexpected_buckets: Vec<VecDeque<u64>>,
    comparisons: u64,
}

impl<T: Clone + PartialEq, M> Default for TagMatcher<T, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone + PartialEq, M> TagMatcher<T, M> {
    /// An empty matcher.
    pub fn new() -> Self {
        TagMatcher {
            sn: 0,
            buckets: (0..HASH_BUCKETS).map(|_| VecDeque::new()).collect(),
            wildcard: VecDeque::new(),
            unexpected: BTreeMap::new(),
            unexpected_buckets: (0..HASH_BUCKETS).map(|_| VecDeque::new()).collect(),
            comparisons: 0,
        }
    }

    /// `(tag, mask)` comparisons made so far.
    pub fn comparisons(&self) -> u64 {
        self.comparisons
    }

    /// Messages waiting in the unexpected queue.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Receives waiting for a message.
    pub fn expected_len(&self) -> usize {
        self.wildcard.len() + self.buckets.iter().map(VecDeque::len).sum::<usize>()
    }

    /// A message arrives: the receive it matches, or `None` if it was queued as unexpected.
    pub fn arrive(&mut self, tag: u64, msg: M) -> Option<(T, M)> {
        let b = bucket(tag);
        let found = if self.wildcard.is_empty() {
            let q = &self.buckets[b];
            let mut hit = None;
            for (i, e) in q.iter().enumerate() {
                self.comparisons += 1;
                if matches(tag, e.tag, e.mask) {
                    hit = Some((false, i));
                    break;
                }
            }
            hit
        } else {
            // Merge the bucket and the wildcard queue by post order.
            let (q, w) = (&self.buckets[b], &self.wildcard);
            let (mut i, mut j) = (0, 0);
            let mut hit = None;
            while i < q.len() || j < w.len() {
                let take_bucket = j >= w.len() || (i < q.len() && q[i].sn < w[j].sn);
                let e = if take_bucket { &q[i] } else { &w[j] };
                self.comparisons += 1;
                if matches(tag, e.tag, e.mask) {
                    hit = Some(if take_bucket { (false, i) } else { (true, j) });
                    break;
                }
                if take_bucket {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            hit
        };
        match found {
            Some((false, i)) => self.buckets[b].remove(i).map(|e| (e.token, msg)),
            Some((true, j)) => self.wildcard.remove(j).map(|e| (e.token, msg)),
            None => {
                self.sn += 1;
                self.unexpected.insert(self.sn, (tag, msg));
                self.unexpected_buckets[b].push_back(self.sn);
                None
            }
        }
    }

    /// The oldest unexpected message matching `(tag, mask)`: its arrival number and tag.
    fn search_unexpected(&mut self, tag: u64, mask: u64) -> Option<(u64, u64)> {
        if mask == u64::MAX {
            let b = bucket(tag);
            // Drop entries already taken through the ordered view.
            while let Some(&sn) = self.unexpected_buckets[b].front() {
                if self.unexpected.contains_key(&sn) {
                    break;
                }
                self.unexpected_buckets[b].pop_front();
            }
            for &sn in &self.unexpected_buckets[b] {
                if let Some(&(t, _)) = self.unexpected.get(&sn) {
                    self.comparisons += 1;
                    if t == tag {
                        return Some((sn, t));
                    }
                }
            }
            None
        } else {
            for (&sn, &(t, _)) in &self.unexpected {
                self.comparisons += 1;
                if matches(t, tag, mask) {
                    return Some((sn, t));
                }
            }
            None
        }
    }

    /// Posts a receive: the matching unexpected message if one is waiting, else it is queued
    /// and a later [`TagMatcher::arrive`] returns `token`.
    pub fn post(&mut self, tag: u64, mask: u64, token: T) -> Option<(u64, M)> {
        if let Some((sn, _)) = self.search_unexpected(tag, mask) {
            return self.unexpected.remove(&sn);
        }
        self.sn += 1;
        let e = Expected {
            sn: self.sn,
            tag,
            mask,
            token,
        };
        if mask == u64::MAX {
            self.buckets[bucket(tag)].push_back(e);
        } else {
            self.wildcard.push_back(e);
        }
        None
    }

    /// Looks for an unexpected message matching `(tag, mask)`. Without `remove` it stays queued
    /// and the tag is returned; with `remove` it is taken out and returned whole (UCX's
    /// probe-with-remove followed by `ucp_tag_msg_recv_nb`).
    pub fn probe(&mut self, tag: u64, mask: u64, remove: bool) -> Option<(u64, Option<M>)> {
        let (sn, t) = self.search_unexpected(tag, mask)?;
        if remove {
            self.unexpected.remove(&sn).map(|(t, m)| (t, Some(m)))
        } else {
            Some((t, None))
        }
    }

    /// Withdraws a posted receive; whether it was still waiting.
    pub fn cancel(&mut self, token: &T) -> bool {
        for q in self
            .buckets
            .iter_mut()
            .chain(std::iter::once(&mut self.wildcard))
        {
            if let Some(i) = q.iter().position(|e| e.token == *token) {
                q.remove(i);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type M = TagMatcher<u32, &'static str>;

    #[test]
    fn expected_then_arrival_in_post_order() {
        let mut m = M::new();
        assert!(m.post(5, u64::MAX, 1).is_none());
        assert!(m.post(5, 0, 2).is_none()); // wildcard posted later
        assert_eq!(m.arrive(5, "a"), Some((1, "a"))); // exact was posted first
        assert_eq!(m.arrive(5, "b"), Some((2, "b")));
        assert_eq!(m.arrive(5, "c"), None);
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn wildcard_posted_first_wins() {
        let mut m = M::new();
        m.post(0, 0, 1);
        m.post(7, u64::MAX, 2);
        assert_eq!(m.arrive(7, "x"), Some((1, "x")));
    }

    #[test]
    fn unexpected_in_arrival_order_and_probe() {
        let mut m = M::new();
        m.arrive(3, "first");
        m.arrive(4, "second");
        m.arrive(3, "third");
        assert_eq!(m.probe(0, 0, false), Some((3, None)));
        assert_eq!(m.probe(3, u64::MAX, true), Some((3, Some("first"))));
        assert_eq!(m.post(3, u64::MAX, 9), Some((3, "third")));
        assert_eq!(m.post(0, 0, 9), Some((4, "second")));
        assert_eq!(m.unexpected_len(), 0);
        assert!(m.post(3, u64::MAX, 10).is_none());
        assert!(m.cancel(&10));
        assert!(!m.cancel(&10));
        assert_eq!(m.expected_len(), 0);
    }

    #[test]
    fn comparisons_flat_for_exact_linear_for_wildcards() {
        // N pending exact receives of other tags: an arrival costs O(bucket), not O(N).
        let mut m = M::new();
        for i in 0..10_000u64 {
            m.post(1_000_000 + i, u64::MAX, i as u32);
        }
        let before = m.comparisons();
        m.arrive(42, "x");
        let exact_cost = m.comparisons() - before;
        assert!(exact_cost <= 20, "{exact_cost}");
        // The same pending receives as partial masks: every arrival walks them all.
        let mut w = M::new();
        for i in 0..10_000u64 {
            w.post(1_000_000 + i, !0xff, i as u32);
        }
        let before = w.comparisons();
        w.arrive(42, "x");
        assert_eq!(w.comparisons() - before, 10_000);
    }
}
