//! One directory's entries, for `husk serve`'s and `husk mcp`'s listing:
//! read by the copier inside the sandbox (the same RESOLVE_IN_ROOT rules
//! as a copy), never following a symlink it lists.

use super::unpack::{Resolve, open_dir};
use super::{CopyError, Limits};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag, fstatat};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd};

/// One entry of a directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The name (bytes that are not UTF-8 shown as U+FFFD).
    pub name: String,
    /// file, dir, symlink or other.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// Permission bits (0o7777).
    pub mode: u32,
}

/// The entries of the directory `path` (sorted by name), at most
/// `limits.max_entries` of them.
pub fn list(start: BorrowedFd<'_>, path: &str, resolve: Resolve, limits: Limits) -> Result<Vec<Entry>, CopyError> {
    let at = open_dir(start, path, resolve).map_err(|e| match e {
        nix::errno::Errno::ENOTDIR => CopyError::NotDir { path: path.to_string() },
        nix::errno::Errno::ENOENT => CopyError::NotFound { path: path.to_string() },
        e => CopyError::fs(path, e),
    })?;
    // The O_PATH fd cannot be read; "." reopens the very directory it names.
    let dir = nix::fcntl::openat(&at, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| CopyError::fs(path, e))?;
    let mut names = super::pack::children(&dir).map_err(|e| CopyError::fs(path, e))?;
    if names.len() as u64 > limits.max_entries {
        return Err(CopyError::TooManyEntries { limit: limits.max_entries, at: path.to_string() });
    }
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        // Gone since it was read: not listed.
        let Ok(st) = fstatat(dir.as_fd(), n.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
        let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => "file",
            SFlag::S_IFDIR => "dir",
            SFlag::S_IFLNK => "symlink",
            _ => "other",
        };
        out.push(Entry {
            name: String::from_utf8_lossy(n.as_bytes()).into_owned(),
            kind: kind.into(),
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::AT_FDCWD;

    #[test]
    fn listing_names_symlinks_as_symlinks_and_refuses_files() {
        let d = std::env::temp_dir().join(format!("husk-list-{}", std::process::id()));
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("f"), "abc").unwrap();
        std::os::unix::fs::symlink("/etc", d.join("l")).unwrap();
        let got = list(AT_FDCWD, d.to_str().unwrap(), Resolve::Host, Limits::default()).unwrap();
        let kinds: Vec<(&str, &str, u64)> = got.iter().map(|e| (e.name.as_str(), e.kind.as_str(), e.size)).collect();
        assert_eq!(kinds[0], ("f", "file", 3));
        assert_eq!((kinds[1].0, kinds[1].1), ("l", "symlink"));
        assert_eq!((kinds[2].0, kinds[2].1), ("sub", "dir"));
        let f = d.join("f");
        assert!(matches!(
            list(AT_FDCWD, f.to_str().unwrap(), Resolve::Host, Limits::default()),
            Err(CopyError::NotDir { .. })
        ));
        let few = Limits { max_bytes: 1, max_entries: 2 };
        assert!(matches!(
            list(AT_FDCWD, d.to_str().unwrap(), Resolve::Host, few),
            Err(CopyError::TooManyEntries { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
