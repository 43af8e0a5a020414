//! Makes every page of the guide a doctest: the README and each page under `docs/` that
//! `docs/SUMMARY.md` lists become `#[doc]` text of an empty module (`pages.rs` in OUT_DIR).
//! Pages outside `docs/` that SUMMARY lists (core/README.md, ...) are already their own
//! crates' docs, so their examples run there, once.
use std::fmt::Write as _;
use std::path::Path;
use std::{env, fs};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let summary = root.join("docs/SUMMARY.md");
    println!("cargo:rerun-if-changed={}", summary.display());
    println!(
        "cargo:rerun-if-changed={}",
        root.join("README.md").display()
    );
    let text = fs::read_to_string(&summary).unwrap_or_default();
    let mut pages = vec!["README.md".to_string()];
    // Links of the list items: `[Title](path.md)`; the full parse is the checker's job.
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let dest = rest[..end].split('#').next().unwrap_or("");
        if dest.ends_with(".md") && !dest.starts_with("../") && !dest.contains("://") {
            pages.push(format!("docs/{dest}"));
        }
    }
    let mut out = String::new();
    for page in &pages {
        let path = root.join(page);
        println!("cargo:rerun-if-changed={}", path.display());
        if !path.is_file() {
            continue; // the checker reports a SUMMARY entry that names no file
        }
        // Named after the page, so a failing doctest names it (`docs_guides_python_md`).
        let name: String = page
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        writeln!(
            out,
            "#[doc = include_str!({:?})]\n#[doc(hidden)]\npub mod {name} {{}}",
            path.canonicalize().unwrap().display().to_string()
        )
        .unwrap();
    }
    fs::write(
        Path::new(&env::var("OUT_DIR").unwrap()).join("pages.rs"),
        out,
    )
    .unwrap();
}
