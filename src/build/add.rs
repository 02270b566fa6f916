//! ADD: COPY, except that a local tar archive (plain or gzip) is unpacked
//! at the destination. The archive is hostile input read by image::tar
//! (bounded metadata, checked numbers) and its names go through the same
//! checks as a layer's (no absolute paths, no `..`); the entries are
//! written into the step's layer tar, whose publication applies every
//! defence of an import again. Remote URLs are refused.

use super::copy::{CopyError, CopyJob, Tree, copy};
use super::layer_tar::{EntryKind, Meta, StableTar};
use crate::image::tar::{Kind as TarKind, Stream, TarReader};
use crate::image::whiteout::{NameLimits, components};
use crate::rootfs::resolve::Kind;
use std::io::{BufRead, BufReader, Read, Write};

fn is_archive(tree: &dyn Tree, rel: &str) -> bool {
    let Ok(f) = tree.open(rel) else { return false };
    let mut head = [0u8; 512];
    let mut r = BufReader::new(f);
    let Ok(buf) = r.fill_buf() else { return false };
    if buf.starts_with(&[0x1f, 0x8b]) {
        return true;
    }
    let mut n = 0;
    while n < head.len() {
        match r.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n == 512 && &head[257..262] == b"ustar"
}

/// Writes the ADD's entries into `tar`.
pub fn add<W: Write>(tree: &dyn Tree, job: &CopyJob<'_>, tar: &mut StableTar<W>) -> Result<u64, CopyError> {
    let mut archives = Vec::new();
    let mut others = Vec::new();
    for s in job.srcs {
        let rel = s.trim_start_matches('/');
        let file =
            !s.contains(['*', '?', '[']) && tree.stat(rel).is_ok_and(|st| st.kind == Kind::File) && !tree.ignored(rel);
        if file && is_archive(tree, rel) { archives.push(s.clone()) } else { others.push(s.clone()) }
    }
    if archives.is_empty() {
        return copy(tree, job, tar);
    }
    let dest = job.dest.trim_matches('/').to_string();
    let mut n = 0;
    if !others.is_empty() {
        let d = format!("{}/", job.dest.trim_end_matches('/'));
        n += copy(tree, &CopyJob { srcs: &others, dest: &d, ..*job }, tar)?;
    }
    for a in &archives {
        n += extract(tree, a, &dest, job, tar)?;
    }
    Ok(n)
}

fn extract<W: Write>(
    tree: &dyn Tree,
    src: &str,
    dest: &str,
    job: &CopyJob<'_>,
    tar: &mut StableTar<W>,
) -> Result<u64, CopyError> {
    let refused = |why: String| CopyError::Refused { what: job.what, src: src.to_string(), why };
    let f = tree.open(src.trim_start_matches('/')).map_err(|e| refused(e.to_string()))?;
    let mut r = BufReader::new(f);
    let gz = r.fill_buf().map(|b| b.starts_with(&[0x1f, 0x8b])).unwrap_or(false);
    let input: Box<dyn Read> = if gz { Box::new(flate2::bufread::MultiGzDecoder::new(r)) } else { Box::new(r) };
    let mut reader = TarReader::new(Stream(input));
    let limits = NameLimits { max_path: 4096, max_depth: 256 };
    let prefix = |comps: &[Vec<u8>]| -> Vec<u8> {
        let mut p = dest.as_bytes().to_vec();
        for c in comps {
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(c);
        }
        p
    };
    let mut n = 0;
    while let Some(h) = reader.next_member().map_err(|e| refused(format!("not a readable tar archive: {e}")))? {
        let comps = components(&h.path, &limits)
            .map_err(|e| refused(format!("entry {:?}: {e}", String::from_utf8_lossy(&h.path))))?;
        if comps.is_empty() {
            continue;
        }
        let path = prefix(&comps);
        let (uid, gid) = (h.uid.min(u32::MAX as u64) as u32, h.gid.min(u32::MAX as u64) as u32);
        let base = Meta { path, kind: EntryKind::File, mode: h.mode & 0o7777, uid, gid, size: 0, link: vec![] };
        match h.kind {
            TarKind::Dir => {
                let mut p = base.path.clone();
                p.push(b'/');
                tar.append(&Meta { path: p, kind: EntryKind::Dir, ..base }).map_err(|e| refused(e.to_string()))?;
            }
            TarKind::File => {
                tar.append(&Meta { size: h.size, ..base }).map_err(|e| refused(e.to_string()))?;
                let mut data = DataReader(&mut reader);
                tar.data(&mut data, h.size).map_err(|e| refused(e.to_string()))?;
            }
            TarKind::Symlink => {
                tar.append(&Meta { kind: EntryKind::Symlink, link: h.link.clone(), ..base })
                    .map_err(|e| refused(e.to_string()))?;
            }
            TarKind::Hardlink => {
                let target = components(&h.link, &limits).map_err(|e| refused(format!("link target: {e}")))?;
                tar.append(&Meta { kind: EntryKind::Hardlink, link: prefix(&target), ..base })
                    .map_err(|e| refused(e.to_string()))?;
            }
            // Devices and FIFOs are not carried (a build layer holds files).
            _ => continue,
        }
        n += 1;
    }
    Ok(n)
}

struct DataReader<'a, R: Read>(&'a mut TarReader<Stream<R>>);

impl<R: Read> Read for DataReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read_data(buf)
    }
}
