//! `husk exec`: one command in a live sandbox, planned once
//! (`plan::ExecPlan::build`), admitted by the sandbox's supervisor (its
//! lease, one exec at a time unless concurrent, the namespaces and cgroup
//! leaf it hands over), run by the sandbox's backend (`backend::exec`) and
//! reported with `run`'s verdict plus the sandbox's id and lease.

use super::SandboxError;
use super::held::plan_in;
use super::proto::{Client, Reply, Request};
use super::state::{Record, Store};
use crate::backend::Attached;
use crate::isolation::{Isolation, UserIds};
use crate::outcome::Outcome;
use crate::plan::ProcessPlan;
use crate::spec::ExecSpec;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;

/// What one exec asks for.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    /// The sandbox: id, name or id prefix.
    pub target: String,
    /// Queue behind a running exec instead of failing with "busy".
    pub wait: bool,
    pub exec: ExecSpec,
    /// `husk create --ready-cmd`'s check, run while the sandbox is still
    /// CREATING (no other exec is admitted then).
    pub ready_check: bool,
    /// The request's redaction (its own secrets, `--redact`): the
    /// sandbox's secrets are added to it before any output is read, so the
    /// caller's tap and verdict hide them too.
    pub redact: crate::redact::Redaction,
}

/// An exec that ran (or failed to start once the sandbox was found).
pub struct ExecResult {
    pub outcome: Outcome,
    pub exec_id: String,
    pub sandbox_id: String,
    pub isolation: Isolation,
    /// "native" or "runsc".
    pub backend: &'static str,
    /// Verdict keys beyond `run`'s.
    pub extra: BTreeMap<&'static str, serde_json::Value>,
}

impl ExecResult {
    /// The verdict (`--json`'s when `output`; the command's captured
    /// output left out otherwise, as `--verdict-file` writes it).
    pub fn verdict(&self, output: bool, redact: &crate::redact::Redaction) -> crate::outcome::Verdict<'_> {
        let mut v = crate::outcome::Verdict::new(
            &self.exec_id,
            self.backend,
            &self.outcome,
            Some(&self.isolation),
            output,
            redact,
        );
        v.extra = self.extra.clone();
        v
    }
}

/// `husk exec` for a typed request (a command, or code): the request is
/// lowered as `run`'s per-command options are (`request::lower`), then run
/// by `exec_to` or `exec_code`. The command's stdin is this process's fd 0;
/// `tap` streams its captured output as it happens. `Err` only when
/// nothing was started.
/// `redact` is the request's (`ProcessOptions::redaction`, which the
/// caller's tap holds too): the exec's and the sandbox's secrets join it.
pub fn exec_with(
    store: &Store,
    o: &crate::request::ExecOptions,
    redact: &crate::redact::Redaction,
    t_start: u64,
    tap: Option<&crate::stream::Tap>,
) -> Result<ExecResult, SandboxError> {
    if o.code.is_some() && !o.argv.is_empty() {
        return Err(SandboxError::Usage("give a command or code, not both".into()));
    }
    if o.language.is_some() && o.code.is_none() {
        return Err(SandboxError::Usage("--language goes with --code, not with a command".into()));
    }
    let mut spec = crate::spec::Spec::new(Vec::new());
    crate::request::lower::apply_process(&mut spec, &o.process, redact).map_err(|e| SandboxError::Setup(e.into()))?;
    let req = ExecRequest {
        target: o.sandbox.clone(),
        wait: o.wait,
        ready_check: false,
        redact: redact.clone(),
        exec: ExecSpec {
            argv: o.argv.clone(),
            env: spec.env,
            user: o.process.user.clone(),
            workdir: o.workdir.clone(),
            timeout: o.process.timeout,
            kill_grace: o.process.kill_grace,
            capture: o.process.capture,
            tty: o.process.tty,
        },
    };
    match &o.code {
        Some(code) => exec_code(store, &req, code, o.language.as_deref(), t_start, tap),
        None => exec_to(store, &req, t_start, tap),
    }
}

fn seccomp_of(rec: &Record, store: &Store) -> Result<Option<crate::seccomp::Program>, SandboxError> {
    super::held::seccomp_in(rec, &store.dir(&rec.id))
}

/// Runs the exec. `Err` only when nothing was started; everything after
/// (the command's own setup, its end) is in the outcome.
pub fn exec(store: &Store, req: &ExecRequest, t_start: u64) -> Result<ExecResult, SandboxError> {
    exec_to(store, req, t_start, None)
}

