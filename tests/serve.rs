//! `husk serve`: the sandbox API over HTTP/1.1 + JSON, driven as a client
//! would, against a real server on a temporary unix socket or loopback
//! port (stopped by pid), with real sandboxes behind it.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running `husk serve`, stopped (SIGTERM, by pid) on drop.
struct Server {
    child: Option<Child>,
    /// `unix:PATH` or `IP:PORT` as serve printed it.
    addr: String,
    token: Option<String>,
}

impl Server {
    fn start(sbx: &Sbx, extra: &[&str]) -> Server {
        Server::try_start(sbx, extra).unwrap_or_else(|e| panic!("husk serve {extra:?} did not start: {e}"))
    }

    /// Starts serve and waits for its "listening on" line; Err with its
    /// stderr when it exits instead.
    fn try_start(sbx: &Sbx, extra: &[&str]) -> Result<Server, String> {
        let mut args = vec!["serve"];
        args.extend_from_slice(extra);
        let mut child =
            sbx.husk(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn husk serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("husk serve: listening on ") else {
            let out = child.wait_with_output().unwrap();
            return Err(format!("{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
        };
        Ok(Server { addr: addr.to_string(), child: Some(child), token: None })
    }

    fn socket(&self) -> PathBuf {
        PathBuf::from(self.addr.strip_prefix("unix:").expect("a unix socket"))
    }

    /// Sends `sig` and waits for serve to exit; its stderr.
    fn stop_with(&mut self, sig: nix::sys::signal::Signal) -> String {
        let mut child = self.child.take().unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let status = child.wait().unwrap();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        if sig == nix::sys::signal::Signal::SIGTERM {
            assert!(status.success(), "serve ended {status:?} on SIGTERM: {err}");
        }
        err
    }

    fn connect(&self) -> Box<dyn ReadWrite> {
        match self.addr.strip_prefix("unix:") {
            Some(p) => Box::new(UnixStream::connect(p).expect("connect to serve's socket")),
            None => Box::new(std::net::TcpStream::connect(&self.addr).expect("connect to serve's port")),
        }
    }

    /// One request; (status, body).
    fn raw(&self, bytes: &[u8]) -> (u16, Vec<u8>) {
        let mut s = self.connect();
        s.write_all(bytes).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        parse_response(&resp)
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let auth = self.token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: husk\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let (status, bytes) = self.raw(req.as_bytes());
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
        (status, v)
    }

    fn create(&self, body: Value) -> String {
        let (status, v) = self.request("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(status, 201, "create {body}: {v}");
        v["id"].as_str().expect("create answers with the id").to_string()
    }

    fn exec(&self, id: &str, body: Value) -> (u16, Value) {
        self.request("POST", &format!("/v1/sandboxes/{id}/exec"), Some(&body))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn parse_response(resp: &[u8]) -> (u16, Vec<u8>) {
    let text = String::from_utf8_lossy(resp);
    let status: u16 =
        text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a response: {text:?}"));
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    (status, resp[end..].to_vec())
}

/// A verdict-shaped error with this status and step.
fn assert_error(status: u16, v: &Value, want_status: u16, want_step: &str) {
    assert_eq!(status, want_status, "{v}");
    assert_eq!(v["termination"], "setup_failed", "{v}");
    assert_eq!(v["error"]["step"], want_step, "{v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

#[test]
fn serve_unix_socket_perms() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    // The default socket: <state dir>/api.sock, 0600, ours.
    assert_eq!(server.socket(), sbx.state.join("api.sock"));
    let meta = std::fs::symlink_metadata(server.socket()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "socket mode");
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw(), "socket owner");
    assert_eq!(
        server.request("GET", "/v1/health", None),
        (200, json!({"api": 1, "version": env!("CARGO_PKG_VERSION")}))
    );
    // A second serve on a live socket is refused, and leaves it alone.
    let err = Server::try_start(&sbx, &[]).err().expect("a second serve on the same socket must fail");
    assert!(err.contains("another husk serve is listening"), "{err}");
    assert_eq!(server.request("GET", "/v1/health", None).0, 200);

    let dir = TempDir::new("serve-sock");
    // Not a socket: a file, a symlink (to a file, to nothing) are refused
    // and left as they were.
    let file = dir.path().join("file");
    std::fs::write(&file, "keep").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    for p in [&file, &link, &dangling] {
        let arg = format!("unix:{}", p.display());
        let err = Server::try_start(&sbx, &["--listen", &arg]).err().expect("serve on a non-socket path must fail");
        assert!(err.contains("is not a stale husk serve socket"), "{}: {err}", p.display());
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(!dir.path().join("nowhere").exists(), "serve followed a dangling symlink");
    // A stale socket (its serve was SIGKILLed) is replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let arg = format!("unix:{}", stale.display());
    let mut s2 = Server::start(&sbx, &["--listen", &arg]);
    assert_eq!(s2.request("GET", "/v1/health", None).0, 200);
    let meta = std::fs::symlink_metadata(&stale).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // SIGTERM removes the socket.
    s2.stop_with(nix::sys::signal::Signal::SIGTERM);
    assert!(!stale.exists(), "serve left its socket behind");
}

#[test]
fn serve_token_required_on_tcp() {
    let sbx = Sbx::new();
    let err = Server::try_start(&sbx, &["--listen", "127.0.0.1:0"]).err().expect("TCP without a token must fail");
    assert!(err.contains("needs --token-file"), "{err}");
    let dir = TempDir::new("serve-token");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef\n").unwrap();
    let tf = token_file.to_str().unwrap();
    let err = Server::try_start(&sbx, &["--listen", "0.0.0.0:0", "--token-file", tf]).err().expect("0.0.0.0 must fail");
    assert!(err.contains("only on a loopback address"), "{err}");
    std::fs::write(dir.path().join("short"), "abc").unwrap();
    let short = dir.path().join("short");
    let err = Server::try_start(&sbx, &["--listen", "127.0.0.1:0", "--token-file", short.to_str().unwrap()])
        .err()
        .expect("a short token must be refused");
    assert!(err.contains("at least 16 characters"), "{err}");

    let mut server = Server::start(&sbx, &["--listen", "127.0.0.1:0", "--token-file", tf]);
    assert!(server.addr.starts_with("127.0.0.1:"), "{}", server.addr);
    let (status, v) = server.request("GET", "/v1/health", None);
    assert_error(status, &v, 401, "auth");
    server.token = Some("0123456789abcdef0123456789abcdeX".into());
    let (status, v) = server.request("GET", "/v1/sandboxes", None);
    assert_error(status, &v, 401, "auth");
    // An unauthenticated body is not read: a huge Content-Length gets 401.
    let (status, _) = server.raw(b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n");
    assert_eq!(status, 401);
    server.token = Some("0123456789abcdef0123456789abcdef".into());
    assert_eq!(server.request("GET", "/v1/health", None).0, 200);
    assert_eq!(server.request("GET", "/v1/sandboxes", None), (200, json!({"sandboxes": []})));
}

#[test]
fn serve_restart_keeps_sandboxes() {
    let sbx = Sbx::new();
    let mut server = Server::start(&sbx, &[]);
    let id = server.create(json!({"name": "kept", "labels": {"job": "restart"}}));
    let (status, v) = server.exec(&id, json!({"argv": ["sh", "-c", "echo one > notes.txt"]}));
    assert_eq!((status, &v["exit_code"]), (200, &json!(0)), "{v}");
    server.stop_with(nix::sys::signal::Signal::SIGTERM);
    // serve is gone; the sandbox is not.
    assert_eq!(sbx.ids(), vec![id.clone()]);
    // A serve SIGKILLed leaves a stale socket; the next one takes its place.
    let mut killed = Server::start(&sbx, &[]);
    killed.stop_with(nix::sys::signal::Signal::SIGKILL);
    assert!(sbx.state.join("api.sock").exists());
    let server = Server::start(&sbx, &["--destroy-on-exit"]);
    let (status, v) = server.request("GET", "/v1/sandboxes/kept", None);
    assert_eq!((status, v["state"].as_str()), (200, Some("READY")), "{v}");
    let (status, v) = server.exec("kept", json!({"argv": ["cat", "notes.txt"]}));
    assert_eq!((status, stdout_of(&v).as_str()), (200, "one\n"), "{v}");
    let (_, list) = server.request("GET", "/v1/sandboxes?label=job=restart", None);
    assert_eq!(list["sandboxes"].as_array().unwrap().len(), 1, "{list}");
    let (_, none) = server.request("GET", "/v1/sandboxes?label=job=other", None);
    assert_eq!(none["sandboxes"], json!([]), "{none}");
    // --destroy-on-exit removes what was created through this address
    // (all of it here: the first serve listened on the same socket).
    let rec = server.request("GET", &format!("/v1/sandboxes/{id}"), None).1;
    let mut server = server;
    let err = server.stop_with(nix::sys::signal::Signal::SIGTERM);
    assert!(err.contains(&format!("removed sandbox {id}")), "{err}");
    assert_eq!(sbx.ids(), Vec::<String>::new());
    assert_gone(&sbx, &rec, None);
    // Nothing of serve remains either.
    assert!(!sbx.state.join("api.sock").exists());
}

#[test]
fn serve_rejects_oversized_and_malformed_requests() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--max-body", "1K"]);
    let id = server.create(json!({}));
    // Bodies over --max-body: 413, with a Content-Length or chunked.
    let big = json!({"argv": ["true"], "stdin": "x".repeat(2000)});
    let (status, v) = server.exec(&id, big);
    assert_error(status, &v, 413, "request");
    let chunked = format!(
        "POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n{}\r\n400\r\n{}\r\n0\r\n\r\n",
        "a".repeat(1024),
        "a".repeat(1024)
    );
    assert_eq!(server.raw(chunked.as_bytes()).0, 413);
    // Malformed JSON, a wrong type, an unknown key: 400 with where.
    for (body, says) in [
        ("{\"argv\": [\"true\"", "EOF while parsing"),
        ("[1, 2]", "invalid type"),
        ("{\"argv\": \"true\"}", "argv"),
        ("{\"argv\": [\"true\"], \"timeot\": \"1s\"}", "unknown field `timeot`"),
        ("{\"code\": \"1\", \"language\": \"cobol\"}", "cobol"),
        ("{\"argv\": [\"true\"], \"timeout\": \"soon\"}", "--timeout"),
    ] {
        let req = format!("POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let (status, bytes) = server.raw(req.as_bytes());
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("{body}: not JSON"));
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["termination"], "setup_failed", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{body}: {v}");
    }
    // Broken HTTP: no panic, an answer where one is due.
    let huge_head = format!("GET /v1/health HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(server.raw(huge_head.as_bytes()).0, 431);
    assert_eq!(server.raw(b"\x00\x01garbage\r\n\r\n").0, 400);
    assert_eq!(
        server.raw(b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n").0,
        400
    );
    assert_eq!(server.raw(b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: -1\r\n\r\n").0, 400);
    assert_eq!(server.raw(b"GET /v2/nothing HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(server.raw(b"PATCH /v1/sandboxes HTTP/1.1\r\n\r\n").0, 405);
    // Unknown sandbox: 404, step "lookup"; a flag in the id is no flag.
    let (status, v) = server.exec("--help", json!({"argv": ["true"]}));
    assert_error(status, &v, 404, "lookup");
    let (status, v) = server.request("DELETE", "/v1/sandboxes/000000000000", None);
    assert_error(status, &v, 404, "lookup");
    // The server still serves, and the sandbox still works.
    assert_eq!(server.request("GET", "/v1/health", None).0, 200);
    let (status, v) = server.exec(&id, json!({"argv": ["true"]}));
    assert_eq!((status, &v["exit_code"]), (200, &json!(0)), "{v}");
}

#[test]
fn serve_answers_429_beyond_max_concurrent() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--max-concurrent", "1"]);
    // A request whose body has not arrived holds the one slot (its head
    // did: a connection without a whole head holds none).
    let mut slow = server.connect();
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nContent-Length: 2\r\n\r\n").unwrap();
    // The slot is counted when serve forked for it: wait until a request is
    // refused rather than guessing a moment.
    let mut refused = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (status, v) = server.request("GET", "/v1/health", None);
            refused = Some((status, v));
            status == 429
        }),
        "never refused: {refused:?}"
    );
    let (status, v) = refused.unwrap();
    assert_error(status, &v, 429, "busy");
    // The slot comes back when that request has been answered.
    slow.write_all(b"{}").unwrap();
    let mut resp = Vec::new();
    slow.read_to_end(&mut resp).unwrap();
    assert_eq!(parse_response(&resp).0, 200);
    assert!(wait_until(Duration::from_secs(10), || server.request("GET", "/v1/health", None).0 == 200));
}

/// Slowloris over the unix socket: connections that send nothing, or half
/// a head, more of them than --max-concurrent and than serve keeps pending.
type Conns = Vec<Box<dyn ReadWrite>>;

fn starve(server: &Server, idle: usize, half: usize) -> (Conns, Conns) {
    let idle: Vec<_> = (0..idle).map(|_| server.connect()).collect();
    let half: Vec<_> = (0..half)
        .map(|_| {
            let mut c = server.connect();
            c.write_all(b"GET /v1/health HTTP/1.1\r\nHost: hu").unwrap();
            c
        })
        .collect();
    (idle, half)
}

#[test]
fn serve_idle_and_half_sent_connections_do_not_starve_requests() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--max-concurrent", "2"]);
    // 300 idle connections (more than the 256 serve keeps pending), then 8
    // that sent half a head.
    let (idle, mut half) = starve(&server, 300, 8);
    for _ in 0..3 {
        let (status, v) = server.request("GET", "/v1/health", None);
        assert_eq!(status, 200, "a request behind idle connections: {v}");
    }
    // A head that never ends is answered 408 (serve gives up on it).
    let mut resp = Vec::new();
    let _ = half[7].read_to_end(&mut resp);
    assert_eq!(parse_response(&resp).0, 408, "{}", String::from_utf8_lossy(&resp));
    drop((idle, half));
    assert_eq!(server.request("GET", "/v1/health", None).0, 200);
}

#[test]
fn serve_tcp_clients_without_the_token_cannot_take_request_slots() {
    let sbx = Sbx::new();
    let dir = TempDir::new("serve-slots");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef\n").unwrap();
    let tf = token_file.to_str().unwrap();
    let mut server = Server::start(&sbx, &["--listen", "127.0.0.1:0", "--token-file", tf, "--max-concurrent", "2"]);
    // Without the token: idle connections, half heads, and whole heads
    // whose body never comes.
    let (idle, half) = starve(&server, 50, 8);
    let mut bodiless: Vec<_> = (0..8)
        .map(|_| {
            let mut c = server.connect();
            c.write_all(b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100\r\n\r\n").unwrap();
            c
        })
        .collect();
    server.token = Some("0123456789abcdef0123456789abcdef".into());
    for _ in 0..3 {
        let (status, v) = server.request("GET", "/v1/sandboxes", None);
        assert_eq!(status, 200, "the token holder behind unauthenticated connections: {v}");
    }
    // The whole heads without the token were answered, bodies unread.
    let mut resp = Vec::new();
    let _ = bodiless[0].read_to_end(&mut resp);
    assert_eq!(parse_response(&resp).0, 401);
    drop((idle, half, bodiless));
}

#[test]
fn serve_404_names_the_path_asked_for() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    for path in ["/", "/v2/nothing"] {
        let (status, v) = server.request("GET", path, None);
        assert_error(status, &v, 404, "route");
        assert_eq!(v["error"]["message"], format!("no endpoint GET {path}"), "{v}");
    }
}

#[test]
fn serve_busy_exec_is_409() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let id = server.create(json!({}));
    let spawn_exec = |body: Value| {
        let (id, addr) = (id.clone(), server.addr.clone());
        std::thread::spawn(move || Server { child: None, addr, token: None }.exec(&id, body))
    };
    // The first exec runs until the test releases it: it makes /tmp/hold
    // and waits for it to go, which the host removes through the init's
    // root (the host's root cannot create a file there: its uid is not
    // mapped in the sandbox).
    let first = spawn_exec(
        json!({"argv": ["sh", "-c", "touch /tmp/hold; while [ -e /tmp/hold ]; do sleep 0.05; done; echo released"]}),
    );
    let mut rec = Value::Null;
    assert!(
        wait_until(Duration::from_secs(60), || {
            rec = server.request("GET", &format!("/v1/sandboxes/{id}"), None).1;
            rec["state"] == "EXECUTING"
        }),
        "the first exec never showed as EXECUTING: {rec}"
    );
    let (status, v) = server.exec(&id, json!({"argv": ["true"]}));
    assert_error(status, &v, 409, "busy");
    assert!(v["error"]["message"].as_str().unwrap().contains("--wait"), "{v}");
    // "wait": true queues behind it instead.
    let queued = spawn_exec(json!({"argv": ["echo", "after"], "wait": true}));
    let init = rec["init"]["pid"].as_i64().expect("the record names the init");
    let hold = PathBuf::from(format!("/proc/{init}/root/tmp/hold"));
    assert!(wait_until(Duration::from_secs(60), || hold.exists()), "the first exec never made /tmp/hold");
    std::fs::remove_file(&hold).expect("release the first exec");
    let (status, v) = first.join().unwrap();
    assert_eq!((status, stdout_of(&v).as_str()), (200, "released\n"), "{v}");
    let (status, v) = queued.join().unwrap();
    assert_eq!((status, stdout_of(&v).as_str()), (200, "after\n"), "{v}");
    let (status, v) = server.request("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!((status, v["state"].as_str()), (200, Some("READY")), "{v}");
}

/// The keys of a JSON value, recursively (values left out).
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::Null => Value::Null,
        _ => json!("value"),
    }
}

#[test]
fn serve_exec_verdict_equals_cli_verdict_shape() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let id = server.create(json!({"memory": "256M", "pids": 64, "ttl": "5m", "env": {"GREETING": "hi"}}));
    let script = "echo out $GREETING; echo err >&2; printf '\\377'; exit 3";
    let (status, api) = server.exec(&id, json!({"argv": ["sh", "-c", script]}));
    assert_eq!(status, 200, "{api}");
    let (cli, code) = sbx.exec_json(&id, &[], &["sh", "-c", script]);
    assert_eq!(code, 3);
    assert_eq!(shape(&api), shape(&cli), "API verdict {api:#}\nCLI verdict {cli:#}");
    for k in ["termination", "exit_code", "stdout", "stderr", "backend", "isolation", "seccomp", "sandbox_id"] {
        assert_eq!(api[k], cli[k], "{k} differs");
    }
    // The same limits (each exec has a cgroup leaf of its own).
    for k in ["memory", "pids", "cpus", "swap"] {
        assert_eq!(api["limits"][k], cli["limits"][k], "limits.{k} differs");
    }
    // Code by stdin, never argv; stdin as text or base64.
    let (_, v) = server.exec(&id, json!({"code": "read x; echo got $x", "language": "sh", "env": {"A": "1"}}));
    assert_eq!(stdout_of(&v), "got\n", "{v}");
    let (_, v) = server.exec(&id, json!({"argv": ["cat"], "stdin_b64": "aGVsbG8="}));
    assert_eq!(stdout_of(&v), "hello", "{v}");
    let (_, v) = server.exec(&id, json!({"argv": ["sh", "-c", "sleep 10"], "timeout": "200ms"}));
    assert_eq!((v["termination"].as_str(), v["exit_code"].as_i64()), (Some("wall_timeout"), Some(124)), "{v}");
    let (status, v) = server.request("POST", &format!("/v1/sandboxes/{id}/renew"), Some(&json!({"ttl": "20m"})));
    assert_eq!(status, 200, "{v}");
    assert!(v["lease_remaining_ms"].as_u64().unwrap() > 10 * 60 * 1000, "{v}");
    let (status, v) = server.request("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!((status, v), (200, json!({"id": id, "destroyed": true})));
    let (status, v) = server.request("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!((status, v["state"].as_str()), (200, Some("DESTROYED")), "{v}");
    let (status, v) = server.exec(&id, json!({"argv": ["true"]}));
    assert_error(status, &v, 404, "lookup");
    assert!(v["error"]["message"].as_str().unwrap().contains("was removed"), "{v}");
}

#[test]
fn serve_50_concurrent_sandboxes() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let addr = server.addr.clone();
    let workers: Vec<_> = (0..50)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let s = Server { child: None, addr, token: None };
                let id = s.create(json!({"labels": {"worker": i.to_string()}, "memory": "64M"}));
                let rec = s.request("GET", &format!("/v1/sandboxes/{id}"), None).1;
                for n in 0..3 {
                    let (status, v) = s.exec(&id, json!({"argv": ["sh", "-c", format!("echo {i}-{n}")]}));
                    assert_eq!((status, stdout_of(&v)), (200, format!("{i}-{n}\n")), "{v}");
                }
                let (status, v) = s.request("DELETE", &format!("/v1/sandboxes/{id}"), None);
                assert_eq!(status, 200, "{v}");
                rec
            })
        })
        .collect();
    let recs: Vec<Value> = workers.into_iter().map(|w| w.join().expect("a worker failed")).collect();
    for rec in &recs {
        assert_gone(&sbx, rec, Some(rec["id"].as_str().unwrap()));
    }
    assert_eq!(server.request("GET", "/v1/sandboxes", None), (200, json!({"sandboxes": []})));
    let left: Vec<String> = std::fs::read_dir(sbx.state.join("sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "names" && n != "tombstones")
        .collect();
    assert_eq!(left, Vec::<String>::new(), "the state dir keeps something");
}

#[test]
fn serve_ndjson_exec_stream() {
    use base64::Engine;
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let id = server.create(json!({}));
    let body = json!({"argv": ["sh", "-c", "echo one; echo two >&2; printf '\\377'; exit 2"]}).to_string();
    for (path, accept) in [
        (format!("/v1/sandboxes/{id}/exec?stream=1"), ""),
        (format!("/v1/sandboxes/{id}/exec"), "Accept: application/x-ndjson\r\n"),
    ] {
        let req = format!("POST {path} HTTP/1.1\r\n{accept}Content-Length: {}\r\n\r\n{body}", body.len());
        let mut s = server.connect();
        s.write_all(req.as_bytes()).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&resp[..head_end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("content-type: application/x-ndjson"), "{head}");
        let events: Vec<Value> = resp[head_end + 4..]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap_or_else(|e| panic!("not an NDJSON line ({e}): {l:?}")))
            .collect();
        let (last, chunks) = events.split_last().expect("at least the verdict event");
        let verdict = &last["verdict"];
        assert_eq!(
            (verdict["termination"].as_str(), verdict["exit_code"].as_i64()),
            (Some("exited"), Some(2)),
            "{last}"
        );
        let mut out = Vec::new();
        let mut err = Vec::new();
        for (n, c) in chunks.iter().enumerate() {
            assert_eq!(c["seq"], json!(n), "seq has a gap: {c}");
            let bytes = match (c["data"].as_str(), c["data_b64"].as_str()) {
                (Some(t), None) => t.as_bytes().to_vec(),
                (None, Some(b)) => base64::engine::general_purpose::STANDARD.decode(b).unwrap(),
                _ => panic!("a chunk without data: {c}"),
            };
            match c["stream"].as_str() {
                Some("stdout") => out.extend(bytes),
                Some("stderr") => err.extend(bytes),
                _ => panic!("{c}"),
            }
        }
        assert_eq!(out, b"one\n\xff", "{events:?}");
        assert_eq!(err, b"two\n", "{events:?}");
    }
    // A sandbox that is not there is still a plain 404.
    let (status, _) = server
        .raw(b"POST /v1/sandboxes/nosuch/exec?stream=1 HTTP/1.1\r\nContent-Length: 17\r\n\r\n{\"argv\":[\"true\"]}");
    assert_eq!(status, 404);
}

impl Server {
    /// One request with raw bytes and extra header lines; (status, content
    /// type, body).
    fn bytes(&self, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
        let head = format!("{method} {path} HTTP/1.1\r\nHost: husk\r\n{headers}Content-Length: {}\r\n\r\n", body.len());
        let mut req = head.into_bytes();
        req.extend_from_slice(body);
        let mut s = self.connect();
        s.write_all(&req).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let text = String::from_utf8_lossy(&resp[..resp.len().min(512)]).to_ascii_lowercase();
        let ctype = text.split("content-type: ").nth(1).and_then(|r| r.split("\r\n").next()).unwrap_or("").to_string();
        let (status, body) = parse_response(&resp);
        (status, ctype, body)
    }
}

#[test]
fn serve_files_put_get_list_through_the_copier() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let id = server.create(json!({}));
    let files = |q: &str| format!("/v1/sandboxes/{id}/files?{q}");
    // A file that is not text, with its mode, read back byte for byte; the
    // sandbox's user owns it.
    let blob: Vec<u8> = (0..(1u32 << 20)).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let (status, _, body) = server.bytes("PUT", &files("path=/tmp/blob.bin&mode=640"), "", &blob);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["bytes"], blob.len(), "{v}");
    let (status, ctype, got) = server.bytes("GET", &files("path=/tmp/blob.bin"), "", b"");
    assert_eq!((status, ctype.as_str()), (200, "application/octet-stream"));
    assert!(got == blob, "the file came back different ({} bytes)", got.len());
    let (_, v) = server.exec(&id, json!({"argv": ["sh", "-c", "stat -c '%a %u' /tmp/blob.bin; id -u"]}));
    let out = stdout_of(&v);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("640 {}", lines[1]), "{v}");
    // A tar into an existing directory, a tree out as a tar (GNU tar reads it).
    let t = TempDir::new("serve-files");
    std::fs::create_dir_all(t.join("proj/sub")).unwrap();
    std::fs::write(t.join("proj/sub/x.txt"), "tree data").unwrap();
    let tar = std::process::Command::new("tar").args(["-c", "-C"]).arg(t.path()).arg("proj").output().unwrap();
    let (status, _, body) =
        server.bytes("PUT", &files("path=/tmp"), "Content-Type: application/x-tar\r\n", &tar.stdout);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, ctype, out) = server.bytes("GET", &files("path=/tmp/proj&format=tar"), "", b"");
    assert_eq!((status, ctype.as_str()), (200, "application/x-tar"));
    let mut x = std::process::Command::new("tar")
        .args(["-x", "-O", "proj/sub/x.txt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    x.stdin.take().unwrap().write_all(&out).unwrap();
    assert_eq!(String::from_utf8_lossy(&x.wait_with_output().unwrap().stdout), "tree data");
    // A directory's entries, typed.
    let (status, v) = server.request("GET", &files("path=/tmp&list=1"), None);
    assert_eq!(status, 200, "{v}");
    let entries: Vec<(String, String)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["type"].as_str().unwrap().to_string()))
        .collect();
    assert!(entries.contains(&("blob.bin".into(), "file".into())) && entries.contains(&("proj".into(), "dir".into())));
    // A symlink the sandbox made toward a host directory resolves inside
    // the sandbox's root: the host's file is never read.
    let victim = t.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("marker"), "host secret").unwrap();
    let (_, v) = server.exec(&id, json!({"argv": ["ln", "-s", victim.to_str().unwrap(), "/tmp/esc"]}));
    assert_eq!(v["exit_code"], 0, "{v}");
    let (status, v) = server.request("GET", &files("path=/tmp/esc/marker"), None);
    assert_error(status, &v, 404, "copy");
    // Refusals: verdict-shaped, with the status that says why.
    let (status, v) = server.request("GET", &files("path=/tmp/missing"), None);
    assert_error(status, &v, 404, "copy");
    let (status, _, body) = server.bytes("PUT", &files("path=/usr/x"), "", b"x");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_error(status, &v, 403, "copy");
    assert_eq!(v["error"]["errno"], "EROFS", "{v}");
    let (status, v) = server.request("GET", &files("path=/tmp"), None);
    assert_error(status, &v, 400, "copy");
    let (status, v) = server.request("GET", &files(""), None);
    assert_error(status, &v, 400, "request");
    let (status, v) = server.request("GET", "/v1/sandboxes/nosuchbox/files?path=/tmp", None);
    assert_error(status, &v, 404, "lookup");
}

