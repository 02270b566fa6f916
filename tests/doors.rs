//! The front doors agree: the same 20 operations on a sandbox, driven
//! through the CLI (`husk create | exec | cp | ls | ...`), `husk serve`
//! (HTTP over its unix socket) and `husk mcp` (JSON-RPC on stdio), give the
//! same results. What is compared is what a caller acts on (termination,
//! exit code, output text, the error's step and message, the record's
//! fields), not ids or times. Each door's answer is brought to one shape
//! (`norm_*`); the CLI is the reference.
//!
//! Where a door does not have an operation, or answers it differently on
//! purpose (MCP's tools act only on the session's own sandboxes; its exec
//! takes a shell line), the difference is listed in `EXPECTED` with why.
//! The test fails on a difference not listed AND on a listed one that is
//! gone, so closing a gap means deleting its line here.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

/// The operations, in the order one sandbox's life goes through them.
const OPS: [&str; 20] = [
    "create",
    "exec_ok",
    "exec_nonzero",
    "exec_timeout",
    "exec_output_limit",
    "run_code",
    "write_file",
    "read_file",
    "list_files",
    "list",
    "inspect",
    "renew",
    "pause",
    "exec_paused",
    "resume",
    "exec_missing_binary",
    "fork",
    "destroy",
    "destroy_missing",
    "create_bad_input",
];

/// (operation, door, field or "*" for any field, why): the
/// differences between a door and the CLI that are known and meant (or
/// not yet closed: issue 30).
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    ("list", "mcp", "name", "the sandbox create_sandbox made has no name"),
    ("list", "mcp", "labels", "the sandbox create_sandbox made has no labels"),
    ("inspect", "mcp", "name", "the sandbox create_sandbox made has no name"),
    ("inspect", "mcp", "labels", "the sandbox create_sandbox made has no labels"),
    ("inspect", "mcp", "env", "the sandbox create_sandbox made has no env"),
    ("create", "mcp", "name", "create_sandbox takes no name (the session names sandboxes by id)"),
    ("create", "mcp", "labels", "create_sandbox takes no labels"),
    ("create", "mcp", "env", "create_sandbox takes no env"),
    (
        "exec_missing_binary",
        "mcp",
        "*",
        "MCP's exec runs a shell line (sh -c): sh reports the missing binary (exited 127, on stderr)",
    ),
    ("destroy_missing", "serve", "step", "serve names a failed lookup `lookup` (its 404) where the CLI says `sandbox`"),
    ("destroy_missing", "mcp", "message", "MCP refuses an id its session did not make before asking husk"),
    ("create_bad_input", "mcp", "message", "MCP names the tool's argument (memory), the CLI its flag (--memory)"),
];

const LIMIT: &str = "1K";
const BIG: usize = 5000;

struct Ctx {
    sbx: Sbx,
    rootfs: String,
    host: TempDir,
}

impl Ctx {
    /// An error message with what differs per sandbox or run taken out.
    fn clean(&self, text: &str, id: &str) -> String {
        let mut t = text.replace(self.sbx.state.path().to_str().unwrap(), "<STATE>");
        if !id.is_empty() {
            t = t.replace(id, "<ID>");
        }
        t
    }

    /// A verdict in the compared shape.
    fn norm_verdict(&self, v: &Value, id: &str) -> Value {
        let failed = v["termination"] == "setup_failed";
        let text = |s: &str| match v[s]["text"].as_str() {
            _ if failed => Value::Null,
            Some(t) => json!(lines(t)),
            None => Value::Null,
        };
        json!({
            "termination": v["termination"],
            "exit_code": v["exit_code"],
            "stdout": text("stdout"),
            "stderr": text("stderr"),
            "stdout_truncated": if failed { Value::Null } else { v["stdout"]["truncated"].clone() },
            "stdout_bytes": if failed { Value::Null } else { v["stdout"]["bytes"].clone() },
            "step": v["error"]["step"],
            "message": v["error"]["message"].as_str().map(|m| self.clean(m, id)),
        })
    }

