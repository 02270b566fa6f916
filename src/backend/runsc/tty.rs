//! `-t` under gVisor. Debian's runsc (2022-12) cannot give an exec a
//! terminal (its console socket serves only `exec --detach`, which drops
//! `--process` and the exit status), so the pty is made *inside* gVisor by
//! husk's reaper (`helper::reap`, role `reap-tty`), from the sandbox's own
//! devpts, and the command gets its slave as controlling terminal, stdin,
//! stdout and stderr: gVisor's line discipline does the job control
//! (Ctrl-C interrupts the foreground job, not the shell).
//!
//! Between husk exec and the reaper only pipes cross (runsc's stdio is
//! never a host device): the reaper's stdout carries the terminal's output,
//! its stdin *frames*: typed bytes, and window sizes. On the host husk exec
//! makes a pty pair of its own: the master goes to the watch's relay
//! exactly as a native command's master does (raw mode on the user's
//! terminal, SIGWINCH to the master), and a thread (`host_side`) moves
//! bytes between the raw slave and the pipes, sending the slave's size
//! whenever it changed.

use crate::sys::tty::Winsize;
use nix::errno::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

const DATA: u8 = 0;
const WINSIZE: u8 = 1;

/// Typed bytes as frames (at most 65535 bytes each).
pub fn data_frames(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.len() + 3);
    for chunk in bytes.chunks(u16::MAX as usize) {
        v.push(DATA);
        v.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
        v.extend_from_slice(chunk);
    }
    v
}

/// A window size as a frame.
pub fn winsize_frame(rows: u16, cols: u16) -> Vec<u8> {
    let mut v = vec![WINSIZE];
    v.extend_from_slice(&rows.to_le_bytes());
    v.extend_from_slice(&cols.to_le_bytes());
    v
}

#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Data(Vec<u8>),
    Winsize(u16, u16),
}

/// Frames from a byte stream read in pieces.
#[derive(Default)]
pub struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame; Err on a tag that is none (the stream is not
    /// husk's).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Errno> {
        let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let Some(&tag) = self.buf.first() else { return Ok(None) };
        match tag {
            DATA if self.buf.len() >= 3 => {
                let n = u16_at(&self.buf, 1) as usize;
                if self.buf.len() < 3 + n {
                    return Ok(None);
                }
                let data = self.buf[3..3 + n].to_vec();
                self.buf.drain(..3 + n);
                Ok(Some(Frame::Data(data)))
            }
            WINSIZE if self.buf.len() >= 5 => {
                let f = Frame::Winsize(u16_at(&self.buf, 1), u16_at(&self.buf, 3));
                self.buf.drain(..5);
                Ok(Some(f))
            }
            DATA | WINSIZE => Ok(None),
            _ => Err(Errno::EBADMSG),
        }
    }
}

/// Inside gVisor: a pty pair from the sandbox's devpts (master, slave).
/// gVisor 2022-12 has neither openat2 nor (maybe) TIOCGPTPEER: the slave
/// is opened by its number where the peer ioctl is missing.
pub fn open_inside() -> Result<(OwnedFd, OwnedFd), Errno> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let master = open(c"/dev/pts/ptmx", flags, Mode::empty())?;
    crate::sys::tty::unlock(master.as_fd())?;
    let slave = match crate::sys::tty::open_peer(master.as_fd()) {
        Ok(s) => s,
        Err(_) => {
            let n = crate::sys::tty::pty_number(master.as_fd())?;
            open(format!("/dev/pts/{n}").as_str(), flags, Mode::empty())?
        }
    };
    Ok((master, slave))
}

/// Writes all of `bytes` to `fd` (blocking), retrying EINTR/EAGAIN.
pub fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(0) => return Err(Errno::EPIPE),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The reaper's end of the relay: stdin's frames to the master, the
/// master's output to stdout.
pub struct InsideRelay {
    pub master: OwnedFd,
    /// To the key watcher: one byte per signal to send.
    keys: OwnedFd,
    frames: Frames,
    pub stdin_open: bool,
    pub master_open: bool,
}

impl InsideRelay {
    pub fn new(master: OwnedFd, keys: OwnedFd) -> InsideRelay {
        InsideRelay { master, keys, frames: Frames::default(), stdin_open: true, master_open: true }
    }

