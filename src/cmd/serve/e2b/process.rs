//! envd's `process.Process` service: commands in a sandbox.
//!
//! `Start` runs the command as `husk exec` does, in this connection's
//! process, and streams its events (start, data, end) as they happen. The
//! SDK's "background" command is the same stream, read by the SDK later;
//! the handle's pid is this connection's process (a host pid; E2B's is the
//! in-sandbox one, which the SDK only hands back to these calls). A running
//! command is listed in `<sandbox dir>/e2b-proc/<pid>.json` (pid and start
//! time, so a recycled pid is never taken for it), which `List`,
//! `SendSignal` and `SendInput` read; the sandbox's removal takes the list
//! with it.
//!
//! - output: the exec's tap (`stream::Tap`, NDJSON chunks) goes into a pipe
//!   that a small forked process turns into Connect envelopes on the client's
//!   socket; this process stays single-threaded for the exec's fork.
//! - signals: SIGTERM to this process is forwarded to the command by the
//!   exec's watch; SIGKILL is SIGTERM then SIGINT (the watch's second
//!   interrupt kills the exec's processes outright), as `cancel` does.
//! - stdin (`stdin: true`): a FIFO beside the record, this process's fd 0
//!   (opened read-write, so the command never sees EOF from a writer going
//!   away); `SendInput` writes to it.

use super::super::{ApiError, Conn, Ctx, Reply};
use super::connect::{self, Code, RpcError, Stream};
use crate::procref::ProcRef;
use crate::serve::http::Head;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Output of a command kept in the verdict besides the stream (the stream
/// carries all of it).
const KEEP: u64 = 64 << 10;

#[derive(Deserialize, Serialize, Clone, Default)]
struct Config {
    #[serde(default)]
    cmd: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
}

/// A running command's entry.
#[derive(Deserialize, Serialize)]
struct Entry {
    proc: ProcRef,
    config: Config,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
    stdin: bool,
}

fn dir_of(ctx: &Ctx, id: &str) -> Result<PathBuf, ApiError> {
    Ok(super::super::store(ctx)?.dir(id).join("e2b-proc"))
}

pub fn rpc(ctx: &Ctx, head: &Head, method: &str, body: &[u8], conn: &mut Conn, t: u64) -> Result<Reply, ApiError> {
    let streaming = matches!(method, "Start" | "Connect");
    let r = (|| {
        let req = connect::request(head, body)?;
        let id = super::sandbox_of(ctx, head)?;
        match method {
            "Start" => start(ctx, head, &id, &req, conn, t),
            "List" => list(ctx, &id),
            "SendSignal" => signal(ctx, &id, &req),
            "SendInput" => input(ctx, &id, &req),
            _ => Err(RpcError::new(Code::Unimplemented, format!("process.Process/{method} is not supported by husk"))),
        }
    })();
    match r {
        Ok(reply) => Ok(reply),
        Err(e) if streaming => connect::failed_stream(conn, e),
        Err(e) => Ok(e.unary()),
    }
}

/// The user of an envd call: `Authorization: Basic base64("NAME:")`.
fn basic_user(head: &Head) -> Option<String> {
    let v = head.header("authorization")?.strip_prefix("Basic ")?;
    let raw = B64.decode(v.trim()).ok()?;
    let s = String::from_utf8(raw).ok()?;
    super::user_of(Some(s.split(':').next().unwrap_or("")))
}

pub fn user_from(head: &Head) -> Option<String> {
    basic_user(head)
}

fn start(ctx: &Ctx, head: &Head, id: &str, req: &Value, conn: &mut Conn, t: u64) -> Result<Reply, RpcError> {
    let config: Config = serde_json::from_value(req["process"].clone())
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("process: {e}")))?;
    if config.cmd.is_empty() {
        return Err(RpcError::new(Code::InvalidArgument, "process.cmd is empty"));
    }
    if req.get("pty").is_some_and(|p| !p.is_null()) {
        return Err(RpcError::new(Code::Unimplemented, "PTY sessions are not supported by husk's E2B routes"));
    }
    let want_stdin = req["stdin"].as_bool().unwrap_or(false);
    let dir = dir_of(ctx, id)?;
    std::fs::create_dir_all(&dir).map_err(|e| RpcError::new(Code::Internal, format!("{}: {e}", dir.display())))?;
    let me = std::process::id() as i32;
    let proc = ProcRef::of(me).ok_or_else(|| RpcError::new(Code::Internal, "reading this process's start time"))?;
    let entry = Entry { proc, config: config.clone(), tag: req["tag"].as_str().map(str::to_string), stdin: want_stdin };
    let listed = Listed::write(&dir, &entry)?;
    if want_stdin {
        let fifo = listed.fifo();
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .map_err(|e| RpcError::new(Code::Internal, format!("mkfifo {}: {e}", fifo.display())))?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .map_err(|e| RpcError::new(Code::Internal, format!("{}: {e}", fifo.display())))?;
        crate::sys::fd::dup_onto(f.as_raw_fd(), 0).map_err(|e| RpcError::new(Code::Internal, format!("dup2: {e}")))?;
    } else {
        super::run::stdin_null()?;
    }
    let mut exec = super::run::request(id, std::iter::once(config.cmd.clone()).chain(config.args.clone()).collect());
    exec.exec.env = config.envs.clone().into_iter().collect();
    exec.exec.workdir = config.cwd.clone().filter(|c| !c.is_empty());
    exec.exec.user = user_from(head);
    exec.exec.capture = Some(KEEP);
    let store = super::super::store(ctx)?;

    let mut stream = Stream::start(conn).map_err(RpcError::from)?;
    stream.send(&json!({"event": {"start": {"pid": me}}}));
    let watcher = super::super::cancel::Watcher::start(stream.conn());
    let out = stream.conn().fd().try_clone_to_owned();
    let ran = super::run::tapped(out, data_event, &exec.redact, |tap| {
        crate::sandbox::exec::exec_to(store, &exec, t, Some(tap))
    });
    drop(watcher);
    drop(listed);
    let end = match ran {
        Ok(Ok(r)) => end_event(&r.outcome),
        Ok(Err(e)) => return Ok(stream.end(Some(ApiError::of_sandbox(&e).into()))),
        Err(e) => return Ok(stream.end(Some(RpcError::new(Code::Internal, e.to_string())))),
    };
    stream.send(&json!({"event": {"end": end}}));
    Ok(stream.end(None))
}

