//! Warm interpreters and sessions (docs/warm.md): the shim husk starts
//! inside a live sandbox (`shim.py`, embedded in the binary and passed as
//! `python3 -c`, so nothing of it sits in the sandbox's filesystem) and the
//! wire between husk and it.
//!
//! The control socket is a SOCK_SEQPACKET pair made by the supervisor: the
//! shim's end is its stdin, the other end stays with the supervisor, which
//! hands a copy to each admitted `husk exec --code` (like the namespace
//! fds). Nothing inside the sandbox can connect to it: it has no name.
//!
//! One call: husk exec sends the word `call` with five fds: the request (a
//! sealed memfd: one JSON header line, then the code), the call's stdin,
//! stdout, stderr, and one end of a fresh status channel
//! (`sync::Channel`), on which the shim answers in husk's own records:
//! `Joined` with the pidfd of the process that runs the call, `Release`
//! back from husk once that process is in the exec's cgroup (fork mode),
//! then `Exited`/`Signaled` (and `Interrupted` before it for a session call
//! past its timeout).
//!
//! A zygote forks the next call's child ahead (a spare) and says `spare
//! SEQ` with its pidfd; the supervisor moves it into the leaf it will hand
//! the next `exec --code` and answers `placed SEQ`. Only a placed spare
//! takes a call, and husk exec still checks that the call's process is in
//! its leaf (moving it there if not), so the handoff never depends on the
//! two agreeing.

use crate::spec::{Language, WarmMode, WarmSpec};
use nix::errno::Errno;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// The shim's source: the supervisor sends it as the first message on the
/// control socket.
pub const SHIM: &str = include_str!("shim.py");

/// What `python3 -c` runs: reads the shim from the control socket (fd 0)
/// and runs it, so the process's command line stays short.
pub const BOOT: &str =
    "import socket as s;c=s.socket(fileno=0);b=c.recv(1<<20);c.detach();exec(compile(b,'<husk-warm-shim>','exec'))";

/// How long a shim may take to import its modules and say it is ready.
pub const READY_LIMIT: Duration = Duration::from_secs(120);

/// The interpreter that runs the shim (looked up on the sandbox's PATH).
pub const INTERPRETER: &str = "python3";

#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error("the warm interpreter could not start: {0}")]
    Failed(String),
    #[error(
        "the warm interpreter ended before it was ready (is python3 on the sandbox's PATH? `husk exec ID -- python3 -V` tells)"
    )]
    Vanished,
    #[error("the warm interpreter did not get ready within {}s", READY_LIMIT.as_secs())]
    Slow,
    #[error("the warm interpreter runs in a pid namespace of its own, but reported pid {0}: refusing it")]
    NotIsolated(i64),
    #[error("talking to the warm interpreter: {0}")]
    Socket(Errno),
}

/// The shim's command line: `python3 -c BOOT MODE LANG [MODULES...]`.
pub fn argv(w: &WarmSpec) -> Vec<String> {
    let mode = match w.mode {
        WarmMode::Fork => "fork",
        WarmMode::Session => "session",
    };
    let mut a = vec![INTERPRETER.to_string(), "-c".into(), BOOT.into(), mode.into(), w.language.name().into()];
    a.extend(w.modules.iter().cloned());
    a
}

/// The shim's first word on the control socket.
#[derive(serde::Deserialize, Debug)]
struct Ready {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    pid: i64,
}

