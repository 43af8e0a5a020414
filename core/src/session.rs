//! The control plane as a sans-IO state machine: one [`Session`] per endpoint.
//!
//! A session takes the peer's bytes in ([`Session::handle`]) and hands bytes out
//! ([`Session::poll_transmit`]); it never touches a network. Both adapters drive the same code,
//! so their behaviour cannot drift apart.
//!
//! Protocol (wire version 3), per endpoint:
//! 1. Each side sends one HELLO: layout fingerprint, role, public key, a fresh nonce, and its
//!    whole name → id table. That is O(1) messages per endpoint, whatever the number of
//!    endpoints (P3).
//! 2. On the peer's HELLO the session checks the layout and the key and fills its
//!    [`Directory`]; then each side sends a PROOF, its signature over both keys and both nonces
//!    (see [`crate::identity`]). Once the peer's PROOF verifies the session is established and
//!    its peer is known by its token (P6); until then [`Session::peer`] is `None`, so an adapter
//!    cannot index, route to or supersede by an unproven claim. Local ids are private: each side
//!    translates names through the directory, so registration order does not matter (P1).
//! 3. Once the peer is proven, each side tells it (a PAIR frame) the value to put in the pair
//!    field of every tag it sends here ([`Session::grant_pair`]; the engine chooses it). A
//!    process that has not proven its identity to this one never learns it, so it cannot make
//!    a tag that a receive tied to the peer takes, except by guessing: `2^-bits` per message
//!    (`bits` = the layout's pair width, 24 by default). [`Session::route`] routes only once
//!    the peer's value is in.
//! 4. Afterwards the session keeps the peer in sync with the local registry: it compares what it
//!    has told the peer with the registry (by generation) and emits WITHDRAW / ANNOUNCE for the
//!    differences. Keeping state instead of an event queue bounds memory and never drops a change.
//! 5. Any frame it cannot accept fails the session and queues a CLOSE naming why.
//! 6. Id quarantine (R7): a session [`pin`](Registry::pin)s every lease it tells the peer about.
//!    When one is released it sends WITHDRAW with a fresh `seq`; the peer answers with a
//!    WITHDRAW-ACK frame and an ack tag message ([`wire::ack_tag`], sent by the adapter from
//!    [`Session::poll_ack_tag`]), which arrive after everything the peer sent to that id by AM
//!    and by tag. When both have come ([`Session::on_ack_tag`] for the tag), the id is
//!    *confirmed* ([`Session::take_confirmed`]): the adapter drains what arrived for it and
//!    unpins it. A connection that ends gives its pins back through [`Session::finish`].
//!
//! Simultaneous connects (P4): when two sessions link the same pair of processes,
//! [`Session::survives_duplicate`] keeps the one opened by the process with the lower token; both
//! sides compute the same answer from the tokens proven in the handshake.
//!
//! ```
//! use tagspace_core::session::{Session, Event};
//! use tagspace_core::wire::Role;
//! use tagspace_core::{Identity, Registry, TagLayout};
//!
//! let (ra, rb): (Registry<64>, Registry<64>) = (Registry::new(TagLayout::DEFAULT), Registry::new(TagLayout::DEFAULT));
//! let (ia, ib) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
//! let _a1 = ra.register("engine-x").unwrap();          // id 16 here ...
//! let _b0 = rb.register("other").unwrap();
//! let b1 = rb.register("engine-x").unwrap();           // ... 17 there
//! let mut a: Session<64> = Session::new(Role::Initiator, &ia, ra.layout());
//! let mut b: Session<64> = Session::new(Role::Acceptor, &ib, rb.layout());
//! let mut buf = vec![0u8; tagspace_core::wire::MAX_FRAME_LEN];
//! // HELLOs cross, then PROOFs
//! let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
//! assert_eq!(b.handle(&buf[..n]), Ok(None));
//! let n = b.poll_transmit(&rb, &mut buf).unwrap().unwrap();
//! assert_eq!(a.handle(&buf[..n]), Ok(None));
//! let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
//! assert!(matches!(b.handle(&buf[..n]), Ok(Some(Event::Established { .. }))));
//! let n = b.poll_transmit(&rb, &mut buf).unwrap().unwrap();
//! assert!(matches!(a.handle(&buf[..n]), Ok(Some(Event::Established { .. }))));
//! // proven both ways; no route until each side has told the other its pair value (the
//! // engine chooses them: unique per peer, unguessable)
//! assert!(b.route(&b1).is_none());
//! a.grant_pair(0x5eed);
//! let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
//! assert_eq!(b.handle(&buf[..n]), Ok(Some(Event::Paired)));
//! // b sends engine-x traffic to a's id for the name, with a's value in the pair field:
//! let route = b.route(&b1).unwrap();
//! assert_eq!((route.remote_id(), route.pair()), (16, 0x5eed));
//! ```

use crate::identity::{self, Party, ProofError, PUBLIC_KEY_LEN};
use crate::layout::TagLayout;
use crate::name::Name;
use crate::namespace::{Namespace, Route};
use crate::registry::Registry;
use crate::wire::{self, CloseReason, Frame, HelloEncoder, Role, WireError};
use core::fmt;

const ACK_TAG: u8 = 1;
const ACK_FRAME: u8 = 2;

/// The peer's name → id table. Bounded by `CAP` entries.
#[derive(Clone)]
pub struct Directory<const CAP: usize> {
    // Sorted by name: lookups on the send path are a binary search.
    entries: heapless::Vec<(Name, u16), CAP>,
}

impl<const CAP: usize> Directory<CAP> {
    const fn new() -> Self {
        Directory {
            entries: heapless::Vec::new(),
        }
    }

    /// The peer's id for `name`.
    pub fn lookup(&self, name: &Name) -> Option<u16> {
        self.entries
            .binary_search_by(|(n, _)| n.cmp(name))
            .ok()
            .map(|i| self.entries[i].1)
    }

