//! `--network allow=` on sandboxes that live (`husk create`): the
//! supervisor holds the egress proxy for the sandbox's whole life, every
//! exec goes out through it, `husk inspect` and each exec's verdict show
//! the accounting so far, and nothing of the proxy outlives the sandbox
//! (rm, lease expiry).

mod common;
mod sandboxkit;

use common::wait_until;
use sandboxkit::Sbx;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

fn children_of(ppid: i64) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.split(' ').nth(1).map(str::to_string)))
                .and_then(|p| p.parse::<i64>().ok())
                == Some(ppid)
        })
        .collect()
}

/// The egress proxy the sandbox's supervisor started.
fn proxy_of(rec: &Value) -> i32 {
    let sup = rec["supervisor"]["pid"].as_i64().expect("record names its supervisor");
    let cmd = |p: &i32| {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default())
            .contains("egress-proxy")
    };
    let found = children_of(sup).into_iter().find(cmd);
    found.unwrap_or_else(|| panic!("no egress-proxy under the supervisor {sup}"))
}

fn gone(pid: i32) -> bool {
    let stat = format!("/proc/{pid}/stat");
    !Path::new(&stat).exists() || std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z "))
}

fn denied<'a>(net: &'a Value, host: &str, reason: &str) -> Option<&'a Value> {
    net["denied"].as_array()?.iter().find(|d| d["host"] == host && d["reason"] == reason)
}

fn destination<'a>(net: &'a Value, host: &str) -> Option<&'a Value> {
    net["destinations"].as_array()?.iter().find(|d| d["host"] == host)
}

#[test]
fn created_sandbox_egress_goes_through_its_proxy_and_is_accounted_live() {
    let port = common::web(7).port;
    let s = Sbx::new();
    let rule = format!("--network=allow=web.test:{port}");
    let id = s.create(&[&rule, "--add-host", "web.test:127.0.0.1"]);
    // Every exec has the proxy's environment and only the proxy as a way out.
    let script = format!(
        "curl -sS http://web.test:{port}/; echo; curl -sS -i http://evil.test:{port}/ | grep X-Husk-Denied; \
         curl -sS --noproxy '*' -m 5 http://127.0.0.1:{port}/ || echo direct-failed"
    );
    let (v, code) = s.exec_json(&id, &[], &["sh", "-c", &script]);
    assert_eq!(code, 0, "{v:#}");
    let out = common::stdout_of(&v);
    assert!(out.starts_with("xxxxxxx\nX-Husk-Denied: not_allowed"), "{out}");
    assert!(out.ends_with("direct-failed\n"), "{out}");
    let net = &v["network"];
    assert_eq!(net["mode"], "allowlist", "{v:#}");
    assert_eq!(destination(net, "web.test").map(|d| d["connections"].clone()), Some(1.into()), "{net:#}");
    assert!(denied(net, "evil.test", "not_allowed").is_some(), "{net:#}");
    // A second exec: the totals are the sandbox's, so far.
    let (v2, code) = s.exec_json(&id, &[], &["sh", "-c", &format!("curl -sS http://web.test:{port}/")]);
    assert_eq!(code, 0, "{v2:#}");
    assert_eq!(destination(&v2["network"], "web.test").map(|d| d["connections"].clone()), Some(2.into()));
    let rec = s.inspect(&id);
    assert_eq!(rec["isolation"]["network"], "allowlist", "{rec:#}");
    assert_eq!(destination(&rec["network"], "web.test").map(|d| d["bytes_down"].as_u64().unwrap() > 14), Some(true));
    assert_eq!(rec["network"]["totals"]["denied"], 1, "{:#}", rec["network"]);
    let proxy = proxy_of(&rec);
    s.rm(&id);
    assert!(wait_until(Duration::from_secs(30), || gone(proxy)), "egress-proxy {proxy} outlived husk rm");
    sandboxkit::assert_gone(&s, &rec, None);
}

#[test]
fn expired_sandbox_leaves_no_proxy_listening() {
    let s = Sbx::new();
    let id = s.create(&["--network=allow=example.com", "--ttl", "1s"]);
    let rec = s.inspect(&id);
    let proxy = proxy_of(&rec);
    assert!(wait_until(Duration::from_secs(60), || gone(proxy)), "egress-proxy {proxy} outlived the lease");
    sandboxkit::assert_gone(&s, &rec, None);
}

#[test]
fn killed_supervisor_takes_its_proxy_along() {
    let s = Sbx::new();
    let id = s.create(&["--network=allow=example.com"]);
    let rec = s.inspect(&id);
    let proxy = proxy_of(&rec);
    sandboxkit::signal_supervisor(&rec, nix::sys::signal::Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(30), || gone(proxy)), "egress-proxy {proxy} outlived its supervisor");
}

