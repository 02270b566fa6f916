//! Isolation backends behind one trait: the same `Plan` in, the same
//! `Outcome` out. Selected once per command. A backend owns a sandbox's
//! whole life: `run` (one command), `create` (a sandbox that lives, held by
//! a `Live` handle in its supervisor) and each `exec` in it. Code outside
//! this module never asks which backend it has.

pub mod auto;
pub mod gc;
pub mod native;
pub mod runsc;

use crate::cgroup::CgroupJoin;
use crate::cgroup::nested::Tree;
use crate::cgroup::report::AppliedLimits;
use crate::host::HostFacts;
use crate::isolation::{Isolation, RuntimeChoiceNote, UserIds};
use crate::outcome::{ErrorReport, Outcome};
use crate::plan::{ExecPlan, Plan};
use crate::seccomp::SeccompReport;
use crate::spec::{RuntimeChoice, Spec};
use crate::userns::UserMapping;
use runsc::config::RunscError;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Per-run I/O choices that are not part of the sandbox itself.
#[derive(Clone, Copy, Debug)]
pub struct RunIo<'a> {
    /// Capture stdout/stderr into the outcome, each bounded to this many bytes.
    pub capture: Option<u64>,
    /// Captured output is also streamed here as it happens (`--json-stream`).
    pub tap: Option<&'a crate::stream::Tap>,
    /// What captured output hides (the command's secrets).
    pub redact: &'a crate::redact::Redaction,
    /// Monotonic ns when husk started (for `duration_ms` and `phases_ms`).
    pub t_start: u64,
}

/// Why a sandbox could not be planned, and whose refusal it was: the
/// verdict's `runtime` is "none" when the spec itself is refused (nothing
/// was chosen to run it) and the backend's name when that backend cannot
/// apply a valid plan.
#[derive(Debug)]
pub struct PlanFailure {
    pub report: ErrorReport,
    pub runtime: &'static str,
}

/// The one way a spec becomes a plan a backend can run or hold: the
/// backend's additions to the spec, the validation into a `Plan`, and the
/// backend's adaptation of it (`husk run`, `husk create` and doctor's trial
/// go through here, so none of them can skip a stage).
pub fn plan_for(
    backend: &dyn Backend,
    mut spec: Spec,
    host: &HostFacts,
    root: crate::plan::RootInput<'_>,
    role: crate::plan::InitRole,
) -> Result<Plan, PlanFailure> {
    let refused = |report| PlanFailure { report, runtime: backend.name() };
    backend.prepare_spec(&mut spec).map_err(refused)?;
    let mut plan =
        Plan::build_as(spec, host, root, role).map_err(|e| PlanFailure { report: e.report(), runtime: "none" })?;
    backend.adapt(&mut plan).map_err(refused)?;
    Ok(plan)
}

