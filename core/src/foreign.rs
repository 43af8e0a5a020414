//! Beside libraries that do not use tagspace (invariant F1): the tag patterns their receives
//! and probes can take, checking a layout against them, and choosing a layout that keeps every
//! tag tagspace builds out of their reach.
//!
//! tagspace keeps *its* libraries apart by construction (full masks, matchers that cannot leave
//! a namespace). A library that does not use it can still post a wildcard receive or a probe
//! with remove on the same worker, and take whatever matches. Each such family of calls is
//! described here by one [`RawMatcher`] that over-approximates it: every tag any of its calls
//! can take matches the pattern. A layout is safe beside it when no tag tagspace can build
//! matches the pattern ([`TagLayout::reach`] decides it exactly, with a witness either way).
//! Full wildcards (mask 0) take anything: no layout avoids them, and the table says so.
//!
//! ```
//! use tagspace_core::foreign::{self, choose_layout};
//! use tagspace_core::TagLayout;
//!
//! let rapidsmpf = foreign::preset("rapidsmpf").unwrap();
//! // the default layout is not safe beside rapidsmpf's recv_any...
//! assert!(TagLayout::DEFAULT.reach(rapidsmpf.pattern).is_reachable());
//! // ...one chosen against it is; a program checks that at start-up:
//! let layout = choose_layout(&[rapidsmpf.pattern], 8, &[]).unwrap();
//! assert_eq!(foreign::check(&layout, &[(rapidsmpf.preset, rapidsmpf.pattern)]), Ok(()));
//! ```
//!
//! The table is checked in twice, here and in `FOREIGN.md` (with its sources); a test keeps the
//! two the same.

use crate::layout::{
    Reach, TagLayout, DEFAULT_PAIR_BITS, MAX_FIELDS, MAX_NAMESPACE_BITS, MIN_NAMESPACE_BITS,
    MIN_PAIR_BITS,
};
use crate::matcher::RawMatcher;
use crate::LayoutError;
use core::cmp::Reverse;
use core::fmt;

/// One family of receives or probes of a library that does not use tagspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignPattern {
    /// The name `tagspace layout --against` and [`preset`] take.
    pub preset: &'static str,
    /// The library.
    pub library: &'static str,
    /// The versions read.
    pub versions: &'static str,
    /// The call, as its source writes it.
    pub call: &'static str,
    /// Where it is in the library's public source.
    pub source: &'static str,
    /// A pattern every tag its calls can take matches (the widest of the family).
    pub pattern: RawMatcher,
    /// Whether it takes messages (a receive, or a probe with remove) rather than only peeking.
    pub removes: bool,
    /// What kind of family it is.
    pub kind: Kind,
}

/// What kind of family a row describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Receives or probes that may take any tag the pattern matches.
    Wildcard,
    /// Full-mask receives, each of one tag drawn at random (64 bits) per connection: the family
    /// spans every tag (its pattern is `0/0`), but each receive takes only its own tag, so a
    /// tagspace message is taken only on a 64-bit coincidence. No layout is needed, or could
    /// help.
    RandomFullMask,
}

impl ForeignPattern {
    /// Whether some layout keeps tagspace's tags out of its reach: every wildcard family but a
    /// full wildcard (mask 0).
    pub const fn avoidable(&self) -> bool {
        matches!(self.kind, Kind::Wildcard) && self.pattern.mask != 0
    }

    /// The column `FOREIGN.md` shows for [`ForeignPattern::avoidable`].
    pub const fn avoidable_text(&self) -> &'static str {
        match self.kind {
            Kind::RandomFullMask => "not needed",
            Kind::Wildcard if self.pattern.mask != 0 => "yes",
            Kind::Wildcard => "no",
        }
    }
}

