//! What a layer entry's name means, decided as pure values before anything
//! touches the disk: the validated path components, and whether the entry
//! is a whiteout (`.wh.NAME` hides NAME from lower layers), an opaque
//! marker (`.wh..wh..opq` hides everything below its directory) or
//! ordinary content.

/// The opaque-directory marker. Always the `user.` form: husk mounts the
/// overlay inside the sandbox's user namespace (privileged runs too), where
/// overlayfs cannot read `trusted.*` xattrs, so it passes `userxattr`.
pub const OPAQUE_XATTR: &std::ffi::CStr = c"user.overlay.opaque";

/// Bounds on entry names (`Limits` carries the configured values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameLimits {
    pub max_path: usize,
    pub max_depth: usize,
}

/// The kernel refuses longer names anyway; a clear error is better.
pub const NAME_MAX: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("absolute path refused (layer paths are relative to the layer root)")]
    Absolute,
    #[error("'..' component refused (would climb out of the layer)")]
    DotDot,
    #[error("NUL byte in the name")]
    Nul,
    #[error("path is {len} bytes long (bound {max})")]
    TooLong { len: usize, max: usize },
    #[error("path is {depth} directories deep (bound {max})")]
    TooDeep { depth: usize, max: usize },
    #[error("a component is {len} bytes long (bound {NAME_MAX})")]
    NameTooLong { len: usize },
    #[error("whiteout of {0:?} refused (only a plain name can be whited out)")]
    BadWhiteout(String),
}

/// Splits a raw tar path into validated components. `.` and empty
/// components are dropped; an empty result names the layer root.
pub fn components(raw: &[u8], limits: &NameLimits) -> Result<Vec<Vec<u8>>, NameError> {
    if raw.contains(&0) {
        return Err(NameError::Nul);
    }
    if raw.first() == Some(&b'/') {
        return Err(NameError::Absolute);
    }
    let comps: Vec<&[u8]> = raw.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
    if comps.iter().any(|c| *c == b"..") {
        return Err(NameError::DotDot);
    }
    if comps.len() > limits.max_depth {
        return Err(NameError::TooDeep { depth: comps.len(), max: limits.max_depth });
    }
    if raw.len() > limits.max_path {
        return Err(NameError::TooLong { len: raw.len(), max: limits.max_path });
    }
    if let Some(c) = comps.iter().find(|c| c.len() > NAME_MAX) {
        return Err(NameError::NameTooLong { len: c.len() });
    }
    Ok(comps.into_iter().map(<[u8]>::to_vec).collect())
}

const WH: &[u8] = b".wh.";
const WH_META: &[u8] = b".wh..wh.";
const OPAQUE: &[u8] = b".wh..wh..opq";

/// What an entry does, from its final component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meaning {
    /// Ordinary content at its path.
    Content,
    /// Hide this sibling name of lower layers.
    Whiteout(Vec<u8>),
    /// Make the parent directory opaque.
    Opaque,
    /// aufs bookkeeping (`.wh..wh.plnk`...): ignored, as Docker does.
    Ignored,
}

pub fn meaning(comps: &[Vec<u8>]) -> Result<Meaning, NameError> {
    let Some(last) = comps.last() else {
        return Ok(Meaning::Content);
    };
    if last.as_slice() == OPAQUE {
        return Ok(Meaning::Opaque);
    }
    if last.starts_with(WH_META) {
        return Ok(Meaning::Ignored);
    }
    match last.strip_prefix(WH) {
        None => Ok(Meaning::Content),
        Some(name) if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') => {
            Err(NameError::BadWhiteout(String::from_utf8_lossy(name).into_owned()))
        }
        Some(name) => Ok(Meaning::Whiteout(name.to_vec())),
    }
}

/// A path for messages: lossy UTF-8, shortened.
pub fn display(raw: &[u8]) -> String {
    super::digest::truncate(&String::from_utf8_lossy(raw), 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: NameLimits = NameLimits { max_path: 4096, max_depth: 64 };

    fn comps(s: &str) -> Result<Vec<String>, NameError> {
        components(s.as_bytes(), &L).map(|v| v.into_iter().map(|c| String::from_utf8(c).unwrap()).collect())
    }

    #[test]
    fn paths_are_normalized_and_hostile_ones_refused() {
        assert_eq!(comps("./usr//bin/./sh").unwrap(), vec!["usr", "bin", "sh"]);
        assert_eq!(comps("./").unwrap(), Vec::<String>::new());
        assert_eq!(comps("../../x"), Err(NameError::DotDot));
        assert_eq!(comps("a/../../x"), Err(NameError::DotDot));
        assert_eq!(comps("/tmp/x"), Err(NameError::Absolute));
        assert_eq!(components(b"a\0b", &L), Err(NameError::Nul));
        assert_eq!(comps(&"x".repeat(300)), Err(NameError::NameTooLong { len: 300 }));
        assert_eq!(comps(&"a/".repeat(65)), Err(NameError::TooDeep { depth: 65, max: 64 }));
        let long = format!("{}/x", "abcdefgh/".repeat(60));
        assert!(matches!(
            components(long.as_bytes(), &NameLimits { max_path: 100, max_depth: 1000 }),
            Err(NameError::TooLong { .. })
        ));
    }

    #[test]
    fn whiteouts_are_classified() {
        let m = |s: &str| meaning(&components(s.as_bytes(), &L).unwrap());
        assert_eq!(m("etc/.wh.motd"), Ok(Meaning::Whiteout(b"motd".to_vec())));
        assert_eq!(m("var/cache/.wh..wh..opq"), Ok(Meaning::Opaque));
        assert_eq!(m(".wh..wh.plnk"), Ok(Meaning::Ignored));
        assert_eq!(m("etc/motd"), Ok(Meaning::Content));
        assert_eq!(m("./"), Ok(Meaning::Content));
        assert_eq!(m("etc/.wh..."), Err(NameError::BadWhiteout("..".into())));
        assert_eq!(m("etc/.wh.."), Err(NameError::BadWhiteout(".".into())));
        assert_eq!(m("etc/.wh."), Err(NameError::BadWhiteout("".into())));
    }
}
