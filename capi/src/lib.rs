#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The C names are the ABI; they follow C conventions, not Rust's.
#![allow(non_camel_case_types)]

mod node;
pub use node::*;

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use tagspace_core::name::MAX_NAME_LEN;
use tagspace_core::namespace::am_namespace;
use tagspace_core::registry::GlobalInitError;
use tagspace_core::wellknown::{well_known_id, well_known_name, CONTROL_ID, UNMANAGED_ID};
use tagspace_core::{
    overlap, LayoutError, Namespace, RawMatcher, Registry, RegistryError, Tag, TagError, TagLayout,
};

/// The version of this ABI. It changes only when a signature or struct changes incompatibly;
/// appended struct fields and new functions do not change it.
pub const TAGSPACE_ABI_VERSION: u32 = 2;

/// The number of namespace ids a registry made through this ABI holds.
pub const TAGSPACE_REGISTRY_IDS: u32 = 256;

/// Longest namespace name, in bytes (without the terminating NUL).
pub const TAGSPACE_MAX_NAME_LEN: u32 = 64;
const _: () = assert!(TAGSPACE_MAX_NAME_LEN as usize == MAX_NAME_LEN);

/// Status codes returned by the calls of this ABI.
pub type tagspace_status_t = i32;

/// Success.
pub const TAGSPACE_OK: tagspace_status_t = 0;
/// A required pointer argument was `NULL`.
pub const TAGSPACE_ERR_NULL_ARGUMENT: tagspace_status_t = 1;
/// An options or info struct has a `struct_size` this library cannot use.
pub const TAGSPACE_ERR_BAD_STRUCT_SIZE: tagspace_status_t = 2;
/// The tag layout is invalid, or not usable for a registry of 256 ids.
pub const TAGSPACE_ERR_BAD_LAYOUT: tagspace_status_t = 3;
/// The namespace name is empty, longer than 64 bytes, or not visible ASCII.
pub const TAGSPACE_ERR_BAD_NAME: tagspace_status_t = 4;
/// A live namespace already has this name in this registry.
pub const TAGSPACE_ERR_DUPLICATE_NAME: tagspace_status_t = 5;
/// Every dynamic id is in use.
pub const TAGSPACE_ERR_EXHAUSTED: tagspace_status_t = 6;
/// Every free dynamic id is quarantined (released, peers may still send to it); retry later.
pub const TAGSPACE_ERR_QUARANTINED: tagspace_status_t = 7;
/// The fixed id asked for is held by another registration.
pub const TAGSPACE_ERR_ID_IN_USE: tagspace_status_t = 8;
/// The id is reserved (0, the control plane's, out of range, or another name's well-known id).
pub const TAGSPACE_ERR_RESERVED_ID: tagspace_status_t = 9;
/// The name is well known: static registration must use its fixed id.
pub const TAGSPACE_ERR_WELL_KNOWN_ID: tagspace_status_t = 10;
/// A value does not fit in its field (e.g. a local Active-Message id).
pub const TAGSPACE_ERR_VALUE_TOO_WIDE: tagspace_status_t = 11;
/// A payload sets bits inside the namespace field.
pub const TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE: tagspace_status_t = 12;
/// The payload with every payload bit set is the namespace's inbox; use `tagspace_inbox_tag`.
pub const TAGSPACE_ERR_RESERVED_INBOX: tagspace_status_t = 13;
/// Nothing by that name or id.
pub const TAGSPACE_ERR_NOT_FOUND: tagspace_status_t = 14;
/// The process-global registry already uses another layout.
pub const TAGSPACE_ERR_GLOBAL_IN_USE: tagspace_status_t = 15;
/// A panic inside tagspace, caught at the boundary (a bug: please report it).
pub const TAGSPACE_ERR_INTERNAL: tagspace_status_t = 99;

/// A registry handle. Opaque; free it with `tagspace_registry_free`.
pub struct tagspace_registry_t {
    reg: Reg,
}

enum Reg {
    Global(&'static Registry<256>),
    Owned(Arc<Registry<256>>),
}

impl tagspace_registry_t {
    fn get(&self) -> &Registry<256> {
        match &self.reg {
            Reg::Global(r) => r,
            Reg::Owned(r) => r,
        }
    }
}

/// A live namespace registration. Opaque; `tagspace_release` gives the id back.
pub struct tagspace_namespace_t {
    // Field order matters: `ns` borrows the registry that `_keep` keeps alive, and fields drop
    // in declaration order, so the lease is released before the last reference can go.
    ns: Namespace<'static, 256>,
    _keep: Option<Arc<Registry<256>>>,
}

/// How a registry lays out its tags. Initialise with `tagspace_layout_options_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tagspace_layout_options_t {
    /// `sizeof(tagspace_layout_options_t)` as the caller's header declares it.
    pub struct_size: u32,
    /// Lowest bit of the namespace field (default 56).
    pub namespace_shift: u32,
    /// Width of the namespace field in bits, 8 to 16 here (default 8: ids 0..255).
    pub namespace_width: u32,
    /// Nonzero: well-known names get their fixed ids (default 1).
    pub well_known: u32,
    /// Guard bits: bits outside the namespace field that every tagspace tag fixes to
    /// `guard_value`, to keep foreign libraries' wildcards out of reach (default 0: none). Read
    /// only when `struct_size` covers it (callers built against an older header get none).
    pub guard_mask: u64,
    /// The guard bits' values (inside `guard_mask`).
    pub guard_value: u64,
    /// The pair field: its lowest bit and width (16 to 32; default 32 and 24). Every tag a peer
    /// sends here carries there a value this process gave that peer alone once it proved its
    /// identity, so no other process can make a tag a receive tied to the peer takes (but by
    /// guessing: 2^-width per message). Width 0: no pair field, and tags anyone connected can
    /// forge. Read only when `struct_size` covers it (callers built against an older header
    /// get none).
    pub pair_shift: u32,
    /// Width of the pair field in bits (0: none).
    pub pair_width: u32,
}