    /// A failure in the compared shape: step and message.
    fn norm_error(&self, step: &Value, message: &str, id: &str) -> Value {
        json!({"step": step, "message": self.clean(message, id)})
    }

    /// A sandbox's record in the compared shape, as `husk inspect` shows
    /// it (every door's sandbox is looked at the same way).
    fn norm_record(&self, v: &Value) -> Value {
        let mut labels = v["labels"].clone();
        if let Some(l) = labels.as_object_mut() {
            l.remove("husk-serve");
        }
        let env: Vec<Value> = v["spec"]["env"].as_array().into_iter().flatten().map(|p| p[0].clone()).collect();
        json!({
            "state": v["state"].as_str().map(str::to_ascii_lowercase),
            "backend": v["backend"],
            "workdir": v["workdir"],
            "name": v["name"],
            "labels": labels,
            "env": env,
            "root": v["spec"]["root"],
            "memory": v["spec"]["limits"]["memory"],
        })
    }

    fn inspect(&self, id: &str) -> Value {
        self.norm_record(&self.sbx.inspect(id))
    }

    fn listing(entries: &Value) -> Value {
        let mut e: Vec<Value> = entries
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| json!({"name": e["name"], "type": e["type"], "size": e["size"], "mode": e["mode"]}))
            .collect();
        e.sort_by_key(|x| x["name"].as_str().unwrap_or("").to_string());
        Value::Array(e)
    }
}

/// Output text as MCP's summary shows it: a last line without its
/// newline gets one.
fn lines(t: &str) -> String {
    if t.is_empty() || t.ends_with('\n') { t.to_string() } else { format!("{t}\n") }
}

/// What one door made of one operation.
enum Got {
    Is(Value),
    /// The door has no such operation (none lacks one today: MCP got
    /// list, inspect and renew; kept for the next door).
    #[allow(dead_code)]
    Gap,
}

trait Door {
    fn name(&self) -> &'static str;
    /// The operation `op` on sandbox `id` ("" before create).
    fn op(&mut self, ctx: &Ctx, op: &str, id: &str) -> Got;
    /// The id `create` made.
    fn created(&self) -> String;
}

// ------------------------------------------------------------------ CLI --

struct Cli {
    id: String,
}

impl Cli {
    fn exec(&self, ctx: &Ctx, id: &str, extra: &[&str], cmd: &[&str]) -> Value {
        let (v, _) = ctx.sbx.exec_json(id, extra, cmd);
        ctx.norm_verdict(&v, id)
    }

    fn failure(ctx: &Ctx, args: &[&str], id: &str) -> Value {
        let out = ctx.sbx.out(args);
        assert!(!out.status.success(), "husk {args:?} should fail");
        let v = verdict_of(&out);
        ctx.norm_error(&v["error"]["step"], v["error"]["message"].as_str().unwrap_or(""), id)
    }
}

