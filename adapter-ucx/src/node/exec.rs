//! The control plane: the transport's events handed to the engine, and what the engine asks
//! for carried out — the one way a connection closes; an operation that ends early (D3)
//! handed to the engine's executor; control frames and withdrawal acknowledgements (R7) sent
//! and received.

use super::stats::count_close;
use super::*;

impl Node {
    /// Handles the endpoint failures UCX (or the host) queued; true if there were any. A
    /// shared node does this before anything else it does under its lock, so that no call
    /// uses an endpoint whose failure was reported before the call began.
    pub(crate) fn absorb_ep_errors(&mut self) -> bool {
        let mut failed = false;
        while let Some((key, e)) = self.worker.take_ep_error() {
            failed = true;
            self.on_ep_error(key, e);
        }
        failed
    }

    pub(super) fn on_ep_error(&mut self, key: EpKey, e: UcxError) {
        if self.attached.remove(&key) {
            // A host's endpoint reported failed (a shared node's `peer_failed` queues it here):
            // detached from now on, as a plain node's `peer_failed` does at once.
            self.take_unattached(key);
            if self.failed_eps.len() >= FAILED_EPS_KEPT {
                self.failed_eps.pop_front();
            }
            self.failed_eps.push_back(key);
        }
        if let Some(j) = self.closing.iter().position(|c| c.key == key) {
            // Failed while being closed in order: stop waiting for its requests.
            let c = self.closing.swap_remove(j);
            tracing::debug!(error = %e, "endpoint failed while closing");
            self.abandon_closing(c, e);
            return;
        }
        let Some(i) = self.engine.conns().find(key, |c| c.io.ep.is_some()) else {
            return;
        };
        match self.engine.conns().get(i).map(|c| (c.peer(), c.state())) {
            // The peer closed its side of a superseded connection: expected.
            Some((_, engine::LinkState::Superseded { .. })) | None => {
                tracing::debug!(error = %e, "superseded endpoint failed")
            }
            Some((peer, _)) => tracing::warn!(?peer, error = %e, "endpoint failed"),
        }
        self.engine.handle_failed(i, e);
        self.carry_out();
    }

    /// An endpoint being closed in order will not finish (it failed, or the host took it
    /// back): the sends still in flight on it end, and it is force-closed.
    pub(super) fn abandon_closing(&mut self, c: Closing, e: UcxError) {
        self.engine.handle_retired_failed(c.key, c.peer, e);
        self.carry_out();
        drop(c.waits);
        self.force_close(c.key, c.ep);
    }

    /// Closes endpoint `ep` (key `key`) at once: what is in flight on it is purged by UCX, so
    /// the sends given up on it are UCX's to finish, parked on the worker (see `abandoned`).
    /// Dropping the close request leaves it to UCX (it frees it when done). A host's endpoint
    /// is the host's to close.
    pub(super) fn force_close(&mut self, key: EpKey, ep: Endpoint) {
        if !ep.is_borrowed() {
            self.abandoned.retain(|(k, _)| *k != key);
        }
        drop(ep.close(true));
    }