pub trait Backend {
    fn name(&self) -> &'static str;
    /// Runs the plan to completion. Never returns an error: every failure
    /// is an `Outcome` with `termination: setup_failed`.
    fn run(&self, plan: Plan, io: RunIo<'_>) -> Outcome;
    /// What the verdict's `isolation` says this backend applies for `plan`.
    fn isolation(&self, plan: &Plan) -> Isolation;
    /// Adds to a sandbox's spec what the backend needs inside it to run
    /// or hold it (before `Plan::build`).
    fn prepare_spec(&self, _spec: &mut Spec) -> Result<(), ErrorReport> {
        Ok(())
    }
    /// Adapts a built plan to how the backend applies it, before anything
    /// is made (runsc: the limits, split between gVisor and the host
    /// cgroup). Err: the plan cannot be applied as asked (fail closed).
    fn adapt(&self, _plan: &mut Plan) -> Result<(), ErrorReport> {
        Ok(())
    }
    /// Starts a sandbox that lives (`plan.role` is `Hold`), its processes
    /// born in `cgroup`; returns once it can take execs.
    fn create(&self, plan: &mut Plan, cgroup: Option<&dyn CgroupJoin>) -> Result<Box<dyn Live>, ErrorReport>;
    /// `create`, with the sandbox's processes restored from the checkpoint
    /// image in `dir` (another sandbox's, of the same spec: `husk fork
    /// --memory`) instead of started.
    fn create_restored(
        &self,
        plan: &mut Plan,
        _cgroup: Option<&dyn CgroupJoin>,
        _dir: &Path,
    ) -> Result<Box<dyn Live>, ErrorReport> {
        Err(ErrorReport::new(
            crate::step::Phase::Backend,
            format!("sandbox {}: the {} backend cannot restore saved processes", plan.id, self.name()),
        ))
    }
    /// Whether each exec gets a cgroup leaf of its own.
    fn exec_leaves(&self) -> bool {
        true
    }
}

/// A sandbox that lives, held by its supervisor.
pub trait Live {
    /// The process whose end is the sandbox's end (the init, gVisor's sentry).
    fn pid(&self) -> i32;
    fn pidfd(&self) -> &OwnedFd;
    /// The namespaces each exec joins (kind, fd), in join order; empty when
    /// execs enter through the backend's own tool.
    fn namespaces(&self) -> &[(&'static str, OwnedFd)];
    /// The exec `exec_id` (as husk exec announced it) lost its husk exec
    /// without a word (SIGKILL): its command must not run on. Natively the
    /// command's PDEATHSIG already took it.
    fn exec_abandoned(&self, _exec_id: &str) {}
    /// `--publish`: the host addresses bound.
    fn published(&self) -> Vec<crate::net::publish::Published> {
        Vec::new()
    }
    /// `--network allow=`: the egress proxy's accounting so far.
    fn network(&self) -> Option<crate::net::account::NetworkReport> {
        None
    }
    /// Ends the sandbox: every process in it and what the backend made for
    /// it. `kill_group` kills the sandbox's cgroup; each backend calls it
    /// where its teardown needs it.
    fn stop(self: Box<Self>, kill_group: &dyn Fn());
    /// How `husk pause` stops this sandbox.
    fn pause_kind(&self) -> PauseKind {
        PauseKind::Freeze
    }
    /// Saves every process of the sandbox with its memory into `dir`
    /// (`PauseKind::Checkpoint`); they end once saved (the sandbox's pid
    /// is then gone until `restore`). `plan`: the sandbox's, to refuse
    /// what an image cannot carry.
    fn checkpoint(&mut self, plan: &Plan, _dir: &Path) -> Result<MemoryImage, ErrorReport> {
        Err(ErrorReport::new(
            crate::step::Phase::Backend,
            format!("sandbox {}: this backend does not save process memory", plan.id),
        ))
    }
    /// Boots the sandbox again from the image `checkpoint` left in `dir`,
    /// born in `cgroup`; its pid and pidfd are the new ones after.
    fn restore(&mut self, plan: &mut Plan, _dir: &Path, _cgroup: Option<&dyn CgroupJoin>) -> Result<(), ErrorReport> {
        Err(ErrorReport::new(
            crate::step::Phase::Backend,
            format!("sandbox {}: this backend does not restore process memory", plan.id),
        ))
    }
}

/// How a backend pauses a live sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseKind {
    /// Its cgroup frozen in place: processes and memory stay in RAM.
    Freeze,
    /// Its processes saved to an image and ended (gVisor's checkpoint):
    /// nothing runs or stays in RAM; resume restores them.
    Checkpoint,
}

/// A checkpoint image a backend wrote.
pub use runsc::checkpoint::Saved as MemoryImage;

/// A live sandbox as `husk exec` reaches it: what its record keeps and
/// what its supervisor handed over for this exec. (An exec runs in `husk
/// exec`'s own process, not the supervisor's.)
pub struct Attached<'a> {
    pub sandbox_id: &'a str,
    /// husk's state directory (backends keep their own state there).
    pub state_dir: &'a Path,
    pub spec: &'a Spec,
    pub cgroup: Option<&'a Tree>,
    /// The verdict's `limits`, as created.
    pub limits: Option<&'a AppliedLimits>,
    /// The exec's cgroup leaf, made by the supervisor.
    pub leaf: Option<&'a str>,
    /// The namespaces handed over: their kinds, and their fds in that order.
    pub ns_kinds: &'a [String],
    pub ns_fds: Vec<OwnedFd>,
    /// The id husk exec gave the supervisor for an exec without a cgroup
    /// leaf (runsc: its files in the run directory are `exec-<id>.*`).
    pub exec_id: Option<&'a str>,
    /// Captured output is also streamed here as it happens (`--json-stream`).
    pub tap: Option<&'a crate::stream::Tap>,
    /// What captured output hides: the request's secrets and the
    /// sandbox's (`sandbox::exec` adds them before the exec starts).
    pub redact: &'a crate::redact::Redaction,
}

/// An exec that ran.
pub struct Executed {
    pub exec_id: String,
    pub outcome: Outcome,
    pub backend: &'static str,
}

/// Runs one exec in a live sandbox of `backend` (the name its record
/// keeps). `Err` only when nothing was started.
pub fn exec(backend: &str, plan: &ExecPlan, at: Attached<'_>) -> Result<Executed, ErrorReport> {
    match backend {
        "runsc" => Ok(runsc::live::exec(plan, at)),
        _ => native::exec::exec(plan, at),
    }
}

/// Why a copy could not start in a live sandbox.
#[derive(Debug, thiserror::Error)]
pub enum CopyStartError {
    /// The copier under gVisor (`runsc exec` of husk's own copier).
    #[error("starting the copier under gVisor: {0}")]
    Gvisor(runsc::copy::RunscCopyError),
    #[error("the supervisor sent no {0} namespace")]
    MissingNamespace(&'static str),
    #[error(transparent)]
    Copier(#[from] native::copy::CopierError),
}

/// Whether `husk cp` can reach a sandbox of `backend`, asked before the
/// supervisor is (a refused copy is no exec). Both backends can: natively
/// a copier joins the sandbox's namespaces, under gVisor `runsc exec`
/// starts one inside (`runsc::copy`).
pub fn copy_supported(_backend: &str) -> Result<(), CopyStartError> {
    Ok(())
}

/// Starts a copier in a live sandbox of `backend`, as `plan`'s user,
/// in the exec's cgroup leaf: inside its user and mount namespaces.
pub fn start_copy(
    backend: &str,
    plan: &ExecPlan,
    at: Attached<'_>,
    op: native::copy::Inside,
    limits: crate::copy::Limits,
) -> Result<native::copy::Copier, CopyStartError> {
    if backend == "runsc" {
        return runsc::copy::start(plan, &at, &op, limits);
    }
    let Attached { cgroup, leaf, ns_kinds, ns_fds, .. } = at;
    let mut user = None;
    let mut mnt = None;
    for (kind, fd) in ns_kinds.iter().zip(ns_fds) {
        match kind.as_str() {
            "user" => user = Some((libc::CLONE_NEWUSER, fd)),
            "mnt" => mnt = Some((libc::CLONE_NEWNS, fd)),
            _ => {}
        }
    }
    let mnt = mnt.ok_or(CopyStartError::MissingNamespace("mount"))?;
    let namespaces: Vec<_> = user.into_iter().chain(Some(mnt)).collect();
    let leaf = match (cgroup, leaf) {
        (Some(tree), Some(name)) => {
            Some(tree.open_leaf(name).map_err(|e| CopyStartError::Copier(native::copy::CopierError::Cgroup(e)))?)
        }
        _ => None,
    };
    let confinement = crate::spawn::command::Confinement {
        process: &plan.process,
        deny_setgroups: plan.deny_setgroups,
        last_cap: plan.last_cap,
        seccomp: None,
    };
    let j = native::copy::CopyJoin {
        namespaces,
        confinement,
        cgroup: leaf.as_ref().map(|l| l as &dyn CgroupJoin),
        op,
        limits,
    };
    Ok(native::copy::start(j)?)
}

/// Starts a warm interpreter or session (docs/warm.md) in a live sandbox
/// of `backend`, confined by `plan`, in the cgroup leaf `leaf`.
pub fn start_warm(
    backend: &str,
    plan: &ExecPlan,
    namespaces: &[(&'static str, OwnedFd)],
    leaf: Option<&crate::cgroup::nested::Leaf>,
    mode: crate::spec::WarmMode,
) -> Result<native::warm::WarmProc, ErrorReport> {
    match backend {
        "runsc" => Err(ErrorReport::new(
            crate::step::Phase::Warm,
            "--warm and --session need the native backend for now (--runtime native); under gVisor run code with husk exec ID -- python3 -".to_string(),
        )),
        _ => native::warm::start(plan, namespaces, leaf, mode),
    }
}

/// One `husk exec --code` call through a warm interpreter's control socket.
pub fn warm_call(
    plan: &ExecPlan,
    at: Attached<'_>,
    ctl: OwnedFd,
    mode: crate::spec::WarmMode,
    code: &[u8],
) -> Result<(Executed, serde_json::Value), ErrorReport> {
    native::warm::call(plan, at, ctl, mode, code)
}

/// The id an exec of `backend` announces to the supervisor before it
/// starts, if it needs one: a gVisor exec has no cgroup leaf to be named
/// by, so this id is how the supervisor finds its files when husk exec
/// dies (`Live::exec_abandoned`); a native exec is named by its leaf.
pub fn announced_exec_id(backend: &str) -> Option<String> {
    (backend == "runsc").then(crate::ids::new_id)
}

/// What a sandbox of `backend` keeps running once its supervisor died
/// without cleaning up, killed: the pids, and what could not be done. A
/// native sandbox has nothing (its init dies with its supervisor); a gVisor
/// sandbox's sentry has no death signal.
pub fn reap_orphan(backend: &str, state_dir: &Path, id: &str, spec: &Spec) -> (Vec<i32>, Vec<String>) {
    match backend {
        "runsc" => {
            let r = runsc::gc::reap_run(state_dir, id, &spec.runsc);
            (r.killed, r.errors)
        }
        _ => (Vec::new(), Vec::new()),
    }
}

/// The backend picked for a run, and (for `--runtime auto`) why.
pub struct Selected {
    pub backend: Box<dyn Backend>,
    /// Goes into the verdict as `isolation.runtime_choice`.
    pub note: Option<RuntimeChoiceNote>,
}

/// Picks the backend for a run. `state` is husk's `--state-dir`, if given.
/// Explain mode answers seccomp notifications from the host kernel; under
/// runsc the profile is enforced inside gVisor, where husk cannot see them.
const REPORT_NATIVE_ONLY: &str = "--seccomp-report needs the native backend (under runsc, gVisor enforces the profile inside its own kernel); drop --seccomp-report or use --runtime native";

/// Why no backend was selected for the run.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("{REPORT_NATIVE_ONLY}")]
    ReportNeedsNative,
    #[error("--runtime runsc: {0}")]
    Runsc(RunscError),
    #[error("--runtime runsc cannot work on this host: {}", .0.join("; "))]
    RunscBlocked(Vec<String>),
    #[error(transparent)]
    Auto(#[from] auto::AutoError),
    /// The note as the verdict's JSON shows it.
    #[error("--runtime auto picked runsc ({}), but {REPORT_NATIVE_ONLY}", serde_json::to_string(note).unwrap_or_default())]
    AutoReport { note: RuntimeChoiceNote },
    #[error("{EGRESS_NATIVE_ONLY}")]
    EgressNeedsNative,
    #[error("{PUBLISH_NATIVE_ONLY}")]
    PublishNeedsNative,
}

/// `--publish` connects through a socket factory husk's init forks inside
/// the sandbox's network namespace; under runsc there is no such init.
const PUBLISH_NATIVE_ONLY: &str = "--publish needs the native backend: its connections are made by husk's own init inside the sandbox's network namespace, and under runsc that namespace is gVisor's netstack; use --runtime native";

/// The egress proxy's listeners are made by husk's own init inside the
/// sandbox's network namespace; under runsc that namespace is gVisor's
/// netstack, which husk's init does not run in.
const EGRESS_NATIVE_ONLY: &str = "--network allow= (the egress allowlist) needs the native backend: its proxy ports are made by husk's own init inside the sandbox's network namespace, and under runsc that namespace is gVisor's; use --runtime native, or --network none under runsc";

/// A refused backend, as the verdict reports it (step `backend`).
impl From<SelectError> for ErrorReport {
    fn from(e: SelectError) -> ErrorReport {
        let errno = match &e {
            SelectError::Runsc(r) => r.errno(),
            _ => None,
        };
        ErrorReport::new(crate::step::Phase::Backend, e.to_string()).with_errno(errno)
    }
}

pub fn select(spec: &Spec, host: &HostFacts, state: Option<&Path>) -> Result<Selected, SelectError> {
    select_in(spec, host, || runsc::config::state_dir(state))
}

/// `select`, with husk's state directory given (asked only when runsc may
/// be used).
pub fn select_in(
    spec: &Spec,
    host: &HostFacts,
    state_dir: impl FnOnce() -> Result<PathBuf, RunscError>,
) -> Result<Selected, SelectError> {
    let (runsc, note) = choose_runsc(spec, host, state_dir)?;
    let backend: Box<dyn Backend> = match runsc {
        Some(cfg) => Box::new(runsc::Runsc::new(cfg)),
        None => Box::new(native::Native),
    };
    Ok(Selected { backend, note })
}

/// The runsc to use, or None for native, and (for `--runtime auto`) why:
/// the one rule for `husk run` and `husk create`. `state_dir` (husk's
/// state directory, where runsc keeps its own) is asked only when runsc
/// may be used, and so is what the host offers (`host.view()`).
fn choose_runsc(
    spec: &Spec,
    host: &HostFacts,
    state_dir: impl FnOnce() -> Result<PathBuf, RunscError>,
) -> Result<(Option<runsc::config::RunscConfig>, Option<RuntimeChoiceNote>), SelectError> {
    let runsc_cfg = || runsc::config::RunscConfig::resolve(&spec.runsc, &state_dir()?);
    match spec.runtime {
        RuntimeChoice::Native => Ok((None, None)),
        RuntimeChoice::Runsc => {
            if spec.seccomp_report {
                return Err(SelectError::ReportNeedsNative);
            }
            if spec.egress.is_some() {
                return Err(SelectError::EgressNeedsNative);
            }
            if !spec.publish.is_empty() {
                return Err(SelectError::PublishNeedsNative);
            }
            let cfg = runsc_cfg().map_err(SelectError::Runsc)?;
            let blockers = crate::host::blockers::runsc(host.view(), &cfg.platform);
            if !blockers.is_empty() {
                return Err(SelectError::RunscBlocked(blockers));
            }
            Ok((Some(cfg), None))
        }
        RuntimeChoice::Auto => {
            let (pick, note) = auto::choose(auto::Facts::probe(host.view(), runsc_cfg))?;
            match pick {
                auto::Pick::Native => Ok((None, Some(note))),
                auto::Pick::Runsc(_) if spec.seccomp_report => Err(SelectError::AutoReport { note }),
                auto::Pick::Runsc(_) if spec.egress.is_some() => Err(SelectError::EgressNeedsNative),
                auto::Pick::Runsc(_) if !spec.publish.is_empty() => Err(SelectError::PublishNeedsNative),
                auto::Pick::Runsc(cfg) => Ok((Some(cfg), Some(note))),
            }
        }
    }
}

/// The isolation keys every backend reports the same way; each backend
/// passes what differs (namespaces, id mapping) and may add its own keys.
pub fn isolation_report(plan: &Plan, namespaces: &[&str], user_mapping: UserMapping) -> Isolation {
    let capabilities = caps::all()
        .into_iter()
        .filter(|c| (c.index() as u32) <= plan.last_cap && plan.process.caps_keep & (1u64 << c.index()) != 0)
        .map(|c| c.to_string())
        .collect();
    Isolation {
        capabilities,
        downgrades: plan.cgroup.downgrades().into_iter().map(String::from).collect(),
        kernel: None,
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        network: match plan.network {
            _ if plan.spec.egress.is_some() => "allowlist",
            crate::spec::NetworkMode::None => "none",
            crate::spec::NetworkMode::Host => "host",
        }
        .into(),
        no_new_privs: true,
        rlimits: plan.process.rlimits.iter().map(crate::plan::Rlimit::report).collect(),
        rootfs: plan.mounts.report.clone(),
        runsc: None,
        runtime_choice: None,
        seccomp: SeccompReport::applied(plan.seccomp.as_ref()),
        user: UserIds { uid: plan.process.uid, gid: plan.process.gid },
        user_mapping,
    }
}
