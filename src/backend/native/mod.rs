//! The native backend: husk's own namespaces, mounts and confinement.
//! `run` here; a sandbox that lives in `live`, each exec in it in `exec`
//! (entering it: `join`).

pub mod copy;
pub mod exec;
pub mod join;
pub mod live;
pub mod teardown;
pub mod warm;

use super::{Backend, Live, RunIo};
use crate::cgroup::CgroupJoin;
use crate::cgroup::GroupKill;
use crate::cgroup::{CgroupError, CgroupReport};
use crate::isolation::Isolation;
use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::plan::Plan;
use crate::rootfs::MountKind;
use crate::seccomp::SeccompReport;
use crate::spawn::{ChildStdio, SpawnError, now_ns, open_sources, phase, spawn};
use crate::step::{Phase, Step, StepError};
use crate::supervise::{Watch, Watched, signal_fd};
use crate::sys::process::ExitStatus;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;

pub struct Native;

impl Backend for Native {
    fn name(&self) -> &'static str {
        "native"
    }

    fn isolation(&self, plan: &Plan) -> Isolation {
        super::isolation_report(plan, &plan.namespaces.names(), plan.ids.report())
    }

    fn create(&self, plan: &mut Plan, cgroup: Option<&dyn CgroupJoin>) -> Result<Box<dyn Live>, ErrorReport> {
        live::create(plan, cgroup)
    }

    fn run(&self, mut plan: Plan, io: RunIo<'_>) -> Outcome {
        let mut outcome = match run_native(&mut plan, io) {
            Ok((w, t_clone, cgroup, network, published)) => {
                let mut o = run_outcome(&plan, w, t_clone, io);
                add_cgroup(&mut o, cgroup);
                o.network = network;
                o.published = published;
                o
            }
            Err(e) => Outcome::setup_failed(e),
        };
        outcome.duration_ms = ms(io.t_start, now_ns());
        outcome
    }
}

fn ms(from: u64, to: u64) -> f64 {
    crate::outcome::round3(to.saturating_sub(from) as f64 / 1e6)
}

pub(crate) fn spawn_error(e: SpawnError) -> ErrorReport {
    let (step, errno, hint) = match &e {
        SpawnError::Clone { errno, hint, .. } => (Phase::Clone, Some(*errno), hint.clone()),
        SpawnError::Source { errno, .. } => (Phase::Step(Step::OpenSources), Some(*errno), None),
        SpawnError::Idmap { errno, .. } => (Phase::Step(Step::OpenSources), *errno, None),
        SpawnError::Channel(errno) => (Phase::SyncChannel, Some(*errno), None),
        SpawnError::IdMap(crate::userns::IdMapError::Write { source, .. }) => {
            (Phase::WriteIdMaps, crate::step::io_errno(source), None)
        }
        SpawnError::IdMap(_) => (Phase::WriteIdMaps, None, None),
        SpawnError::Cgroup(e) => (Phase::Step(Step::JoinCgroup), e.errno(), None),
        SpawnError::Threads(e) => (Phase::Clone, e.errno(), None),
    };
    ErrorReport::new(step, e.to_string()).with_errno(errno).with_hint(hint)
}

fn cgroup_error(e: CgroupError) -> ErrorReport {
    ErrorReport::new(Phase::Cgroup, e.to_string()).with_errno(e.errno())
}

/// The cgroup's report with its setup and teardown times (ms).
pub(crate) type CgroupRun = Option<(CgroupReport, f64, f64)>;

type NetworkRun = Option<crate::net::account::NetworkReport>;
type Ran = (Watched, u64, CgroupRun, NetworkRun, Vec<crate::net::publish::Published>);

