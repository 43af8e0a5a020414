//! Hooks for tests that play a misbehaving peer (feature `test-hooks`).

use super::*;

impl Node {
    /// Test hook (feature `test-hooks`): sends raw bytes as a control frame to `peer`, as a
    /// hostile peer would.
    #[cfg(feature = "test-hooks")]
    pub fn inject_control(&mut self, peer: u64, bytes: &[u8]) -> Result<(), NodeError> {
        let ep = self
            .endpoint_to(peer)
            .ok_or(NodeError::NoConnection { peer })?;
        if let Started::Pending(r) = ep.am_send(self.control_am, bytes.to_vec())? {
            self.background.push(r);
        }
        Ok(())
    }

    /// Test hook (feature `test-hooks`): this node stops acknowledging `peer`'s withdrawals
    /// (both halves), as a peer that never answers would.
    #[cfg(feature = "test-hooks")]
    pub fn withhold_acks_for_test(&mut self, peer: u64) -> Result<(), NodeError> {
        let i = self.engine.conns().serving(peer)?;
        if let Some(io) = self.engine.io_mut(i) {
            io.withhold_acks = true;
        }
        Ok(())
    }
}

impl Node {
    /// Test hook (feature `test-hooks`): this node's endpoints to `peer` fail as if UCX had
    /// reported them reset (a cut link, seen from this side): each connection ends with
    /// `PeerDown` and its endpoint is force-closed, which the peer's transport sees in turn.
    #[cfg(feature = "test-hooks")]
    pub fn fail_link_for_test(&mut self, peer: u64) {
        let keys: Vec<EpKey> = (self.engine.conns().iter())
            .filter(|c| c.serves(peer) && c.io.ep.is_some())
            .map(|c| c.key())
            .collect();
        for key in keys {
            let error = UcxError {
                op: "test hook: link cut",
                status: crate::ucp::Status::CONNECTION_RESET,
            };
            self.on_ep_error(key, error);
        }
    }
}

impl Node {
    /// Test hook (feature `test-hooks`): from now on this node's worker drops every control
    /// frame that arrives (PINGs, PONGs, HELLOs), as a receive queue stuck by a killed writer
    /// leaves them unread, until the worker is replaced (the new one hears). Sending still
    /// works, as with the real fault.
    #[cfg(feature = "test-hooks")]
    pub fn deafen_for_test(&mut self) {
        self.deafened = true;
    }
}

impl Io {
    /// Whether `frame`, an acknowledgement, is withheld ([`Node::withhold_acks_for_test`]).
    #[cfg(feature = "test-hooks")]
    pub(super) fn withholds(&self, frame: Option<&[u8]>) -> bool {
        use tagspace_core::wire::{decode, Frame};
        self.withhold_acks
            && frame.is_none_or(|f| matches!(decode(f), Ok(Frame::WithdrawAck { .. })))
    }

    /// Nothing is withheld without the test hooks.
    #[cfg(not(feature = "test-hooks"))]
    pub(super) fn withholds(&self, _frame: Option<&[u8]>) -> bool {
        false
    }
}
