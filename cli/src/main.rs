//! `tagspace`: a command-line tool for people debugging tag collisions.
//!
//! ```text
//! tagspace decode <TAG>... [--layout SPEC]   which namespace a raw tag is in, and its fields
//! tagspace layout [--layout SPEC]            the bit map of a layout
//! tagspace well-known                        the table of well-known namespace ids
//! tagspace check <PATTERN>... [--layout SPEC]
//!                                            which namespaces a foreign library's tags can hit
//! ```
//!
//! Numbers are decimal, `0x` hex or `0b` binary (`_` allowed). A layout SPEC is `default` or
//! `ns=SHIFT:WIDTH[,NAME=SHIFT:WIDTH...]` (the namespace field, then named payload fields). A
//! PATTERN is `TAG/MASK` (UCX: mask bits set must match), `TAG~IGNORE` (libfabric: ignore bits
//! set are free), or a preset: `any` (any 64-bit tag, as ucxx's hashed tags) or `top32-zero`
//! (the top 32 bits zero, as RAFT's comms tags).
//!
//! Exit status: 0 on success (for `check`: no pattern can reach a namespace tagspace manages),
//! 1 when `check` finds a pattern that can, 2 on bad input (with a message naming what was
//! wrong).

use std::fmt::Write as _;
use std::process::ExitCode;
use tagspace_core::wellknown::{well_known_name, CONTROL_ID, FIRST_DYNAMIC_ID, WELL_KNOWN};
use tagspace_core::{overlap, RawMatcher, TagLayout};

const USAGE: &str = "\
usage: tagspace decode <TAG>... [--layout SPEC]
       tagspace layout [--layout SPEC]
       tagspace well-known
       tagspace check <PATTERN>... [--layout SPEC]
numbers: decimal, 0x hex or 0b binary; SPEC: default | ns=SHIFT:WIDTH[,NAME=SHIFT:WIDTH...]
PATTERN: TAG/MASK (UCX) | TAG~IGNORE (libfabric) | any | top32-zero";

