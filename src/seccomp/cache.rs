//! Compiled user profiles, cached by content hash under the store
//! (`<root>/seccomp/<key>.bpf`), so a profile is parsed and compiled once
//! and later runs only read the program back.
//!
//! The key covers everything the program depends on: the profile bytes,
//! husk's version (the compiler), the capabilities the command keeps and the
//! kernel's major.minor (Docker's `includes.caps` / `minKernel`). The store
//! is trusted like the image layers beside it; a file that does not parse
//! back exactly is treated as a miss and rewritten.

use super::compile::{MAX_INSNS, SockFilter, insn};
use sha2::Digest;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"HUSKBPF1";

/// A compiled profile and the facts the verdict reports about it.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub filter: Vec<SockFilter>,
    pub flags: u32,
    pub default_action: String,
    pub ignored_names: Vec<String>,
    pub foreign_arches: Vec<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    default_action: String,
    ignored_names: Vec<String>,
    foreign_arches: Vec<String>,
}

pub fn key(profile: &[u8], caps_keep: u64, kernel: Option<(u32, u32)>) -> String {
    let mut h = sha2::Sha256::new();
    h.update(b"husk seccomp cache v1\0");
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(caps_keep.to_le_bytes());
    let (maj, min) = kernel.unwrap_or((0, 0));
    h.update(maj.to_le_bytes());
    h.update(min.to_le_bytes());
    h.update(profile);
    hex::encode(h.finalize())
}

pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(store_root: &Path) -> Cache {
        Cache { dir: store_root.join("seccomp") }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.bpf"))
    }

    pub fn load(&self, key: &str) -> Option<Compiled> {
        decode(&std::fs::read(self.path(key)).ok()?)
    }

    /// Writes atomically (temp file + rename): concurrent runs never read a
    /// half-written program.
    pub fn store(&self, key: &str, c: &Compiled) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        crate::files::write_atomic(&self.path(key), &encode(c))
    }
}

pub(crate) fn encode(c: &Compiled) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + 8 * c.filter.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&c.flags.to_le_bytes());
    b.extend_from_slice(&(c.filter.len() as u32).to_le_bytes());
    for f in &c.filter {
        b.extend_from_slice(&f.code.to_le_bytes());
        b.push(f.jt);
        b.push(f.jf);
        b.extend_from_slice(&f.k.to_le_bytes());
    }
    let meta = Meta {
        default_action: c.default_action.clone(),
        ignored_names: c.ignored_names.clone(),
        foreign_arches: c.foreign_arches.clone(),
    };
    b.extend_from_slice(&serde_json::to_vec(&meta).unwrap_or_default());
    b
}

pub(crate) fn decode(b: &[u8]) -> Option<Compiled> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    if b.get(..8)? != MAGIC {
        return None;
    }
    let flags = u32_at(8)?;
    let n = u32_at(12)? as usize;
    if n == 0 || n > MAX_INSNS {
        return None;
    }
    let body = b.get(16..16 + 8 * n)?;
    let filter = body
        .chunks_exact(8)
        .map(|c| insn(u16::from_le_bytes([c[0], c[1]]), c[2], c[3], u32::from_le_bytes([c[4], c[5], c[6], c[7]])))
        .collect();
    let meta: Meta = serde_json::from_slice(&b[16 + 8 * n..]).ok()?;
    Some(Compiled {
        filter,
        flags,
        default_action: meta.default_action,
        ignored_names: meta.ignored_names,
        foreign_arches: meta.foreign_arches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_programs_round_trip_through_the_cache_file() {
        let c = Compiled {
            filter: vec![insn(0x20, 0, 0, 4), insn(0x15, 1, 0, 0xc000_003e), insn(0x06, 0, 0, 0x7fff_0000)],
            flags: 2,
            default_action: "errno ENOSYS".into(),
            ignored_names: vec!["_llseek".into()],
            foreign_arches: vec!["SCMP_ARCH_X86".into()],
        };
        let d = decode(&encode(&c)).unwrap();
        let raw = |v: &[SockFilter]| v.iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect::<Vec<_>>();
        assert_eq!(raw(&d.filter), raw(&c.filter));
        assert_eq!(
            (d.flags, d.default_action, d.ignored_names),
            (2, c.default_action.clone(), c.ignored_names.clone())
        );
        let mut bad = encode(&c);
        bad[0] = b'X';
        assert!(decode(&bad).is_none());
        assert!(decode(&encode(&c)[..20]).is_none(), "a truncated file is a miss");
    }

    #[test]
    fn the_key_changes_with_anything_the_program_depends_on() {
        let k = key(b"{}", 0, Some((6, 1)));
        assert_ne!(k, key(b"{ }", 0, Some((6, 1))));
        assert_ne!(k, key(b"{}", 1 << 21, Some((6, 1))));
        assert_ne!(k, key(b"{}", 0, Some((6, 2))));
        assert_eq!(k, key(b"{}", 0, Some((6, 1))));
    }
}