/// `struct_size` of the first `tagspace_layout_options_t`, before the guard bits.
const LAYOUT_OPTIONS_V1: u32 = 16;
/// `struct_size` of the second, before the pair field.
const LAYOUT_OPTIONS_V2: u32 = 32;

/// A snapshot of a registry's layout and counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tagspace_registry_info_t {
    /// In: `sizeof(tagspace_registry_info_t)` as the caller's header declares it. Out: how many
    /// bytes were written.
    pub struct_size: u32,
    /// Lowest bit of the namespace field.
    pub namespace_shift: u32,
    /// Width of the namespace field in bits.
    pub namespace_width: u32,
    /// Number of ids, reserved ones included.
    pub capacity: u32,
    /// Live namespaces now.
    pub live: u32,
    /// Released dynamic ids not yet free again (invariant R7).
    pub quarantined: u32,
    /// Nonzero if well-known names get their fixed ids.
    pub well_known: u32,
    /// Active-Message ids each namespace owns.
    pub am_ids_per_namespace: u32,
    /// Changes whenever a namespace is registered or released.
    pub epoch: u64,
    /// Hash of the layout; two processes must have the same one to share tags.
    pub layout_fingerprint: u64,
    /// The layout's guard bits (0: none), fixed to `guard_value` in every tagspace tag.
    pub guard_mask: u64,
    /// See `guard_mask`.
    pub guard_value: u64,
}

/// A UCX-style matcher: a message sent with tag `t` matches when `(t ^ tag) & mask == 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tagspace_matcher_t {
    /// The tag to post (bits outside `mask` are zero).
    pub tag: u64,
    /// The mask to post: set bits must match.
    pub mask: u64,
}

/// A libfabric-style matcher: set bits of `ignore` are free.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tagspace_fi_matcher_t {
    /// The tag.
    pub tag: u64,
    /// The ignore bits (the complement of a UCX mask).
    pub ignore: u64,
}

/// Kind of namespace id 0: the unmanaged space (legacy tags with a zero namespace field).
pub const TAGSPACE_NS_UNMANAGED: u16 = 0;
/// Kind of namespace id 1: tagspace's control plane.
pub const TAGSPACE_NS_CONTROL: u16 = 1;
/// Kind of a well-known id (the same name in every process).
pub const TAGSPACE_NS_WELL_KNOWN: u16 = 2;
/// Kind of a dynamic id (means something only inside one process).
pub const TAGSPACE_NS_DYNAMIC: u16 = 3;

/// What a tag means in a registry.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tagspace_decoded_t {
    /// The namespace id (the namespace field's value).
    pub namespace_id: u16,
    /// `TAGSPACE_NS_*`.
    pub kind: u16,
    /// Nonzero if a namespace holds this id in the registry now.
    pub live: u8,
    /// Nonzero if the id is quarantined (released, not yet free: R7).
    pub quarantined: u8,
    /// The payload: every bit outside the namespace field.
    pub payload: u64,
    /// The live namespace's name, else the well-known name, else empty; NUL-terminated.
    pub name: [c_char; 65],
}

// ---- errors ---------------------------------------------------------------------------------

struct Fail {
    code: tagspace_status_t,
    msg: String,
}

impl Fail {
    fn new(code: tagspace_status_t, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

impl From<RegistryError> for Fail {
    fn from(e: RegistryError) -> Fail {
        let code = match e {
            RegistryError::BadName(_) => TAGSPACE_ERR_BAD_NAME,
            RegistryError::DuplicateName => TAGSPACE_ERR_DUPLICATE_NAME,
            RegistryError::NamespaceExhausted { .. } => TAGSPACE_ERR_EXHAUSTED,
            RegistryError::Quarantined { .. } => TAGSPACE_ERR_QUARANTINED,
            RegistryError::IdInUse { .. } => TAGSPACE_ERR_ID_IN_USE,
            RegistryError::ReservedId { .. } => TAGSPACE_ERR_RESERVED_ID,
            RegistryError::WellKnownId { .. } => TAGSPACE_ERR_WELL_KNOWN_ID,
            // A handle owns its lease, so it cannot go stale; keep the mapping total anyway.
            RegistryError::StaleLease { .. } => TAGSPACE_ERR_NOT_FOUND,
        };
        Fail::new(code, e.to_string())
    }
}

impl From<TagError> for Fail {
    fn from(e: TagError) -> Fail {
        let code = match e {
            TagError::ValueTooWide { .. } | TagError::AmIdTooWide { .. } => {
                TAGSPACE_ERR_VALUE_TOO_WIDE
            }
            TagError::PayloadInNamespaceField { .. } => TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE,
            TagError::ReservedInbox => TAGSPACE_ERR_RESERVED_INBOX,
            // Routes are not part of this ABI yet; keep the mapping total.
            TagError::RouteMismatch { .. } => TAGSPACE_ERR_INTERNAL,
        };
        Fail::new(code, e.to_string())
    }
}

impl From<LayoutError> for Fail {
    fn from(e: LayoutError) -> Fail {
        Fail::new(TAGSPACE_ERR_BAD_LAYOUT, format!("bad tag layout: {e}"))
    }
}

thread_local! {
    /// The message of the last failed call on this thread (no NUL inside).
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn set_last_error(msg: String) {
    // Messages are ours and never hold NUL; if one did, keep the text before it.
    let mut bytes = msg.into_bytes();
    if let Some(nul) = bytes.iter().position(|&b| b == 0) {
        bytes.truncate(nul);
    }
    LAST_ERROR.with(|l| *l.borrow_mut() = bytes);
}

/// Runs `f`, turning its error or a panic into a status code and the thread's last message.
fn guard(f: impl FnOnce() -> Result<(), Fail>) -> tagspace_status_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => TAGSPACE_OK,
        Ok(Err(fail)) => {
            set_last_error(fail.msg);
            fail.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            set_last_error(format!(
                "internal error in tagspace (caught at the C boundary): {what}"
            ));
            TAGSPACE_ERR_INTERNAL
        }
    }
}

/// `p` as a reference, or an error naming the argument.
///
/// # Safety
/// `p` is `NULL` or points to a valid `T` for `'a`.
unsafe fn arg<'a, T>(p: *const T, what: &str) -> Result<&'a T, Fail> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }
        .ok_or_else(|| Fail::new(TAGSPACE_ERR_NULL_ARGUMENT, format!("`{what}` is NULL")))
}