/// envd's data event, enveloped.
fn data_event(which: &str, bytes: &[u8]) -> Vec<u8> {
    connect::envelope(0, &json!({"event": {"data": {which: B64.encode(bytes)}}}))
}

/// envd's end event: `exitCode` (the exit status, or -1 for a signal),
/// `exited`, and `status` as Go's `ProcessState.String()` words it.
fn end_event(o: &crate::outcome::Outcome) -> Value {
    use crate::outcome::Termination;
    match (o.termination, o.status, o.signal) {
        (Termination::Exited, Some(code), _) => {
            json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")})
        }
        (Termination::SetupFailed, _, _) => {
            let msg = o.error.as_ref().map(|e| e.message.clone()).unwrap_or_else(|| "the command did not start".into());
            let code = if msg.contains("not found") { 127 } else { 125 };
            json!({"exitCode": code, "exited": true, "status": format!("exit status {code}"), "error": msg})
        }
        (Termination::WallTimeout, _, _) => {
            json!({"exitCode": 124, "exited": false, "status": "signal: killed", "error": "timed out"})
        }
        (Termination::OomKilled, _, _) => {
            json!({"exitCode": -1, "exited": false, "status": "signal: killed", "error": "killed at the memory limit"})
        }
        (_, _, Some(sig)) => {
            let name = nix::sys::signal::Signal::try_from(sig).map(|s| s.as_str().to_lowercase()).unwrap_or_default();
            let word = if sig == 9 { "killed".to_string() } else { name.trim_start_matches("sig").to_string() };
            json!({"exitCode": -1, "exited": false, "status": format!("signal: {word}")})
        }
        _ => json!({"exitCode": -1, "exited": false, "status": "signal: killed"}),
    }
}

