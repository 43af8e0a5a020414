//! Host mode: endpoints a runtime owns, attached, detached and reported failed, and the exact
//! acknowledgement receives a host's worker gets instead of a wildcard.

use super::*;

impl Node {
    /// Host mode: what the node found on the host's worker; `None` on a worker of its own.
    pub fn host(&self) -> Option<HostInfo> {
        self.host
    }

    /// Host mode: lets tagspace use the host's endpoint `ep` to one peer. The handshake runs
    /// in [`progress`](Self::progress); the peer's libraries appear as it completes
    /// ([`PeerEvent::Up`]). `side`: [`Role::Initiator`] if this process created the endpoint
    /// to the peer's listener, [`Role::Acceptor`] if it came from a connection request. For
    /// endpoints both processes created from each other's worker address (one UCX connection
    /// for the pair), the two must pass different sides: e.g. the lower rank `Initiator`.
    /// Control frames the peer sent before this call were kept (at most
    /// [`UNATTACHED_FRAMES_MAX`]) and are handled now.
    ///
    /// # Safety
    /// `ep` must be a live endpoint on this node's worker, and stay live until
    /// [`detach`](Self::detach) returns or the node is dropped.
    pub unsafe fn attach(&mut self, ep: sys::ucp_ep_h, side: Role) -> Result<(), NodeError> {
        // SAFETY: the caller's promise.
        unsafe { self.attach_as(ep, side, None) }
    }

    /// Host mode: attaches the host's endpoint `ep`, which the host connected to where the lost
    /// `peer` said it listens ([`take_reconnect_needed`](Self::take_reconnect_needed)), as the
    /// initiator of a reconnect. Its HELLO says so, so the peer keeps this connection over any
    /// older one to this process that it has not found dead yet (a half-open connection after
    /// a cut link would otherwise stay its route until its own heartbeat fired), and `peer` is
    /// counted back (`stats().reconnects`) once it proves itself. A different process proving
    /// itself there (the peer restarted) is a new peer, and the lost one is given up.
    ///
    /// # Safety
    /// As for [`attach`](Self::attach).
    pub unsafe fn attach_reconnect(
        &mut self,
        ep: sys::ucp_ep_h,
        peer: u64,
    ) -> Result<(), NodeError> {
        // SAFETY: the caller's promise.
        unsafe { self.attach_as(ep, Role::Initiator, Some(peer)) }
    }

    /// [`attach`](Self::attach), as the redial of `redial_of` if set.
    ///
    /// # Safety
    /// As for [`attach`](Self::attach).
    unsafe fn attach_as(
        &mut self,
        ep: sys::ucp_ep_h,
        side: Role,
        redial_of: Option<u64>,
    ) -> Result<(), NodeError> {
        if self.host.is_none() {
            return Err(NodeError::Usage(
                "attach is for a node on a host's worker (Node::adopt); use connect",
            ));
        }
        if ep.is_null() {
            return Err(NodeError::Usage("the host's endpoint handle is NULL"));
        }
        let key = EpKey::of(ep);
        if self.attached.contains(&key) {
            return Err(NodeError::Usage("this endpoint is already attached"));
        }
        if let Some(j) = self.closing.iter().position(|c| c.key == key) {
            // A reused address: the old endpoint's leftovers are tagspace's no more.
            let c = self.closing.swap_remove(j);
            drop(c.waits);
        }
        // The old endpoint's given-up sends: UCX's to finish, parked on the worker.
        self.abandoned.retain(|(k, _)| *k != key);
        self.attached.insert(key);
        self.failed_eps.retain(|k| *k != key); // a reused address: a new endpoint
                                               // SAFETY: the caller's promise.
        let ep = unsafe { Endpoint::borrow(&self.worker, ep) };
        let conn = self.add_conn(ep, side);
        if let Some(peer) = redial_of {
            // Before any frame of the connection goes out: its HELLO carries the flag.
            self.engine.dial_started(peer, conn);
        }
        for f in self.take_unattached(key) {
            self.on_control(key, &f);
        }
        Ok(())
    }

    /// Host mode: the token of the peer on the host's endpoint `ep`, once its connection is
    /// established (`None` before, and after it went down or was detached): how a host that
    /// knows its endpoint finds the peer's name for routing.
    pub fn peer_on(&self, ep: sys::ucp_ep_h) -> Option<u64> {
        let key = EpKey::of(ep);
        self.engine
            .conns()
            .iter()
            .find(|c| {
                c.key() == key && c.io.ep.is_some() && c.is_open() && c.session().is_established()
            })
            .and_then(Conn::peer)
    }

    /// Host mode: stops using the host's endpoint `ep`. The peer is told (an orderly CLOSE,
    /// sent on `ep` before this returns: close the endpoint in order, not forced, for the peer
    /// to see it — unless [`sends_given_up_on`](Self::sends_given_up_on) says a send on it is
    /// still unfinished: then force-close it), libraries hear [`PeerEvent::Down`] if it was the peer's last connection, and
    /// sends still in flight on it end with [`NodeError::PeerDown`] (their buffers stay parked
    /// until UCX ends them). tagspace makes no UCX call on `ep` after this returns. Detach
    /// every attached endpoint before closing it, also after the peer closed the connection
    /// ([`PeerEvent::Down`]); one reported with [`peer_failed`](Self::peer_failed) is
    /// detached already.
    pub fn detach(&mut self, ep: sys::ucp_ep_h) -> Result<(), NodeError> {
        let r = self.detach_inner(ep);
        // What UCX finished meanwhile is let go, so that the answer below is current.
        self.abandoned.retain_mut(|(_, r)| r.test().is_none());
        r
    }

