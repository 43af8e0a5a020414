//! R7's acknowledgements: this side's withdrawals waiting for both halves (the frame and the
//! tag message), the ones it owes the peer, and the ids confirmed.

use super::*;

const ACK_TAG: u8 = 1;
const ACK_FRAME: u8 = 2;

impl<const CAP: usize> Session<CAP> {
    pub(super) fn next_seq(&mut self) -> u32 {
        // Keyed by the secret key (the nonce alone is sent in the HELLO, in clear): nobody but
        // this process can predict it, so nobody can forge an ack tag for it. Never 0.
        use sha2::{Digest, Sha512};
        loop {
            self.seqs_made = self.seqs_made.wrapping_add(1);
            let digest = Sha512::new()
                .chain_update(b"tagspace-withdraw-seq")
                .chain_update(&self.secret[..])
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
    pub(super) fn acknowledge(&mut self, id: u16, seq: u32, half: u8) -> bool {
        let (waiting, acked) = self.withdrawals.get(id);
        if seq == 0 || waiting != seq {
            return false;
        }
        if acked | half == ACK_FRAME | ACK_TAG {
            self.withdrawals.set(id, (0, 0));
            // Cannot be full: one entry per id at most.
            let _ = self.confirmed.push_back(id);
        } else {
            self.withdrawals.set(id, (seq, acked | half));
        }
        true
    }

    /// The peer's WITHDRAW-ACK frame: one half of an acknowledgement.
    pub(super) fn on_withdraw_ack(
        &mut self,
        id: u16,
        seq: u32,
    ) -> Result<Option<Event>, SessionError> {
        if !self.acknowledge(id, seq, ACK_FRAME) {
            return Err(SessionError::Unexpected {
                frame: "WITHDRAW-ACK",
                why: "no such withdrawal is waiting",
            });
        }
        Ok(None)
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
        (self.withdrawals.iter())
            .filter(|&(_, (_, acked))| acked & ACK_TAG == 0)
            .map(|(id, (seq, _))| (id, seq))
    }

    /// The next ack tag message to send the peer, as a zero-length tag message on this
    /// endpoint (after any data the adapter has already posted on it).
    pub fn poll_ack_tag(&mut self, layout: &TagLayout) -> Option<u64> {
        self.owed_tags
            .pop_front()
            .map(|(id, seq)| wire::ack_tag(layout, id, seq))
    }

    /// The next WITHDRAW-ACK frame owed the peer.
    pub(super) fn transmit_ack(&mut self, buf: &mut [u8]) -> Result<Option<usize>, SessionError> {
        if let Some(&(id, seq)) = self.owed_frames.front() {
            let n = Frame::WithdrawAck { id, seq }.encode(buf)?;
            self.owed_frames.pop_front();
            return Ok(Some(n));
        }
        Ok(None)
    }

    /// Withdrawals of ours the peer has not fully acknowledged yet. An adapter bounds how long
    /// this may stay above zero without progress, so that a connected peer that never answers
    /// cannot keep ids quarantined for ever.
    pub fn awaiting_acks(&self) -> usize {
        self.withdrawals.len()
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
        // An id is told or waiting for its withdrawal's acknowledgement, never both: each at
        // most once, in id order as before.
        let told = self.told.iter().map(|(id, _)| id);
        let withdrawn = self.withdrawals.iter().map(|(id, _)| id);
        let mut ids: heapless::Vec<u16, CAP> = told.chain(withdrawn).collect();
        ids.sort_unstable();
        for id in ids {
            if pinned.last() != Some(&id) {
                let _ = pinned.push(id);
            }
        }
        self.told.clear();
        self.withdrawals.clear();
        while let Some(id) = self.confirmed.pop_front() {
            let _ = pinned.push(id);
        }
        self.phase = Phase::Closed;
        pinned
    }
}
