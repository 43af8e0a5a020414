//! The pair field: tags of two different pairs never match each other's receives (whatever the
//! namespaces, payloads and values), a receive from any peer takes either, and the value reads
//! back from the tag. The control: on a layout without a pair field the same tags collide.

use proptest::prelude::*;
use tagspace_core::{Registry, TagLayout};

fn layouts() -> impl Strategy<Value = TagLayout> {
    prop_oneof![
        Just(TagLayout::DEFAULT),
        Just(TagLayout::builder(24, 8).pair(40, 24).build().unwrap()),
        Just(TagLayout::builder(0, 12).pair(12, 16).build().unwrap()),
        Just(TagLayout::builder(48, 16).pair(0, 32).build().unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn tags_of_two_pairs_never_match_each_others_receives(
        layout in layouts(),
        v1 in 1u32..,
        v2 in 1u32..,
        p1 in any::<u64>(),
        p2 in any::<u64>(),
    ) {
        let max = (1u64 << layout.pair_bits()) - 1;
        let (v1, v2) = ((v1 as u64 & max).max(1) as u32, (v2 as u64 & max).max(1) as u32);
        let reg: Registry<64> = Registry::new(layout);
        let ns = reg.register("lib").unwrap();
        let (p1, p2) = (p1 & layout.payload_mask(), p2 & layout.payload_mask());
        let (Ok(r1), Ok(r2)) = (ns.matcher_from(v1, p1), ns.matcher_from(v2, p2)) else {
            return Ok(()); // the reserved inbox payload
        };
        // what the peer given v2 sends for p2 is exactly r2's tag
        let sent = tagspace_core::Tag::from_raw(r2.tag());
        prop_assert_eq!(ns.pair_of(sent), v2);
        prop_assert_eq!(ns.payload_of(sent), p2);
        prop_assert!(r1.is_exact() && r2.is_exact(), "D1: full masks");
        if v1 != v2 {
            prop_assert!(!r1.matches(sent), "pair {v1:#x} took pair {v2:#x}'s tag {:#x}", sent.raw());
        }
        let any = ns.matcher_any_peer(p2).unwrap();
        prop_assert!(any.matches(sent));
        prop_assert!(!any.matches(tagspace_core::Tag::from_raw(r1.tag())) || p1 == p2);
    }

    /// Control: without a pair field, a receive meant for one sender takes any sender's tag for
    /// the same payload — the collision the pair field removes.
    #[test]
    fn without_a_pair_field_every_sender_makes_the_same_tag(p in 0u64..(1 << 40)) {
        let layout = TagLayout::builder(56, 8).build().unwrap();
        let reg: Registry<64> = Registry::new(layout);
        let ns = reg.register("lib").unwrap();
        let (r1, r2) = (ns.matcher_from(1, p).unwrap(), ns.matcher_from(2, p).unwrap());
        prop_assert!(r1.matches(tagspace_core::Tag::from_raw(r2.tag())));
    }
}