    /// Host mode: whether a send tagspace gave up on the host's endpoint `ep` (it ended with
    /// `PeerDown`: the peer went down, or `ep` was detached with it in flight) is still
    /// unfinished in UCX. If so, close `ep` with `UCP_EP_CLOSE_FLAG_FORCE`, not in order: UCX
    /// 1.13 and later destroy a flush-closed endpoint without purging such a send, and a UCX
    /// built with assertions (Debian 12's 1.13.1) aborts the process; a forced close cancels
    /// it first.
    pub fn sends_given_up_on(&self, ep: sys::ucp_ep_h) -> bool {
        let key = EpKey::of(ep);
        self.abandoned.iter().any(|(k, _)| *k == key)
    }

    fn detach_inner(&mut self, ep: sys::ucp_ep_h) -> Result<(), NodeError> {
        let key = EpKey::of(ep);
        if !self.attached.remove(&key) {
            if let Some(j) = self.failed_eps.iter().position(|k| *k == key) {
                // Failed and so detached already (peer_failed, handled by progress).
                self.failed_eps.remove(j);
                return Ok(());
            }
            return Err(NodeError::Usage("this endpoint is not attached"));
        }
        let detached = UcxError {
            op: "endpoint detached by the host",
            status: Status::CANCELED,
        };
        if let Some(i) = self.engine.conns().find(key, |c| c.io.ep.is_some()) {
            self.engine.close(i, Some(CloseReason::Normal));
            self.carry_out();
        }
        if let Some(j) = self.closing.iter().position(|c| c.key == key) {
            let c = self.closing.swap_remove(j);
            self.abandon_closing(c, detached);
        }
        self.take_unattached(key);
        Ok(())
    }

    /// Host mode: the host's endpoint `ep` failed with UCX status `status` (what its error
    /// handler was given). Handled as tagspace's own error handler would be (D3): operations
    /// on it fail, the peer goes down if this was its last connection. tagspace makes no
    /// further UCX call on `ep`, and never closes it: the host does (no
    /// [`detach`](Self::detach) needed; one is harmless). An endpoint that is not attached is
    /// ignored.
    pub fn peer_failed(&mut self, ep: sys::ucp_ep_h, status: i8) {
        let e = UcxError {
            op: "endpoint (failure reported by the host)",
            status: failure_status(status),
        };
        // At once (a shared node queues it for its next `progress`): the endpoint is detached
        // from here on, and a later `detach` of it is harmless.
        self.on_ep_error(EpKey::of(ep), e);
    }

    /// Where a shared node ([`crate::shared::SharedNode`]) reports failures without its lock.
    pub(crate) fn error_sink(&self) -> crate::ucp::ErrorSink {
        self.worker.error_sink()
    }

    /// Takes the frames kept for endpoint `key` (oldest first) out of the unattached queue.
    pub(super) fn take_unattached(&mut self, key: EpKey) -> Vec<Vec<u8>> {
        let (mine, rest) = std::mem::take(&mut self.unattached)
            .into_iter()
            .partition(|(k, _)| *k == key);
        self.unattached = rest;
        let mine: Vec<Vec<u8>> = mine.into_iter().map(|(_, f)| f).collect();
        self.unattached_bytes -= mine.iter().map(Vec::len).sum::<usize>();
        mine
    }

    /// Host mode: keeps a control frame from an endpoint not attached yet, within bounds.
    pub(super) fn keep_unattached(&mut self, key: EpKey, bytes: &[u8]) {
        while !self.unattached.is_empty()
            && (self.unattached.len() >= UNATTACHED_FRAMES_MAX
                || self.unattached_bytes + bytes.len() > EARLY_BYTES_MAX)
        {
            if let Some((_, f)) = self.unattached.pop_front() {
                self.unattached_bytes -= f.len();
                self.stats.unattached_dropped += 1;
            }
        }
        if bytes.len() > EARLY_BYTES_MAX {
            self.stats.unattached_dropped += 1;
            return;
        }
        self.unattached_bytes += bytes.len();
        self.unattached.push_back((key, bytes.to_vec()));
    }

    /// Host mode: hands the exact ack receives that completed to their sessions.
    pub(super) fn take_exact_acks(&mut self) -> bool {
        let mut done = Vec::new();
        for (&tag, req) in self.ack_exact.iter_mut() {
            if let Some(r) = req.test() {
                done.push((tag, r.is_ok()));
            }
        }
        for &(tag, ok) in &done {
            self.ack_exact.remove(&tag);
            if ok {
                self.on_ack_tag(tag);
            }
        }
        !done.is_empty()
    }

    /// Host mode: one exact receive per ack tag some session waits for; receives nobody waits
    /// for any more are cancelled. Returns whether it changed anything.
    pub(super) fn sync_ack_recvs(&mut self) -> bool {
        let layout = self.registry.layout();
        let wanted: std::collections::HashSet<u64> = self
            .engine
            .conns()
            .awaited_ack_tags(layout, |io| io.ep.is_some())
            .collect();
        if wanted.is_empty() && self.ack_exact.is_empty() {
            return false;
        }
        let before = self.ack_exact.len();
        // Dropping a receive cancels it (and parks it until UCX lets it go).
        self.ack_exact.retain(|tag, _| wanted.contains(tag));
        let mut changed = before != self.ack_exact.len();
        for tag in wanted {
            if self.ack_exact.contains_key(&tag) {
                continue;
            }
            match self.worker.tag_recv(tag, u64::MAX, Vec::with_capacity(0)) {
                Ok(r) => {
                    self.ack_exact.insert(tag, r);
                    changed = true;
                }
                Err(e) => tracing::error!(error = %e, "posting a withdrawal-ack receive failed"),
            }
        }
        changed
    }
}
