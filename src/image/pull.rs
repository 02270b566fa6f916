//! `husk pull`: a registry reference resolved to one manifest (indexes
//! resolved to the requested platform), its config, and layers streamed
//! straight into the import's layer builds: blob -> sha256 + size ->
//! inflate -> diff_id -> tar -> files, one pass while it downloads, so a
//! layer is never held in memory nor read twice. Every manifest and config
//! is checked against its digest before it is parsed, every layer before
//! its directory is published, and the record is written last: a failed
//! pull leaves the layers it completed (the next pull reuses them) and
//! nothing half-built.

use super::digest::{Digest, Expect, Verify, truncate};
use super::import::{ImportOptions, ImportReport, import_resolved};
use super::oci::{self, Descriptor, ImageConfig, Index, Manifest, Platform};
use super::reference::Reference;
use super::registry::{Client, ClientOptions, RegistryError, creds, mirror, read_small, response_header};
use super::source::{Blobs, Resolved, layers_of};
use super::store::{PULLED_PREFIX, Pulled};
use super::{ImageError, MAX_JSON, Store};
use serde::Serialize;
use std::io::{self, Read};
use std::sync::Arc;

const ACCEPT_MANIFESTS: &[&str] =
    &[oci::MEDIA_OCI_INDEX, oci::MEDIA_DOCKER_LIST, oci::MEDIA_OCI_MANIFEST, oci::MEDIA_DOCKER_MANIFEST];
const DOCKER_SCHEMA1: &[&str] = &[
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
];
/// Layers that registries do not (or must not) serve: Windows base layers
/// and OCI non-distributable ones live at URLs of their vendor's choosing.
const FOREIGN: &[&str] =
    &["application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", "application/vnd.oci.image.layer.nondistributable."];

/// Most layers a pulled image may have. Real images have tens (Docker's
/// overlay2 stops at 128); thousands are a registry making husk fetch and
/// stack layers without end (docs/images.md, "Limits").
pub const MAX_LAYERS: usize = 256;
/// Most bytes the layers of one pulled image may declare together
/// (compressed, as the manifest's descriptors say), 64 GiB.
pub const MAX_LAYER_BYTES: u64 = 64 << 30;

/// What happens on the way, for progress lines and `--json` events.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The reference resolved to this manifest.
    Resolved { reference: String, digest: Digest, platform: String, layers: usize },
    /// A layer's download started.
    Downloading { digest: Digest, size: u64 },
    /// A layer's blob was read whole (verified when the layer is published).
    Downloaded { digest: Digest, size: u64 },
}

pub type Progress = Arc<dyn Fn(Event) + Send + Sync>;

pub struct PullOptions {
    pub platform: Platform,
    pub client: ClientOptions,
    pub progress: Option<Progress>,
    /// How the layers are built and the record named (the import's).
    pub import: ImportOptions,
}

/// A `--platform` that is not `OS/ARCH[/VARIANT]` (the value, cut to 40).
#[derive(Debug, thiserror::Error)]
#[error("--platform {0:?}: expected OS/ARCH[/VARIANT], e.g. linux/amd64")]
pub struct BadPlatform(String);

/// `os/arch[/variant]`.
pub fn parse_platform(s: &str) -> Result<Platform, BadPlatform> {
    let parts: Vec<&str> = s.split('/').collect();
    let ok = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(ok) {
        return Err(BadPlatform(truncate(s, 40)));
    }
    Ok(Platform { os: parts[0].into(), architecture: parts[1].into(), variant: parts.get(2).map(|v| v.to_string()) })
}

fn refused(what: impl Into<String>, why: impl Into<String>) -> ImageError {
    ImageError::Registry(RegistryError::Refused { what: what.into(), why: why.into() })
}