    /// The peer's name for its id `id` (for decoding received tags in logs).
    pub fn name_of(&self, id: u16) -> Option<&Name> {
        self.entries.iter().find(|(_, i)| *i == id).map(|(n, _)| n)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the peer has announced nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(name, peer id)` pairs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Name, u16)> {
        self.entries.iter().map(|(n, i)| (n, *i))
    }

    fn insert(&mut self, id: u16, name: Name) -> Result<(), SessionError> {
        if self.name_of(id).is_some() {
            return Err(SessionError::DuplicateId { id });
        }
        match self.entries.binary_search_by(|(n, _)| n.cmp(&name)) {
            Ok(_) => Err(SessionError::DuplicateName { name }),
            Err(at) => {
                self.entries
                    .insert(at, (name, id))
                    .map_err(|_| SessionError::DirectoryFull {
                        capacity: CAP as u32,
                    })
            }
        }
    }

    fn remove_id(&mut self, id: u16) -> Option<Name> {
        let at = self.entries.iter().position(|(_, i)| *i == id)?;
        Some(self.entries.remove(at).0)
    }
}

/// Who the peer is, as proven by its PROOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its process token (the first eight bytes of its public key).
    pub token: u64,
    /// Its role on this endpoint.
    pub role: Role,
    /// Its public key.
    pub public_key: [u8; PUBLIC_KEY_LEN],
}

/// Something the adapter may want to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The peer's HELLO arrived and its PROOF verified.
    Established {
        /// The peer's process token.
        peer_token: u64,
    },
    /// The peer registered a namespace.
    Announced {
        /// Its name.
        name: Name,
        /// The peer's id for it.
        id: u16,
    },
    /// The peer released a namespace.
    Withdrawn {
        /// Its name.
        name: Name,
        /// The peer's id it had.
        id: u16,
    },
    /// The peer told this side the value to put in its tags' pair field (a PAIR frame): from
    /// now on [`Session::route`] routes.
    Paired,
    /// The peer closed the session.
    Closed {
        /// Why.
        reason: CloseReason,
    },
}

/// Why a session failed. After any of these the session is closed and has queued a CLOSE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionError {
    /// The peer's bytes are not a valid frame.
    Wire(WireError),
    /// The peer's tag layout differs from ours.
    LayoutMismatch {
        /// Our fingerprint.
        local: u64,
        /// Theirs.
        peer: u64,
    },
    /// A frame that is not allowed in this state (for example ANNOUNCE before HELLO).
    Unexpected {
        /// The frame kind.
        frame: &'static str,
        /// Why it is not allowed.
        why: &'static str,
    },
    /// The peer announced a name it already has.
    DuplicateName {
        /// The name.
        name: Name,
    },
    /// The peer announced an id it already uses.
    DuplicateId {
        /// The id.
        id: u16,
    },
    /// The peer withdrew an id it never announced.
    UnknownId {
        /// The id.
        id: u16,
    },
    /// The peer has more namespaces than this side's directory holds.
    DirectoryFull {
        /// Entries this side holds per peer.
        capacity: u32,
    },
    /// Both sides claim the same role on one endpoint.
    RoleConflict,
    /// The peer has this process's own token: a connection to itself, or a token collision.
    SameToken,
    /// The peer's key is unusable, or its PROOF does not verify (P6): it is not who it claims.
    Unproven {
        /// The token it claimed.
        claimed: u64,
        /// What failed.
        error: ProofError,
    },
    /// The session is closed; nothing more is accepted.
    Closed,
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SessionError::Wire(e) => write!(f, "malformed control frame from peer: {e}"),
            SessionError::LayoutMismatch { local, peer } => write!(
                f,
                "layout differs: the peer's tag layout has fingerprint {peer:#018x}, ours \
                 {local:#018x} (every peer needs the same layout SPEC; `tagspace layout \
                 --layout SPEC` prints a SPEC's fingerprint)"
            ),
            SessionError::Unexpected { frame, why } => {
                write!(f, "unexpected {frame} from peer: {why}")
            }
            SessionError::DuplicateName { name } => {
                write!(f, "peer announced namespace \"{name}\" twice")
            }
            SessionError::DuplicateId { id } => write!(f, "peer announced id {id} twice"),
            SessionError::UnknownId { id } => {
                write!(f, "peer withdrew id {id}, which it never announced")
            }
            SessionError::DirectoryFull { capacity } => write!(
                f,
                "peer has more than {capacity} namespaces, more than this side can track"
            ),
            SessionError::RoleConflict => {
                f.write_str("both sides claim the same role on one endpoint")
            }
            SessionError::SameToken => {
                f.write_str("peer has this process's token (self-connection or token collision)")
            }
            SessionError::Unproven { claimed, error } => {
                write!(f, "peer claiming token {claimed:#018x} is refused: {error}")
            }
            SessionError::Closed => f.write_str("session is closed"),
        }
    }
}

impl core::error::Error for SessionError {}

impl From<WireError> for SessionError {
    fn from(e: WireError) -> Self {
        SessionError::Wire(e)
    }
}

/// Where a session is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the peer's HELLO.
    Connecting,
    /// The peer's HELLO arrived; waiting for its PROOF. The peer is a claim, not yet known.
    Proving,
    /// HELLOs exchanged and the peer proven; the directory is live.
    Established,
    /// A CLOSE is queued for the peer; nothing more is accepted.
    Closing(CloseReason),
    /// Done: the peer closed, or our CLOSE went out.
    Closed,
}

/// The control-plane state of one endpoint. `CAP` bounds the peer's directory and must be at
/// least the local registry's capacity.
pub struct Session<const CAP: usize = 256> {
    role: Role,
    local_token: u64,
    key: ed25519_dalek::SigningKey,
    local: Party,
    fingerprint: u64,
    namespace_bits: u8,
    /// The layout's pair field width (0: none), the value this side gave the peer (and
    /// whether its PAIR went out), and the value the peer gave this side.
    pair_bits: u8,
    pair_granted: Option<u32>,
    pair_sent: bool,
    peer_pair: Option<u32>,
    phase: Phase,
    hello_sent: bool,
    proof_sent: bool,
    /// What the peer's HELLO claimed (key and nonce); proven once `phase` is `Established`.
    claim: Option<(Party, Role)>,
    peer: Option<PeerInfo>,
    /// Per local id: the `seq` of our WITHDRAW waiting for its acknowledgement (0: none), and
    /// which halves arrived (bit 0 the tag, bit 1 the frame).
    withdraw_seq: [u32; CAP],
    acked: [u8; CAP],
    /// How many entries of `withdraw_seq` are non-zero (asked on every adapter `progress`).
    awaiting: usize,
    seqs_made: u32,
    /// Acknowledgements we owe the peer: frames, and tag messages (for the adapter).
    owed_frames: heapless::Deque<(u16, u32), CAP>,
    owed_tags: heapless::Deque<(u16, u32), CAP>,
    /// Local ids whose withdrawal the peer confirmed (for the adapter: drain, then unpin).
    confirmed: heapless::Deque<u16, CAP>,
    /// Generation of each local id as last told to the peer; 0 = not told.
    told: [u32; CAP],
    /// Registry epoch at which `told` was last found in sync.
    synced_epoch: Option<u64>,
    directory: Directory<CAP>,
    /// The heartbeat: our PING waiting for its PONG (its seq), whether it is still to be
    /// sent, how many we made, and the PONG we owe the peer.
    ping_out: Option<u32>,
    ping_queued: bool,
    pings_made: u32,
    pong_owed: Option<u32>,
}

impl<const CAP: usize> Session<CAP> {
    /// A session for an endpoint we opened (`Initiator`) or accepted (`Acceptor`), for the
    /// process whose identity is `identity` (one per process, shared by all its sessions).
    pub fn new(role: Role, identity: &identity::Identity, layout: &TagLayout) -> Self {
        Session {
            role,
            local_token: identity.token(),
            key: identity.signer(),
            local: Party {
                public_key: *identity.public_key(),
                nonce: identity.fresh_nonce(),
            },
            fingerprint: layout.fingerprint(),
            namespace_bits: layout.namespace_field().width() as u8,
            pair_bits: layout.pair_bits() as u8,
            pair_granted: None,
            pair_sent: false,
            peer_pair: None,
            phase: Phase::Connecting,
            hello_sent: false,
            proof_sent: false,
            claim: None,
            peer: None,
            withdraw_seq: [0; CAP],
            acked: [0; CAP],
            awaiting: 0,
            seqs_made: 0,
            owed_frames: heapless::Deque::new(),
            owed_tags: heapless::Deque::new(),
            confirmed: heapless::Deque::new(),
            told: [0; CAP],
            synced_epoch: None,
            directory: Directory::new(),
            ping_out: None,
            ping_queued: false,
            pings_made: 0,
            pong_owed: None,
        }
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether HELLOs have been exchanged and the session is open.
    pub fn is_established(&self) -> bool {
        self.phase == Phase::Established
    }

    /// Our role on this endpoint.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Who the peer is: `None` until its PROOF verified (P6), whatever its HELLO claimed.
    pub fn peer(&self) -> Option<PeerInfo> {
        self.peer
    }

    /// The token the peer's HELLO claimed, proven or not (for logs and error messages only:
    /// never index or route by it).
    pub fn claimed_token(&self) -> Option<u64> {
        self.claim
            .as_ref()
            .map(|(p, _)| identity::token_of(&p.public_key))
    }

    /// The transcript a PROOF by `signer` signs on this endpoint (both HELLOs known).
    fn transcript(&self, signer: Role) -> Option<[u8; identity::TRANSCRIPT_LEN]> {
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

    /// The peer's name → id table.
    pub fn directory(&self) -> &Directory<CAP> {
        &self.directory
    }

    /// The route for `ns` on this peer, if the session is established (the peer proven), the
    /// peer has told its pair value (where the layout has a pair field) and it has registered
    /// the same name.
    pub fn route<const R: usize>(&self, ns: &Namespace<'_, R>) -> Option<Route> {
        if !self.is_paired() {
            return None;
        }
        let pair = self.peer_pair.unwrap_or(0);
        self.directory
            .lookup(ns.name())
            .map(|remote| Route::new(ns.id(), remote, pair))
    }

    /// Whether the session routes: established, and the peer's pair value known (or the
    /// layout has no pair field).
    pub fn is_paired(&self) -> bool {
        self.phase == Phase::Established && (self.pair_bits == 0 || self.peer_pair.is_some())
    }

    /// The pair value the peer told this side to put in its tags (`None` before its PAIR).
    pub fn peer_pair(&self) -> Option<u32> {
        self.peer_pair
    }

    /// Gives the proven peer `value` for the pair field of the tags it sends here: the next
    /// [`poll_transmit`](Self::poll_transmit) sends it in a PAIR frame. The engine chooses
    /// values: non-zero, within the layout's pair width, unique per peer on this process (see
    /// `Connections`). Once per session, and only once the peer is proven (so only a process
    /// that holds the peer's key ever learns it); ignored otherwise, and when the layout has
    /// no pair field.
    pub fn grant_pair(&mut self, value: u32) {
        let fits = (value as u64) >> self.pair_bits == 0;
        if self.pair_bits != 0
            && self.phase == Phase::Established
            && self.pair_granted.is_none()
            && value != 0
            && fits
        {
            self.pair_granted = Some(value);
        }
    }

    /// The value this side gave the peer, once granted.
    pub fn pair_granted(&self) -> Option<u32> {
        self.pair_granted
    }

    /// Queues an orderly CLOSE with `reason`; the next `poll_transmit` sends it.
    pub fn close(&mut self, reason: CloseReason) {
        if !matches!(self.phase, Phase::Closed) {
            self.phase = Phase::Closing(reason);
        }
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

    fn fail(&mut self, e: SessionError) -> SessionError {
        let reason = match e {
            SessionError::LayoutMismatch { .. } => CloseReason::LayoutMismatch,
            SessionError::Unproven { .. } => CloseReason::Unproven,
            SessionError::Closed => return e,
            _ => CloseReason::ProtocolError,
        };
        self.close(reason);
        e
    }

    /// Takes one frame from the peer. Any error closes the session (and queues a CLOSE saying
    /// why); the directory is left as it was before the bad frame.
    ///
    /// A CLOSE is accepted in every phase: both sides closing at once (as both ends of a
    /// superseded connection do) is normal. Anything else after closing is refused.
    pub fn handle(&mut self, bytes: &[u8]) -> Result<Option<Event>, SessionError> {
        if matches!(self.phase, Phase::Closing(_) | Phase::Closed) {
            return match wire::decode(bytes) {
                Ok(Frame::Close { reason }) => {
                    self.phase = Phase::Closed;
                    Ok(Some(Event::Closed { reason }))
                }
                _ => Err(SessionError::Closed),
            };
        }
        self.handle_frame(bytes).map_err(|e| self.fail(e))
    }

    /// The one check of a peer's namespace id, for HELLO entries, ANNOUNCE and WITHDRAW alike:
    /// it must fit *this* side's namespace width (tags are built with it here), whatever width
    /// the peer's HELLO declared — a HELLO is only decoded against its own declared width, so
    /// a peer declaring 16 bits could otherwise slip ids 300 or 65535 into an 8-bit directory.
    /// (The wire decoder already refuses the reserved ids 0 and 1.)
    fn check_id(&self, id: u16) -> Result<(), SessionError> {
        if (id as u32) >> self.namespace_bits != 0 {
            return Err(WireError::IdOutOfRange {
                id,
                namespace_bits: self.namespace_bits,
            }
            .into());
        }
        Ok(())
    }

    fn handle_frame(&mut self, bytes: &[u8]) -> Result<Option<Event>, SessionError> {
        let frame = wire::decode(bytes)?;
        match (self.phase, frame) {
            (Phase::Connecting, Frame::Hello(h)) => {
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
                identity::check_public_key(&h.public_key).map_err(|error| {
                    SessionError::Unproven {
                        claimed: h.token(),
                        error,
                    }
                })?;
                let mut dir = Directory::new();
                for (id, name) in h.entries() {
                    self.check_id(id)?;
                    dir.insert(id, name)?;
                }
                self.directory = dir;
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
            (Phase::Proving, Frame::Proof { signature }) => {
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
            (Phase::Connecting, Frame::Proof { .. }) => Err(SessionError::Unexpected {
                frame: "PROOF",
                why: "it arrived before the peer's HELLO",
            }),
            (Phase::Established, Frame::Proof { .. }) => Err(SessionError::Unexpected {
                frame: "PROOF",
                why: "the peer already proved itself on this endpoint",
            }),
            (Phase::Proving | Phase::Established, Frame::Hello(_)) => {
                Err(SessionError::Unexpected {
                    frame: "HELLO",
                    why: "the peer already said hello on this endpoint",
                })
            }
            (Phase::Connecting, Frame::Announce { .. } | Frame::Withdraw { .. }) => {
                Err(SessionError::Unexpected {
                    frame: "announcement",
                    why: "it arrived before the peer's HELLO",
                })
            }
            // Between HELLO and PROOF the peer's announcements update the directory quietly:
            // nobody may act on an unproven peer's table, and establishing reports it whole.
            (phase @ (Phase::Proving | Phase::Established), Frame::Announce { id, name }) => {
                self.check_id(id)?;
                self.directory.insert(id, name)?;
                Ok((phase == Phase::Established).then_some(Event::Announced { name, id }))
            }
            (phase @ (Phase::Proving | Phase::Established), Frame::Withdraw { id, seq }) => {
                self.check_id(id)?;
                if seq != 0 && (self.owed_frames.is_full() || self.owed_tags.is_full()) {
                    return Err(SessionError::Unexpected {
                        frame: "WITHDRAW",
                        why: "more withdrawals waiting for acknowledgement than names",
                    });
                }
                match self.directory.remove_id(id) {
                    Some(name) => {
                        if seq != 0 {
                            // Both fit: checked above.
                            let _ = self.owed_frames.push_back((id, seq));
                            let _ = self.owed_tags.push_back((id, seq));
                        }
                        Ok((phase == Phase::Established).then_some(Event::Withdrawn { name, id }))
                    }
                    None => Err(SessionError::UnknownId { id }),
                }
            }
            (Phase::Proving | Phase::Established, Frame::WithdrawAck { id, seq }) => {
                if !self.acknowledge(id, seq, ACK_FRAME) {
                    return Err(SessionError::Unexpected {
                        frame: "WITHDRAW-ACK",
                        why: "no such withdrawal is waiting",
                    });
                }
                Ok(None)
            }
            (Phase::Connecting, Frame::WithdrawAck { .. }) => Err(SessionError::Unexpected {
                frame: "WITHDRAW-ACK",
                why: "it arrived before the peer's HELLO",
            }),
            // A peer pings once it has verified our PROOF, which may be before we have verified
            // its own: answer from then on. One PONG is owed at most: an honest peer waits for
            // it before pinging again, so a newer PING replaces an unanswered one.
            (Phase::Proving | Phase::Established, Frame::Ping { seq }) => {
                self.pong_owed = Some(seq);
                Ok(None)
            }
            (Phase::Established, Frame::Pair { value }) => {
                if self.pair_bits == 0 {
                    return Err(SessionError::Unexpected {
                        frame: "PAIR",
                        why: "this side's layout has no pair field",
                    });
                }
                if self.peer_pair.is_some() {
                    return Err(SessionError::Unexpected {
                        frame: "PAIR",
                        why: "the peer already gave its pair value on this endpoint",
                    });
                }
                if value == 0 || (value as u64) >> self.pair_bits != 0 {
                    return Err(SessionError::Unexpected {
                        frame: "PAIR",
                        why: "the value is 0 or wider than the layout's pair field",
                    });
                }
                self.peer_pair = Some(value);
                Ok(Some(Event::Paired))
            }
            (Phase::Connecting | Phase::Proving, Frame::Pair { .. }) => {
                Err(SessionError::Unexpected {
                    frame: "PAIR",
                    why: "it arrived before the peer proved itself",
                })
            }
            (Phase::Connecting, Frame::Ping { .. }) => Err(SessionError::Unexpected {
                frame: "PING",
                why: "it arrived before the peer's HELLO",
            }),
            (_, Frame::Pong { seq }) => {
                if self.ping_out != Some(seq) || self.ping_queued {
                    return Err(SessionError::Unexpected {
                        frame: "PONG",
                        why: "no PING of ours with this seq is waiting",
                    });
                }
                self.ping_out = None;
                Ok(None)
            }
            (_, Frame::Close { reason }) => {
                self.phase = Phase::Closed;
                Ok(Some(Event::Closed { reason }))
            }
            (Phase::Closing(_) | Phase::Closed, _) => Err(SessionError::Closed),
        }
    }

    /// The next frame for the peer, written into `buf` (size it [`wire::MAX_FRAME_LEN`], or at
    /// least large enough for this registry's HELLO). `Ok(None)`: nothing to send now. Call it
    /// after creating the session, after every `handle`, and whenever `registry.epoch()` moves.
    pub fn poll_transmit<const R: usize>(
        &mut self,
        registry: &Registry<R>,
        buf: &mut [u8],
    ) -> Result<Option<usize>, SessionError> {
        match self.phase {
            Phase::Closed => return Ok(None),
            Phase::Closing(reason) => {
                let n = Frame::Close { reason }.encode(buf)?;
                self.phase = Phase::Closed;
                return Ok(Some(n));
            }
            _ => {}
        }
        if !self.hello_sent {
            return self.encode_hello(registry, buf).map(Some);
        }
        if !self.proof_sent {
            if let Some(transcript) = self.transcript(self.role) {
                let signature = identity::sign(&self.key, &transcript);
                let n = Frame::Proof { signature }.encode(buf)?;
                self.proof_sent = true;
                return Ok(Some(n));
            }
        }
        if let (Some(value), false) = (self.pair_granted, self.pair_sent) {
            let n = Frame::Pair { value }.encode(buf)?;
            self.pair_sent = true;
            return Ok(Some(n));
        }
        if let Some(seq) = self.pong_owed {
            let n = Frame::Pong { seq }.encode(buf)?;
            self.pong_owed = None;
            return Ok(Some(n));
        }
        if let (Some(seq), true) = (self.ping_out, self.ping_queued) {
            let n = Frame::Ping { seq }.encode(buf)?;
            self.ping_queued = false;
            return Ok(Some(n));
        }
        if let Some(&(id, seq)) = self.owed_frames.front() {
            let n = Frame::WithdrawAck { id, seq }.encode(buf)?;
            self.owed_frames.pop_front();
            return Ok(Some(n));
        }
        'rescan: loop {
            let epoch = registry.epoch();
            if self.synced_epoch == Some(epoch) {
                return Ok(None);
            }
            let ids = 0..R.min(CAP) as u16;
            // Withdrawals first: a name that moved to another id must leave the peer's table
            // before it is announced again, or the peer sees it twice.
            for id in ids.clone() {
                let told = self.told[id as usize];
                if told != 0 && registry.live_generation(id) != Some(told) {
                    // A dynamic id stays pinned (quarantined) until the peer acknowledges; a
                    // well-known one always carries the same name and is not quarantined.
                    let seq = if registry.is_dynamic(id) {
                        self.next_seq()
                    } else {
                        0
                    };
                    let n = Frame::Withdraw { id, seq }.encode(buf)?;
                    self.told[id as usize] = 0;
                    if seq == 0 {
                        registry.unpin(id);
                    } else {
                        self.withdraw_seq[id as usize] = seq;
                        self.acked[id as usize] = 0;
                        self.awaiting += 1;
                    }
                    return Ok(Some(n));
                }
            }
            for id in ids {
                if self.told[id as usize] != 0 {
                    continue;
                }
                if let Some((token, name)) = registry.name_of(id) {
                    // If anything was released or registered since the withdrawal pass, that
                    // pass may be out of date (the name may have just moved here): start over.
                    // Releases bump the epoch before freeing, so seeing this registration
                    // implies seeing any release it depended on.
                    if registry.epoch() != epoch {
                        continue 'rescan;
                    }
                    if self.withdraw_seq[id as usize] != 0 {
                        // Still waiting for the acknowledgement of this id's last withdrawal:
                        // the registry cannot have handed it out again while we pin it.
                        continue;
                    }
                    if !registry.pin(token) {
                        // Just released: the epoch moved, and the rescan sees it.
                        continue 'rescan;
                    }
                    let n = Frame::Announce { id, name }.encode(buf)?;
                    self.told[id as usize] = token.generation;
                    return Ok(Some(n));
                }
            }
            self.synced_epoch = Some(epoch);
            return Ok(None);
        }
    }

    fn next_seq(&mut self) -> u32 {
        // Keyed by the secret key (the nonce alone is sent in the HELLO, in clear): nobody but
        // this process can predict it, so nobody can forge an ack tag for it. Never 0.
        use sha2::{Digest, Sha512};
        loop {
            self.seqs_made = self.seqs_made.wrapping_add(1);
            let digest = Sha512::new()
                .chain_update(b"tagspace-withdraw-seq")
                .chain_update(self.key.to_bytes())
                .chain_update(self.local.nonce)
                .chain_update(self.seqs_made.to_le_bytes())
                .finalize();
            let seq = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
            if seq != 0 {
                return seq;
            }
        }
    }

    /// Records one half of an acknowledgement; `false` if no such withdrawal is waiting.
    fn acknowledge(&mut self, id: u16, seq: u32, half: u8) -> bool {
        let i = id as usize;
        if seq == 0 || self.withdraw_seq.get(i) != Some(&seq) {
            return false;
        }
        self.acked[i] |= half;
        if self.acked[i] == ACK_FRAME | ACK_TAG {
            self.withdraw_seq[i] = 0;
            self.acked[i] = 0;
            self.awaiting -= 1;
            // Cannot be full: one entry per id at most.
            let _ = self.confirmed.push_back(id);
        }
        true
    }

    /// The peer's ack tag message arrived (the adapter parsed it with
    /// [`wire::parse_ack_tag`]). `false`: not a withdrawal of this session's (another
    /// connection's, or forged) — try the next session.
    pub fn on_ack_tag(&mut self, id: u16, seq: u32) -> bool {
        self.acknowledge(id, seq, ACK_TAG)
    }

    /// The ack tag messages this session still waits for, as `(id, seq)` (see
    /// [`wire::ack_tag`]): one per withdrawal of ours whose tag half has not arrived. An
    /// adapter that may not post a wildcard receive over the control namespace (a host's
    /// worker, where another library's tags can fall anywhere) posts one exact receive for each.
    pub fn awaited_ack_tags(&self) -> impl Iterator<Item = (u16, u32)> + '_ {
        self.withdraw_seq
            .iter()
            .zip(self.acked.iter())
            .enumerate()
            .filter(|(_, (&seq, &acked))| seq != 0 && acked & ACK_TAG == 0)
            .map(|(i, (&seq, _))| (i as u16, seq))
    }

    /// The next ack tag message to send the peer, as a zero-length tag message on this
    /// endpoint (after any data the adapter has already posted on it).
    pub fn poll_ack_tag(&mut self, layout: &TagLayout) -> Option<u64> {
        self.owed_tags
            .pop_front()
            .map(|(id, seq)| wire::ack_tag(layout, id, seq))
    }

    /// The heartbeat: queues a PING (sent by the next [`poll_transmit`](Self::poll_transmit))
    /// if the session is established and no earlier PING still waits for its PONG. Returns
    /// whether it queued one. The peer answers as soon as it handles it, so the adapter can
    /// bound how long [`ping_outstanding`](Self::ping_outstanding) stays true: a peer that
    /// stops answering has stopped calling `progress`, or nothing sent to this process
    /// arrives any more (e.g. its shared-memory receive queue is stuck) — either way the
    /// connection no longer works, and the adapter closes it with
    /// [`CloseReason::Unresponsive`]. The session itself keeps no clock.
    pub fn ping(&mut self) -> bool {
        if self.phase != Phase::Established || self.ping_out.is_some() {
            return false;
        }
        self.pings_made = self.pings_made.wrapping_add(1);
        self.ping_out = Some(self.pings_made);
        self.ping_queued = true;
        true
    }

    /// Whether a PING of ours waits for its PONG (queued or sent).
    pub fn ping_outstanding(&self) -> bool {
        self.ping_out.is_some()
    }

    /// Withdrawals of ours the peer has not fully acknowledged yet. An adapter bounds how long
    /// this may stay above zero without progress, so that a connected peer that never answers
    /// cannot keep ids quarantined for ever.
    pub fn awaiting_acks(&self) -> usize {
        self.awaiting
    }

    /// A local id whose withdrawal the peer has confirmed: nothing more from it can arrive
    /// for the released lease. The adapter drains what did arrive for the id (now strays),
    /// then calls `registry.unpin(id)`.
    pub fn take_confirmed(&mut self) -> Option<u16> {
        self.confirmed.pop_front()
    }

    /// Ends the session's hold on the registry: every id it pinned (told to the peer, or
    /// withdrawn and not yet confirmed). The adapter calls it once the connection is gone,
    /// drains what arrived for the ids that are no longer live, and unpins each. Afterwards the
    /// session holds nothing. A session has no reference to its registry, so one dropped
    /// without `finish` leaves its ids pinned: the engine ([`crate::engine::Engine`]) finishes
    /// every session it holds when a connection is forgotten and when it is dropped; code that
    /// drives a `Session` by hand must call this.
    pub fn finish(&mut self) -> heapless::Vec<u16, CAP> {
        let mut pinned = heapless::Vec::new();
        for i in 0..CAP {
            if self.told[i] != 0 || self.withdraw_seq[i] != 0 {
                let _ = pinned.push(i as u16);
            }
        }
        self.told = [0; CAP];
        self.withdraw_seq = [0; CAP];
        self.acked = [0; CAP];
        self.awaiting = 0;
        while let Some(id) = self.confirmed.pop_front() {
            let _ = pinned.push(id);
        }
        self.phase = Phase::Closed;
        pinned
    }

    fn encode_hello<const R: usize>(
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
            let mut told = [0u32; CAP];
            let mut result = Ok(());
            registry.for_each_live(|token, name| {
                if result.is_ok() {
                    match told.get_mut(token.id as usize) {
                        // Pinned before it is told (R7); a lease released meanwhile is skipped
                        // (the epoch moved: this snapshot is taken again).
                        Some(slot) if registry.pin(token) => {
                            result = enc.push(token.id, name);
                            *slot = token.generation;
                        }
                        Some(_) => {}
                        None => {
                            result = Err(WireError::FrameTooLarge);
                        }
                    }
                }
            });
            if result.is_err() || registry.epoch() != epoch {
                for (id, &g) in told.iter().enumerate() {
                    if g != 0 {
                        registry.unpin(id as u16);
                    }
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

impl<const CAP: usize> fmt::Debug for Session<CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("role", &self.role)
            .field("phase", &self.phase)
            .field("peer", &self.peer)
            .field("directory_len", &self.directory.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use crate::RegistryError;
    use std::vec;
    use std::vec::Vec;

    type Reg = Registry<64>;

    fn reg() -> Reg {
        Registry::new(TagLayout::DEFAULT)
    }

    /// Moves every pending frame from `from` to `to`; returns the events `to` saw.
    fn pump(from: &mut Session<64>, fr: &Reg, to: &mut Session<64>) -> Vec<Event> {
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        let mut events = Vec::new();
        while let Some(n) = from.poll_transmit(fr, &mut buf).unwrap() {
            if let Some(e) = to.handle(&buf[..n]).unwrap() {
                events.push(e);
            }
        }
        events
    }

    fn ident(seed: u8) -> identity::Identity {
        identity::Identity::from_seed(&[seed; 32])
    }

    /// Pumps both ways until neither side has anything to say (HELLOs, then PROOFs).
    fn settle(a: &mut Session<64>, ra: &Reg, b: &mut Session<64>, rb: &Reg) {
        for _ in 0..4 {
            pump(a, ra, b);
            pump(b, rb, a);
        }
    }

    fn pair(ra: &Reg, rb: &Reg) -> (Session<64>, Session<64>) {
        let mut a = Session::new(Role::Initiator, &ident(10), ra.layout());
        let mut b = Session::new(Role::Acceptor, &ident(20), rb.layout());
        settle(&mut a, ra, &mut b, rb);
        assert!(a.is_established() && b.is_established());
        // what the engine does once a peer is proven: give it its pair value
        a.grant_pair(0x11);
        b.grant_pair(0x22);
        settle(&mut a, ra, &mut b, rb);
        assert!(a.is_paired() && b.is_paired());
        (a, b)
    }

    #[test]
    fn routes_wait_for_the_peers_pair_value_and_bad_pairs_are_refused() {
        let (ra, rb) = (reg(), reg());
        let la = ra.register("x").unwrap();
        let lb = rb.register("x").unwrap();
        let mut a = Session::new(Role::Initiator, &ident(10), ra.layout());
        let mut b = Session::new(Role::Acceptor, &ident(20), rb.layout());
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        // a PAIR before the peer proved itself is refused (and a grant then is ignored)
        let n = Frame::Pair { value: 5 }.encode(&mut buf).unwrap();
        let mut early = Session::<64>::new(Role::Acceptor, &ident(30), rb.layout());
        assert!(matches!(
            early.handle(&buf[..n]),
            Err(SessionError::Unexpected { frame: "PAIR", .. })
        ));
        b.grant_pair(7);
        assert_eq!(b.pair_granted(), None, "granted before the peer was proven");
        settle(&mut a, &ra, &mut b, &rb);
        assert!(a.is_established() && b.is_established());
        assert_eq!(a.route(&la), None, "no route before the peer's PAIR");
        assert_eq!(
            pump(&mut b, &rb, &mut a),
            vec![],
            "nothing granted, nothing sent"
        );
        b.grant_pair(0x1234);
        b.grant_pair(0x9999); // a second grant changes nothing
        assert_eq!(pump(&mut b, &rb, &mut a), vec![Event::Paired]);
        let route = a.route(&la).unwrap();
        assert_eq!((route.remote_id(), route.pair()), (lb.id(), 0x1234));
        assert_eq!(lb.pair_of(la.remote_tag(route, 3).unwrap()), 0x1234);
        // a second PAIR, a zero one or one wider than the field closes the session
        for value in [0x1234, 0, 1 << 24] {
            let (mut a2, _) = pair(&ra, &rb);
            let n = Frame::Pair { value }.encode(&mut buf).unwrap();
            assert!(
                matches!(
                    a2.handle(&buf[..n]),
                    Err(SessionError::Unexpected { frame: "PAIR", .. })
                ),
                "{value:#x}"
            );
        }
        // a layout without a pair field routes at once and refuses any PAIR
        let plain = TagLayout::builder(56, 8).build().unwrap();
        let (rc, rd): (Reg, Reg) = (Registry::new(plain), Registry::new(plain));
        let lc = rc.register("x").unwrap();
        let mut c = Session::new(Role::Initiator, &ident(10), rc.layout());
        let mut d = Session::new(Role::Acceptor, &ident(20), rd.layout());
        settle(&mut c, &rc, &mut d, &rd);
        assert_eq!(
            c.route(&lc).map(|r| r.pair()),
            None,
            "d registered nothing yet"
        );
        let _ld = rd.register("x").unwrap();
        settle(&mut c, &rc, &mut d, &rd);
        assert_eq!(c.route(&lc).map(|r| r.pair()), Some(0));
        let n = Frame::Pair { value: 5 }.encode(&mut buf).unwrap();
        assert!(c.handle(&buf[..n]).is_err());
    }

    #[test]
    fn a_ping_is_answered_once_and_one_waits_at_a_time() {
        let (ra, rb) = (reg(), reg());
        let mut a: Session<64> = Session::new(Role::Initiator, &ident(10), ra.layout());
        let mut b: Session<64> = Session::new(Role::Acceptor, &ident(20), rb.layout());
        assert!(!a.ping(), "no heartbeat before the handshake");
        settle(&mut a, &ra, &mut b, &rb);
        assert!(a.ping());
        assert!(!a.ping(), "one PING waits at a time");
        assert!(a.ping_outstanding());
        pump(&mut a, &ra, &mut b);
        assert!(a.ping_outstanding(), "not answered until the PONG arrives");
        pump(&mut b, &rb, &mut a);
        assert!(!a.ping_outstanding());
        assert!(a.ping(), "the next one may go");
        settle(&mut a, &ra, &mut b, &rb);
        assert!(!a.ping_outstanding() && a.is_established() && b.is_established());
    }

    #[test]
    fn an_unasked_or_stale_pong_is_a_protocol_error() {
        let (ra, rb) = (reg(), reg());
        let (mut a, _b) = pair(&ra, &rb);
        let mut buf = [0u8; 16];
        let n = Frame::Pong { seq: 1 }.encode(&mut buf).unwrap();
        assert!(matches!(
            a.handle(&buf[..n]),
            Err(SessionError::Unexpected { frame: "PONG", .. })
        ));
        assert_eq!(a.phase(), Phase::Closing(CloseReason::ProtocolError));

        let (mut a, _b) = pair(&ra, &rb);
        assert!(a.ping());
        // Answered before it was even sent: forged.
        assert!(a.handle(&buf[..n]).is_err());

        let (mut a, mut b) = pair(&ra, &rb);
        assert!(a.ping());
        pump(&mut a, &ra, &mut b);
        let n = Frame::Pong { seq: 2 }.encode(&mut buf).unwrap();
        assert!(a.handle(&buf[..n]).is_err(), "wrong seq");
    }

    #[test]
    fn a_ping_before_the_hello_is_refused() {
        let ra = reg();
        let mut a: Session<64> = Session::new(Role::Acceptor, &ident(10), ra.layout());
        let mut buf = [0u8; 16];
        let n = Frame::Ping { seq: 1 }.encode(&mut buf).unwrap();
        assert!(a.handle(&buf[..n]).is_err());
    }

    #[test]
    fn different_registration_orders_route_by_name() {
        let (ra, rb) = (reg(), reg());
        let a_libs: Vec<_> = ["x", "y", "z"]
            .iter()
            .map(|n| ra.register(n).unwrap())
            .collect();
        let b_libs: Vec<_> = ["z", "x", "y"]
            .iter()
            .map(|n| rb.register(n).unwrap())
            .collect();
        let (a, b) = pair(&ra, &rb);
        for la in &a_libs {
            let lb = b_libs.iter().find(|l| l.name() == la.name()).unwrap();
            assert_eq!(a.route(la).unwrap().remote_id(), lb.id());
            assert_eq!(b.route(lb).unwrap().remote_id(), la.id());
            // the tag a sends lands in b's namespace of the same name
            let tag = la.remote_tag(a.route(la).unwrap(), 9).unwrap();
            assert!(lb.owns(tag));
        }
    }

    /// Moves ack tag messages both ways (as the adapters do over UCX) and unpins what the
    /// peers confirmed; returns the ids each side confirmed.
    fn exchange_acks(
        a: &mut Session<64>,
        ra: &Reg,
        b: &mut Session<64>,
        rb: &Reg,
    ) -> (Vec<u16>, Vec<u16>) {
        settle(a, ra, b, rb);
        let layout = *ra.layout();
        while let Some(tag) = b.poll_ack_tag(&layout) {
            let (id, seq) = wire::parse_ack_tag(&layout, tag).unwrap();
            assert!(a.on_ack_tag(id, seq));
        }
        while let Some(tag) = a.poll_ack_tag(&layout) {
            let (id, seq) = wire::parse_ack_tag(&layout, tag).unwrap();
            assert!(b.on_ack_tag(id, seq));
        }
        let mut done = (Vec::new(), Vec::new());
        while let Some(id) = a.take_confirmed() {
            ra.unpin(id);
            done.0.push(id);
        }
        while let Some(id) = b.take_confirmed() {
            rb.unpin(id);
            done.1.push(id);
        }
        done
    }

    #[test]
    fn announcements_follow_the_registry() {
        let (ra, rb) = (reg(), reg());
        let (mut a, mut b) = pair(&ra, &rb);
        let late = ra.register("late").unwrap();
        let ev = pump(&mut a, &ra, &mut b);
        assert_eq!(
            ev,
            vec![Event::Announced {
                name: Name::new("late").unwrap(),
                id: late.id()
            }]
        );
        assert_eq!(b.directory().lookup(late.name()), Some(late.id()));
        let id = late.id();
        drop(late);
        // R7: the peer was told about "late", so its id is quarantined, not reused
        assert!(ra.is_quarantined(id));
        let again = ra.register("again").unwrap();
        assert_ne!(again.id(), id);
        let ev = pump(&mut a, &ra, &mut b);
        assert_eq!(
            ev,
            vec![
                Event::Withdrawn {
                    name: Name::new("late").unwrap(),
                    id
                },
                Event::Announced {
                    name: Name::new("again").unwrap(),
                    id: again.id()
                }
            ]
        );
        assert!(pump(&mut a, &ra, &mut b).is_empty());
        // b acknowledges by frame and by tag; then a confirms and the id is free again
        assert_eq!(exchange_acks(&mut a, &ra, &mut b, &rb), (vec![id], vec![]));
        assert!(!ra.is_quarantined(id));
        let reused = ra.register_at("reused", id).unwrap();
        let ev = pump(&mut a, &ra, &mut b);
        assert_eq!(
            ev,
            vec![Event::Announced {
                name: Name::new("reused").unwrap(),
                id: reused.id()
            }]
        );
    }

    /// R7: one half of the acknowledgement is not enough, a wrong `seq` is refused, and a
    /// session that ends gives its pins back.
    #[test]
    fn quarantine_needs_both_halves_and_ends_with_the_session() {
        let (ra, rb) = (reg(), reg());
        let (mut a, mut b) = pair(&ra, &rb);
        let x = ra.register("x").unwrap();
        let id = x.id();
        settle(&mut a, &ra, &mut b, &rb);
        drop(x);
        settle(&mut a, &ra, &mut b, &rb); // WITHDRAW over, W-ACK back
        assert!(
            ra.is_quarantined(id),
            "the frame half alone does not confirm"
        );
        assert_eq!(a.awaiting_acks(), 1);
        assert_eq!(a.take_confirmed(), None);
        let layout = *ra.layout();
        let tag = b.poll_ack_tag(&layout).unwrap();
        let (tid, seq) = wire::parse_ack_tag(&layout, tag).unwrap();
        // What an adapter posts exact receives for is exactly the tag the peer sends.
        assert_eq!(a.awaited_ack_tags().collect::<Vec<_>>(), [(tid, seq)]);
        assert!(!a.on_ack_tag(tid, seq.wrapping_add(1)), "wrong seq");
        assert!(a.on_ack_tag(tid, seq));
        assert_eq!(a.awaited_ack_tags().count(), 0);
        assert_eq!(a.awaiting_acks(), 0);
        assert_eq!(a.take_confirmed(), Some(id));
        ra.unpin(id);
        assert!(!ra.is_quarantined(id));

        // a peer that never acknowledges: the connection's end releases the pin
        let y = ra.register("y").unwrap();
        let yid = y.id();
        settle(&mut a, &ra, &mut b, &rb);
        drop(y);
        pump(&mut a, &ra, &mut b);
        assert!(ra.is_quarantined(yid));
        assert_eq!(a.awaiting_acks(), 1);
        for id in a.finish() {
            ra.unpin(id);
        }
        assert!(!ra.is_quarantined(yid));
        // a forged frame half for a withdrawal that is not waiting is a protocol error
        let (mut a, _b) = pair(&ra, &rb);
        let mut buf = [0u8; 64];
        let n = Frame::WithdrawAck { id: yid, seq: 5 }
            .encode(&mut buf)
            .unwrap();
        assert!(matches!(
            a.handle(&buf[..n]),
            Err(SessionError::Unexpected {
                frame: "WITHDRAW-ACK",
                ..
            })
        ));
    }

    /// A registry none of whose free ids is usable says so.
    #[test]
    fn only_quarantined_ids_is_a_clear_error() {
        let ra: Registry<18> = Registry::new(TagLayout::DEFAULT); // dynamic ids 16 and 17
        let rb = reg();
        let mut a = Session::<64>::new(Role::Initiator, &ident(1), ra.layout());
        let mut b = Session::<64>::new(Role::Acceptor, &ident(2), rb.layout());
        let (p, q) = (ra.register("p").unwrap(), ra.register("q").unwrap());
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        for _ in 0..4 {
            while let Some(n) = a.poll_transmit(&ra, &mut buf).unwrap() {
                b.handle(&buf[..n]).unwrap();
            }
            while let Some(n) = b.poll_transmit(&rb, &mut buf).unwrap() {
                a.handle(&buf[..n]).unwrap();
            }
        }
        assert!(a.is_established());
        drop((p, q));
        assert_eq!(
            ra.register("r").map(|n| n.id()),
            Err(RegistryError::Quarantined { ids: 2 })
        );
        for id in a.finish() {
            ra.unpin(id);
        }
        assert!(ra.register("r").is_ok());
    }

    #[test]
    fn a_name_moving_to_a_lower_id_is_withdrawn_first() {
        // Found by the session fuzz target (fuzz/regressions/session/crash-841f...): a name
        // re-registered at a lower id was announced before its old id was withdrawn. Under R7
        // both ids stay quarantined until acknowledged, so the move needs the acks first.
        let (ra, rb) = (reg(), reg());
        let x = ra.register("x").unwrap();
        let e1 = ra.register("e1").unwrap();
        let (low, high) = (x.id(), e1.id());
        let (mut a, mut b) = pair(&ra, &rb);
        drop(x);
        drop(e1);
        let ev = pump(&mut a, &ra, &mut b);
        let name = |s| Name::new(s).unwrap();
        assert_eq!(
            ev,
            vec![
                Event::Withdrawn {
                    name: name("x"),
                    id: low
                },
                Event::Withdrawn {
                    name: name("e1"),
                    id: high
                },
            ]
        );
        assert_eq!(
            exchange_acks(&mut a, &ra, &mut b, &rb),
            (vec![low, high], vec![])
        );
        let e1 = ra.register_at("e1", low).unwrap();
        let ev = pump(&mut a, &ra, &mut b);
        assert_eq!(
            ev,
            vec![Event::Announced {
                name: name("e1"),
                id: e1.id()
            }]
        );
        assert_eq!(b.directory().lookup(&name("e1")), Some(low));
    }

    #[test]
    fn layout_mismatch_closes_with_reason() {
        let ra = reg();
        let other = TagLayout::builder(48, 8).build().unwrap();
        let rb: Reg = Registry::new(other);
        let mut a = Session::<64>::new(Role::Initiator, &ident(1), ra.layout());
        let mut b = Session::<64>::new(Role::Acceptor, &ident(2), rb.layout());
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
        assert!(matches!(
            b.handle(&buf[..n]),
            Err(SessionError::LayoutMismatch { .. })
        ));
        let n = b.poll_transmit(&rb, &mut buf).unwrap().unwrap();
        assert_eq!(
            wire::decode(&buf[..n]),
            Ok(Frame::Close {
                reason: CloseReason::LayoutMismatch
            })
        );
        assert_eq!(b.phase(), Phase::Closed);
        // a's own CLOSE crossing ours is fine; anything else after closing is refused
        assert_eq!(
            b.handle(&buf[..n]),
            Ok(Some(Event::Closed {
                reason: CloseReason::LayoutMismatch
            }))
        );
        let n = Frame::Withdraw { id: 20, seq: 0 }.encode(&mut buf).unwrap();
        assert_eq!(b.handle(&buf[..n]), Err(SessionError::Closed));
    }

    /// HELLO, ANNOUNCE and WITHDRAW check ids the same way, against this side's width: a HELLO
    /// that declares a wider namespace field cannot slip in ids this side cannot use.
    #[test]
    fn every_frame_checks_ids_against_this_sides_width() {
        let ra = reg();
        let layout = *ra.layout();
        let bits = layout.namespace_field().width() as u8;
        assert_eq!(bits, 8);
        let out_of_range = |id: u16| {
            Err(SessionError::from(WireError::IdOutOfRange {
                id,
                namespace_bits: bits,
            }))
        };
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        for id in [300u16, 4000, 65535] {
            let mut a = Session::<64>::new(Role::Initiator, &ident(10), &layout);
            let mut e = wire::HelloEncoder::new(
                &mut buf,
                layout.fingerprint(),
                Role::Acceptor,
                16, // declares a 16-bit namespace field
                ident(20).public_key(),
                &[0; 16],
            )
            .unwrap();
            e.push(2, &Name::new("dask").unwrap()).unwrap();
            e.push(id, &Name::new("evil").unwrap()).unwrap();
            let n = e.finish();
            assert_eq!(a.handle(&buf[..n]), out_of_range(id), "HELLO with id {id}");
            assert!(a.directory().is_empty());
            assert!(!a.is_established());
        }
        let rb = reg();
        for frame in [
            Frame::Announce {
                id: 4000,
                name: Name::new("evil").unwrap(),
            },
            Frame::Withdraw { id: 4000, seq: 0 },
        ] {
            let (mut a, _b) = pair(&ra, &rb);
            let n = frame.encode(&mut buf).unwrap();
            assert_eq!(a.handle(&buf[..n]), out_of_range(4000), "{frame:?}");
        }
    }

    #[test]
    fn protocol_violations_fail_the_session_only() {
        let (ra, rb) = (reg(), reg());
        let _x = rb.register("x").unwrap();
        let (mut a, mut b) = pair(&ra, &rb);
        let before = a.directory().len();
        let mut buf = [0u8; 128];
        let n = Frame::Withdraw { id: 40, seq: 7 }.encode(&mut buf).unwrap();
        assert_eq!(a.handle(&buf[..n]), Err(SessionError::UnknownId { id: 40 }));
        assert_eq!(a.directory().len(), before);
        assert!(matches!(
            a.phase(),
            Phase::Closing(CloseReason::ProtocolError)
        ));
        // b is unaffected and can still talk to others
        assert!(b.is_established());
        b.close(CloseReason::Normal);
        let mut out = vec![0u8; 64];
        assert!(b.poll_transmit(&rb, &mut out).unwrap().is_some());
        assert_eq!(b.poll_transmit(&rb, &mut out).unwrap(), None);
    }

    #[test]
    fn announce_before_hello_and_duplicates_are_refused() {
        let ra = reg();
        let mut s = Session::<64>::new(Role::Acceptor, &ident(1), ra.layout());
        let mut buf = [0u8; 256];
        let n = Frame::Announce {
            id: 20,
            name: Name::new("q").unwrap(),
        }
        .encode(&mut buf)
        .unwrap();
        assert!(matches!(
            s.handle(&buf[..n]),
            Err(SessionError::Unexpected { .. })
        ));

        let mut s = Session::<64>::new(Role::Acceptor, &ident(1), ra.layout());
        let mut e = HelloEncoder::new(
            &mut buf,
            ra.layout().fingerprint(),
            Role::Initiator,
            8,
            ident(2).public_key(),
            &[0; 16],
        )
        .unwrap();
        e.push(20, &Name::new("q").unwrap()).unwrap();
        e.push(21, &Name::new("q").unwrap()).unwrap();
        let n = e.finish();
        assert_eq!(
            s.handle(&buf[..n]),
            Err(SessionError::DuplicateName {
                name: Name::new("q").unwrap()
            })
        );
        assert!(s.directory().is_empty());
    }

    #[test]
    fn role_and_token_checks() {
        let ra = reg();
        let mut a = Session::<64>::new(Role::Initiator, &ident(5), ra.layout());
        let mut b = Session::<64>::new(Role::Initiator, &ident(6), ra.layout());
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
        assert_eq!(b.handle(&buf[..n]), Err(SessionError::RoleConflict));
        let mut c = Session::<64>::new(Role::Acceptor, &ident(5), ra.layout());
        assert_eq!(c.handle(&buf[..n]), Err(SessionError::SameToken));
    }

    #[test]
    fn simultaneous_connect_keeps_exactly_one() {
        let (ra, rb) = (reg(), reg());
        for (sa, sb) in [(1u8, 2u8), (2, 1), (3, 4), (4, 3)] {
            let (ia, ib) = (ident(sa), ident(sb));
            let (ta, tb) = (ia.token(), ib.token());
            // connection 1: a opened it; connection 2: b opened it
            let mut a1 = Session::<64>::new(Role::Initiator, &ia, ra.layout());
            let mut b1 = Session::<64>::new(Role::Acceptor, &ib, rb.layout());
            let mut b2 = Session::<64>::new(Role::Initiator, &ib, rb.layout());
            let mut a2 = Session::<64>::new(Role::Acceptor, &ia, ra.layout());
            settle(&mut a1, &ra, &mut b1, &rb);
            settle(&mut b2, &rb, &mut a2, &ra);
            let keep1 = a1.survives_duplicate().unwrap();
            assert_eq!(keep1, b1.survives_duplicate().unwrap());
            let keep2 = a2.survives_duplicate().unwrap();
            assert_eq!(keep2, b2.survives_duplicate().unwrap());
            assert!(keep1 ^ keep2, "exactly one connection survives");
            assert_eq!(keep1, ta < tb);
        }
    }

    #[test]
    fn hello_is_independent_of_endpoint_count() {
        // P3: the HELLO carries the namespace table, never a list of other endpoints, so its
        // size does not grow as sessions are added.
        let ra = reg();
        let _n = ra.register("x").unwrap();
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        let sizes: Vec<usize> = (0..100u8)
            .map(|i| {
                let mut s = Session::<64>::new(Role::Initiator, &ident(i), ra.layout());
                s.poll_transmit(&ra, &mut buf).unwrap().unwrap()
            })
            .collect();
        assert!(sizes.iter().all(|&n| n == sizes[0]));
    }

    /// The HELLO an attacker sends claiming `victim`'s key, with its own nonce.
    fn claim_hello(
        buf: &mut [u8],
        layout: &TagLayout,
        role: Role,
        victim: &identity::Identity,
    ) -> usize {
        let mut e = HelloEncoder::new(
            buf,
            layout.fingerprint(),
            role,
            8,
            victim.public_key(),
            &[0x5a; 16],
        )
        .unwrap();
        e.push(2, &Name::new("dask").unwrap()).unwrap();
        e.finish()
    }

    /// P6: copying a token (the whole public key) is a claim; the PROOF needs the secret key.
    #[test]
    fn a_claimed_token_is_never_a_peer() {
        let ra = reg();
        let (victim, attacker) = (ident(20), ident(66));
        let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        let n = claim_hello(&mut buf, ra.layout(), Role::Initiator, &victim);
        assert_eq!(a.handle(&buf[..n]), Ok(None));
        // between HELLO and PROOF: a claim only
        assert_eq!(a.phase(), Phase::Proving);
        assert_eq!(a.peer(), None);
        assert_eq!(a.survives_duplicate(), None);
        assert_eq!(a.claimed_token(), Some(victim.token()));
        // a signs its own PROOF (harmless: bound to this connection's nonces and a's key)
        let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
        assert!(matches!(wire::decode(&buf[..n]), Ok(Frame::Hello(_))));
        let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
        assert!(matches!(wire::decode(&buf[..n]), Ok(Frame::Proof { .. })));
        // the attacker signs with its own key: refused
        let fake = Party {
            public_key: *victim.public_key(),
            nonce: [0x5a; 16],
        };
        let t = identity::transcript(Role::Initiator, ra.layout().fingerprint(), &fake, &a.local);
        let signature = identity::sign(&attacker.signer(), &t);
        let n = Frame::Proof { signature }.encode(&mut buf).unwrap();
        assert_eq!(
            a.handle(&buf[..n]),
            Err(SessionError::Unproven {
                claimed: victim.token(),
                error: ProofError::BadSignature
            })
        );
        assert_eq!(a.peer(), None);
        assert_eq!(a.phase(), Phase::Closing(CloseReason::Unproven));
        // all-zero and random signatures too
        for sig in [[0u8; 64], [0xff; 64]] {
            let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
            let n = claim_hello(&mut buf, ra.layout(), Role::Initiator, &victim);
            a.handle(&buf[..n]).unwrap();
            let n = Frame::Proof { signature: sig }.encode(&mut buf).unwrap();
            assert!(matches!(
                a.handle(&buf[..n]),
                Err(SessionError::Unproven { .. })
            ));
        }
    }

    /// P6: a victim's real HELLO and PROOF, replayed on another connection, do not verify
    /// there (the PROOF signs the other side's fresh nonce).
    #[test]
    fn a_replayed_handshake_is_refused() {
        let (ra, rb) = (reg(), reg());
        let (ia, ib) = (ident(10), ident(20));
        let mut a1 = Session::<64>::new(Role::Acceptor, &ia, ra.layout());
        let mut b = Session::<64>::new(Role::Initiator, &ib, rb.layout());
        let mut recorded = Vec::new();
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        for _ in 0..3 {
            while let Some(n) = b.poll_transmit(&rb, &mut buf).unwrap() {
                recorded.push(buf[..n].to_vec());
                a1.handle(&buf[..n]).unwrap();
            }
            pump(&mut a1, &ra, &mut b);
        }
        assert!(a1.is_established() && b.is_established());
        assert_eq!(recorded.len(), 2, "HELLO and PROOF");
        // the same bytes, to a fresh session of the same process
        let mut a2 = Session::<64>::new(Role::Acceptor, &ia, ra.layout());
        assert_eq!(a2.handle(&recorded[0]), Ok(None));
        assert!(matches!(
            a2.handle(&recorded[1]),
            Err(SessionError::Unproven {
                error: ProofError::BadSignature,
                ..
            })
        ));
        assert_eq!(a2.peer(), None);
    }

    #[test]
    fn proof_out_of_order_and_bad_keys_are_refused() {
        let ra = reg();
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        let proof = Frame::Proof { signature: [1; 64] };
        let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
        let n = proof.encode(&mut buf).unwrap();
        assert!(matches!(
            a.handle(&buf[..n]),
            Err(SessionError::Unexpected { frame: "PROOF", .. })
        ));
        let (mut a, _b) = pair(&ra, &reg());
        assert!(matches!(
            a.handle(&buf[..n]),
            Err(SessionError::Unexpected { frame: "PROOF", .. })
        ));
        // a small-order key is refused at the HELLO
        let mut weak = [0u8; 32];
        weak[0] = 1;
        let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
        let n = HelloEncoder::new(
            &mut buf,
            ra.layout().fingerprint(),
            Role::Initiator,
            8,
            &weak,
            &[0; 16],
        )
        .unwrap()
        .finish();
        assert!(matches!(
            a.handle(&buf[..n]),
            Err(SessionError::Unproven {
                error: ProofError::BadPublicKey,
                ..
            })
        ));
    }

    /// Announcements sent between HELLO and PROOF are kept, but reported only as part of the
    /// established directory.
    #[test]
    fn announcements_before_the_proof_are_held() {
        let (ra, rb) = (reg(), reg());
        let mut a = Session::<64>::new(Role::Initiator, &ident(10), ra.layout());
        let mut b = Session::<64>::new(Role::Acceptor, &ident(20), rb.layout());
        pump(&mut a, &ra, &mut b); // a's HELLO
        let late = ra.register("late").unwrap();
        let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
        // b has a's HELLO: it sends HELLO, PROOF; a sends nothing more until it has b's HELLO
        let ev = pump(&mut a, &ra, &mut b);
        assert!(ev.is_empty(), "announce before proof is quiet: {ev:?}");
        assert_eq!(b.phase(), Phase::Proving);
        assert_eq!(b.directory().lookup(late.name()), Some(late.id()));
        let ev = pump(&mut b, &rb, &mut a);
        assert!(matches!(ev[..], [Event::Established { .. }]));
        let ev = pump(&mut a, &ra, &mut b);
        assert!(matches!(ev[..], [Event::Established { .. }]));
        assert_eq!(b.directory().lookup(late.name()), Some(late.id()));
        let _ = &mut buf;
    }
}