fn run_native(plan: &mut Plan, io: RunIo<'_>) -> Result<Ran, ErrorReport> {
    // Forwarded signals are blocked from here on, so a Ctrl-C during setup
    // is delivered to the sandbox later instead of killing husk with its
    // cgroup half made.
    let tty = plan.process.tty;
    let signals = signal_fd(tty)
        .map_err(|e| ErrorReport::new(Phase::Signals, format!("creating the signalfd: {e}")).with_errno(e))?;
    open_sources(plan).map_err(spawn_error)?;
    // Only the directory the sandbox is cloned into is made before clone;
    // the rest (v1 directories, limits, counters) is made below while the
    // sandbox mounts its root, which waits for it before it runs anything
    // (`Msg::CgroupReady`). Dropping it on any early return removes it.
    let t_cg = now_ns();
    let pending = plan.cgroup.begin(&plan.id).map_err(cgroup_error)?;
    let begin_ns = now_ns() - t_cg;
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
    let pipe_err =
        |e: nix::errno::Errno| ErrorReport::new(Phase::Stdio, format!("creating capture pipes: {e}")).with_errno(e);
    // Under -t the command's output comes through its pty, not pipes.
    let (out, err) = match io.capture {
        Some(_) if !tty => (Some(pipe().map_err(pipe_err)?), Some(pipe().map_err(pipe_err)?)),
        _ => (None, None),
    };
    let null = crate::tty::null_stdio(tty)
        .map_err(|e| ErrorReport::new(Phase::Stdio, format!("opening /dev/null for -t: {e}")).with_errno(e))?;
    let stdio = ChildStdio {
        stdin: null.as_ref().map(|n| n.as_raw_fd()),
        stdout: out.as_ref().map(|(_, w)| w.as_raw_fd()).or(null.as_ref().map(|n| n.as_raw_fd())),
        stderr: err.as_ref().map(|(_, w)| w.as_raw_fd()).or(null.as_ref().map(|n| n.as_raw_fd())),
    };
    let spawned = spawn(plan, stdio, pending.as_ref().map(|c| c as &dyn CgroupJoin)).map_err(spawn_error)?;
    let t_cg = now_ns();
    let cgroup = complete_cgroup(pending, &spawned)?;
    let setup_ms = ms(0, begin_ns + (now_ns() - t_cg));
    let egress = start_egress(plan, &spawned)?;
    let forwarder = start_publish(plan, &spawned)?;
    // Our copies of the write ends must go, or the reads never see EOF.
    let limit = io.capture.unwrap_or(0);
    let stdout = out.map(|(r, _w)| (r, limit));
    let stderr = err.map(|(r, _w)| (r, limit));
    let watched = Watch {
        pidfd: &spawned.pidfd,
        chan: &spawned.chan,
        signals: &signals,
        stdout,
        stderr,
        timeout: plan.timeout,
        kill_grace: plan.kill_grace,
        group: cgroup.as_ref().map(|c| c as &dyn GroupKill),
        seccomp: plan.seccomp.as_ref(),
        stop: None,
        tap: io.tap,
        redact: io.redact,
        tty: crate::tty::relay::TtyOutput::of(tty, io.capture),
        status: crate::supervise::StatusFrom::Wait,
    }
    .run();
    let t_end = now_ns();
    // The verdict's counters are read here, before the handover: the
    // command has been reaped and nothing else of the sandbox is alive (the
    // init is either gone or idle: `Msg::Alone`), so they hold all the
    // sandbox did and none of its teardown. The captured output is complete
    // too (the watch drained it to EOF).
    let (report, leftover) = match cgroup.map(crate::cgroup::SandboxCgroup::read_and_leave) {
        Some((r, l)) => (Some(r), Some(l)),
        None => (None, None),
    };
    let network = egress.map(crate::net::EgressProxy::finish);
    let published = forwarder.map(|f| f.published.clone()).unwrap_or_default();
    let crate::spawn::Spawned { pidfd, chan, t_clone, .. } = spawned;
    // Closing the channel lets an idle init exit.
    drop(chan);
    let init = (watched.alone && watched.init.is_none()).then_some(pidfd);
    let cleanup = teardown::hand_over(teardown::Teardown { init, cgroup: leftover });
    let report = report.map(|mut r| {
        r.cleanup = cleanup;
        (r, setup_ms, ms(t_end, now_ns()))
    });
    Ok((watched, t_clone, report, network, published))
}

