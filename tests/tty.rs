//! `-t/--tty`, driven as a user drives it: husk runs on a real pty whose
//! master the test holds (the user's terminal), as the session leader with
//! that pty as its controlling terminal (`setsid -c`), so keys, window-size
//! changes and SIGWINCH travel exactly as they do from a terminal emulator.
mod common;
mod sandboxkit;

use common::*;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::pty::{Winsize, openpty};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a step may take on a loaded host before the test gives up (a
/// bound on waiting, never an assertion about speed).
const PATIENCE: Duration = Duration::from_secs(60);

/// husk on a pty of the test's: the test is the terminal.
struct Term {
    master: OwnedFd,
    slave: OwnedFd,
    slave_path: PathBuf,
    child: Child,
    seen: Vec<u8>,
}

impl Term {
    /// `husk <args>` with the pty (sized rows x cols) as its stdin, stdout,
    /// stderr and controlling terminal.
    fn spawn(args: &[&str], rows: u16, cols: u16) -> Term {
        Term::spawn_with(husk_bin().as_path(), args, rows, cols, None)
    }

    /// Like `spawn`; `stdin_from` replaces husk's stdin (a FIFO path)
    /// while the pty stays its controlling terminal, stdout and stderr.
    fn spawn_with(husk: &Path, args: &[&str], rows: u16, cols: u16, stdin_from: Option<&Path>) -> Term {
        let ws = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        let pty = openpty(Some(&ws), None).expect("openpty");
        // openpty's fds are inheritable: husk must get the terminal only
        // as its stdio, as from a shell.
        for fd in [&pty.master, &pty.slave] {
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)).expect("FD_CLOEXEC");
        }
        let slave_path = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&pty.slave)))
            .expect("the slave's path");
        let io = || Stdio::from(pty.slave.try_clone().expect("dup slave"));
        let mut cmd = Command::new("setsid");
        cmd.arg("-c");
        match stdin_from {
            None => {
                cmd.arg(husk).args(args);
            }
            Some(fifo) => {
                cmd.args(["sh", "-c", "f=$1; shift; exec \"$@\" < \"$f\"", "sh"]).arg(fifo).arg(husk).args(args);
            }
        }
        let child = cmd.stdin(io()).stdout(io()).stderr(io()).spawn().expect("spawn setsid -c husk");
        nix::fcntl::fcntl(&pty.master, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("O_NONBLOCK");
        Term { master: pty.master, slave: pty.slave, slave_path, child, seen: Vec::new() }
    }

    /// Types `bytes` on the terminal.
    fn send(&self, bytes: &[u8]) {
        let mut off = 0;
        while off < bytes.len() {
            match nix::unistd::write(&self.master, &bytes[off..]) {
                Ok(n) => off += n,
                Err(nix::errno::Errno::EAGAIN) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("writing to the terminal: {e}"),
            }
        }
    }

    /// Reads what husk printed for up to `limit`; false when the terminal
    /// closed.
    fn pump(&mut self, limit: Duration) -> bool {
        let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(limit.as_millis() as u64).unwrap_or(PollTimeout::MAX);
        if poll(&mut fds, ms).unwrap_or(0) == 0 {
            return true;
        }
        let mut buf = [0u8; 4096];
        match nix::unistd::read(&self.master, &mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.seen.extend_from_slice(&buf[..n]);
                true
            }
            Err(nix::errno::Errno::EAGAIN) => true,
            Err(_) => false,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Waits until the terminal shows `needle` (panics with the screen
    /// after PATIENCE).
    fn expect(&mut self, needle: &str) {
        let end = Instant::now() + PATIENCE;
        while !self.text().contains(needle) {
            assert!(Instant::now() < end, "the terminal never showed {needle:?}; it shows:\n{}", self.text());
            self.pump(Duration::from_millis(100));
        }
    }

    /// husk's exit code, reading its output meanwhile.
    fn wait(&mut self) -> i32 {
        let end = Instant::now() + PATIENCE;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait for husk") {
                while self.pump(Duration::from_millis(50)) && self.has_more() {}
                return st.code().unwrap_or(-1);
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                panic!("husk did not end; the terminal shows:\n{}", self.text());
            }
            self.pump(Duration::from_millis(50));
        }
    }

    fn has_more(&self) -> bool {
        let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) > 0
    }

    /// The terminal's settings as `stty -g` prints them.
    fn settings(&self) -> String {
        let out = Command::new("stty").arg("-F").arg(&self.slave_path).arg("-g").output().expect("stty -g");
        assert!(
            out.status.success(),
            "stty -F {} -g: {}",
            self.slave_path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Resizes the terminal as a terminal emulator does: the kernel sends
    /// SIGWINCH to its foreground job (husk).
    fn resize(&self, rows: u16, cols: u16) {
        let out = Command::new("stty")
            .arg("-F")
            .arg(&self.slave_path)
            .args(["rows", &rows.to_string(), "cols", &cols.to_string()])
            .output()
            .expect("stty rows cols");
        assert!(out.status.success(), "stty resize: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Every process in the pid namespace of the sandboxed process whose argv
/// holds `marker` (husk itself, outside, holds it too).
fn sandbox_pids(marker: &str) -> Vec<i32> {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let ours = ns("self");
    let Some(theirs) =
        host_pids_with(marker).into_iter().map(|p| ns(&p.to_string())).find(|n| n.is_some() && *n != ours)
    else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| ns(&p.to_string()) == theirs)
        .collect()
}

fn busybox_run(extra: &[&str], cmd: &[&str]) -> Vec<String> {
    let mut args: Vec<String> =
        vec!["run".into(), "-t".into(), "--rootfs".into(), busybox_rootfs().display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(cmd.iter().map(|s| s.to_string()));
    args
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

mod rootless {
    use super::*;

    /// The command's stdin, stdout and stderr are a terminal, and it is
    /// the command's controlling terminal (/dev/tty opens).
    #[test]
    fn tty_stdin_is_a_terminal_inside() {
        let args = busybox_run(
            &[],
            &["sh", "-c", "test -t 0 && test -t 1 && test -t 2 && exec 3</dev/tty && echo TTY-OK-$((6*7))"],
        );
        let mut t = Term::spawn(&refs(&args), 24, 80);
        t.expect("TTY-OK-42");
        assert_eq!(t.wait(), 0, "{}", t.text());
    }

    /// The size of the user's terminal is the sandbox's at the start, and
    /// follows when the user's terminal is resized (SIGWINCH to husk).
    #[test]
    fn winsize_propagates() {
        let script = "stty size | sed 's/^/SIZE=/'; while read x; do [ \"$x\" = q ] && exit 0; stty size | sed 's/^/SIZE=/'; done";
        let args = busybox_run(&[], &["sh", "-c", script]);
        let mut t = Term::spawn(&refs(&args), 31, 97);
        t.expect("SIZE=31 97");
        t.resize(40, 123);
        // Each empty line asks for the size again; the new one shows once
        // husk has passed the change on.
        let end = Instant::now() + PATIENCE;
        while !t.text().contains("SIZE=40 123") {
            assert!(Instant::now() < end, "the new size never reached the sandbox:\n{}", t.text());
            t.send(b"\n");
            t.pump(Duration::from_millis(200));
        }
        t.send(b"q\n");
        assert_eq!(t.wait(), 0, "{}", t.text());
    }

    /// Ctrl-C is a byte for the sandbox's terminal: its line discipline
    /// interrupts the foreground job (sleep) only; the interactive shell
    /// around it, husk and the sandbox live on.
    #[test]
    fn tty_job_control_ctrl_c_stops_foreground_only() {
        let marker = format!("{}", 40000 + std::process::id() % 20000);
        let args = busybox_run(&[], &["sh", "-i"]);
        let mut t = Term::spawn(&refs(&args), 24, 80);
        t.expect("# ");
        t.send(format!("sleep {marker}; echo after-sleep\n").as_bytes());
        let sleeping = || host_pids_with(&format!("sleep\0{marker}")).len() == 1;
        assert!(wait_until(PATIENCE, sleeping), "sleep never started:\n{}", t.text());
        t.send(b"\x03");
        assert!(wait_until(PATIENCE, || !sleeping()), "Ctrl-C did not stop the foreground sleep:\n{}", t.text());
        t.send(b"echo alive-$((6*7))\n");
        t.expect("alive-42");
        t.send(b"exit 7\n");
        assert_eq!(t.wait(), 7, "the shell did not survive Ctrl-C (husk must exit with its code):\n{}", t.text());
    }

    /// husk's terminal is raw while the command runs (keys go to the
    /// sandbox) and restored after: at the command's end, at a timeout and
    /// after a forwarded SIGTERM.
    #[test]
    fn terminal_is_restored_after_the_run() {
        for (how, extra, code) in
            [("exit", &[][..], 3), ("timeout", &["--timeout", "2s"][..], 124), ("sigterm", &[][..], 143)]
        {
            let marker = format!("{}", 30000 + (std::process::id() % 9000) + code as u32);
            let script = match how {
                "exit" => format!("sleep {marker}; exit 3"),
                _ => format!("exec sleep {marker}"),
            };
            let args = busybox_run(extra, &["sh", "-c", &script]);
            let mut t = Term::spawn(&refs(&args), 24, 80);
            let before = t.settings();
            let running = || host_pids_with(&format!("sleep\0{marker}")).len() == 1;
            assert!(wait_until(PATIENCE, running), "{how}: the command never started:\n{}", t.text());
            assert_ne!(t.settings(), before, "{how}: husk's terminal is not raw while the command runs");
            match how {
                "exit" => {
                    for p in host_pids_with(&format!("sleep\0{marker}")) {
                        let _ =
                            nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
                    }
                }
                "sigterm" => {
                    let husk = nix::unistd::Pid::from_raw(t.child.id() as i32);
                    nix::sys::signal::kill(husk, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM husk");
                }
                _ => {}
            }
            assert_eq!(t.wait(), code, "{how}: {}", t.text());
            assert_eq!(t.settings(), before, "{how}: husk left its terminal changed");
        }
    }

    /// `husk exec -t` into a live sandbox: the exec's own terminal, sized
    /// like the user's.
    #[test]
    fn exec_tty_into_live_sandbox() {
        let s = super::sandboxkit::Sbx::new();
        let id = s.create(&[]);
        let state = s.state.path().display().to_string();
        let script = "test -t 0 && exec 3</dev/tty && echo EXEC-TTY-$((6*7)); stty size | sed 's/^/SIZE=/'";
        let mut t = Term::spawn(&["--state-dir", &state, "exec", "-t", &id, "--", "sh", "-c", script], 27, 81);
        t.expect("EXEC-TTY-42");
        t.expect("SIZE=27 81");
        assert_eq!(t.wait(), 0, "{}", t.text());
        // The sandbox takes the next exec as before.
        let (out, code) = s.sh(&id, "echo next");
        assert_eq!((out.trim(), code), ("next", 0));
    }
}

/// TIOCSTI (type into a terminal's input) on every terminal fd the
/// sandbox has and on /dev/tty lands in the sandbox's own pty, which the
/// sandbox reads back; nothing reaches the user's terminal, and no process
/// of the sandbox holds it. husk reads a FIFO here instead of the user's
/// terminal, so a character injected there would stay in its input queue.
#[test]
fn tiocsti_cannot_reach_host_terminal() {
    let dir = TempDir::new("tty-tiocsti");
    let fifo = dir.path().join("stdin");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    // Held open for writing (and reading, so neither open blocks).
    let feed =
        nix::fcntl::open(&fifo, OFlag::O_RDWR | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty()).expect("open fifo");
    let marker = unique("tiocsti");
    let script = r#"
import fcntl, os, sys, termios
targets = [("fd0", 0), ("fd1", 1), ("fd2", 2), ("devtty", os.open("/dev/tty", os.O_RDWR))]
for name, fd in targets:
    try:
        for c in ("INJ-" + name + "\n").encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        print(name, "readback", sys.stdin.readline().strip(), flush=True)
    except OSError as e:
        print(name, "refused", e.errno, flush=True)
print("READY", flush=True)
sys.stdin.readline()
"#;
    let mut t = Term::spawn_with(
        husk_bin().as_path(),
        &["run", "-t", "--", "python3", "-c", script, &marker],
        24,
        80,
        Some(&fifo),
    );
    t.expect("READY");
    let text = t.text();
    for name in ["fd0", "fd1", "fd2", "devtty"] {
        let landed_home = text.contains(&format!("{name} readback INJ-{name}"));
        let refused = text.contains(&format!("{name} refused"));
        assert!(
            landed_home || refused,
            "TIOCSTI on {name} went neither to the sandbox's terminal nor was refused:\n{text}"
        );
    }
    // No process of the sandbox holds the user's terminal.
    let user_tty = nix::sys::stat::stat(&t.slave_path).expect("stat the user's terminal");
    let pids = sandbox_pids(&marker);
    assert!(pids.len() >= 2, "the sandbox's init and python are not found: {pids:?}");
    for pid in pids {
        for fd in
            std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default()
        {
            if let Ok(st) = nix::sys::stat::stat(&fd.path()) {
                assert!(
                    (st.st_dev, st.st_rdev) != (user_tty.st_dev, user_tty.st_rdev),
                    "sandbox process {pid} holds the user's terminal as {}",
                    fd.path().display()
                );
            }
        }
    }
    nix::unistd::write(&feed, b"go\n").expect("write the fifo");
    assert_eq!(t.wait(), 0, "{}", t.text());
    // Nothing was typed into the user's terminal.
    nix::fcntl::fcntl(&t.slave, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("O_NONBLOCK");
    let mut buf = [0u8; 256];
    match nix::unistd::read(&t.slave, &mut buf) {
        Err(nix::errno::Errno::EAGAIN) => {}
        other => panic!("the user's terminal has input after the run: {other:?} {:?}", String::from_utf8_lossy(&buf)),
    }
}

/// With --json the pty's output (stdout and stderr merged, as a terminal
/// merges them) is the verdict's stdout.
#[test]
fn tty_json_captures_the_terminal_as_stdout() {
    let args = busybox_run(&["--json"], &["sh", "-c", "echo to-out; echo to-err >&2; test -t 1 && echo was-tty"]);
    let mut t = Term::spawn(&refs(&args), 24, 80);
    assert_eq!(t.wait(), 0, "{}", t.text());
    let text = t.text();
    let json = text.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no verdict: {text}"));
    let v: serde_json::Value = serde_json::from_str(json).expect("verdict");
    assert_eq!(stdout_of(&v), "to-out\r\nto-err\r\nwas-tty\r\n", "{v:#}");
    assert_eq!(stderr_of(&v), "", "{v:#}");
}

/// -t with --json-stream is refused before anything runs, saying why.
#[test]
fn tty_with_json_stream_is_refused() {
    let out = husk(&["run", "-t", "--json-stream", "--", "true"]).output().expect("husk");
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--json-stream") && text.contains("--tty"), "{text}");
}

/// -t under gVisor is refused before anything runs (exit 125, a clear
/// reason), never half made.
#[test]
fn tty_under_runsc_is_refused_clearly() {
    require_root!();
    require_runsc!();
    let out = husk(&["run", "-t", "--runtime", "runsc", "--json", "--", "true"]).output().expect("husk");
    let v = verdict_of(&out);
    assert_eq!(out.status.code(), Some(125), "{v:#}");
    assert_eq!(v["error"]["step"], "backend", "{v:#}");
    assert!(v["error"]["message"].as_str().unwrap_or("").contains("--tty"), "{v:#}");
}

/// `exec -t` into a gVisor sandbox: a terminal from gVisor's own devpts
/// (made by husk's reaper inside the sandbox), sized like the user's, and
/// job control by gVisor's line discipline: Ctrl-C interrupts the
/// foreground sleep only; the interactive shell, husk and the sandbox live
/// on, and husk exits with the shell's code.
#[test]
fn runsc_tty_job_control() {
    require_root!();
    require_runsc!();
    let s = sandboxkit::Sbx::new();
    let root = busybox_rootfs().display().to_string();
    let id = s.create_with(&["--runtime", "runsc", "--rootfs", &root]);
    let state = s.state.path().display().to_string();
    let script = "test -t 0 && test -t 1 && test -t 2 && echo EXEC-TTY-$((6*7)); stty size | sed 's/^/SIZE=/'; tty";
    let mut t = Term::spawn(&["--state-dir", &state, "exec", "-t", &id, "--", "sh", "-c", script], 27, 81);
    t.expect("EXEC-TTY-42");
    t.expect("SIZE=27 81");
    t.expect("/dev/pts/");
    assert_eq!(t.wait(), 0, "{}", t.text());

    let marker = format!("{}", 40000 + std::process::id() % 20000);
    let mut t = Term::spawn(&["--state-dir", &state, "exec", "-t", &id, "--", "sh", "-i"], 24, 80);
    t.expect("# ");
    // (The sandbox is busy with this exec: the sleep is seen through the
    // terminal, not by another exec. A sleep that Ctrl-C did not stop
    // would hold the shell for hours, and `alive` would never show.)
    t.send(format!("echo started-$((6*7)); sleep {marker}; echo after-sleep\n").as_bytes());
    t.expect("started-42");
    let settle = Instant::now() + Duration::from_secs(1);
    while Instant::now() < settle {
        t.pump(Duration::from_millis(100));
    }
    t.send(b"\x03");
    t.send(b"echo alive-$((6*7))\n");
    t.expect("alive-42");
    t.send(b"exit 7\n");
    assert_eq!(t.wait(), 7, "the shell did not survive Ctrl-C (husk must exit with its code):\n{}", t.text());
    // The window size follows the user's terminal.
    let script =
        "stty size | sed 's/^/SIZE=/'; while read x; do [ \"$x\" = q ] && exit 0; stty size | sed 's/^/SIZE=/'; done";
    let mut t = Term::spawn(&["--state-dir", &state, "exec", "-t", &id, "--", "sh", "-c", script], 31, 97);
    t.expect("SIZE=31 97");
    t.resize(40, 123);
    let end = Instant::now() + PATIENCE;
    while !t.text().contains("SIZE=40 123") {
        assert!(Instant::now() < end, "the new size never reached the sandbox:\n{}", t.text());
        t.send(b"\n");
        t.pump(Duration::from_millis(200));
    }
    t.send(b"q\n");
    assert_eq!(t.wait(), 0, "{}", t.text());
    let (out, code) = s.sh(&id, "echo next");
    assert_eq!((out.trim(), code), ("next", 0));
    s.rm(&id);
}
