//! The one Spec -> Plan pipeline of `husk run` and `husk create` (and of
//! `husk serve` and MCP, which create through the library): the same stages
//! in the same order, so the same bad input fails at the same step with the
//! same words whichever command was given.
//!
//! Order: the backend first (cheap, and it refuses options it cannot apply,
//! such as `--seccomp-report` under runsc), then the root (which may pull an
//! image: never for a run that would be refused anyway), then the plan.

use crate::backend::{self, Backend};
use crate::host::HostFacts;
use crate::image::store::Lease;
use crate::isolation::RuntimeChoiceNote;
use crate::outcome::ErrorReport;
use crate::paths::{Paths, PathsError};
use crate::plan::{InitRole, Plan};
use crate::spec::Spec;
use crate::step::Phase;
use std::path::PathBuf;

/// A spec made ready to run or hold.
pub struct Prepared {
    pub backend: Box<dyn Backend>,
    /// `--runtime auto`'s choice, for the verdict's isolation.
    pub note: Option<RuntimeChoiceNote>,
    pub plan: Plan,
    /// The image's lease (held while the sandbox uses the layers).
    pub lease: Option<Lease>,
    /// What a held sandbox's record keeps of its root (`InitRole::Hold`).
    pub inputs: super::supervisor::HoldInputs,
}

/// Why a spec could not be made ready; `runtime`: the backend the verdict
/// names ("none" before one was picked).
#[derive(Debug)]
pub struct PrepareFailure {
    pub report: ErrorReport,
    pub runtime: &'static str,
}

/// The host's facts, with husk's store as the one store (images, compiled
/// seccomp profiles).
pub fn host_for(paths: &Result<Paths, PathsError>) -> HostFacts {
    let mut host = HostFacts::probe();
    if let Ok(p) = paths {
        host.store_root = p.root.clone();
    }
    host
}

/// Backend, root, plan: see the module text. `state_dir`: husk's state
/// directory, asked only when runsc may be used.
pub fn prepare(
    spec: Spec,
    host: &HostFacts,
    paths: &Result<Paths, PathsError>,
    state_dir: impl FnOnce() -> Result<PathBuf, crate::backend::runsc::config::RunscError>,
    role: InitRole,
) -> Result<Prepared, PrepareFailure> {
    let none = |report| PrepareFailure { report, runtime: "none" };
    let selected = backend::select_in(&spec, host, state_dir).map_err(|e| none(e.into()))?;
    let (plan, lease, inputs) = plan_with(selected.backend.as_ref(), spec, host, paths, role)?;
    Ok(Prepared { backend: selected.backend, note: selected.note, plan, lease, inputs })
}

/// The stages after the backend's choice, for a backend already chosen
/// (`prepare`'s; `husk doctor` trials each backend it checks this way):
/// the root, then the plan.
pub fn plan_with(
    backend: &dyn Backend,
    spec: Spec,
    host: &HostFacts,
    paths: &Result<Paths, PathsError>,
    role: InitRole,
) -> Result<(Plan, Option<Lease>, super::supervisor::HoldInputs), PrepareFailure> {
    let none = |report| PrepareFailure { report, runtime: "none" };
    let (root, lease) =
        crate::image::root::root_input(&spec, host, paths).map_err(|e| none(ErrorReport::new(Phase::Root, e)))?;
    let inputs = super::supervisor::HoldInputs::of(&root);
    let plan = backend::plan_for(backend, spec, host, root, role)
        .map_err(|e| PrepareFailure { report: e.report, runtime: e.runtime })?;
    Ok((plan, lease, inputs))
}