/// An entry on disk, removed (with its FIFO) on drop.
struct Listed {
    path: PathBuf,
}

impl Listed {
    fn write(dir: &Path, e: &Entry) -> Result<Listed, RpcError> {
        let path = dir.join(format!("{}.json", e.proc.pid));
        let body = serde_json::to_vec(e).unwrap_or_default();
        std::fs::write(&path, body).map_err(|x| RpcError::new(Code::Internal, format!("{}: {x}", path.display())))?;
        Ok(Listed { path })
    }

    fn fifo(&self) -> PathBuf {
        self.path.with_extension("in")
    }
}

/// The stdin FIFO of the command `pid` lists.
fn fifo_of(dir: &Path, pid: i32) -> PathBuf {
    dir.join(format!("{pid}.in"))
}

impl Drop for Listed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.fifo());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The commands running in the sandbox (entries whose process lives).
fn entries(dir: &Path) -> Vec<Entry> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = d.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(e) = std::fs::read(&p).map_err(|_| ()).and_then(|b| serde_json::from_slice::<Entry>(&b).map_err(|_| ()))
        else {
            continue;
        };
        if e.proc.alive() {
            out.push(e);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
    out.sort_by_key(|e| e.proc.pid);
    out
}

fn list(ctx: &Ctx, id: &str) -> Result<Reply, RpcError> {
    let procs: Vec<Value> = entries(&dir_of(ctx, id)?)
        .into_iter()
        .map(|e| json!({"config": e.config, "pid": e.proc.pid, "tag": e.tag}))
        .collect();
    Ok(Reply::Json(200, json!({"processes": procs})))
}

fn find(ctx: &Ctx, id: &str, req: &Value) -> Result<Entry, RpcError> {
    let sel = &req["process"];
    let (pid, tag) = (sel["pid"].as_i64(), sel["tag"].as_str());
    entries(&dir_of(ctx, id)?)
        .into_iter()
        .find(|e| pid.is_some_and(|p| p == e.proc.pid as i64) || tag.is_some_and(|t| e.tag.as_deref() == Some(t)))
        .ok_or_else(|| RpcError::new(Code::NotFound, format!("process {sel} not found")))
}

fn signal(ctx: &Ctx, id: &str, req: &Value) -> Result<Reply, RpcError> {
    use nix::sys::signal::{Signal, kill};
    let e = find(ctx, id, req)?;
    let pid = nix::unistd::Pid::from_raw(e.proc.pid);
    let sig = match &req["signal"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    let gone = |x| RpcError::new(Code::NotFound, format!("process {}: {x}", e.proc.pid));
    kill(pid, Signal::SIGTERM).map_err(gone)?;
    if matches!(sig.as_str(), "SIGNAL_SIGKILL" | "9") {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let _ = kill(pid, Signal::SIGINT);
    }
    Ok(Reply::Json(200, json!({})))
}

fn input(ctx: &Ctx, id: &str, req: &Value) -> Result<Reply, RpcError> {
    use std::io::Write;
    let e = find(ctx, id, req)?;
    if !e.stdin {
        return Err(RpcError::new(Code::InvalidArgument, "the command was not started with stdin=True"));
    }
    let Some(data) = req["input"]["stdin"].as_str() else {
        return Err(RpcError::new(Code::Unimplemented, "only stdin input is supported (no PTY)"));
    };
    let bytes = B64.decode(data).map_err(|x| RpcError::new(Code::InvalidArgument, format!("input.stdin: {x}")))?;
    let path = fifo_of(&dir_of(ctx, id)?, e.proc.pid);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|x| RpcError::new(Code::NotFound, format!("{}: {x}", path.display())))?;
    f.write_all(&bytes).map_err(|x| RpcError::new(Code::Internal, format!("writing stdin: {x}")))?;
    Ok(Reply::Json(200, json!({})))
}

use std::os::unix::fs::OpenOptionsExt;