/// `exec`, with the command's captured output also streamed to `tap` as it
/// happens (`--json-stream`; `husk serve`'s streamed exec).
pub fn exec_to(
    store: &Store,
    req: &ExecRequest,
    t_start: u64,
    tap: Option<&crate::stream::Tap>,
) -> Result<ExecResult, SandboxError> {
    let rec = super::registry::live_record_for(store, &req.target, req.ready_check)?;
    let dir = store.dir(&rec.id);
    let client = Client::connect(&dir, rec.supervisor)?;
    let x = with_secrets(&client, &rec, &req.exec, &req.redact)?;
    let mut plan = plan_in(&rec, &x, t_start)?;
    plan.seccomp = seccomp_of(&rec, store)?;

    let exec_id = crate::backend::announced_exec_id(&rec.backend);
    let ask = Request::Exec {
        wait: req.wait,
        exec_id: exec_id.clone(),
        warm: false,
        ready_check: req.ready_check,
        timeout_ms: timeout_ms(req),
    };
    let (reply, fds) = match admit_exec(&client, &rec, ask)? {
        Admitted::Started(reply, fds) => (reply, fds),
        Admitted::FrozenTimeout(reply) => return Ok(never_started(&rec, &reply, &plan.process, t_start)),
    };
    count_frozen_wait(&mut plan, &reply);
    let state_dir = store.state_dir();
    let at = attached(&rec, &state_dir, &reply, fds, exec_id.as_deref(), tap, &req.redact);
    let x = crate::backend::exec(&rec.backend, &plan, at)?;
    // What happened in the sandbox while the command ran (an OOM kill of a
    // process an earlier exec left, say): not in this exec's own counters.
    // A supervisor that cannot say (an older husk's) gives none.
    // And, under --network allow=, the sandbox's egress accounting so far.
    let asked = client.call(&Request::Events);
    let gone = asked.is_err() && supervisor_gone(&dir, &rec);
    let (events, network) = asked.map(|(r, _)| (r.events, r.network.map(|n| *n))).unwrap_or_default();
    // The exec is over for the supervisor once its connection closes: it
    // renews the lease from then (to the full ttl) and removes the leaf.
    drop(client);
    let mut outcome = x.outcome;
    outcome.network = outcome.network.or(network);
    // Only a command killed by a signal died with its supervisor: one that
    // exited, timed out or was OOM-killed ended on its own terms, and a
    // sandbox that ends that way (a runsc sentry OOM-killed) takes its
    // supervisor with it afterwards.
    if gone && outcome.termination == crate::outcome::Termination::Signaled {
        died_with_supervisor(store, &rec.id, &mut outcome);
    }
    let mut r = result(&rec, &reply, &plan.process, outcome, x.exec_id, x.backend);
    r.extra.insert(VERDICT_KEYS[3], serde_json::json!(events));
    Ok(r)
}

