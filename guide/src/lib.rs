//! The tagspace user guide as code: its pages (`docs/`, listed by `docs/SUMMARY.md`) and the
//! README are this crate's doctests, so every Rust example in them compiles and runs in
//! `cargo test`; [`check`] is the offline check of every user-facing Markdown file (links,
//! anchors, code-block languages, no tracker references); [`build`] renders the guide to HTML;
//! [`extract`] writes the Python and C/C++ examples out for CI to run and compile.
//!
//! The `guide` binary is the command-line face of the three (`cargo run -p tagspace-guide --
//! check|build|extract`).
#![deny(missing_docs)]
use pulldown_cmark::Options;
use std::fmt;
use std::path::PathBuf;

mod check;
mod extract;
mod html;
mod page;

pub use check::{check, summary_pages, user_documents};
pub use extract::{extract, Extracted};
pub use html::{build, check_built};
pub use page::{parse, slug, tracker_reference, CodeBlock, Link, Page};

include!(concat!(env!("OUT_DIR"), "/pages.rs"));

/// The Markdown extensions every page is read with (GitHub's tables, strikethrough, footnotes
/// and task lists: what the pages are written for).
fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_TASKLISTS
}
/// One thing wrong in one file, at a line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// The file, relative to the repository root.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{is_intra_doc, target};
    use std::path::Path;

    #[test]
    fn slugs_follow_github() {
        assert_eq!(slug("The tag layout"), "the-tag-layout");
        assert_eq!(
            slug("Using tagspace from C and C++ (the C ABI)"),
            "using-tagspace-from-c-and-c-the-c-abi"
        );
        assert_eq!(slug("Host mode — Rust"), "host-mode--rust");
        assert_eq!(
            slug("`tagspace_node_route`: a route"),
            "tagspace_node_route-a-route"
        );
    }

    #[test]
    fn intra_doc_links_are_left_to_rustdoc() {
        assert!(is_intra_doc("crate::fabric"));
        assert!(is_intra_doc("tagspace_core::engine::Engine::poll_transmit"));
        assert!(!is_intra_doc("fabric.md"));
        assert!(!is_intra_doc("../src/a::b"));
        assert_eq!(target(Path::new("README.md"), "crate::node"), None);
    }

    #[test]
    fn repeated_headings_are_numbered() {
        let p = parse("# A\n## Notes\n## Notes\n## Notes\n");
        assert_eq!(p.heading_ids, ["a", "notes", "notes-1", "notes-2"]);
    }

    #[test]
    fn tracker_references_are_found_and_others_are_not() {
        for bad in [
            "see issue 12",
            "(issue 13)",
            "Issues 3 and 4",
            "fixed in #27",
            "[#4]",
            "issue #9",
        ] {
            assert!(tracker_reference(bad).is_some(), "{bad}");
        }
        let linked =
            parse("UCX's [issue #9009](https://github.com/openucx/ucx/issues/9009), our issue 4");
        assert_eq!(linked.problems.len(), 1, "{:?}", linked.problems);
        assert!(linked.problems[0].1.contains("issue 4"));
        for good in [
            "an issue with tags",
            "tissue 3",
            "C# 4",
            "#include",
            "rank#1",
            "issues remain",
        ] {
            assert_eq!(tracker_reference(good), None, "{good}");
        }
    }

    #[test]
    fn code_block_languages_and_attributes() {
        let p = parse(
            "```rust,no_run\nfn main() {}\n```\n\n```python no_run\nx = 1\n```\n\n```\nbare\n```\n",
        );
        let langs: Vec<_> = p
            .code
            .iter()
            .map(|b| (b.language(), b.has("no_run")))
            .collect();
        assert_eq!(langs, [("rust", true), ("python", true), ("", false)]);
        assert_eq!(p.code[1].line, 5);
    }

    fn repo(files: &[(&str, &str)]) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tagspace-guide-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_sound_set_of_pages_passes() {
        let root = repo(&[
            (
                "README.md",
                "# T\nSee [the guide](docs/a.md#second-part) and [src](src/x.rs).\n",
            ),
            ("docs/SUMMARY.md", "# Summary\n- [A](a.md)\n"),
            (
                "docs/a.md",
                "# A\n## Second part\n[up](../README.md#t) [here](#a)\n",
            ),
            ("src/x.rs", ""),
        ]);
        let files = user_documents(&root);
        let problems: Vec<_> = check(&root, &files)
            .into_iter()
            .filter(|p| !p.what.starts_with("cannot read"))
            .collect();
        assert_eq!(problems, []);
    }

    #[test]
    fn each_kind_of_breakage_is_reported_where_it_is() {
        let root = repo(&[
            (
                "README.md",
                "# T\n[gone](docs/missing.md)\n[bad anchor](docs/a.md#nope)\n[out](../../etc/passwd)\n\
                 [code anchor](src/x.rs#L3)\n\n```\nbare\n```\n\nFixed in issue 12.\n\n    indented\n",
            ),
            ("docs/SUMMARY.md", "# Summary\n- [A](a.md)\n"),
            ("docs/a.md", "# A\n\n```rust,ignore\nfn f() {}\n```\n"),
            ("docs/orphan.md", "# Orphan\n"),
            ("src/x.rs", ""),
        ]);
        let files = user_documents(&root);
        let found: Vec<String> = check(&root, &files)
            .iter()
            .filter(|p| !p.what.starts_with("cannot read"))
            .map(|p| format!("{}:{}", p.file.display(), p.line))
            .collect();
        assert_eq!(
            found,
            [
                "README.md:2",
                "README.md:3",
                "README.md:4",
                "README.md:5",
                "README.md:7",
                "README.md:11",
                "README.md:13",
                "docs/a.md:3",
                "docs/orphan.md:1",
            ]
        );
    }

    #[test]
    fn the_build_links_pages_to_pages_and_files_to_files() {
        let root = repo(&[
            (
                "README.md",
                "# T\n[guide](docs/a.md#b-c) [code](src/x.rs)\n",
            ),
            ("docs/SUMMARY.md", "# Summary\n- [A](a.md)\n"),
            (
                "docs/a.md",
                "# A\n## B c\n[home](../README.md) [`x`](crate::x)\n",
            ),
            ("src/x.rs", ""),
        ]);
        let out = root.join("out");
        let written = build(&root, &out).unwrap();
        assert!(written.contains(&PathBuf::from("docs/a.html")));
        let index = std::fs::read_to_string(out.join("index.html")).unwrap();
        assert!(index.contains("href=\"docs/a.html#b-c\""), "{index}");
        assert!(index.contains("href=\"../src/x.rs\""), "{index}");
        let a = std::fs::read_to_string(out.join("docs/a.html")).unwrap();
        assert!(a.contains("<h2 id=\"b-c\">"), "{a}");
        assert!(a.contains("href=\"../index.html\""), "{a}");
        assert!(
            a.contains("<code>x</code>") && !a.contains("crate::x"),
            "{a}"
        );
        // The navigation's links are relative to the page it is in: the README at the root.
        assert!(
            index.contains("<nav>") && index.contains("href=\"docs/a.html\""),
            "{index}"
        );
    }
}
