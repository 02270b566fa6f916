//! `husk cp SRC DST`: files and directories between the host and a live
//! sandbox (src/sandbox/copy.rs and files.rs; docs/sandboxes.md, "Files").

use crate::cli::cp::CpArgs;
use crate::copy::unpack::Shape;
use crate::copy::{CopyError, Report};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::copy::{copy_in, copy_out, usage};
use crate::sandbox::files::{self, Files, FilesError};
use crate::sandbox::state::Store;
use std::io::Write;

/// One operand of `husk cp`.
#[derive(Debug, PartialEq, Eq)]
pub enum Side<'a> {
    /// `SANDBOX:PATH`
    Sandbox {
        target: &'a str,
        path: &'a str,
    },
    /// `-`: a tar stream (stdin as the source, stdout as the destination).
    Stream,
    Host(&'a str),
}

/// `SANDBOX:PATH` when the part before the first `:` could be a sandbox
/// (non-empty, no `/`); a host path with a `:` in its first component is
/// written `./a:b`.
pub fn side(s: &str) -> Side<'_> {
    if s == "-" {
        return Side::Stream;
    }
    match s.split_once(':') {
        Some((target, path)) if !target.is_empty() && !target.contains('/') => {
            Side::Sandbox { target, path: if path.is_empty() { "." } else { path } }
        }
        _ => Side::Host(s),
    }
}

pub fn cp(args: CpArgs, paths: &Result<Paths, PathsError>) -> i32 {
    match cp_inner(&args, paths) {
        Ok(r) => {
            for s in &r.skipped {
                crate::errln!("husk: cp: skipped {s} (not a file, directory or symlink)");
            }
            0
        }
        Err(e) => {
            // --list prints JSON: its failure is the one JSON failure shape.
            if args.list {
                crate::cli::report::json_failure(e.report(), Default::default(), false);
            }
            crate::errln!("husk: cp: {e}");
            if let Some(h) = e.hint() {
                crate::errln!("husk: hint: {h}");
            }
            EXIT_HUSK_FAILED
        }
    }
}

fn cp_inner(args: &CpArgs, paths: &Result<Paths, PathsError>) -> Result<Report, FilesError> {
    let store = || -> Result<Store, FilesError> {
        let paths = paths.as_ref().map_err(|e| SandboxError::State(e.to_string()))?;
        Ok(Store::open(&paths.state)?)
    };
    let files = |target: &str| Files {
        target: target.to_string(),
        user: args.user.clone(),
        wait: args.wait,
        limits: args.copy.limits(),
    };
    let dst_text = args.dst.as_deref().unwrap_or("-");
    if args.list {
        let Side::Sandbox { target, path } = side(&args.src) else {
            return Err(usage(format!("--list names a directory in a sandbox: SANDBOX:PATH, not {:?}", args.src)));
        };
        let entries = files::list(&store()?, &files(target), path)?;
        crate::outln!("{}", serde_json::to_string(&entries).unwrap_or_default());
        return Ok(Report { entries: entries.len() as u64, ..Report::default() });
    }
    let (src, dst) = (side(&args.src), side(dst_text));
    match (src, dst) {
        (Side::Sandbox { .. }, Side::Sandbox { .. }) => {
            Err(usage("both sides name a sandbox; copy through the host (husk cp A:PATH - | husk cp - B:DIR)".into()))
        }
        (Side::Sandbox { .. }, _) | (_, Side::Sandbox { .. }) => {
            let store = store()?;
            match (side(&args.src), side(dst_text)) {
                (Side::Host(h), Side::Sandbox { target, path }) => copy_in(&store, &files(target), h, path),
                (Side::Stream, Side::Sandbox { target, path }) => {
                    let mut stdin = std::io::stdin().lock();
                    files::put_tar(&store, &files(target), path, Shape::Entries, &mut stdin)
                }
                (Side::Sandbox { target, path }, Side::Host(h)) => copy_out(&store, &files(target), path, h),
                (Side::Sandbox { target, path }, Side::Stream) => {
                    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
                    let r = files::get_tar(&store, &files(target), path, &mut out);
                    out.flush().map_err(|e| FilesError::Host(CopyError::io(e)))?;
                    r
                }
                _ => unreachable!("one side is a sandbox, the other is not"),
            }
        }
        _ => Err(usage(format!(
            "neither {:?} nor {:?} names a sandbox; one side must be SANDBOX:PATH (e.g. husk cp notes.txt task-42:/workspace/)",
            args.src, dst_text
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_name_a_sandbox_only_before_a_colon_without_slash() {
        assert_eq!(side("task-42:/tmp/x"), Side::Sandbox { target: "task-42", path: "/tmp/x" });
        assert_eq!(side("abc:"), Side::Sandbox { target: "abc", path: "." });
        assert_eq!(side("./a:b"), Side::Host("./a:b"));
        assert_eq!(side("/x/y:z"), Side::Host("/x/y:z"));
        assert_eq!(side(":x"), Side::Host(":x"));
        assert_eq!(side("-"), Side::Stream);
    }
}
