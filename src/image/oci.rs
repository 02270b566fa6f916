//! The JSON documents of OCI image layouts and `docker save` archives, and
//! the choice of one manifest for this host's platform. Parsed strictly:
//! digests must be sha256, sizes non-negative, and every document is read
//! within a size bound before it is parsed.

use super::digest::Digest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const MEDIA_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MEDIA_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const ANNOTATION_REF: &str = "org.opencontainers.image.ref.name";
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub platform: Option<Platform>,
}

impl Descriptor {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }

    pub fn is_index(&self) -> bool {
        self.media_type == MEDIA_OCI_INDEX || self.media_type == MEDIA_DOCKER_LIST
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct Index {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Manifest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct ContainerConfig {
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
    #[serde(rename = "Entrypoint", default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    pub cmd: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    pub working_dir: Option<String>,
    #[serde(rename = "User", default)]
    pub user: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<Digest>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
    #[serde(default)]
    pub config: Option<ContainerConfig>,
    pub rootfs: RootFs,
}

/// One entry of a `docker save` manifest.json.
#[derive(Clone, Debug, Deserialize)]
pub struct DockerSaveEntry {
    #[serde(rename = "Config")]
    pub config: String,
    #[serde(rename = "RepoTags", default)]
    pub repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    pub layers: Vec<String>,
}

/// A JSON document that is not what the image format says it is.
#[derive(Debug, thiserror::Error)]
#[error("{what} is not valid JSON of the expected shape: {source}")]
pub struct BadJson {
    pub what: String,
    pub source: serde_json::Error,
}

/// Parses a JSON document, naming it in the error.
pub fn parse<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, BadJson> {
    serde_json::from_slice(bytes).map_err(|source| BadJson { what: what.to_string(), source })
}

/// The platform this husk runs on, in OCI terms.
pub fn host_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    Platform { architecture: architecture.into(), os: "linux".into(), variant: None }
}

/// How well `p` suits the host: None when it cannot run here, else a rank
/// (higher is better: the most specific variant the CPU supports).
pub fn platform_rank(p: &Platform, host: &Platform) -> Option<u32> {
    if p.os != host.os || p.architecture != host.architecture {
        return None;
    }
    let v = p.variant.as_deref().unwrap_or("");
    match host.architecture.as_str() {
        "amd64" => {
            let level = match v {
                "" | "v1" => 1,
                "v2" => 2,
                "v3" => 3,
                "v4" => 4,
                _ => return None,
            };
            (level <= amd64_level()).then_some(level)
        }
        "arm64" => matches!(v, "" | "v8").then_some(1),
        _ => Some(1),
    }
}

/// x86-64 micro-architecture level of this CPU (1..=4).
fn amd64_level() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
            return 4;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("bmi2") && is_x86_feature_detected!("fma") {
            return 3;
        }
        if is_x86_feature_detected!("sse4.2") && is_x86_feature_detected!("popcnt") {
            return 2;
        }
    }
    1
}

/// Picks the manifest among `candidates` (already filtered by tag): the only
/// one, or the best one for the host platform. Nested indexes are returned
/// as they are; the caller opens and resolves them.
/// Why no manifest of an index suits the host.
#[derive(Debug, thiserror::Error)]
pub enum NoManifest {
    #[error("the index lists no manifests")]
    Empty,
    #[error("the image is only for {only}; this host runs {host}")]
    OtherPlatform { only: String, host: String },
    #[error("the index lists {count} manifests without telling them apart; pick one with PATH:TAG{tags}")]
    Ambiguous { count: usize, tags: String },
    #[error("no manifest for {host} (found: {})", found.join(", "))]
    NoneFor { host: String, found: Vec<String> },
}

pub fn choose<'a>(candidates: &[&'a Descriptor], host: &Platform) -> Result<&'a Descriptor, NoManifest> {
    match candidates {
        [] => Err(NoManifest::Empty),
        [only] => match &only.platform {
            Some(p) if platform_rank(p, host).is_none() => {
                Err(NoManifest::OtherPlatform { only: p.to_string(), host: host.to_string() })
            }
            _ => Ok(only),
        },
        many => {
            let with_platform: Vec<_> = many.iter().filter(|d| d.platform.is_some()).collect();
            if with_platform.len() < many.len() {
                return Err(NoManifest::Ambiguous { count: many.len(), tags: tags_hint(many) });
            }
            many.iter()
                .filter_map(|d| Some((platform_rank(d.platform.as_ref()?, host)?, *d)))
                .max_by_key(|(rank, _)| *rank)
                .map(|(_, d)| d)
                .ok_or_else(|| NoManifest::NoneFor {
                    host: host.to_string(),
                    found: many.iter().filter_map(|d| d.platform.as_ref().map(|p| p.to_string())).collect(),
                })
        }
    }
}