/// Writes `v` through `out`, or fails naming the argument.
///
/// # Safety
/// `out` is `NULL` or valid for writing a `T`.
unsafe fn put<T>(out: *mut T, what: &str, v: T) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::new(
            TAGSPACE_ERR_NULL_ARGUMENT,
            format!("`{what}` is NULL"),
        ));
    }
    // SAFETY: non-null and, by the caller's contract, valid for writes.
    unsafe { out.write(v) };
    Ok(())
}

/// Reads a NUL-terminated name, looking at no more than `TAGSPACE_MAX_NAME_LEN + 1` bytes.
///
/// # Safety
/// `p` is `NULL` or points to a NUL-terminated string, or to at least 65 readable bytes.
unsafe fn c_name<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    // SAFETY: the caller's contract.
    let bytes = unsafe { c_bytes(p, what, MAX_NAME_LEN, TAGSPACE_ERR_BAD_NAME) }?;
    std::str::from_utf8(bytes).map_err(|_| {
        Fail::new(
            TAGSPACE_ERR_BAD_NAME,
            format!("`{what}` is not visible ASCII (bytes 0x21..=0x7e)"),
        )
    })
}

/// The bytes of a NUL-terminated string of at most `max` bytes, looking at no more than
/// `max + 1`; a longer one fails with `code`, naming `what`.
///
/// # Safety
/// `p` is `NULL` or points to a NUL-terminated string, or to at least `max + 1` readable bytes.
unsafe fn c_bytes<'a>(
    p: *const c_char,
    what: &str,
    max: usize,
    code: tagspace_status_t,
) -> Result<&'a [u8], Fail> {
    if p.is_null() {
        return Err(Fail::new(
            TAGSPACE_ERR_NULL_ARGUMENT,
            format!("`{what}` is NULL"),
        ));
    }
    let mut len = 0;
    // SAFETY: we stop at the first NUL, so every byte read lies inside the caller's string.
    while len <= max && unsafe { *p.add(len) } != 0 {
        len += 1;
    }
    if len > max {
        return Err(Fail::new(
            code,
            format!("`{what}` is longer than {max} bytes (or not NUL-terminated)"),
        ));
    }
    // SAFETY: `len` bytes were just read.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// Copies `s` into `buf` (at most `cap - 1` bytes and a NUL); returns `s`'s full length.
///
/// # Safety
/// `buf` is `NULL` (then `cap` is ignored) or valid for `cap` bytes.
unsafe fn copy_out(s: &[u8], buf: *mut c_char, cap: usize) -> usize {
    if !buf.is_null() && cap > 0 {
        let n = s.len().min(cap - 1);
        // SAFETY: `n < cap` bytes plus the NUL fit in the caller's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    s.len()
}

// ---- version and errors ---------------------------------------------------------------------

/// The ABI version of the loaded library (`TAGSPACE_ABI_VERSION` of its header). A host checks
/// it against the header it was compiled with.
#[no_mangle]
pub extern "C" fn tagspace_abi_version() -> u32 {
    TAGSPACE_ABI_VERSION
}

/// The library's version, e.g. `"0.1.0"` (static storage).
#[no_mangle]
pub extern "C" fn tagspace_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A fixed description of a status code (static storage; never `NULL`).
#[no_mangle]
pub extern "C" fn tagspace_strerror(status: tagspace_status_t) -> *const c_char {
    let s: &CStr = match status {
        TAGSPACE_OK => c"success",
        TAGSPACE_ERR_NULL_ARGUMENT => c"a required pointer argument is NULL",
        TAGSPACE_ERR_BAD_STRUCT_SIZE => c"struct_size of an options or info struct is not usable",
        TAGSPACE_ERR_BAD_LAYOUT => c"invalid tag layout",
        TAGSPACE_ERR_BAD_NAME => c"invalid namespace name",
        TAGSPACE_ERR_DUPLICATE_NAME => c"a live namespace already has this name",
        TAGSPACE_ERR_EXHAUSTED => c"all namespace ids are in use",
        TAGSPACE_ERR_QUARANTINED => c"every free namespace id is quarantined",
        TAGSPACE_ERR_ID_IN_USE => c"the namespace id is held by another registration",
        TAGSPACE_ERR_RESERVED_ID => c"the namespace id is reserved",
        TAGSPACE_ERR_WELL_KNOWN_ID => c"the name is well known and has a fixed id",
        TAGSPACE_ERR_VALUE_TOO_WIDE => c"a value does not fit in its field",
        TAGSPACE_ERR_PAYLOAD_IN_NAMESPACE => c"the payload sets bits of the namespace field",
        TAGSPACE_ERR_RESERVED_INBOX => c"the payload is reserved for the namespace inbox",
        TAGSPACE_ERR_NOT_FOUND => c"not found",
        TAGSPACE_ERR_GLOBAL_IN_USE => c"the global registry already uses another layout",
        TAGSPACE_ERR_UCX => c"a UCX call failed",
        TAGSPACE_ERR_NOT_CONNECTED => c"no established connection to that peer",
        TAGSPACE_ERR_NOT_ANNOUNCED => c"the peer has not registered that library's name yet",
        TAGSPACE_ERR_MISUSE => c"the call does not fit the node's state",
        TAGSPACE_ERR_NO_SUCH_LIBRARY => c"no such library on this node",
        TAGSPACE_ERR_INTERNAL => c"internal error in tagspace",
        _ => c"unknown tagspace status code",
    };
    s.as_ptr()
}

/// The full message of the last call that failed on this thread (it names the offending
/// values), copied into `buf` as `snprintf` would: at most `cap - 1` bytes and a NUL. Returns
/// the message's length (0 if no call has failed on this thread). `buf` may be `NULL` to ask
/// for the length.
///
/// # Safety
/// `buf` is `NULL` or valid for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn tagspace_last_error(buf: *mut c_char, cap: usize) -> usize {
    // SAFETY: the caller's contract on `buf`.
    LAST_ERROR.with(|l| unsafe { copy_out(&l.borrow(), buf, cap) })
}

