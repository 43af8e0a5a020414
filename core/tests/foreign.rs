//! F1: beside libraries that do not use tagspace. Whenever `reach` says a foreign pattern cannot
//! reach a layout's tags, no tag a namespace of that layout can build (any id, payload, inbox,
//! control acknowledgement) matches it; whenever it says it can, its witness is such a tag and
//! matches. The chooser's layouts pass that check for every pattern it was given.
#![cfg(not(loom))]

use proptest::prelude::*;
use tagspace_core::foreign::{self, choose_layout, ChooseError, Kind, FOREIGN};
use tagspace_core::layout::{Reach, TagLayout, MAX_NAMESPACE_BITS, MIN_NAMESPACE_BITS};
use tagspace_core::wire;
use tagspace_core::{RawMatcher, Registry};

/// A random valid layout: a namespace placement and up to 6 guard bits outside it.
fn layouts() -> impl Strategy<Value = TagLayout> {
    (MIN_NAMESPACE_BITS..=MAX_NAMESPACE_BITS)
        .prop_flat_map(|w| (0..=64 - w, Just(w), any::<u64>(), any::<u64>(), 0u32..=6))
        .prop_map(|(shift, width, pick, value, n)| {
            let ns = (u64::MAX >> (64 - width)) << shift;
            // take up to n bits of `pick` outside the namespace field
            let mut mask = 0u64;
            let mut bits = pick & !ns;
            for _ in 0..n {
                if bits == 0 {
                    break;
                }
                let b = bits & bits.wrapping_neg();
                mask |= b;
                bits &= !b;
            }
            let b = TagLayout::builder(shift, width);
            let b = if mask != 0 {
                b.guard(mask, value & mask)
            } else {
                b
            };
            b.build()
                .unwrap_or(TagLayout::builder(shift, width).build().unwrap())
        })
}

/// Foreign patterns that sometimes hit a layout and sometimes not: masks with few, many or
/// all bits, tags mostly zero (as real libraries' small tags are) or random.
fn patterns() -> impl Strategy<Value = RawMatcher> {
    (any::<u64>(), any::<u64>(), 0usize..4, 0usize..3).prop_map(|(t, m, mk, tk)| {
        let mask = match mk {
            0 => m,
            1 => m & m.rotate_left(7) & m.rotate_left(19), // sparse
            2 => m | m.rotate_left(11),                    // dense
            _ => u64::MAX << (m % 64),                     // a top block, as BlazingSQL's
        };
        let tag = match tk {
            0 => 0,
            1 => t & m.rotate_left(3),
            _ => t,
        };
        RawMatcher::new(tag, mask)
    })
}

