//! The tagspace user guide as code: its pages (`docs/`, listed by `docs/SUMMARY.md`) and the
//! README are this crate's doctests, so every Rust example in them compiles and runs in
//! `cargo test`; [`check`] is the offline check of every user-facing Markdown file (links,
//! anchors, code-block languages, no tracker references); [`build`] renders the guide to HTML;
//! [`extract`] writes the Python and C/C++ examples out for CI to run and compile.
//!
//! The `guide` binary is the command-line face of the three (`cargo run -p tagspace-guide --
//! check|build|extract`).
#![deny(missing_docs)]

use pulldown_cmark::{CodeBlockKind, CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};

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

/// A link or image destination, where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// As written (`../x.md#anchor`, `#anchor`, `https://...`).
    pub dest: String,
    /// 1-based line.
    pub line: usize,
}

/// A fenced code block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeBlock {
    /// The fence's info string (`rust,no_run`, `python no_run`, `c`).
    pub info: String,
    /// The code.
    pub code: String,
    /// 1-based line of the opening fence.
    pub line: usize,
}

impl CodeBlock {
    /// The language: the info string's first word (`rust` in `rust,no_run`).
    pub fn language(&self) -> &str {
        self.info
            .split([',', ' ', '\t', '{'])
            .next()
            .unwrap_or("")
            .trim()
    }

    /// Whether the info string carries `attr` after the language (`no_run`, `ignore`).
    pub fn has(&self, attr: &str) -> bool {
        self.info
            .split([',', ' ', '\t'])
            .skip(1)
            .any(|a| a.trim() == attr)
    }
}

/// What a Markdown file holds that the checks need.
#[derive(Debug, Default, Clone)]
pub struct Page {
    /// Anchors a link can name: heading slugs (GitHub's rule, repeats numbered) and raw HTML
    /// `id`/`name` attributes.
    pub anchors: BTreeSet<String>,
    /// Each heading's slug, in order (what [`build`] gives the HTML headings as ids).
    pub heading_ids: Vec<String>,
    /// Every link and image.
    pub links: Vec<Link>,
    /// Every fenced code block.
    pub code: Vec<CodeBlock>,
    /// Problems found while reading (indented code blocks, tracker references).
    pub problems: Vec<(usize, String)>,
}

/// GitHub's anchor for a heading's text: lower case, characters other than letters, digits,
/// spaces, `-` and `_` dropped, each space a `-`.
pub fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A reference to an issue tracker in prose (`issue 12`, `issues 3`, `#27`), which means
/// nothing to a reader of the product's documents.
pub fn tracker_reference(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let bytes = lower.as_bytes();
    let digit_at = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    for (i, _) in lower.match_indices("issue") {
        let before_ok = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let mut j = i + "issue".len();
        if bytes.get(j) == Some(&b's') {
            j += 1;
        }
        let spaced = bytes.get(j) == Some(&b' ');
        while bytes.get(j) == Some(&b' ') {
            j += 1;
        }
        if bytes.get(j) == Some(&b'#') {
            j += 1;
        } else if !spaced {
            continue;
        }
        if before_ok && digit_at(j) {
            return Some(number_span(text, i, j));
        }
    }
    for (i, _) in lower.match_indices('#') {
        let before_ok = i == 0 || matches!(bytes[i - 1], b' ' | b'(' | b'[');
        if before_ok && digit_at(i + 1) {
            return Some(number_span(text, i, i + 1));
        }
    }
    None
}