// ---- registries -----------------------------------------------------------------------------

/// Fills `opts` with the defaults: namespace in bits 56..63 (8 bits), well-known names honoured,
/// and `struct_size` set. Does nothing if `opts` is `NULL`.
///
/// # Safety
/// `opts` is `NULL` or valid for writing a `tagspace_layout_options_t`.
#[no_mangle]
pub unsafe extern "C" fn tagspace_layout_options_init(opts: *mut tagspace_layout_options_t) {
    let f = TagLayout::DEFAULT.namespace_field();
    let pair = TagLayout::DEFAULT.pair_field();
    let v = tagspace_layout_options_t {
        struct_size: std::mem::size_of::<tagspace_layout_options_t>() as u32,
        namespace_shift: f.shift(),
        namespace_width: f.width(),
        well_known: 1,
        guard_mask: 0,
        guard_value: 0,
        pair_shift: pair.map_or(0, |p| p.shift()),
        pair_width: pair.map_or(0, |p| p.width()),
    };
    // SAFETY: the caller's contract.
    let _ = unsafe { put(opts, "opts", v) };
}

/// # Safety
/// `opts` is `NULL` or points to at least `struct_size` readable bytes.
unsafe fn layout_of(opts: *const tagspace_layout_options_t) -> Result<(TagLayout, bool), Fail> {
    // SAFETY: the caller's contract; only the leading `struct_size` field is read first.
    let size = *unsafe { arg(opts.cast::<u32>(), "opts") }?;
    let ours = std::mem::size_of::<tagspace_layout_options_t>() as u32;
    if size < LAYOUT_OPTIONS_V1 {
        return Err(Fail::new(
            TAGSPACE_ERR_BAD_STRUCT_SIZE,
            format!(
                "opts->struct_size is {size}, less than the {LAYOUT_OPTIONS_V1} bytes this \
                 library reads; call tagspace_layout_options_init first"
            ),
        ));
    }
    let o = if size >= ours {
        // SAFETY: `struct_size` says the whole struct is there.
        unsafe { *opts }
    } else {
        // SAFETY: the first version's fields are there.
        let v1 = unsafe { std::slice::from_raw_parts(opts.cast::<u32>(), 4) };
        let guard = if size >= LAYOUT_OPTIONS_V2 {
            // SAFETY: the second version's guard bits are there too (8-aligned, at 16 and 24).
            unsafe { std::slice::from_raw_parts(opts.cast::<u64>().add(2), 2) }
        } else {
            &[0, 0]
        };
        tagspace_layout_options_t {
            struct_size: v1[0],
            namespace_shift: v1[1],
            namespace_width: v1[2],
            well_known: v1[3],
            guard_mask: guard[0],
            guard_value: guard[1],
            pair_shift: 0,
            pair_width: 0,
        }
    };
    if !(8..=16).contains(&o.namespace_width) {
        return Err(Fail::new(
            TAGSPACE_ERR_BAD_LAYOUT,
            format!(
                "namespace_width {} is not usable here: a registry of this ABI holds \
                 {TAGSPACE_REGISTRY_IDS} ids, which needs 8 to 16 bits",
                o.namespace_width
            ),
        ));
    }
    let mut b = TagLayout::builder(o.namespace_shift, o.namespace_width);
    if o.guard_mask != 0 || o.guard_value != 0 {
        b = b.guard(o.guard_mask, o.guard_value);
    }
    if o.pair_width != 0 {
        b = b.pair(o.pair_shift, o.pair_width);
    }
    Ok((b.build()?, o.well_known != 0))
}

/// Sets the layout fields of `opts` (namespace field and guard bits) from a layout SPEC as the
/// `tagspace` command prints it, e.g. `tagspace layout --against rapidsmpf`:
/// `default` or `ns=SHIFT:WIDTH[,pair=SHIFT:WIDTH][,guard=VALUE/MASK]` (a SPEC without `pair=`
/// sets no pair field: forgeable tags). Named fields are not part of a registry's
/// options (they change no tag tagspace builds): a SPEC with them is refused. `opts` is left as
/// it was on failure; initialise it with `tagspace_layout_options_init` first.
///
/// # Safety
/// `opts` is valid for reading and writing a `tagspace_layout_options_t`; `spec` is `NULL` or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tagspace_layout_options_from_spec(
    opts: *mut tagspace_layout_options_t,
    spec: *const c_char,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let spec = unsafe { arg(spec, "spec") }?;
        // SAFETY: a non-NULL `spec` is NUL-terminated (the caller's contract).
        let spec = unsafe { CStr::from_ptr(spec) }
            .to_str()
            .map_err(|_| Fail::new(TAGSPACE_ERR_BAD_LAYOUT, "`spec` is not UTF-8"))?;
        let layout = TagLayout::parse_spec(spec)
            .map_err(|e| Fail::new(TAGSPACE_ERR_BAD_LAYOUT, format!("layout {spec:?}: {e}")))?;
        if let Some((name, _)) = layout.fields().next() {
            return Err(Fail::new(
                TAGSPACE_ERR_BAD_LAYOUT,
                format!(
                    "layout {spec:?} names field {name:?}: registry options take the namespace \
                     field and guard bits only"
                ),
            ));
        }
        // SAFETY: the caller's contract.
        let o = unsafe { arg(opts.cast_const(), "opts") }?;
        let f = layout.namespace_field();
        let pair = layout.pair_field();
        let v = tagspace_layout_options_t {
            namespace_shift: f.shift(),
            namespace_width: f.width(),
            guard_mask: layout.guard_mask(),
            guard_value: layout.guard_value(),
            pair_shift: pair.map_or(0, |p| p.shift()),
            pair_width: pair.map_or(0, |p| p.width()),
            ..*o
        };
        // SAFETY: the caller's contract.
        unsafe { put(opts, "opts", v) }
    })
}

