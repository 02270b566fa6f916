//! The sandbox library's lifecycle calls: start a sandbox for a spec, run
//! its readiness check, summarise, destroy and wait. Every door (the CLI,
//! `husk serve`, `husk mcp`, fork, pools) calls these; none prints.

use crate::outcome::ErrorReport;
use crate::paths::{Paths, PathsError};
use crate::sandbox::SandboxError;
use crate::sandbox::exec::ExecRequest;
use crate::sandbox::proto::{Client, Request};
use crate::sandbox::state::{self, Record, Store, now_ms};
use crate::sandbox::supervisor::CreateRequest;
use crate::spec::Spec;
use crate::step::Phase;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long `rm` waits for a supervisor to finish the removal.
const RM_PATIENCE: Duration = Duration::from_secs(15);

pub fn store_of(paths: &Result<Paths, PathsError>) -> Result<Store, SandboxError> {
    let paths = paths.as_ref().map_err(|e| SandboxError::State(e.to_string()))?;
    Store::open(&paths.state)
}

/// What a sandbox gets besides its spec.
pub struct Meta {
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
pub fn create_spec(
    spec: Spec,
    meta: Meta,
    paths: &Result<Paths, PathsError>,
) -> Result<(Record, crate::sandbox::supervisor::Handover), SandboxError> {
    begin_spec(spec, meta, paths, None)?.wait()
}

/// `create_spec` up to the supervisor's start (`supervisor::begin`);
/// `restore`: the sandbox's processes are not started but restored from
/// the checkpoint image in that directory (`husk fork --memory`: its
/// source's spec and memory).
pub fn begin_spec(
    spec: Spec,
    meta: Meta,
    paths: &Result<Paths, PathsError>,
    restore: Option<std::path::PathBuf>,
) -> Result<crate::sandbox::supervisor::Starting, SandboxError> {
    let store = store_of(paths)?;
    let _ = crate::sandbox::gc::sweep(&store);
    let state = store.state_dir();
    let host = super::prepare::host_for(paths);
    let p = super::prepare::prepare(spec, &host, paths, || Ok(state), crate::plan::InitRole::Hold)
        .map_err(|e| SandboxError::Setup(e.report))?;
    let crate::sandbox::prepare::Prepared { backend, note, plan, lease, inputs } = p;
    let req = CreateRequest {
        name: meta.name,
        labels: meta.labels,
        ttl: meta.ttl,
        max_lifetime: meta.max_lifetime,
        concurrent: meta.concurrent,
        backend,
        runtime_choice: note,
        ready_check: meta.ready_check,
        secrets: meta.secrets,
        restore,
    };
    crate::sandbox::supervisor::begin(&store, plan, inputs, req, lease)
}

/// How `--ready-cmd` failed: the check's own verdict when it ran.
pub struct NotReady {
    pub error: ErrorReport,
    pub verdict: Option<serde_json::Value>,
}

/// Bytes of the check's output kept (head and tail) for its verdict.
const READY_OUTPUT: u64 = 64 << 10;

/// Runs `--ready-cmd` in the CREATING sandbox (`sh -c CMD`, stdin empty,
/// output captured, killed at `timeout`); on success, promotes the sandbox
/// to READY and returns a summary of the check for create's record.
pub fn ready_check(
    paths: &Result<Paths, PathsError>,
    rec: &Record,
    handover: &crate::sandbox::supervisor::Handover,
    cmd: &str,
    timeout: Duration,
    redact: &crate::redact::Redaction,
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
        redact: redact.clone(),
    };
    let r = crate::sandbox::exec::exec(&store, &req, crate::spawn::now_ns()).map_err(early)?;
    let o = &r.outcome;
    let mut verdict = crate::outcome::Verdict::new(&r.exec_id, r.backend, o, Some(&r.isolation), true, redact);
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

/// Environment values (`create --env API_KEY=...`, the image's) become
/// `HIDDEN_VALUE`: `inspect` output lands in logs and CI transcripts. The
/// names stay, so the record still says what is set.
pub fn hide_env_values(record: &mut serde_json::Value) {
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

/// A sandbox `create` made (READY, its readiness check passed): the caller
/// hands its id over (prints it, answers it), then `confirm`s; until then,
/// and if the caller dies first, its supervisor tears it down (nobody could
/// reach it).
pub struct Created {
    pub record: Record,
    /// The readiness check's summary (`--ready-cmd`), for the record.
    pub ready_check: Option<serde_json::Value>,
    handover: crate::sandbox::supervisor::Handover,
}

impl Created {
    /// The record as create prints it (`summary`, plus `ready_check`).
    pub fn summary(&self) -> serde_json::Value {
        let mut v = summary(&self.record);
        if let Some(r) = &self.ready_check {
            v["ready_check"] = r.clone();
        }
        v
    }

    /// The id reached the caller: the sandbox is theirs.
    pub fn confirm(self) {
        self.handover.confirm();
    }

    /// The id reached nobody: the sandbox would idle, unreachable, until
    /// its lease ran out; it goes now.
    pub fn abandon(self, store: &Store) -> Result<(), SandboxError> {
        let id = self.record.id.clone();
        drop(self.handover);
        destroy(store, &id, true)
    }
}

/// Why `create` made no sandbox.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error(transparent)]
    Failed(#[from] SandboxError),
    /// The sandbox started and its readiness check failed: it was
    /// destroyed (or, if that failed too, `removed` says so).
    #[error("sandbox {id}: {}", .check.error.message)]
    NotReady { id: String, check: Box<NotReady>, removed: Result<(), SandboxError> },
}

impl std::fmt::Debug for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotReady").field("error", &self.error).finish_non_exhaustive()
    }
}

