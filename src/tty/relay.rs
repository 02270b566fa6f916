//! husk's side of a `-t` command, driven by the watch's poll loop: bytes
//! from husk's stdin go to the pty master, the master's output goes to
//! husk's stdout (or into the verdict's capture), and a new window size
//! (SIGWINCH) goes to the master, whose kernel side signals the sandbox's
//! foreground job.
//!
//! Nothing here blocks the watch: the master is non-blocking, husk's stdout
//! is written through a non-blocking description of its own where it can
//! be (a terminal or a pipe), and each direction holds at most one buffer,
//! so a command that stops reading (or a reader that stops taking output)
//! stalls only its own direction, like a real terminal; the deadline and
//! forwarded signals keep working.

use super::terminal::{RawMode, size_of_any};
use crate::capture::{Capture, Captured};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::PollFlags;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Where the pty's output goes (the command's stdout and stderr, merged
/// by the terminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtyOutput {
    /// To husk's stdout, as it comes.
    Passthrough,
    /// Into the verdict's `stdout`, bounded to this many bytes (`--json`).
    Capture(u64),
}

impl TtyOutput {
    /// The watch's terminal output for a command with (`tty`) or without a
    /// terminal, and the run's capture limit (`--json`).
    pub fn of(tty: bool, capture: Option<u64>) -> Option<TtyOutput> {
        tty.then_some(match capture {
            Some(limit) => TtyOutput::Capture(limit),
            None => TtyOutput::Passthrough,
        })
    }
}

/// The terminal's end-of-file key (Ctrl-D): typed once when husk's stdin
/// is not a terminal and ends, so a command reading its terminal sees the
/// end of its input as it would at a keyboard.
const VEOF: u8 = 0x04;

/// The most either direction holds before it stops reading.
const BUF: usize = 64 * 1024;

/// Which of the relay's fds a poll event is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Master,
    Stdin,
    Stdout,
}

enum Sink {
    /// husk's stdout; None once it failed (the rest is read and dropped,
    /// so the command is never stuck on a full terminal).
    Out(Option<OwnedFd>),
    Capture(Capture),
}

pub struct Relay {
    master: OwnedFd,
    master_open: bool,
    /// husk's stdin, until its end (or the command's terminal is gone).
    stdin: Option<std::io::Stdin>,
    stdin_is_tty: bool,
    to_master: Vec<u8>,
    to_out: Vec<u8>,
    sink: Sink,
    /// Dropped last: the terminal is restored when the relay goes.
    _raw: Option<RawMode>,
}

impl Relay {
    /// Starts relaying for `master` (the command is about to exec): the
    /// master gets husk's window size, husk's terminal goes raw.
    pub fn start(master: OwnedFd, output: TtyOutput, redact: &crate::redact::Redaction) -> Relay {
        let _ = fcntl(&master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
        if let Some(ws) = size_of_any([stdin.as_fd(), stdout.as_fd()]) {
            let _ = crate::sys::tty::set_window_size(master.as_fd(), &ws);
        }
        let stdin_is_tty = nix::unistd::isatty(stdin.as_fd()).unwrap_or(false);
        let sink = match output {
            TtyOutput::Passthrough => Sink::Out(private_out(stdout.as_fd())),
            TtyOutput::Capture(limit) => Sink::Capture(Capture::new(limit, redact)),
        };
        let raw = if stdin_is_tty { RawMode::enter(stdin.as_fd()) } else { None };
        Relay {
            master,
            master_open: true,
            stdin: Some(stdin),
            stdin_is_tty,
            to_master: Vec::new(),
            to_out: Vec::new(),
            sink,
            _raw: raw,
        }
    }

    /// The fds to poll and for what. husk's stdin is read only while the
    /// command runs (typeahead after its end is left to the caller's shell)
    /// and only when the master took the last bytes.
    pub fn interest(&self, command_running: bool) -> Vec<(End, BorrowedFd<'_>, PollFlags)> {
        let mut v = Vec::with_capacity(3);
        let mut m = PollFlags::empty();
        if self.master_open && self.to_out.len() < BUF {
            m |= PollFlags::POLLIN;
        }
        if self.master_open && !self.to_master.is_empty() {
            m |= PollFlags::POLLOUT;
        }
        if !m.is_empty() {
            v.push((End::Master, self.master.as_fd(), m));
        }
        if let Some(stdin) = &self.stdin
            && command_running
            && self.to_master.is_empty()
        {
            v.push((End::Stdin, stdin.as_fd(), PollFlags::POLLIN));
        }
        if let Sink::Out(Some(fd)) = &self.sink
            && !self.to_out.is_empty()
        {
            v.push((End::Stdout, fd.as_fd(), PollFlags::POLLOUT));
        }
        v
    }

    pub fn ready(&mut self, end: End, revents: PollFlags) {
        match end {
            End::Master => {
                if revents.contains(PollFlags::POLLOUT) {
                    self.write_master();
                }
                if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                    self.read_master();
                }
            }
            End::Stdin => self.read_stdin(),
            End::Stdout => self.write_out(),
        }
    }