/// A handle on the process-global registry, which every library of the process that links this
/// same copy of tagspace shares. Its layout is the default unless
/// `tagspace_registry_init_global` chose another before first use.
///
/// # Safety
/// `out` is valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn tagspace_registry_global(
    out: *mut *mut tagspace_registry_t,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    guard(|| unsafe { hand_out(out, Reg::Global(tagspace_core::global())) })
}

/// Boxes a registry handle and writes it through `out`.
///
/// # Safety
/// `out` is `NULL` or valid for writing a pointer.
unsafe fn hand_out(out: *mut *mut tagspace_registry_t, reg: Reg) -> Result<(), Fail> {
    let h = Box::into_raw(Box::new(tagspace_registry_t { reg }));
    // SAFETY: the caller's contract.
    unsafe { put(out, "out", h) }.inspect_err(|_| {
        // SAFETY: just made, never handed out.
        drop(unsafe { Box::from_raw(h) })
    })
}

/// The shared shape of the two constructors that take layout options.
///
/// # Safety
/// As `tagspace_registry_new`.
unsafe fn registry_from_options(
    opts: *const tagspace_layout_options_t,
    out: *mut *mut tagspace_registry_t,
    make: impl FnOnce(TagLayout, bool) -> Result<Reg, Fail>,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    unsafe { clear(out) };
    guard(|| {
        // SAFETY: the caller's contract.
        let (layout, well_known) = unsafe { layout_of(opts) }?;
        let reg = make(layout, well_known)?;
        // SAFETY: the caller's contract.
        unsafe { hand_out(out, reg) }
    })
}

/// Chooses the process-global registry's layout (call it before anything registers there; the
/// same layout again is fine) and returns a handle on it. `opts->well_known` must be nonzero:
/// the global registry always honours the well-known table.
///
/// # Safety
/// `opts` points to an initialised `tagspace_layout_options_t`; `out` is valid for writing a
/// pointer (it is set to `NULL` on failure).
#[no_mangle]
pub unsafe extern "C" fn tagspace_registry_init_global(
    opts: *const tagspace_layout_options_t,
    out: *mut *mut tagspace_registry_t,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        registry_from_options(opts, out, |layout, well_known| {
            if !well_known {
                return Err(Fail::new(
                TAGSPACE_ERR_BAD_LAYOUT,
                "the global registry honours well-known names: opts->well_known must be nonzero",
            ));
            }
            let reg = tagspace_core::init_global(layout).map_err(|e| {
                let code = match e {
                    GlobalInitError::AlreadyInitialized { .. } => TAGSPACE_ERR_GLOBAL_IN_USE,
                    GlobalInitError::TooNarrow { .. } => TAGSPACE_ERR_BAD_LAYOUT,
                };
                Fail::new(code, e.to_string())
            })?;
            Ok(Reg::Global(reg))
        })
    }
}

/// A private registry with its own layout (256 ids), e.g. for a transport whose peers use
/// another layout than the process-global one. It lives until its last handle and namespace
/// are gone.
///
/// # Safety
/// As `tagspace_registry_init_global`.
#[no_mangle]
pub unsafe extern "C" fn tagspace_registry_new(
    opts: *const tagspace_layout_options_t,
    out: *mut *mut tagspace_registry_t,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        registry_from_options(opts, out, |layout, well_known| {
            Ok(Reg::Owned(Arc::new(if well_known {
                Registry::new(layout)
            } else {
                Registry::without_well_known(layout)
            })))
        })
    }
}

/// Frees a registry handle. Namespaces registered through it stay valid (they keep a private
/// registry alive); the global registry itself is never freed. `NULL` is ignored.
///
/// # Safety
/// `reg` is `NULL` or a handle from this library not yet freed, not in use by another thread.
#[no_mangle]
pub unsafe extern "C" fn tagspace_registry_free(reg: *mut tagspace_registry_t) {
    // SAFETY: the caller's contract.
    unsafe { free_handle(reg) }
}

/// Frees a handle this library made with `Box::into_raw`; `NULL` is ignored.
///
/// # Safety
/// `p` is `NULL` or such a handle, not yet freed and not in use elsewhere.
unsafe fn free_handle<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A snapshot of the registry's layout and counters. Set `info->struct_size` first.
///
/// # Safety
/// `reg` is a live handle; `info` points to at least `info->struct_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tagspace_registry_info(
    reg: *const tagspace_registry_t,
    info: *mut tagspace_registry_info_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { arg(reg, "reg") }?.get();
        let f = r.layout().namespace_field();
        let v = tagspace_registry_info_t {
            struct_size: 0,
            namespace_shift: f.shift(),
            namespace_width: f.width(),
            capacity: r.capacity() as u32,
            live: r.live_count() as u32,
            quarantined: r.quarantined_count() as u32,
            well_known: r.honours_well_known() as u32,
            am_ids_per_namespace: r.layout().am_ids_per_namespace(),
            epoch: r.epoch(),
            layout_fingerprint: r.layout().fingerprint(),
            guard_mask: r.layout().guard_mask(),
            guard_value: r.layout().guard_value(),
        };
        // SAFETY: the caller's contract.
        unsafe { copy_versioned(info, "info", &v) }
    })
}

