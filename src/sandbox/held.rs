//! What a held sandbox's record gives every process started in it: the
//! plan of one command (identity, id map, environment, workdir) and the
//! sandbox's compiled seccomp filter. Shared by `husk exec`, `husk cp` and
//! the supervisor's warm interpreter.

use super::SandboxError;
use super::state::Record;
use crate::plan::{ExecPlan, ExecPlanError, HeldSandbox};
use crate::spec::ExecSpec;
use std::path::Path;

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

/// The sandbox's compiled filter, from its directory `dir`.
pub(crate) fn seccomp_in(rec: &Record, dir: &Path) -> Result<Option<crate::seccomp::Program>, SandboxError> {
    let Some(s) = &rec.seccomp else { return Ok(None) };
    let path = dir.join("seccomp.bpf");
    let bytes = std::fs::read(&path).map_err(|e| SandboxError::State(format!("reading {}: {e}", path.display())))?;
    crate::seccomp::Program::from_bytes(&s.name, s.shipped, &s.sha256, s.report, &bytes)
        .map(Some)
        .ok_or_else(|| SandboxError::State(format!("{} is not a compiled seccomp program", path.display())))
}
