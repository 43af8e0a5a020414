//! Threaded stress test of the registry, the real-hardware complement to the loom models (loom
//! treats SeqCst as AcqRel and has no load buffering, so a pass there is evidence, not proof).
//!
//! Each thread registers names from a small shared pool, checks what it holds, and releases. A
//! per-name and a per-id occupancy counter, incremented after registration returns and
//! decremented before release, catches two live leases for one name (R2) or one id (R1).
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tagspace_core::{Registry, RegistryError, TagLayout};

const NAMES: [&str; 6] = ["alpha", "beta", "gamma", "delta", "dask", "cuml"];

#[test]
fn concurrent_register_release_keeps_names_and_ids_unique() {
    let reg: Arc<Registry<32>> =
        Arc::new(Registry::new(TagLayout::builder(59, 5).build().unwrap()));
    let name_holders: Arc<Vec<AtomicUsize>> =
        Arc::new(NAMES.iter().map(|_| AtomicUsize::new(0)).collect());
    let id_holders: Arc<Vec<AtomicUsize>> =
        Arc::new((0..32).map(|_| AtomicUsize::new(0)).collect());
    let threads = 4;
    let rounds = 20_000;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (reg, nh, ih) = (reg.clone(), name_holders.clone(), id_holders.clone());
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let (mut won, mut lost) = (0u64, 0u64);
                for _ in 0..rounds {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let k = (seed % NAMES.len() as u64) as usize;
                    match reg.register(NAMES[k]) {
                        Ok(ns) => {
                            won += 1;
                            assert_eq!(
                                nh[k].fetch_add(1, Ordering::SeqCst),
                                0,
                                "R2 broken for {}",
                                NAMES[k]
                            );
                            assert_eq!(
                                ih[ns.id() as usize].fetch_add(1, Ordering::SeqCst),
                                0,
                                "R1 broken"
                            );
                            assert_eq!(reg.check(ns.token()).unwrap().as_str(), NAMES[k]);
                            assert_eq!(reg.lookup(NAMES[k]), Some(ns.token()));
                            assert!(ns.id() >= 2, "R6: ids 0 and 1 are never handed out");
                            let token = ns.token();
                            ih[ns.id() as usize].fetch_sub(1, Ordering::SeqCst);
                            nh[k].fetch_sub(1, Ordering::SeqCst);
                            drop(ns);
                            assert!(reg.check(token).is_err(), "R3: released lease still valid");
                        }
                        Err(RegistryError::DuplicateName) | Err(RegistryError::IdInUse { .. }) => {
                            lost += 1
                        }
                        Err(e) => panic!("unexpected error {e}"),
                    }
                }
                (won, lost)
            })
        })
        .collect();
    let mut total_won = 0;
    for h in handles {
        let (won, _lost) = h.join().unwrap();
        total_won += won;
    }
    assert!(total_won > 0);
    assert_eq!(reg.live_count(), 0);
}

