//! A node that hears nobody replaces its worker ([`Action::Deaf`](tagspace_core::engine::Action::Deaf)).
//!
//! UCX's shared-memory receive FIFO stays stuck for good when a writer dies between reserving
//! a slot and filling it (see the README): the process can send but reads nothing any peer
//! sends it over shared memory. The heartbeat cuts every peer off; the engine then says the
//! node is deaf. On its own worker the node makes a new one (a new FIFO), listens again at the
//! same address (what its peers were told), moves what waited on the old one — the receives
//! posted there, and the messages that had arrived unreceived — and lets the old worker finish
//! what is still in flight on it while the dials reconnect every peer.

use super::*;

/// The most messages carried over from a replaced worker ([`Node`] keeps them until
/// received; the rest are dropped and counted, `stats().carry_dropped`).
pub const CARRIED_MAX: usize = 4096;
/// The longest message carried over from a replaced worker, in bytes.
pub const CARRY_LEN_MAX: usize = 1 << 20;
/// The most bytes carried over from a replaced worker in all (held in the node's memory until
/// received, beside UCX's own queue: a bound of its own, not `CARRIED_MAX` × `CARRY_LEN_MAX`).
pub const CARRIED_BYTES_MAX: usize = 64 << 20;
/// How long a replacement waits for one carried message's data before giving it up, and for
/// all of them.
const CARRY_WAIT: Duration = Duration::from_millis(100);
const CARRY_WAIT_ALL: Duration = Duration::from_secs(1);
/// How often (ms) a node with a replaced worker still finishing looks at it when it waits
/// ([`Node::poll_timeout_ms`]).
pub(super) const RETIRED_POLL_MS: u64 = 10;

/// Messages that had arrived on a replaced worker and were not received there, oldest first:
/// every receive looks here before it looks at the worker (they were sent before anything the
/// new worker holds).
#[derive(Default)]
pub(super) struct Carried {
    msgs: VecDeque<(u64, Vec<u8>)>,
    /// The data bytes in `msgs`.
    bytes: usize,
}

impl Carried {
    /// Keeps `data` sent with `tag`, unless that would pass [`CARRIED_MAX`] messages or
    /// [`CARRIED_BYTES_MAX`] bytes; whether it was kept.
    fn push(&mut self, tag: u64, data: Vec<u8>) -> bool {
        if self.msgs.len() >= CARRIED_MAX || self.bytes + data.len() > CARRIED_BYTES_MAX {
            return false;
        }
        self.bytes += data.len();
        self.msgs.push_back((tag, data));
        true
    }

    /// Takes the oldest carried message that matches `(tag, mask)` (UCX's rule).
    pub(super) fn take(&mut self, tag: u64, mask: u64) -> Option<(u64, Vec<u8>)> {
        if self.msgs.is_empty() {
            return None;
        }
        let i = (self.msgs.iter()).position(|(t, _)| (t ^ tag) & mask == 0)?;
        let m = self.msgs.remove(i)?;
        self.bytes -= m.1.len();
        Some(m)
    }

    /// The oldest carried message that matches `(tag, mask)`, without taking it.
    pub(super) fn oldest(&self, tag: u64, mask: u64) -> Option<TagInfo> {
        (self.msgs.iter())
            .find(|(t, _)| (t ^ tag) & mask == 0)
            .map(|(t, d)| TagInfo {
                tag: *t,
                len: d.len(),
            })
    }

    /// Drops those sent to namespace id `id` (released); how many.
    pub(super) fn forget(&mut self, layout: &TagLayout, id: u16) -> u64 {
        let before = self.msgs.len();
        self.msgs.retain(|(t, _)| layout.namespace_of(*t) != id);
        self.bytes = self.msgs.iter().map(|(_, d)| d.len()).sum();
        (before - self.msgs.len()) as u64
    }
}

