//! Reading one Markdown page: its anchors, links, code blocks, and what is wrong in its prose.
use crate::options;
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet};

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
    /// Each heading's slug, in order (what [`build`](crate::build) gives the HTML headings as ids).
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
