//! The merged tree of an image's layers as overlayfs will show it, read
//! without mounting anything: used to place mount points at their canonical
//! location and to read /etc/passwd and /etc/group. Every lookup is an
//! fd-relative walk that never follows a symlink.

use super::fsutil::{cname, file_type, is_whiteout, lstat_at, open_beneath, open_dir_path};
use super::whiteout::OPAQUE_XATTR;
use crate::rootfs::resolve::{Kind, RootView, resolve};
use nix::fcntl::OFlag;
use nix::sys::stat::SFlag;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

pub struct LayeredView {
    /// O_PATH fds of the layer roots, top first.
    layers: Vec<OwnedFd>,
    /// Lookups already made: planning asks for the same prefixes (/etc,
    /// /etc/passwd...) many times, and each walk costs a few syscalls per
    /// layer. The layers are immutable while the run holds their locks.
    memo: RefCell<HashMap<String, Option<(usize, Kind)>>>,
}

/// Bound on the files read through the view (passwd, group).
const MAX_READ: u64 = 1 << 20;

impl LayeredView {
    pub fn open(dirs: &[PathBuf]) -> std::io::Result<LayeredView> {
        let mut layers = Vec::new();
        for d in dirs {
            let fd = nix::fcntl::open(
                d.as_path(),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(std::io::Error::from)?;
            layers.push(fd);
        }
        Ok(LayeredView { layers, memo: RefCell::new(HashMap::new()) })
    }

    /// The layer providing canonical `path` (no symlink among its parents
    /// in the merged view), with the entry's kind.
    fn locate(&self, path: &str) -> Option<(usize, Kind)> {
        if let Some(hit) = self.memo.borrow().get(path) {
            return *hit;
        }
        let found = self.locate_uncached(path);
        self.memo.borrow_mut().insert(path.to_string(), found);
        found
    }

    fn locate_uncached(&self, path: &str) -> Option<(usize, Kind)> {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        if comps.is_empty() {
            return Some((0, Kind::Dir));
        }
        let (parents, name) = comps.split_at(comps.len() - 1);
        for (i, layer) in self.layers.iter().enumerate() {
            // Walk the parents in this layer: a missing one means this
            // layer has nothing there; a non-directory (file, symlink,
            // whiteout) hides everything below from the layers under it.
            let mut dir = match open_dir_path(layer.as_fd(), "") {
                Ok(d) => d,
                Err(_) => return None,
            };
            let mut blocked = false;
            let mut opaque = false;
            let mut present = true;
            for p in parents {
                let n = cname(p.as_bytes());
                match lstat_at(dir.as_fd(), &n) {
                    Err(_) => {
                        present = false;
                        break;
                    }
                    Ok(st) if file_type(&st) != SFlag::S_IFDIR => {
                        blocked = true;
                        break;
                    }
                    Ok(_) => {}
                }
                dir = match open_dir_path(dir.as_fd(), n.as_c_str()) {
                    Ok(d) => d,
                    Err(_) => return None,
                };
                opaque |= is_opaque(&dir);
            }
            if blocked {
                return None;
            }
            if present {
                let n = cname(name[0].as_bytes());
                if let Ok(st) = lstat_at(dir.as_fd(), &n) {
                    if is_whiteout(&st) {
                        return None;
                    }
                    let kind = match file_type(&st) {
                        SFlag::S_IFDIR => Kind::Dir,
                        SFlag::S_IFREG => Kind::File,
                        SFlag::S_IFLNK => Kind::Symlink,
                        _ => Kind::Other,
                    };
                    return Some((i, kind));
                }
            }
            if opaque {
                return None;
            }
        }
        None
    }

    /// Reads a regular file at `path` inside the merged root (symlinks
    /// followed *inside* the root), bounded to 1 MiB.
    pub fn read_file(&self, path: &str) -> Option<String> {
        let r = resolve(self, path).ok()?;
        let (layer, kind) = self.locate(&r.path)?;
        if kind != Kind::File {
            return None;
        }
        let rel = r.path.trim_start_matches('/');
        let fd = open_beneath(self.layers[layer].as_fd(), rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK).ok()?;
        let mut buf = Vec::new();
        std::fs::File::from(fd).take(MAX_READ).read_to_end(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf).into_owned())
    }
}

