//! The one reader for every file a user names (env files, seccomp profiles;
//! Dockerfiles and registry credentials will use it too): regular files
//! only, up to a bound, with an error that names the option, the path and
//! the limit. Without it `--env-file /dev/zero` grew husk's memory without
//! end (outside any cgroup) and a FIFO blocked husk forever.
//!
//! This module sits at the bottom: it imports nothing from the crate.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum UserFileError {
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what} {}: not a regular file (a {kind}); give a file", path.display())]
    NotRegular { what: &'static str, path: PathBuf, kind: &'static str },
    #[error("{what} {}: too large ({size} bytes, limit {limit})", path.display())]
    TooLarge { what: &'static str, path: PathBuf, size: u64, limit: u64 },
    #[error("{what} {}: not UTF-8 text", path.display())]
    NotUtf8 { what: &'static str, path: PathBuf },
}

/// The whole of the regular file at `path` (links followed), at most
/// `limit` bytes. `what` names the option in errors (`--env-file`).
pub fn read(what: &'static str, path: &Path, limit: u64) -> Result<Vec<u8>, UserFileError> {
    let io = |source| UserFileError::Io { what, path: path.to_path_buf(), source };
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
    // below like any other non-file. Reads of a regular file ignore it.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = match () {
            _ if ft.is_dir() => "directory",
            _ if ft.is_char_device() => "character device",
            _ if ft.is_block_device() => "block device",
            _ if ft.is_fifo() => "FIFO",
            _ if ft.is_socket() => "socket",
            _ => "special file",
        };
        return Err(UserFileError::NotRegular { what, path: path.to_path_buf(), kind });
    }
    let too_large = |size| UserFileError::TooLarge { what, path: path.to_path_buf(), size, limit };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    // The file may grow between fstat and read: one byte past the bound
    // tells.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `read`, as UTF-8 text.
pub fn read_text(what: &'static str, path: &Path, limit: u64) -> Result<String, UserFileError> {
    String::from_utf8(read(what, path, limit)?).map_err(|_| UserFileError::NotUtf8 { what, path: path.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_without_reading() {
        let err = |p: &Path| read("--env-file", p, 1 << 20).unwrap_err().to_string();
        assert_eq!(
            err(Path::new("/dev/zero")),
            "--env-file /dev/zero: not a regular file (a character device); give a file"
        );
        assert!(err(Path::new("/")).contains("(a directory)"));
        let dir = std::env::temp_dir().join(format!("husk-userfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Would block forever without O_NONBLOCK (no writer ever comes).
        assert!(err(&fifo).contains("(a FIFO)"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_over_the_bound_is_refused_with_its_size_and_the_limit() {
        let dir = std::env::temp_dir().join(format!("husk-userfile-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        std::fs::write(&f, vec![b'x'; 101]).unwrap();
        let e = read("--seccomp", &f, 100).unwrap_err().to_string();
        assert!(e.ends_with("too large (101 bytes, limit 100)"), "{e}");
        assert_eq!(read("--seccomp", &f, 101).unwrap().len(), 101);
        std::fs::write(&f, b"\xff").unwrap();
        assert!(read_text("--seccomp", &f, 100).unwrap_err().to_string().contains("not UTF-8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
