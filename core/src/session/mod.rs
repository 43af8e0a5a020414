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
//!    Each side also tells the proven peer where it listens, if it was given an address to
//!    tell ([`Session::set_advertised`]; an ADDRESS frame): what the engine dials to reach the
//!    peer again after a fault.
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
//! By concern: `handshake` (HELLO, PROOF), `directory` (the peer's names and pair value, the
//! routes), `announce` (ANNOUNCE and WITHDRAW both ways), `acks` (R7's two-half
//! acknowledgements and pins), `heartbeat` (PING, PONG); this file keeps the state, the
//! dispatch of a frame by phase, and the order in which frames go out.
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

mod acks;
mod announce;
mod directory;
mod handshake;
mod heartbeat;
mod tables;
use tables::{IdMap, List, Queue};

pub use directory::Directory;

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
    /// The process's secret key (the signing key is made from it for the one PROOF).
    secret: zeroize::Zeroizing<[u8; 32]>,
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
    /// Per local id: the `seq` of our WITHDRAW waiting for its acknowledgement (never 0), and
    /// which halves arrived (bit 0 the tag, bit 1 the frame); ids with none are not held.
    withdrawals: IdMap<(u32, u8), CAP>,
    seqs_made: u32,
    /// Acknowledgements we owe the peer: frames, and tag messages (for the adapter).
    owed_frames: Queue<(u16, u32), CAP>,
    owed_tags: Queue<(u16, u32), CAP>,
    /// Local ids whose withdrawal the peer confirmed (for the adapter: drain, then unpin).
    confirmed: Queue<u16, CAP>,
    /// Generation of each local id as last told to the peer; not held: not told.
    told: IdMap<u32, CAP>,
    /// Registry epoch at which `told` was last found in sync.
    synced_epoch: Option<u64>,
    directory: Directory<CAP>,
    /// The heartbeat: our PING waiting for its PONG (its seq), whether it is still to be
    /// sent, how many we made, and the PONG we owe the peer.
    ping_out: Option<u32>,
    ping_queued: bool,
    pings_made: u32,
    pong_owed: Option<u32>,
    /// Where this side listens, told to the peer once it is proven (and whether it was), and
    /// where the peer says it listens.
    advertised: Option<wire::Address>,
    addr_sent: bool,
    peer_addr: Option<wire::Address>,
    /// The peer this side's HELLO says it redials (set before it goes out), and the one the
    /// peer's said it redials.
    redial_of: Option<u64>,
    peer_redial_of: Option<u64>,
}

impl<const CAP: usize> Session<CAP> {
    /// A session for an endpoint we opened (`Initiator`) or accepted (`Acceptor`), for the
    /// process whose identity is `identity` (one per process, shared by all its sessions).
    pub fn new(role: Role, identity: &identity::Identity, layout: &TagLayout) -> Self {
        Session {
            role,
            local_token: identity.token(),
            secret: zeroize::Zeroizing::new(identity.signer().to_bytes()),
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
            withdrawals: IdMap::new(),
            seqs_made: 0,
            owed_frames: Queue::new(),
            owed_tags: Queue::new(),
            confirmed: Queue::new(),
            told: IdMap::new(),
            synced_epoch: None,
            directory: Directory::new(),
            ping_out: None,
            ping_queued: false,
            pings_made: 0,
            pong_owed: None,
            advertised: None,
            addr_sent: false,
            peer_addr: None,
            redial_of: None,
            peer_redial_of: None,
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

    /// Queues an orderly CLOSE with `reason`; the next `poll_transmit` sends it.
    pub fn close(&mut self, reason: CloseReason) {
        if !matches!(self.phase, Phase::Closed) {
            self.phase = Phase::Closing(reason);
        }
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
            (Phase::Connecting, Frame::Hello(h)) => self.on_hello(h),
            (Phase::Proving, Frame::Proof { signature }) => self.on_proof(signature),
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
                self.on_announce(phase, id, name)
            }
            (phase @ (Phase::Proving | Phase::Established), Frame::Withdraw { id, seq }) => {
                self.on_withdraw(phase, id, seq)
            }
            (Phase::Proving | Phase::Established, Frame::WithdrawAck { id, seq }) => {
                self.on_withdraw_ack(id, seq)
            }
            (Phase::Connecting, Frame::WithdrawAck { .. }) => Err(SessionError::Unexpected {
                frame: "WITHDRAW-ACK",
                why: "it arrived before the peer's HELLO",
            }),
            // A peer pings once it has verified our PROOF, which may be before we have verified
            // its own: answer from then on. One PONG is owed at most: an honest peer waits for
            // it before pinging again, so a newer PING replaces an unanswered one.
            (Phase::Proving | Phase::Established, Frame::Ping { seq }) => self.on_ping(seq),
            (Phase::Established, Frame::Pair { value }) => self.on_pair(value),
            (Phase::Established, Frame::Address(a)) => self.on_address(a),
            (Phase::Connecting | Phase::Proving, Frame::Address(_)) => {
                Err(SessionError::Unexpected {
                    frame: "ADDRESS",
                    why: "it arrived before the peer proved itself",
                })
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
            (_, Frame::Pong { seq }) => self.on_pong(seq),
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
        // In this order: the handshake, the pair value, the listener's address, the heartbeat, acknowledgements owed,
        // then the registry's changes.
        if let Some(n) = self.transmit_handshake(registry, buf)? {
            return Ok(Some(n));
        }
        if let Some(n) = self.transmit_pair(buf)? {
            return Ok(Some(n));
        }
        if let Some(n) = self.transmit_address(buf)? {
            return Ok(Some(n));
        }
        if let Some(n) = self.transmit_heartbeat(buf)? {
            return Ok(Some(n));
        }
        if let Some(n) = self.transmit_ack(buf)? {
            return Ok(Some(n));
        }
        self.transmit_changes(registry, buf)
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
mod tests;
