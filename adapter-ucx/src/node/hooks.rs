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