    /// stdin is readable: its frames go to the master.
    pub fn from_stdin(&mut self) {
        let mut buf = [0u8; 16384];
        match nix::unistd::read(std::io::stdin().as_fd(), &mut buf) {
            Ok(0) | Err(Errno::EBADF) => self.stdin_open = false,
            Ok(n) => self.frames.push(&buf[..n]),
            Err(Errno::EINTR | Errno::EAGAIN) => return,
            Err(_) => self.stdin_open = false,
        }
        loop {
            match self.frames.next_frame() {
                Ok(Some(Frame::Data(d))) => {
                    if write_all(self.master.as_fd(), &d).is_err() {
                        self.master_open = false;
                    }
                    self.signal_keys(&d);
                }
                Ok(Some(Frame::Winsize(rows, cols))) => {
                    let ws = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
                    let _ = crate::sys::tty::set_window_size(self.master.as_fd(), &ws);
                }
                Ok(None) => break,
                Err(_) => {
                    self.stdin_open = false;
                    break;
                }
            }
        }
    }

    /// Ctrl-C, Ctrl-\\ and Ctrl-Z as the terminal's settings name them
    /// (with ISIG): gVisor 2022-12's line discipline echoes them but
    /// signals no one (measured: a `trap INT` never ran), so the reaper
    /// has SIGINT, SIGQUIT or SIGTSTP sent to the terminal's foreground
    /// group, as Linux's line discipline would: by the key watcher
    /// (`key_watcher`), since gVisor answers TIOCGPGRP only in the
    /// terminal's own session.
    fn signal_keys(&self, typed: &[u8]) {
        use nix::sys::termios::{LocalFlags, SpecialCharacterIndices as Cc, tcgetattr};
        let Ok(t) = tcgetattr(&self.master) else { return };
        if !t.local_flags.contains(LocalFlags::ISIG) {
            return;
        }
        let keys = [
            (t.control_chars[Cc::VINTR as usize], nix::sys::signal::Signal::SIGINT),
            (t.control_chars[Cc::VQUIT as usize], nix::sys::signal::Signal::SIGQUIT),
            (t.control_chars[Cc::VSUSP as usize], nix::sys::signal::Signal::SIGTSTP),
        ];
        for b in typed {
            // _POSIX_VDISABLE (0) turns a key off.
            if let Some((_, sig)) = keys.iter().find(|(k, _)| *k != 0 && k == b) {
                let _ = nix::unistd::write(&self.keys, &[*sig as u8]);
            }
        }
    }

    /// The master is readable: its output goes to stdout. False once it
    /// has no more (every slave closed: EIO).
    pub fn from_master(&mut self) -> bool {
        let mut buf = [0u8; 16384];
        match nix::unistd::read(self.master.as_fd(), &mut buf) {
            Ok(0) | Err(Errno::EIO) => {
                self.master_open = false;
                false
            }
            Ok(n) => {
                let _ = write_all(std::io::stdout().as_fd(), &buf[..n]);
                true
            }
            Err(Errno::EINTR | Errno::EAGAIN) => false,
            Err(_) => {
                self.master_open = false;
                false
            }
        }
    }

    /// What the master still holds once the command ended.
    pub fn drain(&mut self) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        while self.master_open {
            let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
            if !matches!(poll(&mut fds, PollTimeout::from(50u8)), Ok(n) if n > 0) || !self.from_master() {
                break;
            }
        }
    }
}

