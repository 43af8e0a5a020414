//! The control-plane wire format. Every byte string decodes to a [`Frame`] or a [`WireError`]
//! naming what was wrong (invariant P5): no panic, no overflow, no allocation, and a frame is
//! never larger than [`MAX_FRAME_LEN`].
//!
//! ```text
//! frame    = magic "TS" | version u8 (=5) | kind u8 | body_len u16 | body      (big endian)
//! HELLO    = fingerprint u64 | role u8 | namespace_bits u8 | public_key [32] | nonce [16]
//!            (role: bit 0 the role, bit 1 set by a redial: see Hello::redial)
//!            | redial_of u64 (only with bit 1: the token the redial expects)
//!            | count u16 | entry*count
//! entry    = id u16 | name_len u8 | name
//! ANNOUNCE = entry
//! WITHDRAW = id u16 | seq u32        (seq 0: no acknowledgement wanted; see R7 below)
//! W-ACK    = id u16 | seq u32        (the AM half of a withdrawal's acknowledgement)
//! CLOSE    = reason u8
//! PROOF    = signature [64]          (Ed25519 over identity::transcript; see crate::identity)
//! PING     = seq u32                 (a liveness probe: answer with PONG, same seq)
//! PONG     = seq u32
//! PAIR     = value u32               (the pair value the peer puts in its tags to the sender)
//! ADDRESS  = family u8 | address     (where the sender listens, for a reconnect; see Address)
//! ```
//!
//! Version 2 added the key, the nonce and PROOF (P6); the token is no longer sent, it is the
//! key's first eight bytes; and the withdrawal acknowledgement (R7): a peer answers a WITHDRAW
//! with a non-zero `seq` twice, with a W-ACK frame (ordered after its Active Messages) and with
//! a tag message [`ack_tag`] (ordered after its tag messages on the same endpoint). PING/PONG
//! (kinds 7 and 8) are the heartbeat: a peer that stops answering is cut off with reason
//! `Unresponsive` (see `Session::ping`). Version 3 added PAIR (kind 9): each side tells the
//! proven peer which value to put in the layout's pair field, so that the tags of a pair are
//! unguessable to every other process (see [`crate::session`]). Version 4 added ADDRESS (kind
//! 10), which tells the proven peer where the sender listens so that it can dial the sender
//! again after a fault ([`Address`]), and the HELLO's redial flag ([`Hello::redial`]); a
//! version 3 peer is refused at its HELLO (`UnsupportedVersion`), not after the handshake.
//! Version 5: a redial's HELLO names the token it expects, so a dial that reaches another
//! process (an address a peer lied about, or a restart) is not taken for a redial there.
//!
//! ```
//! use tagspace_core::wire::{decode, Frame, WireError};
//! let mut buf = [0u8; 64];
//! let n = Frame::Withdraw { id: 17, seq: 9 }.encode(&mut buf).unwrap();
//! assert_eq!(decode(&buf[..n]), Ok(Frame::Withdraw { id: 17, seq: 9 }));
//! assert_eq!(decode(b"XX\x02\x03\x00\x02\x00\x11"), Err(WireError::BadMagic([b'X', b'X'])));
//! ```

use crate::error::NameError;
use crate::identity::{token_of, NONCE_LEN, PUBLIC_KEY_LEN, SIGNATURE_LEN};
use crate::layout::{MAX_NAMESPACE_BITS, MIN_NAMESPACE_BITS};
use crate::name::{Name, MAX_NAME_LEN};
use crate::wellknown::{CONTROL_ID, UNMANAGED_ID};
use core::fmt;

/// The two magic bytes at the start of every frame.
pub const MAGIC: [u8; 2] = *b"TS";
/// The version this crate speaks.
pub const VERSION: u8 = 5;
/// Bytes before the body.
pub const HEADER_LEN: usize = 6;
/// Bytes of a HELLO before its entries (8 more with the redial flag: the token it expects).
pub const HELLO_FIXED_LEN: usize = 12 + PUBLIC_KEY_LEN + NONCE_LEN;
/// Largest entry on the wire.
pub const MAX_ENTRY_LEN: usize = 3 + MAX_NAME_LEN;
/// Largest frame: the body length is a `u16`.
pub const MAX_FRAME_LEN: usize = HEADER_LEN + u16::MAX as usize;

const KIND_HELLO: u8 = 1;
const KIND_ANNOUNCE: u8 = 2;
const KIND_WITHDRAW: u8 = 3;
const KIND_CLOSE: u8 = 4;
const KIND_PROOF: u8 = 5;
const KIND_WITHDRAW_ACK: u8 = 6;
const KIND_PING: u8 = 7;
const KIND_PONG: u8 = 8;
const KIND_PAIR: u8 = 9;
const KIND_ADDRESS: u8 = 10;

/// The role byte's redial flag ([`Hello::redial`]).
const ROLE_REDIAL: u8 = 2;