/// Tags of namespace `id` a layout's registry builds: data tags with assorted payloads, the
/// inbox, and (for the control id) an acknowledgement tag.
fn built_tags(layout: &TagLayout, id: u16, payload: u64) -> Vec<u64> {
    let p = payload & layout.payload_mask();
    let base = layout.base(id);
    let mut tags = vec![
        base | p,
        base,
        base | layout.payload_mask(), // the inbox
        base | (p & 0xffff_ffff),
        base | (p & 0xff),
    ];
    if id == 1 {
        tags.push(wire::ack_tag(layout, 17, (payload >> 32) as u32 | 1));
    }
    tags
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn reach_is_exact(layout in layouts(), pattern in patterns(), id in 1u16..=u16::MAX, payload in any::<u64>()) {
        let id = id & (layout.id_capacity() - 1) as u16;
        let id = id.max(1);
        match layout.reach(pattern) {
            Reach::Reaches { id: hit, witness } => {
                prop_assert!(hit != 0);
                prop_assert!(pattern.matches(witness), "{witness:#x}");
                prop_assert!(layout.space(hit).matches(witness), "witness outside namespace {hit}");
                prop_assert_eq!(layout.namespace_of(witness), hit);
            }
            why => {
                for tag in built_tags(&layout, id, payload) {
                    prop_assert!(!pattern.matches(tag), "{why}: but {tag:#018x} matches");
                }
                // and the registry's own tags, through the public API
                let reg: Registry<32> = Registry::new(layout);
                let ns = reg.register("lib").unwrap();
                let p = payload & layout.payload_mask();
                if let Ok(t) = ns.tag(p) {
                    prop_assert!(!pattern.matches(t.raw()));
                }
                prop_assert!(!pattern.matches(ns.inbox().raw()));
            }
        }
    }

    /// On small layouts, brute force over every id and a sweep of payloads agrees with reach.
    #[test]
    fn reach_agrees_with_a_search(layout in layouts(), pattern in patterns()) {
        let reachable = (1..layout.id_capacity()).any(|id| {
            let base = layout.base(id as u16);
            // the pattern fixes some payload bits; the best payload copies them
            let p = pattern.tag & pattern.mask & layout.payload_mask();
            pattern.matches(base | p)
        });
        prop_assert_eq!(layout.reach(pattern).is_reachable(), reachable);
    }

    /// A layout SPEC comes from configs and command lines: any string parses to a layout or
    /// a clear error, never a panic; a layout written out reads back the same.
    #[test]
    fn any_spec_string_parses_or_errs(spec in "(ns=|guard=|[a-z]{1,4}=)?[0-9a-fx_/:,=]{0,40}", layout in layouts()) {
        match TagLayout::parse_spec(&spec) {
            Ok(l) => {
                let again = l.spec().to_string();
                prop_assert_eq!(TagLayout::parse_spec(&again), Ok(l));
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let text = layout.spec().to_string();
        prop_assert_eq!(TagLayout::parse_spec(&text), Ok(layout));
    }

    #[test]
    fn chosen_layouts_keep_every_pattern_out(
        ps in proptest::collection::vec(patterns(), 1..6),
        width in prop_oneof![Just(8u32), MIN_NAMESPACE_BITS..=12],
    ) {
        match choose_layout(&ps, width, &[]) {
            Ok(layout) => {
                prop_assert_eq!(layout.namespace_field().width(), width);
                for p in &ps {
                    prop_assert!(!layout.reach(*p).is_reachable(), "{p:?} reaches {layout:?}");
                }
                let named: Vec<_> = ps.iter().map(|p| ("p", *p)).collect();
                prop_assert_eq!(foreign::check(&layout, &named), Ok(()));
                // and it reads back from its own spec
                let spec = layout.spec().to_string();
                prop_assert_eq!(TagLayout::parse_spec(&spec), Ok(layout));
            }
            Err(ChooseError::FullWildcard { index }) => prop_assert_eq!(ps[index].mask, 0),
            // two one-bit patterns that want both values of the same bit match every tag
            // between them: no layout exists
            Err(ChooseError::NoLayout) if ps.iter().any(|p| {
                p.mask.count_ones() == 1
                    && ps.iter().any(|q| q.mask == p.mask && q.tag & q.mask != p.tag & p.mask)
            }) => {}
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}

#[test]
fn default_layout_is_reached_by_rapidsmpf_and_a_chosen_one_is_not() {
    let rapidsmpf = foreign::preset("rapidsmpf").unwrap();
    let blazing = foreign::preset("blazingsql").unwrap();
    // rapidsmpf's recv_any(5) takes a default-layout tag whose low 32 bits are 5
    let hit = TagLayout::DEFAULT.reach(rapidsmpf.pattern);
    assert!(hit.is_reachable(), "{hit}");
    let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
    let ns = reg.register("lib").unwrap();
    assert!(RawMatcher::new(5, 0xffff_ffff).matches(ns.tag(5).unwrap().raw()));
    // the default layout already keeps BlazingSQL's probe out: it wants the top 16 bits zero
    assert_eq!(
        TagLayout::DEFAULT.reach(blazing.pattern),
        Reach::UnmanagedOnly
    );

    let one = choose_layout(&[rapidsmpf.pattern], 8, &[]).unwrap();
    assert_eq!(one.spec().to_string(), "ns=24:8,pair=40:24");
    assert_eq!(one.reach(rapidsmpf.pattern), Reach::UnmanagedOnly);

    let both = choose_layout(&[rapidsmpf.pattern, blazing.pattern], 8, &[]).unwrap();
    assert_eq!(both.guard_mask().count_ones(), 1, "{both:?}");
    for p in [rapidsmpf, blazing] {
        assert!(!both.reach(p.pattern).is_reachable());
    }
    // a 32-bit sequence field moves the namespace rather than splitting the payload
    let seq = choose_layout(&[rapidsmpf.pattern, blazing.pattern], 8, &[("seq", 32)]).unwrap();
    assert!(seq.field("seq").is_some());
    for p in [rapidsmpf, blazing] {
        assert!(!seq.reach(p.pattern).is_reachable(), "{seq:?}");
    }
    let err = foreign::check(&TagLayout::DEFAULT, &[("rapidsmpf", rapidsmpf.pattern)]).unwrap_err();
    assert!(err.to_string().contains("rapidsmpf"), "{err}");
}

#[test]
fn chooser_regressions() {
    let ps = [
        RawMatcher::new(0x4008_0a88_0000_0000, 0xff80_0000_0000_0000),
        RawMatcher::new(0x8000_0000_0000_0000, 0x8000_0000_0000_0000),
    ];
    let l = choose_layout(&ps, 8, &[]).unwrap();
    for p in ps {
        assert!(!l.reach(p).is_reachable());
    }
}

#[test]
fn full_wildcards_cannot_be_avoided() {
    let any = RawMatcher::new(0, 0);
    assert_eq!(
        choose_layout(&[RawMatcher::new(0, 1), any], 8, &[]),
        Err(ChooseError::FullWildcard { index: 1 })
    );
    for row in FOREIGN {
        if row.kind == Kind::Wildcard {
            assert_eq!(row.avoidable(), row.pattern.mask != 0, "{}", row.preset);
        }
    }
    // every avoidable row but NCCL's plugin (whose workers are its own) is avoided by one
    // layout, all of them together; with NCCL's too none exists: it needs bit 31 clear, and
    // MPICH's point-to-point and active-message families then differ only in bit 30
    let mut all: Vec<_> = FOREIGN
        .iter()
        .filter(|r| r.avoidable())
        .map(|r| r.pattern)
        .collect();
    assert_eq!(choose_layout(&all, 8, &[]), Err(ChooseError::NoLayout));
    all.retain(|p| *p != foreign::preset("nccl-ucx").unwrap().pattern);
    let l = choose_layout(&all, 8, &[]).unwrap();
    for p in &all {
        assert!(!l.reach(*p).is_reachable(), "{p:?}: {l:?}");
    }
}

/// The table in `FOREIGN.md` lists the same rows as the core's table.
#[test]
fn foreign_md_matches_the_table() {
    let md = include_str!("../FOREIGN.md");
    let rows: Vec<Vec<String>> = md
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), FOREIGN.len(), "FOREIGN.md rows: {rows:?}");
    for (row, p) in rows.iter().zip(FOREIGN) {
        assert_eq!(row[0], p.preset);
        assert_eq!(row[1], p.library, "{}", p.preset);
        assert_eq!(row[2], p.versions, "{}", p.preset);
        assert_eq!(
            row[3],
            format!("{:#x}/{:#x}", p.pattern.tag, p.pattern.mask),
            "{}",
            p.preset
        );
        assert_eq!(row[4], if p.removes { "yes" } else { "no" }, "{}", p.preset);
        assert_eq!(row[5], p.avoidable_text(), "{}", p.preset);
        assert!(
            row[6].contains(p.source),
            "{}: {} vs {}",
            p.preset,
            row[6],
            p.source
        );
    }
}
