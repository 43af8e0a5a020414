//! Keeping the peer in sync with the local registry: ANNOUNCE and WITHDRAW for what changed
//! since it was last told (by generation, so no change is dropped), and the peer's own
//! WITHDRAWs.

use super::*;

impl<const CAP: usize> Session<CAP> {
    /// The peer's WITHDRAW: the name leaves its table; a non-zero `seq` asks for both halves
    /// of an acknowledgement (R7).
    pub(super) fn on_withdraw(
        &mut self,
        phase: Phase,
        id: u16,
        seq: u32,
    ) -> Result<Option<Event>, SessionError> {
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

    /// The next WITHDRAW or ANNOUNCE the registry's changes call for, if any.
    pub(super) fn transmit_changes<const R: usize>(
        &mut self,
        registry: &Registry<R>,
        buf: &mut [u8],
    ) -> Result<Option<usize>, SessionError> {
        'rescan: loop {
            let epoch = registry.epoch();
            if self.synced_epoch == Some(epoch) {
                return Ok(None);
            }
            let ids = 0..R.min(CAP) as u16;
            // Withdrawals first: a name that moved to another id must leave the peer's table
            // before it is announced again, or the peer sees it twice.
            for id in ids.clone() {
                let told = self.told.get(id);
                if told != 0 && registry.live_generation(id) != Some(told) {
                    // A dynamic id stays pinned (quarantined) until the peer acknowledges; a
                    // well-known one always carries the same name and is not quarantined.
                    let seq = if registry.is_dynamic(id) {
                        self.next_seq()
                    } else {
                        0
                    };
                    let n = Frame::Withdraw { id, seq }.encode(buf)?;
                    self.told.set(id, 0);
                    if seq == 0 {
                        registry.unpin(id);
                    } else {
                        self.withdrawals.set(id, (seq, 0));
                    }
                    return Ok(Some(n));
                }
            }
            for id in ids {
                if self.told.get(id) != 0 {
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
                    if self.withdrawals.get(id).0 != 0 {
                        // Still waiting for the acknowledgement of this id's last withdrawal:
                        // the registry cannot have handed it out again while we pin it.
                        continue;
                    }
                    if !registry.pin(token) {
                        // Just released: the epoch moved, and the rescan sees it.
                        continue 'rescan;
                    }
                    let n = Frame::Announce { id, name }.encode(buf)?;
                    self.told.set(id, token.generation);
                    return Ok(Some(n));
                }
            }
            self.synced_epoch = Some(epoch);
            return Ok(None);
        }
    }
}
