//! What the peer tells: its name → id table and the pair value its tags carry here, and the
//! routes made of them (P1).

use super::*;

impl<const CAP: usize> Session<CAP> {
    /// The peer's name → id table.
    pub fn directory(&self) -> &Directory<CAP> {
        &self.directory
    }

    /// Bytes the session holds on the heap besides itself: its tables (the directory, what
    /// was told the peer, withdrawals waiting, acknowledgements owed). With the `alloc`
    /// feature they grow with what they hold, up to `CAP` entries each; without it they are
    /// inline and this is 0.
    pub fn heap_bytes(&self) -> usize {
        self.directory.heap_bytes()
            + self.told.heap_bytes()
            + self.withdrawals.heap_bytes()
            + self.owed_frames.heap_bytes()
            + self.owed_tags.heap_bytes()
            + self.confirmed.heap_bytes()
    }

    /// The route for `ns` on this peer, if the session is established (the peer proven), the
    /// peer has told its pair value (where the layout has a pair field) and it has registered
    /// the same name.
    pub fn route<const R: usize>(&self, ns: &Namespace<'_, R>) -> Option<Route> {
        if !self.is_paired() {
            return None;
        }
        let pair = self.peer_pair.unwrap_or(0);
        self.directory
            .lookup(ns.name())
            .map(|remote| Route::new(ns.id(), remote, pair))
    }

    /// Whether the session routes: established, and the peer's pair value known (or the
    /// layout has no pair field).
    pub fn is_paired(&self) -> bool {
        self.phase == Phase::Established && (self.pair_bits == 0 || self.peer_pair.is_some())
    }

    /// The pair value the peer told this side to put in its tags (`None` before its PAIR).
    pub fn peer_pair(&self) -> Option<u32> {
        self.peer_pair
    }

    /// Gives the proven peer `value` for the pair field of the tags it sends here: the next
    /// [`poll_transmit`](Self::poll_transmit) sends it in a PAIR frame. The engine chooses
    /// values: non-zero, within the layout's pair width, unique per peer on this process (see
    /// `Connections`). Once per session, and only once the peer is proven (so only a process
    /// that holds the peer's key ever learns it); ignored otherwise, and when the layout has
    /// no pair field.
    pub fn grant_pair(&mut self, value: u32) {
        let fits = (value as u64) >> self.pair_bits == 0;
        if self.pair_bits != 0
            && self.phase == Phase::Established
            && self.pair_granted.is_none()
            && value != 0
            && fits
        {
            self.pair_granted = Some(value);
        }
    }

    /// The value this side gave the peer, once granted.
    pub fn pair_granted(&self) -> Option<u32> {
        self.pair_granted
    }

    /// The peer's ANNOUNCE: a name in its table (reported once the peer is proven).
    pub(super) fn on_announce(
        &mut self,
        phase: Phase,
        id: u16,
        name: Name,
    ) -> Result<Option<Event>, SessionError> {
        self.check_id(id)?;
        self.directory.insert(id, name)?;
        Ok((phase == Phase::Established).then_some(Event::Announced { name, id }))
    }

    /// The peer's PAIR: the value its tags to this side carry.
    pub(super) fn on_pair(&mut self, value: u32) -> Result<Option<Event>, SessionError> {
        if self.pair_bits == 0 {
            return Err(SessionError::Unexpected {
                frame: "PAIR",
                why: "this side's layout has no pair field",
            });
        }
        if self.peer_pair.is_some() {
            return Err(SessionError::Unexpected {
                frame: "PAIR",
                why: "the peer already gave its pair value on this endpoint",
            });
        }
        if value == 0 || (value as u64) >> self.pair_bits != 0 {
            return Err(SessionError::Unexpected {
                frame: "PAIR",
                why: "the value is 0 or wider than the layout's pair field",
            });
        }
        self.peer_pair = Some(value);
        Ok(Some(Event::Paired))
    }

