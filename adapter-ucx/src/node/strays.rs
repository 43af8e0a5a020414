//! Strays (D2 within D4's bound): the sweep of the worker's unexpected queue, the held
//! namespaces' backlogs, and the queue view both work on.

use super::stats::count_stray;
use super::*;

impl Node {
    /// Whether code outside tagspace receives tags whose namespace field is 0 on this worker
    /// with its own calls ("legacy" tags, R6): `true` by default, and then such messages are
    /// never drained — a stranger's id-0 tags wait for that code, and pile up if it never
    /// takes them. A node whose worker nobody else uses says `false`: id-0 messages are strays
    /// like any unregistered id's (on a host's worker nothing is drained either way).
    pub fn set_legacy_tags(&mut self, used: bool) {
        self.engine.set_id0_strays(!used);
    }

    /// Bounds what each proven peer can leave waiting for `lib` (D5 for tag messages): from
    /// now on the node takes `lib`'s unexpected messages out of UCX's queue — oldest first, on
    /// the stray drain's schedule ([`DRAIN_INTERVAL_MS`], or on every `progress` while they
    /// keep coming) — into a backlog that `lib`'s receives read before they ask UCX, counted
    /// per peer. A peer whose messages waiting there would pass `limit` is cut off (CLOSE with
    /// reason `Flood`; [`NodeStats::backlog_floods`]): its held messages are dropped, and so is
    /// what it still sends to a held namespace, until it proves its identity again. A message
    /// whose pair value no proven peer was given is dropped as a stray. Nothing is copied: a
    /// held message stays where UCX keeps it (a rendezvous message's data is not even
    /// fetched) until a receive takes it into its own buffer.
    ///
    /// The library promises to receive only through this node ([`recv`](Self::recv),
    /// [`recv_from`](Self::recv_from), [`recv_into`](Self::recv_into),
    /// [`recv_into_from`](Self::recv_into_from), [`probe_inbox`](Self::probe_inbox)): a
    /// receive it posts with its own calls on the worker does not see held messages. Order is
    /// kept: a peer's messages for one tag are received in the order they were sent.
    ///
    /// Not on a host's worker (its libraries receive with their own calls; there the node
    /// takes nothing, see [`oldest_waiting`](Self::oldest_waiting)), and only with a layout
    /// that has a pair field (it tells the sender). Called again, it sets the new limit.
    pub fn hold_backlog(&mut self, lib: LibId, limit: BacklogLimit) -> Result<(), NodeError> {
        let id = self.engine.libs().ns(lib)?.id();
        let (layout, owner) = (self.registry.layout(), self.engine.owner());
        (self.backlog.hold_checked(id, limit, layout, owner)).map_err(NodeError::Usage)
    }

    /// Whether strays keep coming, or more held namespaces' messages than a pass takes:
    /// the node, not a receive, has to take them.
    pub(super) fn flooded(&self) -> bool {
        self.engine.sweep().is_flooded() || self.backlog.is_saturated()
    }

    /// How long a drain or hold pass may run ([`STRAY_FLOOD_BUDGET_US`] while flooded).
    pub(super) fn drain_budget(&self) -> Duration {
        Duration::from_micros(if self.flooded() {
            STRAY_FLOOD_BUDGET_US
        } else {
            STRAY_TIME_BUDGET_US
        })
    }

    /// A held message for a receive with matcher `m`, if its namespace is held and one
    /// matches: the oldest (it was sent before anything still in UCX's queue that matches).
    pub(super) fn take_held(&mut self, m: &tagspace_core::Matcher) -> Option<Message> {
        super::ops::held_for(&mut self.backlog, self.registry.layout(), m)
    }

    /// One pass of the held namespaces' backlogs ([`Node::hold_backlog`]), within the stray
    /// drain's time budget; cuts off the peers over their limit. Whether it took anything.
    pub(super) fn hold_pass(&mut self, deadline: Instant) -> bool {
        let layout = self.registry.layout();
        // Peers the node forgot, and their pair values: what they left held can no longer be
        // received from them (a receive tied to one makes a new value), nor be told apart
        // from a stranger's.
        let conns = self.engine.conns();
        let forgotten = conns.pairs_forgotten();
        let gone = (self.backlog).forget_unknown(forgotten, |p| conns.rx_pair_of(p).is_some());
        self.stats.backlog_dropped += gone.len() as u64;
        let mut queue = Strays {
            worker: &self.worker,
            layout,
            stats: &mut self.stats,
            by_id: &mut self.stray_by_id,
            background: &mut self.background,
            oldest: None,
        };
        let conns = self.engine.conns();
        let pass = self.backlog.pass(
            layout,
            &mut queue,
            |tag| conns.sender_of(layout, tag),
            || Instant::now() >= deadline,
        );
        self.stats.held += pass.held;
        self.stats.backlog_dropped += pass.dropped + pass.released.len() as u64;
        let took = pass.took();
        drop(pass.released);
        for &peer in &pass.floods {
            tracing::warn!(
                peer,
                "peer left more messages waiting than its backlog limit; closing its connections"
            );
            self.stats.backlog_floods += 1;
            self.stats.flood_closes += 1;
            self.engine.handle_flooded(peer);
        }
        self.carry_out();
        took
    }

    /// Ids this node keeps quarantined after their withdrawal was confirmed, because a message
    /// still waits in UCX's queue in them (host mode; see [`Node::adopt`]), or (own worker)
    /// because the stray drain has not finished with them yet.
    pub fn quarantine_held(&self) -> usize {
        self.engine.unpins().held(self.registry)
    }

