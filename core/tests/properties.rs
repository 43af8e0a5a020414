//! Property tests for the tag algebra (T1–T5) and the wire codec (P5).
#![cfg(not(loom))]

use proptest::prelude::*;
use tagspace_core::layout::{Field, TagLayout, MAX_NAMESPACE_BITS, MIN_NAMESPACE_BITS};
use tagspace_core::wire::{self, CloseReason, Frame};
use tagspace_core::{overlap, LayoutError, Name, RawMatcher, Registry, Tag, TagError};

/// A valid namespace placement: (shift, width).
fn ns_placement() -> impl Strategy<Value = (u32, u32)> {
    (MIN_NAMESPACE_BITS..=MAX_NAMESPACE_BITS).prop_flat_map(|w| (0..=64 - w, Just(w)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// T1: every matcher a namespace makes covers its whole namespace field, and matches only
    /// tags carrying its id there.
    #[test]
    fn t1_matchers_cover_the_namespace(
        (shift, width) in ns_placement(),
        payload in any::<u64>(),
        payload_mask in any::<u64>(),
        probe in any::<u64>(),
        which in 0usize..3,
    ) {
        let layout = TagLayout::builder(shift, width).build().unwrap();
        let reg: Registry<32> = Registry::new(layout);
        let ns = reg.register("lib").unwrap();
        let payload = payload & layout.payload_mask();
        let m = match which {
            0 => ns.matcher(payload, payload_mask).unwrap(),
            1 => ns.matcher_any(),
            _ => match ns.matcher_exact(payload) { Ok(m) => m, Err(_) => ns.inbox_matcher() },
        };
        prop_assert_eq!(m.mask() & layout.namespace_mask(), layout.namespace_mask());
        if m.matches(Tag::from_raw(probe)) {
            prop_assert_eq!(layout.namespace_of(probe), ns.id());
        }
    }

    /// T2: matchers of two namespaces never overlap, whatever the payloads and masks.
    #[test]
    fn t2_namespaces_never_overlap(
        (shift, width) in ns_placement(),
        pa in any::<u64>(), ma in any::<u64>(),
        pb in any::<u64>(), mb in any::<u64>(),
    ) {
        let layout = TagLayout::builder(shift, width).build().unwrap();
        let reg: Registry<32> = Registry::new(layout);
        let a = reg.register("a").unwrap();
        let b = reg.register("b").unwrap();
        let x = a.matcher(pa & layout.payload_mask(), ma).unwrap();
        let y = b.matcher(pb & layout.payload_mask(), mb).unwrap();
        prop_assert_eq!(overlap(x.raw(), y.raw()), None);
    }

    /// T3: encode/decode round-trips; too-wide values and payloads in the namespace field are
    /// errors, never truncated.
    #[test]
    fn t3_no_silent_truncation(shift in 0u32..64, width in 1u32..=64, v in any::<u64>()) {
        prop_assume!(shift + width <= 64);
        let f = Field::new(shift, width).unwrap();
        match f.encode(v) {
            Ok(bits) => {
                prop_assert!(v <= f.max_value());
                prop_assert_eq!(f.decode(bits), v);
                prop_assert_eq!(bits & !f.mask(), 0);
            }
            Err(TagError::ValueTooWide { value, width: w }) => {
                prop_assert!(v > f.max_value());
                prop_assert_eq!((value, w), (v, width));
            }
            Err(e) => prop_assert!(false, "unexpected {e:?}"),
        }
    }

    #[test]
    fn t3_payload_never_truncated((shift, width) in ns_placement(), payload in any::<u64>()) {
        let layout = TagLayout::builder(shift, width).build().unwrap();
        let reg: Registry<32> = Registry::new(layout);
        let ns = reg.register("lib").unwrap();
        match ns.tag(payload) {
            Ok(t) => {
                prop_assert_eq!(ns.payload_of(t), payload);
                prop_assert_eq!(layout.namespace_of(t.raw()), ns.id());
            }
            Err(_) => prop_assert!(payload & layout.namespace_mask() != 0 || payload == layout.payload_mask()),
        }
    }

    /// T4: overlap returns a common tag exactly when brute force finds one. Masks are confined to
    /// the low 10 bits (tags are not), so 1024 candidates decide it.
    #[test]
    fn t4_overlap_agrees_with_brute_force(ta in any::<u64>(), ma in 0u64..1024, tb in any::<u64>(), mb in 0u64..1024) {
        let (a, b) = (RawMatcher::new(ta, ma), RawMatcher::new(tb, mb));
        let brute = (0..1024u64).find(|&low| a.matches(low) && b.matches(low));
        match overlap(a, b) {
            Some(w) => { prop_assert!(a.matches(w) && b.matches(w)); prop_assert!(brute.is_some()); }
            None => prop_assert_eq!(brute, None),
        }
        prop_assert_eq!(overlap(a, b).is_some(), (ta ^ tb) & ma & mb == 0);
    }

    /// T5: the builder accepts exactly the layouts a bit-by-bit reference accepts.
    #[test]
    fn t5_layout_validation_matches_reference(
        ns_shift in 0u32..70, ns_width in 0u32..20,
        fields in proptest::collection::vec((0u32..70, 0u32..70), 0..10),
    ) {
        let mut b = TagLayout::builder(ns_shift, ns_width);
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        for (i, &(s, w)) in fields.iter().enumerate() {
            b = b.field(names[i], s, w);
        }
        let got = b.build();
        // Reference: claim bits one by one.
        let mut ok = (MIN_NAMESPACE_BITS..=MAX_NAMESPACE_BITS).contains(&ns_width) && ns_shift + ns_width <= 64;
        let mut used = [false; 64];
        if ok { for bit in ns_shift..ns_shift + ns_width { used[bit as usize] = true; } }
        ok &= fields.len() <= 8;
        for &(s, w) in &fields {
            if !ok { break; }
            if w == 0 || s + w > 64 { ok = false; break; }
            for bit in s..s + w {
                if used[bit as usize] { ok = false; }
                used[bit as usize] = true;
            }
        }
        prop_assert_eq!(got.is_ok(), ok, "{:?}", got);
        if let Ok(l) = got {
            // accepted layouts decode what they encode
            for (_, f) in l.fields() { prop_assert_eq!(f.decode(f.mask()), f.max_value()); }
            prop_assert_eq!(l.namespace_field().width(), ns_width);
        } else if let Err(e) = got {
            // every rejection names a reason with a message
            prop_assert!(!e.to_string().is_empty());
            let _: LayoutError = e;
        }
    }

    /// P5: any bytes decode to a frame or an error, never a panic; a frame re-encodes to the
    /// same bytes.
    #[test]
    fn p5_any_bytes_decode_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(frame) = wire::decode(&bytes) {
            let mut out = vec![0u8; wire::MAX_FRAME_LEN];
            let n = frame.encode(&mut out).unwrap();
            prop_assert_eq!(&out[..n], &bytes[..]);
        }
    }

    /// P5: frames that start right still fail cleanly after any corruption.
    #[test]
    fn p5_corrupted_frames(id in 2u16..256, name in "[a-z]{1,64}", flip in 0usize..80, to in any::<u8>(), cut in 0usize..80) {
        let frame = Frame::Announce { id, name: Name::new(&name).unwrap() };
        let mut buf = [0u8; 128];
        let n = frame.encode(&mut buf).unwrap();
        prop_assert_eq!(wire::decode(&buf[..n]), Ok(frame));
        let mut bad = buf[..n].to_vec();
        let at = flip % n;
        bad[at] = to;
        let _ = wire::decode(&bad);
        let _ = wire::decode(&bad[..cut.min(n)]);
        let close = Frame::Close { reason: CloseReason::Other(to) };
        let n = close.encode(&mut buf).unwrap();
        let expect = match to { 0 => CloseReason::Normal, 1 => CloseReason::LayoutMismatch, 2 => CloseReason::ProtocolError, 3 => CloseReason::Superseded, 4 => CloseReason::Unproven, 5 => CloseReason::Flood, 6 => CloseReason::Unresponsive, b => CloseReason::Other(b) };
        prop_assert_eq!(wire::decode(&buf[..n]), Ok(Frame::Close { reason: expect }));
    }
}
