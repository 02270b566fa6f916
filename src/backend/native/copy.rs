//! `husk cp` in a native sandbox: a *copier*, forked from husk cp, joins
//! the sandbox's user and mount namespaces by the fds its supervisor
//! handed over (as an exec's joiner does, `super::join`), takes the
//! identity of the sandbox's user with `run`'s confinement steps, and
//! packs or unpacks a tar stream that husk cp reads or writes over a pipe.
//! So every file is created by the sandbox's user in the sandbox's own
//! view (ownership is the sandbox's, a read-only mount refuses with EROFS,
//! its rlimits hold), never by the host writing into an overlay from
//! outside, and every path is resolved from the sandbox's root with
//! openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS).
//!
//! The copier is born in the exec's cgroup leaf (CLONE_INTO_CGROUP): the
//! pages it writes into a tmpfs are charged to the sandbox, not the host.
//! It is non-dumpable before its first setns and never enters the
//! sandbox's pid namespace, so nothing inside can name, signal or ptrace
//! it (the module comment of `super::join` has the reasoning); it never
//! execs, so it stays non-dumpable until it exits.

use super::join::PlaceError;
use crate::cgroup::CgroupJoin;
use crate::copy::unpack::{Resolve, Shape, Unpacker, open_target};
use crate::copy::{CopyError, Limits, Report, pack::Packer, tarw::TarWriter};
use crate::spawn::command::{Confinement, confine};
use crate::spawn::fail;
use crate::step::{AtStep, Step, StepError};
use crate::sync::{Channel, Msg};
use crate::sys::Errno;
use crate::sys::process::{Forked, SingleThreaded, ThreadsError, exit_now, wait_pidfd};
use nix::fcntl::OFlag;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// What the copier does inside.
#[derive(Clone, Debug)]
pub enum Inside {
    /// Unpack the stream read from the pipe at `dest` (absolute).
    Put { dest: String, shape: Shape },
    /// Pack `path` (absolute) into the pipe.
    Get { path: String },
    /// The entries of the directory `path` (absolute), as a JSON array
    /// (`copy::list::Entry`) into the pipe.
    List { path: String },
}

/// Everything the copier needs, built before the fork.
pub struct CopyJoin<'a> {
    /// The sandbox's user and mount namespaces (CLONE_NEW* flag, fd), in
    /// join order.
    pub namespaces: Vec<(libc::c_int, OwnedFd)>,
    pub confinement: Confinement<'a>,
    pub cgroup: Option<&'a dyn CgroupJoin>,
    pub op: Inside,
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum CopierError {
    #[error("starting the copier (clone3): {0}")]
    Clone(Errno),
    #[error("copier channel: {0}")]
    Channel(Errno),
    #[error("attaching the copier to the exec's cgroup: {0}")]
    Cgroup(crate::cgroup::CgroupError),
    #[error("entering the sandbox failed at {}: {:?} ({})", .0.step.name(), .0.errno, .0.errno.desc())]
    Step(StepError),
    #[error("the copier ended without a word{0}")]
    Vanished(String),
    #[error("before starting the copier: {0}")]
    Threads(#[from] ThreadsError),
    /// The copy itself failed inside the sandbox.
    #[error(transparent)]
    Copy(CopyError),
}

/// A copier that runs: husk cp's end of the data pipe, and how it ends.
pub struct Copier {
    pidfd: OwnedFd,
    report: OwnedFd,
    /// Write the stream here (`Put`) or read it from here (`Get`).
    pub data: OwnedFd,
    /// What the backend keeps until the copier ended (runsc: the exec's
    /// files in the run directory).
    keep: Option<Box<dyn std::any::Any + Send>>,
}

impl Copier {
    /// A copier another backend started: `pidfd` ends when it ended,
    /// `report` carries its JSON `Result<Report, CopyError>`.
    pub fn from_parts(
        pidfd: OwnedFd,
        report: OwnedFd,
        data: OwnedFd,
        keep: Option<Box<dyn std::any::Any + Send>>,
    ) -> Copier {
        Copier { pidfd, report, data, keep }
    }

    /// Waits for the copier (after the data pipe was closed or drained)
    /// and returns what it reported.
    pub fn finish(self) -> Result<Report, CopierError> {
        let Copier { pidfd, report, data, keep } = self;
        drop(data);
        let mut text = Vec::new();
        let _ = std::fs::File::from(report).take(1 << 20).read_to_end(&mut text);
        let status = wait_pidfd(pidfd.as_fd());
        drop(keep);
        match serde_json::from_slice::<Result<Report, CopyError>>(&text) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(CopierError::Copy(e)),
            Err(_) => {
                let said = String::from_utf8_lossy(&text).trim().to_string();
                let said = if said.is_empty() { said } else { format!(": {said}") };
                Err(CopierError::Vanished(match status {
                    Ok(s) => format!(" ({s:?}){said}"),
                    Err(_) => said,
                }))
            }
        }
    }
}

