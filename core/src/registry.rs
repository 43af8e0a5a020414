//! The namespace registry: fixed capacity, lock-free, process-global or instantiable.
//!
//! ```
//! use tagspace_core::{Registry, TagLayout};
//!
//! static REGISTRY: Registry<64> = Registry::new(TagLayout::builder(56, 8).build_or_panic());
//!
//! let dask = REGISTRY.register("dask").unwrap();      // well known: always id 2
//! let mine = REGISTRY.register("my-engine").unwrap(); // dynamic: 16 or above
//! assert_eq!(dask.id(), 2);
//! assert!(mine.id() >= 16);
//! assert!(REGISTRY.register("my-engine").is_err());   // names are unique (R2)
//! let token = mine.token();
//! drop(mine);                                         // releases the id
//! assert!(REGISTRY.check(token).is_err());            // the old lease is stale (R3)
//! ```
//!
//! # State machine of a slot
//!
//! Slot `i` holds namespace id `i`. Its state word packs
//! `generation:32 | name_hash:16 | name_len:8 | phase:8`:
//!
//! ```text
//!            claim (CAS, gen+1)        publish (SeqCst)         confirm (CAS)
//!   FREE(g) ───────────────────▶ WRITING(g+1) ──────▶ PENDING(g+1) ──────────▶ LIVE(g+1)
//!     ▲                                                 │    │                      │
//!     │            abort: duplicate seen, or doomed     │    │ doom (CAS by a       │
//!     ├─────────────────────────────────────────────────┘    ▼  same-name rival)    │
//!     ├────────────────────────────────────────────────── DOOMED(g+1)               │
//!     │                                                                             │
//!     │        last unpin, or release with no pins (CAS)                            │
//!     └─────────────────────── QUARANTINED(g+1) ◀── release (owner's Namespace drops)┘
//! ```
//!
//! # Quarantine (R7)
//!
//! A released dynamic id is not free at once: a peer may still have messages in flight to it,
//! which must not land in the next name to take the id. Whoever told a peer about a lease
//! [`pin`](Registry::pin)s it (a control-plane session does, when it sends the name); a released
//! id stays `QUARANTINED` until every pin is gone ([`unpin`](Registry::unpin): the peer confirmed
//! that nothing more can arrive, or its connection ended). An id nobody pinned is free at once.
//! A registration that finds only quarantined ids gets [`RegistryError::Quarantined`], not a
//! wait. Free dynamic ids are handed out least recently released first (never-used ones first,
//! lowest first), which keeps a reused id as far from its last use as the registry allows.
//! Well-known and static ids are never quarantined: they always carry the same name.
//!
//! Every step that decides goes through a read-modify-write of the slot's state word; those are
//! totally ordered and always read the latest value. `pin` adds a pin, then confirms the lease
//! by a CAS `LIVE → LIVE`; `release` swaps in `QUARANTINED` (AcqRel), then reads the pin count.
//! If the pin's CAS comes first, the release's swap reads what it wrote, so the pin happens
//! before the release's count, which sees it; if the swap comes first, the CAS fails and the
//! pinner takes its pin back. A freeing attempt (after a release that saw no pins, or after the
//! last unpin) reads the state by RMW too, so of a release and a last unpin racing, at least one
//! sees the other; `QUARANTINED → FREE` is a CAS, so one wins. (The first version used
//! Dekker-style SeqCst fences here, and the loom model — which treats SeqCst as AcqRel — found an
//! interleaving in which a pinned id was handed out. This one holds under AcqRel alone.)
//!
//! * The name words are written only in `WRITING`, by the one thread whose CAS claimed the slot.
//!   Readers copy them with relaxed loads and re-check the state word afterwards (a seqlock): a
//!   copy is used only if the generation did not change and the slot was readable throughout, so
//!   no reader acts on a torn name (R4).
//! * Duplicate names (R2) are settled without a lock. A registrant publishes `PENDING`, issues a
//!   SeqCst fence, then scans every other slot; of two concurrent registrants at least one sees
//!   the other, as in Dekker's algorithm. On finding its name `LIVE` it gives up; `PENDING` in a lower slot,
//!   it gives up; `PENDING` in a higher slot, it dooms that slot by CAS. It then confirms
//!   `PENDING → LIVE` by CAS, which fails if it was doomed. The lowest-numbered contender is
//!   never doomed, so of concurrent registrants exactly one wins unless a live one exists.
//! * Scans stop at a high-water mark: one past the highest id ever claimed. A claimer raises it
//!   before its SeqCst fence and a scanner reads it after its own, so by the same fence argument
//!   a scanner that misses a rival's mark is seen by that rival. The 16-bit name hash in the state
//!   word lets scans skip slots without reading names.
//! * No step waits for another thread (R5): every loop retries only after another thread's CAS
//!   succeeded, and exhaustion is an error.
//! * The generation grows on every claim; a [`LeaseToken`] records it, so a token of a released
//!   lease never validates again (R3), except after 2^32 reuses of the same slot.

