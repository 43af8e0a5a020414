//! Sends and receives: the libraries' operations, routed through the engine, and the
//! matchers and routes for runtimes that send and receive with their own calls.

use super::stats::count_stray;
use super::*;
use tagspace_core::engine::{Finished, Posted};
use tagspace_core::Matcher;

impl Node {
    /// The shared endpoint to `peer`, for code outside tagspace (a legacy library) and for
    /// runtimes that send with their own buffers (see [`route_tag`](Self::route_tag)).
    /// `None` until the connection is established, which is only after the endpoint's wire-up
    /// has finished (U1): a send on it is never exposed to openucx/ucx#6872.
    pub fn endpoint_to(&self, peer: u64) -> Option<&Endpoint> {
        let i = self.engine.conns().serving(peer).ok()?;
        self.engine.conns().get(i)?.io.ep.as_ref()
    }

    /// The fast path: the endpoint to `peer` and the tag for `payload` in `lib`'s namespace
    /// there, for a runtime that sends with [`Endpoint::tag_send`] itself. `Ok(None)` while the
    /// peer has not announced the name; `NoConnection` until the connection is established
    /// (after the endpoint's wire-up, U1). A send made this way is the caller's: if the peer
    /// fails, UCX (not tagspace) decides when its request ends.
    pub fn route_tag(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<(&Endpoint, u64)>, NodeError> {
        let found = self
            .engine
            .conns()
            .route_tag(self.engine.libs(), lib, peer, payload);
        let Some((c, tag)) = found.map_err(|m| m.error(peer))? else {
            return Ok(None);
        };
        let ep = c.io.ep.as_ref();
        Ok(Some((ep.ok_or(NodeError::NoConnection { peer })?, tag)))
    }

    /// The endpoint to `peer` and `tag(lib's namespace, the peer's route for it)`.
    pub(super) fn routed(
        &self,
        lib: LibId,
        peer: u64,
        tag: impl FnOnce(&Namespace<'static, CAP>, Route) -> Result<Tag, TagError>,
    ) -> Result<Option<(&Endpoint, u64)>, NodeError> {
        let Some((i, route)) = self.engine.conns().route(self.engine.libs(), lib, peer)? else {
            return Ok(None);
        };
        let ep = self.engine.conns().get(i).and_then(|c| c.io.ep.as_ref());
        let ep = ep.ok_or(NodeError::NoConnection { peer })?;
        Ok(Some((ep, tag(self.engine.libs().ns(lib)?, route)?.raw())))
    }

    /// [`route_tag`](Self::route_tag) for the peer's inbox tag of `lib` ("a new transmission
    /// has begun"), for a runtime that sends it with its own calls.
    pub fn route_inbox(
        &self,
        lib: LibId,
        peer: u64,
    ) -> Result<Option<(&Endpoint, u64)>, NodeError> {
        self.routed(lib, peer, |ns, route| ns.remote_inbox(route))
    }

    /// Sends `data` with `payload` to library `lib`'s namespace on `peer`, waiting up to
    /// `timeout_ms` for the connection and for the peer to announce the name (P2).
    pub fn send(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
        data: Vec<u8>,
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(lib, peer, Target::Data(payload), data, timeout_ms)
    }

    /// Sends to the peer's inbox tag for `lib` ("a new transmission has begun").
    pub fn send_inbox(&mut self, lib: LibId, peer: u64, data: Vec<u8>, timeout_ms: u64) -> OpId {
        self.start_send(lib, peer, Target::Inbox, data, timeout_ms)
    }

    /// Sends an Active Message to `lib`'s local AM id `local` on `peer`.
    pub fn am_send(
        &mut self,
        lib: LibId,
        peer: u64,
        local: u16,
        data: Vec<u8>,
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(lib, peer, Target::Am(local), data, timeout_ms)
    }

    pub(super) fn start_send(
        &mut self,
        lib: LibId,
        peer: u64,
        target: Target,
        data: Vec<u8>,
        timeout_ms: u64,
    ) -> OpId {
        let now = self.clock.now_ms();
        let w = Waiting::new(lib, peer, target, data, now, timeout_ms);
        self.with_ops(|e, t| e.send(t, w, now))
    }

    /// Sends `data` from the caller's buffer to `payload` in `lib`'s namespace on `peer`,
    /// returning once UCX no longer needs the buffer (at once for a small message sent
    /// eagerly): no allocation and no operation to take — the path for pooled or reused
    /// buffers, at raw libucp's cost (bench (a), "buf").
    ///
    /// Unlike [`send`](Self::send) it does not wait for the connection or the peer's
    /// announcement (P2): `NoConnection` or `PeerLacksNamespace` (waited 0 ms) at once, so a
    /// caller sends the first message with `send` or checks [`route_tag`](Self::route_tag).
    /// While it blocks (a rendezvous waits for the receiver) only the UCX worker is progressed,
    /// not the node's control traffic. Both calls block: a rendezvous between two nodes that
    /// one thread drives in turn cannot finish inside either call (use `send`/`recv` there).
    pub fn send_from(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        let r = match self.route_tag(lib, peer, payload) {
            Ok(Some((ep, tag))) => ep.tag_send_from(tag, data).map_err(NodeError::from),
            Ok(None) => Err(self.engine.libs().lacks(lib, peer, 0)),
            Err(e) => Err(e),
        };
        self.count(lib, r.is_ok(), true);
        r
    }

    /// Receives the message for `payload` in `lib`'s namespace from any proven peer (as
    /// [`recv`](Self::recv): the pair field free, a stranger's message dropped and waited past)
    /// into the caller's `buf`, progressing the worker until it has arrived; returns its length. The
    /// buffer is borrowed for this call only: nothing is allocated, and a message already
    /// waiting is taken without a UCX request (see [`Worker::tag_recv_into`]).
    ///
    /// A message longer than `buf` fails with `UCS_ERR_MESSAGE_TRUNCATED` (it is consumed);
    /// with `timeout`, a receive still unmatched then fails with `UCS_ERR_TIMED_OUT` and takes
    /// nothing later. While it blocks only the UCX worker is progressed, not the node's control
    /// traffic (announcements, heartbeats): keep timeouts short, or use [`recv`](Self::recv)
    /// and [`progress`](Self::progress), which are also peer-aware ([`recv_from`](Self::recv_from)).
    pub fn recv_into(
        &mut self,
        lib: LibId,
        payload: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, NodeError> {
        self.recv_into_inner(lib, None, payload, buf, timeout)
    }

    /// [`recv_into`](Self::recv_into) for `peer`'s message only: exact (full mask, D1: a
    /// message already waiting is taken by a hashed lookup, without a UCX request — in a held
    /// namespace ([`hold_backlog`](Self::hold_backlog)) one the node holds is taken first, by a
    /// scan of its backlog), and no
    /// other process's message matches (see [`recv_from`](Self::recv_from)). Unlike
    /// `recv_from` it does not end when `peer` goes down: give it a `timeout`.
    pub fn recv_into_from(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, NodeError> {
        self.recv_into_inner(lib, Some(peer), payload, buf, timeout)
    }

    pub(super) fn recv_into_inner(
        &mut self,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, NodeError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let m = self.engine.recv_matcher(lib, from, payload);
        let held = m.as_ref().ok().and_then(|m| self.take_held(m));
        let carried = match held {
            Some(_) => None,
            None => (m.as_ref().ok()).and_then(|m| self.carried.take(m.tag(), m.mask())),
        };
        let r = m.and_then(|m| loop {
            if let Some((_, data)) = carried {
                let data = super::deaf::carried_into(data, buf.len())?;
                buf[..data.len()].copy_from_slice(&data);
                break Ok(data.len());
            }
            if let Some(held) = held {
                break Ok(held.recv_into(buf)?.len);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let info = self.worker.tag_recv_into(m.tag(), m.mask(), buf, left)?;
            // a stranger's message (a pair value no proven peer was given): wait on
            if from.is_some() || !self.forged(info.tag) {
                return Ok(info.len);
            }
        });
        self.count(lib, r.is_ok(), false);
        r
    }

    /// `f` with the engine and UCX as its operations' transport.
    pub(super) fn with_ops<R>(&mut self, f: impl FnOnce(&mut Engine, &mut UcxOps<'_>) -> R) -> R {
        let mut t = UcxOps {
            worker: &self.worker,
            layout: self.registry.layout(),
            backlog: &mut self.backlog,
            stats: &mut self.stats,
            by_id: &mut self.stray_by_id,
            abandoned: &mut self.abandoned,
            carried: &mut self.carried,
        };
        f(&mut self.engine, &mut t)
    }

    pub(super) fn count(&mut self, lib: LibId, ok: bool, sent: bool) {
        self.engine.libs_mut().count(lib, ok, sent);
    }

    /// Posts a receive for `payload` in `lib`'s namespace from any proven peer, for a message
    /// of at most `max_len` bytes (a longer one fails with `UCS_ERR_MESSAGE_TRUNCATED`).
    ///
    /// Every bit of the tag is matched but the pair field (where the layout has one): a
    /// partial mask, as MPI's any-source receives, which takes UCX off its hashed fast path
    /// while posted. What it takes is checked: a message whose pair value no proven peer was
    /// given (made up by a process that never proved its identity here) is dropped, counted
    /// ([`NodeStats::forged`]), and the receive waits on. A proven peer may still send any
    /// payload of this namespace here, as with any receive from any source.
    ///
    /// The receive is not tied to a peer: if the sender dies it may never finish (UCX cannot
    /// cancel a receive already matched to a dead peer's rendezvous). Use
    /// [`recv_from`](Self::recv_from) when the sender is known: exact (full mask, D1), and only
    /// that peer's messages match.
    pub fn recv(&mut self, lib: LibId, payload: u64, max_len: usize) -> OpId {
        self.post(lib, None, payload, max_len)
    }

    /// Like [`recv`](Self::recv), for a message the library expects from `peer` (D3): when
    /// `peer` goes down, the receive finishes with [`NodeError::PeerDown`] —
    /// * at once if its connection *failed* (UCX's peer error handling), including a receive
    ///   already matched to that peer's rendezvous, which UCX would otherwise leave in progress
    ///   for ever; its buffer stays with UCX until UCX lets the request go;
    /// * if the peer *closed* its connection in order, the receive is cancelled the UCX way:
    ///   one already matched still completes with its data, one not yet matched finishes with
    ///   `PeerDown { cause: None }`.
    ///
    /// A receive posted for a peer that has already failed fails at once. Only `peer`'s
    /// messages match it: the tag it waits for carries, in the layout's pair field, the value
    /// this node gives `peer` alone once it has proven its identity (a full mask, D1) — another
    /// peer, or a stranger who copies the namespace and payload, makes another tag (a stranger
    /// guesses the value with probability `2^-pair_bits` per message). Receives of other peers
    /// are never touched, and [`cancel`](Self::cancel) keeps UCX's meaning for every receive.
    pub fn recv_from(&mut self, lib: LibId, peer: u64, payload: u64, max_len: usize) -> OpId {
        self.post(lib, Some(peer), payload, max_len)
    }

    pub(super) fn post(
        &mut self,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
        max_len: usize,
    ) -> OpId {
        let now = self.clock.now_ms();
        self.with_ops(|e, t| e.recv(t, lib, from, payload, max_len, now))
    }

    /// Whether a tag a receive from any peer took carries a pair value this node gave no
    /// proven peer (never, where the layout has no pair field): counted as a stray of its
    /// namespace.
    pub(super) fn forged(&mut self, tag: u64) -> bool {
        let layout = self.registry.layout();
        if !self.engine.conns().forged(layout, tag) {
            return false;
        }
        count_stray(
            &mut self.stats,
            &mut self.stray_by_id,
            layout.namespace_of(tag),
            true,
        );
        true
    }

    /// Takes the next inbox message for `lib` if one waits (exact probe with remove, then a
    /// receive of at most `max_len` bytes): `Some(op)` completes with the data.
    ///
    /// It takes only what a proven peer sent: an inbox message with a pair value no proven
    /// peer was given (a stranger's) is taken out and dropped as a stray, at most
    /// [`FORGED_PER_PROBE`] of them per call.
    pub fn probe_inbox(&mut self, lib: LibId, max_len: usize) -> Result<Option<OpId>, NodeError> {
        let m = self.engine.libs().ns(lib)?.inbox_matcher_any_peer();
        if let Some(held) = self.take_held(&m) {
            let req = held.recv_woken(max_len)?;
            return Ok(Some(self.engine.ops_mut().start(Next::Wait(
                Op::Receiving {
                    lib,
                    req,
                    from: None,
                    again: None,
                },
            ))));
        }
        if let Some((_, data)) = self.carried.take(m.tag(), m.mask()) {
            let r = super::deaf::carried_into(data, max_len).map_err(NodeError::from);
            let done = Next::finished(self.engine.libs_mut(), lib, r.map(Some), false);
            return Ok(Some(self.engine.ops_mut().start(done)));
        }
        for _ in 0..FORGED_PER_PROBE {
            // Look first: a stranger's message is taken by its exact tag and never buffered
            // beyond STRAY_MAX_LEN, a proven peer's with the library's limit.
            let Some(info) = self.worker.tag_probe(m.tag(), m.mask()) else {
                return Ok(None);
            };
            if self.forged(info.tag) {
                if let Some((_, req)) =
                    (self.worker).tag_probe_take(info.tag, u64::MAX, STRAY_MAX_LEN)?
                {
                    self.background.push(req);
                }
                continue;
            }
            return match self
                .worker
                .tag_probe_take_woken(info.tag, u64::MAX, max_len)?
            {
                None => Ok(None),
                Some((_, req)) => Ok(Some(self.engine.ops_mut().start(Next::Wait(
                    Op::Receiving {
                        lib,
                        req,
                        from: None,
                        again: None,
                    },
                )))),
            };
        }
        Ok(None)
    }

    /// The oldest message waiting for `lib` — sent to its namespace but not received (yet) —
    /// as its tag and length; `None` when nothing waits. In a held namespace
    /// ([`hold_backlog`](Self::hold_backlog)) the node's backlog comes first.
    ///
    /// Otherwise messages to a *registered* namespace are the library's business, as in UCX:
    /// tagspace never drains them (but forgeries: a pair value no proven peer was given), so a
    /// peer (or a bug) can make them pile up for as long as the library does not receive them.
    /// UCX keeps no count of its unexpected queue and cannot be asked for one without taking
    /// the messages, so this answers "is anything waiting, and what is the oldest" — enough to
    /// watch for a library that has stopped receiving. It is one partial-mask probe, which
    /// scans UCX's queue: call it to monitor, not per message.
    pub fn oldest_waiting(&self, lib: LibId) -> Result<Option<TagInfo>, NodeError> {
        let ns = self.namespace(lib).ok_or(NodeError::NoSuchLibrary)?;
        let m = ns.matcher_any();
        if let Some((tag, len)) = self.backlog.oldest(ns.id()) {
            return Ok(Some(TagInfo { tag, len }));
        }
        if let Some(info) = self.carried.oldest(m.tag(), m.mask()) {
            return Ok(Some(info));
        }
        Ok(self.worker.tag_probe(m.tag(), m.mask()))
    }

    /// The exact matcher (full mask, D1) for `payload` in `lib`'s namespace from `peer`: what
    /// `peer`'s [`route_tag`](Self::route_tag) for this library and payload sends to, for a
    /// runtime that receives with its own calls. Only `peer`'s messages match it (see
    /// [`recv_from`](Self::recv_from)).
    pub fn matcher_from(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        self.engine.recv_matcher(lib, Some(peer), payload)
    }

    /// [`matcher_from`](Self::matcher_from) without making anything: `None` while this node
    /// has made no pair value for `peer` yet (before it connected, and before any receive tied
    /// to it) — then ask `matcher_from`, which makes it.
    pub fn matcher_known(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<tagspace_core::Matcher>, NodeError> {
        let ns = self.engine.libs().ns(lib)?;
        let pair = match self.registry.layout().pair_bits() {
            0 => Some(0),
            _ => self.engine.conns().rx_pair_of(peer),
        };
        Ok(match pair {
            Some(pair) => Some(ns.matcher_from(pair, payload)?),
            None => None,
        })
    }

    /// The matcher for `payload` in `lib`'s namespace from any peer: the pair field free (a
    /// partial mask where the layout has one). It also takes a message a stranger made up:
    /// check the received tag with [`sender_of`](Self::sender_of).
    pub fn matcher_any_peer(
        &self,
        lib: LibId,
        payload: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        Ok(self.engine.libs().ns(lib)?.matcher_any_peer(payload)?)
    }

    /// The exact matcher of `lib`'s inbox as `peer` sends to it.
    pub fn inbox_matcher_from(
        &mut self,
        lib: LibId,
        peer: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        let pair = self.engine.rx_pair(peer);
        Ok(self.engine.libs().ns(lib)?.inbox_matcher_from(pair))
    }

    /// `lib`'s inbox from any peer (the pair field free; check with
    /// [`sender_of`](Self::sender_of)).
    pub fn inbox_matcher_any_peer(&self, lib: LibId) -> Result<tagspace_core::Matcher, NodeError> {
        Ok(self.engine.libs().ns(lib)?.inbox_matcher_any_peer())
    }

    /// Who sent a message with `tag` to a namespace here: the proven peer whose pair value it
    /// carries, or `None` — no proven peer was given that value, so a process that never
    /// proved its identity here made the tag up (drop the message). Where the layout has no
    /// pair field nobody can tell: `None`.
    pub fn sender_of(&self, tag: u64) -> Option<u64> {
        self.engine.conns().sender_of(self.registry.layout(), tag)
    }

    /// Listens on `lib`'s local AM id `local`.
    pub fn am_listen(&mut self, lib: LibId, local: u16) -> Result<(), NodeError> {
        let id = self.engine.libs_mut().am_listen(lib, local)?;
        self.worker.set_am_handler(id)?;
        Ok(())
    }

    /// The next Active Message for `lib` on `local`.
    pub fn am_take(&mut self, lib: LibId, local: u16) -> Option<Vec<u8>> {
        self.engine.libs_mut().am_take(lib, local)
    }

    /// Cancels a receive still waiting for its message (it then finishes with
    /// `UCS_ERR_CANCELED`); no effect on other operations.
    pub fn cancel(&mut self, op: OpId) {
        if let Some(Op::Receiving { req, .. }) = self.engine.ops().get(op) {
            req.cancel();
        }
    }

    /// Whether `op` has finished (without taking it).
    pub fn is_done(&self, op: OpId) -> bool {
        self.engine.ops().is_done(op)
    }

    /// The result of an operation once it has finished (`Ok(Some(data))` for receives); taking
    /// it forgets the operation.
    pub fn take(&mut self, op: OpId) -> Option<Result<Option<Vec<u8>>, NodeError>> {
        let now = self.clock.now_ms();
        self.with_ops(|e, t| e.take(t, op, now))
    }

    /// Operations not yet taken.
    pub fn pending_ops(&self) -> usize {
        self.engine.ops().len()
    }
}

/// UCX, for the engine's executor of operations ([`engine::Transport`]): requests on the
/// worker and its endpoints.
pub(super) struct UcxOps<'a> {
    pub(super) worker: &'a Worker,
    pub(super) layout: &'a TagLayout,
    /// The held namespaces' messages, which receives take first.
    pub(super) backlog: &'a mut engine::Backlog<Message>,
    pub(super) stats: &'a mut NodeStats,
    pub(super) by_id: &'a mut [u64],
    /// Sends given up (D3) before UCX finished them, by endpoint.
    pub(super) abandoned: &'a mut Vec<(EpKey, Request)>,
    /// Messages carried over from a replaced worker, which receives take first.
    pub(super) carried: &'a mut super::deaf::Carried,
}

impl engine::Transport<EpKey, Io, UcxError> for UcxOps<'_> {
    type Send = Request;
    type Recv = Request;

    fn send(
        &mut self,
        io: &Io,
        peer: u64,
        dest: Dest,
        data: &mut Vec<u8>,
    ) -> Result<Option<Request>, NodeError> {
        let ep = io.ep.as_ref().ok_or(NodeError::NoConnection { peer })?;
        let data = std::mem::take(data);
        let started = match dest {
            Dest::Tag(tag) => ep.tag_send_woken(tag, data)?,
            Dest::Am(id) => ep.am_send_woken(id, data)?,
        };
        Ok(match started {
            Started::Done(_) => None,
            Started::Pending(req) => Some(req),
        })
    }

    fn test_send(&mut self, req: &mut Request) -> Option<Result<(), UcxError>> {
        Some(req.test()?.map(drop))
    }

    fn post(&mut self, m: &Matcher, max_len: usize) -> Result<Posted<Request>, NodeError> {
        // Held messages are the oldest (taken out of UCX's queue before the worker went),
        // then the carried ones, then the worker's.
        if let Some(held) = held_for(self.backlog, self.layout, m) {
            return Ok(Posted::Waiting(held.recv_woken(max_len)?));
        }
        if let Some((_, data)) = self.carried.take(m.tag(), m.mask()) {
            return Ok(Posted::Took(super::deaf::carried_into(data, max_len)?));
        }
        let buf = Vec::with_capacity(max_len);
        Ok(Posted::Waiting(self.worker.tag_recv_woken(
            m.tag(),
            m.mask(),
            buf,
        )?))
    }

    fn test_recv(&mut self, req: &mut Request) -> Option<Finished<UcxError>> {
        let r = req.test()?;
        let data = r.map(|done| match done {
            Completion::Received { data, .. } => data,
            // A receive never completes as a send: nothing received.
            Completion::Sent(_) => Vec::new(),
        });
        let tag = req.sender_tag();
        Some(Finished { tag, data })
    }

    fn is_cancelled(&self, e: &UcxError) -> bool {
        e.status == Status::CANCELED
    }

    fn cancel(&mut self, req: &mut Request) -> bool {
        req.cancel();
        false // UCX finishes it (cancelled, or with its data if it had matched)
    }

    fn abandon_send(&mut self, conn: EpKey, req: Request) {
        self.stats.failed_by_peer_down += 1;
        // Kept until UCX finishes it: its endpoint is force-closed, never flushed, meanwhile
        // (`Node::close_retired`).
        self.abandoned.push((conn, req));
    }

    fn abandon_recv(&mut self, req: Request) {
        self.stats.failed_by_peer_down += 1;
        drop(req); // cancelled, and parked with its buffer until UCX lets it go
    }

    fn forged(&mut self, tag: u64) {
        count_stray(self.stats, self.by_id, self.layout.namespace_of(tag), true);
    }
}

/// A message held for matcher `m` in a held namespace's backlog, if one is.
pub(super) fn held_for(
    backlog: &mut engine::Backlog<Message>,
    layout: &TagLayout,
    m: &Matcher,
) -> Option<Message> {
    if !backlog.is_active() {
        return None;
    }
    let id = layout.namespace_of(m.tag());
    Some(backlog.take(id, m.tag(), m.mask())?.msg)
}
