//! The ABI called the way C calls it: raw pointers, status codes, the last-error message.

use super::*;
use std::ptr::{null, null_mut};

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: a 512-byte buffer.
    let n = unsafe { tagspace_last_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: `copy_out` NUL-terminated it.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    assert!(n >= s.to_bytes().len());
    s.to_string_lossy().into_owned()
}

fn strerror(code: tagspace_status_t) -> String {
    // SAFETY: static, NUL-terminated.
    unsafe { CStr::from_ptr(tagspace_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

fn private(width: u32, well_known: bool) -> *mut tagspace_registry_t {
    let mut opts = std::mem::MaybeUninit::uninit();
    let mut reg = null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        tagspace_layout_options_init(opts.as_mut_ptr());
        let mut opts = opts.assume_init();
        opts.namespace_shift = 64 - width;
        opts.namespace_width = width;
        opts.well_known = well_known as u32;
        assert_eq!(tagspace_registry_new(&opts, &mut reg), TAGSPACE_OK);
    }
    reg
}

fn register(reg: *const tagspace_registry_t, name: &CStr) -> *mut tagspace_namespace_t {
    let mut ns = null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { tagspace_register(reg, name.as_ptr(), &mut ns) };
    assert_eq!(rc, TAGSPACE_OK, "{}", last_error());
    ns
}

fn id_of(ns: *const tagspace_namespace_t) -> u16 {
    let mut id = 0;
    // SAFETY: valid pointers.
    assert_eq!(unsafe { tagspace_namespace_id(ns, &mut id) }, TAGSPACE_OK);
    id
}

#[test]
fn every_status_has_a_description() {
    for code in [
        TAGSPACE_OK,
        TAGSPACE_ERR_NULL_ARGUMENT,
        TAGSPACE_ERR_BAD_STRUCT_SIZE,
        TAGSPACE_ERR_BAD_LAYOUT,
        TAGSPACE_ERR_BAD_NAME,
        TAGSPACE_ERR_DUPLICATE_NAME,
        TAGSPACE_ERR_EXHAUSTED,
        TAGSPACE_ERR_QUARANTINED,
        TAGSPACE_ERR_ID_IN_USE,
        TAGSPACE_ERR_RESERVED_ID,
        TAGSPACE_ERR_WELL_KNOWN_ID,
        TAGSPACE_ERR_VALUE_TOO_WIDE,
        TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE,
        TAGSPACE_ERR_RESERVED_INBOX,
        TAGSPACE_ERR_NOT_FOUND,
        TAGSPACE_ERR_GLOBAL_IN_USE,
        TAGSPACE_ERR_UCX,
        TAGSPACE_ERR_NOT_CONNECTED,
        TAGSPACE_ERR_NOT_ANNOUNCED,
        TAGSPACE_ERR_MISUSE,
        TAGSPACE_ERR_NO_SUCH_LIBRARY,
        TAGSPACE_ERR_INTERNAL,
    ] {
        assert_ne!(strerror(code), strerror(-12345), "code {code}");
    }
    assert_eq!(tagspace_abi_version(), TAGSPACE_ABI_VERSION);
    // SAFETY: static, NUL-terminated.
    let v = unsafe { CStr::from_ptr(tagspace_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn register_tag_and_release_through_the_abi() {
    let reg = private(8, true);
    let a = register(reg, c"lib.a");
    let raft = register(reg, c"raft");
    assert_eq!(id_of(raft), 6, "well-known ids are honoured");
    let id = id_of(a);
    assert!(id >= 16, "dynamic ids start at 16, got {id}");

    let mut tag = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(tagspace_tag(a, 0x1234, &mut tag), TAGSPACE_OK);
        assert_eq!(tag, (id as u64) << 56 | 0x1234);
        assert_eq!(tagspace_owns(a, tag), 1);
        assert_eq!(tagspace_owns(raft, tag), 0);
        assert_eq!(tagspace_payload_of(a, tag), 0x1234);

        // T3: never truncated; the inbox payload is reserved.
        assert_eq!(
            tagspace_tag(a, 1 << 60, &mut tag),
            TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE
        );
        assert!(
            last_error().contains("0x1000000000000000"),
            "{}",
            last_error()
        );
        assert_eq!(
            tagspace_tag(a, (1 << 32) - 1, &mut tag),
            TAGSPACE_ERR_RESERVED_INBOX
        );
        assert_eq!(
            tagspace_tag(a, 1 << 32, &mut tag),
            TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE,
            "bit 32 is the pair field's"
        );
        let mut inbox = 0;
        assert_eq!(tagspace_inbox_tag(a, &mut inbox), TAGSPACE_OK);
        assert_eq!(inbox, (id as u64) << 56 | ((1 << 32) - 1));

        let mut m = tagspace_matcher_t::default();
        assert_eq!(tagspace_matcher_exact(a, 7, &mut m), TAGSPACE_OK);
        assert_eq!(m.mask, u64::MAX);
        assert_eq!(tagspace_matches(m, (id as u64) << 56 | 7), 1);
        assert_eq!(tagspace_matcher(a, 0x100, 0xF00, &mut m), TAGSPACE_OK);
        assert_eq!(m.mask, 0xFF00_0000_0000_0F00);
        assert_eq!(tagspace_matches(m, (id as u64) << 56 | 0x1FF), 1);
        assert_eq!(tagspace_matches(m, 6 << 56 | 0x1FF), 0);
        let mut any = tagspace_matcher_t::default();
        assert_eq!(tagspace_matcher_any(raft, &mut any), TAGSPACE_OK);
        let mut w = 0;
        assert_eq!(
            tagspace_overlap(m, any, &mut w),
            0,
            "namespaces are disjoint"
        );

        let fi = tagspace_matcher_to_libfabric(m);
        assert_eq!(fi.ignore, !m.mask);
        assert_eq!(tagspace_matcher_from_libfabric(fi), m);

        let mut am = 0;
        assert_eq!(tagspace_am_id(a, 3, &mut am), TAGSPACE_OK);
        assert_ne!(am, 0);
        let mut back = 0;
        assert_eq!(tagspace_am_namespace(reg, am, &mut back), TAGSPACE_OK);
        assert_eq!(back, id);
        assert_eq!(tagspace_am_id(a, 256, &mut am), TAGSPACE_ERR_VALUE_TOO_WIDE);

        let mut name = [0 as c_char; 4];
        assert_eq!(tagspace_namespace_name(a, name.as_mut_ptr(), name.len()), 5);
        assert_eq!(
            CStr::from_ptr(name.as_ptr()),
            c"lib",
            "truncated, NUL-terminated"
        );

        let mut d = std::mem::zeroed::<tagspace_decoded_t>();
        assert_eq!(tagspace_decode(reg, tag, &mut d), TAGSPACE_OK);
        assert_eq!(
            (d.namespace_id, d.kind, d.live),
            (id, TAGSPACE_NS_DYNAMIC, 1)
        );
        assert_eq!(CStr::from_ptr(d.name.as_ptr()), c"lib.a");

        let mut info = tagspace_registry_info_t {
            struct_size: std::mem::size_of::<tagspace_registry_info_t>() as u32,
            ..Default::default()
        };
        assert_eq!(tagspace_registry_info(reg, &mut info), TAGSPACE_OK);
        assert_eq!(
            (info.live, info.capacity, info.am_ids_per_namespace),
            (2, 256, 256)
        );
        let epoch = info.epoch;

        tagspace_release(a);
        assert_eq!(tagspace_registry_info(reg, &mut info), TAGSPACE_OK);
        assert_eq!(info.live, 1);
        assert_ne!(info.epoch, epoch);
        assert_eq!(tagspace_decode(reg, tag, &mut d), TAGSPACE_OK);
        assert_eq!(d.live, 0);
        tagspace_release(raft);
        tagspace_registry_free(reg);
    }
}

#[test]
fn a_private_registry_outlives_its_handle_while_a_namespace_holds_it() {
    let reg = private(8, false);
    let ns = register(reg, c"x");
    // SAFETY: valid pointers; `ns` keeps the registry alive after the handle is freed.
    unsafe {
        tagspace_registry_free(reg);
        let mut tag = 0;
        assert_eq!(tagspace_tag(ns, 1, &mut tag), TAGSPACE_OK);
        assert_eq!(
            tag >> 56,
            2,
            "without well-known ids, dynamic ids start at 2"
        );
        tagspace_release(ns);
    }
}

#[test]
fn bad_arguments_get_a_code_and_a_message_naming_them() {
    let reg = private(8, true);
    let mut ns = null_mut();
    let mut tag = 0;
    // SAFETY: every pointer is NULL or valid; the calls must refuse the NULL ones.
    unsafe {
        assert_eq!(
            tagspace_register(null(), c"a".as_ptr(), &mut ns),
            TAGSPACE_ERR_NULL_ARGUMENT
        );
        assert!(last_error().contains("`reg`"), "{}", last_error());
        assert_eq!(
            tagspace_register(reg, null(), &mut ns),
            TAGSPACE_ERR_NULL_ARGUMENT
        );
        assert!(last_error().contains("`name`"));
        assert!(ns.is_null());
        assert_eq!(
            tagspace_register(reg, c"ok".as_ptr(), null_mut()),
            TAGSPACE_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            tagspace_register(reg, c"".as_ptr(), &mut ns),
            TAGSPACE_ERR_BAD_NAME
        );
        assert_eq!(
            tagspace_register(reg, c"a b".as_ptr(), &mut ns),
            TAGSPACE_ERR_BAD_NAME
        );
        assert_eq!(
            tagspace_register(reg, c"\xff\xfe".as_ptr(), &mut ns),
            TAGSPACE_ERR_BAD_NAME
        );
        // An unterminated name is read no further than 65 bytes.
        let long = [b'x' as c_char; 65];
        assert_eq!(
            tagspace_register(reg, long.as_ptr(), &mut ns),
            TAGSPACE_ERR_BAD_NAME
        );
        assert!(last_error().contains("longer than 64"), "{}", last_error());
        let a = register(reg, c"dup");
        assert_eq!(
            tagspace_register(reg, c"dup".as_ptr(), &mut ns),
            TAGSPACE_ERR_DUPLICATE_NAME
        );
        assert!(ns.is_null());
        assert_eq!(
            tagspace_register_at(reg, c"s".as_ptr(), 0, &mut ns),
            TAGSPACE_ERR_RESERVED_ID
        );
        assert_eq!(
            tagspace_register_at(reg, c"s".as_ptr(), 1, &mut ns),
            TAGSPACE_ERR_RESERVED_ID
        );
        assert_eq!(
            tagspace_register_at(reg, c"raft".as_ptr(), 40, &mut ns),
            TAGSPACE_ERR_WELL_KNOWN_ID
        );
        assert!(last_error().contains('6'), "{}", last_error());
        let s = {
            assert_eq!(
                tagspace_register_at(reg, c"s".as_ptr(), 40, &mut ns),
                TAGSPACE_OK
            );
            ns
        };
        assert_eq!(
            tagspace_register_at(reg, c"t".as_ptr(), 40, &mut ns),
            TAGSPACE_ERR_ID_IN_USE
        );
        assert_eq!(
            tagspace_tag(null(), 1, &mut tag),
            TAGSPACE_ERR_NULL_ARGUMENT
        );
        assert_eq!(tagspace_tag(a, 1, null_mut()), TAGSPACE_ERR_NULL_ARGUMENT);
        assert!(last_error().contains("`tag`"));
        assert_eq!(tagspace_owns(null(), 0), 0);

        let mut info = tagspace_registry_info_t::default();
        assert_eq!(
            tagspace_registry_info(reg, &mut info),
            TAGSPACE_ERR_BAD_STRUCT_SIZE
        );
        // An older caller's smaller struct gets only the fields it knows.
        let mut old = [0u32; 4];
        old[0] = 16;
        assert_eq!(
            tagspace_registry_info(reg, old.as_mut_ptr().cast()),
            TAGSPACE_OK
        );
        assert_eq!(old, [16, 56, 8, 256]);

        let mut opts = std::mem::zeroed::<tagspace_layout_options_t>();
        let mut r2 = null_mut();
        assert_eq!(
            tagspace_registry_new(&opts, &mut r2),
            TAGSPACE_ERR_BAD_STRUCT_SIZE
        );
        assert!(last_error().contains("tagspace_layout_options_init"));
        tagspace_layout_options_init(&mut opts);
        opts.namespace_width = 5;
        opts.namespace_shift = 59;
        assert_eq!(
            tagspace_registry_new(&opts, &mut r2),
            TAGSPACE_ERR_BAD_LAYOUT
        );
        opts.namespace_width = 8;
        opts.namespace_shift = 60;
        assert_eq!(
            tagspace_registry_new(&opts, &mut r2),
            TAGSPACE_ERR_BAD_LAYOUT
        );
        assert!(last_error().contains("past bit 63"), "{}", last_error());
        assert!(r2.is_null());

        let mut id = 0;
        assert_eq!(
            tagspace_well_known_id(c"ucc".as_ptr(), &mut id),
            TAGSPACE_OK
        );
        assert_eq!(id, 8);
        assert_eq!(
            tagspace_well_known_id(c"nope".as_ptr(), &mut id),
            TAGSPACE_ERR_NOT_FOUND
        );
        assert_eq!(CStr::from_ptr(tagspace_well_known_name(8)), c"ucc");
        assert!(tagspace_well_known_name(200).is_null());

        tagspace_release(a);
        tagspace_release(s);
        tagspace_release(null_mut());
        tagspace_registry_free(reg);
        tagspace_registry_free(null_mut());
    }
}

#[test]
fn foreign_patterns_are_checked_against_every_managed_id() {
    let reg = private(8, true);
    let mut ids = [0u16; 4];
    let mut n = 0;
    // SAFETY: valid pointers.
    unsafe {
        // RAFT's `(tag << 31) | rank`: the top 32 bits are zero.
        let raft = tagspace_matcher_t {
            tag: 0,
            mask: 0xFFFF_FFFF_0000_0000,
        };
        assert_eq!(
            tagspace_check_foreign(reg, raft, ids.as_mut_ptr(), ids.len(), &mut n),
            TAGSPACE_OK
        );
        assert_eq!(n, 0);
        // ucxx's hashed tags: any 64-bit value.
        let random = tagspace_matcher_t { tag: 0, mask: 0 };
        assert_eq!(
            tagspace_check_foreign(reg, random, ids.as_mut_ptr(), ids.len(), &mut n),
            TAGSPACE_OK
        );
        assert_eq!(n, 255);
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(
            tagspace_check_foreign(reg, random, null_mut(), 0, &mut n),
            TAGSPACE_OK
        );
        assert_eq!(n, 255);
        tagspace_registry_free(reg);
    }
}

#[test]
fn the_global_registry_is_shared_and_its_layout_fixed_once() {
    let mut g1 = null_mut();
    let mut g2 = null_mut();
    // SAFETY: valid pointers.
    unsafe {
        let mut opts = std::mem::zeroed();
        tagspace_layout_options_init(&mut opts);
        assert_eq!(tagspace_registry_init_global(&opts, &mut g1), TAGSPACE_OK);
        assert_eq!(tagspace_registry_global(&mut g2), TAGSPACE_OK);
        let ns = register(g1, c"capi.test.global");
        let mut d = std::mem::zeroed::<tagspace_decoded_t>();
        let mut tag = 0;
        assert_eq!(tagspace_tag(ns, 9, &mut tag), TAGSPACE_OK);
        assert_eq!(tagspace_decode(g2, tag, &mut d), TAGSPACE_OK);
        assert_eq!(CStr::from_ptr(d.name.as_ptr()), c"capi.test.global");
        opts.namespace_width = 9;
        opts.namespace_shift = 55;
        opts.pair_width = 0; // a valid layout, but another one
        let mut g3 = null_mut();
        assert_eq!(
            tagspace_registry_init_global(&opts, &mut g3),
            TAGSPACE_ERR_GLOBAL_IN_USE
        );
        assert!(g3.is_null());
        tagspace_release(ns);
        tagspace_registry_free(g1);
        tagspace_registry_free(g2);
    }
}

#[test]
fn a_panic_is_caught_at_the_boundary() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let rc = guard(|| panic!("boom"));
    std::panic::set_hook(prev);
    assert_eq!(rc, TAGSPACE_ERR_INTERNAL);
    assert!(last_error().contains("boom"), "{}", last_error());
}

#[test]
fn namespaces_are_registered_and_used_from_many_threads() {
    let reg = private(8, true);
    struct Send(*mut tagspace_registry_t);
    // SAFETY: the ABI promises registry handles may be shared between threads.
    unsafe impl std::marker::Send for Send {}
    unsafe impl Sync for Send {}
    let shared = Send(reg);
    std::thread::scope(|s| {
        for t in 0..4 {
            let shared = &shared;
            s.spawn(move || {
                for i in 0..200 {
                    let name = CString::new(format!("t{t}.{i}")).unwrap();
                    let ns = register(shared.0, &name);
                    let id = id_of(ns);
                    let mut tag = 0;
                    // SAFETY: valid pointers; `ns` is this thread's.
                    unsafe {
                        assert_eq!(tagspace_tag(ns, i, &mut tag), TAGSPACE_OK);
                        assert_eq!(tag, (id as u64) << 56 | i);
                        tagspace_release(ns);
                    }
                }
            });
        }
    });
    // SAFETY: valid handle, no other users left.
    unsafe { tagspace_registry_free(reg) };
}

#[test]
fn node_calls_check_their_arguments() {
    use std::ffi::c_void;
    let mut node: *mut tagspace_node_t = null_mut();
    let mut ucs = 7;
    // SAFETY: every pointer below is NULL, a live local, or the node made here.
    unsafe {
        let rc = tagspace_node_adopt(null_mut(), null(), null(), &mut node, &mut ucs);
        assert_eq!(rc, TAGSPACE_ERR_MISUSE);
        assert!(last_error().contains("NULL"), "{}", last_error());
        assert!(node.is_null());
        assert_eq!(ucs, 0);
        // A worker owned elsewhere (here by tagspace's own wrapper) stands in for a host's.
        let w = tagspace_ucx::ucp::Worker::new(&tagspace_ucx::ucp::Config::tcp()).unwrap();
        let raw = w.as_raw().cast::<c_void>();
        let mut opts = std::mem::zeroed::<tagspace_node_options_t>();
        opts.struct_size = 4;
        let rc = tagspace_node_adopt(raw, null(), &opts, &mut node, null_mut());
        assert_eq!(rc, TAGSPACE_ERR_BAD_STRUCT_SIZE);
        tagspace_node_options_init(&mut opts);
        opts.progress = 9;
        let rc = tagspace_node_adopt(raw, null(), &opts, &mut node, null_mut());
        assert_eq!(rc, TAGSPACE_ERR_MISUSE);
        assert!(last_error().contains("progress"), "{}", last_error());
        tagspace_node_options_init(&mut opts);
        opts.progress = TAGSPACE_PROGRESS_NODE;
        let mut reg = null_mut();
        let mut lo = std::mem::zeroed::<tagspace_layout_options_t>();
        tagspace_layout_options_init(&mut lo);
        assert_eq!(tagspace_registry_new(&lo, &mut reg), TAGSPACE_OK);
        let rc = tagspace_node_adopt(raw, reg, &opts, &mut node, null_mut());
        assert_eq!(rc, TAGSPACE_OK, "{}", last_error());
        tagspace_registry_free(reg); // the node keeps its registry alive
        let mut info = tagspace_node_info_t {
            struct_size: std::mem::size_of::<tagspace_node_info_t>() as u32,
            ..Default::default()
        };
        assert_eq!(tagspace_node_info(node, &mut info), TAGSPACE_OK);
        assert_eq!(info.progress, TAGSPACE_PROGRESS_NODE);
        assert_ne!(info.token, 0);
        let mut lib = 0;
        assert_eq!(
            tagspace_node_register(node, c"dask-shuffle".as_ptr(), &mut lib),
            TAGSPACE_OK
        );
        let (mut ep, mut tag) = (null_mut(), 0);
        let rc = tagspace_node_route(node, lib, 0x1234, 5, &mut ep, &mut tag);
        assert_eq!(rc, TAGSPACE_ERR_NOT_CONNECTED);
        let mut m = tagspace_matcher_t::default();
        assert_eq!(
            tagspace_node_matcher(node, lib, 0x1234, 5, &mut m),
            TAGSPACE_OK
        );
        assert_eq!(m.mask, u64::MAX);
        let mut again = tagspace_matcher_t::default();
        assert_eq!(
            tagspace_node_matcher(node, lib, 0x1234, 5, &mut again),
            TAGSPACE_OK
        );
        assert_eq!(again.tag, m.tag, "one pair value per peer");
        assert_eq!(
            tagspace_node_matcher(node, lib, 0x5678, 5, &mut again),
            TAGSPACE_OK
        );
        assert_ne!(again.tag, m.tag, "another peer's tag differs");
        let mut any = tagspace_matcher_t::default();
        assert_eq!(
            tagspace_node_matcher_any_peer(node, lib, 5, &mut any),
            TAGSPACE_OK
        );
        assert!(tagspace_matches(any, m.tag) == 1 && tagspace_matches(any, again.tag) == 1);
        let mut who = 0;
        assert_eq!(
            tagspace_node_sender_of(node, m.tag, &mut who),
            TAGSPACE_ERR_NOT_FOUND,
            "0x1234 never proved itself here: nobody sends with its value"
        );
        assert_eq!(
            tagspace_node_matcher(node, 77, 0x1234, 5, &mut m),
            TAGSPACE_ERR_NO_SUCH_LIBRARY
        );
        let mut ev = tagspace_peer_event_t::default();
        assert_eq!(tagspace_node_listen(node, lib), TAGSPACE_OK);
        assert_eq!(tagspace_node_poll_event(node, lib, &mut ev), TAGSPACE_OK);
        assert_eq!(ev.kind, TAGSPACE_EVENT_NONE);
        assert_eq!(
            tagspace_node_attach(node, 0x1000 as *mut c_void, 5),
            TAGSPACE_ERR_MISUSE
        );
        assert_eq!(
            tagspace_node_detach(node, 0x1000 as *mut c_void),
            TAGSPACE_ERR_MISUSE
        );
        let mut busy = -1;
        assert_eq!(tagspace_node_progress(node, &mut busy), TAGSPACE_OK);
        assert!(busy == 0 || busy == 1);
        let mut stats = tagspace_node_stats_t {
            struct_size: 8, // an older caller's struct: only what fits is written
            ..Default::default()
        };
        assert_eq!(tagspace_node_stats(node, &mut stats), TAGSPACE_OK);
        assert_eq!(stats.struct_size, 8);
        assert_eq!(tagspace_node_release(node, lib), TAGSPACE_OK);
        assert_eq!(
            tagspace_node_release(node, lib),
            TAGSPACE_ERR_NO_SUCH_LIBRARY
        );
        assert_eq!(tagspace_node_shutdown(node, 100), TAGSPACE_OK);
        tagspace_node_free(node);
        assert_eq!(
            tagspace_node_progress(null_mut(), null_mut()),
            TAGSPACE_ERR_NULL_ARGUMENT
        );
        drop(w);
    }
}

/// Two nodes through the ABI on the workers of `wa` and `wb` (node progress, the default
/// heartbeat), each on a private registry of the default layout: `[(node, registry); 2]`.
///
/// # Safety
/// The workers outlive the nodes.
unsafe fn adopt_two(
    wa: &tagspace_ucx::ucp::Worker,
    wb: &tagspace_ucx::ucp::Worker,
) -> [(*mut tagspace_node_t, *mut tagspace_registry_t); 2] {
    [wa, wb].map(|w| {
        // SAFETY: the caller's contract; locals for the outputs.
        unsafe {
            let mut opts = std::mem::zeroed::<tagspace_node_options_t>();
            tagspace_node_options_init(&mut opts);
            opts.progress = TAGSPACE_PROGRESS_NODE;
            let mut lo = std::mem::zeroed::<tagspace_layout_options_t>();
            tagspace_layout_options_init(&mut lo);
            let (mut n, mut r) = (null_mut(), null_mut());
            assert_eq!(tagspace_registry_new(&lo, &mut r), TAGSPACE_OK);
            let raw = w.as_raw().cast::<std::ffi::c_void>();
            assert_eq!(
                tagspace_node_adopt(raw, r, &opts, &mut n, null_mut()),
                TAGSPACE_OK
            );
            (n, r)
        }
    })
}

/// A node's token (`tagspace_node_info`).
fn token(n: *const tagspace_node_t) -> u64 {
    let mut i = tagspace_node_info_t {
        struct_size: std::mem::size_of::<tagspace_node_info_t>() as u32,
        ..Default::default()
    };
    // SAFETY: a live node handle (the tests' own); a local for the output.
    assert_eq!(unsafe { tagspace_node_info(n, &mut i) }, TAGSPACE_OK);
    i.token
}

/// Two nodes in one process on workers and endpoints "a host" made (here tagspace's own UCX
/// wrappers stand in for the host): routing works across different ids for one name, and the
/// route cache never outlives a change — a released name stops routing, a re-registered one
/// routes to its new id.
#[test]
fn routes_follow_the_peers_registrations_through_the_cache() {
    use std::ffi::c_void;
    use tagspace_ucx::ucp::{Config, Endpoint, Worker};
    let (wa, wb) = (
        Worker::new(&Config::tcp()).unwrap(),
        Worker::new(&Config::tcp()).unwrap(),
    );
    // SAFETY: addresses from the workers themselves.
    let ea = unsafe { Endpoint::connect_address(&wa, &wb.address().unwrap()) }.unwrap();
    let eb = unsafe { Endpoint::connect_address(&wb, &wa.address().unwrap()) }.unwrap();
    // SAFETY: live workers and endpoints that outlive the nodes; locals for the outputs.
    unsafe {
        let [(a, ra), (b, rb)] = adopt_two(&wa, &wb);
        let (mut la, mut lb, mut pad) = (0, 0, 0);
        assert_eq!(
            tagspace_node_register(a, c"cache.lib".as_ptr(), &mut la),
            TAGSPACE_OK
        );
        assert_eq!(
            tagspace_node_register(b, c"cache.pad".as_ptr(), &mut pad),
            TAGSPACE_OK
        );
        assert_eq!(
            tagspace_node_register(b, c"cache.lib".as_ptr(), &mut lb),
            TAGSPACE_OK
        );
        let (epa, epb) = (ea.as_raw().cast::<c_void>(), eb.as_raw().cast::<c_void>());
        assert_eq!(
            tagspace_node_attach(a, epa, TAGSPACE_SIDE_INITIATOR),
            TAGSPACE_OK
        );
        assert_eq!(
            tagspace_node_attach(b, epb, TAGSPACE_SIDE_ACCEPTOR),
            TAGSPACE_OK
        );
        let tb = token(b);
        let route = |payload: u64| {
            let (mut ep, mut tag) = (null_mut(), 0u64);
            let rc = tagspace_node_route(a, la, tb, payload, &mut ep, &mut tag);
            (rc, ep, tag)
        };
        let pump = |until: &dyn Fn() -> bool| {
            let start = std::time::Instant::now();
            while !until() {
                assert!(start.elapsed().as_secs() < 30, "{}", last_error());
                tagspace_node_progress(a, null_mut());
                tagspace_node_progress(b, null_mut());
            }
        };
        pump(&|| route(0).0 == TAGSPACE_OK);
        let ta = token(a);
        let mut m = tagspace_matcher_t::default();
        assert_eq!(tagspace_node_matcher(b, lb, ta, 7, &mut m), TAGSPACE_OK);
        let mut who = 0;
        assert_eq!(tagspace_node_sender_of(b, m.tag, &mut who), TAGSPACE_OK);
        assert_eq!(who, ta, "the tag a sends to b names a");
        let (rc, ep, tag) = route(7); // a hit now
        assert_eq!(
            (rc, ep, tag),
            (TAGSPACE_OK, epa, m.tag),
            "routed to b's id for the name"
        );
        assert_ne!(m.tag >> 56, 0);
        // A payload the namespace refuses is refused on a hit too.
        assert_eq!(route(u64::MAX).0, TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE);
        // b releases the name: once a has handled the withdrawal, no stale cached route.
        assert_eq!(tagspace_node_release(b, lb), TAGSPACE_OK);
        pump(&|| route(7).0 == TAGSPACE_ERR_NOT_ANNOUNCED);
        // Re-registered (the pad released first, so the name may take another id): routes to
        // whatever id b has now.
        assert_eq!(tagspace_node_release(b, pad), TAGSPACE_OK);
        assert_eq!(
            tagspace_node_register(b, c"cache.lib".as_ptr(), &mut lb),
            TAGSPACE_OK
        );
        assert_eq!(tagspace_node_matcher(b, lb, ta, 7, &mut m), TAGSPACE_OK);
        pump(&|| route(7).0 == TAGSPACE_OK);
        assert_eq!(route(7).2, m.tag, "the new id, not a cached old one");
        assert_eq!(tagspace_node_detach(a, epa), TAGSPACE_OK);
        assert_eq!(
            route(7).0,
            TAGSPACE_ERR_NOT_CONNECTED,
            "detached: no cached route"
        );
        assert_eq!(tagspace_node_detach(b, epb), TAGSPACE_OK);
        tagspace_node_free(a);
        tagspace_node_free(b);
        tagspace_registry_free(ra);
        tagspace_registry_free(rb);
    }
    drop((ea, eb, wa, wb));
}

/// A host's reconnect through the ABI: B tells its listener's address, A's endpoint to B
/// fails (A's error handler reports it), A's node reports B once at that address, A's host
/// connects there and attaches the new endpoint, B's host attaches what its listener got, and
/// routing resumes on the new endpoints both ways. Bad addresses and struct sizes are refused
/// by name, and a report is not taken by a refused call.
#[test]
fn a_peer_lost_to_a_fault_is_reported_and_reconnected_through_the_abi() {
    use std::ffi::c_void;
    use std::time::{Duration, Instant};
    use tagspace_ucx::ucp::{Config, Endpoint, Listener, Worker};
    let (wa, wb) = (
        Worker::new(&Config::tcp()).unwrap(),
        Worker::new(&Config::tcp()).unwrap(),
    );
    let lb = wb.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr_b = lb.local_addr().unwrap();
    // A's host connects to B's listener; B's host takes the endpoint its listener made.
    let connect = |lb: &Listener| {
        let ea = Endpoint::connect(&wa, addr_b).unwrap();
        let start = Instant::now();
        loop {
            wa.progress();
            wb.progress();
            if let Some(eb) = lb.accept() {
                return (ea, eb.unwrap());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no connection");
        }
    };
    let (ea, eb) = connect(&lb);
    let raw_ep = |e: &Endpoint| e.as_raw().cast::<c_void>();
    // SAFETY: live workers and endpoints that outlive the nodes; locals for the outputs.
    unsafe {
        let [(a, ra), (b, rb)] = adopt_two(&wa, &wb);
        // Addresses a peer could not connect to are refused, naming the input.
        for bad in [
            c"13337",
            c"localhost:13337",
            c"0.0.0.0:13337",
            c"127.0.0.1:0",
        ] {
            assert_eq!(
                tagspace_node_advertise(b, bad.as_ptr()),
                TAGSPACE_ERR_MISUSE,
                "{bad:?}"
            );
            assert!(last_error().contains("`address`"), "{}", last_error());
        }
        let told = std::ffi::CString::new(addr_b.to_string()).unwrap();
        assert_eq!(tagspace_node_advertise(b, told.as_ptr()), TAGSPACE_OK);
        let (mut la, mut lbib) = (0, 0);
        assert_eq!(
            tagspace_node_register(a, c"rejoin.lib".as_ptr(), &mut la),
            TAGSPACE_OK
        );
        assert_eq!(
            tagspace_node_register(b, c"rejoin.lib".as_ptr(), &mut lbib),
            TAGSPACE_OK
        );
        assert_eq!(tagspace_node_listen(a, la), TAGSPACE_OK);
        assert_eq!(
            tagspace_node_attach(a, raw_ep(&ea), TAGSPACE_SIDE_INITIATOR),
            TAGSPACE_OK
        );
        assert_eq!(
            tagspace_node_attach(b, raw_ep(&eb), TAGSPACE_SIDE_ACCEPTOR),
            TAGSPACE_OK
        );
        let (ta, tb) = (token(a), token(b));
        let route = |from, lib, to| {
            let (mut ep, mut tag) = (null_mut(), 0u64);
            match tagspace_node_route(from, lib, to, 7, &mut ep, &mut tag) {
                TAGSPACE_OK => Some(ep),
                _ => None,
            }
        };
        let pump = |what: &str, until: &mut dyn FnMut() -> bool| {
            let start = Instant::now();
            while !until() {
                assert!(start.elapsed().as_secs() < 30, "{what}: {}", last_error());
                tagspace_node_progress(a, null_mut());
                tagspace_node_progress(b, null_mut());
            }
        };
        pump("handshake", &mut || {
            route(a, la, tb).is_some() && route(b, lbib, ta).is_some()
        });
        let stats = |n| {
            let mut s = tagspace_node_stats_t {
                struct_size: std::mem::size_of::<tagspace_node_stats_t>() as u32,
                ..Default::default()
            };
            assert_eq!(tagspace_node_stats(n, &mut s), TAGSPACE_OK);
            s
        };
        let mut r = std::mem::zeroed::<tagspace_reconnect_t>();
        r.struct_size = std::mem::size_of::<tagspace_reconnect_t>() as u32;
        assert_eq!(tagspace_node_take_reconnect(a, &mut r), TAGSPACE_OK);
        assert_eq!(r.needed, 0, "nothing lost yet");

        // A's host's error handler: the endpoint to B failed. A detaches it.
        assert_eq!(tagspace_node_peer_failed(a, raw_ep(&ea), -25), TAGSPACE_OK);
        let mut ev = tagspace_peer_event_t::default();
        pump("A sees B go down", &mut || {
            tagspace_node_poll_event(a, la, &mut ev);
            ev.kind == TAGSPACE_EVENT_DOWN
        });
        assert_eq!((ev.peer, ev.ucs_status), (tb, -25));
        assert_eq!(tagspace_node_detach(a, raw_ep(&ea)), TAGSPACE_OK);
        // A struct too small is refused and the report stays for the next call.
        let mut small = r;
        small.struct_size = 8;
        let mut got = std::mem::zeroed::<tagspace_reconnect_t>();
        got.struct_size = r.struct_size;
        pump("reported", &mut || {
            assert_eq!(
                tagspace_node_take_reconnect(a, &mut small),
                TAGSPACE_ERR_BAD_STRUCT_SIZE
            );
            assert_eq!(tagspace_node_take_reconnect(a, &mut got), TAGSPACE_OK);
            got.needed == 1
        });
        let host = CStr::from_ptr(got.host.as_ptr())
            .to_str()
            .unwrap()
            .to_owned();
        let port = got.port;
        assert_eq!(
            (got.peer, host.as_str(), port),
            (tb, "127.0.0.1", addr_b.port()),
            "B, where B said it listens"
        );
        assert_eq!(tagspace_node_take_reconnect(a, &mut got), TAGSPACE_OK);
        assert_eq!(got.needed, 0, "reported once");

        // A's host connects to the reported address; both hosts attach the new endpoints.
        let reported: std::net::SocketAddr = format!("{host}:{port}").parse().unwrap();
        assert_eq!(reported, addr_b);
        let (ea2, eb2) = connect(&lb);
        assert_eq!(
            tagspace_node_attach_reconnect(a, raw_ep(&ea2), tb),
            TAGSPACE_OK
        );
        assert_eq!(
            tagspace_node_attach(b, raw_ep(&eb2), TAGSPACE_SIDE_ACCEPTOR),
            TAGSPACE_OK
        );
        pump("B back on the new endpoints, both ways", &mut || {
            route(a, la, tb) == Some(raw_ep(&ea2)) && route(b, lbib, ta) == Some(raw_ep(&eb2))
        });
        pump("A hears B up again", &mut || {
            tagspace_node_poll_event(a, la, &mut ev);
            ev.kind == TAGSPACE_EVENT_UP
        });
        assert_eq!(ev.peer, tb);
        assert_eq!(stats(a).reconnects, 1, "{:?}", stats(a));
        assert_eq!(stats(a).peers, 1);
        for n in [a, b] {
            tagspace_node_detach(n, raw_ep(if n == a { &ea2 } else { &eb2 }));
        }
        tagspace_node_detach(b, raw_ep(&eb));
        tagspace_node_free(a);
        tagspace_node_free(b);
        tagspace_registry_free(ra);
        tagspace_registry_free(rb);
        drop((ea, eb, ea2, eb2));
    }
    drop((lb, wa, wb));
}