    /// SIGWINCH: husk's terminal changed size; so does the sandbox's.
    pub fn resize(&self) {
        if let Some(ws) = size_of_any([std::io::stdin().as_fd(), std::io::stdout().as_fd()]) {
            let _ = crate::sys::tty::set_window_size(self.master.as_fd(), &ws);
        }
    }

    /// Every process of the sandbox let go of the terminal and its output
    /// is delivered (or has nowhere to go).
    pub fn done(&self) -> bool {
        !self.master_open && (self.to_out.is_empty() || matches!(self.sink, Sink::Out(None)))
    }

    /// The captured output (`TtyOutput::Capture`); restores the terminal.
    pub fn finish(self) -> Option<Captured> {
        match self.sink {
            Sink::Capture(c) => Some(c.finish()),
            Sink::Out(_) => None,
        }
    }

    fn read_master(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        let room = match self.sink {
            Sink::Capture(_) => buf.len(),
            Sink::Out(_) => buf.len().min(BUF - self.to_out.len()),
        };
        match nix::unistd::read(&self.master, &mut buf[..room]) {
            Ok(0) => self.master_open = false,
            Ok(n) => match &mut self.sink {
                Sink::Capture(c) => c.push(&buf[..n]),
                Sink::Out(Some(_)) => {
                    self.to_out.extend_from_slice(&buf[..n]);
                    self.write_out();
                }
                Sink::Out(None) => {}
            },
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
            // EIO: every slave fd is closed (the sandbox is gone).
            Err(_) => self.master_open = false,
        }
    }

    fn write_master(&mut self) {
        match nix::unistd::write(&self.master, &self.to_master) {
            Ok(n) => {
                self.to_master.drain(..n);
            }
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
            Err(_) => {
                self.to_master.clear();
                self.stdin = None;
            }
        }
    }

    fn read_stdin(&mut self) {
        let Some(stdin) = &self.stdin else { return };
        let mut buf = [0u8; 4096];
        match nix::unistd::read(stdin.as_fd(), &mut buf) {
            Ok(0) => {
                // A terminal read 0 only on hangup: no key to type then.
                if !self.stdin_is_tty {
                    self.to_master.push(VEOF);
                }
                self.stdin = None;
            }
            Ok(n) => self.to_master.extend_from_slice(&buf[..n]),
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => return,
            Err(_) => self.stdin = None,
        }
        if !self.to_master.is_empty() {
            self.write_master();
        }
    }

    fn write_out(&mut self) {
        let Sink::Out(Some(fd)) = &self.sink else { return };
        match nix::unistd::write(fd, &self.to_out) {
            Ok(n) => {
                self.to_out.drain(..n);
            }
            Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
            Err(_) => {
                self.to_out.clear();
                self.sink = Sink::Out(None);
            }
        }
    }
}

/// husk's stdout, written through a non-blocking open file description
/// of its own when it is a terminal or a pipe (setting O_NONBLOCK on fd 1
/// itself would change it for the caller's shell too, which shares it);
/// anything else (a file) as it is.
fn private_out(stdout: BorrowedFd<'_>) -> Option<OwnedFd> {
    use nix::sys::stat::{SFlag, fstat};
    let kind = fstat(stdout).map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT).ok();
    if matches!(kind, Some(SFlag::S_IFCHR) | Some(SFlag::S_IFIFO)) {
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&stdout));
        let flags = OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        if let Ok(fd) = nix::fcntl::open(path.as_str(), flags, nix::sys::stat::Mode::empty()) {
            return Some(fd);
        }
    }
    stdout.try_clone_to_owned().ok()
}