/// `--publish`: binds the host ports and starts their forwarder on the
/// socket factory the sandbox's init forked inside its network namespace.
/// Fails closed like the egress proxy: the sandbox is killed (it has run
/// nothing of its own).
pub(crate) fn start_publish(
    plan: &Plan,
    spawned: &crate::spawn::Spawned,
) -> Result<Option<crate::net::publish::Forwarder>, ErrorReport> {
    use std::os::fd::AsFd;
    if plan.spec.publish.is_empty() {
        return Ok(None);
    }
    let kill = || {
        let _ = crate::sys::process::pidfd_send_signal(spawned.pidfd.as_fd(), libc::SIGKILL);
        let _ = crate::sys::process::wait_pidfd(spawned.pidfd.as_fd());
    };
    match spawned.chan.recv_with_fds() {
        Ok(Some((crate::sync::Msg::PublishFactory, fds))) if fds.len() == 1 => {
            let factory = fds.into_iter().next().expect("one fd");
            crate::net::publish::Forwarder::start(&plan.spec.publish, factory).map(Some).map_err(|e| {
                kill();
                ErrorReport::new(Phase::Publish, e.to_string())
            })
        }
        Ok(Some((crate::sync::Msg::Failed(e), _))) => {
            kill();
            let (message, hint) = describe(plan, &e);
            Err(ErrorReport::new(e.step, message).with_errno(e.errno).with_hint(hint))
        }
        other => {
            kill();
            Err(ErrorReport::new(
                Phase::Publish,
                format!(
                    "the sandbox's init did not hand over the publish socket factory (got {:?})",
                    other.map(|o| o.map(|(m, _)| m))
                ),
            ))
        }
    }
}

/// `--network allow=`: takes the listeners the sandbox's init made inside
/// its network namespace and starts the proxy on them. Fails closed: no
/// proxy, no run (the sandbox is killed; it has run nothing of its own).
pub(crate) fn start_egress(
    plan: &Plan,
    spawned: &crate::spawn::Spawned,
) -> Result<Option<crate::net::EgressProxy>, ErrorReport> {
    use std::os::fd::AsFd;
    let Some(spec) = &plan.spec.egress else { return Ok(None) };
    let kill = || {
        let _ = crate::sys::process::pidfd_send_signal(spawned.pidfd.as_fd(), libc::SIGKILL);
        let _ = crate::sys::process::wait_pidfd(spawned.pidfd.as_fd());
    };
    let failed = |message: String| ErrorReport::new(Phase::EgressProxy, message);
    match spawned.chan.recv_with_fds() {
        Ok(Some((crate::sync::Msg::EgressListeners, fds))) if fds.len() == 2 => {
            let mut fds = fds.into_iter();
            let (Some(http), Some(socks)) = (fds.next(), fds.next()) else { unreachable!("two fds") };
            crate::net::EgressProxy::start(spec, http, socks).map(Some).map_err(|e| {
                kill();
                failed(e.to_string())
            })
        }
        Ok(Some((crate::sync::Msg::Failed(e), _))) => {
            kill();
            let (message, hint) = describe(plan, &e);
            Err(ErrorReport::new(e.step, message).with_errno(e.errno).with_hint(hint))
        }
        other => {
            kill();
            Err(failed(format!(
                "the sandbox's init did not hand over the egress proxy's listeners (got {:?})",
                other.map(|o| o.map(|(m, _)| m))
            )))
        }
    }
}

/// Finishes the cgroup the sandbox was cloned into and lets the sandbox
/// go on; on failure the sandbox is killed (it has run nothing of its own).
fn complete_cgroup(
    pending: Option<crate::cgroup::PendingCgroup>,
    spawned: &crate::spawn::Spawned,
) -> Result<Option<crate::cgroup::SandboxCgroup>, ErrorReport> {
    use std::os::fd::AsFd;
    let kill = || {
        let _ = crate::sys::process::pidfd_send_signal(spawned.pidfd.as_fd(), libc::SIGKILL);
        let _ = crate::sys::process::wait_pidfd(spawned.pidfd.as_fd());
    };
    let Some(pending) = pending else { return Ok(None) };
    let cgroup = pending.complete().map_err(|e| {
        kill();
        cgroup_error(e)
    })?;
    let files = cgroup.join_files();
    let sent = if files.is_empty() {
        spawned.chan.send(crate::sync::Msg::CgroupReady)
    } else {
        spawned.chan.send_fds(crate::sync::Msg::CgroupReady, &files)
    };
    // EPIPE / ECONNRESET: the sandbox already failed a step and exited;
    // the watch reports that step.
    if let Err(e) = sent
        && !matches!(e, nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNRESET)
    {
        kill();
        return Err(spawn_error(SpawnError::Channel(e)));
    }
    Ok(Some(cgroup))
}

