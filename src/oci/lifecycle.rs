//! start, state, kill, delete, list: the verbs that act on a container
//! `create` left in the store.

use super::state::{Record, Status, Store};
use super::{DeleteArgs, KillArgs, ListArgs, OciError, cgroups, hooks, log};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

/// Lets a created container's init run its process: opening exec.fifo for
/// reading completes init's blocked open for writing.
pub fn start(store: &Store, id: &str) -> Result<(), OciError> {
    let _lock = store.lock(id)?;
    let record = store.load(id)?;
    match record.status(store) {
        Status::Created => {}
        Status::Stopped => {
            return Err(OciError::WrongStatus {
                id: id.into(),
                status: "stopped",
                what: "cannot start a container that has stopped",
            });
        }
        s => {
            return Err(OciError::WrongStatus {
                id: id.into(),
                status: s.name(),
                what: "cannot start an already running container",
            });
        }
    }
    let fifo = store.fifo(id);
    // O_RDONLY blocks until a writer exists: init is (or will be) blocked
    // opening it for writing, so this returns at once while init lives.
    // Non-blocking first, to notice an init that died meanwhile.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&fifo)
        .map_err(|e| OciError::io(format!("opening {}", fifo.display()), e))?;
    let mut buf = [0u8; 1];
    let n = f.read(&mut buf).map_err(|e| OciError::io(format!("reading {}", fifo.display()), e))?;
    let _ = std::fs::remove_file(&fifo);
    if n == 0 {
        return Err(OciError::Refused(format!("container {id}: its init exited before it was started")));
    }
    // Init holds its end until execve closes it (close-on-exec): EOF means
    // the startContainer hooks ran and the process was executed (or init
    // died trying), which is when the spec runs poststart.
    let mut rest = Vec::new();
    let _ = f.read_to_end(&mut rest);
    if let Err(e) = hooks::run_all("poststart", &record.poststart, &record.hook_state(Status::Running)) {
        // runc: a failing poststart hook is logged; the container runs on.
        log::warn(&e.to_string());
    }
    Ok(())
}

/// Prints runc's state JSON.
pub fn state(store: &Store, id: &str) -> Result<(), OciError> {
    let record = store.load(id)?;
    let status = record.status(store);
    let text = serde_json::to_string_pretty(&record.oci_state(status)).expect("state serializes");
    crate::outln!("{text}");
    Ok(())
}

/// A signal by name (KILL, SIGKILL) or number.
pub fn parse_signal(s: &str) -> Result<Signal, OciError> {
    let bad = || OciError::Refused(format!("unknown signal {s:?}: give a name (TERM, SIGKILL) or a number"));
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| bad());
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    name.parse::<Signal>().map_err(|_| bad())
}

pub fn kill(store: &Store, a: &KillArgs) -> Result<(), OciError> {
    let record = store.load(&a.id)?;
    let sig = parse_signal(&a.signal)?;
    let status = record.status(store);
    if a.all {
        // Every process of the cgroup; on a stopped container there may be
        // none, which is success (the shim sends kill --all 9 after exit).
        for pid in cgroups::pids(&record.cgroups) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
        }
        if let (Some(init), Status::Created | Status::Running | Status::Paused) = (record.init, status) {
            let _ = signal_init(init, sig);
        }
        return Ok(());
    }
    match (record.init, status) {
        (Some(init), Status::Created | Status::Running | Status::Paused) => {
            signal_init(init, sig).map_err(|e| OciError::sys(format!("signalling container {}", a.id), e))
        }
        _ => Err(OciError::NotRunning),
    }
}

/// Signals exactly the recorded init (through a pidfd checked against its
/// start time, so a recycled pid is never signalled).
fn signal_init(init: crate::procref::ProcRef, sig: Signal) -> Result<(), nix::errno::Errno> {
    let fd = init.pidfd().ok_or(nix::errno::Errno::ESRCH)?;
    crate::sys::process::pidfd_send_signal(std::os::fd::AsFd::as_fd(&fd), sig as libc::c_int)
}

