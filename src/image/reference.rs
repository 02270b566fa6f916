//! Registry references, the grammar every container tool shares
//! (distribution/reference): `name[:tag]`, `name@sha256:...`,
//! `registry[:port]/path/name[:tag][@digest]`, with Docker's defaulting
//! (`python` -> `docker.io/library/python:latest`).
//!
//! The first component is a registry when it contains a `.` or a `:` or is
//! `localhost`; otherwise the reference is on Docker Hub, and a one-component
//! name is under `library/`. A digest pins the content; a tag given with it
//! is kept for display only.

use super::digest::{Digest, truncate};

pub const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's registry API host (`docker.io` itself serves no API).
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";
const MAX_TAG: usize = 128;
const MAX_NAME: usize = 255;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`, lowercase (docker.io for Docker Hub).
    pub registry: String,
    /// `path/name`, e.g. `library/python`.
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

#[derive(Debug, thiserror::Error)]
#[error("image reference {reference:?}: {why}")]
pub struct ReferenceError {
    pub reference: String,
    pub why: RefProblem,
}

/// What is wrong with a reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefProblem {
    #[error("must be 1-455 characters")]
    Length,
    #[error(transparent)]
    Digest(#[from] super::digest::DigestError),
    #[error("a tag is 1-128 of letters, digits, _ . - (not starting with . or -)")]
    Tag,
    #[error("registry port {0:?} is not a number 1-65535")]
    Port(String),
    #[error("registry {0:?} is not a host name or IPv4 address")]
    Registry(String),
    #[error("a repository is lowercase letters and digits in /-separated components, joined by . _ __ or -")]
    Repository,
    #[error("the name is longer than 255 characters")]
    NameLength,
}

impl Reference {
    /// Parses `s`; a reference without tag or digest gets `:latest`.
    pub fn parse(s: &str) -> Result<Reference, ReferenceError> {
        let bad = |why: RefProblem| ReferenceError { reference: truncate(s, 100), why };
        if s.is_empty() || s.len() > MAX_NAME + 1 + MAX_TAG + 72 {
            return Err(bad(RefProblem::Length));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (r, Some(Digest::parse(d).map_err(|e| bad(e.into()))?)),
            None => (s, None),
        };
        let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(t) = tag {
            let first_ok = t.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !first_ok || t.len() > MAX_TAG || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
                return Err(bad(RefProblem::Tag));
            }
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => (first.to_string(), path),
            _ => (DOCKER_HUB.to_string(), name),
        };
        let registry = match registry.to_ascii_lowercase().as_str() {
            "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
            r => r.to_string(),
        };
        check_registry(&registry).map_err(bad)?;
        let repository =
            if registry == DOCKER_HUB && !path.contains('/') { format!("library/{path}") } else { path.to_string() };
        check_repository(&repository).map_err(bad)?;
        if registry.len() + 1 + repository.len() > MAX_NAME {
            return Err(bad(RefProblem::NameLength));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some("latest".to_string()),
            (None, Some(_)) => None,
        };
        Ok(Reference { registry, repository, tag, digest })
    }

    /// `registry/repository`.
    pub fn repo_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `registry/repository` as Docker shows it: Docker Hub's without
    /// `docker.io/`, and its official images without `library/`
    /// (`docker.io/library/busybox` -> `busybox`, `docker.io/org/app` ->
    /// `org/app`); other registries' in full.
    pub fn familiar_repo(&self) -> String {
        if self.registry != DOCKER_HUB {
            return self.repo_name();
        }
        match self.repository.strip_prefix("library/") {
            Some(n) if !n.contains('/') => n.to_string(),
            _ => self.repository.clone(),
        }
    }

    /// The name a pulled image is stored under, Docker's familiar form
    /// (what `docker images` shows, so `busybox` pulled, loaded from a
    /// `docker save` tarball or imported from `busybox.oci` is one name):
    /// `repo@digest` when pinned (the content is what matters), else
    /// `repo:tag`.
    pub fn store_name(&self) -> String {
        self.name_with(&self.familiar_repo())
    }

    /// The name pulls were stored under before names were familiar
    /// (`docker.io/library/busybox:latest`): stores made then are still read.
    pub fn qualified_store_name(&self) -> String {
        self.name_with(&self.repo_name())
    }

    fn name_with(&self, repo: &str) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => format!("{repo}@{d}"),
            (None, Some(t)) => format!("{repo}:{t}"),
            (None, None) => format!("{repo}:latest"),
        }
    }

    /// What to ask the registry for: the digest when pinned, else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".into(),
        }
    }

    /// The registry's API host: Docker Hub's differs from its name.
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB { DOCKER_HUB_API } else { &self.registry }
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.repo_name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// A store name in Docker's familiar form: a Docker Hub reference loses
/// its registry and, for official images, `library/`
/// (`docker.io/library/busybox:1` -> `busybox:1`); anything else (another
/// registry, a name that is no reference) is returned as it is. Only the
/// prefix changes: the tag or digest stays as written.
pub fn familiar(name: &str) -> String {
    let Ok(r) = Reference::parse(name) else { return name.to_string() };
    if r.registry != DOCKER_HUB {
        return name.to_string();
    }
    let rest = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => rest,
        _ => name,
    };
    match rest.strip_prefix("library/") {
        // `library/a/b` is not an official image's name: keep it.
        Some(n) if !n.split(['@', ':']).next().unwrap_or(n).contains('/') => n.to_string(),
        _ => rest.to_string(),
    }
}

/// `host[:port]`: DNS labels or an IPv4 address (bracketed IPv6 is not
/// supported: the name must also be a store key).
fn check_registry(r: &str) -> Result<(), RefProblem> {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    if let Some(p) = port
        && p.parse::<u16>().map_or(true, |n| n == 0)
    {
        return Err(RefProblem::Port(truncate(p, 10)));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(RefProblem::Registry(truncate(r, 80)));
    }
    Ok(())
}

/// Path components: lowercase letters and digits, joined by `.`, `_`,
/// `__` or runs of `-`.
fn check_repository(path: &str) -> Result<(), RefProblem> {
    for comp in path.split('/') {
        let b = comp.as_bytes();
        let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
            return Err(RefProblem::Repository);
        }
        let mut i = 0;
        while i < b.len() {
            if alnum(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !alnum(b[i]) {
                i += 1;
            }
            let sep = &comp[start..i];
            if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
                return Err(RefProblem::Repository);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn p(s: &str) -> Reference {
        Reference::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    /// One image, one name: Docker Hub's spellings of a name are the same
    /// store name, as `docker images` shows them.
    #[test]
    fn docker_hub_names_are_familiar_in_the_store() {
        for (given, want) in [
            ("busybox:latest", "busybox:latest"),
            ("docker.io/library/busybox:latest", "busybox:latest"),
            ("index.docker.io/library/busybox", "busybox"),
            ("library/busybox:1", "busybox:1"),
            ("docker.io/org/app:2", "org/app:2"),
            ("docker.io/library/a/b:1", "library/a/b:1"),
            ("127.0.0.1:5000/library/busybox:1", "127.0.0.1:5000/library/busybox:1"),
            ("snapshot/abc:1", "snapshot/abc:1"),
            ("Not_A_Ref", "Not_A_Ref"),
        ] {
            assert_eq!(familiar(given), want, "{given}");
        }
    }

    #[test]
    fn docker_hub_names_are_defaulted_like_docker() {
        let r = p("python");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("docker.io", "library/python", Some("latest"))
        );
        assert_eq!(r.store_name(), "python:latest");
        assert_eq!(r.qualified_store_name(), "docker.io/library/python:latest");
        assert_eq!(r.api_host(), "registry-1.docker.io");
        assert_eq!(p("python:3.12-slim").store_name(), "python:3.12-slim");
        assert_eq!(p("org/img").store_name(), "org/img:latest");
        assert_eq!(p("index.docker.io/library/busybox").store_name(), "busybox:latest");
        assert_eq!(p("127.0.0.1:5000/library/busybox").store_name(), "127.0.0.1:5000/library/busybox:latest");
    }

    #[test]
    fn registry_port_path_tag_and_digest_are_split() {
        let r = p(&format!("127.0.0.1:5000/a/b/c:v1@{D}"));
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "a/b/c");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_ref().map(|d| d.to_string()).as_deref(), Some(D));
        assert_eq!(r.store_name(), format!("127.0.0.1:5000/a/b/c@{D}"));
        assert_eq!(r.manifest_ref(), D);
        let r = p(&format!("ghcr.io/org/img@{D}"));
        assert_eq!(r.tag, None);
        assert_eq!(p("localhost/x").registry, "localhost");
        assert_eq!(p("localhost:5000/x").store_name(), "localhost:5000/x:latest");
        assert_eq!(p("a.b__c-d").repository, "library/a.b__c-d");
    }

    #[test]
    fn malformed_references_are_refused_with_the_rule() {
        for bad in [
            "",
            "Python",
            "python:",
            "python:-x",
            "python@sha512:abcd",
            "python@sha256:../../etc",
            "registry:99999/x",
            "reg:0/x",
            "-host.io/x",
            "x//y",
            "a/b/",
            "a..b",
            "a b",
            "[::1]:5000/x",
            &format!("x:{}", "t".repeat(129)),
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let e = Reference::parse("python@md5:abc").unwrap_err().to_string();
        assert!(e.contains("only sha256"), "{e}");
        let e = Reference::parse("Org/Img").unwrap_err().to_string();
        assert!(e.contains("lowercase"), "{e}");
    }

    #[test]
    fn store_names_are_valid_store_keys() {
        for r in ["python", "127.0.0.1:5000/busybox:1.36", &format!("ghcr.io/o/i@{D}")] {
            let n = p(r).store_name();
            assert_eq!(super::super::normalize_name(&n).unwrap(), n);
        }
    }
}
