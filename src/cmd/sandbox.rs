//! `husk create | exec | ls | inspect | rm | renew`: sandboxes that live
//! (src/sandbox/, docs/sandboxes.md).

use crate::cli::{CreateArgs, ExecArgs, InspectArgs, LsArgs, RenewArgs, RmArgs};
use crate::outcome::{EXIT_HUSK_FAILED, ErrorReport, Outcome};
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::lifecycle::{CreateError, NotReady, Targets, store_of, summary};
use crate::sandbox::state::{self, now_ms};
use crate::step::Phase;
use serde_json::json;
use std::collections::BTreeMap;

/// Prints an error (and, with --json, its verdict-shaped form); 125.
fn fail(e: &SandboxError, json: bool) -> i32 {
    fail_redacted(e, json, &crate::redact::Redaction::none())
}

/// `fail` of a command with secrets or `--redact`.
fn fail_redacted(e: &SandboxError, json: bool, redact: &crate::redact::Redaction) -> i32 {
    if json {
        crate::cli::report::json_failure_redacted(e.report(), BTreeMap::new(), false, redact);
    }
    crate::errln!("husk: {e}");
    if let Some(h) = e.hint() {
        crate::errln!("husk: hint: {h}");
    }
    EXIT_HUSK_FAILED
}

pub fn create(args: CreateArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let json = args.json;
    let opts = match options_of(&args) {
        Ok(o) => o,
        Err(e) => return fail(&e, json),
    };
    // `--redact`: the failure's text (the check's verdict hides the
    // sandbox's secrets itself).
    let redact = opts.process.redaction();
    let created = match crate::sandbox::create(&opts, paths) {
        Ok(c) => c,
        Err(CreateError::NotReady { id, check, removed }) => return not_ready(*check, &id, removed, json, &redact),
        Err(CreateError::Failed(e)) => return fail_redacted(&e, json, &redact),
    };
    if json {
        crate::outln!("{}", created.summary());
    } else {
        crate::outln!("{}", created.record.id);
    }
    if crate::print::stdout_ok() {
        created.confirm();
    } else {
        // Nobody learned the id.
        let id = created.record.id.clone();
        if let Err(e) = store_of(paths).and_then(|s| created.abandon(&s)) {
            crate::errln!("husk: the id of sandbox {id} could not be printed, and removing it failed: {e}");
        }
    }
    0
}

/// `husk create`'s request: the flags, and `--label` by the library's rule.
fn options_of(args: &CreateArgs) -> Result<crate::sandbox::CreateOptions, SandboxError> {
    let mut o = crate::cli::spec::create_options(args).map_err(|e| SandboxError::Setup(e.into()))?;
    for l in &args.label {
        let (k, v) = state::parse_label(l)?;
        o.labels.insert(k, v);
    }
    Ok(o)
}

/// `create --pool` fell back to a cold create (`--pool-fallback`).
pub fn create_cold(mut args: CreateArgs, paths: &Result<Paths, PathsError>) -> i32 {
    args.pool = None;
    create(args, paths)
}

/// Reports a failed readiness check: the sandbox is gone (or, if removing
/// it failed too, says so); 125.
fn not_ready(
    n: NotReady,
    id: &str,
    removed: Result<(), SandboxError>,
    json: bool,
    redact: &crate::redact::Redaction,
) -> i32 {
    let mut extra = BTreeMap::new();
    extra.insert("sandbox_id", json!(id));
    if let Some(v) = &n.verdict {
        extra.insert("ready_check", v.clone());
    }
    if json {
        crate::cli::report::json_failure_redacted(n.error.clone(), extra, false, redact);
    }
    crate::errln!("husk: sandbox {id}: {}", n.error.message);
    if let Some(v) = &n.verdict {
        for stream in ["stdout", "stderr"] {
            if let Some(t) = v[stream]["text"].as_str().filter(|t| !t.is_empty()) {
                crate::errln!("husk: the check's {stream}:\n{}", t.trim_end());
            }
        }
    }
    match removed {
        Ok(()) => crate::errln!("husk: sandbox {id} was destroyed"),
        Err(e) => crate::errln!("husk: removing sandbox {id} failed too: {e}"),
    }
    EXIT_HUSK_FAILED
}

pub fn exec(args: ExecArgs, paths: &Result<Paths, PathsError>, t_start: u64) -> i32 {
    let mut p = args.process.clone();
    // This request's redaction: `--redact`, its own secrets, then the
    // sandbox's (added by the exec before any output is read).
    let redact = p.secrets.redaction();
    if let Err(e) = crate::cli::report::check_verdict_file(&mut p) {
        let o = Outcome::setup_failed(e.into());
        return crate::cli::report::report(&o, "", "native", None, &p, &redact);
    }
    let early = |e: SandboxError| {
        let o = Outcome::setup_failed(e.report());
        crate::cli::report::report(&o, "", "native", None, &p, &redact)
    };
    let mut opts = match crate::cli::spec::exec_options(&args) {
        Ok(o) => o,
        Err(e) => return early(SandboxError::Setup(e.into())),
    };
    if let Some(path) = &args.code {
        match read_code(path) {
            Ok(code) => opts.code = Some(code),
            Err(e) => return early(e),
        }
    }
    let store = match store_of(paths) {
        Ok(s) => s,
        Err(e) => return early(e),
    };
    let tap = match crate::cli::report::stream_tap(&p, &redact) {
        Ok(t) => t,
        Err(e) => return early(SandboxError::Setup(e)),
    };
    let result = crate::sandbox::exec_with(&store, &opts, &redact, t_start, tap.as_ref());
    crate::cli::report::stream_done(tap);
    match result {
        Ok(r) => crate::cli::report::report_with(
            &r.outcome,
            &r.exec_id,
            r.backend,
            Some(&r.isolation),
            &p,
            &r.extra,
            &redact,
        ),
        Err(e) => early(e),
    }
}

