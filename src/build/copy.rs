//! COPY and ADD: files from the build context (or an earlier stage) as a
//! layer, written straight into a tar, never through a sandbox.
//!
//! A source path may pass through symlinks inside its tree (resolved as
//! if the tree were `/`: a link can never lead out of CONTEXT; one that
//! points at a host path names that path *inside* the context); once
//! resolved, every open is `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! from the context's fd, so a link swapped in meanwhile fails instead of
//! being followed. Links inside copied directories are copied as links.

use super::ignore::Ignore;
use super::layer_tar::{EntryKind, Meta, StableTar};
use crate::image::view::LayeredView;
use crate::rootfs::resolve::{DirView, Kind, RootView, resolve};
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{Mode, SFlag, fstat};
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{what} {src}: no such file or directory in {tree}{hint}")]
    Missing { what: &'static str, src: String, tree: String, hint: &'static str },
    #[error("{what} {src}: {why}")]
    Refused { what: &'static str, src: String, why: String },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: std::io::Error },
}

/// An entry as a tree shows it.
#[derive(Clone, Copy, Debug)]
pub struct Stat {
    pub kind: Kind,
    pub mode: u32,
    pub size: u64,
}

fn stat_of(st: &nix::sys::stat::FileStat) -> Stat {
    let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    };
    Stat { kind, mode: st.st_mode & 0o7777, size: st.st_size as u64 }
}

/// Where COPY reads from: the context directory or a stage's layers.
/// Paths are canonical and relative (no leading `/`, "" is the root).
pub trait Tree {
    fn label(&self) -> String;
    fn view(&self) -> &dyn RootView;
    fn stat(&self, rel: &str) -> std::io::Result<Stat>;
    fn list(&self, rel: &str) -> std::io::Result<Vec<String>>;
    fn open(&self, rel: &str) -> std::io::Result<File>;
    fn readlink(&self, rel: &str) -> std::io::Result<Vec<u8>>;
    /// `.dockerignore` says the build may not see it.
    fn ignored(&self, _rel: &str) -> bool {
        false
    }
    /// An ignored directory may still hold re-included (`!`) entries.
    fn look_inside_ignored(&self) -> bool {
        false
    }
}

/// The build context.
pub struct Context {
    dir: OwnedFd,
    view: DirView,
    path: PathBuf,
    ignore: Ignore,
}

impl Context {
    pub fn open(path: &Path, ignore: Ignore) -> std::io::Result<Context> {
        let path = std::fs::canonicalize(path)?;
        let dir = nix::fcntl::open(&path, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        Ok(Context { dir, view: DirView(path.clone()), path, ignore })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn at(&self, rel: &str, flags: OFlag) -> std::io::Result<OwnedFd> {
        let how = OpenHow::new().flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW).resolve(
            ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        let rel = if rel.is_empty() { "." } else { rel };
        Ok(openat2(&self.dir, rel, how)?)
    }
}

impl Tree for Context {
    fn label(&self) -> String {
        format!("the build context {}", self.path.display())
    }
    fn view(&self) -> &dyn RootView {
        &self.view
    }
    fn stat(&self, rel: &str) -> std::io::Result<Stat> {
        Ok(stat_of(&fstat(&self.at(rel, OFlag::O_PATH)?)?))
    }
    fn list(&self, rel: &str) -> std::io::Result<Vec<String>> {
        let fd = self.at(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        let mut d = nix::dir::Dir::from_fd(fd)?;
        let mut out = Vec::new();
        for e in d.iter() {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            out.push(String::from_utf8(n.to_vec()).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "a name in it is not UTF-8; rename it")
            })?);
        }
        out.sort();
        Ok(out)
    }
    fn open(&self, rel: &str) -> std::io::Result<File> {
        Ok(File::from(self.at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?))
    }
    fn readlink(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let dir = self.at(parent, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        Ok(nix::fcntl::readlinkat(&dir, name)?.into_encoded_bytes())
    }
    fn ignored(&self, rel: &str) -> bool {
        self.ignore.excluded(rel)
    }
    fn look_inside_ignored(&self) -> bool {
        self.ignore.has_exceptions()
    }
}

/// An earlier stage's merged layers (COPY --from).
pub struct StageTree {
    pub name: String,
    pub view: LayeredView,
}

fn not_found() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::NotFound)
}

