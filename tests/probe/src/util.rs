//! Small shared pieces: errno naming, the fork-wrapped attempt, size parsing
//! and the one-line JSON report.

use serde_json::{Map, Value, json};
use std::ffi::CString;

/// What a subcommand prints (one JSON line) and how it exits.
pub struct Report {
    /// The attempted operation succeeded (exit 0) or was denied/failed (exit 1).
    pub ok: bool,
    pub fields: Value,
}

impl Report {
    pub fn new(ok: bool, fields: Value) -> Self {
        Report { ok, fields }
    }

    pub fn print(self, cmd: &str) -> i32 {
        let mut map = Map::new();
        map.insert("cmd".into(), json!(cmd));
        map.insert("ok".into(), json!(self.ok));
        if let Value::Object(extra) = self.fields {
            map.extend(extra);
        }
        println!("{}", Value::Object(map));
        if self.ok { 0 } else { 1 }
    }
}

pub struct Usage(pub String);

pub fn usage(msg: impl Into<String>) -> Usage {
    Usage(msg.into())
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Symbolic name of an errno value (the ones a probe meets), else `E<n>`.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::EPIPE => "EPIPE",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENOKEY => "ENOKEY",
        libc::EDQUOT => "EDQUOT",
        libc::ESTALE => "ESTALE",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNRESET => "ECONNRESET",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EBADMSG => "EBADMSG",
        libc::EKEYREJECTED => "EKEYREJECTED",
        _ => return format!("E{e}"),
    };
    name.to_string()
}

/// `{"ok": .., "errno": ..}` for a raw syscall return value.
pub fn outcome(ret: i64, err: i32) -> Value {
    if ret >= 0 {
        json!({"ok": true, "ret": ret})
    } else {
        json!({"ok": false, "errno": errno_name(err), "errno_num": err})
    }
}

/// `{"ok": .., "errno": ..}` for a std io result.
pub fn io_outcome<T>(r: &std::io::Result<T>) -> Value {
    match r {
        Ok(_) => json!({"ok": true}),
        Err(e) => {
            let n = e.raw_os_error().unwrap_or(0);
            json!({"ok": false, "errno": errno_name(n), "errno_num": n, "message": e.to_string()})
        }
    }
}

pub fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| CString::new("\u{fffd}").expect("no NUL"))
}

/// The result of one raw attempt: the syscall's return value and errno.
#[derive(Clone, Copy, Debug)]
pub struct Attempt {
    pub ret: i64,
    pub errno: i32,
}

impl Attempt {
    pub fn of(ret: libc::c_long) -> Self {
        let errno = if ret < 0 { errno() } else { 0 };
        Attempt { ret, errno }
    }

    pub fn fail(errno: i32) -> Self {
        Attempt { ret: -1, errno }
    }
}

/// How a forked attempt ended.
pub enum Forked {
    Done(Attempt),
    /// The child died before reporting (e.g. a seccomp kill or SIGSEGV).
    Killed(i32),
    /// The child exited without reporting.
    Vanished(i32),
}

/// Runs `f` in a forked child so that whatever it changes (root, namespaces,
/// personality, a tracee) and however it dies (seccomp KILL, SIGSEGV from
/// `int 0x80`) stays out of the probe's own process.
pub fn forked(f: impl FnOnce() -> Attempt) -> std::io::Result<Forked> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the probe is single-threaded, so the child may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let a = f();
        let mut buf = [0u8; 12];
        buf[..8].copy_from_slice(&a.ret.to_ne_bytes());
        buf[8..].copy_from_slice(&a.errno.to_ne_bytes());
        // SAFETY: writing a local buffer to our pipe, then leaving without
        // running the parent's atexit handlers or destructors.
        unsafe {
            libc::write(fds[1], buf.as_ptr().cast(), buf.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end, which we own.
    unsafe { libc::close(fds[1]) };
    let mut buf = [0u8; 12];
    let mut got = 0usize;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of a local buffer.
        let n = unsafe { libc::read(fds[0], buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    // SAFETY: closing the read end we own.
    unsafe { libc::close(fds[0]) };
    let status = wait_pid(pid);
    if got == buf.len() {
        let ret = i64::from_ne_bytes(buf[..8].try_into().expect("8 bytes"));
        let errno = i32::from_ne_bytes(buf[8..].try_into().expect("4 bytes"));
        return Ok(Forked::Done(Attempt { ret, errno }));
    }
    if libc::WIFSIGNALED(status) {
        Ok(Forked::Killed(libc::WTERMSIG(status)))
    } else {
        Ok(Forked::Vanished(libc::WEXITSTATUS(status)))
    }
}

/// waitpid that retries on EINTR; returns the raw status (0 if it fails).
pub fn wait_pid(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 || errno() != libc::EINTR {
            return status;
        }
    }
}

/// `123`, `4K`, `64M`, `1G` (binary units), `1.5G`.
pub fn parse_size(s: &str) -> Result<u64, Usage> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let mult: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(usage(format!("bad size unit in {s:?}"))),
            };
            (&t[..i], mult)
        }
        None => (t, 1),
    };
    let n: f64 = num.parse().map_err(|_| usage(format!("bad size {s:?}")))?;
    if n.is_nan() || n < 0.0 {
        return Err(usage(format!("bad size {s:?}")));
    }
    Ok((n * mult as f64) as u64)
}

pub fn parse_secs(s: &str) -> Result<f64, Usage> {
    let v: f64 = s.trim_end_matches('s').parse().map_err(|_| usage(format!("bad seconds {s:?}")))?;
    if v >= 0.0 { Ok(v) } else { Err(usage(format!("bad seconds {s:?}"))) }
}

pub fn read_lossy(path: &str) -> Option<String> {
    std::fs::read(path).ok().map(|b| String::from_utf8_lossy(&b).into_owned())
}

pub fn readlink(path: &str) -> Option<String> {
    std::fs::read_link(path).ok().map(|p| p.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123").ok(), Some(123));
        assert_eq!(parse_size("4K").ok(), Some(4096));
        assert_eq!(parse_size("64MiB").ok(), Some(64 << 20));
        assert_eq!(parse_size("1.5g").ok(), Some(3 << 29));
        assert!(parse_size("x").is_err());
        assert!(parse_size("5Q").is_err());
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::EPERM), "EPERM");
        assert_eq!(errno_name(9999), "E9999");
    }
}
