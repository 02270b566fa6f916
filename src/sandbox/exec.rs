//! `husk exec`: one command in a live sandbox, planned once
//! (`plan::ExecPlan::build`), admitted by the sandbox's supervisor (its
//! lease, one exec at a time unless concurrent, the namespaces and cgroup
//! leaf it hands over), run by the sandbox's backend (`backend::exec`) and
//! reported with `run`'s verdict plus the sandbox's id and lease.

use super::SandboxError;
use super::proto::{Client, Reply, Request};
use super::state::{Record, Store};
use crate::backend::Attached;
use crate::isolation::{Isolation, UserIds};
use crate::outcome::Outcome;
use crate::plan::{ExecPlan, ExecPlanError, HeldSandbox, ProcessPlan};
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

fn seccomp_of(rec: &Record, store: &Store) -> Result<Option<crate::seccomp::Program>, SandboxError> {
    let Some(s) = &rec.seccomp else { return Ok(None) };
    let path = store.dir(&rec.id).join("seccomp.bpf");
    let bytes = std::fs::read(&path).map_err(|e| SandboxError::State(format!("reading {}: {e}", path.display())))?;
    crate::seccomp::Program::from_bytes(&s.name, s.shipped, &s.sha256, s.report, &bytes)
        .map(Some)
        .ok_or_else(|| SandboxError::State(format!("{} is not a compiled seccomp program", path.display())))
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
    let rec = super::registry::live_record(store, &req.target)?;
    let dir = store.dir(&rec.id);
    let mut plan = plan_in(&rec, &req.exec, t_start)?;
    plan.seccomp = seccomp_of(&rec, store)?;

    let client = Client::connect(&dir, rec.supervisor)?;
    let exec_id = crate::backend::announced_exec_id(&rec.backend);
    let (reply, fds) = admit(&client, &rec, req.wait, exec_id.clone(), "exec")?;
    let state_dir = store.state_dir();
    let at = attached(&rec, &state_dir, &reply, fds, exec_id.as_deref(), tap);
    let x = crate::backend::exec(&rec.backend, &plan, at)?;
    // What happened in the sandbox while the command ran (an OOM kill of a
    // process an earlier exec left, say): not in this exec's own counters.
    // A supervisor that cannot say (an older husk's) gives none.
    // And, under --network allow=, the sandbox's egress accounting so far.
    let (events, network) =
        client.call(&Request::Events).map(|(r, _)| (r.events, r.network.map(|n| *n))).unwrap_or_default();
    // The exec is over for the supervisor once its connection closes: it
    // renews the lease from then (to the full ttl) and removes the leaf.
    drop(client);
    let mut outcome = x.outcome;
    outcome.network = outcome.network.or(network);
    let mut r = result(&rec, &reply, &plan.process, outcome, x.exec_id, x.backend);
    r.extra.insert(VERDICT_KEYS[3], serde_json::json!(events));
    Ok(r)
}

/// The plan of one command in the sandbox `rec` (what `husk exec` runs and
/// what `husk cp`'s copier is confined by).
pub(crate) fn plan_in(rec: &Record, x: &ExecSpec, t_start: u64) -> Result<ExecPlan, SandboxError> {
    let held = HeldSandbox {
        id: &rec.id,
        spec: &rec.spec,
        image: &rec.image,
        passwd: rec.passwd.as_deref(),
        group: rec.group.as_deref(),
        ids: &rec.ids,
        last_cap: rec.last_cap,
        workdir: &rec.workdir,
    };
    ExecPlan::build(&held, x, t_start).map_err(|e| match e {
        ExecPlanError::Usage(m) => SandboxError::Usage(m),
        ExecPlanError::Plan(e) => SandboxError::Setup(e.report()),
    })
}

/// Asks the supervisor to admit one exec (or copy, `what`): its answer and
/// the namespace fds it hands over; busy and refused become errors.
pub(crate) fn admit(
    client: &Client,
    rec: &Record,
    wait: bool,
    exec_id: Option<String>,
    what: &str,
) -> Result<(Reply, Vec<OwnedFd>), SandboxError> {
    let (reply, fds) = client.call(&Request::Exec { wait, exec_id })?;
    if reply.busy {
        return Err(SandboxError::Busy { id: rec.id.clone() });
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
    let [sid, seq, left, _events] = VERDICT_KEYS;
    let mut extra = BTreeMap::new();
    extra.insert(sid, serde_json::json!(rec.id));
    extra.insert(seq, serde_json::json!(reply.exec));
    extra.insert(left, serde_json::json!(reply.ttl_ms));
    let mut isolation = rec.isolation.clone();
    isolation.user = UserIds { uid: process.uid, gid: process.gid };
    ExecResult { outcome, exec_id, sandbox_id: rec.id.clone(), isolation, backend, extra }
}

/// The verdict keys an exec adds to `run`'s (docs/verdict.schema.json).
pub const VERDICT_KEYS: [&str; 4] = ["sandbox_id", "sandbox_exec", "lease_remaining_ms", "events"];

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
