//! Model checks of the registry under every interleaving loom explores (R1–R5).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tagspace-core --test loom
//! --release --target-dir target-loom` (or `.ci/loom`). A failing schedule prints a
//! `LOOM_CHECKPOINT_FILE`-replayable trace when run with `LOOM_CHECKPOINT_FILE=...`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tagspace_core::{Registry, RegistryError, TagLayout};

type Reg = Registry<4>;

fn registry() -> Arc<Reg> {
    Arc::new(Registry::without_well_known(TagLayout::DEFAULT))
}

/// R2: two threads register the same name at once; exactly one wins, the other is told why.
#[test]
fn same_name_exactly_one_wins() {
    loom::model(|| {
        let r = registry();
        let spawn = |r: Arc<Reg>| {
            thread::spawn(move || match r.register("a") {
                Ok(ns) => {
                    let t = ns.token();
                    core::mem::forget(ns); // keep it registered past the thread
                    Ok(t)
                }
                Err(e) => Err(e),
            })
        };
        let h1 = spawn(r.clone());
        let h2 = spawn(r.clone());
        let (a, b) = (h1.join().unwrap(), h2.join().unwrap());
        let wins = [a, b].iter().filter(|x| x.is_ok()).count();
        assert_eq!(wins, 1, "{a:?} {b:?}");
        for e in [a, b].into_iter().filter_map(Result::err) {
            assert_eq!(e, RegistryError::DuplicateName);
        }
        let winner = a.or(b).unwrap();
        assert_eq!(r.lookup("a"), Some(winner));
    });
}

/// R1: different names registered at once get different ids.
#[test]
fn different_names_different_ids() {
    loom::model(|| {
        let r = registry();
        let spawn = |r: Arc<Reg>, name: &'static str| {
            thread::spawn(move || {
                let ns = r.register(name).unwrap();
                let t = ns.token();
                core::mem::forget(ns);
                t
            })
        };
        let h1 = spawn(r.clone(), "a");
        let h2 = spawn(r.clone(), "b");
        let (a, b) = (h1.join().unwrap(), h2.join().unwrap());
        assert_ne!(a.id, b.id);
        assert_eq!(r.check(a).unwrap().as_str(), "a");
        assert_eq!(r.check(b).unwrap().as_str(), "b");
    });
}

/// R3: an id released by one thread and reused by another; the old token never validates again,
/// and a concurrent check of it sees either the old name or a stale-lease error, never the new
/// name.
#[test]
fn release_and_reuse_rejects_stale_tokens() {
    loom::model(|| {
        let r: Arc<Registry<3>> = Arc::new(Registry::without_well_known(TagLayout::DEFAULT));
        let first = r.register("old").unwrap();
        let stale = first.token();
        let r2 = r.clone();
        let reuser = thread::spawn(move || {
            // Only one dynamic id: this succeeds only after `first` is released.
            match r2.register("new") {
                Ok(ns) => {
                    let t = ns.token();
                    core::mem::forget(ns);
                    Some(t)
                }
                // Still live, or released but not yet freed (R7: no pins here, so the releaser
                // frees it at once, but a registrant can see the moment in between).
                Err(RegistryError::NamespaceExhausted { .. })
                | Err(RegistryError::Quarantined { .. }) => None,
                Err(e) => panic!("unexpected {e:?}"),
            }
        });
        let r3 = r.clone();
        let checker = thread::spawn(move || match r3.check(stale) {
            Ok(name) => assert_eq!(name.as_str(), "old"),
            Err(e) => assert!(matches!(e, RegistryError::StaleLease { .. })),
        });
        drop(first);
        let new = reuser.join().unwrap();
        checker.join().unwrap();
        assert!(r.check(stale).is_err());
        if let Some(t) = new {
            assert_eq!(t.id, stale.id);
            assert_ne!(t.generation, stale.generation);
            assert_eq!(r.check(t).unwrap().as_str(), "new");
        }
    });
}

/// R4: a reader racing with a registration (two-word name) sees nothing or the whole name.
#[test]
fn readers_never_see_torn_names() {
    loom::model(|| {
        // One dynamic id, so that the second name reuses the first one's slot (with more ids
        // the registry would hand out a never-used one: R7's least-recently-released rule).
        let r: Arc<Registry<3>> = Arc::new(Registry::without_well_known(TagLayout::DEFAULT));
        let r2 = r.clone();
        let writer = thread::spawn(move || {
            let ns = r2.register("abcdefgh-ijk").unwrap();
            drop(ns);
            let ns = r2.register("zz").unwrap();
            core::mem::forget(ns);
        });
        let mut seen = 0;
        r.for_each_live(|_, name| {
            assert!(
                name.as_str() == "abcdefgh-ijk" || name.as_str() == "zz",
                "torn name {name:?}"
            );
            seen += 1;
        });
        assert!(seen <= 1);
        writer.join().unwrap();
        assert!(r.lookup("zz").is_some());
    });
}

/// R7: a release and the last unpin race; the id ends up free, whoever frees it.
#[test]
fn release_and_last_unpin_free_the_id() {
    loom::model(|| {
        let r = registry();
        let a = r.register("a").unwrap();
        let token = a.token();
        core::mem::forget(r.register("c").unwrap()); // the other dynamic id is taken
        assert!(r.pin(token));
        let r2 = r.clone();
        let unpinner = thread::spawn(move || r2.unpin(token.id));
        drop(a);
        unpinner.join().unwrap();
        assert!(!r.is_quarantined(token.id));
        let b = r.register("b").unwrap();
        assert_eq!(b.id(), token.id);
        core::mem::forget(b);
    });
}

/// R7: a pin racing the release. If the pin took, the id is never handed out while it is
/// held; once it is given back (or if it never took), the id is free again.
#[test]
fn a_pin_racing_a_release_keeps_the_id_out_of_use() {
    loom::model(|| {
        let r = registry();
        let a = r.register("a").unwrap();
        let token = a.token();
        core::mem::forget(r.register("c").unwrap());
        let r2 = r.clone();
        let pinner = thread::spawn(move || {
            if r2.pin(token) {
                match r2.register("b") {
                    Ok(ns) => panic!("id {} handed out while pinned", ns.id()),
                    Err(RegistryError::NamespaceExhausted { .. })
                    | Err(RegistryError::Quarantined { .. }) => {}
                    Err(e) => panic!("{e:?}"),
                }
                r2.unpin(token.id);
            }
        });
        drop(a);
        pinner.join().unwrap();
        assert!(!r.is_quarantined(token.id));
        let b = r.register("b").unwrap();
        assert_eq!(b.id(), token.id);
        core::mem::forget(b);
    });
}
