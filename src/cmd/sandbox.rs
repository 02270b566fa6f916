//! `husk create | exec | ls | inspect | rm | renew`: sandboxes that live
//! (src/sandbox/, docs/sandboxes.md).

use crate::cli::{CreateArgs, ExecArgs, InspectArgs, LsArgs, ProcessArgs, RenewArgs, RmArgs};
use crate::outcome::{EXIT_HUSK_FAILED, ErrorReport, Outcome};
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::exec::ExecRequest;
use crate::sandbox::lifecycle::{
    Meta, NotReady, create_spec, destroy, hide_env_values, ready_check, store_of, summary,
};
use crate::sandbox::proto::{Client, Request};
use crate::sandbox::state::{self, Record, now_ms};
use crate::spec::Spec;
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
    if args.pool.is_some() {
        return create_from_pool(args, paths);
    }
    let json = args.json;
    let check = args.ready_cmd.clone().map(|cmd| (cmd, args.ready_timeout));
    // `--redact`; the ready check's exec adds the sandbox's secrets.
    let redact = args.secrets.redaction();
    match create_inner(args, paths) {
        Ok((mut rec, handover)) => {
            let mut out = summary(&rec);
            if let Some((cmd, timeout)) = check {
                match ready_check(paths, &rec, &handover, &cmd, timeout, &redact) {
                    Ok(ran) => {
                        rec.state = state::State::Ready;
                        out = summary(&rec);
                        out["ready_check"] = ran;
                    }
                    Err(failed) => {
                        handover.not_ready();
                        let removed = store_of(paths).and_then(|s| destroy(&s, &rec.id, true));
                        return not_ready(*failed, &rec.id, removed, json, &redact);
                    }
                }
            }
            if json {
                crate::outln!("{out}");
            } else {
                crate::outln!("{}", rec.id);
            }
            if crate::print::stdout_ok() {
                handover.confirm();
            } else {
                drop(handover);
                // Nobody learned the id: the sandbox would idle, unreachable,
                // until its lease ran out.
                let removed = store_of(paths).and_then(|s| destroy(&s, &rec.id, true));
                if let Err(e) = removed {
                    crate::errln!(
                        "husk: the id of sandbox {} could not be printed, and removing it failed: {e}",
                        rec.id
                    );
                }
            }
            0
        }
        Err(e) => fail_redacted(&e, json, &redact),
    }
}

/// `create --pool`: claimed through husk serve (cmd/claim.rs), or cold
/// with --pool-fallback when there is no serve or no such pool.
fn create_from_pool(mut args: CreateArgs, paths: &Result<Paths, PathsError>) -> i32 {
    use super::claim::Failed;
    match super::claim::claim(&args, paths) {
        Ok(v) => {
            if args.json {
                crate::outln!("{v}");
            } else {
                crate::outln!("{}", v["id"].as_str().unwrap_or(""));
            }
            // As a cold create: a sandbox whose id reached nobody goes.
            if !crate::print::stdout_ok()
                && let Some(id) = v["id"].as_str()
            {
                let _ = store_of(paths).and_then(|s| destroy(&s, id, true));
            }
            0
        }
        Err(Failed::NoPool(e)) if args.pool_fallback => {
            crate::errln!("husk: {e}; creating the sandbox cold (--pool-fallback)");
            args.pool = None;
            create(args, paths)
        }
        Err(Failed::NoPool(e) | Failed::Error(e)) => fail(&e, args.json),
    }
}