    /// This side's PAIR, once granted.
    pub(super) fn transmit_pair(&mut self, buf: &mut [u8]) -> Result<Option<usize>, SessionError> {
        if let (Some(value), false) = (self.pair_granted, self.pair_sent) {
            let n = Frame::Pair { value }.encode(buf)?;
            self.pair_sent = true;
            return Ok(Some(n));
        }
        Ok(None)
    }

    /// The peer's ADDRESS (only from a proven peer: the dispatch refuses it earlier). A later
    /// one replaces it: a peer that moved its listener tells again.
    pub(super) fn on_address(&mut self, a: wire::Address) -> Result<Option<Event>, SessionError> {
        self.peer_addr = Some(a);
        Ok(None)
    }

    /// This side's ADDRESS, once the peer is proven (a stranger never learns it from us).
    pub(super) fn transmit_address(
        &mut self,
        buf: &mut [u8],
    ) -> Result<Option<usize>, SessionError> {
        match self.advertised {
            Some(a) if !self.addr_sent && self.phase == Phase::Established => {
                let n = Frame::Address(a).encode(buf)?;
                self.addr_sent = true;
                Ok(Some(n))
            }
            _ => Ok(None),
        }
    }

    /// Tells the peer (once it is proven, again if it changed) that this side listens at
    /// `addr`, so that it can dial this side again after a fault; `None`: tell nothing.
    /// `true` if it changed.
    pub fn set_advertised(&mut self, addr: Option<wire::Address>) -> bool {
        let changed = addr != self.advertised;
        if changed {
            self.advertised = addr;
            self.addr_sent = false;
        }
        changed
    }

    /// Where the peer says it listens (its latest ADDRESS), once it is proven.
    pub fn peer_addr(&self) -> Option<wire::Address> {
        self.peer_addr
    }

    /// Whether this side told the peer where it listens (its ADDRESS went out).
    pub fn told_addr(&self) -> bool {
        self.advertised.is_some() && self.addr_sent
    }
}

/// The peer's name → id table. Bounded by `CAP` entries.
#[derive(Clone)]
pub struct Directory<const CAP: usize> {
    // Sorted by name: lookups on the send path are a binary search.
    entries: List<(Name, u16), CAP>,
}

impl<const CAP: usize> Directory<CAP> {
    pub(super) const fn new() -> Self {
        Directory {
            entries: List::new(),
        }
    }

    /// The peer's id for `name`.
    pub fn lookup(&self, name: &Name) -> Option<u16> {
        self.entries
            .binary_search_by(|(n, _)| n.cmp(name))
            .ok()
            .map(|i| self.entries[i].1)
    }

    /// The peer's name for its id `id` (for decoding received tags in logs).
    pub fn name_of(&self, id: u16) -> Option<&Name> {
        self.entries.iter().find(|(_, i)| *i == id).map(|(n, _)| n)
    }

    /// Bytes it holds on the heap (with the `alloc` feature; without it, all of it is inline).
    pub fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the peer has announced nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(name, peer id)` pairs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Name, u16)> {
        self.entries.iter().map(|(n, i)| (n, *i))
    }

    pub(super) fn insert(&mut self, id: u16, name: Name) -> Result<(), SessionError> {
        if self.name_of(id).is_some() {
            return Err(SessionError::DuplicateId { id });
        }
        match self.entries.binary_search_by(|(n, _)| n.cmp(&name)) {
            Ok(_) => Err(SessionError::DuplicateName { name }),
            Err(at) => {
                self.entries
                    .insert(at, (name, id))
                    .map_err(|_| SessionError::DirectoryFull {
                        capacity: CAP as u32,
                    })
            }
        }
    }

    pub(super) fn remove_id(&mut self, id: u16) -> Option<Name> {
        let at = self.entries.iter().position(|(_, i)| *i == id)?;
        Some(self.entries.remove(at).0)
    }
}