/// Waits for the shim to say it is ready (its modules imported). A fork
/// mode shim must be the init of its own pid namespace (pid 1).
pub fn await_ready(ctl: BorrowedFd<'_>, mode: WarmMode) -> Result<(), WarmError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = std::time::Instant::now() + READY_LIMIT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(WarmError::Slow);
        }
        let mut fds = [PollFd::new(ctl, PollFlags::POLLIN)];
        let t = PollTimeout::try_from(left.as_millis().min(60_000) as u64).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, t) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => break,
            Err(e) => return Err(WarmError::Socket(e)),
        }
    }
    let mut buf = vec![0u8; 8192];
    let n = loop {
        match nix::sys::socket::recv(ctl.as_raw_fd(), &mut buf, nix::sys::socket::MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(WarmError::Socket(e)),
            Ok(n) => break n,
        }
    };
    if n == 0 {
        return Err(WarmError::Vanished);
    }
    let ready: Ready =
        serde_json::from_slice(&buf[..n]).map_err(|e| WarmError::Failed(format!("unreadable ready message: {e}")))?;
    if !ready.ok {
        return Err(WarmError::Failed(ready.error.unwrap_or_else(|| "no reason given".into())));
    }
    if mode == WarmMode::Fork && ready.pid != 1 {
        return Err(WarmError::NotIsolated(ready.pid));
    }
    Ok(())
}

/// What one call asks of the shim besides its code.
#[derive(serde::Serialize)]
pub struct CallHead<'a> {
    /// The exec's environment, as `KEY=VALUE` pairs split once.
    pub env: Vec<(&'a str, &'a str)>,
    pub cwd: &'a str,
    /// A session's own deadline for the call (it interrupts the call at
    /// it); a zygote's child is killed by husk exec instead.
    pub timeout_ms: Option<u64>,
}

impl<'a> CallHead<'a> {
    pub fn new(envp: impl Iterator<Item = &'a CStr>, cwd: &'a str, timeout: Option<Duration>) -> CallHead<'a> {
        let env = envp.filter_map(|e| e.to_str().ok()).filter_map(|e| e.split_once('=')).collect();
        CallHead { env, cwd, timeout_ms: timeout.map(|t| t.as_millis().max(1) as u64) }
    }
}

/// The request as the shim reads it: a memfd holding the header line and
/// the code, sealed against writes (the shim only reads it).
pub fn request(head: &CallHead<'_>, code: &[u8]) -> Result<OwnedFd, Errno> {
    let mut line = serde_json::to_vec(head).map_err(|_| Errno::EINVAL)?;
    line.push(b'\n');
    sealed(&[&line, code])
}

/// A memfd holding `parts`, sealed against any change; its offset at the
/// end (whoever reads it seeks to the start).
pub fn sealed(parts: &[&[u8]]) -> Result<OwnedFd, Errno> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(c"husk-call", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
    for part in parts {
        let mut rest: &[u8] = part;
        while !rest.is_empty() {
            match nix::unistd::write(&fd, rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let seals = SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL;
    fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))?;
    Ok(fd)
}

/// Hands one call to the shim: `call LEAF` (the exec's cgroup leaf; a
/// zygote gives its spare only to the call whose leaf the spare is in), or
/// `call` without cgroup leaves.
pub fn send_call(
    ctl: BorrowedFd<'_>,
    leaf: Option<&str>,
    request: &OwnedFd,
    stdio: [BorrowedFd<'_>; 3],
    status: BorrowedFd<'_>,
    results: BorrowedFd<'_>,
) -> Result<(), Errno> {
    let fds = [request.as_fd(), stdio[0], stdio[1], stdio[2], status, results];
    let word = match leaf {
        Some(l) => format!("call {l}"),
        None => "call".into(),
    };
    crate::sys::socket::send_with_fds(ctl, word.as_bytes(), &fds)
}

/// The empty memfd a python call writes its notebook-style results to
/// (shim.py, `Results`): JSON lines husk reads after the call.
pub fn results_fd() -> Result<OwnedFd, Errno> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    memfd_create(c"husk-results", MFdFlags::MFD_CLOEXEC)
}

/// What a call left in its results memfd: `results` (the value of its
/// last expression, display() calls, figures: each `{type, is_main_result,
/// data: MIME bundle}`) and `exception` (`{name, value, traceback}`).
/// At most `limit` bytes are read; what the code wrote there is its own
/// output (untrusted: lines that are not the shim's JSON are dropped), and
/// every string in it goes through redaction like its stdout.
#[derive(Debug, Default, PartialEq)]
pub struct CallResults {
    pub results: Vec<serde_json::Value>,
    pub exception: Option<serde_json::Value>,
    /// The memfd held more than `limit` bytes: later results were dropped.
    pub truncated: bool,
}

pub fn read_results(fd: &OwnedFd, limit: u64, redact: &crate::redact::Redaction) -> CallResults {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut f = match fd.try_clone() {
        Ok(d) => std::fs::File::from(d),
        Err(_) => return CallResults::default(),
    };
    let _ = std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0));
    let _ = f.by_ref().take(limit.saturating_add(1)).read_to_end(&mut raw);
    let truncated = raw.len() as u64 > limit;
    raw.truncate(limit as usize);
    parse_results(&raw, truncated, redact)
}

