//! The types every node shows its users: library and operation handles, counters, errors,
//! peer events.

use crate::error::{RegistryError, TagError};
use crate::name::Name;
use crate::wire::CloseReason;
use core::fmt;

/// A library's handle inside one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LibId(pub usize);

/// An operation started on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// Per-namespace counters, readable by the application.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Tag messages and AMs sent.
    pub sent: u64,
    /// Tag messages and AMs received.
    pub received: u64,
    /// Operations that failed.
    pub failed: u64,
}

/// Why a node operation failed; `E` is the transport's error (UCX's, or the mock fabric's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeError<E> {
    /// The transport reported an error (a peer failure says so).
    Transport(E),
    /// No open connection to that peer.
    NoConnection {
        /// The peer's process token.
        peer: u64,
    },
    /// The connection to the peer failed or was closed while the operation waited (D3).
    PeerDown {
        /// The peer's process token.
        peer: u64,
        /// What the transport said, if it was a failure rather than a close.
        cause: Option<E>,
    },
    /// The peer did not register the name before the deadline (P2).
    PeerLacksNamespace {
        /// The name.
        name: Name,
        /// The peer's process token.
        peer: u64,
        /// How long we waited.
        waited_ms: u64,
    },
    /// Building a tag failed.
    Tag(TagError),
    /// The registry refused.
    Registry(RegistryError),
    /// No such library handle (released, or never registered here).
    NoSuchLibrary,
    /// The call does not fit the node's state or mode (e.g. attaching an endpoint twice, or
    /// a listener on a worker a host owns); the text says what was wrong.
    Usage(&'static str),
}

impl<E: fmt::Display> fmt::Display for NodeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Transport(e) => write!(f, "transport: {e}"),
            NodeError::NoConnection { peer } => write!(f, "no open connection to peer {peer:#x}"),
            NodeError::PeerDown { peer, cause } => match cause {
                Some(e) => write!(f, "connection to peer {peer:#x} failed: {e}"),
                None => write!(f, "connection to peer {peer:#x} was closed"),
            },
            NodeError::PeerLacksNamespace {
                name,
                peer,
                waited_ms,
            } => write!(
                f,
                "peer {peer:#x} has not registered namespace \"{name}\" (waited {waited_ms} ms)"
            ),
            NodeError::Tag(e) => e.fmt(f),
            NodeError::Registry(e) => e.fmt(f),
            NodeError::NoSuchLibrary => f.write_str("no such library handle"),
            NodeError::Usage(what) => write!(f, "misuse: {what}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for NodeError<E> {}

impl<E> From<TagError> for NodeError<E> {
    fn from(e: TagError) -> Self {
        NodeError::Tag(e)
    }
}

impl<E> From<RegistryError> for NodeError<E> {
    fn from(e: RegistryError) -> Self {
        NodeError::Registry(e)
    }
}

/// A change in the set of peers, told to every library that listens; `E` is the transport's
/// error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent<E> {
    /// A connection to this peer is established (its directory is known).
    Up {
        /// The peer's token.
        peer: u64,
    },
    /// The connection to this peer is gone.
    Down {
        /// The peer's token.
        peer: u64,
        /// The transport's error if it failed; `None` for a close.
        cause: Option<E>,
        /// The reason in the CLOSE frame that ended it, whichever side sent it (e.g.
        /// [`CloseReason::Unresponsive`] from the heartbeat); `None` if no CLOSE was exchanged.
        reason: Option<CloseReason>,
    },
}
