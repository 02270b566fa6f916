//! husk as the OCI runtime of real engines (issue 22): Debian's dockerd
//! (`--add-runtime husk=...`, through its containerd and the runc shim)
//! and containerd's `ctr run --runc-binary`, the path Kubernetes' CRI
//! takes. The tests share one private dockerd and one containerd
//! (tests/ocikit, started by the first test that needs each and stopped
//! by pid when this test process exits), and run side by side in them. The threat in every case is an engine that believes
//! something happened that did not: an exit code, a limit, a kill, a
//! removal, a tty, a log line that is not the container's.
//!
//! `HUSK_OCI_RUNTIME=/usr/sbin/runc` runs the same tests against runc.
mod dockerkit;
mod imagekit;
mod ocikit;

use ocikit::*;

fn require_root() {
    assert!(nix::unistd::Uid::effective().is_root(), "the OCI engine tests start dockerd/containerd: run as root");
}

/// `docker run` of a command: its output and exit code come back to the
/// docker client unchanged.
#[test]
fn docker_run_echo_and_exit_code() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&["--rm", IMAGE, "sh", "-c", "echo hello from the container; exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}\ndockerd: {}", show(&o), d.log());
    assert_eq!(out(&o), "hello from the container\n", "{}", show(&o));
    let o = d.run(&["--rm", IMAGE, "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}

/// `docker run --rm`: no state left under the runtime's --root, no cgroup,
/// no mount (the container's overlay included), no process of the runtime.
#[test]
fn docker_run_rm_leaves_nothing() {
    require_root();
    let d = Dockerd::shared();
    let cidfile = d.dir().join(unique("cid"));
    // The root's upperdir names the overlay2 layer dockerd mounted for it.
    let o = d.run(&["--rm", "--cidfile", cidfile.to_str().unwrap(), IMAGE, "grep", " / ", "/proc/self/mountinfo"]);
    assert!(o.status.success(), "{}", show(&o));
    let id = std::fs::read_to_string(&cidfile).unwrap().trim().to_string();
    assert_eq!(id.len(), 64, "cidfile: {id:?}");
    let root_mount = out(&o);
    let layer = root_mount
        .split(',')
        .find_map(|opt| opt.strip_prefix("upperdir="))
        .and_then(|u| u.strip_suffix("/diff"))
        .unwrap_or_else(|| panic!("no overlay upperdir in the container's root mount: {root_mount:?}"))
        .to_string();
    // The removal is done when the engine no longer knows the container.
    wait_for("the container to be removed", || (!d.docker(&["inspect", &id]).status.success()).then_some(()));
    let root = d.runtime_root();
    let left: Vec<_> = std::fs::read_dir(&root)
        .map(|rd| rd.flatten().map(|e| e.file_name()).filter(|n| n.to_string_lossy().contains(&id)).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "state left under the runtime's --root {}: {left:?}", root.display());
    let cg = format!("{}/{id}", d.cgroup_parent);
    assert_eq!(cgroup_dirs(&cg), Vec::<std::path::PathBuf>::new(), "cgroups left for {cg}");
    let mounts: Vec<String> =
        mounts_under(d.dir()).into_iter().filter(|m| m.contains(&id) || m.starts_with(&layer)).collect();
    assert!(mounts.is_empty(), "mounts left for the container: {mounts:?}");
    let procs = pids_mentioning(&id);
    assert!(procs.is_empty(), "processes left that name the container: {procs:?}");
}

/// `docker exec` runs in the running container: its pid namespace, its
/// output and exit code.
#[test]
fn docker_exec_into_running() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&["-d", "--name", "target", IMAGE, "sleep", "1000"]);
    assert!(o.status.success(), "{}", show(&o));
    let o = d.docker(&["exec", "target", "sh", "-c", "echo in-exec; cat /proc/1/cmdline | tr '\\0' ' '; exit 6"]);
    assert_eq!(o.status.code(), Some(6), "{}", show(&o));
    assert_eq!(out(&o), "in-exec\nsleep 1000 ", "the exec sees the container's pid 1: {}", show(&o));
    let o = d.docker(&["exec", "-e", "FOO=bar", "-w", "/tmp", "target", "sh", "-c", "echo $FOO $(pwd)"]);
    assert_eq!(out(&o), "bar /tmp\n", "{}", show(&o));
    let o = d.docker(&["rm", "-f", "target"]);
    assert!(o.status.success(), "{}", show(&o));
}