fn number_span(text: &str, start: usize, digits: usize) -> String {
    let end = text[digits..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(text.len(), |e| digits + e);
    text[start..end].to_string()
}

/// Reads a page.
pub fn parse(text: &str) -> Page {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut page = Page::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    let mut block: Option<CodeBlock> = None;
    // Inside a link to a URL, `#123` names another project's tracker (`openucx/ucx#9009`
    // linked to its page), which a reader can follow: only bare numbers are ours.
    let mut open_links: Vec<bool> = Vec::new();
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        let line = line_of(range.start);
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                let id = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                *n += 1;
                page.anchors.insert(id.clone());
                page.heading_ids.push(id);
            }
            Event::End(TagEnd::Link) => {
                open_links.pop();
            }
            Event::Start(Tag::Link { ref dest_url, .. })
            | Event::Start(Tag::Image { ref dest_url, .. }) => {
                if matches!(event, Event::Start(Tag::Link { .. })) {
                    open_links.push(dest_url.contains("://"));
                }
                page.links.push(Link {
                    dest: dest_url.to_string(),
                    line,
                })
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                block = Some(CodeBlock {
                    info: info.trim().to_string(),
                    code: String::new(),
                    line,
                })
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Indented)) => page.problems.push((
                line,
                "indented code block: fence it with a language (rustdoc would run it as Rust)"
                    .into(),
            )),
            Event::End(TagEnd::CodeBlock) => {
                if let Some(b) = block.take() {
                    page.code.push(b);
                }
            }
            Event::Text(ref t) | Event::Code(ref t) => {
                if let Some(b) = block.as_mut() {
                    b.code.push_str(t);
                    continue;
                }
                if let Some(h) = heading.as_mut() {
                    h.push_str(t);
                }
                if matches!(event, Event::Text(_)) && !open_links.contains(&true) {
                    if let Some(r) = tracker_reference(t) {
                        page.problems.push((
                            line,
                            format!("tracker reference `{r}`: user documents speak of the product"),
                        ));
                    }
                }
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                for attr in ["id=\"", "name=\""] {
                    for (i, _) in h.match_indices(attr) {
                        let rest = &h[i + attr.len()..];
                        if let Some(end) = rest.find('"') {
                            page.anchors.insert(rest[..end].to_string());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    page
}

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
fn is_intra_doc(dest: &str) -> bool {
    !dest.contains('/')
        && !dest.contains('#')
        && dest.contains("::")
        && dest
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '!' | '(' | ')' | '@'))
}

/// A link's target: `None` for a link that leaves the repository (a URL or `mailto:`), else
/// the file (relative to the root; the page itself for `#anchor`) and the anchor.
fn target(from: &Path, dest: &str) -> Option<Result<(PathBuf, Option<String>), String>> {
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
        let mut broken = Vec::new();
        for link in &page.links {
            match target(file, &link.dest) {
                None => {}
                Some(Err(what)) => broken.push((link.line, what)),
                Some(Ok((target_file, anchor))) => {
                    if !root.join(&target_file).exists() {
                        broken.push((
                            link.line,
                            format!("`{}`: no such file {}", link.dest, target_file.display()),
                        ));
                        continue;
                    }
                    let Some(anchor) = anchor else { continue };
                    if target_file.extension().is_none_or(|x| x != "md") {
                        broken.push((
                            link.line,
                            format!(
                                "`{}`: an anchor into a file that is not Markdown",
                                link.dest
                            ),
                        ));
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
                        broken.push((
                            link.line,
                            format!(
                                "`{}`: {} has no heading with the anchor `#{anchor}`",
                                link.dest,
                                target_file.display()
                            ),
                        ));
                    }
                }
            }
        }
        for (line, what) in broken {
            problems.push(Problem {
                file: file.clone(),
                line,
                what,
            });
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

/// `to` relative to the directory `from` (both relative to one root).
fn relative(from_dir: &Path, to: &Path) -> PathBuf {
    let a: Vec<_> = from_dir.components().collect();
    let b: Vec<_> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c);
    }
    out
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders one page's Markdown to an HTML body: headings get their anchors as ids; links to
/// pages of the book point at their HTML, links to other files of the repository at the file.
fn render(
    file: &Path,
    text: &str,
    book: &BTreeSet<PathBuf>,
    out_root: &Path,
    repo_root: &Path,
) -> String {
    let page = parse(text);
    let mut ids = page.heading_ids.into_iter();
    let out_dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
    let rewrite = |dest: CowStr<'_>| -> String {
        match target(file, &dest) {
            Some(Ok((t, anchor))) => {
                let anchor = anchor.map(|a| format!("#{a}")).unwrap_or_default();
                if book.contains(&t) {
                    let html = if t == Path::new("README.md") {
                        PathBuf::from("index.html")
                    } else {
                        t.with_extension("html")
                    };
                    format!("{}{anchor}", relative(&out_dir, &html).display())
                } else {
                    // A repository file outside the book: from the output page back to it.
                    let abs_out = out_root.join(&out_dir);
                    let abs_t = repo_root.join(&t);
                    format!("{}{anchor}", relative(&abs_out, &abs_t).display())
                }
            }
            _ => dest.to_string(),
        }
    };
    // A rustdoc intra-doc link (`crate::node`) means nothing outside rustdoc: its text stays,
    // the link goes (the stack pairs each link's end with its start).
    let mut kept_links: Vec<bool> = Vec::new();
    let events = Parser::new_ext(text, options()).filter_map(|event| match event {
        Event::Start(Tag::Heading {
            level,
            classes,
            attrs,
            ..
        }) => Some(Event::Start(Tag::Heading {
            level,
            id: ids.next().map(CowStr::from),
            classes,
            attrs,
        })),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => {
            let keep = !is_intra_doc(&dest_url);
            kept_links.push(keep);
            keep.then(|| {
                Event::Start(Tag::Link {
                    link_type,
                    dest_url: rewrite(dest_url).into(),
                    title,
                    id,
                })
            })
        }
        Event::End(TagEnd::Link) => kept_links
            .pop()
            .unwrap_or(true)
            .then_some(Event::End(TagEnd::Link)),
        other => Some(other),
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

/// The first heading of a page (its title in the navigation and the browser).
fn title(text: &str) -> String {
    let mut in_heading = false;
    let mut t = String::new();
    for event in Parser::new_ext(text, options()) {
        match event {
            Event::Start(Tag::Heading {
                level: HeadingLevel::H1 | HeadingLevel::H2,
                ..
            }) => in_heading = true,
            Event::End(TagEnd::Heading(_)) if in_heading => return t,
            Event::Text(s) | Event::Code(s) if in_heading => t.push_str(&s),
            _ => {}
        }
    }
    t
}

/// Renders the guide into `out`: `index.html` (the README), and one HTML file per page that
/// `docs/SUMMARY.md` lists, at the page's path (`docs/guides/python.html`), each with the
/// summary as navigation. Returns the files written (relative to `out`).
pub fn build(root: &Path, out: &Path) -> Result<Vec<PathBuf>, String> {
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let out = out
        .canonicalize()
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let pages = summary_pages(&root).map_err(|p| p.to_string())?;
    let mut book: BTreeSet<PathBuf> = pages.iter().cloned().collect();
    book.insert("README.md".into());
    book.insert("docs/SUMMARY.md".into());
    let read = |p: &Path| {
        std::fs::read_to_string(root.join(p)).map_err(|e| format!("{}: {e}", p.display()))
    };
    let summary = read(Path::new("docs/SUMMARY.md"))?;
    let mut written = Vec::new();
    for file in book.iter() {
        let text = read(file)?;
        let nav = render(Path::new("docs/SUMMARY.md"), &summary, &book, &out, &root);
        // The navigation was rendered for docs/; a page elsewhere needs its links re-based.
        let nav = rebase(
            &nav,
            Path::new("docs"),
            file.parent().unwrap_or(Path::new("")),
        );
        let body = render(file, &text, &book, &out, &root);
        let dest = if file == Path::new("README.md") {
            PathBuf::from("index.html")
        } else {
            file.with_extension("html")
        };
        let html = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{} — tagspace</title>\
             <style>body{{display:flex;font-family:sans-serif;margin:0}}\
             nav{{min-width:17em;padding:1em;background:#f4f4f4}}\
             main{{max-width:52em;padding:1em 2em}}pre{{background:#f6f8fa;padding:.6em;overflow:auto}}\
             table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em}}</style>\
             </head><body><nav>{nav}</nav><main>{body}</main></body></html>\n",
            html_escape(&title(&text))
        );
        let path = out.join(&dest);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(&path, html).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(dest);
    }
    Ok(written)
}

/// Re-bases the relative `href`s of HTML rendered for a page in `from_dir` to a page in
/// `to_dir` (`index.html` stands for the README at the root).
fn rebase(html: &str, from_dir: &Path, to_dir: &Path) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(i) = rest.find("href=\"") {
        out.push_str(&rest[..i + 6]);
        rest = &rest[i + 6..];
        let end = rest.find('"').unwrap_or(rest.len());
        let href = &rest[..end];
        if href.contains("://") || href.starts_with('#') {
            out.push_str(href);
        } else {
            let (path, anchor) = href.split_once('#').map_or((href, ""), |(p, a)| (p, a));
            let abs = normalize(&from_dir.join(path)).unwrap_or_else(|| PathBuf::from(path));
            let abs = if abs == Path::new("README.html") {
                PathBuf::from("index.html")
            } else {
                abs
            };
            out.push_str(&relative(to_dir, &abs).display().to_string());
            if !anchor.is_empty() {
                out.push('#');
                out.push_str(anchor);
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The values of every `attr="..."` in `html`.
fn attribute_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let key = format!(" {attr}=\"");
    html.match_indices(&key)
        .filter_map(|(i, _)| {
            let rest = &html[i + key.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// Checks what [`build`] wrote under `out`: every relative `href` of every HTML file names a
/// file that exists (in the output, or back in the repository), and every `#anchor` into an
/// HTML file an `id` in it. Returns the broken links, as `file: href`.
pub fn check_built(out: &Path) -> Result<Vec<String>, String> {
    let mut html_files = Vec::new();
    let mut stack = vec![out.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = e.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "html") {
                html_files.push(path);
            }
        }
    }
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut broken = Vec::new();
    for file in &html_files {
        let html = read(file)?;
        let dir = file.parent().unwrap_or(out);
        for href in attribute_values(&html, "href") {
            if href.contains("://") || href.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = href.split_once('#').unwrap_or((href, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let ok = target.exists()
                && (anchor.is_empty()
                    || target.extension().is_none_or(|x| x != "html")
                    || attribute_values(&read(&target)?, "id").contains(&anchor));
            if !ok {
                let rel = file.strip_prefix(out).unwrap_or(file);
                broken.push(format!("{}: {href}", rel.display()));
            }
        }
    }
    broken.sort();
    Ok(broken)
}

/// What [`extract`] writes for one language.
#[derive(Debug, Default)]
pub struct Extracted {
    /// Files to run (or compile and link).
    pub run: Vec<PathBuf>,
    /// Files only to compile (`no_run` blocks).
    pub compile_only: Vec<PathBuf>,
}

/// Writes every code block in `language` (`python`, `c`, `cpp`) of `files` into `out`, one
/// file each (`out/run/` or, for `no_run` blocks, `out/compile/`), named after its page and
/// line so that a failure points at the source.
pub fn extract(
    root: &Path,
    files: &[PathBuf],
    language: &str,
    out: &Path,
) -> Result<Extracted, String> {
    let ext = match language {
        "python" => "py",
        "c" => "c",
        "cpp" => "cpp",
        other => return Err(format!("no extraction for language `{other}`")),
    };
    let mut done = Extracted::default();
    for sub in ["run", "compile"] {
        let dir = out.join(sub);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for file in files {
        let text = std::fs::read_to_string(root.join(file))
            .map_err(|e| format!("{}: {e}", file.display()))?;
        for block in parse(&text).code {
            if block.language() != language {
                continue;
            }
            let stem = file
                .with_extension("")
                .display()
                .to_string()
                .replace(['/', '.'], "_");
            let name = format!("{stem}_L{}.{ext}", block.line);
            let (sub, list) = if block.has("no_run") {
                ("compile", &mut done.compile_only)
            } else {
                ("run", &mut done.run)
            };
            let path = out.join(sub).join(&name);
            std::fs::write(&path, &block.code).map_err(|e| format!("{}: {e}", path.display()))?;
            list.push(path);
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // The navigation, rendered for docs/, is re-based for the README at the root.
        assert!(
            index.contains("<nav>") && index.contains("href=\"docs/a.html\""),
            "{index}"
        );
    }
}