use crate::error::RegistryError;
use crate::layout::TagLayout;
use crate::name::{Name, MAX_NAME_LEN};
use crate::namespace::Namespace;
use crate::sync::{fence, spin_hint, AtomicU64, Ordering};
use crate::wellknown::{well_known_id, CONTROL_ID, FIRST_DYNAMIC_ID, UNMANAGED_ID};

const NAME_WORDS: usize = MAX_NAME_LEN / 8;

const FREE: u64 = 0;
const WRITING: u64 = 1;
const PENDING: u64 = 2;
const LIVE: u64 = 3;
const DOOMED: u64 = 4;
const QUARANTINED: u64 = 5;

#[inline]
const fn pack(generation: u32, len: u8, phase: u64) -> u64 {
    ((generation as u64) << 32) | ((len as u64) << 8) | phase
}
/// A FREE or QUARANTINED word: bits 16..32 hold the low bits of the release sequence (when the
/// id was released), for least-recently-released reuse.
#[inline]
const fn pack_released(generation: u32, seq: u16, phase: u64) -> u64 {
    ((generation as u64) << 32) | ((seq as u64) << 16) | phase
}
#[inline]
const fn released_seq(s: u64) -> u16 {
    (s >> 16) as u16
}
#[inline]
const fn with_hash(s: u64, hash: u16) -> u64 {
    s | ((hash as u64) << 16)
}
#[inline]
const fn name_hash_of(s: u64) -> u16 {
    (s >> 16) as u16
}
/// 16-bit FNV-1a fold: lets scans skip slots whose name cannot match.
fn name_hash(name: &Name) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in name.as_bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 16)) as u16
}
#[inline]
const fn phase(s: u64) -> u64 {
    s & 0xff
}
#[inline]
const fn name_len(s: u64) -> usize {
    ((s >> 8) & 0xff) as usize
}
#[inline]
const fn generation(s: u64) -> u32 {
    (s >> 32) as u32
}
#[inline]
const fn name_readable(s: u64) -> bool {
    matches!(phase(s), PENDING | LIVE | DOOMED)
}
#[inline]
const fn next_generation(g: u32) -> u32 {
    // 0 never names a live lease, so a zeroed token can never validate.
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// Proof of a registration: namespace id plus the generation of its slot. `Copy`, so it can be
/// stored anywhere; every registry operation that takes one rejects it once the lease is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    /// Namespace id.
    pub id: u16,
    /// Generation of the slot when the lease was granted.
    pub generation: u32,
}

/// A slot's name words. State words live in their own dense array so scans touch few lines.
struct NameWords([AtomicU64; NAME_WORDS]);

/// A slot seen as its state word plus its name words.
#[derive(Clone, Copy)]
struct Slot<'a> {
    state: &'a AtomicU64,
    name: &'a NameWords,
}

impl NameWords {
    #[cfg(not(loom))]
    const fn new() -> NameWords {
        NameWords([const { AtomicU64::new(0) }; NAME_WORDS])
    }

