//! How a command's outcome reaches its caller: the verdict on stdout
//! (`--json`) or in `--verdict-file`, and the failure explained on stderr.

use super::ProcessArgs;
use crate::isolation::Isolation;
use crate::outcome::{EXIT_HUSK_FAILED, ErrorReport, Outcome, Termination, Verdict};
use crate::redact::Redaction;
use crate::step::Phase;
use nix::errno::Errno;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Prints the verdict / writes the verdict file / explains a failure;
/// `redact` is the command's (`SecretArgs::redaction`).
pub fn report(
    outcome: &Outcome,
    id: &str,
    backend: &str,
    isolation: Option<&Isolation>,
    p: &ProcessArgs,
    redact: &Redaction,
) -> i32 {
    report_with(outcome, id, backend, isolation, p, &Default::default(), redact)
}

/// `report`, with verdict keys beyond `run`'s (`husk exec`: the sandbox).
pub fn report_with(
    outcome: &Outcome,
    id: &str,
    backend: &str,
    isolation: Option<&Isolation>,
    p: &ProcessArgs,
    extra: &std::collections::BTreeMap<&'static str, serde_json::Value>,
    redact: &Redaction,
) -> i32 {
    let mut code = outcome.exit_code();
    if let Some(path) = &p.verdict_file {
        let mut v = Verdict::new(id, backend, outcome, isolation, false, redact);
        v.extra = extra.clone();
        if let Err(e) = write_atomic(path, &serde_json::to_vec_pretty(&v).unwrap_or_default()) {
            // The caller reads the verdict from there: without it the run's
            // result is lost, whatever the command did.
            crate::errln!("husk: writing --verdict-file {}: {e}; the verdict is lost", path.display());
            code = EXIT_HUSK_FAILED;
        }
    }
    if p.json || p.json_stream {
        // A failed write makes the exit 125 (print::finish).
        let mut v = Verdict::new(id, backend, outcome, isolation, true, redact);
        v.extra = extra.clone();
        if p.json_stream {
            crate::print::json_line(&VerdictEvent { verdict: v });
        } else {
            crate::print::json_line(&v);
        }
    }
    let oom_killed = outcome.termination == Termination::OomKilled;
    if let Some(line) = crate::cgroup::explain(outcome.limits.as_ref(), outcome.resources.as_ref(), oom_killed) {
        crate::errln!("husk: {line}");
    }
    // A timeout is husk's doing and otherwise silent (the command's own
    // output just stops): say so, as the OOM kill above is said. The
    // verdict already carries it under --json / --json-stream.
    if outcome.termination == Termination::WallTimeout && !(p.json || p.json_stream) {
        match p.timeout {
            Some(t) => crate::errln!("husk: timed out after {} (exit {code})", show_duration(t)),
            None => crate::errln!("husk: the sandbox's lifetime ran out (exit {code})"),
        }
        // Why, when the command never started (it waited for a freeze).
        if let Some(e) = &outcome.error {
            crate::errln!("husk: {}", e.message);
        }
    }
    if outcome.termination == Termination::SetupFailed
        && let Some(e) = &outcome.error
    {
        crate::errln!("husk: {}", e.message);
        if let Some(h) = &e.hint {
            crate::errln!("husk: hint: {h}");
        }
    }
    code
}

/// A duration as `--timeout` takes it: 2m, 30s, 1500ms.
fn show_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match (ms % 1000, d.as_secs()) {
        (0, s) if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        (0, s) => format!("{s}s"),
        _ => format!("{ms}ms"),
    }
}

/// A command's failure as its `--json` output: one verdict-shaped object,
/// whatever the command (`termination: "setup_failed"`, `error{step,
/// errno, message, hint}`, exit code 125 in `exit_code`), so a caller parses
/// one failure shape everywhere; `extra` adds the command's own keys (a
/// partial `rm`'s `removed`). With `stream` it is `--json-stream`'s last
/// (here: only) event. For a command without secrets or `--redact`.
pub fn json_failure(error: ErrorReport, extra: BTreeMap<&'static str, serde_json::Value>, stream: bool) {
    json_failure_redacted(error, extra, stream, &Redaction::none())
}

/// `json_failure` of a command that has secrets or `--redact`.
pub fn json_failure_redacted(
    error: ErrorReport,
    extra: BTreeMap<&'static str, serde_json::Value>,
    stream: bool,
    redact: &Redaction,
) {
    let outcome = Outcome::setup_failed(error);
    let mut v = Verdict::new("", "none", &outcome, None, true, redact);
    v.extra = extra;
    if stream {
        crate::print::json_line(&VerdictEvent { verdict: v });
    } else {
        crate::print::json_line(&v);
    }
}

/// How a command line clap refused is answered on stdout when it asked for
/// JSON (`--json` or `--json-stream` before any `--`): the usage error as a
/// verdict-shaped failure (step `arguments`). None: no JSON was asked for.
pub fn usage_failure(args: &[std::ffi::OsString], e: &clap::Error, habit: Option<&str>) -> Option<()> {
    let asked = args.iter().skip(1).take_while(|a| *a != "--");
    let stream = asked.clone().any(|a| a == "--json-stream");
    if !stream && !asked.clone().any(|a| a == "--json") {
        return None;
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines.next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_string();
    let rest: Vec<&str> = lines.collect();
    let hint = habit.map(str::to_string).or_else(|| (!rest.is_empty()).then(|| rest.join(" ")));
    json_failure(ErrorReport::new(Phase::Arguments, message).with_hint(hint), BTreeMap::new(), stream);
    Some(())
}

/// The last event of `--json-stream` (docs/stream.schema.json).
#[derive(serde::Serialize)]
struct VerdictEvent<'a> {
    verdict: Verdict<'a>,
}

