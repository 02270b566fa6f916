//! exec: a process in a running container. An intermediate joins init's
//! cgroup and namespaces (through /proc/<init>/ns/*, user first, mount
//! last), forks the process (so it is inside the pid namespace too) and
//! exits; like init after `create`, the process is then the caller's to
//! reap (the shim's), or ours without --detach. With a terminal (-t or
//! process.terminal, and --console-socket) the process makes its pty from
//! the container's /dev/ptmx and sends the master to the socket before it
//! execs (console.rs).

use super::channel::{self, Msg};
use super::config::{self, Ns, OciProcess, RawProcess};
use super::state::{Status, Store};
use super::{ExecArgs, OciError, cgroups, console, init};
use crate::step::Step;
use crate::sys::process::Forked;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

pub fn exec(store: &Store, a: &ExecArgs) -> Result<i32, OciError> {
    let record = store.load(&a.id)?;
    let init_ref = match (record.init, record.status(store)) {
        (Some(i), Status::Running | Status::Created) => i,
        // runc's words without --ignore-paused. With it, husk still
        // refuses: its joiner enters the frozen cgroup first and would
        // freeze there before the process is set up, hanging exec (and
        // the caller) until a resume.
        (Some(_), Status::Paused) if a.ignore_paused => {
            return Err(OciError::Refused(
                "cannot exec in a paused container: husk does not support --ignore-paused (its exec would \
                 freeze in the container's cgroup before the process is set up); resume it first"
                    .into(),
            ));
        }
        (Some(_), Status::Paused) => {
            return Err(OciError::Refused(
                "cannot exec in a paused container (use --ignore-paused to override)".into(),
            ));
        }
        _ => return Err(OciError::NotRunning),
    };
    let process = process_of(a, &record.exec_defaults)?;
    let terminal = console::wanted(process.terminal || a.tty, a.console_socket.is_some())
        .map_err(|e| OciError::Refused(format!("exec: {e}")))?;
    // Connected here, on the host's side of the namespaces (the path is the
    // caller's); the process that execs sends the pty master through it.
    let console = match (&a.console_socket, terminal) {
        (Some(p), true) => Some(OwnedFd::from(
            std::os::unix::net::UnixStream::connect(p)
                .map_err(|e| OciError::io(format!("--console-socket {}", p.display()), e))?,
        )),
        _ => None,
    };
    let ns: Vec<(Ns, PathBuf)> = Ns::JOIN_ORDER
        .iter()
        .filter(|n| record.namespaces.iter().any(|r| r == n.proc_name()))
        .map(|n| (*n, PathBuf::from(format!("/proc/{}/ns/{}", init_ref.pid, n.proc_name()))))
        .collect();
    if !a.detach {
        nix::sys::prctl::set_child_subreaper(true).map_err(|e| OciError::sys("PR_SET_CHILD_SUBREAPER", e))?;
    }
    let (parent, child) = channel::pair().map_err(|e| OciError::sys("socketpair", e))?;
    let last_cap = super::create::last_cap();
    let one = crate::sys::process::SingleThreaded::check().map_err(|e| OciError::Refused(e.to_string()))?;
    let mid = match crate::sys::process::fork(&one).map_err(|e| OciError::sys("fork", e))? {
        Forked::Child(one) => {
            drop(parent);
            // Non-dumpable before the first setns, and so until execve
            // (inherited by the fork below): nothing in the container may
            // ptrace us or open our /proc/<pid>/exe or fds (CVE-2019-5736,
            // CVE-2016-9962; native exec's joiner does the same).
            if let Err(e) = nix::sys::prctl::set_dumpable(false) {
                child.fail(crate::step::StepError::new(Step::JoinNamespaces, e), "PR_SET_DUMPABLE");
                crate::sys::process::exit_now(1);
            }
            // The cgroup first, while its path is still the host's.
            if cgroups::attach(&record.cgroups, std::process::id() as i32).is_err() {
                child.fail(crate::step::StepError::new(Step::JoinCgroup, nix::errno::Errno::EIO), "");
                crate::sys::process::exit_now(1);
            }
            if let Err(e) = init::join_namespaces(&ns) {
                child.fail(e, "");
                crate::sys::process::exit_now(1);
            }
            match crate::sys::process::fork(&one) {
                Ok(Forked::Child(_)) => {
                    if let Some(sock) = console
                        && let Err(e) = console::attach(sock)
                    {
                        child.fail(e, "exec's terminal");
                        crate::sys::process::exit_now(1);
                    }
                    // Confined and looked up before exec returns, so that a
                    // missing binary or a cwd outside the root is exec's
                    // error, not an exit code nobody explains.
                    let confined = match init::confine(&process, &[child.0.as_raw_fd()], a.preserve_fds, last_cap) {
                        Ok(c) => c,
                        Err(e) => {
                            child.fail(e, &init::what_failed(&process, e));
                            crate::sys::process::exit_now(1)
                        }
                    };
                    // The pty is set up (or none was asked for): exec may
                    // return, the caller's socket has its master.
                    let _ = child.send(&Msg::Ready);
                    drop(child);
                    let e = init::exec_confined(&process, confined);
                    let code = if e.step == Step::Exec && e.errno == nix::errno::Errno::ENOENT { 127 } else { 126 };
                    let _ = std::io::Write::write_all(
                        &mut std::io::stderr(),
                        format!("husk exec: {} failed: {}\n", e.step.name(), e.errno.desc()).as_bytes(),
                    );
                    crate::sys::process::exit_now(code)
                }
                Ok(Forked::Parent { pid, .. }) => {
                    let _ = child.send(&Msg::Pid(pid.as_raw()));
                    crate::sys::process::exit_now(0)
                }
                Err(e) => {
                    child.fail(crate::step::StepError::new(Step::ForkCommand, e), "");
                    crate::sys::process::exit_now(1)
                }
            }
        }
        Forked::Parent { pid, .. } => pid,
    };
    drop(child);
    drop(console);
    let failed = |step: Step, errno, detail: String| {
        let detail = if detail.is_empty() { " (exec)".into() } else { format!(" (exec: {detail})") };
        OciError::Init { step: step.name(), errno, detail }
    };
    // The intermediate's report of the pid and the process's own word that
    // its terminal is in place (so that when exec returns, the shim's
    // ReceiveMaster finds the master sent) come in either order.
    let (mut pid, mut ready) = (None, false);
    while pid.is_none() || !ready {
        match parent.recv() {
            Ok(Msg::Pid(p)) => pid = Some(p),
            Ok(Msg::Ready) => ready = true,
            Ok(Msg::Fail { step, errno, detail }) => return Err(failed(step, errno, detail)),
            _ => return Err(OciError::Refused("exec: the process could not be started".into())),
        }
    }
    let pid = pid.unwrap_or_default();
    let _ = nix::sys::wait::waitpid(mid, None);
    if let Some(p) = &a.pid_file {
        crate::files::write_atomic(p, pid.to_string().as_bytes())
            .map_err(|e| OciError::io(format!("--pid-file {}", p.display()), e))?;
    }
    if a.detach {
        return Ok(0);
    }
    loop {
        match nix::sys::wait::waitpid(None, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(p, c)) if p.as_raw() == pid => return Ok(c),
            Ok(nix::sys::wait::WaitStatus::Signaled(p, s, _)) if p.as_raw() == pid => return Ok(128 + s as i32),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(OciError::sys("waiting for the exec'd process", e)),
        }
    }
}