/// `docker run -it` on a pty the test opens: the container's stdin and
/// stdout are a terminal (the pty husk made from the container's
/// /dev/ptmx and sent over --console-socket), and what is typed reaches it.
#[test]
fn docker_run_it_tty() {
    require_root();
    let d = Dockerd::shared();
    let mut docker = d.daemon.cmd();
    docker.args(["run", "-it", "--rm", "--runtime", "husk", "--network", "none", IMAGE, "sh", "-c"]).arg(
        "test -t 0 && test -t 1 && echo STDIN-AND-STDOUT-ARE-A-TTY; tty; read line; echo \"typed: $line\"; exit 5",
    );
    let (seen, status) = on_pty(docker, "/dev/pts/", b"hello-tty\r");
    assert!(seen.contains("STDIN-AND-STDOUT-ARE-A-TTY"), "not a tty: {seen:?}");
    assert!(seen.contains("/dev/pts/0"), "tty name: {seen:?}");
    assert!(seen.contains("typed: hello-tty"), "input did not reach the container: {seen:?}");
    assert_eq!(status.code(), Some(5), "exit code through the tty: {seen:?}");
}

/// `docker exec -it` into a running container: the exec'd process gets a
/// terminal of its own (exec --console-socket), in the container's devpts.
#[test]
fn docker_exec_it_tty() {
    require_root();
    let d = Dockerd::shared();
    let name = unique("exec-it");
    let o = d.run(&["-d", "--name", &name, IMAGE, "sleep", "1000"]);
    assert!(o.status.success(), "{}", show(&o));
    let mut docker = d.daemon.cmd();
    docker
        .args(["exec", "-it", &name, "sh", "-c"])
        .arg("test -t 0 && test -t 1 && echo EXEC-HAS-A-TTY; tty; read line; echo \"typed: $line\"; exit 4");
    let (seen, status) = on_pty(docker, "/dev/pts/", b"exec-tty\r");
    let _ = d.docker(&["rm", "-f", &name]);
    assert!(seen.contains("EXEC-HAS-A-TTY"), "not a tty: {seen:?}");
    assert!(seen.contains("typed: exec-tty"), "input did not reach the exec: {seen:?}");
    assert_eq!(status.code(), Some(4), "exit code through the tty: {seen:?}");
}

/// `docker stop`: SIGTERM first (the container's trap runs), SIGKILL after
/// the grace period when it ignores it.
#[test]
fn docker_stop_sends_sigterm_then_kill() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&[
        "-d",
        "--name",
        "stubborn",
        IMAGE,
        "sh",
        "-c",
        "trap 'echo got SIGTERM' TERM; echo ready; while :; do sleep 1000 & wait $!; done",
    ]);
    assert!(o.status.success(), "{}", show(&o));
    wait_for("the container's trap to be set", || {
        out(&d.docker(&["logs", "stubborn"])).contains("ready").then_some(())
    });
    let o = d.docker(&["stop", "-t", "3", "stubborn"]);
    assert!(o.status.success(), "{}", show(&o));
    let logs = out(&d.docker(&["logs", "stubborn"]));
    assert!(logs.contains("got SIGTERM"), "SIGTERM was not delivered first: {logs:?}");
    assert_eq!(d.inspect("stubborn", "{{.State.ExitCode}}"), "137", "it did not end by SIGKILL");
    assert_eq!(d.inspect("stubborn", "{{.State.Status}}"), "exited");
}

/// `docker logs`: exactly the container's stdout and stderr, nothing the
/// runtime printed.
#[test]
fn docker_logs_has_only_the_containers_output() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&["--name", "talker", IMAGE, "sh", "-c", "echo to-stdout; echo to-stderr >&2"]);
    assert!(o.status.success(), "{}", show(&o));
    let o = d.docker(&["logs", "talker"]);
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(out(&o), "to-stdout\n", "stdout log: {}", show(&o));
    assert_eq!(err(&o), "to-stderr\n", "stderr log: {}", show(&o));
}

