//! The conformance suite, written once against [`Cluster`] and run on every adapter.
//!
//! A `Cluster` is a set of processes running tagspace over one transport. The mock implements
//! it in [`mock::MockCluster`]; the UCX adapter over real UCX workers in [`ucx::UcxCluster`]. Run the
//! whole suite on an implementation with [`conformance_suite!`].

pub mod mock;
pub mod suite;
pub mod ucx;

/// A process in a cluster.
pub type Proc = usize;
/// A library registered in one process.
pub type Lib = usize;
/// An operation in flight.
pub type Op = u64;
/// The outcome of an operation: `Some(data)` for receives.
pub type OpResult = Result<Option<Vec<u8>>, String>;

/// Process `p`'s identity: a fixed seed per process, so runs repeat exactly (test only: real
/// identities are made from the operating system's randomness).
pub fn identity(p: Proc) -> tagspace_core::Identity {
    let mut seed = [0x5e; 32];
    seed[..8].copy_from_slice(&(p as u64).to_le_bytes());
    tagspace_core::Identity::from_seed(&seed)
}

/// Per-namespace counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Sent.
    pub sent: u64,
    /// Received.
    pub received: u64,
    /// Failed.
    pub failed: u64,
}

/// What a transport must offer for the conformance suite. Errors are strings: the suite checks
/// that they say what was wrong, not their types.
pub trait Cluster {
    /// Starts a process.
    fn spawn(&mut self) -> Proc;
    /// Registers a library in `p`.
    fn register(&mut self, p: Proc, name: &str) -> Result<Lib, String>;
    /// Releases it.
    fn release(&mut self, p: Proc, lib: Lib);
    /// `from` opens a connection to `to` (both calls before `settle` = simultaneous connect).
    fn connect(&mut self, from: Proc, to: Proc) -> Result<(), String>;
    /// Starts a process in host mode: its worker and endpoints belong to a "host" whose own
    /// libraries send on them too (ucxx-style random tags, RAFT-style tags), so tagspace
    /// takes nothing it does not own (see `Node::adopt` on UCX, `Node::set_host_mode` on the
    /// mock). Hosted processes connect only to hosted ones.
    fn spawn_hosted(&mut self) -> Proc;
    /// Host mode: released ids kept quarantined because a host's message waits in them.
    fn quarantine_held(&self, p: Proc) -> usize;
    /// Lets every process make progress until nothing more happens without time passing.
    fn settle(&mut self);
    /// Lets `ms` milliseconds pass (with progress).
    fn advance_ms(&mut self, ms: u64);
    /// Sends `data` with `payload` to `lib`'s namespace in `to`.
    fn send(
        &mut self,
        p: Proc,
        lib: Lib,
        to: Proc,
        payload: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> Op;
    /// Sends to `lib`'s inbox in `to`.
    fn send_inbox(&mut self, p: Proc, lib: Lib, to: Proc, data: &[u8], timeout_ms: u64) -> Op;
    /// Posts a receive from any proven peer (the pair field free; a stranger's message is
    /// dropped and the receive waits on).
    fn recv(&mut self, p: Proc, lib: Lib, payload: u64) -> Op;
    /// Posts an exact receive (full mask) for `from`'s message only.
    fn recv_from(&mut self, p: Proc, lib: Lib, from: Proc, payload: u64) -> Op;
    /// Takes a finished operation's result.
    fn take(&mut self, p: Proc, op: Op) -> Option<OpResult>;
    /// Takes an inbox message if one waits.
    fn probe_inbox(&mut self, p: Proc, lib: Lib) -> Option<Vec<u8>>;
    /// Listens on a local AM id.
    fn am_listen(&mut self, p: Proc, lib: Lib, local: u16);
    /// Sends an Active Message.
    fn am_send(&mut self, p: Proc, lib: Lib, to: Proc, local: u16, data: &[u8]) -> Op;
    /// Takes a received Active Message.
    fn am_take(&mut self, p: Proc, lib: Lib, local: u16) -> Option<Vec<u8>>;
    /// Kills a process (`kill -9`).
    fn kill(&mut self, p: Proc);
    /// `p` stops calling `progress` for good (stopped, deadlocked) but stays alive: the
    /// transport sees nothing wrong with it.
    fn freeze(&mut self, p: Proc);
    /// `p`, frozen, calls `progress` again (SIGCONT).
    fn thaw(&mut self, p: Proc);
    /// The link between `a` and `b` fails while both live: the mock's fabric cuts it (every
    /// endpoint between them fails, connecting across fails until [`heal`](Self::heal)); on
    /// UCX in one process, where loopback cannot be cut, `a`'s endpoints to `b` fail (its
    /// transport reports them reset) and the link is usable again at once — the real cut and
    /// heal is `scripts/two-hosts.sh --heal`.
    fn cut(&mut self, a: Proc, b: Proc);
    /// The link [`cut`](Self::cut) between `a` and `b` works again.
    fn heal(&mut self, a: Proc, b: Proc);
    /// Peers lost to a fault that came back, counted at `p` (the side that dials them).
    fn reconnects(&self, p: Proc) -> u64;
    /// A legacy library outside tagspace sends a raw tag on the shared endpoint.
    fn legacy_send(&mut self, from: Proc, to: Proc, tag: u64, data: &[u8]);
    /// A legacy library outside tagspace probes `p`'s worker with a raw `(tag, mask)`.
    fn legacy_probe(&mut self, p: Proc, tag: u64, mask: u64, remove: bool) -> Option<u64>;
    /// A hostile peer sends raw bytes as a control frame.
    fn inject_control(&mut self, from: Proc, to: Proc, bytes: &[u8]);
    /// A connection from outside tagspace (no node behind it) to `to`, which sends each of
    /// `frames` as a control message once wired up, and stays open.
    fn raw_control(&mut self, to: Proc, frames: &[Vec<u8>]);
    /// Messages for unregistered ids drained in `p`.
    fn stray(&self, p: Proc) -> u64;
    /// Messages waiting in `p`'s unexpected queue.
    fn unexpected(&self, p: Proc) -> usize;
    /// Counters of a library.
    fn counters(&self, p: Proc, lib: Lib) -> Counters;
    /// The namespace id a live library holds in its process.
    fn namespace_id(&self, p: Proc, lib: Lib) -> u16;
    /// Open connections from `a` to `b`.
    fn live_connections(&self, a: Proc, b: Proc) -> usize;
    /// Control-plane errors `p` saw from peers.
    fn protocol_errors(&self, p: Proc) -> usize;
    /// Connections `p` cut off because the peer went over its flood limits (D5), its backlog
    /// limits included.
    fn flood_closes(&self, p: Proc) -> u64;
    /// `lib` on `p` receives only through the node and holds its backlog: at most `messages`
    /// waiting per peer (`hold_backlog`).
    fn hold_backlog(&mut self, p: Proc, lib: Lib, messages: u32) -> Result<(), String>;
    /// The namespace field's layout (to build legacy tags).
    fn layout(&self) -> tagspace_core::TagLayout;
    /// Keeps messages in flight from now on until `hold(false)` (the mock's fabric holds them
    /// on the wire; a real transport's messages are in flight until the nodes progress, so on
    /// UCX this does nothing).
    fn hold(&mut self, on: bool);
}

/// Drives operations until they finish (settling between checks) or `rounds` run out.
pub fn wait<C: Cluster + ?Sized>(c: &mut C, p: Proc, op: Op, rounds: usize) -> Option<OpResult> {
    for _ in 0..rounds {
        if let Some(r) = c.take(p, op) {
            return Some(r);
        }
        c.settle();
    }
    c.take(p, op)
}

/// Expands to one `#[test]` per conformance case, each on a fresh cluster from `$make`.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            isolation_three_libraries_one_endpoint,
            a_peers_tags_match_only_its_own_receives,
            legacy_wildcard_probe_outside_tagspace,
            different_registration_orders,
            send_to_missing_name_waits_then_fails,
            send_waits_for_late_announcement,
            send_during_handshake_waits,
            simultaneous_connect_keeps_one,
            malformed_control_bytes_close_only_that_peer,
            a_peer_flooding_control_frames_is_cut_off_alone,
            a_peer_over_a_held_backlog_is_cut_off_alone,
            claimed_identity_is_not_a_peer,
            released_id_is_quarantined_until_peers_confirm,
            released_names_messages_in_flight_never_reach_the_next_owner,
            a_peer_that_stops_progressing_is_cut_off,
            a_stopped_process_rejoins_when_it_resumes,
            a_cut_link_reconnects_when_it_heals,
            stray_messages_counted_and_drained,
            peer_failure_mid_stream,
            receives_tied_to_a_dying_peer_end_with_peer_down,
            a_released_librarys_receives_end_with_no_such_library,
            ordering_per_sender,
            active_messages_are_namespaced,
            registry_capacity_namespaces,
            many_processes,
            randomized_exactly_once,
            host_libraries_coexist_with_tagspace
        );
    };
    (@cases $make:expr; $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                let mut cluster = $make;
                $crate::suite::$case(&mut cluster);
            }
        )*
    };
}
