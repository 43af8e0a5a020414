//! What a node counts.

use tagspace_core::engine::{Expiry, Why};
use tagspace_core::session::SessionError;

/// Node-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Control frames sent (HELLO, ANNOUNCE, WITHDRAW, CLOSE).
    pub control_sent: u64,
    /// Control frames received.
    pub control_received: u64,
    /// Tag messages and AMs for ids nobody here registered, drained (D2), and tag messages
    /// in registered namespaces whose pair value no proven peer was given (`forged`).
    pub stray: u64,
    /// Of `stray`: tag messages in a registered namespace carrying a pair value this node gave
    /// no proven peer — made up by a process that never proved its identity here — taken by
    /// the drain or by a receive from any peer (which then waits on for a real one).
    pub forged: u64,
    /// AMs UCX delivered by rendezvous (tagspace sends eagerly), dropped.
    pub am_dropped: u64,
    /// AMs on ids nobody here listens on (also counted in `stray`), dropped.
    pub am_unowned: u64,
    /// Partial-mask probes of UCX's unexpected queue made for strays that found nothing (each
    /// scanned the whole queue; at most
    /// [`STRAY_PROBES_PER_CALL`](crate::node::STRAY_PROBES_PER_CALL) per `progress` call).
    pub stray_probes: u64,
    /// Looks at the head of UCX's unexpected queue made for strays (at most
    /// [`STRAY_TAKES_PER_CALL`](crate::node::STRAY_TAKES_PER_CALL) per `progress` call).
    pub stray_head_probes: u64,
    /// Endpoints that failed (UCX peer error handling).
    pub endpoint_failures: u64,
    /// Connections cut off because the peer sent more control frames than may wait for wire-up
    /// ([`EARLY_FRAMES_MAX`](crate::node::EARLY_FRAMES_MAX),
    /// [`EARLY_BYTES_MAX`](crate::node::EARLY_BYTES_MAX)).
    pub early_overflows: u64,
    /// Operations failed by tagspace because their peer failed, while UCX still held their
    /// requests (D3): their buffers are kept until UCX lets the requests go.
    pub failed_by_peer_down: u64,
    /// Endpoints being closed in order that were force-closed instead, because a send given up
    /// on them (one of `failed_by_peer_down`, or forgotten) was still unfinished. (A host's
    /// endpoint is the host's to close: see `Node::sends_given_up_on`.)
    pub stuck_closes: u64,
    /// Connections closed for a control-plane error from the peer (the last
    /// [`PROTOCOL_ERRORS_KEPT`](crate::node::PROTOCOL_ERRORS_KEPT) are in
    /// [`Node::protocol_errors`](crate::node::Node::protocol_errors)).
    pub protocol_errors: u64,
    /// Of those, connections whose peer could not prove the identity its HELLO claimed (P6):
    /// never indexed as that peer, never able to supersede its connection.
    pub unproven: u64,
    /// Connections closed because their handshake did not complete in
    /// [`HANDSHAKE_TIMEOUT_MS`](crate::node::HANDSHAKE_TIMEOUT_MS) (a silent peer, or one that
    /// never proved its claim).
    pub handshake_timeouts: u64,
    /// Connections closed because the peer sent more than [`PeerLimits`](crate::node::PeerLimits)
    /// allow, or left more messages waiting than a held namespace's
    /// [`BacklogLimit`](crate::node::BacklogLimit) (`backlog_floods`).
    pub flood_closes: u64,
    /// Messages of held namespaces taken out of UCX's queue into the node's backlog
    /// ([`Node::hold_backlog`](crate::node::Node::hold_backlog)).
    pub held: u64,
    /// Peers cut off for leaving more messages waiting in a held namespace than its
    /// [`BacklogLimit`](crate::node::BacklogLimit) allows (also in `flood_closes`).
    pub backlog_floods: u64,
    /// Messages of those peers dropped: held when the limit was passed, or sent to a held
    /// namespace after it.
    pub backlog_dropped: u64,
    /// Withdrawal acknowledgements sent as tag messages (R7).
    pub acks_sent: u64,
    /// Withdrawal acknowledgements received as tag messages and matched to a withdrawal.
    pub acks_received: u64,
    /// Ids this node gave back to the registry's quarantine (R7): confirmed withdrawals and
    /// the pins of ended connections.
    pub ids_unpinned: u64,
    /// Connections closed because the peer left withdrawals unacknowledged for
    /// [`ACK_TIMEOUT_MS`](crate::node::ACK_TIMEOUT_MS).
    pub ack_timeouts: u64,
    /// Heartbeat frames (PING, PONG) sent and received; not in `control_sent`/`_received`.
    pub heartbeats_sent: u64,
    /// See `heartbeats_sent`.
    pub heartbeats_received: u64,
    /// Connections closed because a PING went unanswered for
    /// [`Liveness::timeout_ms`](crate::node::Liveness::timeout_ms).
    pub liveness_timeouts: u64,
    /// Host mode: control frames that came on an endpoint the host had not attached, and were
    /// dropped because more such frames waited than
    /// [`UNATTACHED_FRAMES_MAX`](crate::node::UNATTACHED_FRAMES_MAX) /
    /// [`EARLY_BYTES_MAX`](crate::node::EARLY_BYTES_MAX) allow.
    pub unattached_dropped: u64,
    /// Connections closed as soon as their peer proved itself, because this node had cut that
    /// peer off for a protocol error less than [`REFUSE_MS`](crate::node::REFUSE_MS) before.
    pub refused: u64,
    /// Endpoints opened to dial a peer lost to a fault again ([`Redial`](crate::node::Redial)).
    pub redials: u64,
    /// Peers lost to a fault that came back (on a dial from either side).
    pub reconnects: u64,
    /// Peers lost to a fault given up on: not back within
    /// [`Backoff::give_up_ms`](crate::node::Backoff::give_up_ms), or a new process proved its
    /// identity at their address (they restarted).
    pub redials_given_up: u64,
    /// Times this node found itself hearing nobody: the heartbeat cut off every established
    /// connection, several peers went down and no control frame came from anyone for its
    /// timeout (UCX's shared-memory receive FIFO stuck; see
    /// [`NodeConfig::replace_deaf_worker`](crate::node::NodeConfig::replace_deaf_worker)).
    pub deaf: u64,
    /// Of those, times the node replaced its worker (own worker only).
    pub workers_replaced: u64,
    /// Messages that had arrived on a replaced worker and waited there unreceived, carried
    /// over to be received as if still queued.
    pub carried: u64,
    /// Messages left on a replaced worker that could not be carried over (a stranger's, one
    /// longer than [`CARRY_LEN_MAX`](crate::node::CARRY_LEN_MAX), one whose data could not be
    /// fetched any more — a rendezvous from a peer already cut off — or past
    /// [`CARRIED_MAX`](crate::node::CARRIED_MAX) messages or
    /// [`CARRIED_BYTES_MAX`](crate::node::CARRIED_BYTES_MAX) bytes).
    pub carry_dropped: u64,
}