/// Human description of a failed step, naming the mount it was at.
pub(crate) fn describe(plan: &Plan, e: &StepError) -> (String, Option<String>) {
    let mut msg = format!("setup failed at {}: {:?} ({})", e.step.name(), e.errno, e.errno.desc());
    let mut hint = None;
    if e.step == Step::MountFilesystems
        && let Some(op) = plan.mounts.ops.get(e.detail as usize)
    {
        let what = match &op.kind {
            MountKind::Bind { .. } => "bind mount",
            MountKind::Tmpfs { .. } => "tmpfs",
            MountKind::Proc => "proc",
            MountKind::Sysfs => "sysfs",
            MountKind::Devpts { .. } => "devpts",
            MountKind::Mqueue => "mqueue",
            MountKind::Overlay(_) => "overlay",
            MountKind::Mask => "mask",
            MountKind::ReadOnly | MountKind::SetReadOnly => "read-only remount",
            MountKind::Create(_) | MountKind::Populate(_) => "mount point creation",
        };
        msg.push_str(&format!(" [{what} at /{}]", op.target.to_string_lossy()));
        if e.errno == nix::errno::Errno::EACCES {
            hint = Some("the sandbox's host uid cannot read the source; check its permissions".into());
        }
    }
    if e.step == Step::Exec {
        msg = exec_failure(&plan.process, e.errno);
    }
    if e.step == Step::Seccomp {
        hint = Some(
            "the kernel refused the seccomp filter (EINVAL: built without CONFIG_SECCOMP_FILTER?); \
             --seccomp unconfined runs without one, and the verdict says so"
                .into(),
        );
    }
    if e.step == Step::AssembleRoot && e.errno == nix::errno::Errno::EINVAL {
        hint = Some(match &plan.mounts.report.source {
            Some(src) if plan.mounts.report.mode == "rootfs" => format!(
                "overlayfs refused {src} as a lower layer: give a directory on a regular filesystem (not procfs, sysfs or another overlay's upper dir)"
            ),
            _ => "overlayfs refused the layers; run `husk doctor` to check overlay support".into(),
        });
    }
    (msg, hint)
}

/// Why execve of the command failed, in the words `run` and `exec` share.
pub(crate) fn exec_failure(process: &crate::plan::ProcessPlan, errno: nix::errno::Errno) -> String {
    let cmd = process.argv.iter().next().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    match errno {
        nix::errno::Errno::ENOENT if cmd.contains('/') => {
            format!("command not found: {cmd} does not exist inside the sandbox (or its interpreter does not)")
        }
        nix::errno::Errno::ENOENT => format!("command not found: {cmd} (searched PATH inside the sandbox)"),
        nix::errno::Errno::E2BIG => crate::plan::E2BIG_MESSAGE.into(),
        errno => format!("cannot execute {cmd}: {errno:?} ({})", errno.desc()),
    }
}