/// Pulls `r` into `store`: from each of the registry's mirrors in turn
/// (the flags' and environment's, then `<store root>/registries.json`'s),
/// then from the registry itself, as Docker does. A mirror that cannot be
/// reached, refuses us, lacks the image or serves a manifest that does not
/// verify is reported on stderr and passed over; a layer that fails its
/// checks or the store failing (a layer bomb, a full disk) ends the pull.
pub fn pull(store: &Store, r: &Reference, opts: &PullOptions) -> Result<ImportReport, ImageError> {
    let mut all = opts.client.mirrors.clone();
    all.extend(mirror::from_file(store.root())?);
    for m in mirror::for_registry(&all, &r.registry) {
        match pull_from(store, r, m.host.as_str(), opts) {
            Ok(rep) => return Ok(rep),
            Err(ImageError::Registry(e)) => {
                crate::errln!("husk: mirror {} of {}: {e}; trying the next source", m.url, r.registry)
            }
            Err(e) => return Err(e),
        }
    }
    pull_from(store, r, r.api_host(), opts)
}

/// Pulls `r` from the registry API at `host` (the origin or a mirror).
fn pull_from(store: &Store, r: &Reference, host: &str, opts: &PullOptions) -> Result<ImportReport, ImageError> {
    let cred_key = if host == r.api_host() { r.registry.as_str() } else { host };
    let cred = creds::lookup(cred_key, store.root())
        .map_err(|e| RegistryError::Auth { registry: cred_key.to_string(), why: e.to_string() })?;
    let client = Client::new(host, &r.repository, cred, &opts.client)?;
    let resolved = resolve(client, r, opts)?;
    import_resolved(store, resolved, &opts.import)
}

/// A manifest as the registry sent it, verified.
struct Doc {
    digest: Digest,
    bytes: Vec<u8>,
}

/// Just enough of a manifest or index to tell which it is.
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(rename = "schemaVersion", default)]
    schema_version: u32,
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    manifests: Option<serde_json::Value>,
}