    /// Carries out everything the engine asked for, in its order.
    pub(super) fn carry_out(&mut self) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Transmit(i) => {
                    self.flush_conn(i);
                }
                Action::Close { conn, how, why } => self.close(conn, how, why),
                Action::End { op, peer, cause } => {
                    self.with_ops(|e, t| e.end_op(t, op, peer, cause))
                }
                // Orderly close: UCX's cancel (a matched receive still completes); the
                // cancelled receive ends as `PeerDown` when UCX reports it.
                Action::Cancel { op, peer } => self.with_ops(|e, t| e.cancel_op(t, op, peer)),
                Action::Proven { peer } => {
                    tracing::info!(peer, "connection established");
                    self.backlog.proven(peer);
                }
                Action::Dial { peer, addr } => self.dial(peer, addr),
                Action::Deaf => self.on_deaf(),
            }
        }
    }

    /// The one way a connection's endpoint closes. Orderly: taken out of service and closed
    /// once its requests have finished ([`close_retired`](Self::close_retired)). Forced (its
    /// transport failed; D3): what it has in flight is given up — UCX may keep a failed
    /// endpoint's requests in progress for ever (a shared-memory lane to a dead peer is never
    /// discarded) — and it is force-closed at once.
    pub(super) fn close(&mut self, i: ConnId, how: CloseHow, why: Why) {
        let Some(c) = self.engine.conns().get(i) else {
            return;
        };
        let (key, peer) = (c.key(), c.peer());
        let claimed = c.session().claimed_token();
        let Some(io) = self.engine.io_mut(i) else {
            return;
        };
        let Some(ep) = io.ep.take() else {
            return; // closed already: counted then
        };
        count_close(&mut self.stats, why);
        match why {
            // Logged where they were seen (with what was over which limit, or the error).
            Why::Flood | Why::Backlog | Why::Failed => {}
            Why::ProtocolError(error) => tracing::warn!(
                ?peer,
                %error,
                "protocol error from peer; closing its connection"
            ),
            Why::Expired(expiry) => tracing::warn!(
                ?peer,
                ?claimed,
                ?expiry,
                "connection deadline passed; closing the connection"
            ),
            Why::PeerClosed(reason) => {
                tracing::info!(?peer, ?reason, "peer closed the connection")
            }
            Why::Refused => tracing::warn!(?peer, "refusing a peer cut off for a protocol error"),
            Why::Superseded | Why::Local => tracing::debug!(?peer, ?why, "closing a connection"),
        }
        let waits = std::mem::take(&mut io.ctl_inflight);
        match how {
            CloseHow::Orderly => self.closing.push(Closing {
                key,
                ep,
                peer,
                waits,
            }),
            CloseHow::Forced => {
                if let Wire::Flushing(_) = io.wire {
                    io.wire = Wire::Ready;
                }
                io.early.clear();
                drop(waits);
                self.force_close(key, ep);
            }
        }
    }

    pub(super) fn on_am(&mut self, am: crate::ucp::AmMessage) {
        if am.unowned {
            self.stats.am_unowned += 1;
            self.stats.stray += 1;
            self.charge(am.reply_ep, Charge::Unwanted);
            return;
        }
        if am.rndv_dropped {
            // tagspace sends every AM eagerly, control frames of any size included: a
            // rendezvous AM comes from something else, and is dropped.
            self.stats.am_dropped += 1;
            self.charge(am.reply_ep, Charge::Unwanted);
            return;
        }
        if am.id == self.control_am {
            if wire::is_heartbeat(&am.data) {
                self.stats.heartbeats_received += 1;
            } else {
                self.stats.control_received += 1;
            }
            match am.reply_ep {
                Some(key) => {
                    if self.charge(Some(key), Charge::Control) {
                        self.on_control(key, &am.data);
                    }
                }
                None => tracing::warn!("control frame without a reply endpoint dropped"),
            }
            return;
        }
        let layout = self.registry.layout();
        if let engine::AmDelivery::Stray { ns_id } =
            self.engine.libs_mut().deliver_am(layout, am.id, am.data)
        {
            self.stats.stray += 1;
            if let Some(s) = self.stray_by_id.get_mut(ns_id as usize) {
                *s += 1;
            }
            self.charge(am.reply_ep, Charge::Unwanted);
        }
    }

    /// Counts one message against its connection's [`PeerLimits`]; a connection over the limit
    /// is closed (CLOSE with reason `Flood`). Returns whether the message may be handled.
    /// Messages without a reply endpoint, or from an endpoint this node does not know, cannot
    /// be charged to anyone.
    pub(super) fn charge(&mut self, from: Option<EpKey>, what: Charge) -> bool {
        let Some(key) = from else {
            return true;
        };
        let Some(i) = self
            .engine
            .conns()
            .find(key, |c| c.io.ep.is_some() && c.is_open())
        else {
            return true;
        };
        let ok = self.engine.handle_charge(i, self.clock.now_ms(), what);
        if !ok {
            tracing::warn!(
                peer = ?self.engine.conns().get(i).and_then(|c| c.peer()),
                ?what,
                limits = ?self.engine.limits(),
                "peer sent more than its per-second limit; closing its connection"
            );
        }
        self.carry_out();
        ok
    }

    pub(super) fn on_control(&mut self, key: EpKey, bytes: &[u8]) {
        let Some(i) = self.engine.conns().find(key, |c| c.io.ep.is_some()) else {
            let close = matches!(wire::decode(bytes), Ok(wire::Frame::Close { .. }));
            if let Some(i) = (self.engine.conns())
                .find(key, |c| !c.is_open())
                .filter(|_| close)
            {
                // Its endpoint failed and was closed first: the engine still reads a CLOSE
                // (the peer closed on purpose; its endpoint's failure was that close). Only a
                // CLOSE: a host's new endpoint at a reused address keeps its frames below.
                self.on_control_at(i, bytes);
                return;
            }
            if self.host.is_some() {
                // The host may attach this endpoint later: keep the frame (bounded).
                self.keep_unattached(key, bytes);
                return;
            }
            tracing::warn!("control frame from an unknown endpoint dropped");
            return;
        };
        let open = self.engine.conns().get(i).is_some_and(|c| c.is_open());
        let Some(io) = self.engine.io_mut(i) else {
            return;
        };
        if open && matches!(io.wire, Wire::Flushing(_)) {
            // U1: handled once this side can answer; bounded (D5).
            if io.early.len() >= EARLY_FRAMES_MAX || io.early_bytes + bytes.len() > EARLY_BYTES_MAX
            {
                tracing::warn!(
                    frames = io.early.len(),
                    bytes = io.early_bytes,
                    "peer sent too many control frames before wire-up; closing its connection"
                );
                self.stats.early_overflows += 1;
                self.engine.close(i, None);
                self.carry_out();
                return;
            }
            io.early_bytes += bytes.len();
            io.early.push_back(bytes.to_vec());
            return;
        }
        self.on_control_at(i, bytes);
    }

    /// Hands a control frame on connection `i` to the engine and carries out what it decided.
    pub(super) fn on_control_at(&mut self, i: ConnId, bytes: &[u8]) {
        self.engine.handle_control(i, bytes, self.clock.now_ms());
        self.carry_out();
    }

    /// Closes retired endpoints whose requests have all finished — or at once, forced, one
    /// with a send given up on it unfinished (D3): a flush close would leave that send on the
    /// endpoint when UCX destroys it, which UCX ≥ 1.13 does not survive (see `abandoned`); a
    /// forced close ends it (cancelled) first. Its control frames still in flight (this side's
    /// CLOSE to a peer that stopped answering) are cancelled with it: a peer that comes back
    /// sees its endpoint fail instead.
    pub(super) fn close_retired(&mut self) {
        self.abandoned.retain_mut(|(_, r)| r.test().is_none());
        if self.closing.is_empty() {
            return;
        }
        let busy: std::collections::HashSet<EpKey> = self
            .engine
            .ops()
            .values()
            .filter_map(|op| match op {
                Op::Sending { conn, .. } => Some(*conn),
                _ => None,
            })
            .collect();
        let mut i = 0;
        while i < self.closing.len() {
            let c = &mut self.closing[i];
            c.waits.retain_mut(|r| r.test().is_none());
            let stuck = !c.ep.is_borrowed() && self.abandoned.iter().any(|(k, _)| *k == c.key);
            if stuck {
                let c = self.closing.swap_remove(i);
                self.stats.stuck_closes += 1;
                drop(c.waits);
                self.force_close(c.key, c.ep);
            } else if c.waits.is_empty() && !busy.contains(&c.key) {
                let c = self.closing.swap_remove(i);
                if let Some(r) = c.ep.close(false) {
                    self.background.push(r);
                }
            } else {
                i += 1;
            }
        }
    }

    pub(super) fn flush_conn(&mut self, i: ConnId) -> bool {
        let mut sent = false;
        let Some(mut out) = self.engine.outbox(i) else {
            return false;
        };
        let io = &mut *out.io;
        if !matches!((&io.ep, &io.wire), (Some(_), Wire::Ready)) {
            return false; // closed, or not wired up yet (U1): it goes once it is
        }
        // Control frames, then (R7) the tag half of each withdrawal acknowledgement, posted
        // after every tag message this node has already posted on the endpoint (so UCX
        // delivers it after them).
        while let Some(next) = out.next(&mut self.buf) {
            let io = &mut *out.io;
            let Some(ep) = io.ep.as_ref() else {
                break;
            };
            let (frame, started) = match next {
                Out::Frame(n) => {
                    let frame = &self.buf[..n];
                    if io.withholds(Some(frame)) {
                        continue;
                    }
                    if wire::is_heartbeat(frame) {
                        self.stats.heartbeats_sent += 1;
                    } else {
                        self.stats.control_sent += 1;
                    }
                    (true, ep.am_send(self.control_am, frame.to_vec()))
                }
                Out::AckTag(tag) => {
                    if io.withholds(None) {
                        continue;
                    }
                    self.stats.acks_sent += 1;
                    (false, ep.tag_send(tag, Vec::new()))
                }
            };
            sent = true;
            match started {
                Ok(Started::Pending(r)) => {
                    if io.ctl_inflight.is_empty() {
                        self.ctl_busy.push(i);
                    }
                    io.ctl_inflight.push(r)
                }
                Ok(Started::Done(_)) => {}
                Err(e) if frame => {
                    tracing::warn!(error = %e, "sending a control frame failed");
                    out.end_frames();
                }
                Err(e) => tracing::warn!(error = %e, "sending a withdrawal ack failed"),
            }
        }
        sent
    }

    /// Posts the receive for withdrawal acknowledgements (R7): any tag in the control
    /// namespace. One wildcard receive: UCX checks each arriving message against it, a constant
    /// cost, and the stray drain leaves the control namespace alone.
    pub(super) fn post_ack_recv(&mut self) -> Result<(), NodeError> {
        let layout = self.registry.layout();
        let space = layout.space(CONTROL_ID);
        self.ack_recv = Some(
            self.worker
                .tag_recv(space.tag, space.mask, Vec::with_capacity(0))?,
        );
        Ok(())
    }

    /// Takes the acknowledgement tags that arrived (at most [`ACKS_PER_CALL`]) and hands each
    /// to the session it belongs to. Returns whether any came.
    pub(super) fn take_ack_tags(&mut self) -> bool {
        if self.host.is_some() {
            return self.take_exact_acks();
        }
        let mut any = false;
        for _ in 0..ACKS_PER_CALL {
            let Some(done) = self.ack_recv.as_mut().and_then(Request::test) else {
                break;
            };
            any = true;
            if let Ok(Completion::Received { tag, .. }) = done {
                self.on_ack_tag(tag);
            } else {
                // Not an ack (data on the control namespace is truncated): a stray.
                self.stats.stray += 1;
            }
            if let Err(e) = self.post_ack_recv() {
                tracing::error!(error = %e, "re-posting the withdrawal-ack receive failed");
                self.ack_recv = None;
                break;
            }
        }
        any
    }

    pub(super) fn on_ack_tag(&mut self, tag: u64) {
        if self.engine.handle_ack_tag(tag, |io| io.ep.is_some()) {
            self.stats.acks_received += 1;
        } else {
            // Unknown, stale or forged: nobody's withdrawal is waiting for it.
            self.stats.stray += 1;
        }
    }

    /// R7: gives back the ids whose withdrawal peers confirmed, and ended connections' pins
    /// after the linger, draining each quarantined one first of what arrived for it (all
    /// strays now: nobody owns the id) within the stray budget — the core engine's
    /// [`Unpins`](engine::Unpins). On a host's worker nothing is taken: an id is held while
    /// anything waits in it — until the host receives its message, or for good if an old
    /// name's message is never received (an id lost, never a message misdelivered;
    /// [`quarantine_held`](Node::quarantine_held) counts such ids), looked at (one probe
    /// without removal per id) at most every [`DRAIN_INTERVAL_MS`], or at once when a
    /// confirmation came. A host library's tags (ucxx hashes them over all 64 bits) fall in
    /// any namespace id, so a partial-mask removal could steal them.
    pub(super) fn release_confirmed(&mut self) -> bool {
        let now = self.clock.now_ms();
        let pass = self.with_strays(|engine, queue| engine.unpin_due(now, queue));
        self.stats.stray_probes += pass.probes;
        self.stats.ids_unpinned += pass.unpinned;
        pass.changed
    }

    pub(super) fn flush(&mut self) -> bool {
        let mut sent = false;
        for i in self.engine.transmit_due() {
            sent |= self.flush_conn(i);
        }
        sent
    }
}
