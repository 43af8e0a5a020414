//! The heartbeat: a PING at a time, answered by a PONG; the session keeps no clock (the
//! engine's deadlines do).

use super::*;

impl<const CAP: usize> Session<CAP> {
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

    /// The peer's PING: one PONG owed at most.
    pub(super) fn on_ping(&mut self, seq: u32) -> Result<Option<Event>, SessionError> {
        self.pong_owed = Some(seq);
        Ok(None)
    }

    /// The peer's PONG: it must answer the PING of ours that is out.
    pub(super) fn on_pong(&mut self, seq: u32) -> Result<Option<Event>, SessionError> {
        if self.ping_out != Some(seq) || self.ping_queued {
            return Err(SessionError::Unexpected {
                frame: "PONG",
                why: "no PING of ours with this seq is waiting",
            });
        }
        self.ping_out = None;
        Ok(None)
    }

    /// The PONG owed, then our PING if one is queued.
    pub(super) fn transmit_heartbeat(
        &mut self,
        buf: &mut [u8],
    ) -> Result<Option<usize>, SessionError> {
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
        Ok(None)
    }
}