fn resolve(client: Client, r: &Reference, opts: &PullOptions) -> Result<Resolved, ImageError> {
    let fmt = ImageError::Format;
    let mut doc = fetch_manifest(&client, &r.manifest_ref(), r.digest.as_ref(), None)?;
    for depth in 0..=4 {
        let what = format!("{r}: manifest {}", doc.digest);
        let probe: Probe = oci::parse(&what, &doc.bytes)?;
        let mt = probe.media_type.as_deref().unwrap_or("");
        if probe.schema_version == 1 || DOCKER_SCHEMA1.contains(&mt) {
            return Err(refused(
                what,
                "a Docker schema 1 manifest (deprecated, unverifiable); push the image again with a current tool",
            ));
        }
        if probe.manifests.is_none() && mt != oci::MEDIA_OCI_INDEX && mt != oci::MEDIA_DOCKER_LIST {
            break;
        }
        if depth == 4 {
            return Err(fmt(format!("{r}: image indexes nested more than 4 deep")));
        }
        let index: Index = oci::parse(&what, &doc.bytes)?;
        let all: Vec<&Descriptor> = index.manifests.iter().collect();
        let d = oci::choose(&all, &opts.platform).map_err(|e| ImageError::Platform(format!("{r}: {e}")))?;
        doc = fetch_manifest(&client, &d.digest.to_string(), Some(&d.digest), Some(d.size))?;
    }
    let what = format!("{r}: manifest {}", doc.digest);
    let manifest: Manifest = oci::parse(&what, &doc.bytes)?;
    if let Some(mt) = &manifest.media_type
        && mt != oci::MEDIA_OCI_MANIFEST
        && mt != oci::MEDIA_DOCKER_MANIFEST
    {
        return Err(fmt(format!("{what}: media type {:?} is not an image manifest", truncate(mt, 100))));
    }
    check_bounds(&what, &manifest)?;
    for l in &manifest.layers {
        if FOREIGN.iter().any(|f| l.media_type.starts_with(f)) {
            return Err(refused(
                format!("{r}: layer {}", l.digest),
                format!(
                    "media type {} is a foreign / non-distributable layer, which registries do not serve; husk does not fetch those from other URLs",
                    l.media_type
                ),
            ));
        }
        super::unpack::declared(&l.media_type).map_err(|why| refused(format!("{r}: layer {}", l.digest), why))?;
    }
    let c = &manifest.config;
    let config_bytes = fetch_small_blob(&client, c, "config")?;
    let config: ImageConfig = oci::parse(&format!("{r}: config {}", c.digest), &config_bytes)?;
    if config.rootfs.kind != "layers" {
        return Err(fmt(format!("{r}: rootfs type {:?} is not \"layers\"", truncate(&config.rootfs.kind, 40))));
    }
    let platform = Platform {
        os: if config.os.is_empty() { opts.platform.os.clone() } else { config.os.clone() },
        architecture: if config.architecture.is_empty() {
            opts.platform.architecture.clone()
        } else {
            config.architecture.clone()
        },
        variant: config.variant.clone(),
    };
    if platform.os != opts.platform.os || platform.architecture != opts.platform.architecture {
        return Err(ImageError::Platform(format!("{r}: the image is for {platform}, not {}", opts.platform)));
    }
    let layers = layers_of(&manifest, &config, &r.to_string(), Digest::to_string)?;
    if let Some(p) = &opts.progress {
        p(Event::Resolved {
            reference: r.to_string(),
            digest: doc.digest.clone(),
            platform: platform.to_string(),
            layers: manifest.layers.len(),
        });
    }
    let pinned = Reference { digest: Some(doc.digest.clone()), ..r.clone() };
    Ok(Resolved {
        blobs: Box::new(RemoteBlobs { client, progress: opts.progress.clone() }),
        manifest: Some((doc.digest, doc.bytes)),
        config_digest: c.digest.clone(),
        config_bytes,
        config,
        layers,
        default_name: r.store_name(),
        platform: platform.to_string(),
        source: format!("{PULLED_PREFIX}{pinned}"),
        pulled: Some(Pulled { registry: r.registry.clone(), repository: r.repository.clone(), tag: r.tag.clone() }),
    })
}

/// MAX_LAYERS and MAX_LAYER_BYTES, before any blob is fetched.
fn check_bounds(what: &str, manifest: &Manifest) -> Result<(), ImageError> {
    let n = manifest.layers.len();
    if n > MAX_LAYERS {
        return Err(refused(what, format!("it lists {n} layers, over husk's bound of {MAX_LAYERS} layers per image")));
    }
    let total = manifest.layers.iter().fold(0u64, |t, l| t.saturating_add(l.size));
    if total > MAX_LAYER_BYTES {
        return Err(refused(
            what,
            format!(
                "its layers declare {total} bytes together, over husk's bound of {MAX_LAYER_BYTES} bytes ({} GiB) per image",
                MAX_LAYER_BYTES >> 30
            ),
        ));
    }
    Ok(())
}