/// In the command's session (forked by the command's process after it took
/// the terminal, before its execve; its parent leaves at once, so the
/// namespace's init reaps it): for each signal number read from `keys`,
/// signals the terminal's foreground group (`tcgetpgrp` of stdin, the
/// terminal). Ends when `keys` does (the reaper ended). Its own process
/// group, so the keys never signal it; under the command's filter.
pub fn key_watcher(one: &crate::sys::process::SingleThreaded, keys: OwnedFd, filter: Option<&crate::seccomp::Program>) {
    use crate::sys::process::{Forked, exit_now, fork};
    let Ok(Forked::Child(one)) = fork(one) else { return };
    if !matches!(fork(&one), Ok(Forked::Child(_))) {
        exit_now(0);
    }
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    // Nothing of the command's or the init's but the terminal: a status
    // pipe held here would hide the init's death from the reaper.
    use std::os::fd::AsRawFd;
    let mine = keys.as_raw_fd();
    if crate::sys::fd::close_all_except(&[mine]).is_err() {
        // gVisor 2022-12 has no close_range: each open fd by name.
        let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        for fd in open.into_iter().filter(|fd| *fd > 2 && *fd != mine) {
            let _ = nix::unistd::close(fd);
        }
    }
    if let Some(p) = filter
        && crate::sys::seccomp::install_filter(p.installed(), 0).is_err()
    {
        exit_now(125);
    }
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(keys.as_fd(), &mut b) {
            Ok(1) => {
                if let (Ok(sig), Ok(pgrp)) =
                    (nix::sys::signal::Signal::try_from(b[0] as i32), nix::unistd::tcgetpgrp(std::io::stdin()))
                {
                    let _ = nix::sys::signal::killpg(pgrp, sig);
                }
            }
            Err(Errno::EINTR) => {}
            _ => exit_now(0),
        }
    }
}

/// husk exec's side (see the module docs): moves bytes between the raw
/// `slave` of its own pty and the reaper's stdin (`to`, framed) and stdout
/// (`from`) until `from` ends.
pub fn host_side(slave: OwnedFd, to: OwnedFd, from: OwnedFd) -> std::io::Result<std::thread::JoinHandle<()>> {
    if let Ok(mut t) = nix::sys::termios::tcgetattr(&slave) {
        nix::sys::termios::cfmakeraw(&mut t);
        let _ = nix::sys::termios::tcsetattr(&slave, nix::sys::termios::SetArg::TCSANOW, &t);
    }
    std::thread::Builder::new().name("husk-tty".into()).spawn(move || host_loop(slave, to, from))
}

fn host_loop(slave: OwnedFd, to: OwnedFd, from: OwnedFd) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let size = |s: &OwnedFd| crate::sys::tty::window_size(s.as_fd()).ok().map(|w| (w.ws_row, w.ws_col));
    let mut last = size(&slave);
    let mut to = Some(to);
    if let (Some((r, c)), Some(t)) = (last, &to) {
        let _ = write_all(t.as_fd(), &winsize_frame(r, c));
    }
    let mut buf = [0u8; 16384];
    loop {
        let mut fds = [PollFd::new(from.as_fd(), PollFlags::POLLIN), PollFd::new(slave.as_fd(), PollFlags::POLLIN)];
        let ready = match poll(&mut fds, PollTimeout::from(100u8)) {
            Ok(_) => fds.map(|f| f.revents().unwrap_or(PollFlags::empty())),
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        };
        if !ready[0].is_empty() {
            match nix::unistd::read(from.as_fd(), &mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    let _ = write_all(slave.as_fd(), &buf[..n]);
                }
                Err(Errno::EINTR | Errno::EAGAIN) => {}
                Err(_) => return,
            }
        }
        if !ready[1].is_empty() {
            match nix::unistd::read(slave.as_fd(), &mut buf) {
                Ok(n) if n > 0 => {
                    if let Some(t) = &to
                        && write_all(t.as_fd(), &data_frames(&buf[..n])).is_err()
                    {
                        to = None;
                    }
                }
                Err(Errno::EINTR | Errno::EAGAIN) => {}
                // The master (husk's relay) is gone: nothing more is typed.
                _ => to = None,
            }
        }
        let now = size(&slave);
        if now != last {
            last = now;
            if let (Some((r, c)), Some(t)) = (now, &to) {
                let _ = write_all(t.as_fd(), &winsize_frame(r, c));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_in_any_pieces() {
        let mut stream = data_frames(b"ls -l\n");
        stream.extend(winsize_frame(40, 123));
        stream.extend(data_frames(&[3u8]));
        let mut f = Frames::default();
        let mut got = Vec::new();
        for b in &stream {
            f.push(&[*b]);
            while let Some(x) = f.next_frame().unwrap() {
                got.push(x);
            }
        }
        assert_eq!(got, [Frame::Data(b"ls -l\n".to_vec()), Frame::Winsize(40, 123), Frame::Data(vec![3])]);
        f.push(&[7]);
        assert!(f.next_frame().is_err(), "a tag that is not husk's is refused");
    }
}
