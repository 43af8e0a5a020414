//! The `tagspace` command as a user runs it: output, exit status, and clear errors.

use std::process::{Command, Output};

fn tagspace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tagspace"))
        .args(args)
        .output()
        .expect("run tagspace")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn decode_names_the_namespace_and_fields() {
    let o = tagspace(&["decode", "0x0200000000000007", "0x10_0000_0000_0000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("namespace 2: well known: dask"), "{out}");
    assert!(out.contains("payload 0x7"), "{out}");
    assert!(out.contains("namespace 0: unmanaged"), "{out}");
    let o = tagspace(&[
        "decode",
        "--layout",
        "ns=48:12,kind=40:8,seq=0:40",
        &format!("{:#x}", (17u64 << 48) | (3 << 40) | 99),
    ]);
    let out = stdout(&o);
    assert!(out.contains("namespace 17: dynamic"), "{out}");
    assert!(
        out.contains("kind 3 (0x3)") && out.contains("seq 99 (0x63)"),
        "{out}"
    );
}

#[test]
fn layout_draws_every_bit() {
    let o = tagspace(&["layout", "--layout=ns=48:12,kind=40:8,seq=0:40"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let map: String = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(map.len(), 64, "{out}");
    assert_eq!(&map[..4], "....");
    assert_eq!(map.matches('N').count(), 12);
    assert_eq!(map.matches('a').count(), 8);
    assert_eq!(map.matches('b').count(), 40);
    assert!(out.contains("4096 ids, 16 AM ids each"), "{out}");
}

#[test]
fn well_known_lists_the_table() {
    let o = tagspace(&["well-known"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for (name, id) in tagspace_core::wellknown::WELL_KNOWN {
        assert!(out.contains(&format!("{id:>2}  {name}")), "{name}: {out}");
    }
}

#[test]
fn check_finds_what_foreign_tags_can_hit() {
    // RAFT-style tags (top 32 bits zero) stay in the unmanaged namespace: exit 0.
    let o = tagspace(&["check", "top32-zero"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("can reach 1 of 256"));
    // ucxx-style hashed tags can hit every namespace: exit 1, with example tags.
    let o = tagspace(&["check", "any"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("can reach 256 of 256") && out.contains("COLLISION POSSIBLE"));
    assert!(
        out.contains("e.g. 0x0200000000000000  well known: dask"),
        "{out}"
    );
    // A UCX tag/mask inside cuml's namespace, and a libfabric tag~ignore outside all of them.
    let o = tagspace(&["check", "0x0500000000000000/0xff00000000000000"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("5  e.g. 0x0500000000000000  well known: cuml"));
    let o = tagspace(&["check", "0~0x00ffffffffffffff"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // The witness really is matched by both sides: a pattern with a half-covered namespace.
    let o = tagspace(&["check", "0x0300000000000000/0x0f00000000000000"]);
    let out = stdout(&o);
    assert!(out.contains("can reach 16 of 256"), "{out}");
    assert!(out.contains("e.g. 0x1300000000000000"), "{out}");
}

#[test]
fn layout_against_keeps_foreign_wildcards_out() {
    // rapidsmpf's recv_any reaches the default layout...
    let o = tagspace(&["check", "rapidsmpf"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("can reach 256 of 256"),
        "{}",
        stdout(&o)
    );
    // ...and a layout chosen against it and BlazingSQL's probe is out of both reaches
    let o = tagspace(&["layout", "--against", "rapidsmpf", "blazingsql", "ucxx"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("ucxx: full-mask receives of random 64-bit tags"),
        "{out}"
    );
    let spec = out
        .lines()
        .find(|l| l.starts_with("ns="))
        .unwrap()
        .to_string();
    assert_eq!(spec, "ns=56:8,pair=32:24,guard=0x80000000/0x80000000");
    assert!(
        out.contains("rapidsmpf (0x0/0xff800000): out of reach: it needs bit 31 to be 0"),
        "{out}"
    );
    assert!(out.contains("blazingsql (0x0/0xffff000000000000): out of reach: it needs the namespace field to be 0"), "{out}");
    // `check` confirms it, the namespace field drawn with the guard bit
    let o = tagspace(&["check", "--layout", &spec, "rapidsmpf", "blazingsql"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let o = tagspace(&["layout", "--layout", &spec]);
    assert!(
        stdout(&o).contains("NNNNNNNN PPPPPPPP PPPPPPPP PPPPPPPP 1......."),
        "{}",
        stdout(&o)
    );
    // named fields and another width
    let o = tagspace(&[
        "layout",
        "--against",
        "rapidsmpf",
        "--width",
        "10",
        "--field",
        "seq:32",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).lines().next().unwrap().contains(":10,pair=")
            && stdout(&o).lines().next().unwrap().contains(",seq="),
        "{}",
        stdout(&o)
    );
    // a full wildcard cannot be avoided: exit 1, saying why
    let o = tagspace(&["layout", "--against", "rapidsmpf", "ucxx-drain"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("ucxx-drain is a full wildcard"),
        "{}",
        stdout(&o)
    );
    let o = tagspace(&["foreign"]);
    for row in tagspace_core::foreign::FOREIGN {
        assert!(stdout(&o).contains(row.preset), "{}", row.preset);
    }
}

#[test]
fn bad_input_is_named_and_exits_2() {
    for (args, says) in [
        (&["decode", "zz"][..], "bad tag \"zz\""),
        (&["decode"][..], "decode needs at least one argument"),
        (&["decode", "0x1_0000_0000_0000_0000"][..], "64-bit"),
        (&["check", "5/"][..], "bad pattern \"5/\""),
        (&["check", "12"][..], "expected TAG/MASK"),
        (
            &["layout", "--layout", "ns=60:8"][..],
            "reaches past bit 63",
        ),
        (
            &["layout", "--layout", "kind=1:2"][..],
            "must start with ns=",
        ),
        (&["layout", "--layout"][..], "--layout needs a SPEC"),
        (&["layout", "extra"][..], "layout takes no arguments"),
        (&["frobnicate"][..], "unknown command \"frobnicate\""),
        (&["layout", "--against"][..], "needs at least one PATTERN"),
        (
            &["layout", "--against", "nosuchlib"][..],
            "bad pattern \"nosuchlib\"",
        ),
        (
            &["layout", "--against", "raft", "--field", "x"][..],
            "not NAME:WIDTH",
        ),
        (
            &["layout", "--against", "raft", "--width", "3"][..],
            "width 3",
        ),
        (&["layout", "--width", "8"][..], "go with layout --against"),
        (
            &["layout", "--layout", "ns=56:8,guard=1/0"][..],
            "guard value 0x0000000000000001 is not inside",
        ),
        (&[][..], "no command"),
    ] {
        let o = tagspace(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("usage:"), "{args:?}: {err}");
        assert!(stdout(&o).is_empty());
    }
}
