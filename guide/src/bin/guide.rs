//! `guide`: the user guide's checks and build, for CI and for writers.
//!
//! ```text
//! guide check                 links, anchors, code-block languages, tracker references
//! guide build OUT             the guide as HTML under OUT (index.html is the README), and
//!                             a check that every link in that HTML resolves
//! guide extract LANG OUT      the LANG (python, c, cpp) examples as files under OUT/run and
//!                             OUT/compile (no_run blocks), one per block
//! ```
//! Run from anywhere in the repository; paths are the repository's.
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tagspace_guide::{build, check, check_built, extract, user_documents};

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let files = user_documents(&root);
    match args.as_slice() {
        ["check"] => {
            let problems = check(&root, &files);
            for p in &problems {
                eprintln!("{p}");
            }
            if problems.is_empty() {
                println!(
                    "{} files checked: every link, anchor and code block is sound",
                    files.len()
                );
                ExitCode::SUCCESS
            } else {
                eprintln!("{} problems in the user documents", problems.len());
                ExitCode::FAILURE
            }
        }
        ["build", out] => {
            match build(&root, Path::new(out)).and_then(|w| Ok((w, check_built(Path::new(out))?))) {
                Ok((written, broken)) if broken.is_empty() => {
                    println!(
                        "{} pages written under {out}; every link in them resolves",
                        written.len()
                    );
                    ExitCode::SUCCESS
                }
                Ok((_, broken)) => {
                    for b in &broken {
                        eprintln!("{b}");
                    }
                    eprintln!("guide build: {} broken links in the HTML", broken.len());
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("guide build: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        ["extract", lang, out] => match extract(&root, &files, lang, &PathBuf::from(out)) {
            Ok(done) => {
                println!(
                    "{lang}: {} to run, {} to compile only, under {out}",
                    done.run.len(),
                    done.compile_only.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("guide extract: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: guide check | guide build OUT | guide extract python|c|cpp OUT");
            ExitCode::from(2)
        }
    }
}