/// `--memory` and `--pids-limit` land in the container's cgroup, and the
/// pids limit stops a fork past it.
#[test]
fn docker_run_memory_and_pids_limits_hold() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&[
        "-d",
        "--name",
        "limited",
        "--memory",
        "64m",
        "--memory-swap",
        "64m",
        "--pids-limit",
        "20",
        IMAGE,
        "sleep",
        "1000",
    ]);
    assert!(o.status.success(), "{}", show(&o));
    let id = d.inspect("limited", "{{.Id}}");
    let cg = format!("{}/{id}", d.cgroup_parent);
    let dirs = cgroup_dirs(&cg);
    let read = |file: &str| -> Option<String> {
        dirs.iter().find_map(|dir| std::fs::read_to_string(dir.join(file)).ok()).map(|s| s.trim().to_string())
    };
    let mem = read("memory.limit_in_bytes").or_else(|| read("memory.max"));
    assert_eq!(mem.as_deref(), Some("67108864"), "memory limit in {cg} ({dirs:?})");
    assert_eq!(read("pids.max").as_deref(), Some("20"), "pids limit in {cg}");
    // ash gives up at the first fork the pids controller refuses.
    let o = d.docker(&["exec", "limited", "sh", "-c", "for i in $(seq 40); do sleep 1000 & done; echo all-forked"]);
    assert!(!out(&o).contains("all-forked"), "40 forks succeeded under --pids-limit 20: {}", show(&o));
    assert!(err(&o).contains("can't fork"), "the fork did not fail as refused: {}", show(&o));
    let current: u64 = read("pids.current").and_then(|s| s.parse().ok()).expect("pids.current");
    assert!(current <= 20, "{current} tasks in a cgroup limited to 20");
    let _ = d.docker(&["rm", "-f", "limited"]);
}

/// `--read-only` makes the root read-only; `--tmpfs` is a writable tmpfs.
#[test]
fn docker_run_read_only_and_tmpfs() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&[
        "--rm",
        "--read-only",
        "--tmpfs",
        "/scratch:size=1m",
        IMAGE,
        "sh",
        "-c",
        "touch /rootfile 2>&1; echo root=$?; touch /scratch/f && echo scratch=$?; grep ' /scratch ' /proc/mounts",
    ]);
    let text = out(&o);
    assert!(o.status.success(), "{}", show(&o));
    assert!(text.contains("Read-only file system") && text.contains("root=1"), "root was writable: {text}");
    assert!(text.contains("scratch=0"), "tmpfs was not writable: {text}");
    assert!(text.contains("tmpfs /scratch tmpfs") && text.contains("size=1024k"), "no 1m tmpfs at /scratch: {text}");
}

/// A container killed by the OOM killer is reported as such by the engine
/// (it reads the event in the container's cgroup).
#[test]
fn docker_oom_reported() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&["--name", "hog", "--memory", "32m", "--memory-swap", "32m", IMAGE, "tail", "/dev/zero"]);
    assert_eq!(o.status.code(), Some(137), "{}", show(&o));
    assert_eq!(d.inspect("hog", "{{.State.OOMKilled}}"), "true", "dockerd did not see the OOM kill");
}

/// A restart policy restarts the container; no exited init is left a
/// zombie anywhere under the daemon (the shim reaps every one).
#[test]
fn docker_restart_policy_no_zombies() {
    require_root();
    let d = Dockerd::shared();
    let o = d.run(&["-d", "--name", "flaky", "--restart", "on-failure:3", IMAGE, "sh", "-c", "exit 1"]);
    assert!(o.status.success(), "{}", show(&o));
    wait_for("three restarts and a final exit", || {
        let s = out(&d.docker(&["inspect", "-f", "{{.RestartCount}} {{.State.Status}}", "flaky"]));
        (s.trim() == "3 exited").then_some(())
    });
    assert_eq!(d.inspect("flaky", "{{.State.ExitCode}}"), "1");
    // Other tests' containers come and go in the same daemon: a zombie
    // seen now must be reaped soon (a leaked one never is).
    let zombies = || {
        let mut roots = d.daemon.helpers();
        roots.extend(pids_mentioning(&d.runtime.display().to_string()));
        descendants(&roots).into_iter().filter(|&p| proc_stat(p).is_some_and(|(s, _)| s == 'Z')).collect::<Vec<_>>()
    };
    let seen = zombies();
    wait_for(&format!("the zombies {seen:?} under containerd and its shims to be reaped"), || {
        let now = zombies();
        (!seen.iter().any(|p| now.contains(p))).then_some(())
    });
}

