//! One RUN step: the command in a husk sandbox (native backend, the
//! confinement `husk run` applies, no network unless `--network allow=`
//! gives it the egress allowlist) on the image built so far,
//! with a writable upper that is a host directory husk keeps: its content
//! is the step's layer (`diff`).

use crate::backend::{Backend, RunIo, native::Native};
use crate::host::HostFacts;
use crate::image::Owners;
use crate::image::view::LayeredView;
use crate::outcome::Outcome;
use crate::plan::{ImageDefaults, Plan, RootInput};
use crate::redact::Redaction;
use crate::rootfs::RootSource;
use crate::spec::{OutputSpec, RootSpec, Spec};
use crate::stream::Tap;
use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Output kept per stream: enough for the tail a failing step shows.
pub const CAPTURE: u64 = 256 << 10;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "RUN needs a root with a shell: this stage has no layers (FROM scratch); COPY a static binary first, or start FROM an image"
    )]
    NoLayers,
    #[error("preparing the step's upper directory {}: {source}", path.display())]
    Upper { path: PathBuf, source: std::io::Error },
    #[error("opening the stage's layers: {0}")]
    View(std::io::Error),
    #[error("planning the RUN sandbox: {0}")]
    Plan(String),
}

/// What one RUN needs.
pub struct RunJob<'a> {
    pub host: &'a HostFacts,
    /// Layer directories, top first (leased by the caller).
    pub layers: &'a [PathBuf],
    pub label: &'a str,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub owners: Owners,
    /// Empty directory that becomes the sandbox's upper (made here).
    pub upper: &'a Path,
    /// `husk build --network allow=`: the step's egress allowlist.
    pub egress: Option<crate::net::EgressSpec>,
    pub output: StepOutput,
}

/// Where a RUN step's output goes while it runs (it is captured either
/// way, for a failing step's tail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutput {
    /// Captured only.
    Captured,
    /// Also copied to husk's stderr as it comes (a terminal, or
    /// `--progress plain`), stdout and stderr in the order read.
    Streamed,
}

/// Capabilities a RUN step as image root keeps: Docker's default set
/// for containers (and so for its build steps), less NET_RAW and MKNOD
/// (steps have no network; device nodes are not carried in layers). They
/// are the sandbox's user namespace's, so `chown`, `setuid` and reading
/// another user's file work only over the ids that namespace maps (the
/// store's id range as root; rootless, the invoking user alone), never on
/// the host's. A step with a non-root `USER` keeps none, as in Docker.
const ROOT_STEP_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
    "CAP_SETFCAP",
];

/// Whether `USER` (a name or uid, with an optional group) is image root.
/// A name other than `root` that maps to uid 0 keeps no capabilities.
fn is_root_user(user: Option<&str>) -> bool {
    match user.map(|u| u.split(':').next().unwrap_or("")) {
        None | Some("" | "root" | "0") => true,
        Some(_) => false,
    }
}

/// Host ids of the sandbox's root, which must own the upper directory:
/// the child makes `u/` and `w/` in it as that user.
fn root_ids(owners: &Owners) -> (u32, u32) {
    match owners {
        Owners::Shift { uid, gid } => (uid.base, gid.base),
        Owners::Invoker => (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()),
    }
}

/// Runs the step; the outcome carries the exit status and the captured
/// output. The upper's `u/` holds the changes afterwards.
pub fn run(job: RunJob<'_>) -> Result<Outcome, RunError> {
    if job.layers.is_empty() {
        return Err(RunError::NoLayers);
    }
    let up = |source| RunError::Upper { path: job.upper.to_path_buf(), source };
    std::fs::DirBuilder::new().mode(0o700).create(job.upper).map_err(up)?;
    let (uid, gid) = root_ids(&job.owners);
    nix::unistd::chown(job.upper, Some(uid.into()), Some(gid.into())).map_err(|e| up(e.into()))?;

    let view = LayeredView::open(job.layers).map_err(RunError::View)?;
    let passwd = view.read_file("/etc/passwd");
    let group = view.read_file("/etc/group");
    let root = RootInput {
        source: RootSource::Layers {
            dirs: job.layers.to_vec(),
            view: Box::new(view),
            userxattr: true,
            label: job.label.to_string(),
        },
        image: ImageDefaults {
            env: job.env.clone(),
            entrypoint: vec![],
            cmd: vec![],
            workdir: job.workdir.clone(),
            user: job.user.clone(),
        },
        passwd,
        group,
    };
    let mut spec = Spec::new(job.argv);
    spec.root = RootSpec::Image(job.label.to_string());
    spec.upper_dir = Some(job.upper.to_path_buf());
    spec.output = OutputSpec::Capture { limit: CAPTURE };
    spec.limits.no_cgroup = crate::host::no_cgroup_opt_out();
    // The same proxy and rules as `husk run --network allow=`: the step's
    // namespace stays private, the proxy's env points its tools at it.
    spec.egress = job.egress;
    if is_root_user(job.user.as_deref()) {
        spec.cap_add = ROOT_STEP_CAPS.iter().map(|c| c.to_string()).collect();
    }
    let plan = Plan::build(spec, job.host, root).map_err(|e| RunError::Plan(e.to_string()))?;
    let t_start = crate::spawn::now_ns();
    // A build takes no secrets (RUN --mount=type=secret is refused).
    let redact = Redaction::none();
    let tap = match job.output {
        StepOutput::Captured => None,
        StepOutput::Streamed => std::io::stderr().as_fd().try_clone_to_owned().ok().map(|fd| Tap::raw(fd, &redact)),
    };
    let outcome = Native.run(plan, RunIo { capture: Some(CAPTURE), tap: tap.as_ref(), redact: &redact, t_start });
    if let Some(t) = &tap {
        t.flush();
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_image_root_steps_keep_capabilities() {
        for u in [None, Some("root"), Some("0"), Some("0:0"), Some("root:staff")] {
            assert!(super::is_root_user(u), "{u:?}");
        }
        for u in [Some("1000"), Some("user"), Some("nobody:0")] {
            assert!(!super::is_root_user(u), "{u:?}");
        }
        for c in super::ROOT_STEP_CAPS {
            assert!(crate::plan::parse_cap(c).is_ok(), "{c}");
        }
    }
}