fn parse_results(raw: &[u8], truncated: bool, redact: &crate::redact::Redaction) -> CallResults {
    let mut out = CallResults { truncated, ..Default::default() };
    for line in raw.split(|b| *b == b'\n') {
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
        redact_strings(&mut v, redact);
        match v["type"].as_str() {
            Some("result" | "display") if v["data"].is_object() => out.results.push(v),
            Some("error") => {
                let o = v.as_object_mut().expect("an object: it has a type");
                o.remove("type");
                out.exception = Some(v);
            }
            _ => {}
        }
    }
    out
}

fn redact_strings(v: &mut serde_json::Value, redact: &crate::redact::Redaction) {
    match v {
        serde_json::Value::String(s) => *s = redact.text(s),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| redact_strings(v, redact)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|v| redact_strings(v, redact)),
        _ => {}
    }
}

/// The keys of a call's results in the verdict (top level: they are the
/// call's, not the interpreter's). `put_results` stores them with the
/// backend's `warm` value; the exec lifts them out (`take_results`).
pub const RESULT_KEYS: [&str; 3] = ["results", "exception", "results_truncated"];

pub fn put_results(warm: &mut serde_json::Value, r: CallResults) {
    let [results, exception, truncated] = RESULT_KEYS;
    warm[results] = r.results.into();
    warm[exception] = r.exception.into();
    warm[truncated] = r.truncated.into();
}

/// The results out of a call's `warm` value, as (key, value) pairs for the
/// verdict; none when the call had none (a bash call, a cold one).
pub fn take_results(warm: &mut serde_json::Value) -> Vec<(&'static str, serde_json::Value)> {
    let Some(o) = warm.as_object_mut() else { return Vec::new() };
    RESULT_KEYS.iter().filter_map(|k| o.remove(*k).map(|v| (*k, v))).collect()
}

/// One word from the shim on the control socket after it is ready: a
/// zygote's `spare SEQ`, with the pidfd of the child it forked ahead of the
/// next call. `Ok(None)` when nothing is waiting (or a word husk does not
/// know); `Err(EPIPE)` when the shim's end is gone.
pub fn recv_spare(ctl: BorrowedFd<'_>) -> Result<Option<(u64, OwnedFd)>, Errno> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buf = [0u8; 64];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; crate::sys::socket::MAX_FDS]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
    let (n, mut fds) = match recvmsg::<()>(ctl.as_raw_fd(), &mut iov, Some(&mut cmsg), flags) {
        Err(Errno::EAGAIN | Errno::EINTR) => return Ok(None),
        Err(e) => return Err(e),
        Ok(m) => {
            let mut fds = Vec::new();
            for c in m.cmsgs().map_err(|_| Errno::EBADMSG)? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // Just installed in our fd table: ours to own.
                    fds.extend(raw.into_iter().map(|fd| crate::sys::fd::owned(fd as libc::c_long)));
                }
            }
            (m.bytes, fds)
        }
    };
    if n == 0 {
        return Err(Errno::EPIPE);
    }
    let seq = std::str::from_utf8(&buf[..n]).ok().and_then(|w| w.strip_prefix("spare ")).and_then(|s| s.parse().ok());
    match (seq, fds.len()) {
        (Some(seq), 1) => Ok(fds.pop().map(|fd| (seq, fd))),
        _ => Ok(None),
    }
}