fn tags_hint(ds: &[&Descriptor]) -> String {
    let tags: Vec<&str> = ds.iter().filter_map(|d| d.annotation(ANNOTATION_REF)).collect();
    if tags.is_empty() { String::new() } else { format!(" (tags: {})", tags.join(", ")) }
}

/// Filters an index's manifests by `org.opencontainers.image.ref.name`.
pub fn by_tag<'a>(index: &'a Index, tag: Option<&str>) -> Result<Vec<&'a Descriptor>, String> {
    let all: Vec<&Descriptor> = index.manifests.iter().collect();
    let Some(tag) = tag else {
        return Ok(all);
    };
    let found: Vec<&Descriptor> = all
        .iter()
        .copied()
        .filter(|d| {
            d.annotation(ANNOTATION_REF) == Some(tag)
                || d.annotation(ANNOTATION_CONTAINERD_NAME).is_some_and(|n| n == tag || n.ends_with(&format!(":{tag}")))
        })
        .collect();
    if found.is_empty() {
        let hint = tags_hint(&all);
        return Err(format!(
            "no manifest tagged {tag:?} in the index{}",
            if hint.is_empty() { " (it has no tags)".to_string() } else { hint }
        ));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(platform: Option<(&str, &str, Option<&str>)>, tag: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: MEDIA_OCI_MANIFEST.into(),
            digest: Digest::of(format!("{platform:?}{tag:?}").as_bytes()),
            size: 1,
            annotations: tag.map(|t| BTreeMap::from([(ANNOTATION_REF.to_string(), t.to_string())])),
            platform: platform.map(|(os, a, v)| Platform {
                os: os.into(),
                architecture: a.into(),
                variant: v.map(Into::into),
            }),
        }
    }

    fn amd64() -> Platform {
        Platform { os: "linux".into(), architecture: "amd64".into(), variant: None }
    }

    #[test]
    fn index_resolves_to_the_host_platform() {
        let a = desc(Some(("linux", "arm64", Some("v8"))), None);
        let b = desc(Some(("linux", "amd64", None)), None);
        let c = desc(Some(("windows", "amd64", None)), None);
        assert_eq!(choose(&[&a, &b, &c], &amd64()).unwrap().digest, b.digest);
        let e = choose(&[&a, &c], &amd64()).unwrap_err().to_string();
        assert!(e.contains("no manifest for linux/amd64") && e.contains("linux/arm64/v8"), "{e}");
    }

    #[test]
    fn only_manifest_for_another_platform_is_refused() {
        let a = desc(Some(("linux", "arm64", None)), None);
        assert!(choose(&[&a], &amd64()).unwrap_err().to_string().contains("only for linux/arm64"));
        let untagged = desc(None, None);
        assert!(choose(&[&untagged], &amd64()).is_ok());
    }

    #[test]
    fn several_untagged_manifests_need_a_tag() {
        let a = desc(None, Some("v1"));
        let b = desc(None, Some("v2"));
        let e = choose(&[&a, &b], &amd64()).unwrap_err().to_string();
        assert!(e.contains("PATH:TAG") && e.contains("v1, v2"), "{e}");
        let idx = Index { schema_version: 2, media_type: None, manifests: vec![a.clone(), b.clone()] };
        assert_eq!(by_tag(&idx, Some("v2")).unwrap()[0].digest, b.digest);
        assert!(by_tag(&idx, Some("v3")).unwrap_err().contains("v1, v2"));
    }

    #[test]
    fn amd64_variants_rank_by_level() {
        let host = amd64();
        let v = |s: &str| Platform { variant: Some(s.into()), ..host.clone() };
        assert_eq!(platform_rank(&host, &host), Some(1));
        assert!(platform_rank(&v("v9"), &host).is_none());
        assert!(platform_rank(&v("v2"), &host).unwrap_or(0) <= 2);
    }

    #[test]
    fn malformed_documents_are_named_in_errors() {
        let e = parse::<Index>("index.json", b"{\"schemaVersion\": 2, \"manifests\": [{\"digest\": \"md5:x\"}]}")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("index.json is not valid JSON"), "{e}");
        assert!(parse::<Manifest>("manifest", b"{").is_err());
        let neg = "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"size\":-1},\"layers\":[]}";
        assert!(parse::<Manifest>("manifest", neg.as_bytes()).is_err());
    }
}