/// The phases of a run, from the sandbox's step times.
fn run_phases(w: &Watched, t_clone: u64, io: RunIo<'_>) -> BTreeMap<&'static str, f64> {
    let mut phases: BTreeMap<&'static str, f64> = BTreeMap::new();
    phases.insert("plan", ms(io.t_start, t_clone));
    if let Some(t) = w.times {
        let pairs: [(&'static str, u64, u64); 7] = [
            ("clone", t_clone, t[phase::CHILD_START]),
            ("id_map", t[phase::CHILD_START], t[phase::RELEASED]),
            ("namespaces", t[phase::RELEASED], t[phase::NAMESPACES]),
            ("mounts", t[phase::NAMESPACES], t[phase::MOUNTS]),
            ("pivot", t[phase::MOUNTS], t[phase::PIVOT]),
            ("confine", t[phase::PIVOT], t[phase::CONFINED]),
            ("seccomp", t[phase::CONFINED], t[phase::SECCOMP]),
        ];
        for (name, a, b) in pairs {
            phases.insert(name, ms(a, b));
        }
        if w.t_reaped > 0 {
            phases.insert("run", ms(t[phase::SECCOMP], w.t_reaped));
            phases.insert("teardown", ms(w.t_reaped, w.t_exit.max(w.t_reaped)));
        } else if w.t_exit > 0 {
            phases.insert("run", ms(t[phase::SECCOMP], w.t_exit));
        }
    }
    phases
}

/// A run's outcome: the sandbox's init reports the command's status (an
/// exit code only counts when the command itself was reaped; the init's
/// own code says nothing about it).
fn run_outcome(plan: &Plan, w: Watched, t_clone: u64, io: RunIo<'_>) -> Outcome {
    let phases = run_phases(&w, t_clone, io);
    let status = match w.command.or(w.init) {
        Some(status @ ExitStatus::Exited(_)) if w.command.is_some() => Ok(status),
        Some(status @ ExitStatus::Signaled(_)) => Ok(status),
        _ => Err(ErrorReport::new(
            Phase::Init,
            format!("the sandbox init ended without reporting the command's status ({:?})", w.init),
        )),
    };
    let ended = Ended { command: w.command, status, seccomp: plan.seccomp.as_ref() };
    ended.outcome(w, phases, |e| {
        let (message, hint) = describe(plan, e);
        ErrorReport::new(e.step, message).with_errno(e.errno).with_hint(hint)
    })
}

/// How a watched native command ended, for `run` and `exec` alike.
pub(crate) struct Ended<'a> {
    /// The command's own status, when it was reaped (a timeout reports
    /// the signal it died of).
    pub command: Option<ExitStatus>,
    /// How the command ended when no step failed and no timeout struck:
    /// its status, or why it is unknown.
    pub status: Result<ExitStatus, ErrorReport>,
    /// The filter the command was to run under.
    pub seccomp: Option<&'a crate::seccomp::Program>,
}

impl Ended<'_> {
    /// The outcome: a failed setup step (`describe` words it), husk's
    /// timeout, or the command's status; with the captured output, the
    /// phases and the seccomp report.
    pub(crate) fn outcome(
        self,
        w: Watched,
        phases: BTreeMap<&'static str, f64>,
        describe: impl FnOnce(&StepError) -> ErrorReport,
    ) -> Outcome {
        let mut o = Outcome::blank();
        o.phases_ms = phases;
        o.stdout = w.stdout;
        o.stderr = w.stderr;
        // The filter is in place from install_seccomp on: a failure before
        // it (or at it) ran without one.
        let filtered = w.failed.is_none_or(|e| e.step == Step::Exec);
        if let Some(e) = w.failed {
            o.termination = Termination::SetupFailed;
            o.error = Some(describe(&e));
        } else if w.timed_out {
            o.termination = Termination::WallTimeout;
            o.signal = Some(match self.command {
                Some(ExitStatus::Signaled(s)) => s,
                _ => libc::SIGKILL,
            });
        } else {
            match self.status {
                Ok(status) => o.set_command_status(status),
                Err(e) => {
                    o.termination = Termination::SetupFailed;
                    o.error = Some(e);
                }
            }
        }
        if filtered {
            o.seccomp = Some(SeccompReport::after_run(self.seccomp, &w.seccomp_denied, o.signal));
        }
        o
    }
}

/// The verdict's cgroup parts: the report with its setup and teardown
/// times, or `limits: "none"` without a cgroup.
pub(crate) fn add_cgroup(o: &mut Outcome, cgroup: CgroupRun) {
    match cgroup {
        Some((report, setup_ms, teardown_ms)) => {
            o.phases_ms.insert("cgroup_setup", setup_ms);
            o.phases_ms.insert("cgroup_teardown", teardown_ms);
            o.add_cgroup(report);
        }
        None => o.no_cgroup(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cgroup the kernel refused to attach the sandbox to (EBUSY, ENOENT
    /// of a vanished cgroup...) names its errno in the verdict, not only in
    /// the message text, so a consumer can tell the causes apart.
    #[test]
    fn cgroup_attach_failure_keeps_its_errno_in_the_verdict() {
        let e = CgroupError::Io {
            op: "writing",
            path: "/sys/fs/cgroup/husk/x/cgroup.procs".into(),
            value: Some("1234".into()),
            errno: nix::errno::Errno::EBUSY,
        };
        let r = spawn_error(SpawnError::Cgroup(e));
        assert_eq!(r.step, Phase::Step(Step::JoinCgroup));
        assert_eq!(r.errno, Some(nix::errno::Errno::EBUSY));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!((&v["step"], &v["errno"]), (&json!("join_cgroup"), &json!("EBUSY")));
        assert!(r.message.contains("cgroup.procs"), "{}", r.message);
    }
}