#[test]
fn readers_see_whole_names_during_churn() {
    // R4 on real hardware: long names that differ in every word, so a torn read would be
    // visible as a name that is not in the pool.
    let pool: Vec<String> = (0..4)
        .map(|i| format!("{0}{0}{0}{0}{0}{0}{0}{0}-{i}", char::from(b'a' + i as u8)).repeat(3))
        .collect();
    let reg: Arc<Registry<32>> =
        Arc::new(Registry::new(TagLayout::builder(59, 5).build().unwrap()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (reg, pool, stop) = (reg.clone(), pool.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let _ns = reg.register(&pool[i % pool.len()]).unwrap();
                i += 1;
            }
        })
    };
    for _ in 0..200_000 {
        reg.for_each_live(|_, n| assert!(pool.iter().any(|p| p == n.as_str()), "torn: {n:?}"));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

#[test]
fn session_stays_consistent_while_the_registry_churns() {
    // The sender's registry changes under it (names moving between ids) while its session
    // streams HELLO/ANNOUNCE/WITHDRAW to a peer: the peer must never see a protocol error, and
    // once the churn stops the peer's directory equals the sender's registry.
    use tagspace_core::session::Session;
    use tagspace_core::wire::{self, Role};
    let reg: Arc<Registry<32>> =
        Arc::new(Registry::new(TagLayout::builder(59, 5).build().unwrap()));
    let peer_reg: Registry<32> = Registry::new(TagLayout::builder(59, 5).build().unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (reg, stop) = (reg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seed = 0x1234_5678_9abc_def1u64;
            let mut held: Vec<Option<tagspace_core::Namespace<'_, 32>>> =
                (0..NAMES.len()).map(|_| None).collect();
            while !stop.load(Ordering::Relaxed) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let k = (seed % NAMES.len() as u64) as usize;
                held[k] = match held[k].take() {
                    Some(_) => None,
                    None => reg.register(NAMES[k]).ok(),
                };
            }
        })
    };
    let mut tx: Session<32> = Session::new(
        Role::Initiator,
        &tagspace_core::Identity::from_seed(&[1; 32]),
        reg.layout(),
    );
    let mut rx: Session<32> = Session::new(
        Role::Acceptor,
        &tagspace_core::Identity::from_seed(&[2; 32]),
        peer_reg.layout(),
    );
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let mut frames = 0u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    while std::time::Instant::now() < deadline {
        while let Some(n) = tx.poll_transmit(&*reg, &mut buf).unwrap() {
            rx.handle(&buf[..n])
                .unwrap_or_else(|e| panic!("peer refused an honest frame: {e}"));
            frames += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap(); // its leases drop with the thread
    while let Some(n) = tx.poll_transmit(&*reg, &mut buf).unwrap() {
        rx.handle(&buf[..n]).unwrap();
    }
    assert!(
        frames > 100,
        "the churn produced too little traffic to mean anything ({frames})"
    );
    let mut live = Vec::new();
    reg.for_each_live(|t, n| live.push((*n, t.id)));
    live.sort();
    let dir: Vec<_> = rx.directory().iter().map(|(n, i)| (*n, i)).collect();
    assert_eq!(dir, live);
}

/// R7 on real hardware: threads register, pin, release, check that the id they pinned stays
/// quarantined (no other thread can take it) and unpin, while others do the same. Every pin is
/// given back, so at the end nothing is quarantined and every id can be registered again.
#[test]
fn pinned_ids_are_never_handed_out() {
    let reg: Arc<Registry<24>> = Arc::new(Registry::without_well_known(TagLayout::DEFAULT));
    let threads = 4;
    let rounds = 20_000;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let reg = reg.clone();
            std::thread::spawn(move || {
                let (mut pinned, mut busy) = (0u64, 0u64);
                for i in 0..rounds {
                    let name = format!("t{t}-{}", i % 5);
                    let ns = match reg.register(&name) {
                        Ok(ns) => ns,
                        Err(RegistryError::Quarantined { .. })
                        | Err(RegistryError::NamespaceExhausted { .. }) => {
                            busy += 1;
                            continue;
                        }
                        Err(e) => panic!("{e}"),
                    };
                    let token = ns.token();
                    let pin = i % 2 == 0;
                    if pin {
                        assert!(reg.pin(token), "a live lease must pin");
                    }
                    drop(ns);
                    if pin {
                        pinned += 1;
                        assert!(
                            reg.is_quarantined(token.id),
                            "id {} left quarantine while pinned",
                            token.id
                        );
                        std::thread::yield_now();
                        assert!(reg.is_quarantined(token.id));
                        reg.unpin(token.id);
                    }
                }
                (pinned, busy)
            })
        })
        .collect();
    let mut pinned = 0;
    for h in handles {
        let (p, _) = h.join().unwrap();
        pinned += p;
    }
    assert!(
        pinned > 1000,
        "too few pinned rounds to mean anything ({pinned})"
    );
    assert_eq!(reg.quarantined_count(), 0);
    let all: Vec<_> = (0..22)
        .map(|i| reg.register(&format!("end-{i}")).unwrap())
        .collect();
    assert_eq!(all.len(), 22, "every dynamic id is free again");
}
