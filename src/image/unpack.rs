//! One layer, streamed: blob -> verify(digest, size) -> decompress ->
//! verify(diff_id, bound) -> tar members -> `LayerWriter`. Nothing is
//! buffered whole; the bound stops a decompression bomb at the first read
//! that crosses it.

use super::Limits;
use super::digest::{Digest, Expect, Mismatch, Verify, bound_of};
use super::layer::{LayerWriter, Owners, UnpackError, Unpacked};
use super::tar::{Stream, TarReader};
use super::whiteout::{NameLimits, components, display, meaning};
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// The compression a layer's media type declares: `Some(c)` for OCI types
/// (checked against the blob's first bytes), `None` where the blob's magic
/// decides (Docker's types, which tools also use for plain tars, and
/// `docker save` members, which have no media type).
pub fn declared(media_type: &str) -> Result<Option<Compression>, String> {
    let oci = ["application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar"];
    for base in oci {
        if let Some(rest) = media_type.strip_prefix(base) {
            return match rest {
                "" => Ok(Some(Compression::None)),
                "+gzip" => Ok(Some(Compression::Gzip)),
                "+zstd" => Ok(Some(Compression::Zstd)),
                _ => Err(format!("unsupported layer media type {media_type:?} (husk reads tar, tar+gzip, tar+zstd)")),
            };
        }
    }
    match media_type {
        ""
        | "application/vnd.docker.image.rootfs.diff.tar.gzip"
        | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
        | "application/vnd.docker.image.rootfs.diff.tar" => Ok(None),
        _ => Err(format!("unsupported layer media type {:?}", super::digest::truncate(media_type, 100))),
    }
}

fn sniff(head: &[u8]) -> Compression {
    if head.starts_with(GZIP_MAGIC) {
        Compression::Gzip
    } else if head.starts_with(ZSTD_MAGIC) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

type Blob<'a> = BufReader<Verify<Box<dyn Read + Send + 'a>>>;

enum Decoder<'a> {
    Plain(Blob<'a>),
    Gzip(Box<flate2::bufread::MultiGzDecoder<Blob<'a>>>),
    Zstd(zstd::stream::read::Decoder<'static, Blob<'a>>),
}

impl Read for Decoder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decoder::Plain(r) => r.read(buf),
            Decoder::Gzip(r) => r.read(buf),
            Decoder::Zstd(r) => r.read(buf),
        }
    }
}

impl<'a> Decoder<'a> {
    fn into_blob(self) -> Blob<'a> {
        match self {
            Decoder::Plain(r) => r,
            Decoder::Gzip(r) => r.into_inner(),
            Decoder::Zstd(r) => r.finish(),
        }
    }
}

/// Everything needed to unpack one layer.
pub struct LayerJob<'a> {
    pub blob: Box<dyn Read + Send + 'a>,
    /// Names the layer in errors (the blob digest, else the diff_id).
    pub label: Digest,
    /// The blob's descriptor (digest when known, size) and media type.
    pub digest: Option<Digest>,
    pub size: u64,
    pub media_type: String,
    /// The config's diff_id for this layer.
    pub diff_id: Digest,
    pub limits: Limits,
    pub owners: Owners,
    /// O_PATH fd of the empty build directory.
    pub dest: OwnedFd,
    pub cancel: &'a AtomicBool,
    pub progress: Option<Arc<AtomicU64>>,
    /// The process umask, when the caller fixed it (see `LayerWriter`).
    pub umask: Option<u32>,
}

/// Why a layer was refused; the caller adds which image and blob.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("blob {digest} {mismatch}")]
    Blob { digest: Digest, mismatch: Mismatch },
    #[error("blob {digest}: its uncompressed content {mismatch}, but the image config's diff_id is {diff_id}")]
    DiffId { digest: Digest, diff_id: Digest, mismatch: Mismatch },
    #[error("layer {digest}: {why}")]
    Format { digest: Digest, why: String },
    #[error("layer {digest}: {err}")]
    Unpack { digest: Digest, err: UnpackError },
    #[error(
        "layer {digest}: the uncompressed stream exceeds the bound of {limit} bytes (a decompression bomb?); raise it with --max-layer-size if the image is genuine"
    )]
    Bomb { digest: Digest, limit: u64 },
    #[error("layer {digest}: {compression:?} data is corrupt or truncated: {source}")]
    Corrupt { digest: Digest, compression: Compression, source: io::Error },
}

impl LayerError {
    pub fn is_cancelled(&self) -> bool {
        matches!(self, LayerError::Unpack { err: UnpackError::Cancelled, .. })
    }
}

