//! The parent's watch over a running sandbox: one poll loop over the init's
//! pidfd, the sync channel, a signalfd and the capture pipes, with the
//! deadline as poll's timeout. No SIGALRM, no globals, no threads.

use crate::capture::{Capture, Captured};
use crate::cgroup::GroupKill;
use crate::step::StepError;
use crate::stream::{Tap, Which};
use crate::sync::{Channel, MAX_TIMES, Msg};
use crate::sys::process::{ExitStatus, pidfd_send_signal, wait_pidfd};
use crate::tty::relay::{End, Relay, TtyOutput};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// Signals husk forwards to the sandbox instead of dying from them.
pub fn forwarded_signals() -> SigSet {
    let mut s = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT] {
        s.add(sig);
    }
    s
}

/// Blocks the forwarded signals and returns a signalfd for them. Must be
/// called before clone so no signal is lost in between. With a terminal
/// (`-t`) SIGWINCH too: it is not forwarded but resizes the sandbox's
/// terminal.
pub fn signal_fd(tty: bool) -> Result<SignalFd, nix::errno::Errno> {
    let mut set = forwarded_signals();
    if tty {
        set.add(Signal::SIGWINCH);
    }
    crate::sys::signal::block(&set)?;
    SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
}

/// How a watch reaches the command when signalling the watched pid is not
/// the way (runsc: the command lives in gVisor's kernel and is reached only
/// through `runsc kill`). Without it the watch signals the pidfd.
pub trait Stop {
    /// Delivers a forwarded signal, or the grace SIGTERM, to the command.
    fn signal(&self, sig: i32);
    /// Kills every process of the sandbox. On false (or if the watched
    /// process is still there `FORCE_AFTER` later) the watch SIGKILLs it.
    fn kill_all(&self) -> bool;
}

/// How long a `Stop::kill_all` may take to end the watched process before
/// it is killed outright.
const FORCE_AFTER: Duration = Duration::from_secs(3);

pub struct Watch<'a> {
    pub pidfd: &'a OwnedFd,
    pub chan: &'a Channel,
    pub signals: &'a SignalFd,
    pub stdout: Option<(OwnedFd, u64)>,
    pub stderr: Option<(OwnedFd, u64)>,
    pub timeout: Option<Duration>,
    pub kill_grace: Option<Duration>,
    pub group: Option<&'a dyn GroupKill>,
    /// Explain mode: the program whose listener the command sends over the
    /// channel; the watch answers its notifications.
    pub seccomp: Option<&'a crate::seccomp::Program>,
    pub stop: Option<&'a dyn Stop>,
    /// `--json-stream`: every read of a captured stream is also an event
    /// here, as it happens.
    pub tap: Option<&'a Tap>,
    /// What captured output hides (the request's secrets).
    pub redact: &'a crate::redact::Redaction,
    /// `-t`: the command sends its pty's master over the channel; the
    /// watch relays it (`tty::relay`) and its output goes here.
    pub tty: Option<TtyOutput>,
    /// Where the command's status comes from.
    pub status: StatusFrom,
}

/// How a watch learns that the command ended and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFrom {
    /// `pidfd` is a child of ours (the init, or an exec's command): waited
    /// for; the command's own status may also come over the channel.
    Wait,
    /// `pidfd` is not ours to wait for (a warm interpreter's child, reaped
    /// by its parent inside the sandbox): the status comes over the
    /// channel, and the channel's end without one means that parent died.
    Channel,
}

/// What the watch saw.
#[derive(Debug, Default)]
pub struct Watched {
    /// The command's status, as its init reported it.
    pub command: Option<ExitStatus>,
    /// The init's own status (it exits 0 after reporting, or dies by signal).
    pub init: Option<ExitStatus>,
    pub failed: Option<StepError>,
    pub times: Option<[u64; MAX_TIMES]>,
    pub timed_out: bool,
    /// A forwarded signal husk received (SIGINT/SIGTERM...), if any.
    pub interrupted: Option<i32>,
    pub stdout: Option<Captured>,
    pub stderr: Option<Captured>,
    /// Monotonic instant the init was reaped.
    pub t_exit: u64,
    /// Monotonic instant the init reaped the command (0 if it never did).
    pub t_reaped: u64,
    /// Syscalls the seccomp filter denied (explain mode only).
    pub seccomp_denied: crate::seccomp::notify::Denials,
    /// A warm session's call that ran past its timeout: how the session
    /// took it (`Msg::Interrupted`).
    pub call_interrupted: Option<i32>,
    /// The init reported the command's status and that nothing else of
    /// the sandbox is left (`Msg::Alone`): it waits, alive and idle, until
    /// the channel is closed. The watch ended without waiting for its exit
    /// (`init` is then `None`).
    pub alone: bool,
}