/// Tells the shim its spare `seq` is placed (in the cgroup leaf `leaf`,
/// when there are leaves): the call of the exec that gets that leaf may go
/// to it.
pub fn send_placed(ctl: BorrowedFd<'_>, seq: u64, leaf: Option<&str>) -> Result<(), Errno> {
    let word = match leaf {
        Some(l) => format!("placed {seq} {l}"),
        None => format!("placed {seq}"),
    };
    nix::sys::socket::send(ctl.as_raw_fd(), word.as_bytes(), nix::sys::socket::MsgFlags::MSG_NOSIGNAL).map(|_| ())
}

/// Why the interpreter had to be started afresh during a call (the
/// verdict's `warm.restart_cause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartCause {
    /// A session call ran past its timeout and could not be interrupted
    /// (or was a bash call: its shell is always restarted then).
    Timeout,
    /// A bash session's shell ended on its own (`exit`).
    Exited,
    /// The kernel's OOM killer killed the interpreter (an OOM kill in the
    /// sandbox while the call ran, and the interpreter gone).
    OomKilled,
    /// The interpreter ended without saying why (a kill from outside, a
    /// crash).
    Killed,
}

impl RestartCause {
    pub fn name(self) -> &'static str {
        match self {
            RestartCause::Timeout => "timeout",
            RestartCause::Exited => "exited",
            RestartCause::OomKilled => "oom_killed",
            RestartCause::Killed => "killed",
        }
    }
}

/// The verdict's `warm` (docs/verdict.schema.json): how a `--code` call
/// ran. One constructor, so cold, fork and session calls keep one shape.
/// `restarted` is there for the callers that read only it.
pub fn verdict(mode: &str, interrupted: bool, restart: Option<RestartCause>, placed_ahead: bool) -> serde_json::Value {
    serde_json::json!({
        "mode": mode,
        "interrupted": interrupted,
        "restarted": restart.is_some(),
        "restart_cause": restart.map(RestartCause::name),
        "placed_ahead": placed_ahead,
    })
}

/// A call whose interpreter died without a word (`restart_cause`
/// `killed`) while the sandbox's events show an OOM kill (`oom_seen`, read
/// by the caller from the sandbox's events): the OOM killer
/// took the interpreter (a zygote or a session, in its own leaf, so not in
/// the call's `resources.oom_kills`), and the call with it. The verdict
/// says so: `oom_killed`, for the call too when it was killed with it.
pub fn attribute(warm: &mut serde_json::Value, outcome: &mut crate::outcome::Outcome, oom_seen: bool) {
    use crate::outcome::Termination;
    // A bash session's shell that "ended" OOM-killed (the call's leaf
    // counted the kill, so the call is oom_killed) did not `exit`.
    if warm["restart_cause"] == RestartCause::Exited.name() && outcome.termination == Termination::OomKilled {
        warm["restart_cause"] = RestartCause::OomKilled.name().into();
        return;
    }
    if warm["restart_cause"] != RestartCause::Killed.name() || !oom_seen {
        return;
    }
    warm["restart_cause"] = RestartCause::OomKilled.name().into();
    if outcome.termination == Termination::Signaled && outcome.signal == Some(libc::SIGKILL) {
        outcome.termination = Termination::OomKilled;
    }
}

/// The languages a `--code` call may name for a sandbox warmed as `w`.
pub fn language_fits(w: &WarmSpec, asked: Option<&str>) -> Result<(), LanguageMismatch> {
    let Some(asked) = asked else { return Ok(()) };
    let ok = match w.language {
        Language::Python => matches!(asked, "python" | "python3"),
        Language::Bash => asked == "bash",
    };
    if ok { Ok(()) } else { Err(LanguageMismatch { asked: asked.to_string(), mode: w.mode, runs: w.language }) }
}

