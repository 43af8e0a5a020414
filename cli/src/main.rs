#![doc = include_str!("../README.md")]

use std::fmt::Write as _;
use std::process::ExitCode;
use tagspace_core::foreign::{self, choose_layout, ChooseError, FOREIGN};
use tagspace_core::wellknown::{well_known_name, CONTROL_ID, FIRST_DYNAMIC_ID, WELL_KNOWN};
use tagspace_core::{overlap, RawMatcher, Reach, TagLayout};

const USAGE: &str = "\
usage: tagspace decode <TAG>... [--layout SPEC]
       tagspace layout [--layout SPEC]
       tagspace layout --against <PATTERN>... [--width W] [--field NAME:WIDTH]...
       tagspace well-known
       tagspace foreign
       tagspace check <PATTERN>... [--layout SPEC]
numbers: decimal, 0x hex or 0b binary
SPEC: default | ns=SHIFT:WIDTH[,pair=SHIFT:WIDTH][,NAME=SHIFT:WIDTH...][,guard=VALUE/MASK]
PATTERN: TAG/MASK (UCX) | TAG~IGNORE (libfabric) | a preset (tagspace foreign) | any | top32-zero";

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
    let mut against = false;
    let mut width = None;
    let mut fields = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        // `--name VALUE` or `--name=VALUE`
        let mut value = |name: &str, needs: &str| -> Result<Option<String>, String> {
            if a == name {
                return match it.next() {
                    Some(v) => Ok(Some(v.clone())),
                    None => Err(format!("{name} needs {needs}")),
                };
            }
            Ok(a.strip_prefix(name)
                .and_then(|v| v.strip_prefix('='))
                .map(str::to_string))
        };
        if let Some(v) = value("--layout", "a SPEC")? {
            layout = parse_layout(&v)?;
        } else if let Some(v) = value("--width", "a number of bits")? {
            width = Some(parse_u32(&v, "width")?);
        } else if let Some(v) = value("--field", "NAME:WIDTH")? {
            let (name, w) = v
                .split_once(':')
                .ok_or_else(|| format!("field {v:?} is not NAME:WIDTH"))?;
            fields.push((name.to_string(), parse_u32(w, "field width")?));
        } else if a == "--against" {
            against = true;
        } else {
            rest.push(a.as_str());
        }
    }
    if against {
        return match rest.as_slice() {
            ["layout", patterns @ ..] if !patterns.is_empty() => {
                choose(patterns, width.unwrap_or(8), &fields)
            }
            ["layout"] => Err("layout --against needs at least one PATTERN".into()),
            _ => Err("--against goes with the layout command".into()),
        };
    }
    if width.is_some() || !fields.is_empty() {
        return Err("--width and --field go with layout --against".into());
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
        ["foreign"] => text(foreign_table()),
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
            "layout" | "well-known" | "foreign" => format!("{cmd} takes no arguments"),
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

/// A layout SPEC, read by the core (the same syntax every entry point takes).
fn parse_layout(spec: &str) -> Result<TagLayout, String> {
    TagLayout::parse_spec(spec).map_err(|e| format!("layout {spec:?}: {e}"))
}

/// `TAG/MASK`, `TAG~IGNORE`, a preset of the foreign table, `any` or `top32-zero`.
fn parse_pattern(p: &str) -> Result<RawMatcher, String> {
    match p {
        "any" => return Ok(RawMatcher::new(0, 0)),
        "top32-zero" => return Ok(RawMatcher::new(0, 0xffff_ffff_0000_0000)),
        _ => {}
    }
    if let Some(row) = foreign::preset(p) {
        return Ok(row.pattern);
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
            "expected TAG/MASK, TAG~IGNORE, a preset (see `tagspace foreign`), any or top32-zero"
                .into(),
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
    match layout.pair_field() {
        Some(p) => {
            for bit in p.shift()..p.shift() + p.width() {
                map[63 - bit as usize] = 'P';
            }
            legend.push(format!(
                "  P  pair: bits {}..{} ({} bits: the value each peer is given, so a process that \
                 never proved itself here guesses a tag with probability 2^-{} per message)",
                p.shift() + p.width() - 1,
                p.shift(),
                p.width(),
                p.width()
            ));
        }
        None => legend.push(
            "  (no pair field: anything that can connect can forge any peer's tags; add \
             pair=SHIFT:WIDTH)"
                .into(),
        ),
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
    if layout.guard_mask() != 0 {
        let (m, v) = (layout.guard_mask(), layout.guard_value());
        for bit in 0..64 {
            if m >> bit & 1 == 1 {
                map[63 - bit] = if v >> bit & 1 == 1 { '1' } else { '0' };
            }
        }
        legend.push(format!(
            "  0/1 guard bits ({}): the values every tagspace tag has there ({v:#x}/{m:#x})",
            m.count_ones()
        ));
    }
    legend.push("  .  payload bits in no named field".into());
    let bits: String = map
        .chunks(8)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "bit 63{}0\n    {bits}\n{}\nspec {}\nfingerprint {:#018x}\n",
        " ".repeat(68),
        legend.join("\n"),
        layout.spec(),
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
    let ids = layout.id_capacity();
    let hits: Vec<(u16, u64)> = (0..ids)
        .filter_map(|id| overlap(m, layout.space(id as u16)).map(|w| (id as u16, w)))
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
        let why = match layout.reach(m) {
            Reach::UnmanagedOnly => "only the unmanaged namespace 0".to_string(),
            why => why.to_string(),
        };
        let _ = writeln!(out, "  ok: {why}");
    }
    managed
}

/// `layout --against`: a layout none of `patterns` can reach, with the proof for each.
fn choose(patterns: &[&str], width: u32, fields: &[(String, u32)]) -> Result<Outcome, String> {
    let mut out = String::new();
    // rows of random full-mask tags need no layout: say so, and leave them out
    let mut considered = Vec::new();
    for p in patterns {
        match foreign::preset(p) {
            Some(row) if row.kind == foreign::Kind::RandomFullMask => {
                let _ = writeln!(
                    out,
                    "# {p}: full-mask receives of random 64-bit tags: no layout is needed"
                );
            }
            _ => considered.push((*p, parse_pattern(p)?)),
        }
    }
    let fields: Vec<(&str, u32)> = fields.iter().map(|(n, w)| (n.as_str(), *w)).collect();
    let ms: Vec<RawMatcher> = considered.iter().map(|&(_, m)| m).collect();
    let fail = |mut out: String, why: String| {
        out.push_str(&why);
        out.push('\n');
        Ok(Outcome {
            text: out,
            collision: true,
        })
    };
    let layout = match choose_layout(&ms, width, &fields) {
        Ok(l) => l,
        Err(ChooseError::FullWildcard { index }) => {
            let why = format!(
                "{} is a full wildcard (mask 0): it takes any tag on the worker it shares, and \
                 no layout can avoid it. Keep tagspace off that worker, or shut tagspace down \
                 before it runs.",
                considered[index].0
            );
            return fail(out, why);
        }
        Err(ChooseError::NoLayout) => return fail(out, ChooseError::NoLayout.to_string()),
        Err(e) => return Err(e.to_string()),
    };
    let _ = writeln!(out, "{}", layout.spec());
    out.push_str(&show_layout(&layout));
    for (p, m) in &considered {
        let _ = writeln!(
            out,
            "{p} ({:#x}/{:#x}): {}",
            m.tag,
            m.mask,
            layout.reach(*m)
        );
    }
    Ok(Outcome {
        text: out,
        collision: false,
    })
}

/// `tagspace foreign`: the table of foreign patterns.
fn foreign_table() -> String {
    let mut out = String::new();
    for row in FOREIGN {
        let _ = writeln!(
            out,
            "{:<14} {:#x}/{:#x}  removes: {}  avoidable: {}\n{:15}{} {}: {}\n{:15}{}",
            row.preset,
            row.pattern.tag,
            row.pattern.mask,
            if row.removes { "yes" } else { "no" },
            row.avoidable_text(),
            "",
            row.library,
            row.versions,
            row.call,
            "",
            row.source,
        );
    }
    out
}
