//! The node as an executor: `progress` runs the engine's stages in the engine's order, hands
//! the fabric's events to the engine (`handle_*`) and carries out every action it asks for —
//! the one way a connection closes; control frames and withdrawal acknowledgements (R7) sent
//! and taken; the stray sweep and the held backlogs (D2).

use super::*;

impl Node {
    /// Handles everything pending: connection events, control frames, Active Messages,
    /// outgoing announcements, operations waiting for routes, and stray draining.
    pub fn progress(&mut self, fab: &mut Fabric) {
        if !fab.is_alive(fab.process_of(self.worker)) {
            return;
        }
        self.last_now_ms = fab.now_ms();
        // The engine's order, the same on every adapter.
        for stage in engine::PROGRESS {
            match stage {
                Stage::Transport => self.stage_transport(fab),
                Stage::WireUp => {} // the fabric's endpoints are usable at once
                Stage::Messages => self.stage_messages(fab),
                Stage::AckTags => self.take_ack_tags(fab),
                Stage::Transmit => self.flush(fab),
                Stage::Operations => self.stage_operations(fab),
                Stage::Timers => {
                    self.engine.handle_timeout(fab.now_ms());
                    self.carry_out(fab);
                }
                Stage::Retire => self.engine.forget_ended(|c| c.io.closed, fab.now_ms()),
                Stage::Unpin => self.release_pins(fab),
                Stage::Strays => self.stage_strays(fab),
            }
            debug_assert!(!self.engine.has_actions(), "{stage:?} left actions undone");
        }
    }

    /// [`Stage::Transport`]: connections accepted, endpoint failures.
    fn stage_transport(&mut self, fab: &mut Fabric) {
        while let Some(ev) = fab.event(self.worker) {
            match ev {
                WorkerEvent::Accepted(ep) => {
                    self.add_conn(ep, Role::Acceptor);
                }
                WorkerEvent::EndpointError(ep, e) => {
                    if let Some(i) = self.engine.conns().find(ep, |c| !c.io.closed) {
                        self.engine.handle_failed(i, e);
                        self.carry_out(fab);
                    }
                }
            }
        }
    }

    /// [`Stage::Messages`]: control frames, and the libraries' Active Messages.
    fn stage_messages(&mut self, fab: &mut Fabric) {
        while let Some(am) = fab.am_take(self.worker) {
            if am.id == self.control_am {
                if self.charge(fab, am.reply_ep, Charge::Control) {
                    self.on_control(fab, am.reply_ep, &am.data);
                }
                continue;
            }
            let layout = self.registry.layout();
            if let AmDelivery::Stray { .. } =
                self.engine.libs_mut().deliver_am(layout, am.id, am.data)
            {
                self.stray += 1;
                self.charge(fab, am.reply_ep, Charge::Unwanted);
            }
        }
    }

    /// [`Stage::Operations`] (D6): only the operations something happened to.
    fn stage_operations(&mut self, fab: &mut Fabric) {
        while let Some(done) = fab.completed(self.worker) {
            let key = match done {
                Completed::Send(s) => s.0,
                Completed::Recv(r) => r.0,
            };
            self.engine.ops_mut().completed(key);
        }
        let now = fab.now_ms();
        self.with_ops(fab, |e, t| e.advance_due(t, now));
    }

    /// [`Stage::Strays`]: the stray sweep and the held backlogs (never on a host's worker).
    fn stage_strays(&mut self, fab: &mut Fabric) {
        let now = fab.now_ms();
        if self.engine.sweep_due(now) {
            self.drain_strays(fab);
        }
        if self.engine.owner() != QueueOwner::HOST && self.backlog.due(now) {
            self.hold_pass(fab);
        }
    }

    fn on_control(&mut self, fab: &mut Fabric, ep: EpId, bytes: &[u8]) {
        // A connection whose endpoint failed and was closed still gets its peer's CLOSE (the
        // engine reads nothing else there): the failure may have been that close.
        if let Some(i) = self.connection_of(ep) {
            self.engine.handle_control(i, bytes, fab.now_ms());
            self.carry_out(fab);
        }
    }

    /// Counts one message from `ep`'s connection against the [`PeerLimits`]; a peer over them
    /// is cut off (CLOSE with reason `Flood`). Returns whether the message may be handled.
    fn charge(&mut self, fab: &mut Fabric, ep: EpId, what: Charge) -> bool {
        let Some(i) = self
            .engine
            .conns()
            .find(ep, |c| !c.io.closed && c.is_open())
        else {
            return true;
        };
        let ok = self.engine.handle_charge(i, fab.now_ms(), what);
        self.carry_out(fab);
        ok
    }