/// Counts a connection's close in the stats by why it closed.
pub(super) fn count_close(stats: &mut NodeStats, why: Why) {
    match why {
        Why::Flood => stats.flood_closes += 1,
        Why::ProtocolError(e) => {
            stats.protocol_errors += 1;
            if matches!(e, SessionError::Unproven { .. }) {
                stats.unproven += 1;
            }
        }
        Why::Expired(Expiry::Handshake(_)) => stats.handshake_timeouts += 1,
        Why::Expired(Expiry::Acks) => stats.ack_timeouts += 1,
        Why::Expired(Expiry::Unresponsive) => stats.liveness_timeouts += 1,
        Why::Failed => stats.endpoint_failures += 1,
        // Counted once per peer where the backlog found it (with `backlog_floods`).
        Why::Backlog => {}
        Why::Refused => stats.refused += 1,
        Why::PeerClosed(_) | Why::Superseded | Why::Local => {}
    }
}

/// Counts a stray of namespace id `id` (`forged`: a pair value no proven peer was given).
pub(super) fn count_stray(stats: &mut NodeStats, by_id: &mut [u64], id: u16, forged: bool) {
    stats.stray += 1;
    stats.forged += u64::from(forged);
    if let Some(c) = by_id.get_mut(id as usize) {
        *c += 1;
    }
}
