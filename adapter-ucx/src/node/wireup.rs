//! New connections: opened or accepted, and wired up before anything is sent on them (U1).

use super::*;

impl Node {
    /// Opens an endpoint to the node listening at `addr`; the handshake runs in `progress`.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<(), NodeError> {
        let ep = Endpoint::connect(&self.worker, addr)?;
        tracing::info!(%addr, "connecting");
        self.add_conn(ep, Role::Initiator);
        Ok(())
    }

    pub(super) fn add_conn(&mut self, ep: Endpoint, role: Role) -> ConnId {
        // U1: nothing is sent until the endpoint's first flush has completed.
        let (wire, failed) = match ep.flush() {
            Ok(Started::Pending(r)) => (Wire::Flushing(r), None),
            Ok(Started::Done(())) => (Wire::Ready, None),
            Err(e) => {
                tracing::warn!(error = %e, "flushing a new endpoint failed");
                (Wire::Ready, Some(e))
            }
        };
        let key = ep.key();
        let io = Io {
            ep: Some(ep),
            wire,
            early: VecDeque::new(),
            early_bytes: 0,
            ctl_inflight: Vec::new(),
            #[cfg(feature = "test-hooks")]
            withhold_acks: false,
        };
        let now = self.clock.now_ms();
        let flushing = matches!(io.wire, Wire::Flushing(_));
        let i = (self.engine).add_conn(key, role, &self.identity, now, io);
        if flushing {
            self.wiring.push(i);
        }
        if let Some(e) = failed {
            self.engine.handle_failed(i, e);
            self.carry_out();
        }
        i
    }

    /// [`Action::Dial`]: a connection to where the lost `peer` said it listens (the engine
    /// waits for it before dialling again); with [`Redial::Report`] — always on a host's
    /// worker, whose endpoints are the host's — the peer is queued for
    /// [`Node::take_reconnect_needed`] instead.
    pub(super) fn dial(&mut self, peer: u64, addr: wire::Address) {
        let wire::Address::Ip(addr) = addr else {
            tracing::warn!(
                peer,
                ?addr,
                "a peer told an address that is not a socket address"
            );
            return;
        };
        if self.engine.redial() == Redial::Report {
            if self.reconnects.len() == RECONNECTS_KEPT {
                self.reconnects.pop_front();
            }
            self.reconnects.push_back((peer, addr));
            return;
        }
        match Endpoint::connect(&self.worker, addr) {
            Ok(ep) => {
                tracing::info!(peer, %addr, "dialling a peer lost to a fault");
                self.stats.redials += 1;
                let conn = self.add_conn(ep, Role::Initiator);
                self.engine.dial_started(peer, conn);
            }
            Err(error) => tracing::warn!(peer, %addr, %error, "dialling a lost peer failed"),
        }
    }

    /// U1: completes the first flush of new endpoints; once one has, the control frames that
    /// waited for it are handled in order and its own frames may go out.
    pub(super) fn poll_wireup(&mut self) -> bool {
        let mut busy = false;
        // Connections added meanwhile (a frame handled here can make the engine dial) are
        // pushed to `wiring` anew and kept after these.
        let wiring = std::mem::take(&mut self.wiring);
        let mut still = Vec::new();
        for i in wiring {
            let Some(key) = self.engine.conns().get(i).map(|c| c.key()) else {
                continue;
            };
            let Some(io) = self.engine.io_mut(i) else {
                continue;
            };
            let Wire::Flushing(req) = &mut io.wire else {
                continue;
            };
            match req.test() {
                None => still.push(i),
                Some(Ok(_)) => {
                    busy = true;
                    io.wire = Wire::Ready;
                    let early = std::mem::take(&mut io.early);
                    io.early_bytes = 0;
                    for frame in early {
                        self.on_control_at(i, &frame);
                    }
                }
                Some(Err(e)) => {
                    busy = true;
                    io.wire = Wire::Ready;
                    tracing::warn!(error = %e, "a new endpoint failed while wiring up");
                    self.on_ep_error(key, e);
                }
            }
        }
        still.append(&mut self.wiring);
        self.wiring = still;
        busy
    }
}