/// Writes `v` into the caller's struct at `out`, whose leading `u32 struct_size` says how many
/// bytes the caller's version has: at most that many bytes are written (fields are only ever
/// appended), and `struct_size` is set to the number written.
///
/// # Safety
/// `T` is `repr(C)` and starts with a `u32 struct_size`; `out` is `NULL` or points to at
/// least `out->struct_size` writable bytes.
unsafe fn copy_versioned<T: Copy>(out: *mut T, what: &str, v: &T) -> Result<(), Fail> {
    // SAFETY: the caller's contract; only the leading `struct_size` field is read.
    let size = *unsafe { arg(out.cast::<u32>().cast_const(), what) }? as usize;
    let n = size.min(std::mem::size_of::<T>());
    if n < std::mem::size_of::<u32>() {
        return Err(Fail::new(
            TAGSPACE_ERR_BAD_STRUCT_SIZE,
            format!(
                "{what}->struct_size is {size}: set it to sizeof({})",
                std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("the struct")
            ),
        ));
    }
    // SAFETY: `n` bytes fit in the caller's struct and lie within `v`; then the leading u32.
    unsafe {
        std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out.cast::<u8>(), n);
        out.cast::<u32>().write(n as u32);
    }
    Ok(())
}

// ---- namespaces -----------------------------------------------------------------------------

/// # Safety
/// `out` is `NULL` or valid for writing a pointer.
unsafe fn clear<T>(out: *mut *mut T) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
    }
}

fn register_with(
    h: &tagspace_registry_t,
    register: impl FnOnce(&'static Registry<256>) -> Result<Namespace<'static, 256>, RegistryError>,
) -> Result<Box<tagspace_namespace_t>, Fail> {
    let (reg, keep): (&'static Registry<256>, _) = match &h.reg {
        Reg::Global(r) => (r, None),
        Reg::Owned(a) => {
            let keep = Arc::clone(a);
            // SAFETY: the registry lives in the `Arc`'s heap block, which `keep` holds for as
            // long as the namespace that borrows it (see the field order of
            // `tagspace_namespace_t`); it never moves.
            let r: &'static Registry<256> = unsafe { &*Arc::as_ptr(&keep) };
            (r, Some(keep))
        }
    };
    let ns = register(reg)?;
    Ok(Box::new(tagspace_namespace_t { ns, _keep: keep }))
}

/// Registers `name`: its well-known id if it has one, otherwise a free dynamic id. Dynamic ids
/// mean something only in this process (peers learn them through the handshake, not yet part of
/// this ABI); for ids that two processes agree on, use a well-known name or
/// `tagspace_register_at`.
///
/// # Safety
/// `reg` is a live handle; `name` is a NUL-terminated string; `out` is valid for writing a
/// pointer (set to `NULL` on failure).
#[no_mangle]
pub unsafe extern "C" fn tagspace_register(
    reg: *const tagspace_registry_t,
    name: *const c_char,
    out: *mut *mut tagspace_namespace_t,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    unsafe { clear(out) };
    guard(|| {
        // SAFETY: the caller's contract.
        let (h, name) = unsafe { (arg(reg, "reg")?, c_name(name, "name")?) };
        let ns = register_with(h, |r| r.register(name))?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", Box::into_raw(ns)) }
    })
}

/// Static registration: `name` at exactly `id`, for hosts whose processes compile in the same
/// assignments. Ids 0 and 1, ids past the registry, and other names' well-known ids are refused.
///
/// # Safety
/// As `tagspace_register`.
#[no_mangle]
pub unsafe extern "C" fn tagspace_register_at(
    reg: *const tagspace_registry_t,
    name: *const c_char,
    id: u16,
    out: *mut *mut tagspace_namespace_t,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    unsafe { clear(out) };
    guard(|| {
        // SAFETY: the caller's contract.
        let (h, name) = unsafe { (arg(reg, "reg")?, c_name(name, "name")?) };
        let ns = register_with(h, |r| r.register_at(name, id))?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", Box::into_raw(ns)) }
    })
}

/// Releases the namespace: its id goes back to the registry and the handle is freed. `NULL` is
/// ignored.
///
/// # Safety
/// `ns` is `NULL` or a live namespace handle, not in use by another thread.
#[no_mangle]
pub unsafe extern "C" fn tagspace_release(ns: *mut tagspace_namespace_t) {
    // SAFETY: the caller's contract.
    unsafe { free_handle(ns) }
}

/// The namespace's id in its registry.
///
/// # Safety
/// `ns` is a live namespace handle; `id` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_namespace_id(
    ns: *const tagspace_namespace_t,
    id: *mut u16,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let ns = unsafe { arg(ns, "ns") }?;
        // SAFETY: the caller's contract.
        unsafe { put(id, "id", ns.ns.id()) }
    })
}

/// Copies the namespace's name into `buf` as `snprintf` would; returns the name's length (0 if
/// `ns` is `NULL`).
///
/// # Safety
/// `ns` is `NULL` or a live namespace handle; `buf` is `NULL` or valid for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn tagspace_namespace_name(
    ns: *const tagspace_namespace_t,
    buf: *mut c_char,
    cap: usize,
) -> usize {
    // SAFETY: the caller's contract.
    match unsafe { ns.as_ref() } {
        // SAFETY: the caller's contract on `buf`.
        Some(ns) => unsafe { copy_out(ns.ns.name().as_bytes(), buf, cap) },
        None => 0,
    }
}