#[test]
fn create_refuses_bad_allow_rules_and_runsc() {
    let s = Sbx::new();
    for (args, want) in [
        (vec!["--network=allow=ho st"], "rules are host"),
        (vec!["--add-host", "a.test:1.2.3.4"], "need --network allow="),
        (vec!["--network=allow=a.test", "--runtime", "runsc"], "needs the native backend"),
    ] {
        let mut a = vec!["create"];
        a.extend(args.iter().copied());
        let o = s.out(&a);
        assert_eq!(o.status.code(), Some(125), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(s.ids().is_empty());
}

/// The same as an unprivileged user: the supervisor holds the listeners
/// the init made inside the sandbox's namespace.
mod rootless {
    use super::*;

    /// Rootless: the factory is forked by the init inside the namespace,
    /// so no privilege over the namespace is needed.
    #[test]
    fn rootless_publish_reaches_server_inside() {
        let s = Sbx::new();
        let id = s.create(&["--publish", "0:8080"]);
        let port = s.inspect(&id)["published"][0]["host_port"].as_u64().unwrap() as u16;
        serve_inside(&s, &id, "rootless-inside");
        assert!(get_published(port).ends_with("rootless-inside\n"));
        s.rm(&id);
    }

    #[test]
    fn created_sandbox_reaches_only_the_allowed_name() {
        let port = common::web(3).port;
        let s = Sbx::new();
        let rule = format!("--network=allow=web.test:{port}");
        let id = s.create(&[&rule, "--add-host", "web.test:127.0.0.1"]);
        let script = format!("curl -sS http://web.test:{port}/; curl -sS -i http://other.test:{port}/ | grep Denied");
        let (v, code) = s.exec_json(&id, &[], &["sh", "-c", &script]);
        assert_eq!(code, 0, "{v:#}");
        assert!(common::stdout_of(&v).starts_with("xxxX-Husk-Denied: not_allowed"), "{v:#}");
        let rec = s.inspect(&id);
        assert_eq!(destination(&rec["network"], "web.test").map(|d| d["connections"].clone()), Some(1.into()));
        let proxy = proxy_of(&rec);
        s.rm(&id);
        assert!(wait_until(Duration::from_secs(30), || gone(proxy)), "egress-proxy {proxy} outlived husk rm");
    }
}

/// `husk exec` leaves a small HTTP server running inside (python3 from the
/// host root, bound to the sandbox's own 127.0.0.1:8080) serving `body`.
fn serve_inside(s: &Sbx, id: &str, body: &str) {
    let script = format!(
        "mkdir -p /tmp/w && echo {body} > /tmp/w/index.html && cd /tmp/w && \
         (python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &)"
    );
    let (out, code) = s.sh(id, &script);
    assert_eq!(code, 0, "{out}");
}

/// GET / on the host's 127.0.0.1:`port`, retried until the server inside
/// answers (it starts in the background).
fn get_published(port: u16) -> String {
    let mut body = String::new();
    let ok = wait_until(Duration::from_secs(30), || {
        let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
        let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
        if c.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").is_err() {
            return false;
        }
        body.clear();
        c.read_to_string(&mut body).is_ok() && body.starts_with("HTTP/1.0 200")
    });
    assert!(ok, "nothing answered on the published port {port}: {body:?}");
    body
}

#[test]
fn publish_reaches_server_inside() {
    let s = Sbx::new();
    let id = s.create(&["--publish", "0:8080"]);
    let rec = s.inspect(&id);
    let p = &rec["published"][0];
    assert_eq!((p["host_ip"].as_str(), p["port"].as_u64()), (Some("127.0.0.1"), Some(8080)), "{rec:#}");
    let port = p["host_port"].as_u64().unwrap() as u16;
    assert_ne!(port, 0);
    serve_inside(&s, &id, "hello-inside");
    assert!(get_published(port).ends_with("hello-inside\n"));
    s.rm(&id);
    assert!(
        wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_err()),
        "the published port {port} still listens after husk rm"
    );
}

#[test]
fn publish_on_run_forwards_while_the_run_lives() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let publish = format!("127.0.0.1:{port}:9000");
    // One request served, then the run ends.
    let child = common::husk(&[
        "run",
        "--json",
        "--publish",
        &publish,
        "--",
        "python3",
        "-c",
        "import socket; s = socket.socket(); s.bind(('127.0.0.1', 9000)); s.listen(); c, _ = s.accept(); c.recv(100); c.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\nfrom-run\\n'); c.close()",
    ])
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    assert!(get_published(port).ends_with("from-run\n"));
    let out = child.wait_with_output().unwrap();
    let v = common::verdict_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    assert_eq!(v["published"][0]["host_port"], port, "{v:#}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} listens after the run");
}

#[test]
fn bad_publish_is_refused_before_anything_runs() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = format!("{}:80", taken.local_addr().unwrap().port());
    for (args, want) in [
        (vec!["--publish", "80"], "expected [HOSTIP:]HOSTPORT:PORT"),
        (vec!["--publish", "8080:0"], "expected [HOSTIP:]HOSTPORT:PORT"),
        (vec!["--publish", "8080:80", "--network", "host"], "already uses the host's network"),
        (vec!["--publish", "0:80", "--runtime", "runsc"], "--publish needs the native backend"),
        (vec!["--publish", &taken_port], "cannot listen on"),
    ] {
        let mut a = vec!["run", "--json"];
        a.extend(args.iter().copied());
        a.extend(["--", "true"]);
        let o = common::husk(&a).output().unwrap();
        let v = common::verdict_of(&o);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {v:#}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{args:?}: {msg}");
    }
}