/// A carried message for a receive of at most `max_len` bytes: its data, or UCX's
/// "truncated" for one that is longer (it is consumed, as UCX's receive would consume it).
pub(super) fn carried_into(data: Vec<u8>, max_len: usize) -> Result<Vec<u8>, UcxError> {
    if data.len() > max_len {
        return Err(UcxError {
            op: "receive (a message carried over from a replaced worker)",
            status: Status::MESSAGE_TRUNCATED,
        });
    }
    Ok(data)
}

impl Node {
    /// [`Action::Deaf`](tagspace_core::engine::Action::Deaf): replaces the worker if this node
    /// owns it and may ([`NodeConfig::replace_deaf_worker`]); otherwise says so.
    pub(super) fn on_deaf(&mut self) {
        self.stats.deaf += 1;
        if self.host.is_some() {
            tracing::error!(
                "this node hears no peer: the host's worker no longer receives (a stuck \
                 shared-memory queue?); the host has to replace it"
            );
            return;
        }
        if !self.replace_deaf {
            tracing::error!("this node hears no peer; not replacing its worker (configured)");
            return;
        }
        match self.replace_worker() {
            Ok(carried) => {
                self.stats.workers_replaced += 1;
                tracing::warn!(
                    carried,
                    addr = ?self.listen_addr().ok(),
                    "this node heard no peer (its receive queue is stuck): worker replaced, \
                     dialling its peers again"
                );
            }
            Err(error) => {
                tracing::error!(%error, "this node hears no peer; replacing its worker failed")
            }
        }
    }

    /// Makes a new worker and moves everything to it; returns how many messages were carried.
    fn replace_worker(&mut self) -> Result<usize, NodeError> {
        let new = Worker::new(&self.ucx)?;
        new.guard_am_ids()?;
        new.set_am_handler(self.control_am)?;
        for id in self.engine.libs().iter().flat_map(|(_, l)| l.am_ids()) {
            new.set_am_handler(id)?;
        }
        // The listener again at the address peers were told (the old one goes first, freeing
        // it); if it cannot be had, any port on the same interface, told to peers anew.
        let listener = match self.listener.take() {
            None => None,
            Some(old) => {
                let at = old.local_addr();
                drop(old);
                let at = at?;
                Some(match new.listen(at) {
                    Ok(l) => l,
                    Err(error) => {
                        tracing::warn!(%at, %error, "listening again at the same address failed; any port");
                        new.listen(SocketAddr::new(at.ip(), 0))?
                    }
                })
            }
        };
        let old = std::mem::replace(&mut self.worker, new);
        // Kept (and progressed) from here on, whatever fails below.
        self.retired.push(old.clone());
        self.listener = listener;
        #[cfg(feature = "test-hooks")]
        {
            self.deafened = false;
        }
        // Told again if the listener had to move (peers learn it once they are back).
        self.advertise();
        // What is left on the old worker closes: connections still handshaking there (their
        // HELLOs will never be read), the rest are down already.
        for conn in self.engine.conns().ids() {
            self.engine.close(conn, Some(CloseReason::Normal));
        }
        self.carry_out();
        let carried = self.carry_from(&old);
        self.with_ops(|e, t| e.repost_receives(t));
        drop(self.ack_recv.take());
        self.post_ack_recv()?;
        Ok(carried)
    }

