//! The HTML build of the guide, and the check of what it wrote.
use crate::check::{is_intra_doc, summary_pages, target};
use crate::options;
use crate::page::parse;
use pulldown_cmark::{CowStr, Event, HeadingLevel, Parser, Tag, TagEnd};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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

/// Renders `file`'s Markdown to HTML for a page written in `out_dir` (relative to the output
/// root, as `file` is to the repository): headings get their anchors as ids; links to
/// pages of the book point at their HTML, links to other files of the repository at the file.
fn render(
    file: &Path,
    text: &str,
    out_dir: &Path,
    book: &BTreeSet<PathBuf>,
    out_root: &Path,
    repo_root: &Path,
) -> String {
    let page = parse(text);
    let mut ids = page.heading_ids.into_iter();
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
                    format!("{}{anchor}", relative(out_dir, &html).display())
                } else {
                    // A repository file outside the book: from the output page back to it.
                    let abs_out = out_root.join(out_dir);
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
        let dir = file.parent().unwrap_or(Path::new(""));
        // The summary as navigation, its links made relative to where this page is written.
        let nav = render(
            Path::new("docs/SUMMARY.md"),
            &summary,
            dir,
            &book,
            &out,
            &root,
        );
        // The summary's own title gives way to a link home (the README).
        let nav = nav.replacen(
            "<h1 id=\"summary\">Summary</h1>",
            &format!(
                "<p><a href=\"{}\"><b>tagspace</b></a></p>",
                relative(dir, Path::new("index.html")).display()
            ),
            1,
        );
        let body = render(file, &text, dir, &book, &out, &root);
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