/// `ctr run --runc-binary RUNTIME`: the runc shim drives the runtime; the
/// command's output and exit code come back.
#[test]
fn ctr_run_with_runc_binary() {
    require_root();
    let c = Containerd::shared();
    let id = unique("run");
    let o = c.run(&["--rm"], &id, &["sh", "-c", "echo hello from ctr; exit 4"]);
    assert_eq!(o.status.code(), Some(4), "{}\ncontainerd: {}", show(&o), c.log());
    assert_eq!(out(&o), "hello from ctr\n", "{}", show(&o));
    let left = out(&c.ctr(&["container", "ls", "-q"]));
    assert!(!left.lines().any(|l| l == id), "container left after --rm: {left}");
}

/// `ctr task exec` into a running task and `ctr task kill`: exec output
/// and code, then the task stops by the signal.
#[test]
fn ctr_exec_and_kill() {
    require_root();
    let c = Containerd::shared();
    let id = unique("exec");
    let o = c.run(&["-d"], &id, &["sleep", "1000"]);
    assert!(o.status.success(), "{}\ncontainerd: {}", show(&o), c.log());
    let o = c.ctr(&["task", "exec", "--exec-id", "e1", &id, "sh", "-c", "echo in-exec; cat /proc/1/cmdline; exit 5"]);
    assert_eq!(o.status.code(), Some(5), "{}", show(&o));
    assert_eq!(out(&o).replace('\0', " "), "in-exec\nsleep 1000 ", "{}", show(&o));
    let o = c.ctr(&["task", "kill", "-s", "SIGKILL", &id]);
    assert!(o.status.success(), "{}", show(&o));
    wait_for("the task to stop", || {
        let ls = out(&c.ctr(&["task", "ls"]));
        ls.lines().any(|l| l.starts_with(&id) && l.contains("STOPPED")).then_some(())
    });
    let o = c.ctr(&["task", "delete", &id]);
    assert!(o.status.success(), "{}", show(&o));
    let o = c.ctr(&["container", "rm", &id]);
    assert!(o.status.success(), "{}", show(&o));
}

/// What fails at create reaches the engine: `docker run` of a missing or
/// non-executable command fails with the runtime's reason in docker's
/// error (it used to exit 127/126 after start with nothing anywhere but
/// the runtime's --log, State.Error empty).
#[test]
fn docker_start_failure_names_reason() {
    require_root();
    let d = Dockerd::shared();
    // docker's own exit codes for these, which it finds in the error's
    // words (runc's): 127 not found, 126 not executable.
    for (cmd, code) in [("/nonexistent", 127), ("nonexistent-in-path", 127), ("/etc/passwd", 126)] {
        let o = d.run(&["--rm", IMAGE, cmd]);
        assert_eq!(o.status.code(), Some(code), "{cmd}: {}", show(&o));
        assert!(err(&o).contains(cmd), "{cmd}: docker's error does not name it: {}", show(&o));
    }
}

/// CVE-2024-21626 through the engine: an image's WORKDIR (here `-w`) of
/// /proc/self/fd/N never puts the container's process in the host's
/// filesystem (a write to ../../../tmp never lands on the host).
#[test]
fn docker_workdir_through_leaked_fd_cannot_reach_host() {
    require_root();
    let d = Dockerd::shared();
    let marker = unique("husk-docker-leak");
    let host_marker = std::path::Path::new("/tmp").join(&marker);
    let attack = format!("echo x > ../../../../../../../../tmp/{marker}");
    for n in 3..=20 {
        let cwd = format!("/proc/self/fd/{n}");
        let o = d.run(&["--rm", "-w", &cwd, IMAGE, "sh", "-c", &attack]);
        assert!(
            !host_marker.exists(),
            "-w {cwd}: the container wrote {} on the host: {}",
            host_marker.display(),
            show(&o)
        );
    }
}