pub fn delete(store: &Store, a: &DeleteArgs) -> Result<(), OciError> {
    let record = match store.load(&a.id) {
        Ok(r) => r,
        Err(OciError::State(super::state::StateError::Damaged { .. })) if a.force => {
            return store.remove(&a.id);
        }
        // `delete --force` of a container already gone succeeds, as runc's
        // does: a cleanup repeated after a crash is not an error.
        Err(OciError::NotExist(_)) if a.force => return Ok(()),
        Err(e) => return Err(e),
    };
    let _lock = store.lock(&a.id)?;
    let status = record.status(store);
    match status {
        Status::Stopped | Status::Created | Status::Creating => {}
        _ if a.force => {}
        s => {
            return Err(OciError::WrongStatus {
                id: a.id.clone(),
                status: s.name(),
                what: "cannot delete a container that is not stopped (stop it, or use --force)",
            });
        }
    }
    kill_everything(&record);
    let leaves: Vec<_> = record.cgroups.values().cloned().collect();
    cgroups::remove(&record.made_cgroups, &leaves)?;
    store.remove(&a.id)?;
    // Parents husk made for this root (e.g. /docker), if this was the last
    // container in them.
    if let Err(e) = store.sweep_parents() {
        log::warn(&format!("removing empty parent cgroups: {e}"));
    }
    if let Err(e) = hooks::run_all("poststop", &record.poststop, &record.hook_state(Status::Stopped)) {
        // runc: poststop failures are logged, the delete stands.
        log::warn(&e.to_string());
    }
    Ok(())
}

/// SIGKILL to init and every process in the cgroup, then wait until the
/// cgroup is empty (a frozen cgroup is thawed so the kill lands).
pub fn kill_everything(record: &Record) {
    for dir in record.cgroups.get("freezer").into_iter() {
        let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    }
    if let Some(dir) = record.cgroups.get("") {
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    }
    if let Some(init) = record.init {
        let _ = signal_init(init, Signal::SIGKILL);
    }
    for _ in 0..2000 {
        let pids = cgroups::pids(&record.cgroups);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

pub fn list(store: &Store, a: &ListArgs) -> Result<(), OciError> {
    let records: Vec<Record> = store.ids().iter().filter_map(|id| store.load(id).ok()).collect();
    if a.quiet {
        for r in &records {
            crate::outln!("{}", r.id);
        }
        return Ok(());
    }
    match a.format.as_str() {
        "json" => {
            let list: Vec<serde_json::Value> = records
                .iter()
                .map(|r| {
                    let mut v = r.oci_state(r.status(store));
                    v["rootfs"] = serde_json::json!(r.rootfs);
                    v
                })
                .collect();
            crate::outln!("{}", serde_json::Value::Array(list));
        }
        "table" => {
            crate::outln!("{:<12} {:<10} {:<10} {:<40} {:<31} OWNER", "ID", "PID", "STATUS", "BUNDLE", "CREATED");
            for r in &records {
                let status = r.status(store);
                let pid = if status == Status::Stopped { 0 } else { r.init.map(|p| p.pid).unwrap_or(0) };
                crate::outln!(
                    "{:<12} {:<10} {:<10} {:<40} {:<31} {}",
                    r.id,
                    pid,
                    status.name(),
                    r.bundle.display(),
                    r.created,
                    r.owner
                );
            }
        }
        other => return Err(OciError::Refused(format!("--format {other:?}: use table or json"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("9").unwrap(), Signal::SIGKILL);
        assert_eq!(parse_signal("TERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("SIGUSR1").unwrap(), Signal::SIGUSR1);
        assert_eq!(parse_signal("sigkill").unwrap(), Signal::SIGKILL);
        assert!(parse_signal("NOPE").is_err());
    }
}