const FAMILY_LOCAL: u8 = 0;
const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// Whether `bytes` is a PING or PONG frame (by its header alone): the heartbeat, which an
/// adapter counts apart from the frames that change state.
pub fn is_heartbeat(bytes: &[u8]) -> bool {
    bytes.len() > 3 && bytes[..2] == MAGIC && matches!(bytes[3], KIND_PING | KIND_PONG)
}

/// What went wrong decoding or encoding a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the format needs here.
    Truncated {
        /// Bytes needed from the start of the frame.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The frame does not start with `TS`.
    BadMagic([u8; 2]),
    /// A version this crate does not speak.
    UnsupportedVersion(u8),
    /// A frame kind this version does not define.
    UnknownKind(u8),
    /// The header's body length disagrees with the bytes present.
    LengthMismatch {
        /// Body length in the header.
        declared: usize,
        /// Body bytes present.
        actual: usize,
    },
    /// A body has bytes after its last field.
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// A name is invalid.
    BadName {
        /// Offset of the name in the frame.
        at: usize,
        /// What is wrong with it.
        error: NameError,
    },
    /// An entry claims id 0 (unmanaged) or the control-plane id.
    ReservedId {
        /// The id.
        id: u16,
    },
    /// An entry's id does not fit the sender's namespace width.
    IdOutOfRange {
        /// The id.
        id: u16,
        /// The width.
        namespace_bits: u8,
    },
    /// A HELLO's namespace width is outside the supported range.
    BadNamespaceBits(u8),
    /// A HELLO's role byte is none of 0, 1 (the roles), 2, 3 (the roles with the redial flag).
    BadRole(u8),
    /// The output buffer is too small (encoding only).
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
    },
    /// A HELLO would exceed [`MAX_FRAME_LEN`] (encoding only).
    FrameTooLarge,
    /// An ADDRESS's family byte is none of 0 (adapter-local), 4 (IPv4), 6 (IPv6).
    BadAddressFamily(u8),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::Truncated { needed, got } => write!(
                f,
                "control frame truncated: needed {needed} bytes, got {got}"
            ),
            WireError::BadMagic(m) => write!(
                f,
                "not a tagspace control frame: magic {:#04x} {:#04x}",
                m[0], m[1]
            ),
            WireError::UnsupportedVersion(v) => write!(
                f,
                "control frame version {v} is not supported (this side speaks {VERSION})"
            ),
            WireError::UnknownKind(k) => write!(f, "unknown control frame kind {k}"),
            WireError::LengthMismatch { declared, actual } => write!(
                f,
                "control frame declares a {declared}-byte body but carries {actual}"
            ),
            WireError::TrailingBytes { extra } => {
                write!(f, "control frame has {extra} bytes after its last field")
            }
            WireError::BadName { at, error } => {
                write!(f, "bad namespace name at byte {at}: {error}")
            }
            WireError::ReservedId { id } => write!(
                f,
                "peer announced reserved namespace id {id} (0 and 1 are never registered)"
            ),
            WireError::IdOutOfRange { id, namespace_bits } => write!(
                f,
                "peer announced namespace id {id}, which does not fit {namespace_bits} bits"
            ),
            WireError::BadNamespaceBits(b) => write!(
                f,
                "peer's namespace width {b} is outside {MIN_NAMESPACE_BITS}..={MAX_NAMESPACE_BITS}"
            ),
            WireError::BadRole(r) => {
                write!(
                    f,
                    "peer's role byte {r} is none of 0..=3 (role, redial flag)"
                )
            }
            WireError::BufferTooSmall { needed } => {
                write!(f, "output buffer too small: {needed} bytes needed")
            }
            WireError::FrameTooLarge => f.write_str("frame would exceed the 64 KiB body limit"),
            WireError::BadAddressFamily(b) => write!(
                f,
                "peer's listener address has family byte {b}, none of 0 (local), 4 (IPv4), 6 (IPv6)"
            ),
        }
    }
}

impl core::error::Error for WireError {}

/// Which side opened the endpoint a HELLO travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The side that accepted the connection.
    Acceptor,
    /// The side that connected.
    Initiator,
}

/// Where a node listens (an ADDRESS frame): what a peer dials to reach it again after a
/// fault.
///
/// ```text
/// ADDRESS = 0 | id u64                                  (adapter-local, e.g. a simulated worker)
///         | 4 | ip [4]  | port u16                      (IPv4)
///         | 6 | ip [16] | port u16 | scope_id u32        (IPv6)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// A socket address (UCX's sockaddr connection establishment).
    Ip(core::net::SocketAddr),
    /// An address that means something to one adapter only (the mock fabric's worker ids).
    Local(u64),
}