impl CreateError {
    /// The failure as the verdict's `error` reports it.
    pub fn report(&self) -> ErrorReport {
        match self {
            CreateError::Failed(e) => e.report(),
            CreateError::NotReady { check, .. } => check.error.clone(),
        }
    }

    /// The failure object's keys beyond the verdict's (`sandbox_id`, the
    /// check's own verdict as `ready_check`).
    pub fn extra(&self) -> BTreeMap<&'static str, serde_json::Value> {
        let mut extra = BTreeMap::new();
        if let CreateError::NotReady { id, check, .. } = self {
            extra.insert("sandbox_id", json!(id));
            if let Some(v) = &check.verdict {
                extra.insert("ready_check", v.clone());
            }
        }
        extra
    }
}

/// Names and labels a request may give: the CLI's rules for every door.
fn check_meta(o: &crate::request::CreateOptions) -> Result<(), SandboxError> {
    if let Some(n) = &o.name {
        state::check_name(n)?;
    }
    for k in o.labels.keys() {
        if k.is_empty() || k.contains('=') {
            return Err(SandboxError::Usage(format!(
                "invalid --label {k:?}: expected KEY=VALUE (KEY non-empty, without '='), e.g. task=build-42"
            )));
        }
    }
    Ok(())
}

/// `husk create`: lowers the request (`request::lower::create_spec`), starts
/// the sandbox (`create_spec`) and runs its readiness check. Prints
/// nothing; the caller hands the id over and confirms (`Created`).
///
/// Forks the sandbox's supervisor: the calling process must have one
/// thread, and the supervisor keeps every fd the caller has open (a server
/// creates from a child of its own that holds none of its connections).
pub fn create(o: &crate::request::CreateOptions, paths: &Result<Paths, PathsError>) -> Result<Created, CreateError> {
    if o.ttl.is_zero() {
        return Err(SandboxError::Usage("--ttl must be longer than 0 (e.g. 30s, 10m, 2h)".into()).into());
    }
    check_meta(o)?;
    let (spec, secrets) = crate::request::lower::create_spec(o).map_err(|e| match e {
        crate::request::lower::CreateRefused::Usage(m) => SandboxError::Usage(m),
        crate::request::lower::CreateRefused::Args(a) => SandboxError::Setup(a.into()),
    })?;
    let meta = Meta {
        name: o.name.clone(),
        labels: o.labels.clone(),
        ttl: o.ttl,
        max_lifetime: o.max_lifetime,
        concurrent: o.concurrent,
        ready_check: o.ready_cmd.is_some(),
        secrets,
    };
    let (mut rec, handover) = create_spec(spec, meta, paths)?;
    let mut ran = None;
    if let Some(cmd) = &o.ready_cmd {
        match ready_check(paths, &rec, &handover, cmd, o.ready_timeout, &o.process.redaction()) {
            Ok(v) => {
                rec.state = state::State::Ready;
                ran = Some(v);
            }
            Err(check) => {
                handover.not_ready();
                let removed = store_of(paths).and_then(|s| destroy(&s, &rec.id, true));
                return Err(CreateError::NotReady { id: rec.id, check, removed });
            }
        }
    }
    Ok(Created { record: rec, ready_check: ran, handover })
}