/// The tag for `payload` in this namespace (local use, a well-known name, or static
/// registration: the same id on every process). Payload bits inside the namespace field, and
/// the all-ones payload (the inbox), are errors: nothing is ever truncated.
///
/// # Safety
/// `ns` is a live namespace handle; `tag` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_tag(
    ns: *const tagspace_namespace_t,
    payload: u64,
    tag: *mut u64,
) -> tagspace_status_t {
    // The data path: two null checks, a shift-and-or and one compare, with no unwinding frame
    // (`Namespace::tag` cannot panic: no indexing, no arithmetic that can overflow). Only a
    // failure goes through `guard`, which formats the message.
    // SAFETY: the caller's contract.
    match (unsafe { ns.as_ref() }, tag.is_null()) {
        (Some(n), false) => match n.ns.tag(payload) {
            // SAFETY: non-null and, by the caller's contract, valid for writes.
            Ok(t) => unsafe { tag.write(t.raw()) },
            Err(e) => return guard(|| Err(e.into())),
        },
        // SAFETY: the caller's contract.
        _ => return guard(|| unsafe { arg(ns, "ns").and_then(|_| put(tag, "tag", 0)) }),
    }
    TAGSPACE_OK
}

/// The namespace's inbox tag (every payload bit set): where senders announce a new
/// transmission; receive it with an exact (full-mask) matcher.
///
/// # Safety
/// `ns` is a live namespace handle; `tag` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_inbox_tag(
    ns: *const tagspace_namespace_t,
    tag: *mut u64,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let ns = unsafe { arg(ns, "ns") }?;
        // SAFETY: the caller's contract.
        unsafe { put(tag, "tag", ns.ns.inbox().raw()) }
    })
}

/// A matcher for exactly the tag of `payload` (full mask: UCX's hashed fast path, and it can
/// never take a message a host library sent with a random 64-bit tag).
///
/// # Safety
/// `ns` is a live namespace handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_matcher_exact(
    ns: *const tagspace_namespace_t,
    payload: u64,
    out: *mut tagspace_matcher_t,
) -> tagspace_status_t {
    // The data path, as in `tagspace_tag`: no unwinding frame unless it fails.
    // SAFETY: the caller's contract.
    match (unsafe { ns.as_ref() }, out.is_null()) {
        (Some(n), false) => match n.ns.matcher_exact(payload) {
            // SAFETY: non-null and, by the caller's contract, valid for writes.
            Ok(m) => unsafe { out.write(matcher_out(m.tag(), m.mask())) },
            Err(e) => return guard(|| Err(e.into())),
        },
        _ => {
            return guard(|| {
                // SAFETY: the caller's contract.
                unsafe { arg(ns, "ns").and_then(|_| put(out, "out", matcher_out(0, 0))) }
            });
        }
    }
    TAGSPACE_OK
}

/// A matcher for tags of this namespace whose bits under `payload_mask` equal `payload`'s. The
/// namespace field is always covered, so it never reaches another namespace's tags — but it can
/// take a foreign library's message whose tag happens to carry this namespace's id (random
/// 64-bit tags do, see `tagspace_check_foreign`): on a worker shared with such a library, use
/// exact matchers.
///
/// # Safety
/// `ns` is a live namespace handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_matcher(
    ns: *const tagspace_namespace_t,
    payload: u64,
    payload_mask: u64,
    out: *mut tagspace_matcher_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let ns = unsafe { arg(ns, "ns") }?;
        let m = ns.ns.matcher(payload, payload_mask)?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", matcher_out(m.tag(), m.mask())) }
    })
}

/// A matcher for every tag of this namespace (inbox included). The same caution as
/// `tagspace_matcher` applies.
///
/// # Safety
/// `ns` is a live namespace handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_matcher_any(
    ns: *const tagspace_namespace_t,
    out: *mut tagspace_matcher_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let ns = unsafe { arg(ns, "ns") }?;
        let m = ns.ns.matcher_any();
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", matcher_out(m.tag(), m.mask())) }
    })
}

fn matcher_out(tag: u64, mask: u64) -> tagspace_matcher_t {
    tagspace_matcher_t { tag, mask }
}

/// Whether a received tag belongs to this namespace (0 or 1; 0 if `ns` is `NULL`).
///
/// # Safety
/// `ns` is `NULL` or a live namespace handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_owns(ns: *const tagspace_namespace_t, tag: u64) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { ns.as_ref() }.is_some_and(|ns| ns.ns.owns(Tag::from_raw(tag))) as i32
}

/// The payload of a tag (every bit outside the namespace field); 0 if `ns` is `NULL`.
///
/// # Safety
/// `ns` is `NULL` or a live namespace handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_payload_of(ns: *const tagspace_namespace_t, tag: u64) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { ns.as_ref() }.map_or(0, |ns| ns.ns.payload_of(Tag::from_raw(tag)))
}

/// The UCX Active-Message id for this namespace's local AM id `local` (`0 <= local <
/// am_ids_per_namespace`). AM ids of two namespaces never collide, and id 0 (ucx-py's and
/// ucxx's) is never produced.
///
/// # Safety
/// `ns` is a live namespace handle; `am_id` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_am_id(
    ns: *const tagspace_namespace_t,
    local: u16,
    am_id: *mut u16,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let ns = unsafe { arg(ns, "ns") }?;
        let id = ns.ns.am_id(local)?;
        // SAFETY: the caller's contract.
        unsafe { put(am_id, "am_id", id) }
    })
}

// ---- tags without a namespace ---------------------------------------------------------------

/// Whether a message sent with `tag` matches `m` (0 or 1).
#[no_mangle]
pub extern "C" fn tagspace_matches(m: tagspace_matcher_t, tag: u64) -> i32 {
    RawMatcher::new(m.tag, m.mask).matches(tag) as i32
}

