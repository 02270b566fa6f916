//! `husk image import | export | ls | inspect | rm | prune | verify`.

use crate::cli::{ImageArgs, ImageCommand, ImageImportArgs, ImageVerifyArgs};
use crate::host::HostFacts;
use crate::image::import::{ImportOptions, Stored, import};
use crate::image::root::owners_for;
use crate::image::store::Record;
use crate::image::{ImageError, Limits, Owners, Store, oci, verify};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::paths::{Paths, PathsError};
use serde_json::json;
use std::collections::HashMap;

pub fn image(args: ImageArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let json = match &args.command {
        ImageCommand::Export(a) => a.json,
        ImageCommand::Import(a) => a.json,
        ImageCommand::Ls(a) | ImageCommand::Prune(a) => a.json,
        ImageCommand::Inspect(a) => a.json,
        ImageCommand::Rm(a) => a.json,
        ImageCommand::Verify(a) => a.json,
    };
    match run(args, paths) {
        Ok(code) => code,
        Err(e) => {
            if json {
                let report = crate::outcome::ErrorReport::new(crate::step::Phase::Image, e.to_string());
                crate::cli::report::json_failure(report, Default::default(), false);
            }
            crate::errln!("husk: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

/// `husk image export`.
fn export(store: &Store, owners: &Owners, a: crate::cli::images::ImageExportArgs) -> i32 {
    let format = match a.format {
        crate::cli::images::ExportFormat::Oci => crate::build::export::Format::Oci,
        crate::cli::images::ExportFormat::OciArchive => crate::build::export::Format::OciArchive,
        crate::cli::images::ExportFormat::DockerArchive => crate::build::export::Format::DockerArchive,
    };
    match crate::build::export::export(store, &a.name, owners, &a.output, format) {
        Ok(r) => {
            if a.json {
                crate::outln!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                crate::outln!(
                    "exported {} to {} ({}, {} layers, manifest {})",
                    r.name,
                    r.path.display(),
                    r.format,
                    r.layers,
                    r.manifest
                );
            }
            0
        }
        Err(e) => {
            if a.json {
                let report = crate::outcome::ErrorReport::new(crate::step::Phase::Image, e.to_string());
                crate::cli::report::json_failure(report, Default::default(), false);
            }
            crate::errln!("husk: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

fn run(args: ImageArgs, paths: &Result<Paths, PathsError>) -> Result<i32, ImageError> {
    let paths = paths.as_ref().map_err(|e| ImageError::Store { path: "?".into(), why: e.to_string() })?;
    let store = Store::open(&paths.root)?;
    let host = HostFacts::probe();
    let owners = owners_for(&host, None);
    let done = |r: Result<(), ImageError>| r.map(|()| 0);
    match args.command {
        ImageCommand::Import(a) => done(import_cmd(&store, &host, a)),
        ImageCommand::Verify(a) => verify_cmd(&store, &host, a),
        ImageCommand::Export(a) => Ok(export(&store, &owners, a)),
        ImageCommand::Ls(a) => {
            let listing = store.list()?;
            if a.json {
                let mut rows: Vec<_> = listing.records.iter().map(|r| summary(&store, r, &owners)).collect();
                rows.extend(listing.damaged.iter().map(
                    |d| json!({ "name": d.name, "damaged": true, "file": d.file, "why": d.why, "repair": d.repair() }),
                ));
                crate::outln!("{}", serde_json::Value::Array(rows));
            } else {
                // The NAME column is as wide as the longest name (registry
                // paths run past any fixed width), so the others line up.
                let names = listing.records.iter().map(|r| r.name.len());
                let damaged = listing.damaged.iter().map(|d| d.name.as_deref().unwrap_or("?").len());
                let w = names.chain(damaged).max().unwrap_or(0).max(32);
                crate::outln!("{:<w$} {:<12}  {:>6}  {:>10}  IMPORTED (UTC)", "NAME", "ID", "LAYERS", "SIZE");
                for r in &listing.records {
                    let size = unpacked_size(&store, r, &owners).map(human).unwrap_or_else(|| "?".into());
                    crate::outln!(
                        "{:<w$} {:<12}  {:>6}  {:>10}  {}",
                        r.name,
                        r.id().short(),
                        r.layers.len(),
                        size,
                        utc(r.imported_at)
                    );
                }
                for d in &listing.damaged {
                    let name = d.name.as_deref().unwrap_or("?");
                    crate::outln!("{name:<w$} {:<12}  {:>6}  {:>10}  -", "DAMAGED", "?", "?");
                }
            }
            for d in &listing.damaged {
                crate::errln!("husk: image record {} is damaged ({}); {}", d.file.display(), d.why, d.repair());
            }
            Ok(0)
        }
        ImageCommand::Inspect(a) => {
            let rec = store.find(&a.name)?;
            let config: oci::ImageConfig = oci::parse("stored config", &store.get_blob(&rec.config)?)?;
            let layers: Vec<_> = rec
                .layers
                .iter()
                .map(|l| {
                    json!({
                        "diff_id": l.diff_id,
                        "blob": l.blob,
                        "size": l.size,
                        "media_type": l.media_type,
                        "path": store.layer_dir(&l.diff_id, &owners),
                        "present": store.has_layer(&l.diff_id, &owners),
                        "unpack": store.layer_meta(&l.diff_id, &owners).map(|m| m.report),
                    })
                })
                .collect();
            let mut out = summary(&store, &rec, &owners);
            out["config"] = json!(config.config.unwrap_or_default());
            out["layers"] = json!(layers);
            crate::outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            Ok(0)
        }
        ImageCommand::Rm(a) => rm_cmd(&store, a),
        ImageCommand::Prune(a) => {
            let r = store.prune()?;
            if a.json {
                crate::outln!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                crate::outln!(
                    "removed {} layers ({}), {} blobs, {} partial builds; {} unreferenced layers still in use",
                    r.layers_removed,
                    human(r.bytes_freed),
                    r.blobs_removed,
                    r.partial_builds_removed,
                    r.layers_in_use
                );
            }
            Ok(0)
        }
    }
}

/// `husk image rm NAME...`. One name: its error is the command's (exit
/// 125, --json's failure verdict). Several: each is tried, as `docker rmi`
/// does; the ones refused are named on stderr (with --json, in `errors`)
/// and make the exit 125.
fn rm_cmd(store: &Store, a: crate::cli::images::ImageRmArgs) -> Result<i32, ImageError> {
    if let [name] = a.names.as_slice() {
        let (name, id) = store.remove(name)?;
        if a.json {
            crate::outln!("{}", json!({ "removed": name, "id": id }));
        } else {
            crate::outln!("removed {name} ({}); `husk image prune` frees layers no image uses", short(&id));
        }
        return Ok(0);
    }
    let (mut removed, mut errors) = (Vec::new(), Vec::new());
    for given in &a.names {
        match store.remove(given) {
            Ok((name, id)) => {
                if !a.json {
                    crate::outln!("removed {name} ({})", short(&id));
                }
                removed.push(json!({ "name": name, "id": id }));
            }
            Err(e) => {
                crate::errln!("husk: {e}");
                errors.push(json!({ "name": given, "error": e.to_string() }));
            }
        }
    }
    if a.json {
        crate::outln!("{}", json!({ "removed": removed, "errors": errors }));
    } else if !removed.is_empty() {
        crate::outln!("`husk image prune` frees layers no image uses");
    }
    Ok(if errors.is_empty() { 0 } else { EXIT_HUSK_FAILED })
}

fn short(id: &Option<crate::image::digest::Digest>) -> String {
    id.as_ref().map(|d| d.short().to_string()).unwrap_or_else(|| "damaged record".into())
}

fn id_range(arg: Option<&str>) -> Result<Option<crate::spec::IdRange>, ImageError> {
    arg.map(crate::userns::parse_range).transpose().map_err(|e| ImageError::Source(e.to_string()))
}

/// Exit 0 when every image checked is intact or was repaired, 1 when
/// damage remains, 125 (the caller) when the check itself failed.
fn verify_cmd(store: &Store, host: &HostFacts, a: ImageVerifyArgs) -> Result<i32, ImageError> {
    let owners = owners_for(host, id_range(a.id_range.as_deref())?);
    // Shared, like an import: rm/prune wait until the check is done.
    let _lock = store.lock_store(false)?;
    let (records, damaged_records) = match &a.name {
        Some(n) => (vec![store.find(n)?], Vec::new()),
        None => {
            let l = store.list()?;
            (l.records, l.damaged)
        }
    };
    let mut seen = HashMap::new();
    let mut checks = Vec::new();
    for rec in &records {
        let mut c = verify::check_image(store, rec, &owners, &mut seen)?;
        if a.repair && c.status == "damaged" {
            verify::repair(store, rec, owners, &mut c);
            // Layers shared with images checked later were replaced too.
            seen.retain(|_, l| l.status == "ok");
        }
        checks.push(c);
    }
    let bad = checks.iter().any(|c| c.status == "damaged" || c.status == "unrepairable") || !damaged_records.is_empty();
    if a.json {
        let rows: Vec<_> = damaged_records
            .iter()
            .map(|d| json!({ "name": d.name, "file": d.file, "why": d.why, "repair": d.repair() }))
            .collect();
        crate::outln!("{}", json!({ "ok": !bad, "images": checks, "damaged_records": rows }));
    } else {
        for c in &checks {
            let ok_layers = c.layers.iter().filter(|l| l.status == "ok").count();
            crate::outln!(
                "{:<32} {:<12} {} ({}/{} layers intact)",
                c.name,
                c.status,
                c.id.short(),
                ok_layers,
                c.layers.len()
            );
            for b in c.blobs.iter().filter(|b| b.status != "ok") {
                crate::outln!("  {} blob {}: {} ({})", b.role, b.digest, b.status, b.why.as_deref().unwrap_or(""));
            }
            for l in c.layers.iter().filter(|l| l.status != "ok") {
                crate::outln!("  layer {}: {}: {}", l.diff_id, l.status, l.why.as_deref().unwrap_or(""));
                for d in l.damaged.iter().skip(1).take(4) {
                    crate::outln!("    {}: {}", d.path, d.why);
                }
            }
            if let Some(e) = &c.repair_error {
                crate::outln!("  repair failed: {e}");
            }
            if let Some(r) = &c.repair {
                crate::outln!("  repair: {r}");
            }
        }
        for d in &damaged_records {
            crate::outln!("record {} is damaged ({}); {}", d.file.display(), d.why, d.repair());
        }
    }
    Ok(i32::from(bad))
}

fn import_cmd(store: &Store, host: &HostFacts, a: ImageImportArgs) -> Result<(), ImageError> {
    let range = id_range(a.id_range.as_deref())?;
    if let Some(r) = range {
        crate::idrange::check_unless_forced(r, a.id_range_force).map_err(|e| ImageError::Source(e.to_string()))?;
    }
    let opts = ImportOptions {
        name: a.name,
        limits: Limits {
            max_layer_bytes: a.max_layer_size,
            max_ratio: a.max_ratio,
            max_entries: a.max_entries,
            ..Limits::default()
        },
        owners: owners_for(host, range),
        progress: !a.json && nix::unistd::isatty(std::io::stderr()).unwrap_or(false),
        stored: Stored::Check,
        replace: Vec::new(),
        expect_id: None,
    };
    let report = import(store, &a.path, &opts)?;
    if a.json {
        crate::outln!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        crate::outln!(
            "{} {} ({} layers: {} extracted, {} shared) in {:.2}s",
            report.name,
            report.id,
            report.layers.len(),
            report.extracted,
            report.reused,
            report.seconds
        );
        for l in report.layers.iter().filter(|l| l.status == "replaced") {
            crate::errln!(
                "husk: note: layer {} was damaged ({}) and was unpacked again",
                l.diff_id,
                l.damage.as_deref().unwrap_or("?")
            );
        }
        if report.blobs_replaced > 0 {
            crate::errln!(
                "husk: note: {} stored manifest/config blobs did not match their digest and were replaced",
                report.blobs_replaced
            );
        }
        let skipped: u64 = report.layers.iter().filter_map(|l| l.unpack.as_ref()).map(|u| u.skipped_count).sum();
        if skipped > 0 {
            crate::errln!(
                "husk: note: {skipped} device nodes/FIFOs in the layers were not created (sandboxes get their own /dev)"
            );
        }
    }
    Ok(())
}

fn unpacked_size(store: &Store, r: &Record, owners: &Owners) -> Option<u64> {
    r.layers.iter().map(|l| store.layer_meta(&l.diff_id, owners).map(|m| m.report.bytes)).sum()
}

fn summary(store: &Store, r: &Record, owners: &Owners) -> serde_json::Value {
    json!({
        "name": r.name,
        "id": r.id(),
        "manifest": r.manifest,
        "config_digest": r.config,
        "platform": r.platform,
        "source": r.source,
        "pulled": r.pulled,
        // What to write to get exactly this content again.
        "pinned": match (&r.pulled, &r.manifest) {
            (Some(p), Some(m)) => Some(format!("{}/{}@{m}", p.registry, p.repository)),
            _ => None,
        },
        "imported_at": r.imported_at,
        "layers": r.layers.len(),
        "unpacked_bytes": unpacked_size(store, r, owners),
    })
}

fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{b} B") } else { format!("{v:.1} {}", units[i]) }
}

/// "YYYY-MM-DD HH:MM" (UTC) from unix seconds.
fn utc(secs: u64) -> String {
    crate::units::format_utc_ms(secs.saturating_mul(1000))[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_sizes_format() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13");
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 20), "3.0 MiB");
    }
}