/// `husk ls`: the sandboxes of the store carrying every label of `want`.
pub fn list(store: &Store, want: &[(String, String)]) -> Vec<Record> {
    crate::sandbox::registry::records(store).into_iter().filter(|r| state::matches(r, want)).collect()
}

/// `husk inspect`: a live sandbox's record (environment values hidden
/// unless `show_env`), with its supervisor's liveness and lease left.
pub fn inspect(store: &Store, target: &str, show_env: bool) -> Result<serde_json::Value, SandboxError> {
    let id = crate::sandbox::registry::resolve(store, target)?;
    let rec = crate::sandbox::registry::current(store, &id)?;
    // Its record would still say "ready": the sandbox died with its
    // supervisor.
    if !state::supervised(&store.dir(&id)) {
        return Err(crate::sandbox::registry::swept(store, id));
    }
    let mut v = serde_json::to_value(&rec).map_err(|e| SandboxError::State(e.to_string()))?;
    if !show_env {
        hide_env_values(&mut v);
    }
    v["supervisor_alive"] = json!(state::supervised(&store.dir(&id)));
    v["lease_remaining_ms"] = json!(rec.expires_ms.saturating_sub(now_ms()));
    Ok(v)
}

/// Which sandboxes `remove` ends.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// Ids, names or unique id prefixes.
    pub sandboxes: Vec<String>,
    /// Every sandbox carrying all these labels.
    pub labels: Vec<(String, String)>,
    /// Every sandbox.
    pub all: bool,
}

/// What `remove` did: the ids removed, and why others were not.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Removed {
    pub removed: Vec<String>,
    pub errors: Vec<String>,
}

/// `husk rm`: destroys each target and waits until nothing of it remains;
/// a target that cannot be found or removed is an entry in `errors`.
pub fn remove(store: &Store, t: &Targets, force: bool) -> Result<Removed, SandboxError> {
    if t.sandboxes.is_empty() && t.labels.is_empty() && !t.all {
        return Err(SandboxError::Usage("say which sandboxes: husk rm ID|NAME..., --label KEY=VALUE, or --all".into()));
    }
    let mut ids = Vec::new();
    let mut out = Removed::default();
    for what in &t.sandboxes {
        match crate::sandbox::registry::resolve(store, what) {
            Ok(id) => ids.push(id),
            Err(e) => out.errors.push(e.to_string()),
        }
    }
    if t.all || !t.labels.is_empty() {
        ids.extend(list(store, &t.labels).into_iter().map(|r| r.id));
    }
    ids.sort();
    ids.dedup();
    for id in ids {
        match destroy(store, &id, force) {
            Ok(()) => out.removed.push(id),
            Err(e) => out.errors.push(e.to_string()),
        }
    }
    Ok(out)
}

/// A renewed lease.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Renewed {
    pub id: String,
    pub expires_ms: u64,
    pub ttl_ms: u64,
    pub lease_remaining_ms: u64,
}

/// `husk renew`: the lease restarts from now, for `ttl` (default: the
/// sandbox's own).
pub fn renew(store: &Store, target: &str, ttl: Option<Duration>) -> Result<Renewed, SandboxError> {
    if ttl.is_some_and(|t| t.is_zero()) {
        return Err(SandboxError::Usage("--ttl must be longer than 0".into()));
    }
    let rec = crate::sandbox::registry::live_record(store, target)?;
    let c = Client::connect(&store.dir(&rec.id), rec.supervisor)?;
    let (reply, _) = c.call(&Request::Renew { ttl_ms: ttl.map(|t| t.as_millis() as u64) })?;
    if !reply.ok {
        return Err(SandboxError::Supervisor(reply.error.unwrap_or_else(|| "renew refused".into())));
    }
    let left = reply.expires_ms.saturating_sub(now_ms());
    Ok(Renewed { id: rec.id, expires_ms: reply.expires_ms, ttl_ms: reply.ttl_ms, lease_remaining_ms: left })
}