/// --process FILE, or the command line's CMD with --cwd/--env/--user/--cap
/// over the container's own process settings.
fn process_of(a: &ExecArgs, defaults: &serde_json::Value) -> Result<OciProcess, OciError> {
    let raw: RawProcess = match &a.process {
        Some(path) => {
            let text =
                crate::userfile::read_text("--process", path, 1 << 20).map_err(|e| OciError::Refused(e.to_string()))?;
            serde_json::from_str(&text).map_err(|e| OciError::Refused(format!("--process {}: {e}", path.display())))?
        }
        None => {
            let mut p: RawProcess = serde_json::from_value(defaults.clone()).unwrap_or_default();
            if a.command.is_empty() {
                return Err(OciError::Refused("exec: give --process FILE or a command".into()));
            }
            p.args = a.command.clone();
            // runc: a command-line exec has a terminal only with -t.
            p.terminal = a.tty;
            if let Some(c) = &a.cwd {
                p.cwd = c.clone();
            }
            if p.cwd.is_empty() {
                p.cwd = "/".into();
            }
            // --env K=V replaces the spec's K (runc's init sets them in
            // order, the last one winning); a duplicate would leave the
            // process two values and `env` showing both.
            for kv in &a.env {
                let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
                p.env.retain(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) != key);
                p.env.push(kv.clone());
            }
            if let Some(u) = &a.user {
                let (uid, gid) = u.split_once(':').unwrap_or((u, "0"));
                p.user.uid = uid.parse().map_err(|_| OciError::Refused(format!("--user {u:?}: UID[:GID]")))?;
                p.user.gid = gid.parse().map_err(|_| OciError::Refused(format!("--user {u:?}: UID[:GID]")))?;
            }
            p.user.additional_gids.extend(a.additional_gids.iter().copied());
            if a.no_new_privs {
                p.no_new_privileges = true;
            }
            if !a.cap.is_empty() {
                let caps = p.capabilities.get_or_insert_with(Default::default);
                for set in [&mut caps.bounding, &mut caps.effective, &mut caps.permitted] {
                    set.extend(a.cap.iter().cloned());
                }
            }
            p
        }
    };
    let mut plan = config::process_plan(&raw, "--process").map_err(OciError::Config)?;
    if let Some(sc) = defaults.get("seccomp").filter(|v| !v.is_null()) {
        plan.seccomp = Some(config::seccomp(sc, plan.caps.bounding)?);
    }
    Ok(plan)
}
