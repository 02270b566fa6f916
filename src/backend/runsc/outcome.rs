//! What runsc reported, mapped onto the same `Outcome` the native backend
//! produces: exit codes, termination causes and setup failures (a command
//! that is not found is 127 under both).

use crate::outcome::{ErrorReport, Outcome, Termination};
use crate::plan::Plan;
use crate::spawn::phase;
use crate::step::{Phase, Step};
use crate::supervise::Watched;
use crate::sys::process::{ExitStatus, decode_wait_status, pidfd_open, pidfd_send_signal, wait_pidfd};
use nix::errno::Errno;
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::os::fd::AsFd;

/// The two facts husk reads from `runsc run`'s log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunscLog {
    /// The command's raw wait status ("Exiting with status: N"), present
    /// when runsc ran the command to its end.
    pub status: Option<i32>,
    /// runsc's own failure ("FATAL ERROR: ...").
    pub fatal: Option<String>,
}

/// Parses glog-style lines: `I1202 13:56:58.191269  7090 main.go:266] msg`.
pub fn parse_log(text: &str) -> RunscLog {
    let mut log = RunscLog::default();
    for line in text.lines() {
        let msg = line.split_once("] ").map(|(_, m)| m).unwrap_or(line);
        if let Some(n) = msg.strip_prefix("Exiting with status: ") {
            log.status = n.trim().parse().ok();
        } else if let Some(m) = msg.strip_prefix("FATAL ERROR: ") {
            log.fatal = Some(m.trim().to_string());
        }
    }
    log
}

/// Kills and reaps every child husk still has. husk is a child subreaper
/// during a runsc run, so a gofer or sandbox whose runsc died is husk's
/// child now; and husk starts no other long-lived child. Returns how many
/// it reaped.
pub fn reap_descendants() -> usize {
    let me = std::process::id();
    let mut reaped = 0;
    // Each round may uncover grandchildren reparented by the last kills.
    for _ in 0..64 {
        let list = std::fs::read_to_string(format!("/proc/self/task/{me}/children")).unwrap_or_default();
        let pids: Vec<i32> = list.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // Our own child (alive or a zombie): its pid cannot be reused
            // before we reap it, so the pidfd names exactly that process.
            if let Ok(fd) = pidfd_open(Pid::from_raw(pid)) {
                let _ = pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
                let _ = wait_pidfd(fd.as_fd());
                reaped += 1;
            }
        }
    }
    reaped
}

fn ms(from: u64, to: u64) -> f64 {
    crate::outcome::round3(to.saturating_sub(from) as f64 / 1e6)
}