/// Why a peer closes a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Orderly shutdown.
    Normal,
    /// The two sides' tag layouts differ.
    LayoutMismatch,
    /// The sender received something it could not accept.
    ProtocolError,
    /// Two connections formed at once; this one lost the tie-break.
    Superseded,
    /// The sender could not verify the receiver's identity (its key or PROOF, P6).
    Unproven,
    /// The receiver sent more than the sender accepts per second from one connection.
    Flood,
    /// The receiver did not answer the sender's PING in time: it stopped calling `progress`,
    /// or nothing the sender is sent arrives any more (see `Session::ping`).
    Unresponsive,
    /// A reason this version does not know; kept for forward compatibility.
    Other(u8),
}

impl CloseReason {
    /// The reason's byte on the wire (0 `Normal` … 6 `Unresponsive`; others kept as they came).
    pub const fn code(self) -> u8 {
        self.to_byte()
    }

    const fn to_byte(self) -> u8 {
        match self {
            CloseReason::Normal => 0,
            CloseReason::LayoutMismatch => 1,
            CloseReason::ProtocolError => 2,
            CloseReason::Superseded => 3,
            CloseReason::Unproven => 4,
            CloseReason::Flood => 5,
            CloseReason::Unresponsive => 6,
            CloseReason::Other(b) => b,
        }
    }

    const fn from_byte(b: u8) -> CloseReason {
        match b {
            0 => CloseReason::Normal,
            1 => CloseReason::LayoutMismatch,
            2 => CloseReason::ProtocolError,
            3 => CloseReason::Superseded,
            4 => CloseReason::Unproven,
            5 => CloseReason::Flood,
            6 => CloseReason::Unresponsive,
            b => CloseReason::Other(b),
        }
    }
}

/// A decoded HELLO. Its entries were all validated by [`decode`]; iterate with
/// [`Hello::entries`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The sender's [`TagLayout::fingerprint`](crate::TagLayout::fingerprint).
    pub fingerprint: u64,
    /// The sender's role on this endpoint.
    pub role: Role,
    /// `Some(token)`: the sender opened this endpoint to dial back the peer `token`, lost to a
    /// fault, and holds no other connection to it (bit 1 of the role byte, then the token). A
    /// receiver whose token it is keeps this connection over any older one to the same
    /// (proven) sender, instead of P4's tie-break; one whose token it is not (the dial reached
    /// another process) ranks it below every other connection to that sender.
    pub redial: Option<u64>,
    /// The sender's namespace width.
    pub namespace_bits: u8,
    /// The sender's public key: its token is the first eight bytes. A claim until its PROOF.
    pub public_key: [u8; PUBLIC_KEY_LEN],
    /// The sender's fresh nonce for this endpoint (the PROOFs sign it).
    pub nonce: [u8; NONCE_LEN],
    count: u16,
    entries: &'a [u8],
}

impl<'a> Hello<'a> {
    /// The token the sender claims (proven only by its PROOF).
    pub fn token(&self) -> u64 {
        token_of(&self.public_key)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the sender has no namespaces.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The sender's `(id, name)` table.
    pub fn entries(&self) -> impl Iterator<Item = (u16, Name)> + 'a {
        let mut rest = self.entries;
        core::iter::from_fn(move || {
            // Already validated by `decode`; a failure here would mean a bug, so end quietly.
            let (id, name, used) = read_entry(rest, 0, u8::MAX).ok()?;
            rest = &rest[used..];
            Some((id, name))
        })
    }
}

impl fmt::Debug for Hello<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Entries<'b>(&'b Hello<'b>);
        impl fmt::Debug for Entries<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.entries()).finish()
            }
        }
        f.debug_struct("Hello")
            .field("fingerprint", &format_args!("{:#018x}", self.fingerprint))
            .field("token", &format_args!("{:#018x}", self.token()))
            .field("role", &self.role)
            .field("redial", &self.redial)
            .field("namespace_bits", &self.namespace_bits)
            .field("entries", &Entries(self))
            .finish()
    }
}

/// One control-plane message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// First message on an endpoint, each way: who I am and my whole name → id table.
    Hello(Hello<'a>),
    /// I registered `name` at `id`.
    Announce {
        /// Sender's id.
        id: u16,
        /// The name.
        name: Name,
    },
    /// I released `id`. A non-zero `seq` asks for an acknowledgement (R7): until it comes,
    /// the sender keeps the id out of use.
    Withdraw {
        /// Sender's id.
        id: u16,
        /// Names this withdrawal in the acknowledgement; 0: none wanted.
        seq: u32,
    },
    /// Nothing more of mine is on its way to your `id` by Active Message (the other half of the
    /// acknowledgement is the tag message [`ack_tag`]).
    WithdrawAck {
        /// The id the WITHDRAW named (the receiver's of this frame).
        id: u16,
        /// The WITHDRAW's `seq`.
        seq: u32,
    },
    /// I am closing this session.
    Close {
        /// Why.
        reason: CloseReason,
    },
    /// My signature over the handshake transcript: I hold the key my HELLO claimed.
    Proof {
        /// Ed25519 signature.
        signature: [u8; SIGNATURE_LEN],
    },
    /// Are you there? Answer with a PONG carrying the same `seq`.
    Ping {
        /// Names this probe.
        seq: u32,
    },
    /// The answer to the PING with this `seq`.
    Pong {
        /// The PING's `seq`.
        seq: u32,
    },
    /// Put `value` in the pair field of every tag you send me. Sent once per endpoint, after
    /// the sender has verified the receiver's PROOF, so only a proven peer learns it.
    Pair {
        /// The value (non-zero, within the layout's pair width: the session checks).
        value: u32,
    },
    /// I listen at this address (dial it to reach me again after a fault). Sent after the
    /// sender has verified the receiver's PROOF; the receiver takes it only from a proven peer.
    Address(Address),
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated {
            needed: usize::MAX,
            got: self.buf.len(),
        })?;
        let s = self.buf.get(self.pos..end).ok_or(WireError::Truncated {
            needed: end,
            got: self.buf.len(),
        })?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
}

