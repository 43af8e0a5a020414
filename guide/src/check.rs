//! The offline check of the user documents: links, anchors, code fences, the summary.
use crate::page::{parse, Page};
use crate::Problem;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// `path` with `.` and `..` folded, or `None` if it climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            _ => return None,
        }
    }
    Some(out)
}

/// A rustdoc intra-doc link (`crate::fabric`, `Node::adopt`, `super::x`) in a README that is
/// also a crate's doc: rustdoc resolves those (and `-D warnings` fails on a broken one).
pub(crate) fn is_intra_doc(dest: &str) -> bool {
    !dest.contains('/')
        && !dest.contains('#')
        && dest.contains("::")
        && dest
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '!' | '(' | ')' | '@'))
}

/// A link's target: `None` for a link that leaves the repository (a URL or `mailto:`), else
/// the file (relative to the root; the page itself for `#anchor`) and the anchor.
pub(crate) fn target(from: &Path, dest: &str) -> Option<Result<(PathBuf, Option<String>), String>> {
    if dest.contains("://") || dest.starts_with("mailto:") || is_intra_doc(dest) {
        return None;
    }
    let (file, anchor) = match dest.split_once('#') {
        Some((f, a)) => (f, Some(a.to_string())),
        None => (dest, None),
    };
    if file.is_empty() {
        return Some(Ok((from.to_path_buf(), anchor)));
    }
    if file.starts_with('/') {
        return Some(Err(format!(
            "`{dest}`: absolute path (use a path relative to the page)"
        )));
    }
    let dir = from.parent().unwrap_or(Path::new(""));
    Some(match normalize(&dir.join(file)) {
        Some(p) => Ok((p, anchor)),
        None => Err(format!("`{dest}` points outside the repository")),
    })
}

/// The user-facing Markdown files of the repository at `root`: the README, the CHANGELOG,
/// every page under `docs/`, each crate's README, and the tables in `core/`.
pub fn user_documents(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "core/README.md",
        "core/FOREIGN.md",
        "core/WELL_KNOWN.md",
        "adapter-mock/README.md",
        "adapter-ucx/README.md",
        "capi/README.md",
        "cli/README.md",
        "python/README.md",
        "sim/README.md",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut stack = vec![PathBuf::from("docs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = dir.join(e.file_name());
            if e.path().is_dir() {
                stack.push(rel);
            } else if rel.extension().is_some_and(|x| x == "md") {
                files.push(rel);
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

/// The pages `docs/SUMMARY.md` lists, in order, relative to the root (some may lie outside
/// `docs/`), or the problem that stops reading it.
pub fn summary_pages(root: &Path) -> Result<Vec<PathBuf>, Problem> {
    let rel = Path::new("docs/SUMMARY.md");
    let text = std::fs::read_to_string(root.join(rel)).map_err(|e| Problem {
        file: rel.into(),
        line: 1,
        what: format!("cannot read: {e}"),
    })?;
    let mut pages = Vec::new();
    for link in parse(&text).links {
        if let Some(Ok((file, _))) = target(rel, &link.dest) {
            if !pages.contains(&file) {
                pages.push(file);
            }
        }
    }
    Ok(pages)
}

/// Checks every file of `files` (relative to `root`): each relative link names a file of the
/// repository, each anchor a heading (or HTML id) of its Markdown target, each code block has a
/// language and none is `ignore`d Rust, no prose refers to a tracker; and `docs/SUMMARY.md`
/// lists every page under `docs/`. URLs are not fetched (the check is offline).
pub fn check(root: &Path, files: &[PathBuf]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut pages: BTreeMap<PathBuf, Page> = BTreeMap::new();
    let mut read = |file: &Path, problems: &mut Vec<Problem>| -> Option<Page> {
        if let Some(p) = pages.get(file) {
            return Some(p.clone());
        }
        match std::fs::read_to_string(root.join(file)) {
            Ok(text) => {
                let page = parse(&text);
                pages.insert(file.to_path_buf(), page.clone());
                Some(page)
            }
            Err(e) => {
                problems.push(Problem {
                    file: file.into(),
                    line: 1,
                    what: format!("cannot read: {e}"),
                });
                None
            }
        }
    };
    for file in files {
        let Some(page) = read(file, &mut problems) else {
            continue;
        };
        let mut report = |line: usize, what: String| {
            problems.push(Problem {
                file: file.clone(),
                line,
                what,
            })
        };
        for (line, what) in &page.problems {
            report(*line, what.clone());
        }
        for block in &page.code {
            if block.language().is_empty() {
                report(
                    block.line,
                    "code block without a language (rustdoc would run it as Rust)".into(),
                );
            } else if block.language() == "rust" && block.has("ignore") {
                report(
                    block.line,
                    "`rust,ignore`: the guide's Rust compiles (use no_run if it cannot run)".into(),
                );
            }
        }
        for link in &page.links {
            match target(file, &link.dest) {
                None => {}
                Some(Err(what)) => report(link.line, what),
                Some(Ok((target_file, anchor))) => {
                    if !root.join(&target_file).exists() {
                        report(
                            link.line,
                            format!("`{}`: no such file {}", link.dest, target_file.display()),
                        );
                        continue;
                    }
                    let Some(anchor) = anchor else { continue };
                    if target_file.extension().is_none_or(|x| x != "md") {
                        report(
                            link.line,
                            format!(
                                "`{}`: an anchor into a file that is not Markdown",
                                link.dest
                            ),
                        );
                        continue;
                    }
                    let anchors = if &target_file == file {
                        page.anchors.clone()
                    } else {
                        match read(&target_file, &mut Vec::new()) {
                            Some(p) => p.anchors,
                            None => BTreeSet::new(),
                        }
                    };
                    if !anchors.contains(&anchor) {
                        report(
                            link.line,
                            format!(
                                "`{}`: {} has no heading with the anchor `#{anchor}`",
                                link.dest,
                                target_file.display()
                            ),
                        );
                    }
                }
            }
        }
    }
    match summary_pages(root) {
        Err(p) => problems.push(p),
        Ok(listed) => {
            for file in files {
                if file.starts_with("docs")
                    && file != Path::new("docs/SUMMARY.md")
                    && !listed.contains(file)
                {
                    problems.push(Problem {
                        file: file.clone(),
                        line: 1,
                        what: "not listed in docs/SUMMARY.md".into(),
                    });
                }
            }
        }
    }
    problems.sort();
    problems
}