impl LayeredView {
    /// Metadata of the entry at canonical `path` (no symlink among its
    /// parents in the merged view), from the layer that provides it.
    pub fn lstat(&self, path: &str) -> Option<nix::sys::stat::FileStat> {
        let (layer, _) = self.locate(path)?;
        let rel = path.trim_start_matches('/');
        if rel.is_empty() {
            return nix::sys::stat::fstat(&self.layers[layer]).ok();
        }
        let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let dir = open_dir_path(self.layers[layer].as_fd(), parent).ok()?;
        lstat_at(dir.as_fd(), &cname(name.as_bytes())).ok()
    }

    /// Opens the regular file at canonical `path` for reading.
    pub fn open_file(&self, path: &str) -> Option<std::fs::File> {
        let (layer, kind) = self.locate(path)?;
        if kind != Kind::File {
            return None;
        }
        let rel = path.trim_start_matches('/');
        open_beneath(self.layers[layer].as_fd(), rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK).ok().map(std::fs::File::from)
    }

    /// Names in the merged directory at canonical `path`, sorted: the
    /// union over the layers down to the first opaque one, less whiteouts.
    pub fn list(&self, path: &str) -> Vec<Vec<u8>> {
        let rel = path.trim_start_matches('/');
        let mut seen: std::collections::BTreeMap<Vec<u8>, bool> = std::collections::BTreeMap::new();
        for layer in &self.layers {
            let Ok(dir) = open_beneath(layer.as_fd(), rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) else {
                // Missing here; a non-directory here hides the layers below.
                let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
                let hides = !rel.is_empty()
                    && open_dir_path(layer.as_fd(), parent)
                        .ok()
                        .and_then(|d| lstat_at(d.as_fd(), &cname(name.as_bytes())).ok())
                        .is_some();
                if hides {
                    break;
                }
                continue;
            };
            let Ok(mut entries) = nix::dir::Dir::from_fd(dir) else { continue };
            let mut opaque = false;
            let fd = entries.as_fd().try_clone_to_owned().ok();
            if let Some(fd) = &fd {
                let mut v = [0u8; 4];
                opaque = matches!(crate::sys::xattr::fget(fd.as_fd(), OPAQUE_XATTR, &mut v), Ok(1) if v[0] == b'y');
            }
            for e in entries.iter().flatten() {
                let name = e.file_name().to_bytes().to_vec();
                if name == b"." || name == b".." || seen.contains_key(&name) {
                    continue;
                }
                let white = fd
                    .as_ref()
                    .and_then(|d| lstat_at(d.as_fd(), &cname(&name)).ok())
                    .is_some_and(|st| is_whiteout(&st));
                seen.insert(name, white);
            }
            if opaque {
                break;
            }
        }
        seen.into_iter().filter(|(_, white)| !white).map(|(n, _)| n).collect()
    }
}

fn is_opaque(dir: &OwnedFd) -> bool {
    let Ok(d) = open_beneath(dir.as_fd(), "", OFlag::O_RDONLY | OFlag::O_DIRECTORY) else {
        return false;
    };
    let mut v = [0u8; 4];
    matches!(crate::sys::xattr::fget(d.as_fd(), OPAQUE_XATTR, &mut v), Ok(1) if v[0] == b'y')
}

impl RootView for LayeredView {
    fn kind(&self, path: &str) -> Option<Kind> {
        self.locate(path).map(|(_, k)| k)
    }

    fn readlink(&self, path: &str) -> Option<String> {
        let (layer, kind) = self.locate(path)?;
        if kind != Kind::Symlink {
            return None;
        }
        let (parent, name) =
            path.trim_start_matches('/').rsplit_once('/').unwrap_or(("", path.trim_start_matches('/')));
        let dir = open_dir_path(self.layers[layer].as_fd(), parent).ok()?;
        let target = nix::fcntl::readlinkat(&dir, name).ok()?;
        target.into_string().ok()
    }

    fn populated_dir_layers(&self, path: &str) -> Vec<usize> {
        if self.kind(path) != Some(Kind::Dir) || self.list(path).is_empty() {
            return Vec::new();
        }
        self.dir_layers(path)
    }
}