/// Most code `--code` takes (the interpreter gets it whole, in memory).
const MAX_CODE: u64 = 64 << 20;

/// The code of `--code FILE|-`: stdin is read to its end.
fn read_code(path: &std::path::Path) -> Result<Vec<u8>, SandboxError> {
    use std::io::Read;
    let mut code = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().lock().take(MAX_CODE + 1).read_to_end(&mut code)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_CODE + 1).read_to_end(&mut code))
    };
    let what = if path.as_os_str() == "-" { "stdin".to_string() } else { path.display().to_string() };
    read.map_err(|e| SandboxError::Usage(format!("--code: reading {what}: {e}")))?;
    if code.len() as u64 > MAX_CODE {
        return Err(SandboxError::Usage(format!("--code: {what} holds more than {} MiB of code", MAX_CODE >> 20)));
    }
    Ok(code)
}

fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn labels_of(args: &[String]) -> Result<Vec<(String, String)>, SandboxError> {
    args.iter().map(|l| state::parse_label(l)).collect()
}

pub fn ls(args: LsArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let run = || -> Result<(), SandboxError> {
        let want = labels_of(&args.label)?;
        let store = store_of(paths)?;
        let recs = crate::sandbox::list(&store, &want);
        // Two tools on one host keep apart by state directory: say which
        // one this listing is of (stderr: stdout stays the table / array).
        // Said after the listing and only when it was delivered: a reader
        // that closed the pipe gets husk ending quietly, as `ls` would.
        let said = || {
            if crate::print::stdout_ok() {
                crate::errln!("husk: sandboxes of state dir {}", store.state_dir().display());
            }
        };
        if args.json {
            crate::outln!("{}", serde_json::Value::Array(recs.iter().map(summary).collect()));
            said();
            return Ok(());
        }
        crate::outln!(
            "{:<12}  {:<20}  {:<10}  {:>7}  {:>8}  {:>5}  LABELS",
            "ID",
            "NAME",
            "STATE",
            "AGE",
            "EXPIRES",
            "EXECS"
        );
        let now = now_ms();
        for r in &recs {
            let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            crate::outln!(
                "{:<12}  {:<20}  {:<10}  {:>7}  {:>8}  {:>5}  {}",
                r.id,
                r.name.as_deref().unwrap_or("-"),
                r.state.name(),
                human_ms(now.saturating_sub(r.created_ms)),
                human_ms(r.expires_ms.saturating_sub(now)),
                r.execs,
                labels.join(",")
            );
        }
        said();
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => fail(&e, args.json),
    }
}

pub fn inspect(args: InspectArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let run = || -> Result<serde_json::Value, SandboxError> {
        crate::sandbox::inspect(&store_of(paths)?, &args.sandbox, args.show_env)
    };
    match run() {
        Ok(v) => {
            crate::outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            0
        }
        Err(e) => fail(&e, true),
    }
}

pub fn rm(args: RmArgs, paths: &Result<Paths, PathsError>) -> i32 {
    let run = || -> Result<(Vec<String>, Vec<String>, std::path::PathBuf), SandboxError> {
        let store = store_of(paths)?;
        let targets = Targets { sandboxes: args.sandboxes.clone(), labels: labels_of(&args.label)?, all: args.all };
        let r = crate::sandbox::remove(&store, &targets, args.force)?;
        Ok((r.removed, r.errors, store.state_dir()))
    };
    match run() {
        Ok((removed, errors, state_dir)) => {
            if args.json && !errors.is_empty() {
                // Some could not be removed: a failure, in the one failure
                // shape, still saying which were.
                let mut extra = BTreeMap::new();
                extra.insert("removed", json!(removed));
                extra.insert("errors", json!(errors));
                extra.insert("state_dir", json!(state_dir.display().to_string()));
                let e = ErrorReport::new(Phase::Sandbox, errors.join("; "));
                crate::cli::report::json_failure(e, extra, false);
            } else if args.json {
                crate::outln!(
                    "{}",
                    json!({"removed": removed, "errors": errors, "state_dir": state_dir.display().to_string()})
                );
            } else {
                if args.all || !args.label.is_empty() {
                    // --all / --label act on every sandbox of one state
                    // directory: name it, so a wrong one is noticed.
                    crate::errln!("husk: removed {} sandbox(es) of state dir {}", removed.len(), state_dir.display());
                }
                for id in &removed {
                    crate::outln!("{id}");
                }
            }
            for e in &errors {
                crate::errln!("husk: {e}");
            }
            if errors.is_empty() { 0 } else { EXIT_HUSK_FAILED }
        }
        Err(e) => fail(&e, args.json),
    }
}

pub fn renew(args: RenewArgs, paths: &Result<Paths, PathsError>) -> i32 {
    match store_of(paths).and_then(|s| crate::sandbox::renew(&s, &args.sandbox, args.ttl)) {
        Ok(r) => {
            if args.json {
                crate::outln!("{}", json!(r));
            } else {
                crate::outln!("{} expires in {}", r.id, human_ms(r.lease_remaining_ms));
            }
            0
        }
        Err(e) => fail(&e, args.json),
    }
}