/// `--json-stream`'s events go to stdout, hiding what `redact` hides;
/// `None` without it. A stdout husk cannot write to is refused before
/// anything runs.
pub fn stream_tap(p: &ProcessArgs, redact: &Redaction) -> Result<Option<crate::stream::Tap>, ErrorReport> {
    if !p.json_stream {
        return Ok(None);
    }
    crate::stream::Tap::stdout(redact).map(Some).map_err(|e| {
        ErrorReport::new(Phase::Stdio, format!("--json-stream: duplicating stdout: {e}"))
            .with_errno(crate::step::io_errno(&e))
    })
}

/// After a streamed command: a failed event write counts as a failed
/// stdout write (a closed pipe ends husk by SIGPIPE, anything else is 125).
pub fn stream_done(tap: Option<crate::stream::Tap>) {
    if let Some(e) = tap.and_then(|t| t.take_error()) {
        crate::print::stdout_failed(&e);
    }
}

/// Checks `--verdict-file` before anything runs: a verdict that cannot be
/// written at the end means a run whose result is lost, so a path in a
/// missing or unwritable directory, a directory, or a link to nothing is
/// refused up front. On failure the option is cleared (the early verdict
/// cannot go there either).
pub fn check_verdict_file(p: &mut ProcessArgs) -> Result<(), VerdictFileError> {
    let Some(path) = &p.verdict_file else { return Ok(()) };
    let r = verdict_target(path).map_err(|why| VerdictFileError { path: path.clone(), why });
    if r.is_err() {
        p.verdict_file = None;
    }
    r
}

/// A `--verdict-file` the verdict could not be written to.
#[derive(Debug, thiserror::Error)]
#[error("--verdict-file {}: {why}", path.display())]
pub struct VerdictFileError {
    pub path: PathBuf,
    pub why: VerdictTarget,
}

#[derive(Debug, thiserror::Error)]
pub enum VerdictTarget {
    #[error("is a directory; give a file path, e.g. DIR/verdict.json")]
    IsDir,
    #[error("names a directory; give a file path, e.g. DIR/verdict.json")]
    NamesDir,
    #[error("not writable: {}: {errno:?} ({})", path.display(), errno.desc())]
    NotWritable { path: PathBuf, errno: Errno },
    #[error("{0} (a link to nothing?)")]
    Dangling(std::io::Error),
    #[error("{0}")]
    Io(std::io::Error),
    #[error("its directory is not writable: {}: {errno:?} ({})", path.display(), errno.desc())]
    DirNotWritable { path: PathBuf, errno: Errno },
    #[error("{} is not a directory", .0.display())]
    NotDir(PathBuf),
    #[error("directory {}: {source}; create it first", path.display())]
    NoDir { path: PathBuf, source: std::io::Error },
}

impl VerdictFileError {
    pub fn errno(&self) -> Option<Errno> {
        match &self.why {
            VerdictTarget::NotWritable { errno, .. } | VerdictTarget::DirNotWritable { errno, .. } => Some(*errno),
            VerdictTarget::Dangling(e) | VerdictTarget::Io(e) | VerdictTarget::NoDir { source: e, .. } => {
                crate::step::io_errno(e)
            }
            _ => None,
        }
    }
}

/// A refused `--verdict-file`, as the verdict reports it (step `arguments`).
impl From<VerdictFileError> for ErrorReport {
    fn from(e: VerdictFileError) -> Self {
        ErrorReport::new(Phase::Arguments, e.to_string()).with_errno(e.errno())
    }
}

fn verdict_target(path: &Path) -> Result<(), VerdictTarget> {
    use nix::unistd::{AccessFlags, access};
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => return Err(VerdictTarget::IsDir),
        // Anything but a regular file is written in place (write_atomic):
        // a FIFO, a device, /dev/stderr; through a link, what it names.
        Ok(m) if !m.is_file() => {
            return match std::fs::metadata(path) {
                Ok(t) if t.is_dir() => Err(VerdictTarget::NamesDir),
                Ok(_) => access(path, AccessFlags::W_OK)
                    .map_err(|errno| VerdictTarget::NotWritable { path: path.to_path_buf(), errno }),
                Err(e) => Err(VerdictTarget::Dangling(e)),
            };
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(VerdictTarget::Io(e)),
    }
    // A regular file is replaced by a rename from its directory.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => access(dir, AccessFlags::W_OK | AccessFlags::X_OK)
            .map_err(|errno| VerdictTarget::DirNotWritable { path: dir.to_path_buf(), errno }),
        Ok(_) => Err(VerdictTarget::NotDir(dir.to_path_buf())),
        Err(source) => Err(VerdictTarget::NoDir { path: dir.to_path_buf(), source }),
    }
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