/// `husk exec --code`: the code through the sandbox's warm interpreter or
/// session (`create --warm` / `--session`, docs/warm.md) when it has one;
/// in a sandbox without, as `python3 -` or `bash -s` would run it (a cold
/// exec, the same verdict). `language`: what the caller says the code is.
pub fn exec_code(
    store: &Store,
    req: &ExecRequest,
    code: &[u8],
    language: Option<&str>,
    t_start: u64,
    tap: Option<&crate::stream::Tap>,
) -> Result<ExecResult, SandboxError> {
    let rec = super::registry::live_record(store, &req.target)?;
    let Some(w) = rec.spec.warm.clone() else { return cold_code(store, req, code, language, t_start, tap) };
    crate::warm::language_fits(&w, language).map_err(|e| SandboxError::Usage(e.to_string()))?;
    if req.exec.user.is_some() || req.exec.tty {
        return Err(SandboxError::Usage(
            "--user and -t do not go with --code in a warm sandbox: its interpreter runs as the sandbox's user, without a terminal; run a command instead (husk exec ID -- python3 -)".into(),
        ));
    }
    let dir = store.dir(&rec.id);
    // One call at a time in a session (one interpreter, one control
    // socket), even in a --concurrent sandbox, whose other execs run beside.
    let _turn = match w.mode {
        crate::spec::WarmMode::Session => Some(session_turn(&dir, &rec.id, req.wait)?),
        _ => None,
    };
    let client = Client::connect(&dir, rec.supervisor)?;
    // The interpreter has the secrets already; this registers them for the
    // call's output.
    let mut x = with_secrets(&client, &rec, &req.exec, &req.redact)?;
    // The plan's command is the interpreter's: what the call runs is the
    // code, in a process that inherits the interpreter's confinement.
    x.argv = vec![crate::warm::INTERPRETER.into()];
    let mut plan = plan_in(&rec, &x, t_start)?;
    // Not loaded by this exec: the interpreter runs under it already, and
    // the verdict says which filter the call inherits.
    plan.seccomp = seccomp_of(&rec, store)?;
    let ask =
        Request::Exec { wait: req.wait, exec_id: None, warm: true, ready_check: false, timeout_ms: timeout_ms(req) };
    let (reply, mut fds) = match admit_exec(&client, &rec, ask)? {
        Admitted::Started(reply, fds) => (reply, fds),
        Admitted::FrozenTimeout(reply) => return Ok(never_started(&rec, &reply, &plan.process, t_start)),
    };
    count_frozen_wait(&mut plan, &reply);
    let ctl = match (reply.warm, fds.len() > reply.namespaces.len()) {
        (true, true) => fds.pop().expect("checked above"),
        _ => {
            let why = reply.error.clone().unwrap_or_else(|| "it is not running".into());
            return Err(SandboxError::Supervisor(format!(
                "the sandbox's warm interpreter cannot take the call: {why}"
            )));
        }
    };
    let state_dir = store.state_dir();
    let at = attached(&rec, &state_dir, &reply, fds, None, tap, &req.redact);
    let (mut x, mut warm) = crate::backend::warm_call(&plan, at, ctl, w.mode, code)?;
    let events = client.call(&Request::Events).map(|(r, _)| r.events).unwrap_or_default();
    drop(client);
    let oom_seen = events.iter().any(|e| matches!(e.kind, super::events::EventKind::OomKill { .. }));
    crate::warm::attribute(&mut warm, &mut x.outcome, oom_seen);
    let mut r = result(&rec, &reply, &plan.process, x.outcome, x.exec_id, x.backend);
    r.extra.insert(VERDICT_KEYS[3], serde_json::json!(events));
    r.extra.extend(crate::warm::take_results(&mut warm));
    r.extra.insert(VERDICT_KEYS[4], warm);
    Ok(r)
}

/// The session's turn: an exclusive lock on `session.lock` in the
/// sandbox's directory, waited for (`--wait`) or refused as busy.
fn session_turn(dir: &Path, id: &str, wait: bool) -> Result<nix::fcntl::Flock<std::fs::File>, SandboxError> {
    use nix::fcntl::{Flock, FlockArg};
    let path = dir.join("session.lock");
    let f =
        crate::files::open_lock(&path).map_err(|e| SandboxError::State(format!("opening {}: {e}", path.display())))?;
    let how = if wait { FlockArg::LockExclusive } else { FlockArg::LockExclusiveNonblock };
    match Flock::lock(f, how) {
        Ok(l) => Ok(l),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(SandboxError::Busy { id: id.to_string() }),
        Err((_, e)) => Err(SandboxError::State(format!("locking {}: {e}", path.display()))),
    }
}

/// `--code` in a sandbox without a warm interpreter: the interpreter reads
/// the code from its stdin, which becomes a sealed memfd holding it.
fn cold_code(
    store: &Store,
    req: &ExecRequest,
    code: &[u8],
    language: Option<&str>,
    t_start: u64,
    tap: Option<&crate::stream::Tap>,
) -> Result<ExecResult, SandboxError> {
    let argv: &[&str] = match language.unwrap_or("python") {
        "python" | "python3" => &["python3", "-"],
        "bash" => &["bash", "-s"],
        "sh" => &["sh", "-s"],
        other => return Err(SandboxError::Usage(format!("--language {other}: one of python, bash, sh"))),
    };
    let fd = crate::warm::sealed(&[code]).map_err(|e| SandboxError::State(format!("holding the code: {e}")))?;
    use std::os::fd::AsRawFd;
    nix::unistd::lseek(&fd, 0, nix::unistd::Whence::SeekSet)
        .and_then(|_| crate::sys::fd::dup_onto(fd.as_raw_fd(), 0))
        .map_err(|e| SandboxError::State(format!("the code as stdin: {e}")))?;
    let mut r = req.clone();
    r.exec.argv = argv.iter().map(|s| s.to_string()).collect();
    let mut res = exec_to(store, &r, t_start, tap)?;
    // The same keys as a warm call's verdict; a plain `python3 -` run has
    // no results but its output.
    let mut warm = crate::warm::verdict("cold", false, None, false);
    crate::warm::put_results(&mut warm, Default::default());
    res.extra.extend(crate::warm::take_results(&mut warm));
    res.extra.insert(VERDICT_KEYS[4], warm);
    Ok(res)
}

