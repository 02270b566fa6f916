//! How a command's outcome reaches its caller: the verdict on stdout
//! (`--json`) or in `--verdict-file`, and the failure explained on stderr.

use super::ProcessArgs;
use crate::outcome::{ErrorReport, Outcome, Termination, Verdict};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A failure before the sandbox exists, as a verdict (for --json callers)
/// and a message on stderr.
pub fn early_failure(step: &str, message: String, hint: Option<String>) -> Outcome {
    Outcome::setup_failed(ErrorReport { step: step.into(), errno: None, message, hint })
}

/// Prints the verdict / writes the verdict file / explains a failure.
pub fn report(outcome: &Outcome, id: &str, backend: &str, isolation: &serde_json::Value, p: &ProcessArgs) -> i32 {
    report_with(outcome, id, backend, isolation, p, &Default::default())
}

/// `report`, with verdict keys beyond `run`'s (`husk exec`: the sandbox).
pub fn report_with(
    outcome: &Outcome,
    id: &str,
    backend: &str,
    isolation: &serde_json::Value,
    p: &ProcessArgs,
    extra: &std::collections::BTreeMap<&'static str, serde_json::Value>,
) -> i32 {
    let code = outcome.exit_code();
    if let Some(path) = &p.verdict_file {
        let mut v = Verdict::new(id, backend, outcome, isolation, false);
        v.extra = extra.clone();
        if let Err(e) = write_atomic(path, &serde_json::to_vec_pretty(&v).unwrap_or_default()) {
            eprintln!("husk: writing --verdict-file {}: {e}", path.display());
        }
    }
    if p.json {
        let mut v = Verdict::new(id, backend, outcome, isolation, true);
        v.extra = extra.clone();
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, &v);
        let _ = out.write_all(b"\n");
    }
    if let Some(line) = crate::cgroup::explain(outcome) {
        eprintln!("husk: {line}");
    }
    if outcome.termination == Termination::SetupFailed
        && let Some(e) = &outcome.error
    {
        eprintln!("husk: {}", e.message);
        if let Some(h) = &e.hint {
            eprintln!("husk: hint: {h}");
        }
    }
    code
}

/// Writes `data` to a temp file beside `path`, then renames it into place.
/// Anything but a regular file (a device, FIFO, `/dev/stderr`, `/dev/fd/N`)
/// is written in place instead: renaming over it would replace, say, the
/// host's /dev/null with a regular file when husk runs as root.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
        return std::fs::OpenOptions::new().write(true).truncate(true).open(path)?.write_all(data);
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp: PathBuf = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("verdict"),
        std::process::id()
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
