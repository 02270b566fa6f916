//! Small files read and written the same way everywhere: kernel text files
//! (/proc, /sys, cgroupfs) and /etc files read whole in one buffer, records
//! replaced atomically.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A small text file (/proc, /sys, cgroupfs, /etc), read into 16 KiB of
/// room made up front: `read_to_string` knows no size for these files and
/// starts with 32-byte reads (about eight syscalls for mountinfo).
/// `read_to_end` reads into the room without zeroing it first (a zeroed
/// buffer wrote, and faulted in, all four pages for a 100-byte file) and
/// goes on until a read returns 0: a seq_file (procfs, cgroupfs) returns at
/// most about a page per read however large the buffer, so a short read is
/// not the end (a cgroup.procs of a thousand pids, a busy host's mountinfo).
/// Through `take`, because `File`'s own `read_to_end` first asks statx and
/// lseek for a size hint, which these files do not have (two syscalls per
/// file, about ten files per run).
pub fn read_text(path: impl AsRef<Path>) -> std::io::Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::with_capacity(16 << 10);
    f.take(u64::MAX).read_to_end(&mut buf)?;
    String::from_utf8(buf).map_err(|_| std::io::Error::from_raw_os_error(libc::EILSEQ))
}

/// How far a replaced file must survive: `Rename` is atomic for readers
/// (the old content or the new, never a torn file) but may be lost or empty
/// after a power loss; `Synced` also fsyncs the file before the rename and
/// its directory after, for records nothing else can rebuild (the store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    Rename,
    Synced,
}

/// A lock file opened (made if missing, 0600, never through a symlink,
/// never truncated) for `flock`: the state dir's, the image store's.
pub fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// Writes `data` to a unique temp file beside `path`, then renames it over.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    replace(path, data, Durability::Rename)
}

/// `write_atomic` that survives a power loss (see `Durability::Synced`).
pub fn write_durable(path: &Path, data: &[u8]) -> std::io::Result<()> {
    replace(path, data, Durability::Synced)
}

fn replace(path: &Path, data: &[u8], durability: Durability) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("tmp"),
        std::process::id(),
        crate::ids::new_id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        std::io::Write::write_all(&mut f, data)?;
        if durability == Durability::Synced {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if durability == Durability::Synced {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A field of /proc/*/mountinfo as the kernel wrote it, unescaped: the
/// kernel escapes space, tab, newline and backslash as `\ooo` (octal).
/// One reader for the cgroup probe, OCI mode and snapshots.
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files of exactly one buffer and of several are read whole, and so is
    /// a seq_file whose reads each return about a page.
    #[test]
    fn read_text_reads_files_past_its_first_buffer() {
        let dir = std::env::temp_dir().join(format!("husk-read-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for len in [0, 1, 16 << 10, (16 << 10) + 1, 100_000] {
            let text: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            let f = dir.join(format!("f{len}"));
            std::fs::write(&f, &text).unwrap();
            assert_eq!(read_text(&f).unwrap(), text, "length {len}");
        }
        let whole = std::fs::read_to_string("/proc/kallsyms").unwrap();
        assert!(whole.len() > 16 << 10, "kallsyms is expected to span many reads");
        assert_eq!(read_text("/proc/kallsyms").unwrap().len(), whole.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