impl Door for Cli {
    fn name(&self) -> &'static str {
        "cli"
    }

    fn created(&self) -> String {
        self.id.clone()
    }

    fn op(&mut self, ctx: &Ctx, op: &str, id: &str) -> Got {
        let sh = |script: &str| vec!["sh", "-c", script].into_iter().map(String::from).collect::<Vec<_>>();
        let run = |extra: &[&str], script: &str| {
            let cmd = sh(script);
            let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
            self.exec(ctx, id, extra, &cmd)
        };
        Got::Is(match op {
            "create" => {
                let out = ctx.sbx.out(&[
                    "create",
                    "--json",
                    "--rootfs",
                    &ctx.rootfs,
                    "--memory",
                    "64M",
                    "--env",
                    "FOO=bar",
                    "--name",
                    "doors",
                    "--label",
                    "door=any",
                ]);
                let v: Value = serde_json::from_slice(&out.stdout).expect("create --json prints the record");
                self.id = v["id"].as_str().expect("an id").to_string();
                ctx.inspect(&self.id)
            }
            "exec_ok" => run(&[], "echo out; echo err >&2"),
            "exec_nonzero" => run(&[], "echo bye; exit 3"),
            "exec_timeout" => run(&["--timeout", "1s"], "echo hi; sleep 5"),
            "exec_output_limit" => run(&["--output-limit", LIMIT], &format!("head -c {BIG} /dev/zero | tr '\\0' x")),
            "run_code" => {
                let mut c = ctx
                    .sbx
                    .husk(&["exec", "--json", "--code", "-", "--language", "sh", id])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                c.stdin.take().unwrap().write_all(b"echo code:$((6*7))\n").unwrap();
                let out = c.wait_with_output().unwrap();
                ctx.norm_verdict(&verdict_of(&out), id)
            }
            "write_file" => {
                let src = ctx.host.join("in.txt");
                std::fs::write(&src, "hello doors\n").unwrap();
                let out = ctx.sbx.out(&["cp", src.to_str().unwrap(), &format!("{id}:f.txt")]);
                json!({"written": out.status.success()})
            }
            "read_file" => {
                let dst = ctx.host.join("out.txt");
                let out = ctx.sbx.out(&["cp", &format!("{id}:f.txt"), dst.to_str().unwrap()]);
                assert!(out.status.success(), "cp out: {}", String::from_utf8_lossy(&out.stderr));
                json!({"content": std::fs::read_to_string(dst).unwrap()})
            }
            "list_files" => {
                let out = ctx.sbx.out(&["cp", "--list", &format!("{id}:.")]);
                Ctx::listing(&serde_json::from_slice(&out.stdout).expect("cp --list prints JSON"))
            }
            "list" => {
                let out = ctx.sbx.out(&["ls", "--json"]);
                let all: Value = serde_json::from_slice(&out.stdout).unwrap();
                let me = all.as_array().unwrap().iter().find(|r| r["id"] == id).cloned().unwrap_or(Value::Null);
                list_entry(&me)
            }
            "inspect" => ctx.inspect(id),
            "renew" => {
                let out = ctx.sbx.out(&["renew", "--json", "--ttl", "5m", id]);
                let v: Value = serde_json::from_slice(&out.stdout).expect("renew --json");
                json!({"ttl_ms": v["ttl_ms"]})
            }
            "pause" | "resume" => {
                let out = ctx.sbx.out(&[op, id]);
                assert!(out.status.success(), "{op}: {}", String::from_utf8_lossy(&out.stderr));
                json!({"state": ctx.inspect(id)["state"]})
            }
            "exec_paused" => run(&[], "true"),
            "exec_missing_binary" => self.exec(ctx, id, &[], &["nosuch-binary"]),
            "destroy" => {
                let out = ctx.sbx.out(&["rm", "--json", id]);
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                json!({"destroyed": v["removed"].as_array().is_some_and(|r| r.iter().any(|x| x == id)), "left": ctx.sbx.ids().contains(&id.to_string())})
            }
            "destroy_missing" => Self::failure(ctx, &["rm", "--json", "nosuchbox"], ""),
            "create_bad_input" => {
                Self::failure(ctx, &["create", "--json", "--rootfs", &ctx.rootfs, "--memory", "12QQ"], "")
            }
            "fork" => {
                // A rootfs sandbox cannot be forked (a fork is a snapshot
                // of its changes over an image): the refusal is compared.
                Self::failure(ctx, &["fork", "--json", id], id)
            }
            other => panic!("no operation {other}"),
        })
    }
}

fn list_entry(v: &Value) -> Value {
    let mut labels = v["labels"].clone();
    if let Some(l) = labels.as_object_mut() {
        l.remove("husk-serve");
    }
    json!({"state": v["state"].as_str().map(str::to_ascii_lowercase), "name": v["name"], "labels": labels, "backend": v["backend"], "workdir": v["workdir"]})
}

// ---------------------------------------------------------------- serve --

/// `husk serve` on the state dir's socket, stopped by pid on drop.
struct Serve {
    child: Child,
    socket: String,
    id: String,
}

impl Serve {
    fn start(sbx: &Sbx) -> Serve {
        let mut child = sbx.husk(&["serve"]).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let socket = line.trim().strip_prefix("husk serve: listening on unix:").expect("serve's address").to_string();
        Serve { child, socket, id: String::new() }
    }