/// The libfabric form (`tag`, `ignore`) of a UCX matcher.
#[no_mangle]
pub extern "C" fn tagspace_matcher_to_libfabric(m: tagspace_matcher_t) -> tagspace_fi_matcher_t {
    let (tag, ignore) = RawMatcher::new(m.tag, m.mask).to_libfabric();
    tagspace_fi_matcher_t { tag, ignore }
}

/// The UCX form (`tag`, `mask`) of a libfabric matcher.
#[no_mangle]
pub extern "C" fn tagspace_matcher_from_libfabric(m: tagspace_fi_matcher_t) -> tagspace_matcher_t {
    let r = RawMatcher::from_libfabric(m.tag, m.ignore);
    matcher_out(r.tag, r.mask)
}

/// Whether some tag matches both `a` and `b` (1, and one such tag in `*witness` if it is not
/// `NULL`) or none does (0). Exact: 0 means they can never take each other's messages.
///
/// # Safety
/// `witness` is `NULL` or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_overlap(
    a: tagspace_matcher_t,
    b: tagspace_matcher_t,
    witness: *mut u64,
) -> i32 {
    match overlap(
        RawMatcher::new(a.tag, a.mask),
        RawMatcher::new(b.tag, b.mask),
    ) {
        Some(w) => {
            if !witness.is_null() {
                // SAFETY: the caller's contract.
                unsafe { witness.write(w) };
            }
            1
        }
        None => 0,
    }
}

/// Which namespace ids of `reg` other than 0 (the unmanaged space) a foreign library's tag
/// pattern `foreign` can reach. Writes up to `cap` ids to `ids` (ascending) and the total in
/// `*count`: 0 means the pattern can never land in a namespace tagspace manages. RAFT-style tags
/// (`(tag << 31) | rank`, top 32 bits zero) give 0; random 64-bit tags (ucxx's hashed tags)
/// reach every id.
///
/// # Safety
/// `reg` is a live handle; `ids` is `NULL` (then `cap` is ignored) or valid for `cap` ids;
/// `count` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_check_foreign(
    reg: *const tagspace_registry_t,
    foreign: tagspace_matcher_t,
    ids: *mut u16,
    cap: usize,
    count: *mut usize,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { arg(reg, "reg") }?.get();
        let foreign = RawMatcher::new(foreign.tag, foreign.mask);
        let mut n = 0usize;
        for id in 1..r.capacity() as u64 {
            // every tag tagspace builds there: the id and the guard bits fixed
            let space = r.layout().space(id as u16);
            if overlap(foreign, space).is_some() {
                if !ids.is_null() && n < cap {
                    // SAFETY: `n < cap`, within the caller's array.
                    unsafe { ids.add(n).write(id as u16) };
                }
                n += 1;
            }
        }
        // SAFETY: the caller's contract.
        unsafe { put(count, "count", n) }
    })
}

/// What `tag` means in `reg`: namespace id and kind, whether it is live or quarantined there,
/// its name if known, and the payload.
///
/// # Safety
/// `reg` is a live handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_decode(
    reg: *const tagspace_registry_t,
    tag: u64,
    out: *mut tagspace_decoded_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { arg(reg, "reg") }?.get();
        let id = r.layout().namespace_of(tag);
        let live = r.name_of(id);
        let kind = if id == UNMANAGED_ID {
            TAGSPACE_NS_UNMANAGED
        } else if id == CONTROL_ID {
            TAGSPACE_NS_CONTROL
        } else if r.honours_well_known() && well_known_name(id).is_some() {
            TAGSPACE_NS_WELL_KNOWN
        } else {
            TAGSPACE_NS_DYNAMIC
        };
        let mut v = tagspace_decoded_t {
            namespace_id: id,
            kind,
            live: live.is_some() as u8,
            quarantined: r.is_quarantined(id) as u8,
            payload: tag & r.layout().payload_mask(),
            name: [0; 65],
        };
        let name: &[u8] = match (&live, kind) {
            (Some((_, n)), _) => n.as_bytes(),
            (None, TAGSPACE_NS_WELL_KNOWN) => well_known_name(id).unwrap_or("").as_bytes(),
            _ => b"",
        };
        // SAFETY: `v.name` holds 65 bytes.
        unsafe { copy_out(name, v.name.as_mut_ptr(), v.name.len()) };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", v) }
    })
}

/// The namespace id an Active-Message id belongs to in `reg`'s layout (for dispatch).
///
/// # Safety
/// `reg` is a live handle; `ns_id` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_am_namespace(
    reg: *const tagspace_registry_t,
    am_id: u16,
    ns_id: *mut u16,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { arg(reg, "reg") }?.get();
        // SAFETY: the caller's contract.
        unsafe { put(ns_id, "ns_id", am_namespace(r.layout(), am_id)) }
    })
}

/// The fixed id of a well-known name, or `TAGSPACE_ERR_NOT_FOUND`.
///
/// # Safety
/// `name` is a NUL-terminated string; `id` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_well_known_id(
    name: *const c_char,
    id: *mut u16,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { c_name(name, "name") }?;
        let v = well_known_id(name.as_bytes()).ok_or_else(|| {
            Fail::new(
                TAGSPACE_ERR_NOT_FOUND,
                format!("{name:?} is not in the well-known table"),
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(id, "id", v) }
    })
}

/// The name that owns well-known id `id` (static storage), or `NULL`.
#[no_mangle]
pub extern "C" fn tagspace_well_known_name(id: u16) -> *const c_char {
    static NAMES: OnceLock<Vec<(u16, CString)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        tagspace_core::wellknown::WELL_KNOWN
            .iter()
            .filter_map(|&(n, id)| Some((id, CString::new(n).ok()?)))
            .collect()
    });
    names
        .iter()
        .find(|(i, _)| *i == id)
        .map_or(std::ptr::null(), |(_, n)| n.as_ptr())
}

#[cfg(test)]
mod tests;