#[test]
fn serve_exec_is_cancelled_when_its_client_goes_away() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let id = server.create(json!({}));
    let state = |server: &Server| server.request("GET", &format!("/v1/sandboxes/{id}"), None).1["state"].clone();
    // A command that ignores SIGTERM: the cancel ends it all the same.
    for stream in ["", "?stream=1"] {
        let body = json!({"argv": ["sh", "-c", "trap '' TERM; sleep 1000"]}).to_string();
        let mut client = server.connect();
        let req =
            format!("POST /v1/sandboxes/{id}/exec{stream} HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        client.write_all(req.as_bytes()).unwrap();
        assert!(wait_until(Duration::from_secs(30), || state(&server) == "EXECUTING"), "{}", state(&server));
        drop(client);
        assert!(
            wait_until(Duration::from_secs(60), || state(&server) == "READY"),
            "the exec of a client that went away still runs ({stream}): {}",
            state(&server)
        );
    }
    let (status, v) = server.exec(&id, json!({"argv": ["true"]}));
    assert_eq!((status, &v["exit_code"]), (200, &json!(0)), "{v}");
}

#[test]
fn serve_code_call_without_a_timeout_cannot_run_forever() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--code-timeout", "2s"]);
    let id = server.create(json!({}));
    let (status, v) = server.exec(&id, json!({"code": "sleep 1000", "language": "sh"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["termination"].as_str(), v["exit_code"].as_i64()), (Some("wall_timeout"), Some(124)), "{v}");
    // A call's own timeout overrides the default.
    let (status, v) = server.exec(&id, json!({"code": "sleep 3; echo done", "language": "sh", "timeout": "60s"}));
    assert_eq!((status, v["exit_code"].as_i64(), stdout_of(&v).as_str()), (200, Some(0), "done\n"), "{v}");
}

