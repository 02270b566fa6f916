//! `husk cp` in a gVisor sandbox. A host process cannot join a gVisor
//! sandbox's mount namespace (its files live behind gVisor's gofer and
//! sentry), so the copy runs inside: `runsc exec` starts husk's own binary
//! (bound read-only at `/.husk`) in the `copy` role (`helper::copy_inside`), as the exec's user
//! with the exec's capabilities, rlimits and no_new_privs, and that process
//! packs or unpacks the tar stream with the very code of the native copier
//! (`native::copy::{put, get, list}`: every path resolved from the
//! sandbox's root, which is the copier's own root in there: gVisor 2022-12
//! has no openat2, see `Resolve::OwnRoot`). The stream crosses on the exec's
//! stdin (in) or stdout (out), the copier's JSON report on its stderr.
//!
//! Symlink safety holds twice over: a symlink in the sandbox is resolved
//! by gVisor's kernel inside the sandbox's own view (the host's paths are
//! not in it at all), and within that view never above its root. husk cp
//! on the host only writes or reads a pipe.
//!
//! Every stdio of `runsc exec` is a pipe, never a host device: runsc
//! (as root) chowns a device given as stdio.

use super::{bundle, config, helper};
use crate::backend::native::copy::{Copier, Inside};
use crate::backend::{Attached, CopyStartError};
use crate::copy::Limits;
use crate::copy::unpack::Shape;
use crate::plan::ExecPlan;
use crate::sys::process::pidfd_open;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;

/// Why a copy could not start under gVisor.
#[derive(Debug, thiserror::Error)]
pub enum RunscCopyError {
    #[error("--runtime runsc: {0}")]
    Config(config::RunscError),
    #[error("the copier's process spec: {0}")]
    Bundle(bundle::BundleError),
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("creating the copier's pipes: {0}")]
    Pipe(nix::errno::Errno),
    #[error("running {}: {source}", bin.display())]
    Spawn { bin: PathBuf, source: std::io::Error },
    #[error("pidfd_open of runsc exec: {0}")]
    Pidfd(nix::errno::Errno),
}

/// The exec's process spec, removed once the copy ended.
struct SpecFile(PathBuf);

impl Drop for SpecFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The copier's argv inside gVisor: `copy -- OP PATH SHAPE MAX_BYTES
/// MAX_ENTRIES`.
pub fn copy_argv(op: &Inside, limits: Limits) -> Vec<String> {
    let (verb, path, shape) = match op {
        Inside::Put { dest, shape } => ("put", dest, *shape),
        Inside::Get { path } => ("get", path, Shape::Tree),
        Inside::List { path } => ("list", path, Shape::Tree),
    };
    let shape = match shape {
        Shape::Tree => "tree",
        Shape::Entries => "entries",
    };
    let mut v = vec![helper::PATH_IN_SANDBOX.to_string(), helper::SUBCOMMAND.into(), "copy".into(), "--".into()];
    v.extend([verb.to_string(), path.clone(), shape.into()]);
    v.extend([limits.max_bytes.to_string(), limits.max_entries.to_string()]);
    v
}

/// Starts the copier in the gVisor sandbox `at` (see the module docs).
pub fn start(plan: &ExecPlan, at: &Attached<'_>, op: &Inside, limits: Limits) -> Result<Copier, CopyStartError> {
    start_inner(plan, at, op, limits).map_err(CopyStartError::Gvisor)
}

fn start_inner(plan: &ExecPlan, at: &Attached<'_>, op: &Inside, limits: Limits) -> Result<Copier, RunscCopyError> {
    let cfg = config::RunscConfig::resolve(&at.spec.runsc, at.state_dir).map_err(RunscCopyError::Config)?;
    let dir = config::runs_dir(at.state_dir).join(at.sandbox_id);
    let path = dir.join(format!("exec-copy-{}.json", crate::ids::new_id()));
    let caps = plan.process.caps_keep;
    let nproc = super::limits::workload_nproc_of(at.limits);
    let spec = bundle::process_with_caps(&plan.process, copy_argv(op, limits), "/".into(), caps, plan.last_cap, nproc)
        .map_err(RunscCopyError::Bundle)?;
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap_or_default())
        .map_err(|source| RunscCopyError::Write { path: path.clone(), source })?;
    let spec_file = SpecFile(path);

    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(RunscCopyError::Pipe);
    let (data_r, data_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    // The side of stdin / stdout the stream does not use is an empty pipe
    // (stdin: at EOF) or the report pipe (stdout): never a host device.
    let (stdin, stdout, mine): (OwnedFd, OwnedFd, OwnedFd) = match op {
        Inside::Put { .. } => (data_r, dup(&report_w)?, data_w),
        Inside::Get { .. } | Inside::List { .. } => {
            let (empty_r, empty_w) = pipe()?;
            drop(empty_w);
            (empty_r, data_w, data_r)
        }
    };
    let mut cmd = std::process::Command::new(&cfg.bin);
    cmd.args(cfg.global_args(at.spec.network));
    cmd.arg("exec").arg("--process").arg(&spec_file.0).arg(at.sandbox_id);
    cmd.stdin(Stdio::from(stdin)).stdout(Stdio::from(stdout)).stderr(Stdio::from(report_w));
    // Terminal signals reach husk cp only; the copier ends with its pipes.
    cmd.process_group(0);
    crate::sys::command::die_with_parent(&mut cmd);
    let child = cmd.spawn().map_err(|source| RunscCopyError::Spawn { bin: cfg.bin.clone(), source })?;
    // The Command holds the child's ends of the pipes: dropped here, so
    // the copier alone holds them and EOF means it ended.
    drop(cmd);
    // A std child: its pid is ours until `Copier::finish` reaps it.
    let pidfd = pidfd_open(nix::unistd::Pid::from_raw(child.id() as i32)).map_err(RunscCopyError::Pidfd)?;
    drop(child);
    Ok(Copier::from_parts(pidfd, report_r, mine, Some(Box::new(spec_file))))
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, RunscCopyError> {
    fd.as_fd()
        .try_clone_to_owned()
        .map_err(|e| RunscCopyError::Pipe(crate::step::io_errno(&e).unwrap_or(nix::errno::Errno::EIO)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copier_argv_round_trips_through_its_parser() {
        let limits = Limits { max_bytes: 7, max_entries: 9 };
        for op in [
            Inside::Put { dest: "/tmp/a b".into(), shape: Shape::Entries },
            Inside::Get { path: "/workspace/x".into() },
            Inside::List { path: "/".into() },
        ] {
            let argv = copy_argv(&op, limits);
            assert_eq!(&argv[..4], [helper::PATH_IN_SANDBOX, helper::SUBCOMMAND, "copy", "--"]);
            let (back, l) = helper::copy_parse(&argv[4..]).unwrap();
            assert_eq!(format!("{back:?}"), format!("{op:?}"));
            assert_eq!((l.max_bytes, l.max_entries), (7, 9));
        }
        assert!(helper::copy_parse(&["put".into(), "/x".into()]).is_err());
    }
}
