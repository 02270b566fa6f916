//! A live sandbox's filesystem changes as a layer tar: its merged root
//! (seen from the host through `/proc/<init>/root`, the sandbox frozen)
//! compared with its image's layers (`LayeredView`). What differs is
//! written (with the parent directories that lead to it), what the image
//! has and the sandbox no longer shows becomes a `.wh.` whiteout.
//!
//! Scope, by mount (the init's mountinfo): entries on the root's own filesystem (the overlay of
//! the image and its writable upper, `--writable`) and the workdir mount
//! (a tmpfs). Other mounts (/proc, /dev, /sys, /tmp, husk's /etc overlay,
//! `--mount` binds and tmpfs) are not the image's and are left out. The
//! workdir shows the image's files there (an overlay, rootfs/plan.rs), so
//! what it no longer shows is whited out as anywhere else. The /etc files husk lays over every sandbox
//! (hosts, hostname, resolv.conf; passwd, group and nsswitch.conf when the
//! image has none) are left out.
//!
//! "Differs" is by metadata: type, mode, owner, size, mtime (to the
//! nanosecond) and link target. Overlay keeps a file's lower metadata
//! until it is copied up, and a write changes the mtime; a rewrite that
//! restores size and mtime exactly (`touch -r`) is not seen. Directories
//! are compared by mode and owner (their mtime follows their entries).
//! Every directory of the root is listed (cost: one stat per entry of the
//! image's tree), only changed files are read.

use super::diff::Unshift;
use super::layer_tar::{EntryKind, Meta, StableTar};
use crate::image::view::LayeredView;
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Files husk writes over every sandbox's /etc (rootfs/etc.rs): never the
/// sandbox's own changes, left out as `docker commit` leaves them out.
const LAID_OVER: &[&str] = &["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"];
/// husk's skeleton, provided when the image has none: left out unless the
/// image has its own (then a change to it is the sandbox's).
const SKELETON: &[&str] = &["/etc/passwd", "/etc/group", "/etc/nsswitch.conf"];

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading the sandbox's root failed (`path` is in it).
    #[error("reading its root: {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Writing the layer failed (a full store: ENOSPC); the caller knows
    /// where it was writing.
    #[error("writing its changes into the image store: {source}")]
    Write { source: std::io::Error },
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io { path: path.to_path_buf(), source }
}

/// Appending to the tar only writes: its failure is the store's.
fn write_err(_: &Path) -> impl Fn(std::io::Error) -> SnapshotError {
    |source| SnapshotError::Write { source }
}

/// A file of the root being copied into the tar; remembers whether a read
/// failed, so a failed copy is blamed on the side that failed.
struct Source<'a> {
    file: &'a mut std::fs::File,
    failed: bool,
}

impl std::io::Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let r = self.file.read(buf);
        self.failed |= r.is_err();
        r
    }
}

/// What a snapshot wrote.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SnapshotReport {
    /// Files, links and directories written (changed or new).
    pub changed: u64,
    pub whiteouts: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// FIFOs, sockets and devices (not carried by layers).
    pub skipped_special: u64,
}

/// Mount points of a mountinfo text (the root excluded), as absolute
/// paths (mountinfo escapes space, tab, newline and backslash in octal).
pub fn mount_points(mountinfo: &str) -> BTreeSet<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(crate::files::unescape_mountinfo)
        .filter(|p| p != "/")
        .collect()
}

/// Writes the changes of the root at `root` (a sandbox's merged root)
/// against `image`; `workdir` is the sandbox's workdir (absolute);
/// `mounts` its mount points (`mount_points`), left out but the workdir.
pub fn write_changes<W: Write>(
    root: &Path,
    workdir: &str,
    mounts: BTreeSet<String>,
    image: &LayeredView,
    unshift: Unshift,
    tar: &mut StableTar<W>,
) -> Result<SnapshotReport, SnapshotError> {
    let mut w = Walk {
        image,
        unshift,
        workdir: workdir.trim_end_matches('/').to_string(),
        mounts,
        links: HashMap::new(),
        pending: Vec::new(),
        report: SnapshotReport::default(),
    };
    w.dir(root, b"", tar)?;
    Ok(w.report)
}

struct Walk<'a> {
    image: &'a LayeredView,
    unshift: Unshift,
    workdir: String,
    mounts: BTreeSet<String>,
    links: HashMap<(u64, u64), Vec<u8>>,
    /// Directories entered but not yet written; written (outermost first)
    /// before the first change below them.
    pending: Vec<(Meta, bool)>,
    report: SnapshotReport,
}

fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