/// The exec with the sandbox's secrets (`create --secret-env`), asked of
/// its supervisor, in its environment (after the sandbox's, before the
/// exec's own), and added to the request's `redact` before any output is
/// read.
fn with_secrets(
    client: &Client,
    rec: &Record,
    x: &ExecSpec,
    redact: &crate::redact::Redaction,
) -> Result<ExecSpec, SandboxError> {
    if rec.secret_names.is_empty() {
        return Ok(x.clone());
    }
    let (reply, _) = client.call(&Request::Secrets)?;
    if !reply.ok {
        return Err(SandboxError::Supervisor(reply.error.unwrap_or_else(|| "the secrets were refused".into())));
    }
    let mut out = x.clone();
    redact.add(
        reply.secrets.iter().map(|(n, v)| crate::redact::Secret { name: n.clone(), value: v.as_bytes().to_vec() }),
    );
    out.env = reply.secrets.into_iter().chain(x.env.iter().cloned()).collect();
    Ok(out)
}

/// A live sandbox's secrets, asked of its supervisor (`husk fork` gives
/// them to the forks).
pub fn secrets_of(store: &Store, rec: &Record) -> Result<Vec<crate::redact::Secret>, SandboxError> {
    if rec.secret_names.is_empty() {
        return Ok(Vec::new());
    }
    let client = Client::connect(&store.dir(&rec.id), rec.supervisor)?;
    let (reply, _) = client.call(&Request::Secrets)?;
    if !reply.ok {
        return Err(SandboxError::Supervisor(reply.error.unwrap_or_else(|| "the secrets were refused".into())));
    }
    Ok(reply.secrets.into_iter().map(|(name, v)| crate::redact::Secret { name, value: v.into_bytes() }).collect())
}

/// An exec's answer from its supervisor.
enum Admitted {
    Started(Reply, Vec<OwnedFd>),
    /// The sandbox stayed frozen (a commit or fork) past the exec's own
    /// timeout: it never started.
    FrozenTimeout(Reply),
}

/// The exec's `--timeout`, which also bounds its wait for a freeze to end.
fn timeout_ms(req: &ExecRequest) -> Option<u64> {
    req.exec.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}

fn admit_exec(client: &Client, rec: &Record, req: Request) -> Result<Admitted, SandboxError> {
    let (reply, fds) = client.call(&req)?;
    if reply.frozen_timeout {
        return Ok(Admitted::FrozenTimeout(reply));
    }
    let (reply, fds) = checked(rec, reply, fds, "exec")?;
    Ok(Admitted::Started(reply, fds))
}

/// The time the exec waited behind a freeze is part of its timeout: the
/// command gets what is left, so the exec ends at its own deadline.
fn count_frozen_wait(plan: &mut crate::plan::ExecPlan, reply: &Reply) {
    let waited = std::time::Duration::from_millis(reply.frozen_wait_ms);
    plan.timeout = plan.timeout.map(|t| t.saturating_sub(waited).max(std::time::Duration::from_millis(1)));
}

/// The verdict of an exec that waited for a freeze past its own timeout:
/// `wall_timeout` (124), as if it had run out of time running, with the
/// reason, so a caller can tell it apart from a command that ran too long.
fn never_started(rec: &Record, reply: &Reply, process: &ProcessPlan, t_start: u64) -> ExecResult {
    let mut outcome = crate::outcome::Outcome::blank();
    outcome.termination = crate::outcome::Termination::WallTimeout;
    outcome.duration_ms = crate::spawn::now_ns().saturating_sub(t_start) as f64 / 1e6;
    let why = reply.error.clone().unwrap_or_else(|| "the sandbox stayed frozen past the exec's --timeout".into());
    outcome.error = Some(
        crate::outcome::ErrorReport::new(crate::step::Phase::Sandbox, why)
            .with_hint("run it again once the commit or fork is done, or give it a longer --timeout".to_string()),
    );
    let backend = if rec.backend == "runsc" { "runsc" } else { "native" };
    let mut r = result(rec, reply, process, outcome, crate::ids::new_id(), backend);
    r.extra.insert(VERDICT_KEYS[3], serde_json::json!([]));
    r
}