    #[cfg(loom)]
    fn new() -> NameWords {
        NameWords(core::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Slot<'_> {
    /// Copies the name published under state `s1` into `out`. `Some(s2)` with the state seen
    /// after the copy if the copy is consistent, `None` if the slot changed meanwhile.
    fn read_name(&self, s1: u64, out: &mut [u8; MAX_NAME_LEN]) -> Option<u64> {
        let words = name_len(s1).div_ceil(8);
        for (i, w) in self.name.0[..words].iter().enumerate() {
            let v = w.load(Ordering::Relaxed);
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        // Acquire fence: pairs with the release fence a claimer issues before it overwrites the
        // name words. If any word we read came from a newer claim, that claim's state CAS is
        // visible to the load below, which then sees a different generation.
        fence(Ordering::Acquire);
        let s2 = self.state.load(Ordering::Relaxed);
        (generation(s2) == generation(s1) && name_readable(s2)).then_some(s2)
    }

    /// Whether the name published under `s1` equals `name`; `None` if the slot changed meanwhile.
    fn name_equals(&self, s1: u64, name: &Name, hash: u16) -> Option<bool> {
        if name_len(s1) != name.len() || name_hash_of(s1) != hash {
            return Some(false);
        }
        let mut buf = [0u8; MAX_NAME_LEN];
        self.read_name(s1, &mut buf)?;
        Some(buf[..name.len()] == *name.as_bytes())
    }
}

/// A fixed-capacity, lock-free table of namespaces. Slot `i` holds namespace id `i`.
///
/// `CAP` is the number of ids, at most the layout's [`TagLayout::id_capacity`].
pub struct Registry<const CAP: usize = 256> {
    layout: TagLayout,
    first_dynamic: u16,
    epoch: AtomicU64,
    /// One past the highest id ever claimed; scans stop here.
    high_water: AtomicU64,
    /// Releases so far (its low 16 bits are stored in a released slot, for LRU reuse).
    releases: AtomicU64,
    states: [AtomicU64; CAP],
    names: [NameWords; CAP],
    /// Per id: peers told about the current lease and not yet done with it (R7).
    pins: [AtomicU64; CAP],
}

/// Where a registration wants to go.
#[derive(Clone, Copy)]
enum Target {
    Dynamic,
    Fixed(u16),
}

impl<const CAP: usize> Registry<CAP> {
    const CAP_OK: () = assert!(CAP >= 3 && CAP <= 65536, "a registry needs 3 to 65536 ids");

    /// A registry that honours the well-known table: well-known names take their fixed ids and
    /// dynamic ids start at 16. Panics (at compile time in a `static`) unless
    /// `17 <= CAP <= layout.id_capacity()`.
    #[cfg(not(loom))]
    pub const fn new(layout: TagLayout) -> Self {
        Self::with_policy(layout, true)
    }

    /// A registry without well-known ids: every name is dynamic from id 2 on. For embedded uses
    /// with a private id space, and for model checking with tiny capacities.
    #[cfg(not(loom))]
    pub const fn without_well_known(layout: TagLayout) -> Self {
        Self::with_policy(layout, false)
    }

    #[cfg(not(loom))]
    const fn with_policy(layout: TagLayout, well_known: bool) -> Self {
        let first_dynamic = Self::check_capacity(&layout, well_known);
        Registry {
            layout,
            first_dynamic,
            epoch: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            states: [const { AtomicU64::new(pack(0, 0, FREE)) }; CAP],
            names: [const { NameWords::new() }; CAP],
            pins: [const { AtomicU64::new(0) }; CAP],
        }
    }

    /// Loom's atomics are not `const`; under `--cfg loom` constructors are plain functions.
    #[cfg(loom)]
    pub fn new(layout: TagLayout) -> Self {
        Self::with_policy(layout, true)
    }

    /// See the non-loom documentation.
    #[cfg(loom)]
    pub fn without_well_known(layout: TagLayout) -> Self {
        Self::with_policy(layout, false)
    }

    #[cfg(loom)]
    fn with_policy(layout: TagLayout, well_known: bool) -> Self {
        let first_dynamic = Self::check_capacity(&layout, well_known);
        Registry {
            layout,
            first_dynamic,
            epoch: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            states: core::array::from_fn(|_| AtomicU64::new(pack(0, 0, FREE))),
            names: core::array::from_fn(|_| NameWords::new()),
            pins: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    const fn check_capacity(layout: &TagLayout, well_known: bool) -> u16 {
        let () = Self::CAP_OK;
        assert!(
            CAP as u64 <= layout.id_capacity() as u64,
            "registry capacity exceeds what the layout's namespace field can express"
        );
        if well_known {
            assert!(
                CAP > FIRST_DYNAMIC_ID as usize,
                "a registry with well-known ids needs more than 16 ids"
            );
            FIRST_DYNAMIC_ID
        } else {
            CONTROL_ID + 1
        }
    }

    fn slot(&self, id: usize) -> Slot<'_> {
        Slot {
            state: &self.states[id],
            name: &self.names[id],
        }
    }

    /// Ids that may have been claimed: `0..high_water`. Registrants load it Relaxed after their
    /// SeqCst fence (the fence orders it); readers load it Acquire, which covers every
    /// registration that completed before the read.
    fn used(&self, order: Ordering) -> usize {
        (self.high_water.load(order) as usize).min(CAP)
    }

    /// The tag layout every namespace of this registry uses.
    pub const fn layout(&self) -> &TagLayout {
        &self.layout
    }

    /// Number of ids (including the reserved ones).
    pub const fn capacity(&self) -> usize {
        CAP
    }

    /// Whether well-known names take their fixed ids here.
    pub const fn honours_well_known(&self) -> bool {
        self.first_dynamic == FIRST_DYNAMIC_ID
    }

    /// Grows by one whenever a namespace is registered or released; cheap to poll for
    /// "did the local table change" (the control plane does).
    pub fn epoch(&self) -> u64 {
        // Acquire: pairs with the Release increment after a confirm or release, so a caller that
        // sees the new epoch and then scans sees the new state too.
        self.epoch.load(Ordering::Acquire)
    }

    /// Registers `name`: its well-known id if it has one here, otherwise a free dynamic id —
    /// never used ones first (lowest first), then the least recently released (R7). The
    /// namespace stays registered until the returned lease drops.
    pub fn register(&self, name: &str) -> Result<Namespace<'_, CAP>, RegistryError> {
        let name = Name::new(name)?;
        let target = match well_known_id(name.as_bytes()) {
            Some(id) if self.honours_well_known() => Target::Fixed(id),
            _ => Target::Dynamic,
        };
        self.register_name(name, target)
    }

    /// Static mode, for transports without a control plane: registers `name` at exactly `id`.
    /// Both sides must compile in the same assignments. Id 0, the control-plane id, ids at or
    /// above the capacity, and well-known ids of other names are refused.
    pub fn register_at(&self, name: &str, id: u16) -> Result<Namespace<'_, CAP>, RegistryError> {
        let name = Name::new(name)?;
        if id == UNMANAGED_ID || id == CONTROL_ID || id as usize >= CAP {
            return Err(RegistryError::ReservedId { id });
        }
        if self.honours_well_known() {
            match well_known_id(name.as_bytes()) {
                Some(expected) if expected != id => {
                    return Err(RegistryError::WellKnownId { expected })
                }
                None if id < self.first_dynamic => return Err(RegistryError::ReservedId { id }),
                _ => {}
            }
        }
        self.register_name(name, Target::Fixed(id))
    }

    fn register_name(
        &self,
        name: Name,
        target: Target,
    ) -> Result<Namespace<'_, CAP>, RegistryError> {
        let hash = name_hash(&name);
        let (id, generation) = self.claim(&name, hash, target)?;
        let slot = self.slot(id as usize);
        let len = name.len() as u8;
        // Release fence: pairs with the acquire fence in `read_name`; a reader that sees any of
        // the words below also sees our claim, and discards its copy.
        fence(Ordering::Release);
        let raw = name.raw();
        for (i, w) in slot.name.0[..name.len().div_ceil(8)].iter().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[i * 8..i * 8 + 8]);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        let pending = with_hash(pack(generation, len, PENDING), hash);
        // Release: the name words above become visible to whoever loads this state.
        slot.state.store(pending, Ordering::Release);
        // SeqCst fence: with the same fence in a rival registrant (store PENDING; fence; scan),
        // this is Dekker's pattern: of two such fences one precedes the other in the single
        // total order, and the later one's scan sees the earlier one's PENDING. (A fence rather
        // than SeqCst accesses: same guarantee, and loom models fences but not SeqCst accesses.)
        fence(Ordering::SeqCst);

        if let Err(e) = self.settle_duplicates(id, &name, hash) {
            slot.state
                .store(pack(generation, 0, FREE), Ordering::Release);
            return Err(e);
        }
        // Fails if a lower-numbered rival doomed us after seeing our PENDING: read-modify-writes
        // of one word are totally ordered, so exactly one of doom and confirm succeeds. Release:
        // readers that see LIVE see the name.
        if slot
            .state
            .compare_exchange(
                pending,
                with_hash(pack(generation, len, LIVE), hash),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            slot.state
                .store(pack(generation, 0, FREE), Ordering::Release);
            return Err(RegistryError::DuplicateName);
        }
        // Release: pairs with `epoch()`'s Acquire load.
        self.epoch.fetch_add(1, Ordering::Release);
        Ok(Namespace::new(self, id, generation, name))
    }