/// The command named in a runsc error, for messages.
fn command(plan: &Plan) -> String {
    plan.process.argv.iter().next().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

/// runsc's failure, classified: a command that cannot be found or run is
/// the `exec` step (127 / 126), as natively; anything else is runsc's.
pub fn classify(plan: &Plan, fatal: &str) -> ErrorReport {
    let cmd = command(plan);
    let exec = |errno: Errno, message: String| ErrorReport::new(Step::Exec, message).with_errno(errno);
    let lower = fatal.to_ascii_lowercase();
    if lower.contains("error finding executable") {
        return exec(Errno::ENOENT, format!("command not found: {cmd} (searched PATH inside the sandbox)"));
    }
    if lower.contains("failed to load") || lower.contains("creating process") {
        if lower.ends_with("no such file or directory") {
            return exec(
                Errno::ENOENT,
                format!("command not found: {cmd} does not exist inside the sandbox (or its interpreter does not)"),
            );
        }
        if lower.ends_with("permission denied") {
            return exec(Errno::EACCES, format!("cannot execute {cmd}: EACCES (Permission denied)"));
        }
        if lower.ends_with("exec format error") {
            return exec(Errno::ENOEXEC, format!("cannot execute {cmd}: ENOEXEC (Exec format error)"));
        }
    }
    ErrorReport::new(Phase::Runsc, format!("runsc failed: {fatal}"))
        .with_hint("run `husk doctor` to check that runsc works on this host".to_string())
}

/// A run whose command husk's helper could not start (`helper::exec`):
/// it exited 127 or 126 having written only `helper::exec_failure_line`
/// with this run's marker on the captured stderr. Becomes the same
/// `setup_failed` at step `exec` as natively, the marker taken out.
pub fn exec_failure(plan: &Plan, marker: &str, o: &mut Outcome) {
    if marker == "-" || o.termination != Termination::Exited || !matches!(o.status, Some(126 | 127)) {
        return;
    }
    let Some(err) = o.stderr.as_mut() else { return };
    let Some((before, errno)) = err.text.rsplit_once(&format!("husk-exec-failed {marker} ")) else { return };
    let Some(errno) = errno.strip_suffix('\n').and_then(|n| n.parse::<i32>().ok()) else { return };
    let errno = Errno::from_raw(errno);
    let kept = before.to_string();
    err.bytes = err.bytes.saturating_sub((err.text.len() - kept.len()) as u64);
    err.text = kept;
    err.base64 = None;
    let cmd = command(plan);
    let message = match errno {
        Errno::ENOENT | Errno::ENOTDIR => format!("command not found: {cmd} (searched PATH inside the sandbox)"),
        e => format!("cannot execute {cmd}: {e:?} ({})", e.desc()),
    };
    o.termination = Termination::SetupFailed;
    o.status = None;
    o.error = Some(ErrorReport::new(Step::Exec, message).with_errno(errno));
}

pub fn outcome_of(plan: &Plan, w: &Watched, log: &RunscLog, t_clone: u64, t_start: u64, t_end: u64) -> Outcome {
    let mut phases: BTreeMap<&'static str, f64> = BTreeMap::new();
    phases.insert("plan", ms(t_start, t_clone));
    if let Some(t) = w.times {
        phases.insert("clone", ms(t_clone, t[phase::CHILD_START]));
        phases.insert("mounts", ms(t[phase::RELEASED], t[phase::MOUNTS]));
        if w.t_exit > 0 {
            // From execve of runsc to its exit: gVisor's boot, the command,
            // and runsc's own teardown of the sandbox.
            phases.insert("runsc", ms(t[phase::MOUNTS], w.t_exit));
        }
    }
    if w.t_exit > 0 {
        phases.insert("teardown", ms(w.t_exit, t_end));
    }
    let mut o = Outcome::blank();
    o.phases_ms = phases;
    o.stdout = w.stdout.clone();
    o.stderr = w.stderr.clone();
    let status = log.status.and_then(decode_wait_status);
    if let Some(e) = &w.failed {
        let (message, hint) = super::super::native::describe(plan, e);
        o.termination = Termination::SetupFailed;
        o.error = Some(ErrorReport::new(e.step, message).with_errno(e.errno).with_hint(hint));
    } else if w.timed_out {
        o.termination = Termination::WallTimeout;
        o.signal = Some(match status {
            Some(ExitStatus::Signaled(s)) => s,
            _ => libc::SIGKILL,
        });
    } else {
        match status {
            Some(status) => o.set_command_status(status),
            None => {
                o.termination = Termination::SetupFailed;
                o.error = Some(match (&log.fatal, w.init) {
                    (Some(f), _) => classify(plan, f),
                    (None, Some(ExitStatus::Signaled(sig))) => ErrorReport::new(
                        Phase::Runsc,
                        format!("runsc was killed by {}", crate::outcome::signal_name(sig)),
                    ),
                    (None, init) => ErrorReport::new(
                        Phase::Runsc,
                        format!("runsc ended ({init:?}) without reporting the command's status"),
                    )
                    .with_hint("run `husk doctor` to check that runsc works on this host".to_string()),
                });
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "I1202 13:56:57.983149    7090 main.go:216] ***************************\n\
        W1202 13:56:57.992596    7090 specutils.go:113] noNewPrivileges ignored.\n\
        I1202 13:59:31.522137   25163 main.go:266] Exiting with status: 35072\n";
    const FAIL: &str = "I1202 13:59:37.007577   25404 network.go:62] Network is disabled\n\
        W1202 13:59:37.022428   25404 util.go:64] FATAL ERROR: running container: starting container: starting root container: starting sandbox: error finding executable \"nosuchcmd\" in PATH [/usr/bin /bin]: no such file or directory\n\
        W1202 13:59:37.022611   25404 main.go:275] Failure to execute command, err: 1\n";

    #[test]
    fn log_gives_the_raw_status_or_the_failure() {
        let ok = parse_log(OK);
        assert_eq!(ok.status, Some(35072));
        assert_eq!(decode_wait_status(35072), Some(ExitStatus::Exited(137)));
        assert_eq!(decode_wait_status(9), Some(ExitStatus::Signaled(9)));
        assert_eq!(ok.fatal, None);
        let bad = parse_log(FAIL);
        assert_eq!(bad.status, None);
        assert!(bad.fatal.as_deref().unwrap().contains("error finding executable"));
        assert_eq!(parse_log(""), RunscLog::default());
    }

    fn plan() -> Plan {
        let root = crate::plan::RootInput {
            source: crate::rootfs::RootSource::Host,
            image: Default::default(),
            passwd: None,
            group: None,
        };
        let spec = crate::spec::Spec::new(vec!["nosuchcmd".into()]);
        Plan::build(spec, &crate::host::HostFacts::probe(), root).unwrap()
    }

    #[test]
    fn runsc_failures_map_to_the_native_exit_codes() {
        let p = plan();
        let cases = [
            (parse_log(FAIL).fatal.unwrap(), "exec", 127),
            ("starting sandbox: creating process: failed to load /nope: no such file or directory".into(), "exec", 127),
            ("starting sandbox: creating process: failed to load /etc/passwd: permission denied".into(), "exec", 126),
            ("starting sandbox: creating process: failed to load /x: exec format error".into(), "exec", 126),
            ("cannot create sandbox: fork/exec /proc/self/exe: no space left on device".into(), "runsc", 125),
        ];
        for (fatal, step, code) in cases {
            let e = classify(&p, &fatal);
            assert_eq!(e.step.name(), step, "{fatal}");
            assert_eq!(Outcome::setup_failed(e).exit_code(), code, "{fatal}");
        }
    }

    #[test]
    fn helper_exec_failures_become_the_exec_step_only_with_this_runs_marker() {
        let p = plan();
        let ended = |status: i32, stderr: &str| {
            let mut o =
                outcome_of(&p, &Watched::default(), &RunscLog { status: Some(status << 8), fatal: None }, 0, 0, 0);
            let text = stderr.to_string();
            o.stderr =
                Some(crate::capture::Captured { bytes: text.len() as u64, text, base64: None, truncated: false });
            o
        };
        let mut o = ended(127, &super::super::helper::exec_failure_line("m1", libc::ENOENT));
        exec_failure(&p, "m1", &mut o);
        assert_eq!((o.termination, o.exit_code()), (Termination::SetupFailed, 127));
        assert_eq!(o.error.as_ref().map(|e| (e.step.name(), e.errno)), Some(("exec", Some(Errno::ENOENT))));
        assert_eq!(o.stderr.as_ref().map(|c| (c.text.as_str(), c.bytes)), Some(("", 0)));
        let mut o = ended(126, &super::super::helper::exec_failure_line("m1", libc::EACCES));
        exec_failure(&p, "m1", &mut o);
        assert_eq!(o.exit_code(), 126);
        // A command that exits 127 itself, or prints another run's marker.
        for (status, text) in [(127, "sh: nosuchcmd: not found\n"), (127, "husk-exec-failed other 2\n")] {
            let mut o = ended(status, text);
            exec_failure(&p, "m1", &mut o);
            assert_eq!((o.termination, o.exit_code()), (Termination::Exited, 127), "{text}");
        }
        let mut o = ended(127, &super::super::helper::exec_failure_line("m1", libc::ENOENT));
        exec_failure(&p, "-", &mut o);
        assert_eq!(o.termination, Termination::Exited, "no marker without capture");
    }

    #[test]
    fn statuses_map_to_terminations() {
        let p = plan();
        let w = Watched::default();
        let log = |s: i32| RunscLog { status: Some(s), fatal: None };
        let o = outcome_of(&p, &w, &log(3 << 8), 0, 0, 0);
        assert_eq!((o.termination, o.exit_code()), (Termination::Exited, 3));
        let o = outcome_of(&p, &w, &log(128 << 8), 0, 0, 0);
        assert_eq!(
            (o.termination, o.exit_code()),
            (Termination::Exited, 128),
            "a command exiting 128 is not runsc failing"
        );
        let o = outcome_of(&p, &w, &log(9), 0, 0, 0);
        assert_eq!((o.termination, o.signal, o.exit_code()), (Termination::Signaled, Some(9), 137));
        let timed = Watched { timed_out: true, ..Default::default() };
        let o = outcome_of(&p, &timed, &RunscLog::default(), 0, 0, 0);
        assert_eq!((o.termination, o.exit_code()), (Termination::WallTimeout, 124));
        let killed = Watched { init: Some(ExitStatus::Signaled(9)), ..Default::default() };
        let o = outcome_of(&p, &killed, &RunscLog::default(), 0, 0, 0);
        assert_eq!((o.termination, o.exit_code()), (Termination::SetupFailed, 125));
    }
}