    /// One request; (status, body bytes).
    fn call(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let mut s = UnixStream::connect(&self.socket).expect("connect to serve");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: husk\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).and_then(|_| s.write_all(body)).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let text = String::from_utf8_lossy(&resp);
        let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not HTTP: {text}"));
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
        (status, resp[end..].to_vec())
    }

    fn json(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let b = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, bytes) = self.call(method, path, b.as_bytes());
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
        (status, v)
    }

    fn exec(&self, ctx: &Ctx, id: &str, body: Value) -> Value {
        let (_, v) = self.json("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body));
        ctx.norm_verdict(&v, id)
    }

    fn failure(ctx: &Ctx, status: u16, v: &Value, id: &str) -> Value {
        assert!(status >= 400, "should fail: {v}");
        ctx.norm_error(&v["error"]["step"], v["error"]["message"].as_str().unwrap_or(""), id)
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

impl Door for Serve {
    fn name(&self) -> &'static str {
        "serve"
    }

    fn created(&self) -> String {
        self.id.clone()
    }

    fn op(&mut self, ctx: &Ctx, op: &str, id: &str) -> Got {
        let sh = |script: &str| json!(["sh", "-c", script]);
        let files = |q: &str| format!("/v1/sandboxes/{id}/files?{q}");
        Got::Is(match op {
            "create" => {
                let (status, v) = self.json(
                    "POST",
                    "/v1/sandboxes",
                    Some(json!({"rootfs": ctx.rootfs, "memory": "64M", "env": {"FOO": "bar"}, "name": "doors", "labels": {"door": "any"}})),
                );
                assert_eq!(status, 201, "{v}");
                self.id = v["id"].as_str().unwrap().to_string();
                ctx.inspect(&self.id)
            }
            "exec_ok" => self.exec(ctx, id, json!({"argv": sh("echo out; echo err >&2")})),
            "exec_nonzero" => self.exec(ctx, id, json!({"argv": sh("echo bye; exit 3")})),
            "exec_timeout" => self.exec(ctx, id, json!({"argv": sh("echo hi; sleep 5"), "timeout": "1s"})),
            "exec_output_limit" => self.exec(
                ctx,
                id,
                json!({"argv": sh(&format!("head -c {BIG} /dev/zero | tr '\\0' x")), "output_limit": LIMIT}),
            ),
            "run_code" => self.exec(ctx, id, json!({"code": "echo code:$((6*7))\n", "language": "sh"})),
            "write_file" => {
                let (status, _) = self.call("PUT", &files("path=f.txt"), b"hello doors\n");
                json!({"written": status == 200})
            }
            "read_file" => {
                let (status, bytes) = self.call("GET", &files("path=f.txt"), b"");
                assert_eq!(status, 200);
                json!({"content": String::from_utf8_lossy(&bytes)})
            }
            "list_files" => Ctx::listing(&self.json("GET", &files("path=.&list=1"), None).1["entries"]),
            "list" => {
                let (_, v) = self.json("GET", "/v1/sandboxes", None);
                let me = v["sandboxes"].as_array().unwrap().iter().find(|r| r["id"] == id).cloned();
                list_entry(&me.unwrap_or(Value::Null))
            }
            "inspect" => ctx.norm_record(&self.json("GET", &format!("/v1/sandboxes/{id}"), None).1),
            "renew" => {
                let (_, v) = self.json("POST", &format!("/v1/sandboxes/{id}/renew"), Some(json!({"ttl": "5m"})));
                json!({"ttl_ms": v["ttl_ms"]})
            }
            "pause" | "resume" => {
                let (status, v) = self.json("POST", &format!("/v1/sandboxes/{id}/{op}"), Some(json!({})));
                assert_eq!(status, 200, "{v}");
                json!({"state": v["state"].as_str().map(str::to_ascii_lowercase)})
            }
            "exec_paused" => self.exec(ctx, id, json!({"argv": ["true"]})),
            "exec_missing_binary" => self.exec(ctx, id, json!({"argv": ["nosuch-binary"]})),
            "destroy" => {
                let (_, v) = self.json("DELETE", &format!("/v1/sandboxes/{id}"), None);
                json!({"destroyed": v["destroyed"] == true, "left": ctx.sbx.ids().contains(&id.to_string())})
            }
            "destroy_missing" => {
                let (status, v) = self.json("DELETE", "/v1/sandboxes/nosuchbox", None);
                Self::failure(ctx, status, &v, "")
            }
            "create_bad_input" => {
                let (status, v) =
                    self.json("POST", "/v1/sandboxes", Some(json!({"rootfs": ctx.rootfs, "memory": "12QQ"})));
                Self::failure(ctx, status, &v, "")
            }
            "fork" => {
                let (status, v) = self.json("POST", &format!("/v1/sandboxes/{id}/fork"), Some(json!({})));
                Self::failure(ctx, status, &v, id)
            }
            other => panic!("no operation {other}"),
        })
    }
}

// ------------------------------------------------------------------ MCP --

/// `husk mcp` on stdio, its input closed on drop (it then removes the
/// sandboxes it made and exits).
struct Mcp {
    child: Child,
    input: Option<ChildStdin>,
    output: BufReader<ChildStdout>,
    next: u64,
    id: String,
}

impl Mcp {
    fn start(ctx: &Ctx) -> Mcp {
        let mut child = ctx
            .sbx
            .husk(&["mcp", "--rootfs", &ctx.rootfs, "--output-limit", LIMIT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let input = child.stdin.take();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp { child, input, output, next: 0, id: String::new() };
        let init = m.rpc("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "doors", "version": "0"}}));
        assert_eq!(init["serverInfo"]["name"], "husk", "{init}");
        m.notify("notifications/initialized");
        m
    }

    fn notify(&mut self, method: &str) {
        let msg = json!({"jsonrpc": "2.0", "method": method});
        writeln!(self.input.as_mut().unwrap(), "{msg}").unwrap();
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        writeln!(self.input.as_mut().unwrap(), "{msg}").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{method}: not JSON ({e}): {line:?}"));
        assert_eq!(v["id"], self.next, "{v}");
        v["result"].clone()
    }

    /// A tool call: (is_error, text, structuredContent).
    fn tool(&mut self, name: &str, args: Value) -> (bool, String, Value) {
        let r = self.rpc("tools/call", json!({"name": name, "arguments": args}));
        let text = r["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{name}: no text: {r}")).to_string();
        (r["isError"] == true, text, r["structuredContent"].clone())
    }

    /// run_code and exec: the verdict as the reply tells it (the text
    /// holds the output and a failure's step and message).
    fn ran(&mut self, ctx: &Ctx, id: &str, name: &str, args: Value) -> Value {
        let (_, text, s) = self.tool(name, args);
        let failed = s["termination"] == "setup_failed";
        let (step, message) = match failed {
            true => {
                let rest = text.strip_prefix("husk could not run it (step ").unwrap_or_else(|| panic!("{text}"));
                let (step, m) = rest.split_once("): ").unwrap();
                let m = m.trim_end().split(" (hint: ").next().unwrap();
                (json!(step), Some(ctx.clean(m, id)))
            }
            false => (Value::Null, None),
        };
        json!({
            "termination": s["termination"],
            "exit_code": s["exit_code"],
            "stdout": if failed { Value::Null } else { json!(stream_text(&text, "stdout", "stderr")) },
            "stderr": if failed { Value::Null } else { json!(stream_text(&text, "stderr", "")) },
            "stdout_truncated": if failed { Value::Null } else { s["stdout_truncated"].clone() },
            "stdout_bytes": if failed { Value::Null } else { s["stdout_bytes"].clone() },
            "step": step,
            "message": message,
        })
    }

    fn failure(ctx: &Ctx, reply: (bool, String, Value)) -> Value {
        let (is_error, _, s) = reply;
        assert!(is_error, "should fail: {s}");
        ctx.norm_error(&s["step"], s["error"].as_str().unwrap_or(""), "")
    }
}

/// A stream's text in a run's summary (mcp/summary.rs): the lines after
/// `NAME (...):` up to the next stream's header (`next`), "" when empty.
fn stream_text(summary: &str, name: &str, next: &str) -> String {
    let Some(start) = summary.find(&format!("\n{name} (")) else { return String::new() };
    let body = &summary[start + 1..];
    let body = &body[body.find(":\n").expect("a header") + 2..];
    let end = if next.is_empty() { None } else { body.rfind(&format!("\n{next}")).map(|i| i + 1) };
    body[..end.unwrap_or(body.len())].to_string()
}

impl Drop for Mcp {
    fn drop(&mut self) {
        drop(self.input.take());
        let _ = self.child.wait();
    }
}

impl Door for Mcp {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn created(&self) -> String {
        self.id.clone()
    }

    fn op(&mut self, ctx: &Ctx, op: &str, id: &str) -> Got {
        let sid = json!(id);
        Got::Is(match op {
            "create" => {
                let (is_error, text, s) = self.tool("create_sandbox", json!({"memory": "64M"}));
                assert!(!is_error, "{text}");
                self.id = s["sandbox_id"].as_str().unwrap().to_string();
                let r = ctx.inspect(&self.id);
                assert_eq!(r["workdir"], s["workdir"], "create_sandbox's reply names the workdir");
                r
            }
            "exec_ok" => self.ran(ctx, id, "exec", json!({"sandbox_id": sid, "command": "echo out; echo err >&2"})),
            "exec_nonzero" => self.ran(ctx, id, "exec", json!({"sandbox_id": sid, "command": "echo bye; exit 3"})),
            "exec_timeout" => {
                self.ran(ctx, id, "exec", json!({"sandbox_id": sid, "command": "echo hi; sleep 5", "timeout": "1s"}))
            }
            "exec_output_limit" => self.ran(
                ctx,
                id,
                "exec",
                json!({"sandbox_id": sid, "command": format!("head -c {BIG} /dev/zero | tr '\\0' x")}),
            ),
            "run_code" => self.ran(
                ctx,
                id,
                "run_code",
                json!({"sandbox_id": sid, "code": "echo code:$((6*7))\n", "language": "sh"}),
            ),
            "write_file" => {
                let (is_error, text, _) =
                    self.tool("write_file", json!({"sandbox_id": sid, "path": "f.txt", "content": "hello doors\n"}));
                assert!(!is_error, "{text}");
                json!({"written": !is_error})
            }
            "read_file" => {
                let (is_error, text, _) = self.tool("read_file", json!({"sandbox_id": sid, "path": "f.txt"}));
                assert!(!is_error, "{text}");
                json!({"content": text})
            }
            "list_files" => Ctx::listing(&self.tool("list_files", json!({"sandbox_id": sid})).2["entries"]),
            "list" => {
                let (is_error, text, s) = self.tool("list_sandboxes", json!({}));
                assert!(!is_error, "{text}");
                let me = s["sandboxes"].as_array().unwrap().iter().find(|r| r["id"] == id).cloned();
                list_entry(&me.unwrap_or(Value::Null))
            }
            "inspect" => {
                let (is_error, text, s) = self.tool("inspect_sandbox", json!({"sandbox_id": sid}));
                assert!(!is_error, "{text}");
                ctx.norm_record(&s["sandbox"])
            }
            "renew" => {
                let (is_error, text, s) = self.tool("renew_sandbox", json!({"sandbox_id": sid, "ttl": "5m"}));
                assert!(!is_error, "{text}");
                json!({"ttl_ms": s["ttl_ms"]})
            }
            "fork" => {
                let r = self.tool("fork_sandbox", json!({"sandbox_id": sid}));
                let (is_error, _, s) = &r;
                assert!(is_error, "fork of a rootfs sandbox: {s}");
                ctx.norm_error(&s["step"], s["error"].as_str().unwrap_or(""), id)
            }
            "pause" | "resume" => {
                let (is_error, text, s) = self.tool(&format!("{op}_sandbox"), json!({"sandbox_id": sid}));
                assert!(!is_error, "{text}");
                json!({"state": if s["paused"] == true { "paused" } else { "ready" }})
            }
            "exec_paused" => self.ran(ctx, id, "exec", json!({"sandbox_id": sid, "command": "true"})),
            "exec_missing_binary" => self.ran(ctx, id, "exec", json!({"sandbox_id": sid, "command": "nosuch-binary"})),
            "destroy" => {
                let (is_error, text, s) = self.tool("destroy_sandbox", json!({"sandbox_id": sid}));
                assert!(!is_error, "{text}");
                json!({"destroyed": s["destroyed"] == true, "left": ctx.sbx.ids().contains(&id.to_string())})
            }
            "destroy_missing" => Self::failure(ctx, self.tool("destroy_sandbox", json!({"sandbox_id": "nosuchbox"}))),
            "create_bad_input" => Self::failure(ctx, self.tool("create_sandbox", json!({"memory": "12QQ"}))),
            other => panic!("no operation {other}"),
        })
    }
}

// ----------------------------------------------------------------- test --

/// Every field where `got` differs from `want` (the top-level keys; a
/// non-object value is one field, "value").
fn differences(want: &Value, got: &Value) -> Vec<(String, String)> {
    match (want.as_object(), got.as_object()) {
        (Some(w), Some(g)) => {
            let mut keys: Vec<&String> = w.keys().chain(g.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .filter(|k| w.get(*k) != g.get(*k))
                .map(|k| {
                    (
                        k.clone(),
                        format!("cli {} / door {}", w.get(k).unwrap_or(&Value::Null), g.get(k).unwrap_or(&Value::Null)),
                    )
                })
                .collect()
        }
        _ if want == got => Vec::new(),
        _ => vec![("value".into(), format!("cli {want} / door {got}"))],
    }
}

/// Whether the difference `f` is the expected one `e`.
fn listed(e: &(&str, &str, &str, &str), f: &(String, String, String, String)) -> bool {
    e.0 == f.0 && e.1 == f.1 && (e.2 == f.2 || e.2 == "*")
}

#[test]
fn every_door_gives_the_same_results_for_the_same_operations() {
    require_root!();
    let ctx = Ctx { sbx: Sbx::new(), rootfs: busybox_rootfs().display().to_string(), host: TempDir::new("doors-host") };
    let serve = Serve::start(&ctx.sbx);
    let mcp = Mcp::start(&ctx);
    let mut doors: Vec<Box<dyn Door>> = vec![Box::new(Cli { id: String::new() }), Box::new(serve), Box::new(mcp)];
    let mut results: Vec<BTreeMap<&str, Got>> = Vec::new();
    for door in doors.iter_mut() {
        let mut got = BTreeMap::new();
        for op in OPS {
            let id = door.created();
            got.insert(op, door.op(&ctx, op, &id));
        }
        results.push(got);
    }
    let cli = &results[0];
    for op in OPS {
        let Got::Is(v) = &cli[op] else { panic!("the CLI has every operation ({op})") };
        println!("{op}: cli {v}");
    }
    let mut found: Vec<(String, String, String, String)> = Vec::new();
    for (door, got) in doors.iter().zip(&results).skip(1) {
        for op in OPS {
            let Got::Is(want) = &cli[op] else { unreachable!() };
            match &got[op] {
                Got::Gap => found.push((op.into(), door.name().into(), "*".into(), "no such operation".into())),
                Got::Is(v) => {
                    for (field, how) in differences(want, v) {
                        found.push((op.into(), door.name().into(), field, how));
                    }
                }
            }
        }
    }
    for f in &found {
        println!("difference: {} {} {}: {}", f.0, f.1, f.2, f.3);
    }
    let unexpected: Vec<_> = found.iter().filter(|f| !EXPECTED.iter().any(|e| listed(e, f))).collect();
    let closed: Vec<_> = EXPECTED.iter().filter(|e| !found.iter().any(|f| listed(e, f))).collect();
    assert!(unexpected.is_empty(), "doors differ where they should agree: {unexpected:#?}");
    assert!(closed.is_empty(), "these expected differences are gone; delete them from EXPECTED: {closed:#?}");
    drop(doors);
    assert!(ctx.sbx.ids().is_empty(), "sandboxes left: {:?}", ctx.sbx.ids());
}