    /// Takes every message waiting unreceived on `old` into [`Carried`]: a proven peer's (its
    /// pair value names one), of at most [`CARRY_LEN_MAX`] bytes, whose data arrives within
    /// [`CARRY_WAIT`], while [`CARRIED_MAX`] and [`CARRIED_BYTES_MAX`] allow; the rest are
    /// dropped and counted. Returns how many were carried.
    fn carry_from(&mut self, old: &Worker) -> usize {
        let layout = self.registry.layout();
        let mut carried = 0;
        let all = Instant::now();
        loop {
            if all.elapsed() > CARRY_WAIT_ALL {
                tracing::warn!(
                    "carrying messages off the replaced worker took too long; the rest are left"
                );
                break;
            }
            let taken = match old.tag_probe_take(0, 0, CARRY_LEN_MAX) {
                Ok(Some(t)) => t,
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "taking a message off the replaced worker failed");
                    break;
                }
            };
            let (info, mut req) = taken;
            let start = Instant::now();
            let done = loop {
                if let Some(done) = req.test() {
                    break Some(done);
                }
                if start.elapsed() > CARRY_WAIT {
                    break None;
                }
                old.progress();
            };
            let id = layout.namespace_of(info.tag);
            let keep = (self.engine.libs().iter()).any(|(_, l)| l.ns().id() == id)
                && !self.engine.conns().forged(layout, info.tag);
            match done {
                Some(Ok(Completion::Received { tag, data })) if keep => {
                    if self.carried.push(tag, data) {
                        carried += 1;
                    } else {
                        self.stats.carry_dropped += 1;
                    }
                }
                // Unfinished (a rendezvous from a peer already gone): dropped, which cancels
                // it and parks it with the old worker until that goes.
                Some(_) | None => self.stats.carry_dropped += 1,
            }
        }
        self.stats.carried += carried as u64;
        carried
    }

    /// Progresses the workers replaced before, takes what they completed, and lets each go
    /// once nothing made from it is left.
    pub(super) fn progress_retired(&mut self) {
        let mut errors = Vec::new();
        for w in &self.retired {
            w.progress_up_to(UCX_PROGRESS_PER_CALL);
            // Nothing on it is read any more (it could not hear: that is why it went).
            while w.take_am().is_some() {}
            // Its endpoints' failures still end what waits on them (a closing endpoint whose
            // peer died is force-closed, D3).
            while let Some(e) = w.take_ep_error() {
                errors.push(e);
            }
            w.take_completed(&mut self.completed);
        }
        for (key, error) in errors {
            self.on_ep_error(key, error);
        }
        self.retired.retain(|w| !w.is_last_handle());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The carry's bounds (messages and bytes), UCX's matching rule oldest first, and a
    /// released namespace's messages dropped with their bytes.
    #[test]
    fn carried_messages_are_bounded_matched_oldest_first_and_forgotten_by_namespace() {
        let layout = TagLayout::default();
        let tag = |id: u16, payload: u64| layout.base(id) | payload;
        let mut c = Carried::default();
        assert!(c.push(tag(40, 1), vec![1; 10]));
        assert!(c.push(tag(41, 1), vec![2; 20]));
        assert!(c.push(tag(40, 1), vec![3; 30]));
        assert_eq!(c.bytes, 60);
        let info = c.oldest(tag(40, 1), u64::MAX).unwrap();
        assert_eq!((info.tag, info.len), (tag(40, 1), 10));
        assert_eq!(
            c.take(tag(40, 1), u64::MAX).unwrap().1,
            vec![1; 10],
            "oldest first"
        );
        assert_eq!(c.bytes, 50);
        assert_eq!(c.forget(&layout, 40), 1);
        assert_eq!((c.msgs.len(), c.bytes), (1, 20));
        assert!(c.take(tag(40, 1), u64::MAX).is_none());
        // The byte bound: what would pass it is refused, what fits after is kept.
        assert!(!c.push(tag(41, 2), vec![0; CARRIED_BYTES_MAX]));
        assert!(c.push(tag(41, 2), vec![0; CARRIED_BYTES_MAX - 20]));
        assert!(!c.push(tag(41, 3), vec![0; 1]));
        assert_eq!(c.bytes, CARRIED_BYTES_MAX);
        // The message bound.
        let mut c = Carried::default();
        for i in 0..CARRIED_MAX {
            assert!(c.push(tag(41, i as u64), Vec::new()));
        }
        assert!(!c.push(tag(41, 0), Vec::new()));
    }
}