impl LayeredView {
    /// The layers (top first) whose copy of the directory at canonical
    /// `path` shows through in the merged view, by the rules `locate`
    /// follows: a non-directory (file, symlink, whiteout) at the path or
    /// above it hides the layers below, and so does an opaque directory.
    fn dir_layers(&self, path: &str) -> Vec<usize> {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let Ok(mut dir) = open_dir_path(layer.as_fd(), "") else { break };
            let mut opaque = false;
            let mut present = true;
            for c in &comps {
                let n = cname(c.as_bytes());
                match lstat_at(dir.as_fd(), &n) {
                    Err(_) => {
                        present = false;
                        break;
                    }
                    Ok(st) if file_type(&st) != SFlag::S_IFDIR => return out,
                    Ok(_) => {}
                }
                dir = match open_dir_path(dir.as_fd(), n.as_c_str()) {
                    Ok(d) => d,
                    Err(_) => return out,
                };
                opaque |= is_opaque(&dir);
            }
            if present {
                out.push(i);
            }
            if opaque {
                break;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::layer::{LayerWriter, Owners};
    use crate::image::tar::{Header, Kind as TarKind};
    use crate::image::whiteout::{NameLimits, components, meaning};

    fn header(path: &str, kind: TarKind, data: &[u8], link: &str) -> Header {
        Header {
            path: path.as_bytes().to_vec(),
            link: link.as_bytes().to_vec(),
            kind,
            mode: if kind == TarKind::Dir { 0o755 } else { 0o644 },
            uid: 0,
            gid: 0,
            size: data.len() as u64,
            mtime: 0,
            devmajor: 0,
            devminor: 0,
            xattrs: vec![],
            data_offset: 0,
        }
    }

    /// Unpacks `entries` (path, kind, data-or-link) into a fresh layer dir.
    fn layer(root: &std::path::Path, name: &str, entries: &[(&str, TarKind, &str)]) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let fd = nix::fcntl::open(&dir, OFlag::O_PATH | OFlag::O_DIRECTORY, nix::sys::stat::Mode::empty()).unwrap();
        let mut w = LayerWriter::new(fd, Owners::Invoker, 1 << 20, None);
        let limits = NameLimits { max_path: 4096, max_depth: 64 };
        for (path, kind, s) in entries {
            let (data, link) = if *kind == TarKind::File { (s.as_bytes(), "") } else { (&b""[..], *s) };
            let h = header(path, *kind, data, link);
            let comps = components(&h.path, &limits).unwrap();
            let m = meaning(&comps).unwrap();
            w.apply(&h, comps, m, &mut &data[..]).unwrap();
        }
        w.finish().unwrap();
        dir
    }

    #[test]
    fn merged_view_honours_whiteouts_opaque_dirs_and_symlinks() {
        let root = std::env::temp_dir().join(format!("husk-view-{}", std::process::id()));
        let base = layer(
            &root,
            "base",
            &[
                ("usr/etc/passwd", TarKind::File, "root:x:0:0::/root:/bin/sh\n"),
                ("etc", TarKind::Symlink, "usr/etc"),
                ("var/cache/old", TarKind::File, "o"),
                ("motd", TarKind::File, "m"),
                ("lib", TarKind::Dir, ""),
            ],
        );
        let mid = layer(
            &root,
            "mid",
            &[
                ("var/cache/.wh..wh..opq", TarKind::File, ""),
                ("var/cache/new", TarKind::File, "n"),
                (".wh.motd", TarKind::File, ""),
            ],
        );
        // The top layer replaces the directory /lib with a file: nothing of
        // the lower /lib shows through.
        let top = layer(&root, "top", &[("lib", TarKind::File, "not a dir")]);
        let view = LayeredView::open(&[top, mid, base]).unwrap();
        assert_eq!(view.kind("/var/cache/new"), Some(Kind::File));
        assert_eq!(view.kind("/var/cache/old"), None, "hidden by the opaque directory");
        assert_eq!(view.kind("/motd"), None, "whited out");
        assert_eq!(view.kind("/etc"), Some(Kind::Symlink));
        assert_eq!(view.readlink("/etc").as_deref(), Some("usr/etc"));
        assert_eq!(view.kind("/lib"), Some(Kind::File));
        assert_eq!(view.read_file("/etc/passwd").as_deref(), Some("root:x:0:0::/root:/bin/sh\n"));
        assert_eq!(view.read_file("/etc/../../../usr/etc/passwd").as_deref(), Some("root:x:0:0::/root:/bin/sh\n"));
        assert_eq!(view.read_file("/motd"), None);
        // What a workdir overlay would merge: /var/cache from mid only (opaque).
        assert_eq!(view.populated_dir_layers("/var/cache"), vec![1]);
        assert_eq!(view.populated_dir_layers("/usr/etc"), vec![2]);
        assert!(view.populated_dir_layers("/lib").is_empty(), "a file, not a directory");
        let _ = std::fs::remove_dir_all(&root);
    }
}
