//! The fabric as the core engine sees it: the operations' transport ([`engine::Transport`]),
//! the unexpected queue by namespace id (the stray sweep's and R7's drain's), and the held
//! namespaces' view of it.

use super::Io;
use crate::fabric::{EpId, Fabric, FabricError, RecvId, SendId, WorkerId};
use tagspace_core::engine::{self, Dest, Finished, Posted, StrayQueue};
use tagspace_core::{Matcher, TagLayout};

/// The fabric, for the engine's executor of operations.
pub(super) struct FabricOps<'f> {
    pub(super) fab: &'f mut Fabric,
    pub(super) worker: WorkerId,
    pub(super) layout: &'f TagLayout,
    /// The held namespaces' messages, which receives take first.
    pub(super) backlog: &'f mut engine::Backlog<Vec<u8>>,
    pub(super) stray: &'f mut u64,
    pub(super) forged: &'f mut u64,
}

impl engine::Transport<EpId, Io, FabricError> for FabricOps<'_> {
    type Send = SendId;
    type Recv = RecvId;

    fn send(
        &mut self,
        io: &Io,
        _peer: u64,
        dest: Dest,
        data: &mut Vec<u8>,
    ) -> Result<Option<SendId>, super::NodeError> {
        Ok(match dest {
            Dest::Tag(tag) => Some(self.fab.tag_send(io.ep, tag, data)?),
            Dest::Am(id) => {
                self.fab.am_send(io.ep, id, data)?;
                None // AMs are eager here
            }
        })
    }

    fn test_send(&mut self, req: &mut SendId) -> Option<Result<(), FabricError>> {
        self.fab.send_take(*req)
    }

    fn post(&mut self, m: &Matcher, _max_len: usize) -> Result<Posted<RecvId>, super::NodeError> {
        if self.backlog.is_active() {
            let id = self.layout.namespace_of(m.tag());
            if let Some(held) = self.backlog.take(id, m.tag(), m.mask()) {
                return Ok(Posted::Took(held.msg));
            }
        }
        Ok(Posted::Waiting(self.fab.tag_recv(
            self.worker,
            m.tag(),
            m.mask(),
        )?))
    }

    fn test_recv(&mut self, req: &mut RecvId) -> Option<Finished<FabricError>> {
        Some(match self.fab.recv_take(self.worker, *req)? {
            Ok(m) => Finished {
                tag: Some(m.tag),
                data: Ok(m.data),
            },
            Err(e) => Finished {
                tag: None,
                data: Err(e),
            },
        })
    }

    fn is_cancelled(&self, _e: &FabricError) -> bool {
        false // the fabric's cancel is done at once (`cancel` says so)
    }

    fn cancel(&mut self, req: &mut RecvId) -> bool {
        self.fab.recv_cancel(self.worker, *req)
    }

    fn abandon_send(&mut self, _conn: EpId, _req: SendId) {}

    fn abandon_recv(&mut self, req: RecvId) {
        self.fab.recv_cancel(self.worker, req);
    }

    fn forged(&mut self, _tag: u64) {
        *self.stray += 1;
        *self.forged += 1;
    }
}

/// The worker's unexpected queue by namespace id, for the engine's R7 drain.
pub(super) struct FabricQueue<'f> {
    fab: &'f mut Fabric,
    worker: WorkerId,
    layout: TagLayout,
    /// The tag of the oldest unexpected message, as last looked at.
    oldest: Option<u64>,
    /// Messages taken for their pair value.
    pub(super) forged: u64,
}

impl<'f> FabricQueue<'f> {
    pub(super) fn new(fab: &'f mut Fabric, worker: WorkerId, layout: &TagLayout) -> Self {
        FabricQueue {
            fab,
            worker,
            layout: *layout,
            oldest: None,
            forged: 0,
        }
    }

    fn probe(&mut self, id: u16, remove: bool) -> bool {
        let space = self.layout.space(id);
        matches!(
            self.fab
                .tag_probe(self.worker, space.tag, space.mask, remove),
            Ok(Some(_))
        )
    }
}

impl StrayQueue for FabricQueue<'_> {
    fn take_one(&mut self, id: u16) -> bool {
        self.probe(id, true)
    }
    fn waits(&mut self, id: u16) -> bool {
        self.probe(id, false)
    }
}

impl engine::QueueHead for FabricQueue<'_> {
    fn oldest_tag(&mut self) -> Option<u64> {
        let head = self.fab.tag_probe(self.worker, 0, 0, false).ok().flatten();
        self.oldest = head.map(|m| m.tag);
        self.oldest
    }
    fn take_matching(&mut self, tag: u64, mask: u64, _id: u16, forged: bool) -> bool {
        let taken = matches!(
            self.fab.tag_probe(self.worker, tag, mask, true),
            Ok(Some(_))
        );
        self.forged += u64::from(taken && forged);
        taken
    }
    fn first(&mut self, tag: u64, mask: u64) -> Option<u64> {
        let found = self.fab.tag_probe(self.worker, tag, mask, false);
        found.ok().flatten().map(|m| m.tag)
    }
    fn take_oldest(&mut self, _id: u16, forged: bool) -> bool {
        let taken = self.oldest.take().is_some_and(|tag| {
            matches!(
                self.fab.tag_probe(self.worker, tag, u64::MAX, true),
                Ok(Some(_))
            )
        });
        self.forged += u64::from(taken && forged);
        taken
    }
}

/// The held namespaces' view of the fabric's unexpected queue ([`engine::HoldQueue`]): a probe
/// with removal hands the message's data over at once.
pub(super) struct FabricHolds<'f> {
    pub(super) fab: &'f mut Fabric,
    pub(super) worker: WorkerId,
    pub(super) forged: u64,
}

impl engine::HoldQueue<Vec<u8>> for FabricHolds<'_> {
    fn take_first(&mut self, tag: u64, mask: u64) -> Option<(u64, usize, Vec<u8>)> {
        let got = self.fab.tag_probe(self.worker, tag, mask, true).ok()??;
        Some((got.tag, got.data.len(), got.data))
    }
    fn discard(&mut self, _tag: u64, _msg: Vec<u8>, forged: bool) {
        self.forged += u64::from(forged);
    }
}