/// Reads `id | len | name` from the start of `buf` (at frame offset `base`), validating the id
/// against `bits` (`u8::MAX`: only the reserved ids are checked). Returns bytes used.
fn read_entry(buf: &[u8], base: usize, bits: u8) -> Result<(u16, Name, usize), WireError> {
    let mut r = Reader { buf, pos: 0 };
    let truncated = |e: WireError| match e {
        WireError::Truncated { needed, .. } => WireError::Truncated {
            needed: base.saturating_add(needed),
            got: base + buf.len(),
        },
        e => e,
    };
    let id = r.u16().map_err(truncated)?;
    if id == UNMANAGED_ID || id == CONTROL_ID {
        return Err(WireError::ReservedId { id });
    }
    if bits != u8::MAX && (id as u32) >> bits != 0 {
        return Err(WireError::IdOutOfRange {
            id,
            namespace_bits: bits,
        });
    }
    let len = r.u8().map_err(truncated)? as usize;
    let at = base + r.pos;
    let name = r.take(len).map_err(truncated)?;
    let name = Name::from_bytes(name).map_err(|error| WireError::BadName { at, error })?;
    Ok((id, name, r.pos))
}

/// Decodes exactly one frame occupying all of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Frame<'_>, WireError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let magic = r.take(2)?;
    if magic != MAGIC {
        return Err(WireError::BadMagic([magic[0], magic[1]]));
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(WireError::UnsupportedVersion(version));
    }
    let kind = r.u8()?;
    let declared = r.u16()? as usize;
    let actual = bytes.len() - HEADER_LEN;
    if declared != actual {
        return Err(WireError::LengthMismatch { declared, actual });
    }
    let frame = match kind {
        KIND_HELLO => {
            let fingerprint = r.u64()?;
            let byte = r.u8()?;
            let role = match byte & !ROLE_REDIAL {
                0 => Role::Acceptor,
                1 => Role::Initiator,
                _ => return Err(WireError::BadRole(byte)),
            };
            let namespace_bits = r.u8()?;
            if !(MIN_NAMESPACE_BITS..=MAX_NAMESPACE_BITS).contains(&(namespace_bits as u32)) {
                return Err(WireError::BadNamespaceBits(namespace_bits));
            }
            let public_key = r.array()?;
            let nonce = r.array()?;
            let redial = match byte & ROLE_REDIAL {
                0 => None,
                _ => Some(r.u64()?),
            };
            let count = r.u16()?;
            let start = r.pos;
            for _ in 0..count {
                let (_, _, used) = read_entry(&bytes[r.pos..], r.pos, namespace_bits)?;
                r.pos += used;
            }
            Frame::Hello(Hello {
                fingerprint,
                role,
                redial,
                namespace_bits,
                public_key,
                nonce,
                count,
                entries: &bytes[start..r.pos],
            })
        }
        KIND_ANNOUNCE => {
            let (id, name, used) = read_entry(&bytes[r.pos..], r.pos, u8::MAX)?;
            r.pos += used;
            Frame::Announce { id, name }
        }
        KIND_WITHDRAW | KIND_WITHDRAW_ACK => {
            let id = r.u16()?;
            if id == UNMANAGED_ID || id == CONTROL_ID {
                return Err(WireError::ReservedId { id });
            }
            let seq = u32::from_be_bytes(r.array()?);
            if kind == KIND_WITHDRAW {
                Frame::Withdraw { id, seq }
            } else {
                Frame::WithdrawAck { id, seq }
            }
        }
        KIND_CLOSE => Frame::Close {
            reason: CloseReason::from_byte(r.u8()?),
        },
        KIND_PROOF => Frame::Proof {
            signature: r.array()?,
        },
        KIND_PING => Frame::Ping {
            seq: u32::from_be_bytes(r.array()?),
        },
        KIND_PONG => Frame::Pong {
            seq: u32::from_be_bytes(r.array()?),
        },
        KIND_PAIR => Frame::Pair {
            value: u32::from_be_bytes(r.array()?),
        },
        KIND_ADDRESS => Frame::Address(match r.u8()? {
            FAMILY_LOCAL => Address::Local(r.u64()?),
            FAMILY_V4 => {
                let ip: [u8; 4] = r.array()?;
                Address::Ip(core::net::SocketAddr::from((ip, r.u16()?)))
            }
            FAMILY_V6 => {
                let ip: [u8; 16] = r.array()?;
                let port = r.u16()?;
                let scope = u32::from_be_bytes(r.array()?);
                let ip = core::net::Ipv6Addr::from(ip);
                Address::Ip(core::net::SocketAddrV6::new(ip, port, 0, scope).into())
            }
            b => return Err(WireError::BadAddressFamily(b)),
        }),
        k => return Err(WireError::UnknownKind(k)),
    };
    if r.pos != bytes.len() {
        return Err(WireError::TrailingBytes {
            extra: bytes.len() - r.pos,
        });
    }
    Ok(frame)
}

