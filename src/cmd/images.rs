//! `husk image export`, `husk push`, `husk commit`, `husk fork`: images
//! out of the store and out of live sandboxes (docs/build.md).

use crate::build::export::{Format, export as run_export};
use crate::cli::images::{ExportFormat, ImageExportArgs};
use crate::image::{Owners, Store};
use crate::outcome::EXIT_HUSK_FAILED;

/// Prints a failure (and, with --json, the verdict-shaped error) and
/// gives the exit code.
fn fail(json: bool, e: &dyn std::fmt::Display) -> i32 {
    if json {
        let report = crate::outcome::ErrorReport::new(crate::step::Phase::Image, e.to_string());
        crate::cli::report::json_failure(report, Default::default(), false);
    }
    crate::errln!("husk: {e}");
    EXIT_HUSK_FAILED
}

pub fn export(store: &Store, owners: &Owners, a: ImageExportArgs) -> i32 {
    let format = match a.format {
        ExportFormat::Oci => Format::Oci,
        ExportFormat::OciArchive => Format::OciArchive,
        ExportFormat::DockerArchive => Format::DockerArchive,
    };
    match run_export(store, &a.name, owners, &a.output, format) {
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
        Err(e) => fail(a.json, &e),
    }
}
