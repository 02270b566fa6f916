//! Fork and commit through the three doors — the CLI, `husk serve` and
//! `husk mcp` — which call the same library (build::fork): the same
//! results (ids, records, what a commit stored) and the same failure (a
//! missing sandbox: the same message; its step `sandbox`, serve's 404
//! `lookup`). Root pass (forks need the source's cgroup to freeze it).
mod imagekit;
use imagekit::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// `husk serve` on a private socket, killed (by pid) on drop.
struct Serve {
    child: Child,
    sock: std::path::PathBuf,
}

impl Serve {
    fn start(live: &Live, t: &TempDir) -> Serve {
        let sock = t.join("api.sock");
        let mut child = Command::new(husk_bin())
            .args(["serve", "--listen", &format!("unix:{}", sock.display())])
            .env("HUSK_ROOT", &live.store)
            .env("HUSK_STATE_DIR", &live.state)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn husk serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("husk serve: listening on"), "serve said {line:?}");
        Serve { child, sock }
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let body = body.to_string();
        let mut s = UnixStream::connect(&self.sock).expect("connect to serve");
        // Bounded: a fork's supervisor that kept serve's end of this
        // connection would keep it open after the answer.
        s.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: husk\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        // Read to the end: the connection closes once answered, which it
        // could not if a fork's supervisor had kept serve's socket.
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let text = String::from_utf8_lossy(&resp);
        let status = text[9..12].parse().unwrap();
        let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
        (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("POST {path}: {e}: {text}")))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// `husk mcp --image bb`, one JSON-RPC line per call.
