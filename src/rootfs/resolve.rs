//! Resolving a path *inside* a root that is not mounted yet (an image's
//! layers, a rootfs directory): symlinks are followed relative to that root
//! and `..` never climbs above it, the way `openat2(RESOLVE_IN_ROOT)` would
//! once it is mounted. Used to place mount points in the scaffold layer at
//! their canonical location, so e.g. a bind to `/lib/x` in a usr-merged
//! image lands in `/usr/lib/x` instead of shadowing the `/lib` symlink.

use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// Read-only lookups on a root, by canonical absolute path ("/a/b").
/// `kind` must not follow a final symlink (lstat semantics).
pub trait RootView {
    fn kind(&self, path: &str) -> Option<Kind>;
    fn readlink(&self, path: &str) -> Option<String>;
    /// For a root of layers: the layers (indices, top first) whose copies
    /// of the directory at canonical `path` overlayfs would merge, when
    /// that merged directory has entries; empty for any other root.
    fn populated_dir_layers(&self, _path: &str) -> Vec<usize> {
        Vec::new()
    }
}

/// A host directory used as a root (`--rootfs DIR`).
pub struct DirView(pub PathBuf);

impl DirView {
    fn host_path(&self, path: &str) -> PathBuf {
        self.0.join(path.trim_start_matches('/'))
    }
}

impl RootView for DirView {
    fn kind(&self, path: &str) -> Option<Kind> {
        // Parents of `path` are canonical (symlink-free) by construction, so
        // lstat cannot be redirected outside DIR.
        let md = std::fs::symlink_metadata(self.host_path(path)).ok()?;
        let ft = md.file_type();
        Some(if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        })
    }

    fn readlink(&self, path: &str) -> Option<String> {
        std::fs::read_link(self.host_path(path)).ok()?.to_str().map(str::to_string)
    }
}

/// A root with nothing in it (every lookup misses).
pub struct EmptyView;

impl RootView for EmptyView {
    fn kind(&self, _: &str) -> Option<Kind> {
        None
    }
    fn readlink(&self, _: &str) -> Option<String> {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Canonical absolute path inside the root.
    pub path: String,
    /// Kind of the final component, if it exists.
    pub kind: Option<Kind>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error("too many levels of symbolic links resolving {0:?} inside the root")]
    Loop(String),
    #[error("{0:?} passes through a non-directory inside the root")]
    NotDir(String),
}

const MAX_LINKS: usize = 40;

/// Resolves `path` (taken as absolute) inside `view`'s root; the final
/// component is followed too when it is a symlink.
pub fn resolve(view: &dyn RootView, path: &str) -> Result<Resolved, ResolveError> {
    let mut pending: Vec<String> = components(path);
    pending.reverse();
    let mut canon: Vec<String> = Vec::new();
    // Kind of what `canon` names (None: missing, to be created as a dir).
    let mut cur = Some(Kind::Dir);
    let mut links = 0usize;
    let kind_of = |canon: &[String]| {
        if canon.is_empty() { Some(Kind::Dir) } else { view.kind(&join(canon)) }
    };
    while let Some(comp) = pending.pop() {
        // `.` (and a trailing `/`, see `components`) names the directory
        // reached so far, so it must be one: `file/.` and `file/` are
        // ENOTDIR for the kernel.
        if comp == "." {
            if !matches!(cur, Some(Kind::Dir) | None) {
                return Err(ResolveError::NotDir(path.to_string()));
            }
            continue;
        }
        if comp == ".." {
            // The kernel walks `..` only out of a directory: `file/..` is
            // ENOTDIR there, not the file's parent.
            if !matches!(cur, Some(Kind::Dir) | None) {
                return Err(ResolveError::NotDir(path.to_string()));
            }
            canon.pop();
            cur = kind_of(&canon);
            continue;
        }
        if !matches!(cur, Some(Kind::Dir) | None) {
            return Err(ResolveError::NotDir(path.to_string()));
        }
        canon.push(comp);
        cur = kind_of(&canon);
        if cur == Some(Kind::Symlink) {
            links += 1;
            if links > MAX_LINKS {
                return Err(ResolveError::Loop(path.to_string()));
            }
            let target = view.readlink(&join(&canon)).unwrap_or_default();
            canon.pop();
            if target.starts_with('/') {
                canon.clear();
            }
            pending.extend(components(&target).into_iter().rev());
            cur = kind_of(&canon);
        }
    }
    Ok(Resolved { path: join(&canon), kind: cur })
}

/// The components of `path`; `.` stays (it asserts a directory), and a
/// trailing `/` becomes one more `.`.
fn components(path: &str) -> Vec<String> {
    let mut comps: Vec<String> = path.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect();
    if path.ends_with('/') && !comps.is_empty() {
        comps.push(".".into());
    }
    comps
}

fn join(parts: &[String]) -> String {
    if parts.is_empty() { "/".to_string() } else { format!("/{}", parts.join("/")) }
}

/// Validates a user-given absolute target path: absolute, no `..`, no NUL,
/// normalized (`//` and `.` removed). Returns it without the leading `/`.
pub fn normalize_target(path: &str) -> Result<String, TargetError> {
    let err = |kind| TargetError { path: path.into(), kind };
    if !path.starts_with('/') {
        return Err(err(TargetFault::Relative));
    }
    if path.contains('\0') {
        return Err(err(TargetFault::Nul));
    }
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if comps.contains(&"..") {
        return Err(err(TargetFault::DotDot));
    }
    if Path::new(path).as_os_str().len() > 4000 {
        return Err(err(TargetFault::TooLong));
    }
    Ok(comps.join("/"))
}

