//! The handshake (P6): HELLOs cross, each side proves its key with a signature over both
//! HELLOs, and the peer is known by its token only once its PROOF verified.

use super::*;

impl<const CAP: usize> Session<CAP> {
    /// The token the peer's HELLO claimed, proven or not (for logs and error messages only:
    /// never index or route by it).
    pub fn claimed_token(&self) -> Option<u64> {
        self.claim
            .as_ref()
            .map(|(p, _)| identity::token_of(&p.public_key))
    }

    /// The transcript a PROOF by `signer` signs on this endpoint (both HELLOs known).
    pub(super) fn transcript(&self, signer: Role) -> Option<[u8; identity::TRANSCRIPT_LEN]> {
        let (peer, _) = self.claim.as_ref()?;
        let (initiator, acceptor) = match self.role {
            Role::Initiator => (&self.local, peer),
            Role::Acceptor => (peer, &self.local),
        };
        Some(identity::transcript(
            signer,
            self.fingerprint,
            initiator,
            acceptor,
        ))
    }

    /// Whether this connection is the one to keep *when another connection links the same two
    /// processes* (P4): the one opened by the process with the lower token survives. `None` until
    /// the peer's HELLO has arrived. Only ask when there is a duplicate: for a lone connection
    /// opened by the higher-token process the answer is `false`, and closing it would leave none.
    pub fn survives_duplicate(&self) -> Option<bool> {
        let peer = self.peer?;
        let opener = match self.role {
            Role::Initiator => self.local_token,
            Role::Acceptor => peer.token,
        };
        Some(opener == self.local_token.min(peer.token))
    }

    /// Marks this endpoint as opened to dial back `expected`, a peer lost to a fault: its
    /// HELLO says so and names it ([`wire::Hello::redial`]), and if `expected` answers, both
    /// keep this connection over any older one between them. No effect once the HELLO went
    /// out.
    pub fn mark_redial(&mut self, expected: u64) {
        if !self.hello_sent {
            self.redial_of = Some(expected);
        }
    }

    /// Whether this side's HELLO said it redials, and the peer is the one it expected.
    pub fn redials(&self) -> bool {
        self.hello_sent && self.redial_of.is_some() && self.redial_of == self.peer_token()
    }

    /// Whether the peer's HELLO said it redials this process (it lost every other connection
    /// to it).
    pub fn peer_redials(&self) -> bool {
        self.peer_redial_of == Some(self.local_token)
    }

    /// Whether either side's HELLO said it redials someone other than the process that
    /// answered: a dial that reached another process (an address a peer lied about, or one
    /// that restarted there). Both sides see it alike; such a connection ranks below every
    /// other one between them (P4).
    pub fn misdialled(&self) -> bool {
        let ours = self.hello_sent
            && self.redial_of.is_some()
            && self.peer_token().is_some_and(|p| Some(p) != self.redial_of);
        ours || self.peer_redial_of.is_some_and(|t| t != self.local_token)
    }

    /// The proven peer's token.
    fn peer_token(&self) -> Option<u64> {
        self.peer.map(|p| p.token)
    }

    /// The peer's HELLO: the layout and its key checked, its name table taken.
    pub(super) fn on_hello(&mut self, h: wire::Hello<'_>) -> Result<Option<Event>, SessionError> {
        if h.fingerprint != self.fingerprint {
            return Err(SessionError::LayoutMismatch {
                local: self.fingerprint,
                peer: h.fingerprint,
            });
        }
        if h.role == self.role {
            return Err(SessionError::RoleConflict);
        }
        if h.public_key == self.local.public_key || h.token() == self.local_token {
            return Err(SessionError::SameToken);
        }
        identity::check_public_key(&h.public_key).map_err(|error| SessionError::Unproven {
            claimed: h.token(),
            error,
        })?;
        let mut dir = Directory::new();
        for (id, name) in h.entries() {
            self.check_id(id)?;
            dir.insert(id, name)?;
        }
        self.directory = dir;
        self.peer_redial_of = h.redial;
        self.claim = Some((
            Party {
                public_key: h.public_key,
                nonce: h.nonce,
            },
            h.role,
        ));
        self.phase = Phase::Proving;
        Ok(None)
    }

    /// The peer's PROOF: the claim proven, the session established.
    pub(super) fn on_proof(
        &mut self,
        signature: [u8; identity::SIGNATURE_LEN],
    ) -> Result<Option<Event>, SessionError> {
        let (party, role) = self.claim.expect("Proving implies a claim");
        let transcript = self.transcript(role).expect("claim is set");
        let token = identity::token_of(&party.public_key);
        identity::verify(&party.public_key, &transcript, &signature).map_err(|error| {
            SessionError::Unproven {
                claimed: token,
                error,
            }
        })?;
        self.peer = Some(PeerInfo {
            token,
            role,
            public_key: party.public_key,
        });
        self.phase = Phase::Established;
        Ok(Some(Event::Established { peer_token: token }))
    }

    /// This side's HELLO, then its PROOF once the peer's HELLO is in.
    pub(super) fn transmit_handshake<const R: usize>(
        &mut self,
        registry: &Registry<R>,
        buf: &mut [u8],
    ) -> Result<Option<usize>, SessionError> {
        if !self.hello_sent {
            return self.encode_hello(registry, buf).map(Some);
        }
        if !self.proof_sent {
            if let Some(transcript) = self.transcript(self.role) {
                let key = ed25519_dalek::SigningKey::from_bytes(&self.secret);
                let signature = identity::sign(&key, &transcript);
                let n = Frame::Proof { signature }.encode(buf)?;
                self.proof_sent = true;
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    pub(super) fn encode_hello<const R: usize>(
        &mut self,
        registry: &Registry<R>,
        buf: &mut [u8],
    ) -> Result<usize, SessionError> {
        // The snapshot is taken slot by slot; if the epoch moved meanwhile a name may have moved
        // between ids and been seen twice, so take it again. Each retry means another thread
        // registered or released: lock-free, not wait-free.
        loop {
            let epoch = registry.epoch();
            let mut enc = HelloEncoder::new(
                &mut *buf,
                self.fingerprint,
                self.role,
                self.namespace_bits,
                &self.local.public_key,
                &self.local.nonce,
            )?;
            if let Some(t) = self.redial_of {
                enc.redial(t)?;
            }
            let mut told: IdMap<u32, CAP> = IdMap::new();
            let mut result = Ok(());
            registry.for_each_live(|token, name| {
                if result.is_ok() {
                    if token.id as usize >= CAP {
                        result = Err(WireError::FrameTooLarge);
                    } else if registry.pin(token) {
                        // Pinned before it is told (R7); a lease released meanwhile is skipped
                        // (the epoch moved: this snapshot is taken again).
                        result = enc.push(token.id, name);
                        told.set(token.id, token.generation);
                    }
                }
            });
            if result.is_err() || registry.epoch() != epoch {
                for (id, _) in told.iter() {
                    registry.unpin(id);
                }
                result?;
                continue;
            }
            self.told = told;
            self.synced_epoch = Some(epoch);
            self.hello_sent = true;
            return Ok(enc.finish());
        }
    }
}