/// The table (see `FOREIGN.md` for the evidence of each row). Sorted by preset name.
pub const FOREIGN: &[ForeignPattern] = &[
    ForeignPattern {
        preset: "blazingsql",
        library: "BlazingSQL",
        versions: "21.08",
        call: "ucp_tag_probe_nb(worker, 0, begin_tag_mask 0xFFFF000000000000), then a receive of the tag found",
        source: "engine/src/communication/CommunicationInterface/messageListener.cpp",
        pattern: RawMatcher::new(0, 0xffff_0000_0000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "mpich",
        library: "MPICH ch4/ucx",
        versions: "5.1.0a1",
        call: "MPIDI_UCX_recv / improbe with MPI_ANY_SOURCE and MPI_ANY_TAG (point-to-point: bits 30..31 zero)",
        source: "src/mpid/ch4/netmod/ucx/ucx_impl.h",
        pattern: RawMatcher::new(0, 0xc000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "mpich-am",
        library: "MPICH ch4/ucx",
        versions: "5.1.0a1",
        call: "active-message tag receives (protocol bits 30..31 = 01)",
        source: "src/mpid/ch4/netmod/ucx/ucx_impl.h",
        pattern: RawMatcher::new(0x4000_0000, 0xc000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "mpich-dynproc",
        library: "MPICH ch4/ucx",
        versions: "5.1.0a1",
        call: "MPIDI_UCX_dynamic_recv (protocol bits 30..31 = 10)",
        source: "src/mpid/ch4/netmod/ucx/ucx_spawn.c",
        pattern: RawMatcher::new(0x8000_0000, 0xffff_ffff_c000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "nccl-ucx",
        library: "NCCL UCX plugin",
        versions: "2.7-dev",
        call: "nccl_ucx_irecv and ucx_send_check (probe with remove), full masks; low 32 bits are 0x8a000000 plus a counter",
        source: "src/ucx_plugin.c",
        pattern: RawMatcher::new(0x8000_0000, 0x8000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "openmpi",
        library: "Open MPI pml/ucx",
        versions: "5.0, 6.1-dev",
        call: "user receives and probes with MPI_ANY_SOURCE / MPI_ANY_TAG (bit 63 zero); internal collectives' negative tags are not covered",
        source: "ompi/mca/pml/ucx/pml_ucx_request.h",
        pattern: RawMatcher::new(0, 0x8000_0000_0000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "raft",
        library: "RAFT comms",
        versions: "26.08",
        call: "std_comms::irecv, full mask on ((uint32_t)tag << 31) | rank: bits 32..63 zero",
        source: "cpp/include/raft/comms/detail/ucp_helper.hpp",
        pattern: RawMatcher::new(0, 0xffff_ffff_0000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "rapidsmpf",
        library: "rapidsmpf",
        versions: "26.10",
        call: "UCXX::recv_any: tagProbe(tag, UserTagMask 0xFFFFFFFF, remove=true), tag = op << 3 | stage (below 2^23)",
        source: "cpp/src/communicator/ucxx.cpp",
        pattern: RawMatcher::new(0, 0xff80_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "spark-ucx",
        library: "Spark-UCX",
        versions: "1.0",
        call: "UcxListenerThread.recvRequest: recvTaggedNonBlocking with tag 0, mask 0",
        source: "src/main/java/org/apache/spark/shuffle/ucx/rpc/UcxListenerThread.java",
        pattern: RawMatcher::new(0, 0),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "ucc",
        library: "UCC tl_ucp",
        versions: "1.10-dev",
        call: "every tl_ucp receive, full mask (UCC_TL_UCP_MAKE_RECV_TAG): bits 61 and 63 zero",
        source: "src/components/tl/ucp/tl_ucp_sendrecv.h",
        pattern: RawMatcher::new(0, 0xa000_0000_0000_0000),
        removes: true,
        kind: Kind::Wildcard,
    },
    ForeignPattern {
        preset: "ucxx",
        library: "ucxx, distributed-ucxx",
        versions: "0.52",
        call: "Endpoint.recv / tag_probe on a random 64-bit tag per endpoint, full mask",
        source: "python/ucxx/ucxx/_lib_async/endpoint.py",
        pattern: RawMatcher::new(0, 0),
        removes: true,
        kind: Kind::RandomFullMask,
    },
    ForeignPattern {
        preset: "ucxx-drain",
        library: "ucxx",
        versions: "0.52",
        call: "Worker::drainWorkerTagRecv: ucp_tag_probe_nb(worker, 0, 0, remove=1) in ~Worker",
        source: "cpp/src/worker.cpp",
        pattern: RawMatcher::new(0, 0),
        removes: true,
        kind: Kind::Wildcard,
    },
];

/// The row named `name`.
pub fn preset(name: &str) -> Option<&'static ForeignPattern> {
    FOREIGN.iter().find(|p| p.preset == name)
}

/// A layout that a declared foreign pattern can reach: the pattern's name, the pattern and the
/// tagspace tag that proves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsafe<'a> {
    /// The name the program gave the pattern.
    pub name: &'a str,
    /// The pattern.
    pub pattern: RawMatcher,
    /// A managed namespace it reaches.
    pub id: u16,
    /// A tag tagspace can build there that it matches.
    pub witness: u64,
}

impl fmt::Display for Unsafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the tag layout is not safe beside {} ({:#x}/{:#x}): it can take tagspace's tag \
             {:#018x} (namespace {}); choose one with `tagspace layout --against`",
            self.name, self.pattern.tag, self.pattern.mask, self.witness, self.id
        )
    }
}

impl core::error::Error for Unsafe<'_> {}

/// Checks at start-up that no declared pattern can reach a tag `layout` builds (F1); the error
/// names the first one that can, with a witness. A `const fn`, so a layout fixed at compile
/// time can be checked in a `const` too.
pub const fn check<'a>(
    layout: &TagLayout,
    patterns: &[(&'a str, RawMatcher)],
) -> Result<(), Unsafe<'a>> {
    let mut i = 0;
    while i < patterns.len() {
        let (name, pattern) = patterns[i];
        if let Reach::Reaches { id, witness } = layout.reach(pattern) {
            return Err(Unsafe {
                name,
                pattern,
                id,
                witness,
            });
        }
        i += 1;
    }
    Ok(())
}

/// Why [`choose_layout`] found no layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChooseError {
    /// Pattern `index` is a full wildcard (mask 0): it takes any tag, no layout avoids it.
    FullWildcard {
        /// Its index in the list given.
        index: usize,
    },
    /// The namespace width is outside the supported range.
    Width {
        /// The width asked for.
        width: u32,
    },
    /// More named fields than a layout holds.
    TooManyFields,
    /// No layout found leaves room for named field `index` (`width` bits, contiguous) beside
    /// the namespace field and the guard bits the patterns need.
    NoRoom {
        /// Its index in the list given.
        index: usize,
        /// Its width.
        width: u32,
    },
    /// No layout found keeps every pattern out of reach: between them the patterns fix the
    /// only bits some of them fix to every value (say one needs bit 31 set and two others need
    /// it clear and differ only in bit 30), or they need more than [`MAX_GUARD_BITS`].
    NoLayout,
    /// A field is not valid (a bad name, say).
    Layout(LayoutError),
}

impl fmt::Display for ChooseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ChooseError::FullWildcard { index } => write!(
                f,
                "pattern #{index} is a full wildcard (mask 0): it takes any tag, and no layout \
                 can avoid it"
            ),
            ChooseError::Width { width } => write!(
                f,
                "namespace width {width} is outside {MIN_NAMESPACE_BITS}..={MAX_NAMESPACE_BITS}"
            ),
            ChooseError::TooManyFields => {
                write!(f, "a layout holds at most {MAX_FIELDS} named fields")
            }
            ChooseError::NoRoom { index, width } => write!(
                f,
                "no layout leaves {width} contiguous bits for field #{index} beside the \
                 namespace field and the guard bits these patterns need"
            ),
            ChooseError::NoLayout => write!(
                f,
                "no layout keeps all of these patterns out of reach: between them they fix the \
                 only bits some of them fix to every value (or need more than {MAX_GUARD_BITS} \
                 guard bits); leave out the library whose worker is not shared"
            ),
            ChooseError::Layout(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for ChooseError {}

/// Most guard bits [`choose_layout`] will spend.
pub const MAX_GUARD_BITS: u32 = 16;

/// A layout with a `width`-bit namespace field under which none of `patterns` can reach a tag
/// tagspace builds (F1), with the named `fields` (`(name, width)`, placed in declaration order
/// in the lowest free run of bits that fits) and a pair field (24 bits where they are free,
/// down to 16, in the highest free run: see [`TagLayout::pair_field`]). Full wildcards are
/// refused.
///
/// It tries every position of the namespace field: one that a pattern fixes to zero puts the
/// pattern out of reach for free (only the unmanaged id 0 is left); each pattern still in reach
/// then gets a guard bit — chosen greedily, each bit the one that puts the most remaining
/// patterns out of reach. Among the layouts found it keeps the one with the fewest guard bits,
/// then the longest run of free bits from bit 0 (where small payloads live), then the longest
/// run anywhere, then the default position, then the highest position.
pub fn choose_layout(
    patterns: &[RawMatcher],
    width: u32,
    fields: &[(&str, u32)],
) -> Result<TagLayout, ChooseError> {
    if !(MIN_NAMESPACE_BITS..=MAX_NAMESPACE_BITS).contains(&width) {
        return Err(ChooseError::Width { width });
    }
    if let Some(index) = patterns.iter().position(|p| p.mask == 0) {
        return Err(ChooseError::FullWildcard { index });
    }
    if fields.len() > MAX_FIELDS {
        return Err(ChooseError::TooManyFields);
    }
    let default_shift = TagLayout::DEFAULT.namespace_field().shift();
    let mut best: Option<(Score, TagLayout)> = None;
    let mut first_error = None;
    for shift in 0..=64 - width {
        let ns_mask = (u64::MAX >> (64 - width)) << shift;
        match candidate(patterns, ns_mask, shift, width, fields) {
            Ok(layout) => {
                let used = layout.fixed_mask() | layout.pair_mask() | fields_mask(&layout);
                let score = Score {
                    guards: layout.guard_mask().count_ones(),
                    low_run: Reverse((!used).trailing_ones()),
                    run: Reverse(longest_run(!used)),
                    not_default: shift != default_shift,
                    lower: 64 - shift,
                };
                if best.as_ref().is_none_or(|(b, _)| score < *b) {
                    best = Some((score, layout));
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match best {
        Some((_, layout)) => Ok(layout),
        None => Err(first_error.unwrap_or(ChooseError::NoLayout)),
    }
}

/// Smaller is better.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Score {
    guards: u32,
    low_run: Reverse<u32>,
    run: Reverse<u32>,
    not_default: bool,
    lower: u32,
}

fn fields_mask(layout: &TagLayout) -> u64 {
    layout.fields().fold(0, |m, (_, f)| m | f.mask())
}

/// The longest run of set bits in `bits`.
fn longest_run(mut bits: u64) -> u32 {
    let mut best = 0;
    while bits != 0 {
        let start = bits.trailing_zeros();
        let len = (bits >> start).trailing_ones();
        best = best.max(len);
        bits &= !((u64::MAX >> (64 - len)) << start);
    }
    best
}

/// The layout with the namespace field at `shift`, guard bits for every pattern the field does
/// not already put out of reach, and the named fields.
fn candidate(
    patterns: &[RawMatcher],
    ns_mask: u64,
    shift: u32,
    width: u32,
    fields: &[(&str, u32)],
) -> Result<TagLayout, ChooseError> {
    // patterns still in reach: those that do not fix the whole namespace field to 0
    let mut open: u64 = 0; // bit i: pattern i is open (at most 64 patterns)
    if patterns.len() > 64 {
        return Err(ChooseError::NoLayout);
    }
    for (i, p) in patterns.iter().enumerate() {
        if !(p.mask & ns_mask == ns_mask && p.tag & ns_mask == 0) {
            open |= 1 << i;
        }
    }
    let (mut guard_mask, mut guard_value) = (0u64, 0u64);
    while open != 0 {
        if guard_mask.count_ones() >= MAX_GUARD_BITS {
            return Err(ChooseError::NoLayout);
        }
        // the greedy pick: its key (patterns closed, low run, run, bit), the bit, its value
        let mut pick: Option<(PickKey, u64, u64)> = None;
        for bit in 0..64u32 {
            let b = 1u64 << bit;
            if (ns_mask | guard_mask) & b != 0 {
                continue;
            }
            for value in [b, 0] {
                let closes = patterns
                    .iter()
                    .enumerate()
                    .filter(|&(i, p)| open >> i & 1 == 1 && p.mask & b != 0 && p.tag & b != value)
                    .count() as u32;
                if closes == 0 {
                    continue;
                }
                let free = !(ns_mask | guard_mask | b);
                // never strand a pattern: each one left open must keep a free bit to guard
                let strands = patterns.iter().enumerate().any(|(i, p)| {
                    open >> i & 1 == 1
                        && !(p.mask & b != 0 && p.tag & b != value)
                        && p.mask & free == 0
                });
                if strands {
                    continue;
                }
                let key = (closes, free.trailing_ones(), longest_run(free), bit);
                if pick.is_none_or(|(k, _, _)| key > k) {
                    pick = Some((key, b, value));
                }
            }
        }
        let Some((_, b, value)) = pick else {
            return Err(ChooseError::NoLayout);
        };
        guard_mask |= b;
        guard_value |= value;
        for (i, p) in patterns.iter().enumerate() {
            if p.mask & b != 0 && p.tag & b != value {
                open &= !(1 << i);
            }
        }
    }
    let mut builder = TagLayout::builder(shift, width);
    if guard_mask != 0 {
        builder = builder.guard(guard_mask, guard_value);
    }
    let mut used = ns_mask | guard_mask;
    for (index, &(name, w)) in fields.iter().enumerate() {
        let at = lowest_fit(!used, w).ok_or(ChooseError::NoRoom { index, width: w })?;
        builder = builder.field(name, at, w);
        used |= (u64::MAX >> (64 - w)) << at;
    }
    // The pair field (unguessable tags per pair of processes): as wide as the default where it
    // fits, in the highest free bits (small payloads live low). Its bits take any value, so a
    // pattern the namespace field or a guard bit keeps out stays out whatever they hold.
    let pair = (MIN_PAIR_BITS..=DEFAULT_PAIR_BITS)
        .rev()
        .find_map(|w| highest_fit(!used, w).map(|at| (at, w)));
    let Some((at, w)) = pair else {
        return Err(ChooseError::NoLayout);
    };
    builder = builder.pair(at, w);
    builder.build().map_err(|e| match e {
        LayoutError::GuardTooWide { .. } => ChooseError::NoLayout,
        e => ChooseError::Layout(e),
    })
}

/// How good a guard bit is: patterns it puts out of reach, then the free run from bit 0 and the
/// longest free run it leaves, then the higher bit.
type PickKey = (u32, u32, u32, u32);

/// The highest bit where `width` free bits start.
fn highest_fit(free: u64, width: u32) -> Option<u32> {
    if width == 0 || width > 64 {
        return None;
    }
    let want = u64::MAX >> (64 - width);
    (0..=64 - width)
        .rev()
        .find(|&at| (free >> at) & want == want)
}

/// The lowest bit where `width` free bits start.
fn lowest_fit(free: u64, width: u32) -> Option<u32> {
    if width == 0 || width > 64 {
        return None;
    }
    let want = u64::MAX >> (64 - width);
    (0..=64 - width).find(|&at| (free >> at) & want == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        for w in FOREIGN.windows(2) {
            assert!(w[0].preset < w[1].preset, "{} {}", w[0].preset, w[1].preset);
        }
    }
}