/// `--language` names another language than the sandbox's interpreter runs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--language {asked}: this sandbox's {} interpreter runs {} code",
    match mode { WarmMode::Fork => "warm", WarmMode::Session => "session" },
    runs.name()
)]
pub struct LanguageMismatch {
    pub asked: String,
    pub mode: WarmMode,
    pub runs: Language,
}

#[cfg(test)]
mod tests {

    #[test]
    fn results_keep_only_lines_of_the_shims_shape() {
        // The code can reach its results memfd (/proc/self/fd): what it
        // writes there is kept only in the shim's shape.
        let raw = b"garbage\n{\"type\": \"result\", \"is_main_result\": true, \"data\": {\"text/plain\": \"1\"}}\n\
            {\"type\": \"result\", \"data\": 5}\n[1,2]\n{\"type\": \"error\", \"name\": \"E\", \"value\": \"v\", \"traceback\": \"t\"}\n{\"type\": \"resu";
        let r = parse_results(raw, true, &crate::redact::Redaction::none());
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0]["data"]["text/plain"], "1");
        assert_eq!(r.exception, Some(serde_json::json!({"name": "E", "value": "v", "traceback": "t"})));
        assert!(r.truncated);
    }

    use super::*;

    #[test]
    fn the_shim_is_valid_python() {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys, ast; ast.parse(sys.stdin.read())"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(SHIM.as_bytes())?;
                c.wait()
            })
            .unwrap();
        assert!(out.success());
    }

    /// A zygote that died with an OOM kill in the sandbox's events was
    /// reported as `signaled` (issue 31, item 5): the call was killed
    /// with its interpreter, by the OOM killer.
    #[test]
    fn interpreter_death_with_an_oom_event_is_oom_killed() {
        use crate::outcome::{Outcome, Termination};
        let killed = || {
            let mut o = Outcome::blank();
            o.set_command_status(crate::sys::process::ExitStatus::Signaled(libc::SIGKILL));
            o
        };
        let (mut w, mut o) = (verdict("fork", false, Some(RestartCause::Killed), true), killed());
        attribute(&mut w, &mut o, true);
        assert_eq!((w["restart_cause"].as_str(), o.termination), (Some("oom_killed"), Termination::OomKilled));
        // Without an OOM event: killed, as far as husk can tell.
        let (mut w, mut o) = (verdict("fork", false, Some(RestartCause::Killed), true), killed());
        attribute(&mut w, &mut o, false);
        assert_eq!((w["restart_cause"].as_str(), o.termination), (Some("killed"), Termination::Signaled));
        // A bash session's shell OOM-killed in the call's leaf.
        let (mut w, mut o) = (verdict("session", false, Some(RestartCause::Exited), true), killed());
        o.termination = Termination::OomKilled;
        attribute(&mut w, &mut o, false);
        assert_eq!(w["restart_cause"].as_str(), Some("oom_killed"));
        // An interpreter that lived: an OOM kill elsewhere renames nothing.
        let (mut w, mut o) = (verdict("fork", false, None, true), killed());
        attribute(&mut w, &mut o, true);
        assert_eq!((w["restarted"].as_bool(), o.termination), (Some(false), Termination::Signaled));
    }

    #[test]
    fn a_request_is_sealed_and_holds_head_then_code() {
        let env = [std::ffi::CString::new("A=1=2").unwrap()];
        let fd = request(
            &CallHead::new(env.iter().map(|c| c.as_c_str()), "/w", Some(Duration::from_secs(2))),
            b"print(1)\n",
        )
        .unwrap();
        let mut f = std::fs::File::from(fd);
        use std::io::{Read, Seek, Write};
        assert!(f.write_all(b"x").is_err(), "a sealed request must not be writable");
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        let (head, code) = s.split_once('\n').unwrap();
        let v: serde_json::Value = serde_json::from_str(head).unwrap();
        assert_eq!(v["env"][0], serde_json::json!(["A", "1=2"]));
        assert_eq!(v["timeout_ms"], 2000);
        assert_eq!(code, "print(1)\n");
    }
}
