//! Where husk keeps things: the store (images, layers) and the state
//! directory (live sandboxes). Chosen once from `--root` / `--state-dir`
//! (or HUSK_ROOT / HUSK_STATE_DIR), else from who is running husk.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Defaults when husk runs as root.
pub const ROOT_STORE: &str = "/var/lib/husk";
pub const ROOT_STATE: &str = "/run/husk";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Store root: images, layers, locks.
    pub root: PathBuf,
    /// State directory: long-lived sandboxes and runs.
    pub state: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    #[error("no default {what} for uid {uid}: ${var} and $HOME are unset; pass {flag} DIR")]
    NoDefault { what: &'static str, uid: u32, var: &'static str, flag: &'static str },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error(
        "{what} {path} is owned by uid {owner}, not by you (uid {uid}); use your own directory with --root / --state-dir"
    )]
    Foreign { what: &'static str, path: PathBuf, owner: u32, uid: u32 },
    #[error("{what} {path} is a relative path; give an absolute one")]
    Relative { what: &'static str, path: PathBuf },
}

/// The environment `Paths::resolve` reads (a parameter, so tests need not
/// touch the process environment).
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub uid: u32,
    pub xdg_data_home: Option<PathBuf>,
    pub xdg_runtime_dir: Option<PathBuf>,
    pub home: Option<PathBuf>,
}

impl Env {
    pub fn current() -> Env {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        Env {
            uid: nix::unistd::Uid::effective().as_raw(),
            xdg_data_home: var("XDG_DATA_HOME"),
            xdg_runtime_dir: var("XDG_RUNTIME_DIR"),
            home: var("HOME"),
        }
    }
}

impl Paths {
    /// Chooses the directories (nothing is created here).
    pub fn resolve(root: Option<&Path>, state: Option<&Path>, env: &Env) -> Result<Paths, PathsError> {
        let root = match root {
            Some(p) => absolute("store root", p)?,
            None if env.uid == 0 => PathBuf::from(ROOT_STORE),
            None => match (&env.xdg_data_home, &env.home) {
                (Some(x), _) if x.is_absolute() => x.join("husk"),
                (_, Some(h)) if h.is_absolute() => h.join(".local/share/husk"),
                _ => {
                    return Err(PathsError::NoDefault {
                        what: "store root",
                        uid: env.uid,
                        var: "XDG_DATA_HOME",
                        flag: "--root",
                    });
                }
            },
        };
        let state = match state {
            Some(p) => absolute("state dir", p)?,
            None if env.uid == 0 => PathBuf::from(ROOT_STATE),
            None => match &env.xdg_runtime_dir {
                Some(x) if x.is_absolute() => x.join("husk"),
                // No runtime dir (e.g. after `su`): a per-user directory in
                // the store root, which is private to the user anyway.
                _ => root.join("state"),
            },
        };
        Ok(Paths { root, state })
    }

    /// Resolves from the process environment.
    pub fn from_cli(root: Option<&Path>, state: Option<&Path>) -> Result<Paths, PathsError> {
        Paths::resolve(root, state, &Env::current())
    }
}

fn absolute(what: &'static str, p: &Path) -> Result<PathBuf, PathsError> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(|source| PathsError::Io { what, path: p.into(), source })?;
    let joined = cwd.join(p);
    if joined.is_absolute() { Ok(joined) } else { Err(PathsError::Relative { what, path: p.into() }) }
}

/// Creates `dir` (and missing parents) and makes sure it is a directory
/// owned by the caller and closed to everyone else (mode 0700): the store
/// holds other people's image content and the locks that guard it.
pub fn ensure_private_dir(what: &'static str, dir: &Path) -> Result<(), PathsError> {
    let io = |source| PathsError::Io { what, path: dir.to_path_buf(), source };
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent).map_err(io)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let md = std::fs::symlink_metadata(dir).map_err(io)?;
    if !md.is_dir() {
        return Err(io(std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory")));
    }
    let uid = nix::unistd::Uid::effective().as_raw();
    if md.uid() != uid {
        return Err(PathsError::Foreign { what, path: dir.to_path_buf(), owner: md.uid(), uid });
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(uid: u32) -> Env {
        Env {
            uid,
            xdg_data_home: Some("/home/u/.data".into()),
            xdg_runtime_dir: Some("/run/user/1000".into()),
            home: Some("/home/u".into()),
        }
    }

    #[test]
    fn root_uses_system_directories() {
        let p = Paths::resolve(None, None, &env(0)).unwrap();
        assert_eq!(p.root, PathBuf::from("/var/lib/husk"));
        assert_eq!(p.state, PathBuf::from("/run/husk"));
    }

    #[test]
    fn rootless_uses_xdg_directories() {
        let p = Paths::resolve(None, None, &env(1000)).unwrap();
        assert_eq!(p.root, PathBuf::from("/home/u/.data/husk"));
        assert_eq!(p.state, PathBuf::from("/run/user/1000/husk"));
        let bare = Env { uid: 1000, home: Some("/home/u".into()), ..Env::default() };
        let p = Paths::resolve(None, None, &bare).unwrap();
        assert_eq!(p.root, PathBuf::from("/home/u/.local/share/husk"));
        assert_eq!(p.state, PathBuf::from("/home/u/.local/share/husk/state"));
        assert!(Paths::resolve(None, None, &Env { uid: 1000, ..Env::default() }).is_err());
    }

    #[test]
    fn flags_win_over_defaults() {
        let p = Paths::resolve(Some(Path::new("/s")), Some(Path::new("/t")), &env(1000)).unwrap();
        assert_eq!(p, Paths { root: "/s".into(), state: "/t".into() });
    }
}