struct Mcp {
    child: Child,
    input: Option<ChildStdin>,
    output: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(live: &Live) -> Mcp {
        let mut child = Command::new(husk_bin())
            .args(["mcp", "--image", "bb", "--ttl", "2m"])
            .env("HUSK_ROOT", &live.store)
            .env("HUSK_STATE_DIR", &live.state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn husk mcp");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp { child, input: Some(input), output, next: 1 };
        m.rpc("initialize", json!({"protocolVersion": "2025-06-18"}));
        m
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        writeln!(
            self.input.as_mut().unwrap(),
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{method}: {e}: {line:?}"));
        v["result"].clone()
    }

    /// A tool's structuredContent, and whether it failed.
    fn call(&mut self, tool: &str, args: Value) -> (Value, bool) {
        let r = self.rpc("tools/call", json!({"name": tool, "arguments": args}));
        (r["structuredContent"].clone(), r["isError"] == true)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        // End of input: the session removes its sandboxes and exits.
        drop(self.input.take());
        let _ = self.child.wait();
    }
}

fn cli_json(live: &Live, args: &[&str]) -> (bool, Value) {
    let o = live.husk(args);
    let v = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("husk {args:?}: {e}: {}", stderr(&o)));
    (o.status.success(), v)
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    k.sort();
    k
}

#[test]
fn fork_commit_through_cli_serve_and_mcp_agree() {
    let t = TempDir::new("ops-doors");
    let live = Live::new(&t, busybox_data_store(&t));
    let src = live.create(&["--image", "bb", "--workdir", "/work"]);
    live.sh(&src, "echo base > state");
    let serve = Serve::start(&live, &t);

    // Fork: the same answer's shape, forks that start from the source.
    let (ok, cli) = cli_json(&live, &["fork", "--json", &src, "--count", "2"]);
    assert!(ok, "{cli}");
    let (status, api) =
        serve.post(&format!("/v1/sandboxes/{src}/fork"), &json!({"count": 2, "labels": {"via": "api"}}));
    assert_eq!(status, 201, "{api}");
    let ids = |v: &Value| -> Vec<String> {
        v["sandboxes"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
    };
    let (cli_ids, api_ids) = (ids(&cli), ids(&api));
    for id in cli_ids.iter().chain(&api_ids) {
        live.adopt(id);
    }
    assert_eq!((cli_ids.len(), api_ids.len()), (2, 2));
    assert_eq!(keys(&cli), keys(&api), "the same answer: {cli} / {api}");
    assert_eq!(keys(&cli["snapshot"]), keys(&api["snapshot"]));
    assert_eq!(keys(&cli["sandboxes"][0]), keys(&api["sandboxes"][0]));
    assert_eq!(cli["snapshot"]["changes"], api["snapshot"]["changes"], "the same changes read");
    assert_eq!(api["sandboxes"][0]["state"], "READY", "serve's states are upper case");
    assert_eq!(api["sandboxes"][0]["labels"]["via"], "api");
    // A fork's supervisor keeps every fd its maker had but stdio: serve's
    // forks' keep nothing of the request (its connection, its pipes): no
    // more sockets or pipes than a CLI fork's (whose maker had the test's
    // own fds).
    let kinds = |rec: &Value, kind: &str| -> usize {
        let pid = rec["supervisor_pid"].as_u64().expect("a supervisor pid");
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.display().to_string().starts_with(kind)))
            .count()
    };
    // The handover is confirmed after the answer was written, so the
    // supervisor may still hold its socket to the maker for a moment.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for kind in ["socket:", "pipe:"] {
        let c = kinds(&cli["sandboxes"][0], kind);
        let mut a = kinds(&api["sandboxes"][0], kind);
        while a > c && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(50));
            a = kinds(&api["sandboxes"][0], kind);
        }
        assert!(a <= c, "a serve fork's supervisor has {a} {kind} fds, a CLI fork's {c}");
    }
    for id in cli_ids.iter().chain(&api_ids) {
        assert_eq!(live.sh(id, "cat state"), "base\n", "fork {id} starts from the source");
        assert!(live.ok(&["ls"]).contains(id.as_str()), "fork {id} was handed over and lives");
    }

    // Commit: what each stored, by the same call.
    let (ok, cli_c) = cli_json(&live, &["commit", "--json", &src, "img:cli"]);
    assert!(ok, "{cli_c}");
    let (status, api_c) = serve.post(&format!("/v1/sandboxes/{src}/commit"), &json!({"tag": "img:api"}));
    assert_eq!(status, 201, "{api_c}");
    assert_eq!(keys(&cli_c), keys(&api_c));
    assert_eq!(cli_c["changes"], api_c["changes"]);
    assert_eq!(cli_c["layer"], api_c["layer"], "the same changes make the same layer");
    assert!(cli_c["name"].as_str().unwrap().contains("img"), "{cli_c}");
    assert!(api_c["name"].as_str().unwrap().contains("img"), "{api_c}");

    // MCP: its own session's sandbox, forked and committed.
    let mut mcp = Mcp::start(&live);
    let (made, failed) = mcp.call("create_sandbox", json!({}));
    assert!(!failed, "{made}");
    let m = made["sandbox_id"].as_str().unwrap().to_string();
    live.sh(&m, "echo mcp > mine");
    let (forked, failed) = mcp.call("fork_sandbox", json!({"sandbox_id": m, "count": 2}));
    assert!(!failed, "{forked}");
    let mcp_ids: Vec<String> =
        forked["sandbox_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(mcp_ids.len(), 2, "{forked}");
    for id in &mcp_ids {
        assert_eq!(live.sh(id, "cat mine"), "mcp\n");
    }
    let (c, failed) = mcp.call("commit_sandbox", json!({"sandbox_id": m, "tag": "mine:v1"}));
    assert!(!failed, "{c}");
    assert_eq!(c["image"], "mcp/mine:v1", "{c}");

    // A missing sandbox: one message through the three doors. The MCP
    // session's own sandbox, removed behind its back, is missing for all.
    live.ok(&["rm", &m]);
    let (ok, cli_e) = cli_json(&live, &["fork", "--json", &m]);
    assert!(!ok);
    let (status, api_e) = serve.post(&format!("/v1/sandboxes/{m}/fork"), &json!({}));
    let (mcp_e, failed) = mcp.call("fork_sandbox", json!({"sandbox_id": m}));
    assert!(failed, "{mcp_e}");
    let message = cli_e["error"]["message"].as_str().unwrap();
    assert!(message.contains(&m), "{cli_e}");
    assert_eq!(cli_e["error"]["step"], "sandbox", "{cli_e}");
    assert_eq!(status, 404, "{api_e}");
    assert_eq!(api_e["error"]["step"], "lookup");
    assert_eq!(api_e["error"]["message"], message, "serve says what the CLI says");
    assert_eq!(mcp_e["error"], message, "MCP says what the CLI says");
    assert_eq!(mcp_e["step"], "sandbox");

    // Commit of it: the same again.
    let (_, cli_e) = cli_json(&live, &["commit", "--json", &m, "gone:1"]);
    let (status, api_e) = serve.post(&format!("/v1/sandboxes/{m}/commit"), &json!({"tag": "gone:1"}));
    assert_eq!(status, 404, "{api_e}");
    assert_eq!(cli_e["error"]["step"], "sandbox", "{cli_e}");
    assert_eq!(api_e["error"]["message"], cli_e["error"]["message"]);

    // A bad request: serve and the library refuse it before anything is made.
    let (status, bad) = serve.post(&format!("/v1/sandboxes/{src}/fork"), &json!({"count": 0}));
    assert_eq!((status, bad["error"]["step"].as_str()), (400, Some("arguments")), "{bad}");
    let (status, bad) = serve.post(&format!("/v1/sandboxes/{src}/fork"), &json!({"cuont": 1}));
    assert_eq!((status, bad["error"]["step"].as_str()), (400, Some("request")), "{bad}");
    drop(mcp);
    for id in &mcp_ids {
        assert!(!live.ok(&["ls"]).contains(id.as_str()), "the MCP session removed its fork {id} when it ended");
    }
}
