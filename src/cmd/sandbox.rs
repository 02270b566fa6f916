//! `husk create | exec | ls | inspect | rm | renew`: sandboxes that live
//! (src/sandbox/, docs/sandboxes.md).

use crate::cli::{CreateArgs, ExecArgs, InspectArgs, LsArgs, ProcessArgs, RenewArgs, RmArgs};
use crate::host::HostFacts;
use crate::outcome::{EXIT_HUSK_FAILED, ErrorReport, Outcome};
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::exec::ExecRequest;
use crate::sandbox::proto::{Client, Request};
use crate::sandbox::state::{self, Record, Store, now_ms};
use crate::sandbox::supervisor::{CreateRequest, HoldInputs};
use crate::spec::Spec;
use crate::step::Phase;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long `rm` waits for a supervisor to finish the removal.
const RM_PATIENCE: Duration = Duration::from_secs(15);

pub(crate) fn store_of(paths: &Result<Paths, PathsError>) -> Result<Store, SandboxError> {
    let paths = paths.as_ref().map_err(|e| SandboxError::State(e.to_string()))?;
    Store::open(&paths.state)
}

/// Prints an error (and, with --json, its verdict-shaped form); 125.
fn fail(e: &SandboxError, json: bool) -> i32 {
    if json {
        crate::cli::report::json_failure(e.report(), BTreeMap::new(), false);
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
    match create_inner(args, paths) {
        Ok((mut rec, handover)) => {
            let mut out = summary(&rec);
            if let Some((cmd, timeout)) = check {
                match ready_check(paths, &rec, &handover, &cmd, timeout) {
                    Ok(ran) => {
                        rec.state = state::State::Ready;
                        out = summary(&rec);
                        out["ready_check"] = ran;
                    }
                    Err(failed) => {
                        handover.not_ready();
                        let removed = store_of(paths).and_then(|s| destroy(&s, &rec.id, true));
                        return not_ready(*failed, &rec.id, removed, json);
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
        Err(e) => fail(&e, json),
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
        (Some(w), _) => Some(crate::spec::WarmSpec::parse_warm(w).map_err(usage)?),
        (None, Some(s)) => Some(crate::spec::WarmSpec::parse_session(s).map_err(usage)?),
        (None, None) => None,
    };
    if spec.warm.as_ref().is_some_and(|w| w.mode == crate::spec::WarmMode::Session) && args.concurrent {
        return Err(usage(
            "--session runs one call at a time: drop --concurrent, or use --warm for fresh parallel calls".into(),
        ));
    }
    let p = process_args(args.env.clone(), args.env_file.clone(), args.user.clone());
    crate::cli::spec::apply_process_args(&mut spec, &p).map_err(args_err)?;
    crate::redact::set_host(args.secrets.redact);
    let secrets = args.secrets.resolve().map_err(|e| args_err(e.into()))?;
    crate::redact::add(secrets.clone());
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

/// What a sandbox gets besides its spec.
pub(crate) struct Meta {
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ttl: Duration,
    pub max_lifetime: Option<Duration>,
    pub concurrent: bool,
    /// `--ready-cmd`: the sandbox stays CREATING until the check passes.
    pub ready_check: bool,
    /// `--secret-env/--secret-file`: not in the spec (state.json holds
    /// it); the supervisor keeps them in memory.
    pub secrets: Vec<crate::redact::Secret>,
}

/// Starts a sandbox for a complete spec (create's, or a fork's: its
/// source's spec on the snapshot image).
pub(crate) fn create_spec(
    spec: Spec,
    meta: Meta,
    paths: &Result<Paths, PathsError>,
) -> Result<(Record, crate::sandbox::supervisor::Handover), SandboxError> {
    let store = store_of(paths)?;
    // The same choice as `husk run`.
    let state = store.state_dir();
    let mut host = HostFacts::probe();
    if let Ok(p) = paths {
        host.store_root = p.root.clone();
    }
    let selected = crate::backend::select_in(&spec, &host, || Ok(state)).map_err(|e| SandboxError::Setup(e.into()))?;
    let _ = crate::sandbox::gc::sweep(&store);
    let (root, lease) = crate::image::root::root_input(&spec, &host, paths)
        .map_err(|e| SandboxError::Setup(ErrorReport::new(Phase::Root, e)))?;
    let inputs = HoldInputs::of(&root);
    let plan = crate::backend::plan_for(selected.backend.as_ref(), spec, &host, root, crate::plan::InitRole::Hold)
        .map_err(|e| SandboxError::Setup(e.report))?;
    let req = CreateRequest {
        name: meta.name,
        labels: meta.labels,
        ttl: meta.ttl,
        max_lifetime: meta.max_lifetime,
        concurrent: meta.concurrent,
        backend: selected.backend,
        runtime_choice: selected.note,
        ready_check: meta.ready_check,
        secrets: meta.secrets,
    };
    crate::sandbox::supervisor::create(&store, plan, inputs, req, lease)
}

/// How `--ready-cmd` failed: the check's own verdict when it ran.
struct NotReady {
    error: ErrorReport,
    verdict: Option<serde_json::Value>,
}

/// Bytes of the check's output kept (head and tail) for its verdict.
const READY_OUTPUT: u64 = 64 << 10;

/// Runs `--ready-cmd` in the CREATING sandbox (`sh -c CMD`, stdin empty,
/// output captured, killed at `timeout`); on success, promotes the sandbox
/// to READY and returns a summary of the check for create's record.
fn ready_check(
    paths: &Result<Paths, PathsError>,
    rec: &Record,
    handover: &crate::sandbox::supervisor::Handover,
    cmd: &str,
    timeout: Duration,
) -> Result<serde_json::Value, Box<NotReady>> {
    let early = |e: SandboxError| {
        let r = e.report();
        let error = ErrorReport::new(Phase::ReadyCheck, format!("the readiness check could not run: {}", r.message))
            .with_errno(r.errno)
            .with_hint(r.hint);
        Box::new(NotReady { error, verdict: None })
    };
    let store = store_of(paths).map_err(early)?;
    // The check reads no input: husk create's stdin may be a terminal.
    let null = std::fs::File::open("/dev/null")
        .map_err(|e| early(SandboxError::State(format!("opening /dev/null for the check's stdin: {e}"))))?;
    crate::sys::fd::dup_onto(std::os::fd::AsRawFd::as_raw_fd(&null), 0)
        .map_err(|e| early(SandboxError::State(format!("/dev/null as the check's stdin: {e}"))))?;
    let req = ExecRequest {
        target: rec.id.clone(),
        wait: false,
        ready_check: true,
        exec: crate::spec::ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), cmd.into()],
            env: Vec::new(),
            user: None,
            workdir: None,
            timeout: Some(timeout),
            kill_grace: None,
            capture: Some(READY_OUTPUT),
            tty: false,
        },
    };
    let r = crate::sandbox::exec::exec(&store, &req, crate::spawn::now_ns()).map_err(early)?;
    let o = &r.outcome;
    let mut verdict = crate::outcome::Verdict::new(&r.exec_id, r.backend, o, Some(&r.isolation), true);
    verdict.extra = r.extra.clone();
    let verdict = serde_json::to_value(&verdict).unwrap_or_default();
    let passed = o.termination == crate::outcome::Termination::Exited && o.status == Some(0);
    if !passed {
        let how = match (o.termination, o.status) {
            (crate::outcome::Termination::Exited, Some(c)) => format!("exited {c}"),
            (crate::outcome::Termination::WallTimeout, _) => format!("did not end within --ready-timeout {timeout:?}"),
            (crate::outcome::Termination::SetupFailed, _) => {
                format!("could not run: {}", o.error.as_ref().map(|e| e.message.as_str()).unwrap_or("setup failed"))
            }
            (t, _) => format!("ended: {}", serde_json::to_value(t).unwrap_or_default().as_str().unwrap_or("?")),
        };
        let error = ErrorReport::new(Phase::ReadyCheck, format!("the readiness check `{cmd}` {how}")).with_hint(Some(
            "the sandbox was destroyed; the check's verdict (with its output) is in ready_check".into(),
        ));
        return Err(Box::new(NotReady { error, verdict: Some(verdict) }));
    }
    handover.promote().map_err(early)?;
    Ok(json!({"exit_code": 0, "duration_ms": o.duration_ms}))
}

/// Reports a failed readiness check: the sandbox is gone (or, if removing
/// it failed too, says so); 125.
fn not_ready(n: NotReady, id: &str, removed: Result<(), SandboxError>, json: bool) -> i32 {
    let mut extra = BTreeMap::new();
    extra.insert("sandbox_id", json!(id));
    if let Some(v) = &n.verdict {
        extra.insert("ready_check", v.clone());
    }
    if json {
        crate::cli::report::json_failure(n.error.clone(), extra, false);
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
    if let Err(e) = crate::cli::report::check_verdict_file(&mut p) {
        let o = Outcome::setup_failed(e.into());
        return crate::cli::report::report(&o, "", "native", None, &p);
    }
    let early = |e: SandboxError| {
        let o = Outcome::setup_failed(e.report());
        crate::cli::report::report(&o, "", "native", None, &p)
    };
    let mut spec = Spec::new(Vec::new());
    if let Err(e) = crate::cli::spec::apply_process_args(&mut spec, &args.process) {
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
    };
    let store = match store_of(paths) {
        Ok(s) => s,
        Err(e) => return early(e),
    };
    let tap = match crate::cli::report::stream_tap(&p) {
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
        Ok(r) => crate::cli::report::report_with(&r.outcome, &r.exec_id, r.backend, Some(&r.isolation), &p, &r.extra),
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

/// The record without the bulky parts (root's passwd/group, spec), plus
/// what is live about it.
pub fn summary(rec: &Record) -> serde_json::Value {
    let now = now_ms();
    json!({
        "id": rec.id,
        "name": rec.name,
        "labels": rec.labels,
        "state": rec.state,
        "backend": rec.backend,
        "created_ms": rec.created_ms,
        "ttl_ms": rec.ttl_ms,
        "expires_ms": rec.expires_ms,
        "lifetime_ends_ms": rec.lifetime_ends_ms,
        "lease_remaining_ms": rec.expires_ms.saturating_sub(now),
        "concurrent": rec.concurrent,
        "execs": rec.execs,
        "active_execs": rec.active_execs,
        "supervisor_pid": rec.supervisor.map(|p| p.pid),
        "init_pid": rec.init.map(|p| p.pid),
        "namespaces": rec.namespaces,
        "cgroup": rec.cgroup.as_ref().map(|t| t.dirs.iter().map(|d| d.path.display().to_string()).collect::<Vec<_>>()),
        "root": rec.isolation.rootfs,
        "workdir": rec.workdir,
        // The --publish ports as bound (HOSTPORT 0: the one picked), which
        // docs/api.md and docs/network.md promise in the create record.
        "published": rec.published,
        "error": rec.error,
    })
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

/// Environment values (`create --env API_KEY=...`, the image's) become
/// `HIDDEN_VALUE`: `inspect` output lands in logs and CI transcripts. The
/// names stay, so the record still says what is set.
fn hide_env_values(record: &mut serde_json::Value) {
    for part in ["spec", "image"] {
        for pair in record[part]["env"].as_array_mut().into_iter().flatten() {
            match pair {
                serde_json::Value::Array(kv) if kv.len() == 2 => kv[1] = json!(HIDDEN_VALUE),
                serde_json::Value::String(s) => {
                    if let Some((k, _)) = s.split_once('=') {
                        *s = format!("{k}={HIDDEN_VALUE}");
                    }
                }
                _ => {}
            }
        }
    }
}

/// What `inspect` shows instead of an environment value.
pub const HIDDEN_VALUE: &str = "<hidden: husk inspect --show-env>";

/// Destroys one sandbox and waits until nothing of it remains.
pub fn destroy(store: &Store, id: &str, force: bool) -> Result<(), SandboxError> {
    let dir = store.dir(id);
    if let Some(r) = crate::sandbox::gc::sweep_one(store, id) {
        return r.map(|_| ()).map_err(SandboxError::State);
    }
    let rec = store.read(id)?;
    let sup = rec.supervisor;
    // Not asked (no answer): the supervisor may be ending the sandbox on
    // its own right now (its init died); wait for it all the same.
    let _asked = Client::connect(&dir, sup).and_then(|c| c.call(&Request::Destroy)).is_ok();
    let gone = wait_gone(store, id, sup, RM_PATIENCE);
    if gone {
        return Ok(());
    }
    if !force {
        return Err(SandboxError::Supervisor(format!(
            "the supervisor of sandbox {id} (pid {}) did not finish removing it within {}s; `husk rm --force {id}` kills it",
            sup.map(|p| p.pid).unwrap_or(0),
            RM_PATIENCE.as_secs()
        )));
    }
    if let Some(p) = sup
        && let Some(fd) = p.pidfd()
    {
        use std::os::fd::AsFd;
        let _ = crate::sys::process::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
    }
    if wait_gone(store, id, sup, Duration::from_secs(5)) {
        return Ok(());
    }
    Err(SandboxError::Supervisor(format!("sandbox {id} could not be removed; `husk gc` retries")))
}

/// A sandbox whose supervisor was asked to end it by someone else (a
/// pool's retire): true once it is gone, as `destroy` waits.
pub fn wait_removed(store: &Store, id: &str, sup: Option<state::ProcRef>) -> bool {
    wait_gone(store, id, sup, RM_PATIENCE)
}

/// Waits for the supervisor to exit, then sweeps whatever it did not get
/// to (it may have been killed halfway). True when the sandbox is gone.
fn wait_gone(store: &Store, id: &str, sup: Option<state::ProcRef>, limit: Duration) -> bool {
    use std::os::fd::AsFd;
    if let Some(fd) = sup.and_then(|p| p.pidfd()) {
        let mut pfd = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
        let ms = limit.as_millis().min(u16::MAX as u128) as u16;
        let _ = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(ms));
    }
    let end = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if !store.dir(id).exists() {
            return true;
        }
        if let Some(r) = crate::sandbox::gc::sweep_one(store, id) {
            return r.is_ok();
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
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