struct Stream {
    which: Which,
    fd: Option<OwnedFd>,
    cap: Capture,
    /// One pipe's worth (64 KiB), on the heap and only for a captured
    /// stream: on the stack it made every `Watch::run` probe and fault in
    /// 16 fresh stack pages, capture or not.
    buf: Vec<u8>,
}

impl Stream {
    fn read(&mut self, tap: Option<&Tap>) {
        let Some(fd) = &self.fd else { return };
        let buf = &mut self.buf;
        match nix::unistd::read(fd, buf) {
            Ok(0) => self.close(tap),
            Ok(n) => crate::stream::deliver(self.which, &buf[..n], &mut self.cap, tap),
            Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => {}
            Err(_) => self.close(tap),
        }
    }

    fn close(&mut self, tap: Option<&Tap>) {
        if self.fd.take().is_some()
            && let Some(t) = tap
        {
            t.end(self.which);
        }
    }
}

/// After the init is gone every writer is gone too (the pid namespace is
/// torn down before the init's status is reported); this only bounds the
/// drain if something outside still holds a pipe end.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

impl Watch<'_> {
    pub fn run(self) -> Watched {
        let start = Instant::now();
        let deadline = self.timeout.map(|t| start + t);
        let mut kill_at: Option<Instant> = None;
        let mut out = Watched::default();
        let captured = [self.stdout.is_some(), self.stderr.is_some()];
        let tap = self.tap;
        let redact = self.redact;
        let mut streams: Vec<Stream> = [(Which::Stdout, self.stdout), (Which::Stderr, self.stderr)]
            .into_iter()
            .map(|(which, s)| match s {
                Some((fd, limit)) => {
                    Stream { which, fd: Some(fd), cap: Capture::new(limit, redact), buf: vec![0; 65536] }
                }
                None => Stream { which, fd: None, cap: Capture::new(0, redact), buf: Vec::new() },
            })
            .collect();
        let mut chan_open = true;
        // Only accepted when explain mode asked for it.
        let report = self.seccomp.filter(|p| p.report());
        let mut listener: Option<OwnedFd> = None;
        let mut relay: Option<Relay> = None;
        let mut wanted = Wanted { listener: report.is_some(), pty: self.tty.is_some(), master: None };
        let mut drain_until: Option<Instant> = None;
        // The group first: cgroup.kill takes every member at once, so
        // nothing can fork away while the init's pid namespace collapses.
        let force = |group: Option<&dyn GroupKill>| {
            if let Some(g) = group {
                g.kill_all();
            }
            let _ = pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        };
        // Returns when to force the kill, if `stop` took it on.
        let hard_kill = |group: Option<&dyn GroupKill>| match self.stop {
            Some(s) if s.kill_all() => Some(Instant::now() + FORCE_AFTER),
            _ => {
                force(group);
                None
            }
        };
        let signal = |sig: i32| match self.stop {
            Some(s) => s.signal(sig),
            None => {
                let _ = pidfd_send_signal(self.pidfd.as_fd(), sig);
            }
        };
        let mut force_at: Option<Instant> = None;

        loop {
            let now = Instant::now();
            // A reader of the stream that is behind holds the drain open:
            // what the command wrote is delivered, not cut at DRAIN_LIMIT.
            let tap_full = tap.is_some_and(Tap::full);
            // After `Msg::Alone` nothing of the sandbox writes any more:
            // the output is complete once drained, as after the init's end.
            if out.init.is_some() || (out.alone && out.command.is_some()) {
                let done = streams.iter().all(|s| s.fd.is_none()) && relay.as_ref().is_none_or(Relay::done);
                if done || (drain_until.is_some_and(|d| now >= d) && !tap_full) {
                    break;
                }
            }
            if let Some(d) = deadline
                && now >= d
                && !out.timed_out
                && out.init.is_none()
                && !out.alone
            {
                out.timed_out = true;
                match self.kill_grace {
                    Some(g) if !g.is_zero() => {
                        signal(libc::SIGTERM);
                        kill_at = Some(now + g);
                    }
                    _ => force_at = hard_kill(self.group),
                }
            }
            if let Some(k) = kill_at
                && now >= k
                && out.init.is_none()
                && !out.alone
            {
                force_at = hard_kill(self.group);
                kill_at = None;
            }
            if let Some(f) = force_at
                && now >= f
                && out.init.is_none()
                && !out.alone
            {
                force(self.group);
                force_at = None;
            }

            let drain = drain_until.filter(|_| !tap_full);
            let wake = [deadline.filter(|_| !out.timed_out), kill_at, force_at, drain].into_iter().flatten().min();
            let timeout = match wake {
                Some(w) => PollTimeout::try_from(w.saturating_duration_since(now).as_millis().min(60_000) as u64 + 1)
                    .unwrap_or(PollTimeout::MAX),
                None => PollTimeout::NONE,
            };

            let mut fds: Vec<(u8, BorrowedFd<'_>, PollFlags)> = Vec::new();
            let pollin = PollFlags::POLLIN;
            if out.init.is_none() && self.status == StatusFrom::Wait {
                fds.push((0, self.pidfd.as_fd(), pollin));
            }
            if chan_open {
                fds.push((1, self.chan.fd(), pollin));
            }
            fds.push((2, self.signals.as_fd(), pollin));
            if let Some(l) = &listener {
                fds.push((LISTENER, l.as_fd(), pollin));
            }
            // Over the tap's bound the command's output waits in its pipes
            // (and the command in its writes) until the reader catches up.
            if !tap_full {
                for (i, s) in streams.iter().enumerate() {
                    if let Some(fd) = &s.fd {
                        fds.push((3 + i as u8, fd.as_fd(), pollin));
                    }
                }
            }
            if let Some(t) = tap.filter(|t| t.wants_write()) {
                fds.push((TAP, t.fd(), PollFlags::POLLOUT));
            }
            if let Some(r) = &relay {
                fds.extend(
                    r.interest(out.init.is_none()).into_iter().map(|(end, fd, flags)| (tty_tag(end), fd, flags)),
                );
            }
            let mut pfds: Vec<PollFd<'_>> = fds.iter().map(|(_, fd, flags)| PollFd::new(*fd, *flags)).collect();
            match poll(&mut pfds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            let ready: Vec<(u8, PollFlags)> = fds
                .iter()
                .zip(&pfds)
                .filter_map(|((tag, _, _), p)| p.revents().filter(|r| !r.is_empty()).map(|r| (*tag, r)))
                .collect();

            for (tag, revents) in ready {
                match tag {
                    // POLLHUP without POLLIN: no task uses the filter any
                    // more; a recv now would block forever.
                    LISTENER if !revents.contains(PollFlags::POLLIN) => listener = None,
                    LISTENER => {
                        let (Some(l), Some(p)) = (&listener, report) else { continue };
                        if crate::seccomp::notify::answer(l.as_fd(), &p.filter, &mut out.seccomp_denied).is_err() {
                            listener = None;
                        }
                    }
                    0 => {
                        out.init = wait_pidfd(self.pidfd.as_fd()).ok();
                        out.t_exit = crate::spawn::now_ns();
                        drain_until = Some(Instant::now() + DRAIN_LIMIT);
                        // The channel may still hold the final status.
                        while chan_open {
                            chan_open = read_chan(self.chan, &mut out, &mut listener, &mut wanted);
                        }
                    }
                    1 => {
                        chan_open = read_chan(self.chan, &mut out, &mut listener, &mut wanted);
                        if out.alone && drain_until.is_none() {
                            drain_until = Some(Instant::now() + DRAIN_LIMIT);
                        }
                        if self.status == StatusFrom::Channel && out.init.is_none() {
                            // Its status, or the end of whoever would have
                            // sent it: either way the command is over.
                            let status = match out.command {
                                Some(s) => Some(s),
                                None if !chan_open => Some(ExitStatus::Signaled(libc::SIGKILL)),
                                None => None,
                            };
                            if status.is_some() {
                                out.init = status;
                                out.t_exit = crate::spawn::now_ns();
                                drain_until = Some(Instant::now() + DRAIN_LIMIT);
                            }
                        }
                    }
                    2 => {
                        while let Ok(Some(info)) = self.signals.read_signal() {
                            let sig = info.ssi_signo as i32;
                            if sig == libc::SIGWINCH {
                                // Not forwarded: the new size is, and the
                                // kernel signals the sandbox's foreground job.
                                if let Some(r) = &relay {
                                    r.resize();
                                }
                                continue;
                            }
                            if out.interrupted.is_some() && sig == libc::SIGINT {
                                // A second Ctrl-C: stop waiting for a clean exit.
                                force_at = hard_kill(self.group);
                            } else {
                                signal(sig);
                            }
                            out.interrupted = Some(sig);
                        }
                    }
                    TAP => {
                        if let Some(t) = tap {
                            t.write_some();
                        }
                    }
                    TTY_MASTER | TTY_STDIN | TTY_STDOUT => {
                        if let Some(r) = &mut relay {
                            r.ready(tty_end(tag), revents);
                        }
                    }
                    n => streams[(n - 3) as usize].read(tap),
                }
            }
            // The command's pty arrived: relay it from now on.
            if let (None, Some(master), Some(output)) = (&relay, wanted.master.take(), self.tty) {
                relay = Some(Relay::start(master, output, redact));
            }
        }
        if let Some(t) = tap {
            for s in &mut streams {
                s.close(Some(t));
            }
            t.flush();
        }
        // Restores husk's terminal before anything is reported.
        let tty_capture = relay.and_then(Relay::finish);
        let mut it = streams.into_iter().zip(captured).map(|(s, c)| c.then(|| s.cap.finish()));
        out.stdout = it.next().flatten();
        out.stderr = it.next().flatten();
        // A terminal merges stdout and stderr: all of it is stdout.
        if let (Some(TtyOutput::Capture(limit)), Some(c)) = (self.tty, tty_capture) {
            out.stdout = Some(c);
            out.stderr = Some(Capture::new(limit, redact).finish());
        }
        out
    }
}

/// Poll tags of the relay's fds (`tty::relay::End`).
const TTY_MASTER: u8 = 10;
const TTY_STDIN: u8 = 11;
const TTY_STDOUT: u8 = 12;

fn tty_tag(end: End) -> u8 {
    match end {
        End::Master => TTY_MASTER,
        End::Stdin => TTY_STDIN,
        End::Stdout => TTY_STDOUT,
    }
}

fn tty_end(tag: u8) -> End {
    match tag {
        TTY_MASTER => End::Master,
        TTY_STDIN => End::Stdin,
        _ => End::Stdout,
    }
}

/// The fds the channel may bring that this watch takes (any other is
/// closed), and the pty master once it came.
struct Wanted {
    listener: bool,
    pty: bool,
    master: Option<OwnedFd>,
}

/// Poll tag of the seccomp listener.
const LISTENER: u8 = 9;
/// Poll tag of the `--json-stream` output.
const TAP: u8 = 8;

/// Reads one message; false once the channel is closed. A seccomp listener
/// is kept only when explain mode expects one, a pty master only under
/// `-t`, and only the first (any other fd is closed).
fn read_chan(chan: &Channel, out: &mut Watched, listener: &mut Option<OwnedFd>, wanted: &mut Wanted) -> bool {
    let want_listener = wanted.listener;
    match chan.recv_with_fd() {
        Ok(Some((Msg::PtyMaster, Some(fd)))) if wanted.pty => {
            wanted.pty = false;
            wanted.master = Some(fd);
        }
        Ok(Some((Msg::Times(t), _))) => out.times = Some(t),
        Ok(Some((Msg::Failed(e), _))) => out.failed = Some(e),
        Ok(Some((Msg::Exited { code }, _))) => out.command = Some(ExitStatus::Exited(code)),
        Ok(Some((Msg::Signaled { signal }, _))) => out.command = Some(ExitStatus::Signaled(signal)),
        Ok(Some((Msg::SeccompListener, fd))) if want_listener => *listener = fd,
        Ok(Some((Msg::Reaped { at }, _))) => out.t_reaped = at,
        Ok(Some((Msg::Alone, _))) => {
            out.alone = true;
            out.t_exit = crate::spawn::now_ns();
        }
        Ok(Some((Msg::Interrupted { restarted }, _))) => {
            out.call_interrupted = Some(restarted);
            // 2: the interpreter ended on its own (`exit`), no timeout.
            out.timed_out |= restarted != 2;
        }
        Ok(Some((
            Msg::Release
            | Msg::SeccompListener
            | Msg::Namespaces { .. }
            | Msg::Joined
            | Msg::CgroupReady
            | Msg::PtyMaster
            | Msg::EgressListeners
            | Msg::PublishFactory,
            _,
        ))) => {}
        Ok(None) | Err(_) => return false,
    }
    true
}