/// A target path `normalize_target` refuses, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{path:?} {kind}")]
pub struct TargetError {
    pub path: String,
    pub kind: TargetFault,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetFault {
    #[error("is not absolute; use a path starting with /")]
    Relative,
    #[error("contains a NUL byte")]
    Nul,
    #[error("contains '..'; give the path without it")]
    DotDot,
    #[error("is longer than 4000 bytes")]
    TooLong,
}

/// Reads a small file at `path` inside `root` without following any
/// symlink out of it (the root is untrusted content).
pub fn read_in_root(root: &Path, path: &str) -> Option<String> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat2};
    use nix::sys::stat::Mode;
    let dir = open(root, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(&dir, path, how).ok()?;
    let mut text = String::new();
    std::io::Read::take(std::fs::File::from(fd), 1 << 20).read_to_string_lossy(&mut text)?;
    Some(text)
}

trait ReadLossy {
    fn read_to_string_lossy(self, out: &mut String) -> Option<()>;
}

impl<R: std::io::Read> ReadLossy for R {
    fn read_to_string_lossy(mut self, out: &mut String) -> Option<()> {
        let mut buf = Vec::new();
        self.read_to_end(&mut buf).ok()?;
        *out = String::from_utf8_lossy(&buf).into_owned();
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapView(HashMap<&'static str, (Kind, &'static str)>);

    impl RootView for MapView {
        fn kind(&self, p: &str) -> Option<Kind> {
            self.0.get(p).map(|e| e.0)
        }
        fn readlink(&self, p: &str) -> Option<String> {
            self.0.get(p).map(|e| e.1.to_string())
        }
    }

    fn usr_merged() -> MapView {
        MapView(HashMap::from([
            ("/usr", (Kind::Dir, "")),
            ("/usr/lib", (Kind::Dir, "")),
            ("/lib", (Kind::Symlink, "usr/lib")),
            ("/evil", (Kind::Symlink, "../../../../etc")),
            ("/loop", (Kind::Symlink, "/loop")),
            ("/abs", (Kind::Symlink, "/usr/lib")),
            ("/file", (Kind::File, "")),
        ]))
    }

    #[test]
    fn symlinked_parent_resolves_to_canonical_location() {
        let r = resolve(&usr_merged(), "/lib/x").unwrap();
        assert_eq!(r.path, "/usr/lib/x");
        assert_eq!(r.kind, None);
        assert_eq!(resolve(&usr_merged(), "/abs").unwrap().path, "/usr/lib");
    }

    #[test]
    fn dotdot_symlink_cannot_climb_out_of_root() {
        let r = resolve(&usr_merged(), "/evil/shadow").unwrap();
        assert_eq!(r.path, "/etc/shadow");
        assert_eq!(resolve(&usr_merged(), "/../../x").unwrap().path, "/x");
    }

    #[test]
    fn symlink_loop_is_an_error() {
        assert!(matches!(resolve(&usr_merged(), "/loop/x"), Err(ResolveError::Loop(_))));
    }

    #[test]
    fn file_as_directory_is_an_error() {
        assert!(matches!(resolve(&usr_merged(), "/file/x"), Err(ResolveError::NotDir(_))));
    }

    /// Found by fuzzing against openat2(RESOLVE_IN_ROOT): `..` after a file
    /// resolved to the file's parent where the kernel says ENOTDIR.
    #[test]
    fn dotdot_after_a_file_is_an_error_like_the_kernels() {
        assert!(matches!(resolve(&usr_merged(), "/file/.."), Err(ResolveError::NotDir(_))));
        assert!(matches!(resolve(&usr_merged(), "/file/../usr"), Err(ResolveError::NotDir(_))));
        // A missing component still counts as a directory to be created.
        assert_eq!(resolve(&usr_merged(), "/missing/../usr").unwrap().path, "/usr");
    }

    /// Found by fuzzing against openat2(RESOLVE_IN_ROOT): a trailing `/` or
    /// `/.` after a file resolved to the file where the kernel says ENOTDIR.
    #[test]
    fn trailing_slash_or_dot_needs_a_directory_like_the_kernels() {
        for p in ["/file/", "/file/.", "/file/./", "/lib/x/../../../file/"] {
            assert!(matches!(resolve(&usr_merged(), p), Err(ResolveError::NotDir(_))), "{p}");
        }
        assert_eq!(resolve(&usr_merged(), "/lib/").unwrap().path, "/usr/lib");
        assert_eq!(resolve(&usr_merged(), "/usr/./lib/.").unwrap().path, "/usr/lib");
        assert_eq!(resolve(&usr_merged(), "/missing/").unwrap().path, "/missing");
    }

    #[test]
    fn targets_are_normalized_and_dotdot_refused() {
        assert_eq!(normalize_target("//a/./b/").unwrap(), "a/b");
        assert!(normalize_target("a/b").is_err());
        assert!(normalize_target("/a/../b").is_err());
        assert_eq!(normalize_target("/").unwrap(), "");
    }
}