pub(crate) fn create_inner(
    args: CreateArgs,
    paths: &Result<Paths, PathsError>,
) -> Result<(Record, crate::sandbox::supervisor::Handover), SandboxError> {
    let usage = SandboxError::Usage;
    if args.ttl.is_zero() {
        return Err(usage("--ttl must be longer than 0 (e.g. 30s, 10m, 2h)".into()));
    }
    let mut labels = BTreeMap::new();
    for l in &args.label {
        let (k, v) = state::parse_label(l)?;
        labels.insert(k, v);
    }
    if let Some(n) = &args.name {
        state::check_name(n)?;
    }
    let mut spec = Spec::new(Vec::new());
    let args_err = |e: crate::cli::spec::ArgsError| SandboxError::Setup(e.into());
    crate::cli::spec::apply_sandbox_args(&mut spec, &args.sandbox).map_err(args_err)?;
    spec.warm = match (&args.warm, &args.session) {
        (Some(w), _) => Some(crate::spec::WarmSpec::parse_warm(w).map_err(|e| usage(e.to_string()))?),
        (None, Some(s)) => Some(crate::spec::WarmSpec::parse_session(s).map_err(|e| usage(e.to_string()))?),
        (None, None) => None,
    };
    if spec.warm.as_ref().is_some_and(|w| w.mode == crate::spec::WarmMode::Session) && args.concurrent {
        return Err(usage(
            "--session runs one call at a time: drop --concurrent, or use --warm for fresh parallel calls".into(),
        ));
    }
    let p = process_args(args.env.clone(), args.env_file.clone(), args.user.clone());
    // No secrets here (ProcessArgs' are empty): create's are the sandbox's.
    crate::cli::spec::apply_process_args(&mut spec, &p, &crate::redact::Redaction::none()).map_err(args_err)?;
    let secrets = args.secrets.resolve().map_err(|e| args_err(e.into()))?;
    let meta = Meta {
        name: args.name,
        labels,
        ttl: args.ttl,
        max_lifetime: args.max_lifetime,
        concurrent: args.concurrent,
        ready_check: args.ready_cmd.is_some(),
        secrets,
    };
    create_spec(spec, meta, paths)
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

fn process_args(env: Vec<String>, env_file: Vec<std::path::PathBuf>, user: Option<String>) -> ProcessArgs {
    ProcessArgs {
        timeout: None,
        kill_grace: None,
        json: false,
        json_stream: false,
        verdict_file: None,
        output_limit: crate::spec::DEFAULT_OUTPUT_LIMIT,
        env,
        env_file,
        user,
        tty: false,
        secrets: Default::default(),
    }
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
    let mut spec = Spec::new(Vec::new());
    if let Err(e) = crate::cli::spec::apply_process_args(&mut spec, &args.process, &redact) {
        return early(SandboxError::Setup(e.into()));
    }
    let req = ExecRequest {
        target: args.sandbox.clone(),
        wait: args.wait,
        ready_check: false,
        exec: crate::spec::ExecSpec {
            argv: args.command.clone(),
            env: spec.env,
            user: args.process.user.clone(),
            workdir: args.workdir.clone(),
            timeout: args.process.timeout,
            kill_grace: args.process.kill_grace,
            capture: (args.process.json || args.process.json_stream).then_some(args.process.output_limit),
            tty: args.process.tty,
        },
        redact: redact.clone(),
    };
    let store = match store_of(paths) {
        Ok(s) => s,
        Err(e) => return early(e),
    };
    let tap = match crate::cli::report::stream_tap(&p, &redact) {
        Ok(t) => t,
        Err(e) => return early(SandboxError::Setup(e)),
    };
    let result = match &args.code {
        Some(path) => read_code(path).and_then(|code| {
            crate::sandbox::exec::exec_code(&store, &req, &code, args.language.as_deref(), t_start, tap.as_ref())
        }),
        None => crate::sandbox::exec::exec_to(&store, &req, t_start, tap.as_ref()),
    };
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
        let recs: Vec<Record> =
            crate::sandbox::registry::records(&store).into_iter().filter(|r| state::matches(r, &want)).collect();
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
        let store = store_of(paths)?;
        let id = crate::sandbox::registry::resolve(&store, &args.sandbox)?;
        let rec = crate::sandbox::registry::current(&store, &id)?;
        // Its record would still say "ready": the sandbox died with its
        // supervisor.
        if !state::supervised(&store.dir(&id)) {
            return Err(crate::sandbox::registry::swept(&store, id));
        }
        let mut v = serde_json::to_value(&rec).map_err(|e| SandboxError::State(e.to_string()))?;
        if !args.show_env {
            hide_env_values(&mut v);
        }
        v["supervisor_alive"] = json!(state::supervised(&store.dir(&id)));
        v["lease_remaining_ms"] = json!(rec.expires_ms.saturating_sub(now_ms()));
        Ok(v)
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
        let want = labels_of(&args.label)?;
        if args.sandboxes.is_empty() && want.is_empty() && !args.all {
            return Err(SandboxError::Usage(
                "say which sandboxes: husk rm ID|NAME..., --label KEY=VALUE, or --all".into(),
            ));
        }
        let mut ids = Vec::new();
        let mut errors = Vec::new();
        for t in &args.sandboxes {
            match crate::sandbox::registry::resolve(&store, t) {
                Ok(id) => ids.push(id),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if args.all || !want.is_empty() {
            ids.extend(
                crate::sandbox::registry::records(&store)
                    .into_iter()
                    .filter(|r| state::matches(r, &want))
                    .map(|r| r.id),
            );
        }
        ids.sort();
        ids.dedup();
        let mut removed = Vec::new();
        for id in ids {
            match destroy(&store, &id, args.force) {
                Ok(()) => removed.push(id),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Ok((removed, errors, store.state_dir()))
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
    let run = || -> Result<(String, crate::sandbox::proto::Reply), SandboxError> {
        if args.ttl.is_some_and(|t| t.is_zero()) {
            return Err(SandboxError::Usage("--ttl must be longer than 0".into()));
        }
        let store = store_of(paths)?;
        let rec = crate::sandbox::registry::live_record(&store, &args.sandbox)?;
        let c = Client::connect(&store.dir(&rec.id), rec.supervisor)?;
        let (reply, _) = c.call(&Request::Renew { ttl_ms: args.ttl.map(|t| t.as_millis() as u64) })?;
        if !reply.ok {
            return Err(SandboxError::Supervisor(reply.error.unwrap_or_else(|| "renew refused".into())));
        }
        Ok((rec.id, reply))
    };
    match run() {
        Ok((id, r)) => {
            let left = r.expires_ms.saturating_sub(now_ms());
            if args.json {
                crate::outln!(
                    "{}",
                    json!({"id": id, "expires_ms": r.expires_ms, "ttl_ms": r.ttl_ms, "lease_remaining_ms": left})
                );
            } else {
                crate::outln!("{id} expires in {}", human_ms(left));
            }
            0
        }
        Err(e) => fail(&e, args.json),
    }
}