/// What a command produced: its output and whether `check` found a reachable namespace.
struct Outcome {
    text: String,
    collision: bool,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(Outcome { text, collision }) => {
            print!("{text}");
            if collision {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("tagspace: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<Outcome, String> {
    let mut layout = TagLayout::DEFAULT;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--layout" {
            let spec = it.next().ok_or("--layout needs a SPEC")?;
            layout = parse_layout(spec)?;
        } else if let Some(spec) = a.strip_prefix("--layout=") {
            layout = parse_layout(spec)?;
        } else {
            rest.push(a.as_str());
        }
    }
    let text = |text: String| {
        Ok(Outcome {
            text,
            collision: false,
        })
    };
    match rest.as_slice() {
        ["help" | "--help" | "-h"] => text(format!("{USAGE}\n")),
        ["decode", tags @ ..] if !tags.is_empty() => {
            let mut out = String::new();
            for t in tags {
                let tag = parse_u64(t).map_err(|e| format!("bad tag {t:?}: {e}"))?;
                decode(&mut out, &layout, tag);
            }
            text(out)
        }
        ["layout"] => text(show_layout(&layout)),
        ["well-known"] => text(well_known()),
        ["check", patterns @ ..] if !patterns.is_empty() => {
            let mut out = String::new();
            let mut collision = false;
            for p in patterns {
                let m = parse_pattern(p)?;
                collision |= check(&mut out, &layout, p, m);
            }
            Ok(Outcome {
                text: out,
                collision,
            })
        }
        [] => Err("no command".into()),
        [cmd, ..] => Err(match *cmd {
            "decode" | "check" => format!("{cmd} needs at least one argument"),
            "layout" | "well-known" => format!("{cmd} takes no arguments"),
            _ => format!("unknown command {cmd:?}"),
        }),
    }
}

/// A number: decimal, `0x` hex or `0b` binary, `_` separators allowed.
fn parse_u64(s: &str) -> Result<u64, String> {
    let clean: String = s.chars().filter(|&c| c != '_').collect();
    let (digits, radix) = if let Some(h) = clean.strip_prefix("0x").or(clean.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = clean.strip_prefix("0b").or(clean.strip_prefix("0B")) {
        (b, 2)
    } else {
        (clean.as_str(), 10)
    };
    if digits.is_empty() {
        return Err("no digits".into());
    }
    u64::from_str_radix(digits, radix).map_err(|e| format!("{e} (a 64-bit number expected)"))
}

fn parse_u32(s: &str, what: &str) -> Result<u32, String> {
    let v = parse_u64(s).map_err(|e| format!("bad {what} {s:?}: {e}"))?;
    u32::try_from(v).map_err(|_| format!("{what} {v} is too large"))
}

/// `default`, or `ns=SHIFT:WIDTH[,NAME=SHIFT:WIDTH...]`.
fn parse_layout(spec: &str) -> Result<TagLayout, String> {
    if spec == "default" {
        return Ok(TagLayout::DEFAULT);
    }
    let mut parts = spec.split(',');
    let (shift, width) = match parts.next().and_then(|p| p.strip_prefix("ns=")) {
        Some(f) => parse_field(f)?,
        None => return Err(format!("layout {spec:?} must start with ns=SHIFT:WIDTH")),
    };
    let mut b = TagLayout::builder(shift, width);
    for p in parts {
        let (name, f) = p
            .split_once('=')
            .ok_or_else(|| format!("layout field {p:?} is not NAME=SHIFT:WIDTH"))?;
        let (s, w) = parse_field(f)?;
        b = b.field(name, s, w);
    }
    b.build()
        .map_err(|e| format!("layout {spec:?} is not valid: {}", e.as_str()))
}

fn parse_field(f: &str) -> Result<(u32, u32), String> {
    let (s, w) = f
        .split_once(':')
        .ok_or_else(|| format!("field {f:?} is not SHIFT:WIDTH"))?;
    Ok((parse_u32(s, "shift")?, parse_u32(w, "width")?))
}

/// `TAG/MASK`, `TAG~IGNORE`, `any` or `top32-zero`.
fn parse_pattern(p: &str) -> Result<RawMatcher, String> {
    match p {
        "any" => return Ok(RawMatcher::new(0, 0)),
        "top32-zero" => return Ok(RawMatcher::new(0, 0xffff_ffff_0000_0000)),
        _ => {}
    }
    let bad = |e: String| format!("bad pattern {p:?}: {e}");
    if let Some((t, m)) = p.split_once('/') {
        Ok(RawMatcher::new(
            parse_u64(t).map_err(bad)?,
            parse_u64(m).map_err(bad)?,
        ))
    } else if let Some((t, ig)) = p.split_once('~') {
        Ok(RawMatcher::new(
            parse_u64(t).map_err(bad)?,
            !parse_u64(ig).map_err(bad)?,
        ))
    } else {
        Err(bad(
            "expected TAG/MASK, TAG~IGNORE, any or top32-zero".into()
        ))
    }
}

/// What namespace id `id` is, in words.
fn describe(id: u16) -> String {
    match id {
        0 => "unmanaged (legacy tags; tagspace never registers it)".into(),
        CONTROL_ID => "tagspace's control plane".into(),
        _ => match well_known_name(id) {
            Some(name) => format!("well known: {name}"),
            None if id < FIRST_DYNAMIC_ID => "well-known id, not assigned yet".into(),
            None => "dynamic: per process (the peer directory names it)".into(),
        },
    }
}

fn decode(out: &mut String, layout: &TagLayout, tag: u64) {
    let d = layout.decode(tag);
    let id = d.namespace();
    let _ = writeln!(out, "tag {tag:#018x}");
    let _ = writeln!(out, "  namespace {id}: {}", describe(id));
    let _ = writeln!(out, "  payload {:#x}", d.payload());
    for (name, _) in layout.fields() {
        if let Some(v) = d.get(name) {
            let _ = writeln!(out, "  {name} {v} ({v:#x})");
        }
    }
    if layout.fields().next().is_some() && d.rest() != 0 {
        let _ = writeln!(out, "  bits in no field {:#x}", d.rest());
    }
}

fn show_layout(layout: &TagLayout) -> String {
    let ns = layout.namespace_field();
    let mut map = ['.'; 64];
    let mut legend = vec![format!(
        "  N  namespace: bits {}..{} ({} bits, {} ids, {} AM ids each)",
        ns.shift() + ns.width() - 1,
        ns.shift(),
        ns.width(),
        1u64 << ns.width(),
        layout.am_ids_per_namespace()
    )];
    for bit in ns.shift()..ns.shift() + ns.width() {
        map[63 - bit as usize] = 'N';
    }
    for (i, (name, f)) in layout.fields().enumerate() {
        let c = (b'a' + i as u8) as char;
        for bit in f.shift()..f.shift() + f.width() {
            map[63 - bit as usize] = c;
        }
        legend.push(format!(
            "  {c}  {name}: bits {}..{} ({} bits)",
            f.shift() + f.width() - 1,
            f.shift(),
            f.width()
        ));
    }
    legend.push("  .  payload bits in no named field".into());
    let bits: String = map
        .chunks(8)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "bit 63{}0\n    {bits}\n{}\nfingerprint {:#018x}\n",
        " ".repeat(68),
        legend.join("\n"),
        layout.fingerprint()
    )
}

fn well_known() -> String {
    let mut out = String::from("  id  name\n");
    let _ = writeln!(out, "  {:>2}  (unmanaged: legacy tags)", 0);
    let _ = writeln!(out, "  {:>2}  (tagspace control plane)", CONTROL_ID);
    for (name, id) in WELL_KNOWN {
        let _ = writeln!(out, "  {id:>2}  {name}");
    }
    let _ = writeln!(
        out,
        "  ids {}.. are dynamic, per process; claim a well-known id in WELL_KNOWN.md",
        FIRST_DYNAMIC_ID
    );
    out
}

/// Which namespace ids pattern `m` can reach, each with a tag that proves it (the overlap
/// witness). Returns whether it reaches any id tagspace manages (all but 0).
fn check(out: &mut String, layout: &TagLayout, text: &str, m: RawMatcher) -> bool {
    let ns = layout.namespace_field();
    let ids = 1u32 << ns.width();
    let hits: Vec<(u16, u64)> = (0..ids)
        .filter_map(|id| {
            let space = RawMatcher::new((id as u64) << ns.shift(), ns.mask());
            overlap(m, space).map(|w| (id as u16, w))
        })
        .collect();
    let _ = writeln!(
        out,
        "{text} (tag {:#018x}, mask {:#018x}) can reach {} of {ids} namespaces",
        m.tag,
        m.mask,
        hits.len()
    );
    const SHOWN: usize = 16;
    for &(id, w) in hits.iter().take(SHOWN) {
        let _ = writeln!(out, "  {id:>5}  e.g. {w:#018x}  {}", describe(id));
    }
    if hits.len() > SHOWN {
        let _ = writeln!(out, "  ... and {} more", hits.len() - SHOWN);
    }
    let managed = hits.iter().any(|&(id, _)| id != 0);
    if managed {
        let _ = writeln!(
            out,
            "  COLLISION POSSIBLE: these tags can land in namespaces tagspace manages; a \
             foreign library should keep the namespace field zero (or register a namespace)"
        );
    } else {
        let _ = writeln!(out, "  ok: only the unmanaged namespace 0");
    }
    managed
}