    /// Carries out everything the engine asked for, in its order.
    fn carry_out(&mut self, fab: &mut Fabric) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Transmit(i) => self.flush_conn(fab, i),
                Action::Close { conn, how, why } => self.close(fab, conn, how, why),
                Action::End { op, peer, cause } => {
                    self.with_ops(fab, |e, t| e.end_op(t, op, peer, cause))
                }
                Action::Cancel { op, peer } => self.with_ops(fab, |e, t| e.cancel_op(t, op, peer)),
                Action::Proven { peer } => self.backlog.proven(peer),
                Action::Dial { peer, addr } => self.dial(fab, peer, addr),
                Action::Deaf => self.deaf += 1,
            }
        }
    }

    /// [`Action::Dial`]: a connection to the lost peer's worker (a dial across a cut fails at
    /// once; the engine dials again on its schedule), or, when reporting, a note for the test.
    fn dial(&mut self, fab: &mut Fabric, peer: u64, addr: wire::Address) {
        let wire::Address::Local(w) = addr else {
            return; // not a fabric address: nothing here can dial it
        };
        let to = WorkerId(w as usize);
        if self.engine.redial() == engine::Redial::Report {
            self.reconnects.push_back((peer, to));
            return;
        }
        if let Ok(ep) = fab.connect(self.worker, to) {
            let conn = self.add_conn(ep, Role::Initiator);
            self.engine.dial_started(peer, conn);
        }
    }

    /// The one way a connection's endpoint closes: in order (the fabric delivers what was
    /// sent first), or at once after a failure.
    fn close(&mut self, fab: &mut Fabric, i: ConnId, how: CloseHow, why: Why) {
        let Some(io) = self.engine.io_mut(i) else {
            return;
        };
        if io.closed {
            return; // closed already: counted then
        }
        io.closed = true;
        if how == CloseHow::Orderly {
            fab.ep_close(io.ep);
        }
        match why {
            Why::Expired(_) => self.deadline_closes += 1,
            Why::Flood | Why::Backlog => self.flood_closes += 1,
            _ => {}
        }
    }

    fn flush_conn(&mut self, fab: &mut Fabric, i: ConnId) {
        let Some(mut out) = self.engine.outbox(i) else {
            return;
        };
        if out.io.closed {
            return;
        }
        let ep = out.io.ep;
        // Control frames, then (R7) the tag half of each withdrawal acknowledgement, after
        // this side's tag messages.
        while let Some(next) = out.next(&mut self.buf) {
            match next {
                Out::Frame(n) => {
                    if fab.am_send(ep, self.control_am, &self.buf[..n]).is_err() {
                        out.end_frames();
                    } else {
                        self.sent.frames += 1;
                        self.sent.bytes += n as u64;
                    }
                }
                Out::AckTag(tag) => {
                    if fab.tag_send(ep, tag, &[]).is_ok() {
                        self.sent.ack_tags += 1;
                    }
                }
            }
        }
    }

    /// R7: takes the withdrawal acknowledgements (tags in the control namespace) and hands
    /// each to the session whose withdrawal it confirms; anything else there is a stray.
    fn take_ack_tags(&mut self, fab: &mut Fabric) {
        let layout = *self.registry.layout();
        if self.engine.owner() != QueueOwner::Node {
            // Exactly the tags some session waits for (a host's tags may be anywhere else).
            let awaited: Vec<u64> = self
                .engine
                .conns()
                .awaited_ack_tags(&layout, |io| !io.closed)
                .collect();
            for tag in awaited {
                if let Ok(Some(_)) = fab.tag_probe(self.worker, tag, u64::MAX, true) {
                    self.engine.handle_ack_tag(tag, |io| !io.closed);
                }
            }
            return;
        }
        let space = layout.space(CONTROL_ID);
        while let Ok(Some(r)) = fab.tag_probe(self.worker, space.tag, space.mask, true) {
            if !self.engine.handle_ack_tag(r.tag, |io| !io.closed) {
                self.stray += 1;
            }
        }
    }

    /// R7: ids whose withdrawal a peer confirmed, and every pin of a connection that ended
    /// (after the linger), go back to the registry — a quarantined one drained first (host
    /// mode: held while anything waits in it). The core engine decides, as on UCX.
    fn release_pins(&mut self, fab: &mut Fabric) {
        let now = fab.now_ms();
        let mut queue = FabricQueue::new(fab, self.worker, self.registry.layout());
        let pass = self.engine.unpin_due(now, &mut queue);
        self.stray += pass.strays;
    }

    fn flush(&mut self, fab: &mut Fabric) {
        for id in self.engine.transmit_due() {
            self.flush_conn(fab, id);
        }
    }

    /// D2: one pass of the engine's stray sweep (the head of the queue while it is a stray,
    /// then unregistered ids within the probe budget; the control id carries withdrawal acks,
    /// taken by `take_ack_tags`; id 0 belongs to legacy code). Host mode: nothing here is
    /// tagspace's to take.
    pub fn drain_strays(&mut self, fab: &mut Fabric) {
        let mut queue = FabricQueue::new(fab, self.worker, self.registry.layout());
        let (taken, _, _) = self.engine.sweep_pass(&mut queue, || false);
        self.stray += taken;
        self.forged += queue.forged;
    }

    /// Closes every connection (orderly CLOSE).
    pub fn shutdown(&mut self, fab: &mut Fabric) {
        drop(self.backlog.clear());
        self.engine.close_all();
        self.carry_out(fab);
    }

    /// One pass of the held namespaces' backlogs; cuts off the peers over their limit.
    fn hold_pass(&mut self, fab: &mut Fabric) {
        let layout = self.registry.layout();
        let conns = self.engine.conns();
        let forgotten = conns.pairs_forgotten();
        drop((self.backlog).forget_unknown(forgotten, |p| conns.rx_pair_of(p).is_some()));
        let mut queue = FabricHolds {
            fab: &mut *fab,
            worker: self.worker,
            forged: 0,
        };
        let conns = self.engine.conns();
        let pass =
            (self.backlog).pass(layout, &mut queue, |t| conns.sender_of(layout, t), || false);
        self.stray += queue.forged;
        self.forged += queue.forged;
        for &peer in &pass.floods {
            self.engine.handle_flooded(peer);
        }
        self.carry_out(fab);
    }
}