impl Tree for StageTree {
    fn label(&self) -> String {
        format!("stage {}", self.name)
    }
    fn view(&self) -> &dyn RootView {
        &self.view
    }
    fn stat(&self, rel: &str) -> std::io::Result<Stat> {
        self.view.lstat(&format!("/{rel}")).map(|st| stat_of(&st)).ok_or_else(not_found)
    }
    fn list(&self, rel: &str) -> std::io::Result<Vec<String>> {
        Ok(self.view.list(&format!("/{rel}")).into_iter().filter_map(|n| String::from_utf8(n).ok()).collect())
    }
    fn open(&self, rel: &str) -> std::io::Result<File> {
        self.view.open_file(&format!("/{rel}")).ok_or_else(not_found)
    }
    fn readlink(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        self.view.readlink(&format!("/{rel}")).map(String::into_bytes).ok_or_else(not_found)
    }
}

/// (mode, uid, gid) of a directory the image already has at a path.
pub type ParentMeta<'a> = dyn Fn(&str) -> Option<(u32, u32, u32)> + 'a;

/// What one COPY writes.
pub struct CopyJob<'a> {
    pub what: &'static str,
    pub srcs: &'a [String],
    /// Absolute, normalized destination ("/app/" keeps its trailing slash).
    pub dest: &'a str,
    pub owner: (u32, u32),
    pub chmod: Option<u32>,
    /// Metadata of existing directories in the image being built (for the
    /// parents of the destination, which the layer must carry unchanged).
    pub parent_meta: &'a ParentMeta<'a>,
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Resolves the source words to canonical tree paths (globs in the last
/// component expanded against the tree, sorted).
fn sources(tree: &dyn Tree, job: &CopyJob<'_>) -> Result<Vec<String>, CopyError> {
    let mut out = Vec::new();
    for src in job.srcs {
        if src.starts_with("http://") || src.starts_with("https://") || src.starts_with("git@") {
            return Err(CopyError::Refused {
                what: job.what,
                src: src.clone(),
                why: "remote sources are not fetched by ADD; download the file into the context and COPY it (or fetch it in a RUN step with husk build --network allow=HOST)"
                    .into(),
            });
        }
        let trimmed = src.trim_start_matches('/');
        let (dir, last) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        let candidates: Vec<String> = if has_glob(last) {
            let base = canonical(tree, dir, job.what, src)?;
            let names = tree.list(&base).map_err(|e| io(job.what, src, e))?;
            names
                .into_iter()
                .filter(|n| super::ignore::glob(last.as_bytes(), n.as_bytes()))
                .map(|n| if base.is_empty() { n } else { format!("{base}/{n}") })
                .filter(|p| !tree.ignored(p))
                .collect()
        } else {
            let c = canonical(tree, trimmed, job.what, src)?;
            if tree.ignored(&c) {
                return Err(CopyError::Missing {
                    what: job.what,
                    src: src.clone(),
                    tree: tree.label(),
                    hint: " (it is excluded by .dockerignore)",
                });
            }
            tree.stat(&c).map_err(|_| missing(tree, job.what, src))?;
            vec![c]
        };
        if candidates.is_empty() {
            return Err(missing(tree, job.what, src));
        }
        out.extend(candidates);
    }
    Ok(out)
}

fn missing(tree: &dyn Tree, what: &'static str, src: &str) -> CopyError {
    CopyError::Missing { what, src: src.to_string(), tree: tree.label(), hint: "" }
}

fn io(what: &'static str, path: &str, source: std::io::Error) -> CopyError {
    CopyError::Io { what, path: path.to_string(), source }
}

/// `path` inside the tree with symlinks followed as if the tree were `/`.
fn canonical(tree: &dyn Tree, path: &str, what: &'static str, src: &str) -> Result<String, CopyError> {
    let r = resolve(tree.view(), &format!("/{path}")).map_err(|e| CopyError::Refused {
        what,
        src: src.to_string(),
        why: format!("{e} (in {})", tree.label()),
    })?;
    Ok(r.path.trim_start_matches('/').to_string())
}

/// Writes the COPY's entries into `tar`. Returns how many were written.
pub fn copy<W: Write>(tree: &dyn Tree, job: &CopyJob<'_>, tar: &mut StableTar<W>) -> Result<u64, CopyError> {
    let srcs = sources(tree, job)?;
    let dest = job.dest.trim_start_matches('/');
    let into_dir = job.dest.ends_with('/')
        || job.srcs.len() > 1
        || srcs.len() > 1
        || has_glob(job.srcs.first().map(String::as_str).unwrap_or(""))
        || srcs.iter().any(|s| tree.stat(s).is_ok_and(|st| st.kind == Kind::Dir));
    let dest = dest.trim_end_matches('/');
    let mut w = Writer { tree, job, tar, written: 0, emitted_dirs: std::collections::BTreeSet::new() };
    for s in &srcs {
        let st = tree.stat(s).map_err(|e| io(job.what, s, e))?;
        let base = s.rsplit('/').next().unwrap_or(s);
        match st.kind {
            Kind::Dir => {
                w.parents(dest, true)?;
                w.tree_contents(s, dest)?;
            }
            _ => {
                let target = if into_dir {
                    if dest.is_empty() { base.to_string() } else { format!("{dest}/{base}") }
                } else {
                    dest.to_string()
                };
                w.parents(&target, false)?;
                w.entry(s, &target, st)?;
            }
        }
    }
    Ok(w.written)
}

struct Writer<'a, 'b, W: Write> {
    tree: &'a dyn Tree,
    job: &'a CopyJob<'b>,
    tar: &'a mut StableTar<W>,
    written: u64,
    emitted_dirs: std::collections::BTreeSet<String>,
}

impl<W: Write> Writer<'_, '_, W> {
    fn io(&self, path: &str) -> impl Fn(std::io::Error) -> CopyError + '_ {
        let what = self.job.what;
        let path = path.to_string();
        move |e| io(what, &path, e)
    }

    /// The directories above `target` (and `target` itself when `is_dir`),
    /// with the metadata they have in the image, or root 0755 when new.
    fn parents(&mut self, target: &str, is_dir: bool) -> Result<(), CopyError> {
        let comps: Vec<&str> = target.split('/').filter(|c| !c.is_empty()).collect();
        let upto = if is_dir { comps.len() } else { comps.len().saturating_sub(1) };
        for i in 1..=upto {
            let p = comps[..i].join("/");
            if !self.emitted_dirs.insert(p.clone()) {
                continue;
            }
            let (mode, uid, gid) = match (self.job.parent_meta)(&p) {
                Some(m) => m,
                // The COPY's own new directory: its owner is the COPY's.
                None if i == comps.len() => (0o755, self.job.owner.0, self.job.owner.1),
                None => (0o755, 0, 0),
            };
            let m = Meta {
                path: format!("{p}/").into_bytes(),
                kind: EntryKind::Dir,
                mode,
                uid,
                gid,
                size: 0,
                link: vec![],
            };
            self.tar.append(&m).map_err(self.io(&p))?;
        }
        Ok(())
    }

    fn tree_contents(&mut self, src: &str, dest: &str) -> Result<(), CopyError> {
        for name in self.tree.list(src).map_err(self.io(src))? {
            let s = if src.is_empty() { name.clone() } else { format!("{src}/{name}") };
            let d = if dest.is_empty() { name.clone() } else { format!("{dest}/{name}") };
            let st = self.tree.stat(&s).map_err(self.io(&s))?;
            if self.tree.ignored(&s) {
                // `logs` excluded but `!logs/keep.log` kept: look inside;
                // what is kept brings its parent directories along.
                if st.kind == Kind::Dir && self.tree.look_inside_ignored() {
                    self.tree_contents(&s, &d)?;
                }
                continue;
            }
            self.parents(&d, false)?;
            self.entry(&s, &d, st)?;
            if st.kind == Kind::Dir {
                self.tree_contents(&s, &d)?;
            }
        }
        Ok(())
    }

    fn entry(&mut self, src: &str, dest: &str, st: Stat) -> Result<(), CopyError> {
        let (uid, gid) = self.job.owner;
        let mode = match (self.job.chmod, st.kind) {
            (Some(m), Kind::File | Kind::Dir) => m,
            _ => st.mode,
        };
        let base =
            Meta { path: dest.as_bytes().to_vec(), kind: EntryKind::File, mode, uid, gid, size: 0, link: vec![] };
        match st.kind {
            Kind::Dir => {
                self.emitted_dirs.insert(dest.to_string());
                self.tar
                    .append(&Meta { path: format!("{dest}/").into_bytes(), kind: EntryKind::Dir, ..base })
                    .map_err(self.io(src))?;
            }
            Kind::File => {
                let mut f = self.tree.open(src).map_err(self.io(src))?;
                let size = f.metadata().map_err(self.io(src))?.len();
                self.tar.append(&Meta { size, ..base }).map_err(self.io(src))?;
                self.tar.data(&mut f, size).map_err(self.io(src))?;
            }
            Kind::Symlink => {
                let link = self.tree.readlink(src).map_err(self.io(src))?;
                self.tar.append(&Meta { kind: EntryKind::Symlink, mode: 0o777, link, ..base }).map_err(self.io(src))?;
            }
            Kind::Other => {
                return Err(CopyError::Refused {
                    what: self.job.what,
                    src: src.to_string(),
                    why: "is a device, FIFO or socket; COPY takes files, directories and links".into(),
                });
            }
        }
        self.written += 1;
        Ok(())
    }
}
