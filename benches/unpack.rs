//! Layer unpack throughput: the streaming path an import takes for each
//! layer (verify blob -> inflate -> verify diff_id -> tar -> fd-relative file
//! creation), on a generated layer shaped like a distribution's (a few
//! thousand small files, some large ones, directories and symlinks), for the
//! three compressions husk reads. Throughput is in uncompressed tar bytes.
//!
//! Each sample unpacks into a fresh empty directory (created and removed
//! outside the timed part), so the numbers include file creation on the
//! disk behind `HUSK_BENCH_TMP` (default /tmp), which dominates on slow disks;
//! `HUSK_BENCH_TMP=/dev/shm` shows the CPU side alone.

#[path = "../tests/imagekit/mod.rs"]
mod imagekit;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use husk::image::digest::Digest;
use husk::image::unpack::{LayerJob, unpack_layer};
use husk::image::{Limits, Owners};
use imagekit::{Layer, Tar};
use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Deterministic, weakly compressible bytes (a random walk over a text-like
/// alphabet: gzip gets about 1.2:1, so inflating costs about what it costs on
/// real layers per output byte; the label shows each blob's size).
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let alphabet = b"etc/usr/lib/bin/share/python3 def class import return self.\n";
            alphabet[(x % alphabet.len() as u64) as usize]
        })
        .collect()
}

/// ~24 MiB of tar: 40 directories, 3,000 files of 1-8 KiB, 24 files of
/// 512 KiB, 200 symlinks.
fn layer_tar() -> Vec<u8> {
    let mut t = Tar::new();
    for d in 0..40 {
        t.dir(&format!("usr/lib/pkg{d:02}/"), 0o755);
    }
    for i in 0..3000u64 {
        let len = 1024 + (i as usize * 977) % 7168;
        t.file_mode(&format!("usr/lib/pkg{:02}/mod{i:04}.py", i % 40), 0o644, 0, &content(i, len));
    }
    for i in 0..24u64 {
        t.file_mode(&format!("usr/lib/pkg{:02}/lib{i:02}.so", i), 0o755, 0, &content(10_000 + i, 512 << 10));
    }
    for i in 0..200u64 {
        t.symlink(&format!("usr/lib/pkg{:02}/link{i:03}", i % 40), &format!("mod{i:04}.py"));
    }
    t.finish()
}

struct Dest(PathBuf);

impl Dest {
    fn new(n: u64) -> Dest {
        let base = std::env::var_os("HUSK_BENCH_TMP").map(PathBuf::from).unwrap_or_else(|| "/tmp".into());
        let p = base.join(format!("husk-bench-unpack-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("bench dest dir");
        Dest(p)
    }
}

impl Drop for Dest {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unpack(layer: &Layer, diff_id: &Digest, blob_digest: &Digest, dest: &Dest) {
    let cancel = AtomicBool::new(false);
    let fd = open(&dest.0, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).expect("open dest");
    let unpacked = unpack_layer(LayerJob {
        blob: Box::new(&layer.blob[..]),
        label: blob_digest.clone(),
        digest: Some(blob_digest.clone()),
        size: layer.blob.len() as u64,
        media_type: layer.media_type.to_string(),
        diff_id: diff_id.clone(),
        limits: Limits::default(),
        owners: Owners::Invoker,
        dest: fd,
        cancel: &cancel,
        progress: None,
        umask: Some(0),
    })
    .expect("unpack");
    assert!(unpacked.report.files >= 3024, "unpacked {} files", unpacked.report.files);
}

fn bench(c: &mut Criterion) {
    let tar = layer_tar();
    let diff_id = Digest::of(&tar);
    let layers = [
        ("tar", Layer::plain(tar.clone())),
        ("tar+gzip", Layer::gzip(tar.clone())),
        ("tar+zstd", Layer::zstd(tar.clone())),
    ];
    let mut g = c.benchmark_group("unpack");
    g.throughput(Throughput::Bytes(tar.len() as u64));
    let mut n = 0u64;
    for (name, layer) in &layers {
        let blob_digest = Digest::of(&layer.blob);
        let label = format!("{name} ({:.1} MiB blob, 3,264 entries)", layer.blob.len() as f64 / (1 << 20) as f64);
        g.bench_function(label, |b| {
            b.iter_batched(
                || {
                    n += 1;
                    Dest::new(n)
                },
                |dest| {
                    unpack(layer, &diff_id, &blob_digest, &dest);
                    dest
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(10));
    targets = bench
}
criterion_main!(benches);