/// Starts the copier; returns once it is inside the sandbox, confined.
pub fn start(j: CopyJoin<'_>) -> Result<Copier, CopierError> {
    let one = SingleThreaded::check()?;
    let (parent_end, child_end) = Channel::pair().map_err(CopierError::Channel)?;
    let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(CopierError::Channel);
    let (data_r, data_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    let (mine, theirs) = match j.op {
        Inside::Put { .. } => (data_w, data_r),
        Inside::Get { .. } | Inside::List { .. } => (data_r, data_w),
    };
    let (forked, born_inside) = super::join::fork_toward(&one, j.cgroup).map_err(CopierError::Clone)?;
    match forked {
        Forked::Child(_alone) => {
            drop((parent_end, mine, report_r));
            copier(&j, &child_end, born_inside, theirs, report_w)
        }
        Forked::Parent { pid, pidfd } => {
            drop((child_end, theirs, report_w));
            let pidfd = pidfd.expect("clone asked for a pidfd");
            let kill = || {
                let _ = crate::sys::process::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                let _ = wait_pidfd(pidfd.as_fd());
            };
            super::join::place(pid, &pidfd, born_inside, j.cgroup, &parent_end).map_err(|e| match e {
                PlaceError::Cgroup(e) => CopierError::Cgroup(e),
                PlaceError::Channel(e) => CopierError::Channel(e),
            })?;
            drop(j);
            match parent_end.recv() {
                Ok(Some(Msg::Joined)) => Ok(Copier { pidfd, report: report_r, data: mine, keep: None }),
                Ok(Some(Msg::Failed(e))) => {
                    let _ = wait_pidfd(pidfd.as_fd());
                    Err(CopierError::Step(e))
                }
                Ok(_) => {
                    let _ = wait_pidfd(pidfd.as_fd());
                    Err(CopierError::Vanished(String::new()))
                }
                Err(e) => {
                    kill();
                    Err(CopierError::Channel(e))
                }
            }
        }
    }
}

/// The copier: never returns.
fn copier(j: &CopyJoin<'_>, chan: &Channel, born_inside: bool, data: OwnedFd, report: OwnedFd) -> ! {
    super::join::settle(j.cgroup, chan, born_inside);
    if let Err(e) = enter(j, chan, &data, &report) {
        fail(chan, e);
    }
    if chan.send(Msg::Joined).is_err() {
        exit_now(125);
    }
    let result = match &j.op {
        Inside::Put { dest, shape } => put(dest, *shape, Resolve::InRoot, j.limits, data),
        Inside::Get { path } => get(path, Resolve::InRoot, j.limits, data),
        Inside::List { path } => list(path, Resolve::InRoot, j.limits, data),
    };
    let text = serde_json::to_vec(&result).unwrap_or_default();
    let _ = nix::unistd::write(&report, &text);
    exit_now(if result.is_ok() { 0 } else { 1 })
}

/// Non-dumpable, fds closed, namespaces joined, the bounding set cut, then
/// `run`'s confinement (identity, capabilities, rlimits, no_new_privs).
fn enter(j: &CopyJoin<'_>, chan: &Channel, data: &OwnedFd, report: &OwnedFd) -> Result<(), StepError> {
    prctl::set_pdeathsig(Signal::SIGKILL).at(Step::JoinNamespaces)?;
    if chan.peer_gone() {
        exit_now(125);
    }
    prctl::set_dumpable(false).at(Step::JoinNamespaces)?;
    let mut keep: Vec<RawFd> = vec![chan.fd().as_raw_fd(), data.as_raw_fd(), report.as_raw_fd()];
    keep.extend(j.namespaces.iter().map(|(_, fd)| fd.as_raw_fd()));
    crate::sys::fd::close_all_except(&keep).at(Step::CloseFds)?;
    for (flag, fd) in &j.namespaces {
        nix::sched::setns(fd, nix::sched::CloneFlags::from_bits_retain(*flag)).at(Step::JoinNamespaces)?;
    }
    for (_, fd) in &j.namespaces {
        let _ = nix::unistd::close(fd.as_raw_fd());
    }
    let c = &j.confinement;
    crate::sys::caps::drop_bounding(crate::sys::caps::all_caps(c.last_cap), c.process.caps_keep).at(Step::DropCaps)?;
    confine(c, chan)
}

fn root() -> Result<OwnedFd, CopyError> {
    nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
        .map_err(|e| CopyError::fs("/", e))
}

/// The copy in, from the sandbox's root (also run by the copier inside
/// gVisor, `backend::runsc::copy`, with `Resolve::OwnRoot`).
pub(crate) fn put(
    dest: &str,
    shape: Shape,
    resolve: Resolve,
    limits: Limits,
    data: OwnedFd,
) -> Result<Report, CopyError> {
    let root = root()?;
    let target = open_target(root.as_fd(), dest, resolve, shape)?;
    let mut input = std::io::BufReader::with_capacity(64 << 10, std::fs::File::from(data));
    let report = Unpacker::new(target, limits).run(&mut input)?;
    // What follows the end-of-archive marker (a tar's record padding) is
    // read and dropped: a writer still sending it must not get EPIPE for a
    // copy that worked.
    let _ = std::io::copy(&mut input, &mut std::io::sink());
    Ok(report)
}

pub(crate) fn get(path: &str, resolve: Resolve, limits: Limits, data: OwnedFd) -> Result<Report, CopyError> {
    let root = root()?;
    let (parent, name) = crate::copy::split_source(root.as_fd(), path, resolve)?;
    let out = std::io::BufWriter::with_capacity(64 << 10, std::fs::File::from(data));
    let shown_root = crate::copy::split_path(path).map(|(p, _)| p).unwrap_or("/");
    let mut p = Packer { out: TarWriter::new(out), limits, report: Report::default(), shown_root };
    p.add(parent.as_fd(), &name, name.to_bytes())?;
    p.finish().map(|(_, r)| r)
}

pub(crate) fn list(path: &str, resolve: Resolve, limits: Limits, data: OwnedFd) -> Result<Report, CopyError> {
    let root = root()?;
    let entries = crate::copy::list::list(root.as_fd(), path, resolve, limits)?;
    let text = serde_json::to_vec(&entries).map_err(|e| CopyError::Stream(e.to_string()))?;
    std::io::Write::write_all(&mut std::fs::File::from(data), &text).map_err(CopyError::io)?;
    Ok(Report { entries: entries.len() as u64, ..Report::default() })
}