impl Walk<'_> {
    fn flush<W: Write>(&mut self, tar: &mut StableTar<W>, at: &Path) -> Result<(), SnapshotError> {
        for (meta, written) in self.pending.iter_mut() {
            if !*written {
                tar.append(meta).map_err(write_err(at))?;
                *written = true;
                self.report.changed += 1;
            }
        }
        Ok(())
    }

    fn dir<W: Write>(&mut self, host: &Path, rel: &[u8], tar: &mut StableTar<W>) -> Result<(), SnapshotError> {
        let mut names: Vec<Vec<u8>> = std::fs::read_dir(host)
            .map_err(io_err(host))?
            .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
            .collect::<Result<_, _>>()
            .map_err(io_err(host))?;
        names.sort();
        let image_dir = format!("/{}", String::from_utf8_lossy(rel).trim_end_matches('/'));
        let shown: BTreeSet<&[u8]> = names.iter().map(Vec::as_slice).collect();
        for gone in self.image.list(&image_dir) {
            if !shown.contains(gone.as_slice()) {
                self.flush(tar, host)?;
                let mut wh = rel.to_vec();
                wh.extend_from_slice(b".wh.");
                wh.extend_from_slice(&gone);
                let m = Meta { path: wh, kind: EntryKind::File, mode: 0o600, uid: 0, gid: 0, size: 0, link: vec![] };
                tar.append(&m).map_err(write_err(host))?;
                self.report.whiteouts += 1;
            }
        }
        for name in names {
            let path = host.join(OsStr::from_bytes(&name));
            let md = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
            let mut rel_path = rel.to_vec();
            rel_path.extend_from_slice(&name);
            let abs = format!("/{}", String::from_utf8_lossy(&rel_path));
            let is_workdir = abs == self.workdir;
            if !is_workdir && self.mounts.contains(&abs) {
                continue;
            }
            let before = self.image.lstat(&abs);
            if LAID_OVER.contains(&abs.as_str()) || (SKELETON.contains(&abs.as_str()) && before.is_none()) {
                continue;
            }
            let (uid, gid) = self.unshift.map(md.uid(), md.gid());
            let mode = md.mode() & 0o7777;
            let ft = md.file_type();
            let meta = |kind, size, link: Vec<u8>| Meta { path: rel_path.clone(), kind, mode, uid, gid, size, link };
            let same_owner_mode = |b: &nix::sys::stat::FileStat| {
                b.st_mode & 0o7777 == mode && b.st_uid == md.uid() && b.st_gid == md.gid()
            };
            let kind_of = |b: &nix::sys::stat::FileStat| b.st_mode & libc::S_IFMT;
            if ft.is_dir() {
                let mut dir_rel = rel_path.clone();
                dir_rel.push(b'/');
                let m = Meta { path: dir_rel.clone(), ..meta(EntryKind::Dir, 0, vec![]) };
                let unchanged = before.is_some_and(|b| kind_of(&b) == libc::S_IFDIR && same_owner_mode(&b));
                if unchanged {
                    self.pending.push((m, false));
                } else {
                    self.flush(tar, &path)?;
                    tar.append(&m).map_err(write_err(&path))?;
                    self.report.changed += 1;
                    self.pending.push((m, true));
                }
                let r = self.dir(&path, &dir_rel, tar);
                self.pending.pop();
                r?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(io_err(&path))?;
                let target = target.as_os_str().as_bytes().to_vec();
                let unchanged = before.is_some_and(|b| {
                    kind_of(&b) == libc::S_IFLNK
                        && b.st_uid == md.uid()
                        && b.st_gid == md.gid()
                        && b.st_size as u64 == target.len() as u64
                        && b.st_mtime == md.mtime()
                        && b.st_mtime_nsec == md.mtime_nsec()
                });
                if !unchanged {
                    self.flush(tar, &path)?;
                    tar.append(&Meta { mode: 0o777, ..meta(EntryKind::Symlink, 0, target) })
                        .map_err(write_err(&path))?;
                    self.report.changed += 1;
                }
            } else if ft.is_file() {
                let unchanged = before.is_some_and(|b| {
                    kind_of(&b) == libc::S_IFREG
                        && same_owner_mode(&b)
                        && b.st_size as u64 == md.len()
                        && b.st_mtime == md.mtime()
                        && b.st_mtime_nsec == md.mtime_nsec()
                });
                if unchanged {
                    continue;
                }
                self.flush(tar, &path)?;
                self.report.changed += 1;
                if md.nlink() > 1 {
                    let key = (md.dev(), md.ino());
                    if let Some(first) = self.links.get(&key) {
                        let link = first.clone();
                        tar.append(&meta(EntryKind::Hardlink, 0, link)).map_err(write_err(&path))?;
                        continue;
                    }
                    self.links.insert(key, rel_path.clone());
                }
                let mut f = open_nofollow(&path).map_err(io_err(&path))?;
                tar.append(&meta(EntryKind::File, md.len(), vec![])).map_err(write_err(&path))?;
                let mut src = Source { file: &mut f, failed: false };
                let copied = tar.data(&mut src, md.len());
                let failed_reading = src.failed;
                copied.map_err(|e| {
                    // A short read (the file shrank) is the root's too.
                    if failed_reading || e.kind() == std::io::ErrorKind::UnexpectedEof {
                        io_err(&path)(e)
                    } else {
                        write_err(&path)(e)
                    }
                })?;
                self.report.bytes += md.len();
            } else if ft.is_fifo() || ft.is_socket() || ft.is_char_device() || ft.is_block_device() {
                self.report.skipped_special += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mount_points_are_unescaped_and_the_root_left_out() {
        let info = "22 1 0:40 / / rw - overlay overlay rw\n30 22 0:5 / /proc rw - proc none rw\n31 22 0:6 / /my\\040dir rw - tmpfs none rw\n";
        let m = super::mount_points(info);
        assert_eq!(m.into_iter().collect::<Vec<_>>(), vec!["/my dir".to_string(), "/proc".to_string()]);
    }
}
