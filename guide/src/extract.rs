//! The Python and C/C++ examples written out, one file per block, for CI to run or compile.
use crate::page::parse;
use std::path::{Path, PathBuf};

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