    /// The free dynamic id to take next: never used ones first (lowest first), then the one
    /// released longest ago. `Err` when there is none: how many are quarantined.
    fn pick_dynamic(&self) -> Result<usize, usize> {
        let now = self.releases.load(Ordering::Relaxed) as u16;
        let mut best: Option<(usize, u32)> = None;
        let mut quarantined = 0;
        for id in self.first_dynamic as usize..CAP {
            let s = self.states[id].load(Ordering::Relaxed);
            let rank = match phase(s) {
                FREE if generation(s) == 0 => u32::MAX,
                // age since release (16-bit wrapping); older ranks higher
                FREE => now.wrapping_sub(released_seq(s)) as u32,
                QUARANTINED => {
                    quarantined += 1;
                    continue;
                }
                _ => continue,
            };
            if best.is_none_or(|(_, r)| rank > r) {
                best = Some((id, rank));
                if rank == u32::MAX {
                    break; // the lowest never-used id: nothing ranks higher
                }
            }
        }
        best.map(|(id, _)| id).ok_or(quarantined)
    }

    /// Takes a free slot: `(id, new generation)`.
    fn claim(&self, name: &Name, hash: u16, target: Target) -> Result<(u16, u32), RegistryError> {
        loop {
            let id = match target {
                Target::Fixed(id) => id as usize,
                Target::Dynamic => match self.pick_dynamic() {
                    Ok(id) => id,
                    Err(0) => {
                        return Err(RegistryError::NamespaceExhausted {
                            capacity: CAP as u32,
                        })
                    }
                    Err(quarantined) => {
                        return Err(RegistryError::Quarantined {
                            ids: quarantined as u32,
                        })
                    }
                },
            };
            let slot = self.slot(id);
            let mut s = slot.state.load(Ordering::Relaxed);
            while phase(s) == FREE {
                let g = next_generation(generation(s));
                // Acquire: pairs with the previous owner's Release store of FREE, so its last
                // reads of the name words happen before our overwrites.
                match slot.state.compare_exchange_weak(
                    s,
                    pack(g, 0, WRITING),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // Relaxed: sequenced before our SeqCst fence, which is all the
                        // high-water argument needs (see the module docs).
                        self.high_water.fetch_max(id as u64 + 1, Ordering::Relaxed);
                        return Ok((id as u16, g));
                    }
                    Err(now) => {
                        s = now;
                        spin_hint();
                    }
                }
            }
            if let Target::Fixed(id) = target {
                return Err(self.classify_taken(id, name, hash));
            }
            // Someone else took the dynamic id we picked (their CAS succeeded): pick again.
            spin_hint();
        }
    }

    /// Why a fixed id is not free: the same name holds it, or someone else does.
    fn classify_taken(&self, id: u16, name: &Name, hash: u16) -> RegistryError {
        let slot = self.slot(id as usize);
        let s = slot.state.load(Ordering::Acquire);
        if phase(s) == LIVE && slot.name_equals(s, name, hash) == Some(true) {
            RegistryError::DuplicateName
        } else if phase(s) == QUARANTINED {
            RegistryError::Quarantined { ids: 1 }
        } else {
            RegistryError::IdInUse { id }
        }
    }

    /// The scan of the duplicate-name protocol (see the module docs).
    fn settle_duplicates(&self, me: u16, name: &Name, hash: u16) -> Result<(), RegistryError> {
        for j in 0..self.used(Ordering::Relaxed) {
            if j == me as usize {
                continue;
            }
            let slot = self.slot(j);
            loop {
                // Acquire: pairs with the rival's Release publication, so its name words are
                // visible. Ordered after our PENDING by the SeqCst fence in `register_name`.
                let s = slot.state.load(Ordering::Acquire);
                if !name_readable(s) {
                    break; // FREE, or WRITING: that one will see us when it scans.
                }
                match slot.name_equals(s, name, hash) {
                    None => {
                        spin_hint(); // changed under us: look again
                        continue;
                    }
                    Some(false) => break,
                    Some(true) => {}
                }
                match phase(s) {
                    LIVE => return Err(RegistryError::DuplicateName),
                    DOOMED => break,
                    _ if j < me as usize => return Err(RegistryError::DuplicateName),
                    _ => {
                        let doomed = (s & !0xff) | DOOMED;
                        // Ordered against the rival's confirm CAS on the same word: exactly one
                        // of the two succeeds.
                        if slot
                            .state
                            .compare_exchange(s, doomed, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok()
                        {
                            break;
                        }
                        spin_hint(); // it confirmed or gave up: look again
                    }
                }
            }
        }
        Ok(())
    }

    /// Called by a dropping [`Namespace`]: only the owner of a LIVE slot changes it.
    pub(crate) fn release(&self, id: u16, generation: u32) {
        let state = &self.states[id as usize];
        debug_assert_eq!(
            state.load(Ordering::Relaxed) & !0xffff_ff00,
            pack(generation, 0, LIVE)
        );
        // Epoch first: whoever sees this slot released (Acquire) then also sees the new epoch,
        // so a scan that checks the epoch afterwards notices the release (the session relies on
        // it).
        self.epoch.fetch_add(1, Ordering::Relaxed);
        let seq = self.releases.fetch_add(1, Ordering::Relaxed) as u16;
        if id < self.first_dynamic {
            // Well-known and static ids always carry the same name: no quarantine.
            state.store(pack_released(generation, seq, FREE), Ordering::Release);
            return;
        }
        // AcqRel swap: Release, our reads of the slot and the epoch bump happen before the next
        // claimer's writes; Acquire, a pinner whose confirming CAS came before this swap (see
        // the module docs) happens before the count below.
        state.swap(
            pack_released(generation, seq, QUARANTINED),
            Ordering::AcqRel,
        );
        if self.pins[id as usize].load(Ordering::Acquire) == 0 {
            self.try_free(id as usize);
        }
    }

    /// `QUARANTINED → FREE` if no pin is left.
    fn try_free(&self, id: usize) {
        let state = &self.states[id];
        // An RMW read: the latest state, synchronised with the release's swap.
        let s = state.fetch_or(0, Ordering::AcqRel);
        if phase(s) == QUARANTINED && self.pins[id].load(Ordering::Acquire) == 0 {
            // Release: pairs with the next claimer's Acquire CAS. A pin added after the count
            // above fails its confirming CAS (the state is not LIVE) and takes itself back.
            let _ =
                state.compare_exchange(s, (s & !0xff) | FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Records that a peer has been told about `token`'s lease (R7): once released, its id
    /// stays quarantined until [`unpin`](Self::unpin) has been called as often as this
    /// returned `true`. `false` (and no pin): the lease is no longer live, so there is nothing
    /// to tell. Well-known and static ids are never quarantined; pinning them is a no-op that
    /// returns whether they are live.
    pub fn pin(&self, token: LeaseToken) -> bool {
        let id = token.id as usize;
        if id >= CAP {
            return false;
        }
        if token.id < self.first_dynamic {
            return self.live_generation(token.id) == Some(token.generation);
        }
        self.pins[id].fetch_add(1, Ordering::AcqRel);
        let state = &self.states[id];
        let s = state.load(Ordering::Acquire);
        // Confirmed by an RMW on the state word (see the module docs): a LIVE word of this
        // generation does not change until it is released, so the CAS fails only if it was.
        if phase(s) == LIVE
            && generation(s) == token.generation
            && state
                .compare_exchange(s, s, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return true;
        }
        self.unpin(token.id);
        false
    }

    /// Takes back one pin of `id` (the peer confirmed that nothing more can arrive for the
    /// released lease, or its connection ended). The last one frees a quarantined id.
    pub fn unpin(&self, id: u16) {
        let id = id as usize;
        if id >= CAP || id < self.first_dynamic as usize {
            return;
        }
        let before = self.pins[id].fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "unpin without a pin");
        if before == 1 {
            self.try_free(id);
        }
    }

    /// Ids released but still quarantined (a snapshot).
    pub fn quarantined_count(&self) -> usize {
        self.states[..self.used(Ordering::Acquire)]
            .iter()
            .filter(|s| phase(s.load(Ordering::Relaxed)) == QUARANTINED)
            .count()
    }

    /// Whether `id` is released but quarantined.
    pub fn is_quarantined(&self, id: u16) -> bool {
        self.states
            .get(id as usize)
            .is_some_and(|s| phase(s.load(Ordering::Acquire)) == QUARANTINED)
    }

    /// The live lease named `name`, if any.
    pub fn lookup(&self, name: &str) -> Option<LeaseToken> {
        let name = Name::new(name).ok()?;
        let hash = name_hash(&name);
        // Phase, length and hash share the low 32 bits of the state word: one compare per slot
        // rules out almost every non-match without touching name words.
        let key = with_hash(pack(0, name.len() as u8, LIVE), hash);
        let used = self.used(Ordering::Acquire);
        let mut id = 0;
        while id < used {
            // Relaxed pre-filter; the Acquire reload below orders the name read.
            if self.states[id].load(Ordering::Relaxed) as u32 == key as u32 {
                let slot = self.slot(id);
                let s = slot.state.load(Ordering::Acquire);
                if s as u32 == key as u32 {
                    match slot.name_equals(s, &name, hash) {
                        Some(true) => {
                            return Some(LeaseToken {
                                id: id as u16,
                                generation: generation(s),
                            })
                        }
                        Some(false) => {}
                        None => {
                            spin_hint();
                            continue; // changed while we read it: look at this slot again
                        }
                    }
                }
            }
            id += 1;
        }
        None
    }

    /// The name of live namespace `id`, if any.
    pub fn name_of(&self, id: u16) -> Option<(LeaseToken, Name)> {
        if id as usize >= CAP {
            return None;
        }
        self.read_live(self.slot(id as usize))
            .map(|(g, n)| (LeaseToken { id, generation: g }, n))
    }

    /// The lease's name if it is still live; [`RegistryError::StaleLease`] once released (R3).
    pub fn check(&self, token: LeaseToken) -> Result<Name, RegistryError> {
        match self.name_of(token.id) {
            Some((t, n)) if t == token => Ok(n),
            _ => Err(RegistryError::StaleLease {
                id: token.id,
                generation: token.generation,
            }),
        }
    }

    /// Calls `f` for every live namespace, in id order, with a consistent copy of its name (R4).
    pub fn for_each_live(&self, mut f: impl FnMut(LeaseToken, &Name)) {
        for id in 0..self.used(Ordering::Acquire) {
            if let Some((generation, name)) = self.read_live(self.slot(id)) {
                f(
                    LeaseToken {
                        id: id as u16,
                        generation,
                    },
                    &name,
                );
            }
        }
    }

    /// Number of live namespaces (a snapshot).
    pub fn live_count(&self) -> usize {
        self.states[..self.used(Ordering::Acquire)]
            .iter()
            .filter(|s| phase(s.load(Ordering::Relaxed)) == LIVE)
            .count()
    }

    /// Whether `id` is handed out dynamically here (and so can be quarantined, R7).
    pub fn is_dynamic(&self, id: u16) -> bool {
        id >= self.first_dynamic && (id as usize) < CAP
    }

    /// Generation of live slot `id`, or `None`: cheaper than reading the name.
    pub(crate) fn live_generation(&self, id: u16) -> Option<u32> {
        let s = self.states.get(id as usize)?.load(Ordering::Acquire);
        (phase(s) == LIVE).then_some(generation(s))
    }

    fn read_live(&self, slot: Slot<'_>) -> Option<(u32, Name)> {
        loop {
            // Acquire: pairs with the registrant's SeqCst (release) publication, so the name
            // words it wrote before are visible.
            let s = slot.state.load(Ordering::Acquire);
            if phase(s) != LIVE {
                return None;
            }
            let mut buf = [0u8; MAX_NAME_LEN];
            match slot.read_name(s, &mut buf) {
                Some(s2) if phase(s2) == LIVE => {
                    return Some((generation(s), Name::from_raw(name_len(s) as u8, buf)))
                }
                Some(_) => return None,
                None => spin_hint(),
            }
        }
    }
}

// SAFETY-free note: `Registry` is `Send + Sync` automatically: it holds only atomics and plain
// `Copy` data; every cross-thread handoff goes through the state word's orderings above.

// Init-once (`spin::Once`, no_std): the first use fixes the layout, the default unless a
// runtime called `init_global` first. Initialisation is the one place a thread may wait for
// another (while a concurrent first caller builds the table, once per process).
#[cfg(not(loom))]
static GLOBAL: spin::Once<Registry<256>> = spin::Once::new();

/// The process-global registry: 256 ids, well-known names honoured, and the default layout
/// (namespace in the top 8 bits) unless [`init_global`] chose another before first use.
/// Libraries sharing a UCX worker register here.
#[cfg(not(loom))]
pub fn global() -> &'static Registry<256> {
    GLOBAL.call_once(|| Registry::new(TagLayout::DEFAULT))
}

/// Why [`init_global`] refused a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalInitError {
    /// The global registry is already in use with another layout (its fingerprint).
    AlreadyInitialized {
        /// Fingerprint of the layout in use.
        fingerprint: u64,
    },
    /// The layout's namespace field holds fewer than the global registry's 256 ids.
    TooNarrow {
        /// Ids the layout can express.
        ids: u32,
    },
}