/// Writes frames into a caller's buffer.
struct Writer<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl<'b> Writer<'b> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        let end = self.pos + bytes.len();
        if end > MAX_FRAME_LEN {
            return Err(WireError::FrameTooLarge);
        }
        let dst = self
            .buf
            .get_mut(self.pos..end)
            .ok_or(WireError::BufferTooSmall { needed: end })?;
        dst.copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }
    fn header(buf: &'b mut [u8], kind: u8) -> Result<Writer<'b>, WireError> {
        let mut w = Writer { buf, pos: 0 };
        w.put(&MAGIC)?;
        w.put(&[VERSION, kind, 0, 0])?;
        Ok(w)
    }
    fn entry(&mut self, id: u16, name: &Name) -> Result<(), WireError> {
        self.put(&id.to_be_bytes())?;
        self.put(&[name.len() as u8])?;
        self.put(name.as_bytes())
    }
    fn finish(self) -> usize {
        let body = (self.pos - HEADER_LEN) as u16;
        self.buf[4..6].copy_from_slice(&body.to_be_bytes());
        self.pos
    }
}

/// Builds a HELLO entry by entry, straight into the output buffer.
pub struct HelloEncoder<'b> {
    w: Writer<'b>,
    count: u16,
    /// Where the entry count goes (8 bytes later with the redial's token).
    count_at: usize,
}

impl<'b> HelloEncoder<'b> {
    /// Starts a HELLO in `buf`.
    pub fn new(
        buf: &'b mut [u8],
        fingerprint: u64,
        role: Role,
        namespace_bits: u8,
        public_key: &[u8; PUBLIC_KEY_LEN],
        nonce: &[u8; NONCE_LEN],
    ) -> Result<Self, WireError> {
        let mut w = Writer::header(buf, KIND_HELLO)?;
        w.put(&fingerprint.to_be_bytes())?;
        w.put(&[role as u8, namespace_bits])?;
        w.put(public_key)?;
        w.put(nonce)?;
        let count_at = w.pos;
        w.put(&[0, 0])?;
        Ok(HelloEncoder {
            w,
            count: 0,
            count_at,
        })
    }

    /// Marks the HELLO as the redial of the peer `expected` ([`Hello::redial`]); the entries
    /// pushed so far move up. A second call only changes the token.
    pub fn redial(&mut self, expected: u64) -> Result<(), WireError> {
        let role = HEADER_LEN + 8;
        if self.w.buf[role] & ROLE_REDIAL != 0 {
            let at = self.count_at - 8;
            self.w.buf[at..self.count_at].copy_from_slice(&expected.to_be_bytes());
            return Ok(());
        }
        let end = self.w.pos + 8;
        if end > self.w.buf.len() {
            return Err(WireError::BufferTooSmall { needed: end });
        }
        self.w
            .buf
            .copy_within(self.count_at..self.w.pos, self.count_at + 8);
        self.w.buf[self.count_at..self.count_at + 8].copy_from_slice(&expected.to_be_bytes());
        self.w.buf[role] |= ROLE_REDIAL;
        self.count_at += 8;
        self.w.pos = end;
        Ok(())
    }

    /// Appends one `(id, name)` entry.
    pub fn push(&mut self, id: u16, name: &Name) -> Result<(), WireError> {
        if self.count == u16::MAX {
            return Err(WireError::FrameTooLarge);
        }
        self.w.entry(id, name)?;
        self.count += 1;
        Ok(())
    }

    /// Patches the count and length; returns the frame's size.
    pub fn finish(self) -> usize {
        let count_at = self.count_at;
        self.w.buf[count_at..count_at + 2].copy_from_slice(&self.count.to_be_bytes());
        self.w.finish()
    }
}

