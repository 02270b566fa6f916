//! Registry mirrors: where a registry's images may be fetched from before
//! the registry itself (Docker's `registry-mirrors`: tried in order, the
//! origin last). Every pulled byte is still checked against the digests
//! the manifest names, so a mirror is trusted for availability, never for
//! content; a pinned reference (`@sha256:`) is pinned whatever serves it.
//!
//! Given as `--registry-mirror URL` / `HUSK_REGISTRY_MIRROR` (a URL alone
//! mirrors Docker Hub, as Docker's flag does; `REGISTRY=URL` mirrors
//! another registry) and in `<store root>/registries.json`:
//! `{"registry-mirrors": [URL, ...], "mirrors": {"HOST[:PORT]": [URL, ...]}}`.

use super::super::reference::DOCKER_HUB;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bound on registries.json.
const MAX_CONFIG: u64 = 1 << 20;

/// One mirror of one registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    /// The registry it mirrors (`docker.io`, `HOST[:PORT]`).
    pub registry: String,
    /// The mirror's API `host[:port]` (its scheme follows the client's
    /// rules: plain HTTP only for loopback and --insecure-registry hosts).
    pub host: String,
    /// The URL as given, for messages.
    pub url: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(
        "--registry-mirror {given:?}: {why}; expected URL (mirrors docker.io) or REGISTRY=URL, URL being http(s)://HOST[:PORT]"
    )]
    Flag { given: String, why: &'static str },
    #[error(transparent)]
    Read(#[from] crate::userfile::UserFileError),
    #[error("{}: not a registries file: {source}; expected {{\"registry-mirrors\": [URL], \"mirrors\": {{\"HOST[:PORT]\": [URL]}}}}", path.display())]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("{}: mirror {given:?} of {registry}: {why}; expected http(s)://HOST[:PORT]", path.display())]
    Entry { path: PathBuf, registry: String, given: String, why: &'static str },
}

/// `http(s)://HOST[:PORT]` (a trailing `/` allowed) -> `HOST[:PORT]`.
fn url_host(url: &str) -> Result<String, &'static str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("the URL must start with http:// or https://")?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() {
        return Err("the URL has no host");
    }
    if host.contains(['/', '?', '#', '@']) || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a mirror is a bare host[:port] (no path, query or user)");
    }
    // The same host grammar as a reference's registry part.
    super::super::reference::Reference::parse(&format!("{host}/x"))
        .map_err(|_| "the host is not a host name or IPv4 address with an optional port")?;
    Ok(host.to_ascii_lowercase())
}

/// The registry a mirror's key names (`docker.io` and its aliases alike).
fn registry_key(s: &str) -> Result<String, &'static str> {
    let r =
        super::super::reference::Reference::parse(&format!("{s}/x")).map_err(|_| "the registry is not HOST[:PORT]")?;
    if !s.contains(['.', ':']) && s != "localhost" {
        return Err("the registry is not HOST[:PORT]");
    }
    Ok(r.registry)
}

/// One `--registry-mirror` / `HUSK_REGISTRY_MIRROR` value.
pub fn parse_flag(given: &str) -> Result<Mirror, MirrorError> {
    let bad = |why| MirrorError::Flag { given: super::super::digest::truncate(given, 120), why };
    let (registry, url) = match given.split_once('=') {
        Some((r, u)) => (registry_key(r.trim()).map_err(bad)?, u.trim()),
        None => (DOCKER_HUB.to_string(), given.trim()),
    };
    Ok(Mirror { registry, host: url_host(url).map_err(bad)?, url: url.to_string() })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default, rename = "registry-mirrors")]
    docker_hub: Vec<String>,
    #[serde(default)]
    mirrors: BTreeMap<String, Vec<String>>,
}

/// The mirrors `<store root>/registries.json` names (none when absent).
pub fn from_file(store_root: &Path) -> Result<Vec<Mirror>, MirrorError> {
    let path = store_root.join("registries.json");
    let bytes = match crate::userfile::read("registries file", &path, MAX_CONFIG) {
        Ok(b) => b,
        Err(crate::userfile::UserFileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into()),
    };
    let f: File = serde_json::from_slice(&bytes).map_err(|source| MirrorError::Parse { path: path.clone(), source })?;
    let mut out = Vec::new();
    let entries = f.docker_hub.into_iter().map(|u| (DOCKER_HUB.to_string(), u));
    let others = f.mirrors.into_iter().flat_map(|(r, us)| us.into_iter().map(move |u| (r.clone(), u)));
    for (registry, url) in entries.chain(others) {
        let bad = |why| MirrorError::Entry { path: path.clone(), registry: registry.clone(), given: url.clone(), why };
        let key = registry_key(&registry).map_err(bad)?;
        out.push(Mirror { registry: key, host: url_host(&url).map_err(bad)?, url: url.clone() });
    }
    Ok(out)
}

/// The mirrors of `registry`, in order, each once.
pub fn for_registry<'a>(all: &'a [Mirror], registry: &str) -> Vec<&'a Mirror> {
    let mut out: Vec<&Mirror> = Vec::new();
    for m in all.iter().filter(|m| m.registry == registry) {
        if !out.iter().any(|o| o.host == m.host) {
            out.push(m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_url_mirrors_docker_hub_and_registry_eq_url_mirrors_that_registry() {
        let m = parse_flag("https://mirror.gcr.io").unwrap();
        assert_eq!((m.registry.as_str(), m.host.as_str()), ("docker.io", "mirror.gcr.io"));
        let m = parse_flag("http://127.0.0.1:5001/").unwrap();
        assert_eq!(m.host, "127.0.0.1:5001");
        let m = parse_flag("127.0.0.1:5000=http://127.0.0.1:5001").unwrap();
        assert_eq!((m.registry.as_str(), m.host.as_str()), ("127.0.0.1:5000", "127.0.0.1:5001"));
        let m = parse_flag("index.docker.io=https://m.example").unwrap();
        assert_eq!(m.registry, "docker.io");
    }

    #[test]
    fn malformed_mirrors_are_refused_with_the_expected_form() {
        for bad in [
            "mirror.gcr.io",
            "ftp://m.example",
            "https://",
            "https://m.example/v2/",
            "https://u@m.example",
            "python=https://m.example",
            "https://m ex",
        ] {
            let e = parse_flag(bad).unwrap_err().to_string();
            assert!(e.contains("expected URL"), "{bad}: {e}");
        }
    }

    #[test]
    fn mirrors_are_kept_in_order_once_per_registry() {
        let all: Vec<Mirror> =
            ["http://127.0.0.1:1", "http://127.0.0.1:2", "https://127.0.0.1:1", "r.example=https://x.example"]
                .iter()
                .map(|s| parse_flag(s).unwrap())
                .collect();
        let hub: Vec<&str> = for_registry(&all, "docker.io").iter().map(|m| m.host.as_str()).collect();
        assert_eq!(hub, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(for_registry(&all, "r.example").len(), 1);
        assert!(for_registry(&all, "ghcr.io").is_empty());
    }
}