impl core::fmt::Display for GlobalInitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            GlobalInitError::AlreadyInitialized { fingerprint } => write!(
                f,
                "the global registry is already in use with another layout (fingerprint \
                 {fingerprint:#018x}); call init_global before anything registers"
            ),
            GlobalInitError::TooNarrow { ids } => write!(
                f,
                "the layout's namespace field holds {ids} ids; the global registry needs 256 \
                 (a namespace field of at least 8 bits)"
            ),
        }
    }
}

impl core::error::Error for GlobalInitError {}

/// Chooses the process-global registry's layout, for a runtime whose peers use another one
/// than the default. Call it before anything uses [`global`]; calling it again with the same
/// layout is fine.
#[cfg(not(loom))]
pub fn init_global(layout: TagLayout) -> Result<&'static Registry<256>, GlobalInitError> {
    if layout.id_capacity() < 256 {
        return Err(GlobalInitError::TooNarrow {
            ids: layout.id_capacity(),
        });
    }
    let r = GLOBAL.call_once(|| Registry::new(layout));
    if r.layout().fingerprint() != layout.fingerprint() {
        return Err(GlobalInitError::AlreadyInitialized {
            fingerprint: r.layout().fingerprint(),
        });
    }
    Ok(r)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::wellknown::FIRST_DYNAMIC_ID;

    fn reg() -> Registry<32> {
        Registry::new(TagLayout::builder(59, 5).build_or_panic())
    }

    #[test]
    fn ids_and_reservations() {
        let r = reg();
        let dask = r.register("dask").unwrap();
        assert_eq!(dask.id(), 2);
        let a = r.register("a").unwrap();
        assert_eq!(a.id(), FIRST_DYNAMIC_ID);
        assert_eq!(
            r.register("dask").unwrap_err(),
            RegistryError::DuplicateName
        );
        assert_eq!(r.register("a").unwrap_err(), RegistryError::DuplicateName);
        assert_eq!(
            r.register_at("x", 0).unwrap_err(),
            RegistryError::ReservedId { id: 0 }
        );
        assert_eq!(
            r.register_at("x", 1).unwrap_err(),
            RegistryError::ReservedId { id: 1 }
        );
        assert_eq!(
            r.register_at("x", 32).unwrap_err(),
            RegistryError::ReservedId { id: 32 }
        );
        assert_eq!(
            r.register_at("x", 9).unwrap_err(),
            RegistryError::ReservedId { id: 9 }
        );
        assert_eq!(
            r.register_at("cuml", 20).unwrap_err(),
            RegistryError::WellKnownId { expected: 5 }
        );
        assert_eq!(
            r.register_at("x", FIRST_DYNAMIC_ID).unwrap_err(),
            RegistryError::IdInUse {
                id: FIRST_DYNAMIC_ID
            }
        );
        let x = r.register_at("x", 30).unwrap();
        assert_eq!(x.id(), 30);
        assert_eq!(
            r.register_at("x", 31).unwrap_err(),
            RegistryError::DuplicateName
        );
        assert_eq!(
            r.register("").unwrap_err(),
            RegistryError::BadName(crate::NameError::Empty)
        );
    }

    #[test]
    fn exhaustion_is_an_error_and_release_reuses() {
        let r = reg();
        let mut held = std::vec::Vec::new();
        for i in 0..(32 - FIRST_DYNAMIC_ID as usize) {
            held.push(r.register(&std::format!("lib{i}")).unwrap());
        }
        assert_eq!(
            r.register("one-more").unwrap_err(),
            RegistryError::NamespaceExhausted { capacity: 32 }
        );
        let victim = held.remove(3);
        let (id, old) = (victim.id(), victim.token());
        drop(victim);
        assert!(r.check(old).is_err());
        let again = r.register("one-more").unwrap();
        assert_eq!(again.id(), id);
        assert_ne!(again.token(), old);
        assert_eq!(
            r.check(old).unwrap_err(),
            RegistryError::StaleLease {
                id,
                generation: old.generation
            }
        );
        assert_eq!(r.check(again.token()).unwrap().as_str(), "one-more");
    }

    #[test]
    fn lookups_and_epoch() {
        let r = reg();
        let e0 = r.epoch();
        let a = r.register("alpha").unwrap();
        assert!(r.epoch() > e0);
        assert_eq!(r.lookup("alpha"), Some(a.token()));
        assert_eq!(r.lookup("beta"), None);
        assert_eq!(r.lookup("not a name"), None);
        assert_eq!(r.name_of(a.id()).unwrap().1.as_str(), "alpha");
        assert_eq!(r.name_of(1000), None);
        assert_eq!(r.live_count(), 1);
        let e1 = r.epoch();
        drop(a);
        assert!(r.epoch() > e1);
        assert_eq!(r.live_count(), 0);
        assert_eq!(r.lookup("alpha"), None);
    }

    #[test]
    fn without_well_known_is_all_dynamic() {
        let r: Registry<4> = Registry::without_well_known(TagLayout::DEFAULT);
        let d = r.register("dask").unwrap();
        assert_eq!(d.id(), 2);
        let e = r.register("e").unwrap();
        assert_eq!(e.id(), 3);
        assert!(matches!(
            r.register("f"),
            Err(RegistryError::NamespaceExhausted { capacity: 4 })
        ));
        assert!(r.register_at("g", 2).is_err());
    }

    #[test]
    fn global_is_shared() {
        let a = global().register("tagspace-unit-test-global").unwrap();
        assert_eq!(
            global().lookup("tagspace-unit-test-global"),
            Some(a.token())
        );
    }

    #[test]
    fn send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Registry<32>>();
        assert_send_sync::<Namespace<'static, 256>>();
        assert_send_sync::<LeaseToken>();
    }
    extern crate std;
}