/// GETs a manifest within MAX_JSON and checks it against `want` (the
/// digest the reference or the parent index named) and the registry's own
/// `Docker-Content-Digest`.
fn fetch_manifest(
    client: &Client,
    reference: &str,
    want: Option<&Digest>,
    size: Option<u64>,
) -> Result<Doc, ImageError> {
    let url = client.url(&format!("manifests/{reference}"));
    let what = format!("manifest {reference}");
    if let Some(s) = size
        && s > MAX_JSON
    {
        return Err(refused(what, format!("its descriptor says {s} bytes, over the bound of {MAX_JSON}")));
    }
    let resp = client.get(&url, ACCEPT_MANIFESTS)?;
    if let Some(len) = response_header(&resp, "content-length").and_then(|l| l.parse::<u64>().ok())
        && len > MAX_JSON
    {
        return Err(refused(what, format!("the registry sends {len} bytes, over the bound of {MAX_JSON}")));
    }
    let header_digest = response_header(&resp, "docker-content-digest");
    let bytes = read_small(resp.into_body(), MAX_JSON).map_err(|why| refused(what.clone(), why))?;
    let digest = Digest::of(&bytes);
    if let Some(w) = want
        && &digest != w
    {
        return Err(refused(what, format!("its content has digest {digest}, not the {w} it was asked for")));
    }
    if let Some(s) = size
        && s != bytes.len() as u64
    {
        return Err(refused(what, format!("it is {} bytes, its descriptor says {s}", bytes.len())));
    }
    if let Some(h) = header_digest
        && h.trim() != digest.to_string()
    {
        return Err(refused(
            what,
            format!("the registry says its digest is {}, its content's is {digest}", truncate(h.trim(), 80)),
        ));
    }
    Ok(Doc { digest, bytes })
}

/// A config: bounded, size and digest checked before it is parsed.
fn fetch_small_blob(client: &Client, d: &Descriptor, what: &str) -> Result<Vec<u8>, ImageError> {
    let what = format!("{what} {}", d.digest);
    if d.size > MAX_JSON {
        return Err(refused(what, format!("its descriptor says {} bytes, over the bound of {MAX_JSON}", d.size)));
    }
    let resp = client.get(&client.url(&format!("blobs/{}", d.digest)), &[])?;
    let mut v = Verify::new(resp.into_body().into_reader(), Expect::Exact(d.size), "blob");
    let mut bytes = Vec::new();
    let read = (&mut v).take(d.size + 1).read_to_end(&mut bytes);
    if let Err(e) = read {
        return Err(refused(what, e.to_string()));
    }
    match v.finish(&d.digest) {
        Ok(Ok(())) => Ok(bytes),
        Ok(Err(m)) => Err(refused(what, m.to_string())),
        Err(e) => Err(refused(what, e.to_string())),
    }
}

/// Layer blobs, opened as HTTP response streams. `path` is the digest.
struct RemoteBlobs {
    client: Client,
    progress: Option<Progress>,
}

impl Blobs for RemoteBlobs {
    fn open(&self, path: &str) -> Result<(Box<dyn Read + Send + '_>, u64), ImageError> {
        let digest = Digest::parse(path).map_err(|e| ImageError::Format(e.to_string()))?;
        let resp = self.client.get(&self.client.url(&format!("blobs/{digest}")), &[])?;
        let len = response_header(&resp, "content-length").and_then(|l| l.parse::<u64>().ok());
        if let Some(p) = &self.progress {
            p(Event::Downloading { digest: digest.clone(), size: len.unwrap_or(0) });
        }
        let reader = resp.into_body().into_reader();
        // The size the caller checks is the descriptor's (Verify::Exact in
        // the unpack); this one is only what the registry announced.
        Ok((Box::new(Announce { inner: reader, digest, read: 0, progress: self.progress.clone() }), len.unwrap_or(0)))
    }
}

/// Reports a blob's end of stream.
struct Announce<R> {
    inner: R,
    digest: Digest,
    read: u64,
    progress: Option<Progress>,
}

impl<R: Read> Read for Announce<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if n == 0
            && !buf.is_empty()
            && let Some(p) = self.progress.take()
        {
            p(Event::Downloaded { digest: self.digest.clone(), size: self.read });
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_parse_os_arch_variant() {
        let p = parse_platform("linux/arm64/v8").unwrap();
        assert_eq!((p.os.as_str(), p.architecture.as_str(), p.variant.as_deref()), ("linux", "arm64", Some("v8")));
        assert_eq!(parse_platform("linux/amd64").unwrap().variant, None);
        for bad in ["linux", "linux/", "/amd64", "a/b/c/d", "linux/amd 64"] {
            assert!(parse_platform(bad).is_err(), "{bad}");
        }
    }
}