#[test]
fn serve_sandbox_without_max_lifetime_is_bounded_by_default() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let id = server.create(json!({"ttl": "3s"}));
    let v = server.request("GET", &format!("/v1/sandboxes/{id}"), None).1;
    assert_eq!(v["max_lifetime_ms"], json!(24 * 3600 * 1000), "{v}");
    let longer = server.create(json!({"max_lifetime": "48h"}));
    let v = server.request("GET", &format!("/v1/sandboxes/{longer}"), None).1;
    assert_eq!(v["max_lifetime_ms"], json!(48 * 3600 * 1000), "{v}");
}

#[test]
fn exec_whose_supervisor_is_sigkilled_says_the_sandbox_is_gone() {
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    // Through the CLI: the verdict, then inspect.
    let id = sbx.create_with(&[]);
    let rec = sbx.inspect(&id);
    let mut exec = sbx
        .husk(&["exec", "--json-stream", &id, "--", "sh", "-c", "echo up; sleep 1000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(exec.stdout.take().unwrap()).lines();
    // The command runs (its first output arrived): now its supervisor dies.
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("up"), "{first}");
    signal_supervisor(&rec, nix::sys::signal::Signal::SIGKILL);
    let last = lines.map(Result::unwrap).last().unwrap();
    let v: Value = serde_json::from_str(&last).unwrap();
    let v = &v["verdict"];
    assert_eq!(exec.wait().unwrap().code(), Some(125), "{v}");
    assert_eq!(
        (v["termination"].as_str(), v["error"]["step"].as_str()),
        (Some("setup_failed"), Some("sandbox")),
        "{v}"
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("is gone: its supervisor died"), "{v}");
    // A sandbox whose supervisor died while idle: inspect does not call it
    // ready.
    let idle = sbx.create_with(&[]);
    signal_supervisor(&sbx.inspect(&idle), nix::sys::signal::Signal::SIGKILL);
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let out = sbx.out(&["inspect", &idle]);
            text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            !out.status.success()
        }),
        "inspect still shows it: {text}"
    );
    assert!(text.contains("is gone") || text.contains("its supervisor had died"), "{text}");
    // Through serve: the exec's answer, then GET.
    let id = server.create(json!({}));
    let body = json!({"argv": ["sleep", "1000"]});
    let client = {
        let (socket, id) = (server.socket(), id.clone());
        std::thread::spawn(move || {
            let body = body.to_string();
            let mut s = UnixStream::connect(socket).unwrap();
            let req = format!("POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len());
            s.write_all(req.as_bytes()).unwrap();
            let mut resp = Vec::new();
            s.read_to_end(&mut resp).unwrap();
            resp
        })
    };
    assert!(wait_until(Duration::from_secs(30), || sbx.inspect(&id)["state"] == "executing"));
    signal_supervisor(&sbx.inspect(&id), nix::sys::signal::Signal::SIGKILL);
    let (status, bytes) = parse_response(&client.join().unwrap());
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((status, v["error"]["step"].as_str()), (404, Some("sandbox")), "{v}");
    let (status, v) = server.request("GET", &format!("/v1/sandboxes/{id}"), None);
    assert!(status == 404 || v["state"] == "DESTROYED", "{status} {v}");
}
