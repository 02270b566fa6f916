//! A RUN step's upper directory as an OCI layer: overlay whiteouts (0/0
//! character devices) become `.wh.NAME`, opaque directories (the
//! `trusted.` or `user.overlay.opaque` xattr) get `.wh..wh..opq`, and
//! owners are shifted back from the sandbox's host ids to the image's.
//! Entries are written in byte order of their names, depth first, so the
//! same tree always gives the same tar.
//!
//! The sandbox that wrote the tree has ended (its pid namespace died with
//! its init): nothing changes it while it is read. Links are never
//! followed (lstat, O_NOFOLLOW).

use super::layer_tar::{EntryKind, Meta, StableTar};
use crate::image::Owners;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// What a diff skipped (kinds a layer of husk's cannot carry).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DiffReport {
    pub entries: u64,
    pub whiteouts: u64,
    pub opaque_dirs: u64,
    /// FIFOs, sockets and device nodes other than whiteouts.
    pub skipped_special: u64,
}

/// How host owners in the upper map back to the image's ids.
#[derive(Clone, Copy, Debug)]
pub struct Unshift {
    owners: Owners,
}

impl Unshift {
    pub fn new(owners: Owners) -> Self {
        Unshift { owners }
    }

    /// Image ids of a host-owned entry. Rootless, everything the sandbox
    /// could write belongs to the invoking user, which is image root.
    pub fn map(&self, uid: u32, gid: u32) -> (u32, u32) {
        match self.owners {
            Owners::Invoker => (0, 0),
            Owners::Shift { uid: ur, gid: gr } => {
                let back = |id: u32, base: u32, count: u32| {
                    if id >= base && id - base < count { id - base } else { 65534 }
                };
                (back(uid, ur.base, ur.count), back(gid, gr.base, gr.count))
            }
        }
    }
}

const OPAQUE: [&std::ffi::CStr; 2] = [c"trusted.overlay.opaque", c"user.overlay.opaque"];

fn opaque(dir: &File) -> bool {
    let mut buf = [0u8; 4];
    OPAQUE.iter().any(|name| matches!(crate::sys::xattr::fget(dir.as_fd(), name, &mut buf), Ok(1) if buf[0] == b'y'))
}

/// Writes the layer for `upper` into `tar`.
pub fn write_upper<W: Write>(upper: &Path, unshift: Unshift, tar: &mut StableTar<W>) -> Result<DiffReport, DiffError> {
    let mut w = Walk { unshift, links: HashMap::new(), report: DiffReport::default() };
    w.dir(upper, b"", tar)?;
    Ok(w.report)
}

struct Walk {
    unshift: Unshift,
    /// (dev, ino) of files with more than one link -> first path written.
    links: HashMap<(u64, u64), Vec<u8>>,
    report: DiffReport,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> DiffError + '_ {
    move |source| DiffError::Io { path: path.to_path_buf(), source }
}

fn open_nofollow(path: &Path, dir: bool) -> std::io::Result<File> {
    let extra = if dir { libc::O_DIRECTORY } else { 0 };
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | extra).open(path)
}

impl Walk {
    fn dir<W: Write>(&mut self, host: &Path, rel: &[u8], tar: &mut StableTar<W>) -> Result<(), DiffError> {
        let mut names: Vec<Vec<u8>> = std::fs::read_dir(host)
            .map_err(io_err(host))?
            .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
            .collect::<Result<_, _>>()
            .map_err(io_err(host))?;
        names.sort();
        for name in names {
            let path = host.join(OsStr::from_bytes(&name));
            let md = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
            let mut rel_path = rel.to_vec();
            rel_path.extend_from_slice(&name);
            let (uid, gid) = self.unshift.map(md.uid(), md.gid());
            let mode = md.mode() & 0o7777;
            let ft = md.file_type();
            self.report.entries += 1;
            let meta = |kind, size, link: Vec<u8>| Meta { path: Vec::new(), kind, mode, uid, gid, size, link };
            if ft.is_char_device() && md.rdev() == 0 {
                let mut wh = rel.to_vec();
                wh.extend_from_slice(b".wh.");
                wh.extend_from_slice(&name);
                tar.append(&Meta { path: wh, mode: 0o600, uid: 0, gid: 0, ..meta(EntryKind::File, 0, vec![]) })
                    .map_err(io_err(&path))?;
                self.report.whiteouts += 1;
            } else if ft.is_dir() {
                let mut dir_rel = rel_path.clone();
                dir_rel.push(b'/');
                tar.append(&Meta { path: dir_rel.clone(), ..meta(EntryKind::Dir, 0, vec![]) })
                    .map_err(io_err(&path))?;
                let f = open_nofollow(&path, true).map_err(io_err(&path))?;
                if opaque(&f) {
                    let mut opq = dir_rel.clone();
                    opq.extend_from_slice(b".wh..wh..opq");
                    tar.append(&Meta { path: opq, mode: 0o600, uid: 0, gid: 0, ..meta(EntryKind::File, 0, vec![]) })
                        .map_err(io_err(&path))?;
                    self.report.opaque_dirs += 1;
                }
                self.dir(&path, &dir_rel, tar)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(io_err(&path))?;
                tar.append(&Meta {
                    path: rel_path,
                    mode: 0o777,
                    ..meta(EntryKind::Symlink, 0, target.as_os_str().as_bytes().to_vec())
                })
                .map_err(io_err(&path))?;
            } else if ft.is_file() {
                if md.nlink() > 1 {
                    let key = (md.dev(), md.ino());
                    if let Some(first) = self.links.get(&key) {
                        let link = first.clone();
                        tar.append(&Meta { path: rel_path, ..meta(EntryKind::Hardlink, 0, link) })
                            .map_err(io_err(&path))?;
                        continue;
                    }
                    self.links.insert(key, rel_path.clone());
                }
                let mut f = open_nofollow(&path, false).map_err(io_err(&path))?;
                tar.append(&Meta { path: rel_path, ..meta(EntryKind::File, md.len(), vec![]) })
                    .map_err(io_err(&path))?;
                tar.data(&mut f, md.len()).map_err(io_err(&path))?;
            } else {
                self.report.skipped_special += 1;
            }
        }
        Ok(())
    }
}