    /// Runs `f` with the engine and the worker's unexpected queue as the stray
    /// drains see it (what they take is counted in the stats and parked until UCX lets it go).
    pub(super) fn with_strays<R>(
        &mut self,
        f: impl FnOnce(&mut Engine, &mut Strays<'_>) -> R,
    ) -> R {
        let mut queue = Strays {
            worker: &self.worker,
            layout: self.registry.layout(),
            stats: &mut self.stats,
            by_id: &mut self.stray_by_id,
            background: &mut self.background,
            oldest: None,
        };
        f(&mut self.engine, &mut queue)
    }

    /// D2 within D4's bound: takes out unexpected messages whose namespace id is not
    /// registered here (the control id, unregistered ids, ids beyond the registry; id 0 belongs
    /// to legacy code and is left alone unless [`set_legacy_tags`](Self::set_legacy_tags)
    /// says none runs), and registered namespaces' messages with a pair value nobody was
    /// given; at most [`STRAY_TAKES_PER_CALL`] looks and takes, and
    /// [`STRAY_PROBES_PER_CALL`] partial-mask probes that find nothing (each scans the whole
    /// queue). Returns how many it took.
    ///
    /// First the oldest unexpected message is looked at (a probe with mask 0 stops at the head
    /// of UCX's queue) and, while it is a stray, taken by the same probe with removal: a flood
    /// of strays costs O(1) per message. Behind a message someone here owns, probes for "bit b
    /// of the namespace field is set" stop at the next strays near the head; what is left is
    /// found by the sweep: one partial-mask probe per unregistered id, started every
    /// [`DRAIN_INTERVAL_MS`] and resumed where the previous call's budget ended.
    pub fn drain_strays(&mut self) -> u64 {
        let deadline = Instant::now() + self.drain_budget();
        self.drain_strays_until(deadline)
    }

    pub(super) fn drain_strays_until(&mut self, deadline: Instant) -> u64 {
        // Host mode: nothing (the engine's sweep takes nothing from a host's queue).
        // Every probe may scan UCX's whole unexpected queue, whose length a flood decides: the
        // engine's counts bound the probes, the clock bounds what they cost together.
        let (taken, looks, probes) = self
            .with_strays(|engine, queue| engine.sweep_pass(queue, || Instant::now() >= deadline));
        self.stats.stray_head_probes += looks;
        self.stats.stray_probes += probes;
        taken
    }
}

/// The worker's unexpected queue as the stray drains see it: what is taken is counted (per
/// namespace id) and its request parked until UCX lets it go.
pub(super) struct Strays<'n> {
    worker: &'n Worker,
    layout: &'n TagLayout,
    stats: &'n mut NodeStats,
    by_id: &'n mut Vec<u64>,
    background: &'n mut Vec<Request>,
    /// The tag of the oldest unexpected message, as last looked at.
    oldest: Option<u64>,
}

impl Strays<'_> {
    /// Takes one unexpected message matching `(tag, mask)` as a stray of namespace id `id`
    /// (`forged`: for its pair value).
    pub(super) fn take(&mut self, tag: u64, mask: u64, id: u16, forged: bool) -> bool {
        match self.worker.tag_probe_take(tag, mask, STRAY_MAX_LEN) {
            Ok(Some((_, req))) => {
                count_stray(self.stats, self.by_id, id, forged);
                self.background.push(req);
                true
            }
            _ => false,
        }
    }
}

impl StrayQueue for Strays<'_> {
    fn take_one(&mut self, id: u16) -> bool {
        let space = self.layout.space(id);
        self.take(space.tag, space.mask, id, false)
    }
    fn waits(&mut self, id: u16) -> bool {
        let space = self.layout.space(id);
        self.worker.tag_probe(space.tag, space.mask).is_some()
    }
}

impl engine::QueueHead for Strays<'_> {
    fn oldest_tag(&mut self) -> Option<u64> {
        // A probe with mask 0 stops at the head of UCX's queue.
        self.oldest = self.worker.tag_probe(0, 0).map(|m| m.tag);
        self.oldest
    }
    fn take_matching(&mut self, tag: u64, mask: u64, id: u16, forged: bool) -> bool {
        self.take(tag, mask, id, forged)
    }
    fn first(&mut self, tag: u64, mask: u64) -> Option<u64> {
        self.worker.tag_probe(tag, mask).map(|m| m.tag)
    }
    fn take_oldest(&mut self, id: u16, forged: bool) -> bool {
        // The message `oldest_tag` looked at, by the same mask-0 probe, which stops at the head
        // of UCX's queue: O(1) however long the queue. (Nothing ran in between: the node's
        // worker is progressed on this thread only, and a sweep never runs on a host's; an
        // exact-tag lookup would walk one of UCX's 1021 hash buckets, each a thousandth of a
        // flooded queue.)
        (self.oldest.take()).is_some() && self.take(0, 0, id, forged)
    }
}

impl engine::HoldQueue<Message> for Strays<'_> {
    fn take_first(&mut self, tag: u64, mask: u64) -> Option<(u64, usize, Message)> {
        let m = self.worker.tag_probe_hold(tag, mask)?;
        let info = m.info();
        Some((info.tag, info.len, m))
    }
    fn discard(&mut self, tag: u64, msg: Message, forged: bool) {
        // Dropping the message receives it into a few bytes (parked until UCX is done).
        drop(msg);
        if forged {
            count_stray(self.stats, self.by_id, self.layout.namespace_of(tag), true);
        }
    }
}