impl Frame<'_> {
    /// Encodes into `buf`; returns the frame's size.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        match *self {
            Frame::Hello(h) => {
                let mut e = HelloEncoder::new(
                    buf,
                    h.fingerprint,
                    h.role,
                    h.namespace_bits,
                    &h.public_key,
                    &h.nonce,
                )?;
                if let Some(t) = h.redial {
                    e.redial(t)?;
                }
                for (id, name) in h.entries() {
                    e.push(id, &name)?;
                }
                Ok(e.finish())
            }
            Frame::Announce { id, ref name } => {
                let mut w = Writer::header(buf, KIND_ANNOUNCE)?;
                w.entry(id, name)?;
                Ok(w.finish())
            }
            Frame::Withdraw { id, seq } | Frame::WithdrawAck { id, seq } => {
                let kind = match self {
                    Frame::Withdraw { .. } => KIND_WITHDRAW,
                    _ => KIND_WITHDRAW_ACK,
                };
                let mut w = Writer::header(buf, kind)?;
                w.put(&id.to_be_bytes())?;
                w.put(&seq.to_be_bytes())?;
                Ok(w.finish())
            }
            Frame::Close { reason } => {
                let mut w = Writer::header(buf, KIND_CLOSE)?;
                w.put(&[reason.to_byte()])?;
                Ok(w.finish())
            }
            Frame::Proof { ref signature } => {
                let mut w = Writer::header(buf, KIND_PROOF)?;
                w.put(signature)?;
                Ok(w.finish())
            }
            Frame::Ping { seq } | Frame::Pong { seq } | Frame::Pair { value: seq } => {
                let kind = match self {
                    Frame::Ping { .. } => KIND_PING,
                    Frame::Pong { .. } => KIND_PONG,
                    _ => KIND_PAIR,
                };
                let mut w = Writer::header(buf, kind)?;
                w.put(&seq.to_be_bytes())?;
                Ok(w.finish())
            }
            Frame::Address(a) => {
                let mut w = Writer::header(buf, KIND_ADDRESS)?;
                match a {
                    Address::Local(id) => {
                        w.put(&[FAMILY_LOCAL])?;
                        w.put(&id.to_be_bytes())?;
                    }
                    Address::Ip(core::net::SocketAddr::V4(v4)) => {
                        w.put(&[FAMILY_V4])?;
                        w.put(&v4.ip().octets())?;
                        w.put(&v4.port().to_be_bytes())?;
                    }
                    Address::Ip(core::net::SocketAddr::V6(v6)) => {
                        w.put(&[FAMILY_V6])?;
                        w.put(&v6.ip().octets())?;
                        w.put(&v6.port().to_be_bytes())?;
                        w.put(&v6.scope_id().to_be_bytes())?;
                    }
                }
                Ok(w.finish())
            }
        }
    }
}

/// The tag message half of a withdrawal acknowledgement (R7): namespace field = the control
/// id; the other bits carry `id` (namespace width) and `seq` (32 bits), low bits first. A tag
/// message, so that UCX orders it after the acknowledging peer's earlier tag messages on the
/// same endpoint: once it has arrived, everything that peer sent to `id` has too.
pub fn ack_tag(layout: &crate::TagLayout, id: u16, seq: u32) -> u64 {
    let ns = layout.namespace_field();
    let value = ((seq as u64) << ns.width()) | id as u64;
    // fits: a layout keeps at least `width + 32` bits outside its namespace field and guard
    // bits (TagLayout's build checks it); the pair field is among them: the unguessable `seq`
    // protects these tags
    layout.base(CONTROL_ID) | scatter(value, !layout.fixed_mask())
}

/// `(id, seq)` of a tag made by [`ack_tag`]; `None` for any other tag.
pub fn parse_ack_tag(layout: &crate::TagLayout, tag: u64) -> Option<(u16, u32)> {
    if tag & layout.fixed_mask() != layout.base(CONTROL_ID) {
        return None;
    }
    let width = layout.namespace_field().width();
    let value = gather(tag, !layout.fixed_mask());
    let id = (value & ((1u64 << width) - 1)) as u16;
    let seq = value >> width;
    (seq <= u32::MAX as u64 && seq != 0 && id > CONTROL_ID).then_some((id, seq as u32))
}

/// Deposits the low bits of `value` into the set bits of `mask`, lowest first.
fn scatter(mut value: u64, mut mask: u64) -> u64 {
    let mut out = 0;
    while mask != 0 {
        let bit = mask & mask.wrapping_neg();
        if value & 1 != 0 {
            out |= bit;
        }
        value >>= 1;
        mask &= mask - 1;
    }
    out
}

