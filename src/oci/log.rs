//! Diagnostics of the runtime mode. The caller (dockerd, the containerd
//! shim) gives `--log FILE --log-format json` and reads the last
//! `"level":"error"` line of that file for the message it shows the user,
//! so an error goes there as `{"level":"error","msg":...,"time":...}`, and
//! also to stderr, in runc's form (see `error`). Nothing else is ever printed: stdout and
//! stderr may be the container's own pipes (go-runc hands them to `create`).

use super::LogFormat;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

struct Sink {
    path: Option<PathBuf>,
    format: LogFormat,
    debug: bool,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sets where diagnostics go; called once, before any command runs.
pub fn init(path: Option<&Path>, format: LogFormat, debug: bool) {
    let _ = SINK.set(Sink { path: path.map(Path::to_path_buf), format, debug });
}

/// The --log format (text when none was set).
pub fn format() -> LogFormat {
    SINK.get().map(|s| s.format).unwrap_or(LogFormat::Text)
}

/// The --log file, for the container's init to keep (it reports failures
/// after `create` returned there).
pub fn path() -> Option<PathBuf> {
    SINK.get().and_then(|s| s.path.clone())
}

/// One line in the runtime log's format, for `level` and `msg`.
pub fn line(format: LogFormat, level: &str, msg: &str) -> String {
    let time = rfc3339_now();
    match format {
        LogFormat::Json => format!("{}\n", serde_json::json!({"level": level, "msg": msg, "time": time})),
        LogFormat::Text => format!("time=\"{time}\" level={level} msg={msg:?}\n"),
    }
}

fn append(level: &str, msg: &str) {
    let Some(sink) = SINK.get() else { return };
    let Some(path) = &sink.path else { return };
    // One write(2) per line with O_APPEND, so lines of the init and the
    // caller never interleave.
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line(sink.format, level, msg).as_bytes());
    }
}

/// An error: the log, and stderr as runc writes it: with `--log FILE` the
/// bare message, without one the log line itself
/// (`time="..." level=error msg="..."`, or the JSON line with
/// `--log-format json`), which tools scan for "level=error".
pub fn error(msg: &str) {
    append("error", msg);
    let to_file = SINK.get().is_some_and(|s| s.path.is_some());
    let text = if to_file { format!("{msg}\n") } else { line(format(), "error", msg) };
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// A warning: the log only.
pub fn warn(msg: &str) {
    append("warning", msg);
}

/// With --debug only, the log only.
pub fn debug(msg: &str) {
    if SINK.get().is_some_and(|s| s.debug) {
        append("debug", msg);
    }
}

/// Now as RFC 3339 with nanoseconds, UTC (runc's `created` and log times).
pub fn rfc3339_now() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_nanos())
}

pub fn rfc3339(secs: i64, nanos: u32) -> String {
    let (y, m, d) = crate::units::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_level_msg_and_time() {
        let l = line(LogFormat::Json, "error", "container x does not exist");
        assert!(l.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(l.trim_end()).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "container x does not exist");
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(rfc3339(86_400 + 3661, 5), "1970-01-02T01:01:01.000000005Z");
    }
}