pub fn unpack_layer(job: LayerJob<'_>) -> Result<Unpacked, LayerError> {
    let digest = job.label.clone();
    let mut blob = Verify::new(job.blob, Expect::Exact(job.size), "blob");
    blob.progress = job.progress;
    let mut blob = BufReader::with_capacity(256 << 10, blob);
    let declared = declared(&job.media_type).map_err(|why| LayerError::Format { digest: digest.clone(), why })?;
    let head = match blob.fill_buf() {
        Ok(h) => h,
        Err(e) => return Err(read_error(&digest, Compression::None, e)),
    };
    let found = sniff(head);
    let compression = match declared {
        Some(d) if d != found && !head.is_empty() => {
            return Err(LayerError::Format {
                digest,
                why: format!(
                    "media type {:?} says {d:?} but the blob's first bytes are {found:?} data",
                    job.media_type
                ),
            });
        }
        Some(d) => d,
        None => found,
    };
    let decoder = match compression {
        Compression::None => Decoder::Plain(blob),
        Compression::Gzip => Decoder::Gzip(Box::new(flate2::bufread::MultiGzDecoder::new(blob))),
        Compression::Zstd => {
            Decoder::Zstd(zstd::stream::read::Decoder::with_buffer(blob).map_err(|e| LayerError::Corrupt {
                digest: digest.clone(),
                compression,
                source: e,
            })?)
        }
    };
    let bound = job.limits.layer_bound(job.size);
    let stream = Verify::new(decoder, Expect::AtMost(bound), "layer");
    let mut tar = TarReader::new(Stream(stream));
    let mut writer = LayerWriter::new(job.dest, job.owners, bound, job.umask);
    let names = NameLimits { max_path: job.limits.max_path, max_depth: job.limits.max_depth };
    let unpack = |err| LayerError::Unpack { digest: digest.clone(), err };
    let fail = |e: UnpackError| match e {
        UnpackError::Io(io) | UnpackError::Tar(super::tar::TarError::Io(io)) => read_error(&digest, compression, io),
        other => unpack(other),
    };
    loop {
        let h = match tar.next_member() {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => return Err(fail(e.into())),
        };
        if job.cancel.load(Ordering::Relaxed) {
            return Err(unpack(UnpackError::Cancelled));
        }
        if writer.report.entries >= job.limits.max_entries {
            return Err(unpack(UnpackError::Bound { what: "the number of entries", limit: job.limits.max_entries }));
        }
        let entry = display(&h.path);
        let comps =
            components(&h.path, &names).map_err(|err| unpack(UnpackError::Name { entry: entry.clone(), err }))?;
        let m = meaning(&comps).map_err(|err| unpack(UnpackError::Name { entry, err }))?;
        let mut data = Data(&mut tar);
        writer.apply(&h, comps, m, &mut data).map_err(fail)?;
    }
    let unpacked = writer.finish().map_err(unpack)?;
    // The diff_id covers the whole uncompressed stream, including what
    // follows the end-of-archive marker.
    let Stream(stream) = tar.into_inner();
    let (checked, decoder) = stream.finish_into(Some(&job.diff_id)).map_err(|e| read_error(&digest, compression, e))?;
    let blob = decoder.into_blob().into_inner();
    // The blob's own digest and size come first in the verdict: a bad blob
    // explains a bad diff_id, not the other way round.
    match blob.finish_into(job.digest.as_ref()).map(|(r, _)| r) {
        Ok(Ok(())) => {}
        Ok(Err(mismatch)) => return Err(LayerError::Blob { digest, mismatch }),
        Err(e) => return Err(read_error(&digest, compression, e)),
    }
    match checked {
        Ok(()) => Ok(unpacked),
        Err(Mismatch::TooLong { limit }) => Err(LayerError::Bomb { digest, limit }),
        Err(mismatch) => Err(LayerError::DiffId { digest, diff_id: job.diff_id, mismatch }),
    }
}

fn read_error(digest: &Digest, compression: Compression, e: io::Error) -> LayerError {
    match bound_of(&e) {
        Some(b) if b.label == "blob" => {
            LayerError::Blob { digest: digest.clone(), mismatch: Mismatch::TooLong { limit: b.limit } }
        }
        Some(b) => LayerError::Bomb { digest: digest.clone(), limit: b.limit },
        None => LayerError::Corrupt { digest: digest.clone(), compression, source: e },
    }
}

struct Data<'r, R: super::tar::TarInput>(&'r mut TarReader<R>);

impl<R: super::tar::TarInput> Read for Data<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_data(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_declare_compression() {
        assert_eq!(declared("application/vnd.oci.image.layer.v1.tar+gzip"), Ok(Some(Compression::Gzip)));
        assert_eq!(declared("application/vnd.oci.image.layer.v1.tar+zstd"), Ok(Some(Compression::Zstd)));
        assert_eq!(declared("application/vnd.oci.image.layer.v1.tar"), Ok(Some(Compression::None)));
        assert_eq!(declared("application/vnd.docker.image.rootfs.diff.tar.gzip"), Ok(None));
        assert!(declared("application/vnd.oci.image.layer.v1.tar+bzip2").is_err());
        assert!(declared("text/plain").is_err());
        assert_eq!(sniff(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(sniff(b"usr/"), Compression::None);
    }
}