/// The inverse of [`scatter`].
fn gather(word: u64, mut mask: u64) -> u64 {
    let (mut out, mut at) = (0, 0);
    while mask != 0 {
        let bit = mask & mask.wrapping_neg();
        if word & bit != 0 {
            out |= 1 << at;
        }
        at += 1;
        mask &= mask - 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_tags_round_trip_and_stay_in_the_control_namespace() {
        let layouts = [
            crate::TagLayout::DEFAULT,
            crate::TagLayout::builder(0, 16).build().unwrap(),
            crate::TagLayout::builder(20, 12).build().unwrap(),
            crate::TagLayout::builder(24, 8)
                .guard(0xffff << 48, 0x8001 << 48)
                .build()
                .unwrap(),
        ];
        for layout in layouts {
            let max_id = (1u32 << layout.namespace_field().width()) - 1;
            for (id, seq) in [(2u16, 1u32), (max_id as u16, u32::MAX), (17, 0x1234_5678)] {
                let tag = ack_tag(&layout, id, seq);
                assert_eq!(layout.namespace_of(tag), CONTROL_ID);
                assert_eq!(parse_ack_tag(&layout, tag), Some((id, seq)), "{layout:?}");
            }
            assert_eq!(parse_ack_tag(&layout, 0), None);
        }
    }

    fn hello_bytes(entries: &[(u16, &str)]) -> ([u8; 512], usize) {
        let mut buf = [0u8; 512];
        let mut e =
            HelloEncoder::new(&mut buf, 0xfeed, Role::Initiator, 8, &[7; 32], &[9; 16]).unwrap();
        for &(id, n) in entries {
            e.push(id, &Name::new(n).unwrap()).unwrap();
        }
        let n = e.finish();
        (buf, n)
    }

    #[test]
    fn hello_round_trip() {
        let (buf, n) = hello_bytes(&[(2, "dask"), (16, "engine")]);
        let Frame::Hello(h) = decode(&buf[..n]).unwrap() else {
            panic!("not a hello")
        };
        assert_eq!(
            (h.fingerprint, h.token(), h.role, h.nonce),
            (0xfeed, 0x0707_0707_0707_0707, Role::Initiator, [9; 16])
        );
        let got: std::vec::Vec<_> = h.entries().map(|(i, n)| (i, n.as_str().into())).collect();
        assert_eq!(
            got,
            std::vec![
                (2, std::string::String::from("dask")),
                (16, "engine".into())
            ]
        );
        let mut again = [0u8; 512];
        let m = Frame::Hello(h).encode(&mut again).unwrap();
        assert_eq!(&buf[..n], &again[..m]);
        assert_eq!(h.redial, None);
        // The redial flag is bit 1 of the role byte, followed by the token it expects; set
        // after entries were pushed, it moves them up. It survives a round trip.
        let mut flagged = [0u8; 512];
        let mut e = HelloEncoder::new(&mut flagged, 0xfeed, Role::Initiator, 8, &[7; 32], &[9; 16])
            .unwrap();
        e.push(2, &Name::new("dask").unwrap()).unwrap();
        e.redial(0x1234).unwrap();
        e.redial(0xabcd).unwrap(); // only the token changes
        e.push(16, &Name::new("engine").unwrap()).unwrap();
        let fl = e.finish();
        assert_eq!(fl, n + 8);
        assert_eq!(flagged[HEADER_LEN + 8], 1 | 2);
        let Frame::Hello(r) = decode(&flagged[..fl]).unwrap() else {
            panic!("not a hello")
        };
        assert_eq!((r.redial, r.role), (Some(0xabcd), Role::Initiator));
        assert_eq!(r.entries().count(), 2);
        let m = Frame::Hello(r).encode(&mut again).unwrap();
        assert_eq!(&flagged[..fl], &again[..m]);
        // The flag without its token is cut short.
        let mut cut = buf;
        cut[HEADER_LEN + 8] |= 2;
        assert!(decode(&cut[..n]).is_err());
        // No room for the token: named, nothing written past the buffer.
        let mut small = [0u8; HEADER_LEN + HELLO_FIXED_LEN + 4];
        let mut e =
            HelloEncoder::new(&mut small, 0xfeed, Role::Initiator, 8, &[7; 32], &[9; 16]).unwrap();
        assert!(matches!(e.redial(1), Err(WireError::BufferTooSmall { .. })));
    }

    #[test]
    fn every_error_is_named() {
        let (buf, n) = hello_bytes(&[(2, "dask")]);
        let ok = &buf[..n];
        assert!(matches!(decode(&ok[..3]), Err(WireError::Truncated { .. })));
        assert_eq!(decode(&[]), Err(WireError::Truncated { needed: 2, got: 0 }));
        let mut v = ok.to_vec();
        v[2] = 9;
        assert_eq!(decode(&v), Err(WireError::UnsupportedVersion(9)));
        let mut v = ok.to_vec();
        v[3] = 99;
        assert_eq!(decode(&v), Err(WireError::UnknownKind(99)));
        let mut v = ok.to_vec();
        v.push(0);
        assert_eq!(
            decode(&v),
            Err(WireError::LengthMismatch {
                declared: n - HEADER_LEN,
                actual: n - HEADER_LEN + 1
            })
        );
        let mut v = ok.to_vec();
        v[HEADER_LEN + 8] = 7;
        assert_eq!(decode(&v), Err(WireError::BadRole(7)));
        let mut v = ok.to_vec();
        v[HEADER_LEN + 9] = 40;
        assert_eq!(decode(&v), Err(WireError::BadNamespaceBits(40)));
        // count says 2 entries, one present
        let mut v = ok.to_vec();
        v[HEADER_LEN + HELLO_FIXED_LEN - 1] = 2;
        assert!(matches!(decode(&v), Err(WireError::Truncated { .. })));
        // count says 0 entries, one present
        let mut v = ok.to_vec();
        v[HEADER_LEN + HELLO_FIXED_LEN - 1] = 0;
        assert_eq!(decode(&v), Err(WireError::TrailingBytes { extra: 7 }));
        let (buf, n) = hello_bytes(&[(300, "x")]);
        assert_eq!(
            decode(&buf[..n]),
            Err(WireError::IdOutOfRange {
                id: 300,
                namespace_bits: 8
            })
        );
        // a name with a control byte
        let (mut buf, n) = hello_bytes(&[(2, "dask")]);
        buf[n - 1] = b'\n';
        assert_eq!(
            decode(&buf[..n]),
            Err(WireError::BadName {
                at: n - 4,
                error: NameError::BadByte { byte: b'\n', at: 3 }
            })
        );
        assert_eq!(
            decode(b"TS\x05\x03\x00\x06\x00\x01\x00\x00\x00\x00"),
            Err(WireError::ReservedId { id: 1 })
        );
        assert_eq!(
            decode(b"TS\x05\x02\x00\x03\x00\x00\x00"),
            Err(WireError::ReservedId { id: 0 })
        );
        assert_eq!(
            decode(b"TS\x05\x04\x00\x01\x09"),
            Ok(Frame::Close {
                reason: CloseReason::Other(9)
            })
        );
    }

    #[test]
    fn address_frames_round_trip_and_refuse_bad_bytes() {
        let mut buf = [0u8; 64];
        for a in [
            Address::Local(0x1234_5678_9abc_def0),
            Address::Ip("10.1.2.3:13337".parse().unwrap()),
            Address::Ip("[fe80::1%7]:80".parse().unwrap()),
        ] {
            let n = Frame::Address(a).encode(&mut buf).unwrap();
            assert_eq!(decode(&buf[..n]), Ok(Frame::Address(a)));
            // every truncation is refused, none panics
            for cut in 0..n {
                assert!(decode(&buf[..cut]).is_err());
            }
        }
        let n = Frame::Address(Address::Local(1)).encode(&mut buf).unwrap();
        buf[HEADER_LEN] = 5;
        assert_eq!(decode(&buf[..n]), Err(WireError::BadAddressFamily(5)));
    }

    #[test]
    fn heartbeat_frames_round_trip_and_are_recognised_by_header() {
        let mut buf = [0u8; 16];
        let n = Frame::Pair { value: 0xabc }.encode(&mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Frame::Pair { value: 0xabc }));
        assert!(!is_heartbeat(&buf[..n]));
        for f in [Frame::Ping { seq: 1 }, Frame::Pong { seq: u32::MAX }] {
            let n = f.encode(&mut buf).unwrap();
            assert_eq!(n, HEADER_LEN + 4);
            assert_eq!(decode(&buf[..n]), Ok(f));
            assert!(is_heartbeat(&buf[..n]));
            assert!(matches!(
                decode(&buf[..n - 1]),
                Err(WireError::LengthMismatch { .. })
            ));
        }
        let n = Frame::Withdraw { id: 2, seq: 1 }.encode(&mut buf).unwrap();
        assert!(!is_heartbeat(&buf[..n]));
        assert!(!is_heartbeat(b"XX\x02\x07"));
        assert!(!is_heartbeat(b"TS\x05"));
        assert_eq!(
            decode(b"TS\x05\x04\x00\x01\x06"),
            Ok(Frame::Close {
                reason: CloseReason::Unresponsive
            })
        );
    }

    #[test]
    fn proof_round_trip_and_length() {
        let mut buf = [0u8; 128];
        let f = Frame::Proof {
            signature: [0xab; 64],
        };
        let n = f.encode(&mut buf).unwrap();
        assert_eq!(n, HEADER_LEN + 64);
        assert_eq!(decode(&buf[..n]), Ok(f));
        assert!(matches!(
            decode(&buf[..n - 1]),
            Err(WireError::LengthMismatch { .. })
        ));
        let mut short = buf;
        short[5] = 63;
        assert!(matches!(
            decode(&short[..n - 1]),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn encode_reports_small_buffers() {
        let mut small = [0u8; 7];
        assert_eq!(
            Frame::Withdraw { id: 20, seq: 1 }.encode(&mut small),
            Err(WireError::BufferTooSmall { needed: 8 })
        );
    }
    extern crate std;
}