/// Asks the supervisor to admit one exec (or copy, `what`): its answer and
/// the namespace fds it hands over; busy and refused become errors.
pub(crate) fn admit(
    client: &Client,
    rec: &Record,
    req: Request,
    what: &str,
) -> Result<(Reply, Vec<OwnedFd>), SandboxError> {
    let (reply, fds) = client.call(&req)?;
    checked(rec, reply, fds, what)
}

fn checked(rec: &Record, reply: Reply, fds: Vec<OwnedFd>, what: &str) -> Result<(Reply, Vec<OwnedFd>), SandboxError> {
    if reply.busy {
        return Err(SandboxError::Busy { id: rec.id.clone() });
    }
    if reply.paused {
        return Err(SandboxError::Paused { id: rec.id.clone() });
    }
    if !reply.ok {
        return Err(SandboxError::Supervisor(reply.error.unwrap_or_else(|| format!("the {what} was refused"))));
    }
    Ok((reply, fds))
}

/// What the backend gets of an admitted exec or copy.
pub(crate) fn attached<'a>(
    rec: &'a Record,
    state_dir: &'a Path,
    reply: &'a Reply,
    fds: Vec<OwnedFd>,
    exec_id: Option<&'a str>,
    tap: Option<&'a crate::stream::Tap>,
    redact: &'a crate::redact::Redaction,
) -> Attached<'a> {
    Attached {
        sandbox_id: &rec.id,
        state_dir,
        spec: &rec.spec,
        cgroup: rec.cgroup.as_ref(),
        limits: rec.limits.as_ref(),
        leaf: reply.leaf.as_deref(),
        ns_kinds: &reply.namespaces,
        ns_fds: fds,
        exec_id,
        tap,
        redact,
    }
}

fn result(
    rec: &Record,
    reply: &Reply,
    process: &ProcessPlan,
    outcome: Outcome,
    exec_id: String,
    backend: &'static str,
) -> ExecResult {
    let [sid, seq, left, _events, _warm] = VERDICT_KEYS;
    let mut extra = BTreeMap::new();
    extra.insert(sid, serde_json::json!(rec.id));
    extra.insert(seq, serde_json::json!(reply.exec));
    extra.insert(left, serde_json::json!(reply.ttl_ms));
    let mut isolation = rec.isolation.clone();
    isolation.user = UserIds { uid: process.uid, gid: process.gid };
    ExecResult { outcome, exec_id, sandbox_id: rec.id.clone(), isolation, backend, extra }
}

/// Whether the sandbox's supervisor is gone, asked after it stopped
/// answering this exec's connection: a live one answers a new one.
fn supervisor_gone(dir: &Path, rec: &Record) -> bool {
    Client::connect(dir, rec.supervisor)
        .and_then(|c| c.timeout(std::time::Duration::from_secs(1)).call(&Request::Status))
        .is_err()
}

/// The supervisor died while the exec ran (SIGKILLed, say): the sandbox's
/// processes died with it, this command among them, so the command's
/// SIGKILL is not its own. The verdict says the sandbox is gone instead
/// (`setup_failed`, 125, step `sandbox`), and what remains is removed.
fn died_with_supervisor(store: &Store, id: &str, outcome: &mut Outcome) {
    let why = match super::gc::sweep_one(store, id) {
        Some(Err(e)) => format!("removing what remained failed: {e}; `husk gc` retries"),
        _ => "husk removed what remained".to_string(),
    };
    let killed = outcome.signal.map(|s| format!(" (the command got signal {s})")).unwrap_or_default();
    outcome.termination = crate::outcome::Termination::SetupFailed;
    outcome.status = None;
    outcome.signal = None;
    outcome.error = Some(
        crate::outcome::ErrorReport::new(
            crate::step::Phase::Sandbox,
            format!(
                "sandbox {id} is gone: its supervisor died while this exec ran, and the sandbox's processes died with it{killed}; {why}"
            ),
        )
        .with_hint("create a new sandbox".to_string()),
    );
}

/// The verdict keys an exec adds to `run`'s (docs/verdict.schema.json).
pub const VERDICT_KEYS: [&str; 5] = ["sandbox_id", "sandbox_exec", "lease_remaining_ms", "events", "warm"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_verdict_keys_are_documented() {
        let schema: serde_json::Value = serde_json::from_str(include_str!("../../docs/verdict.schema.json")).unwrap();
        for k in VERDICT_KEYS {
            assert!(schema["properties"].get(k).is_some(), "{k} is not in docs/verdict.schema.json");
        }
    }
}
