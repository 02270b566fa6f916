//! `--network allow=`: the egress allowlist, end to end. Every test starts
//! its own servers on the host's loopback and runs real clients (curl, the
//! probe) in host-mode sandboxes, whose only way out is husk's proxy.
//! Names reach the loopback servers through `--add-host` pins; a name the
//! host's resolver maps to loopback (`localhost`) must be refused.

mod common;

use common::{husk, read_http_head, verdict_of, web};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `husk run --json --bind <dir>:/t <args> -- sh -c SCRIPT` in host mode.
fn run(dir: Option<&Path>, args: &[&str], script: &str) -> (Value, i32) {
    let mut a: Vec<String> = vec!["run".into(), "--json".into()];
    if let Some(d) = dir {
        a.extend(["--bind".into(), format!("{}:/t", d.display())]);
    }
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = husk(&refs).output().expect("spawn husk");
    (verdict_of(&out), out.status.code().unwrap_or(-1))
}

fn out(v: &Value) -> String {
    format!("{}{}", common::stdout_of(v), common::stderr_of(v))
}

fn denied<'a>(v: &'a Value, host: &str, reason: &str) -> Option<&'a Value> {
    v["network"]["denied"].as_array()?.iter().find(|d| d["host"] == host && d["reason"] == reason)
}

fn destination<'a>(v: &'a Value, host: &str) -> Option<&'a Value> {
    v["network"]["destinations"].as_array()?.iter().find(|d| d["host"] == host)
}

/// A test CA and a server certificate for `names`, made with openssl.
fn certs(dir: &Path, names: &[&str]) {
    let sh = |cmd: &str| {
        let s = Command::new("sh").arg("-c").arg(cmd).current_dir(dir).output().expect("sh");
        assert!(s.status.success(), "{cmd}: {}", String::from_utf8_lossy(&s.stderr));
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=husk-test-ca");
    sh("openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=server");
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    std::fs::write(dir.join("ext.cnf"), format!("subjectAltName={}\n", san.join(","))).unwrap();
    sh("openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext.cnf");
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for f in ["ca.pem", "srv.pem", "srv.key"] {
        std::fs::set_permissions(dir.join(f), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    }
}

/// `openssl s_server -www` on 127.0.0.1 (killed on drop).
struct Tls {
    port: u16,
    child: Child,
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_server(dir: &Path) -> Tls {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-www",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            "srv.pem",
            "-key",
            "srv.key",
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    assert!(
        common::wait_until(Duration::from_secs(20), || TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "openssl s_server did not listen on {port}"
    );
    Tls { port, child }
}

#[test]
fn allowed_https_domain_reachable() {
    let dir = common::TempDir::new("egress-tls");
    certs(dir.path(), &["tls.test", "other.test"]);
    let srv = tls_server(dir.path());
    let p = srv.port;
    let (v, code) = run(
        Some(dir.path()),
        &[&format!("--network=allow=tls.test:{p}"), "--add-host", "tls.test:127.0.0.1"],
        &format!("curl -sS --cacert /t/ca.pem https://tls.test:{p}/"),
    );
    assert_eq!(code, 0, "{v:#}");
    assert!(out(&v).contains("s_server"), "no page from the TLS server: {}", out(&v));
    let d = destination(&v, "tls.test").unwrap_or_else(|| panic!("{:#}", v["network"]));
    assert!(d["connections"].as_u64() >= Some(1) && d["bytes_down"].as_u64() > Some(500), "{d}");
    assert_eq!(v["isolation"]["network"], "allowlist");
}

#[test]
fn sni_mismatch_refused() {
    let dir = common::TempDir::new("egress-sni");
    certs(dir.path(), &["tls.test", "other.test"]);
    let srv = tls_server(dir.path());
    let p = srv.port;
    // CONNECT names the allowed host; the ClientHello names another one
    // the same server would serve (domain fronting).
    let (v, code) = run(
        Some(dir.path()),
        &[&format!("--network=allow=tls.test:{p}"), "--add-host", "tls.test:127.0.0.1"],
        &format!("curl -sS --cacert /t/ca.pem --connect-to other.test:{p}:tls.test:{p} https://other.test:{p}/"),
    );
    assert_ne!(code, 0, "the fronted request went through: {v:#}");
    assert!(!out(&v).contains("s_server"), "{}", out(&v));
    assert!(denied(&v, "tls.test", "sni_mismatch").is_some(), "{:#}", v["network"]);
    // The tunnel was refused after its 200, in TLS: the client's library
    // names the cause (a fatal unrecognized_name alert), not a bare EOF.
    assert!(out(&v).contains("unrecognized name"), "{}", out(&v));
}

#[test]
fn denied_domain_gets_403_with_reason() {
    let w = web(10);
    let (v, _) = run(
        None,
        &[
            &format!("--network=allow=web.test:{}", w.port),
            "--add-host",
            "web.test:127.0.0.1",
            "--add-host",
            "evil.test:127.0.0.1",
        ],
        &format!("curl -sS -i http://evil.test:{}/", w.port),
    );
    let o = out(&v);
    assert!(o.starts_with("HTTP/1.1 403"), "{o}");
    assert!(o.contains("X-Husk-Denied: not_allowed"), "{o}");
    assert_eq!(
        denied(&v, "evil.test", "not_allowed").map(|d| d["count"].clone()),
        Some(1.into()),
        "{:#}",
        v["network"]
    );
    assert!(w.heads.lock().unwrap().is_empty(), "the denied request reached the server");
}

#[test]
fn raw_tcp_to_allowed_ip_without_proxy_fails() {
    let w = web(10);
    let rule = format!("--network=allow=127.0.0.1:{}", w.port);
    // Through the proxy the IP rule lets it through...
    let (v, code) = run(None, &[&rule], &format!("curl -sS http://127.0.0.1:{}/ --noproxy ''", w.port));
    assert_eq!((code, common::stdout_of(&v).len()), (0, 10), "{v:#}");
    // ...but the namespace itself has no route to the host's loopback.
    let (v, code) = run(None, &[&rule], &format!("curl -sS --noproxy '*' http://127.0.0.1:{}/", w.port));
    assert_ne!(code, 0, "a direct connection left the sandbox: {v:#}");
    assert_eq!(w.heads.lock().unwrap().len(), 1);
}

#[test]
fn udp_and_dns_exfil_fail() {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    sock.set_nonblocking(true).unwrap();
    let (v, _) = run(
        None,
        &["--network=allow=example.com"],
        &format!(
            "echo leak > /dev/udp/127.0.0.1/{port} 2>/dev/null; \
             python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"leak\", (\"127.0.0.1\", {port}))'; \
             python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"q\", (\"8.8.8.8\", 53))' && echo dns-sent; \
             getent hosts example.com && echo resolved"
        ),
    );
    let o = out(&v);
    assert!(!o.contains("dns-sent") && !o.contains("resolved"), "{o}");
    // A datagram on the host's loopback would have arrived before the run
    // ended (loopback delivery is synchronous).
    let mut buf = [0u8; 16];
    assert!(sock.recv_from(&mut buf).is_err(), "a UDP datagram left the sandbox");
}

#[test]
fn ipv6_literal_denied() {
    let (v, _) = run(None, &["--network=allow=example.com"], "curl -sS -i 'http://[::1]:8080/' ");
    let o = out(&v);
    assert!(o.contains("X-Husk-Denied: not_allowed"), "{o}");
    assert!(denied(&v, "::1", "not_allowed").is_some(), "{:#}", v["network"]);
}

#[test]
fn private_address_via_dns_refused() {
    let w = web(10);
    // `localhost` resolves to 127.0.0.1 on the host; no rule names that
    // address, so the name may not lead there.
    let (v, _) = run(
        None,
        &[&format!("--network=allow=localhost:{}", w.port)],
        &format!("curl -sS -i --noproxy '' -x http://127.0.0.1:3128 http://localhost:{}/", w.port),
    );
    let o = out(&v);
    assert!(o.contains("X-Husk-Denied: private_address"), "{o}");
    assert!(denied(&v, "localhost", "private_address").is_some(), "{:#}", v["network"]);
    assert!(w.heads.lock().unwrap().is_empty());
}

#[test]
fn http_host_mismatch_refused() {
    let w = web(10);
    let (v, _) = run(
        None,
        &[&format!("--network=allow=web.test:{}", w.port), "--add-host", "web.test:127.0.0.1"],
        &format!("curl -sS -i -H 'Host: internal.test' http://web.test:{}/", w.port),
    );
    let o = out(&v);
    assert!(o.contains("X-Husk-Denied: host_mismatch"), "{o}");
    assert!(denied(&v, "web.test", "host_mismatch").is_some(), "{:#}", v["network"]);
    assert!(w.heads.lock().unwrap().is_empty());
}

#[test]
fn socks5_allowed_port_only() {
    let (a, b) = (web(7), web(9));
    let (v, _) = run(
        None,
        &[&format!("--network=allow=web.test:{}", a.port), "--add-host", "web.test:127.0.0.1"],
        &format!(
            "curl -sS -x socks5h://127.0.0.1:1080 http://web.test:{}/; echo; curl -sS -x socks5h://127.0.0.1:1080 http://web.test:{}/",
            a.port, b.port
        ),
    );
    let o = out(&v);
    assert!(o.contains("xxxxxxx\n"), "{o}");
    assert_eq!((a.heads.lock().unwrap().len(), b.heads.lock().unwrap().len()), (1, 0), "{o}");
    let port = serde_json::json!(b.port);
    let d = v["network"]["denied"].as_array().unwrap().iter().find(|d| d["port"] == port);
    assert_eq!(d.map(|d| d["reason"].clone()), Some("not_allowed".into()), "{:#}", v["network"]);
}

#[test]
fn accounting_counts_bytes_and_denials() {
    let w = web(100_000);
    let (v, code) = run(
        None,
        &[
            &format!("--network=allow=web.test:{}", w.port),
            "--add-host",
            "web.test:127.0.0.1",
            "--add-host",
            "no.test:127.0.0.1",
        ],
        &format!(
            "for i in 1 2; do curl -sS -o /dev/null http://web.test:{p}/; curl -sS -o /dev/null http://no.test:{p}/; done",
            p = w.port
        ),
    );
    assert_eq!(code, 0, "{v:#}");
    let d = destination(&v, "web.test").unwrap_or_else(|| panic!("{:#}", v["network"]));
    assert_eq!(d["connections"], 2, "{d}");
    assert!(d["bytes_down"].as_u64().unwrap() >= 200_000, "{d}");
    assert!(d["bytes_up"].as_u64().unwrap() > 0, "{d}");
    assert_eq!(denied(&v, "no.test", "not_allowed").map(|d| d["count"].clone()), Some(2.into()));
    let t = &v["network"]["totals"];
    assert_eq!((t["connections"].as_u64(), t["denied"].as_u64()), (Some(2), Some(2)), "{t}");
}

#[test]
fn egress_bytes_cap_cuts_the_transfer_and_says_so() {
    let w = web(4 << 20);
    let (v, _) = run(
        None,
        &[&format!("--network=allow=web.test:{}", w.port), "--add-host", "web.test:127.0.0.1", "--egress-bytes", "1M"],
        &format!("curl -sS -o /dev/null http://web.test:{}/; echo rc=$?", w.port),
    );
    assert!(!out(&v).contains("rc=0"), "{}", out(&v));
    assert_eq!(v["network"]["egress_bytes_exceeded"], true, "{:#}", v["network"]);
    assert!(v["network"]["totals"]["bytes_down"].as_u64().unwrap() < 2 << 20);
}

#[test]
fn connection_cap_holds_under_500_attempts() {
    let w = web(3);
    // 500 connections opened at once, none sending a request: the proxy
    // serves `max_connections` of them (they wait for a request until the
    // handshake timeout closes them) and refuses the rest with a 503 at
    // once. Each is read to its end, so the count does not depend on
    // timing; then one real request must still go through.
    let script = format!(
        "python3 -c '
import socket
held = [socket.create_connection((\"127.0.0.1\", 3128)) for i in range(500)]
refused = closed = 0
for s in held:
    s.settimeout(120)
    data = b\"\"
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
    if data.startswith(b\"HTTP/1.1 503\"):
        refused += 1
    elif data == b\"\":
        closed += 1
    s.close()
print(\"refused\", refused, \"closed\", closed)
' && curl -sS http://web.test:{}/",
        w.port
    );
    let (v, code) =
        run(None, &[&format!("--network=allow=web.test:{}", w.port), "--add-host", "web.test:127.0.0.1"], &script);
    assert_eq!(code, 0, "{v:#}");
    let o = common::stdout_of(&v);
    assert!(o.ends_with("xxx"), "{}", out(&v));
    let max = v["network"]["max_connections"].as_u64().unwrap();
    let limited = denied(&v, "*", "connection_limit").and_then(|d| d["count"].as_u64()).unwrap_or(0);
    assert!(o.starts_with(&format!("refused {limited} closed {}\n", 500 - limited)), "{o}");
    assert_eq!(limited, 500 - max, "{:#}", v["network"]);
}

#[test]
fn socks5_over_the_connection_cap_gets_a_reply() {
    let w = web(3);
    // 300 SOCKS clients greet at once and then wait: the first
    // `max_connections` get the method choice and wait for their request
    // (until the handshake timeout closes them), the rest get the method
    // choice and a general-failure reply at once. curl, one more, must
    // fail at once too, not hang.
    let script = format!(
        "python3 -c '
import socket, subprocess
held = []
for i in range(300):
    s = socket.create_connection((\"127.0.0.1\", 1080))
    s.sendall(b\"\\x05\\x01\\x00\")
    held.append(s)
r = subprocess.run([\"curl\", \"-sS\", \"-m\", \"60\", \"-x\", \"socks5h://127.0.0.1:1080\", \"http://web.test:{}/\"],
                   capture_output=True, text=True)
print(\"curl\", r.returncode, r.stderr.strip())
refused = waiting = 0
for s in held:
    s.settimeout(120)
    data = b\"\"
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
    if data == bytes([5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0]):
        refused += 1
    elif data == bytes([5, 0]):
        waiting += 1
print(\"refused\", refused, \"waiting\", waiting)
'",
        w.port
    );
    let (v, code) =
        run(None, &[&format!("--network=allow=web.test:{}", w.port), "--add-host", "web.test:127.0.0.1"], &script);
    assert_eq!(code, 0, "{v:#}");
    let o = common::stdout_of(&v);
    let max = v["network"]["max_connections"].as_u64().unwrap();
    assert!(o.contains(&format!("refused {} waiting {max}\n", 300 - max)), "{}", out(&v));
    let curl = o.lines().find(|l| l.starts_with("curl ")).unwrap_or_default();
    assert!(!curl.starts_with("curl 0 ") && !curl.starts_with("curl 28 "), "curl got through or hung: {curl}");
    let limited = denied(&v, "*", "connection_limit").and_then(|d| d["count"].as_u64());
    assert_eq!(limited, Some(300 - max + 1), "{:#}", v["network"]);
    assert!(w.heads.lock().unwrap().is_empty());
}

/// 250 tunnels relayed at once by a proxy started under the usual soft
/// limit of 1024 open files: each holds two sockets and, when splicing,
/// two pipes, so the proxy must raise its limit (or copy instead) rather
/// than fail connects with EMFILE.
#[test]
fn proxy_relays_250_tunnels_under_a_1024_fd_soft_limit() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                if read_http_head(&mut c).is_none() {
                    return;
                }
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nheld");
                let mut buf = [0u8; 4096];
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let script = format!(
        "python3 -c '
import socket
held = []
for i in range(250):
    s = socket.create_connection((\"127.0.0.1\", 3128))
    s.sendall(b\"CONNECT web.test:{port} HTTP/1.1\\r\\nHost: web.test:{port}\\r\\n\\r\\n\")
    assert s.recv(4096).startswith(b\"HTTP/1.1 200\"), i
    s.sendall(b\"GET / HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n\")
    held.append(s)
n = 0
for s in held:
    s.settimeout(60)
    data = b\"\"
    while not data.endswith(b\"held\"):
        d = s.recv(4096)
        if not d:
            break
        data += d
    n += data.endswith(b\"held\")
print(\"held\", n)
'"
    );
    let rule = format!("--network=allow=web.test:{port}");
    let o = Command::new("sh")
        .args(["-c", "ulimit -Sn 1024 && exec \"$0\" \"$@\""])
        .arg(common::husk_bin())
        .args(["run", "--json", &rule, "--add-host", "web.test:127.0.0.1", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v = verdict_of(&o);
    assert_eq!(common::stdout_of(&v), "held 250\n", "{}\n{:#}", out(&v), v["network"]);
    assert_eq!(destination(&v, "web.test").map(|d| d["connections"].clone()), Some(250.into()), "{:#}", v["network"]);
}

#[test]
fn no_listener_left_after_run() {
    let w = web(3);
    let mut child = husk(&[
        "run",
        &format!("--network=allow=web.test:{}", w.port),
        "--add-host",
        "web.test:127.0.0.1",
        "--",
        "sleep",
        "600",
    ])
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let husk_pid = child.id() as i32;
    let mut proxy = None;
    let found = common::wait_until(Duration::from_secs(30), || {
        proxy = children_of(husk_pid).into_iter().find(|p| cmdline(*p).contains("egress-proxy"));
        proxy.is_some()
    });
    assert!(found, "no egress-proxy under husk {husk_pid}");
    let proxy = proxy.unwrap();
    // husk killed outright: the proxy dies with it (PDEATHSIG).
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        common::wait_until(Duration::from_secs(30), || !Path::new(&format!("/proc/{proxy}")).exists()
            || std::fs::read_to_string(format!("/proc/{proxy}/stat")).is_ok_and(|s| s.contains(") Z "))),
        "egress-proxy {proxy} outlived its husk"
    );
    // And after a normal run nothing of it is left under husk's pid.
    let (v, code) = run(None, &["--network=allow=example.com"], "true");
    assert_eq!(code, 0, "{v:#}");
    assert!(v["network"]["error"].is_null(), "{:#}", v["network"]);
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn children_of(ppid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.split(' ').nth(1).map(str::to_string)))
                .and_then(|p| p.parse::<i32>().ok())
                == Some(ppid)
        })
        .collect()
}

#[test]
fn bad_allow_rules_and_runsc_are_refused_before_anything_runs() {
    for (args, want) in [
        (vec!["--network=allow=ho st"], "rules are host"),
        (vec!["--network=allow=a.test", "--network=host"], "cannot be combined"),
        (vec!["--add-host", "a.test:1.2.3.4"], "need --network allow="),
        (vec!["--network=allow=a.test", "--add-host", "nonsense"], "expected NAME:IP"),
        (vec!["--network=allow=a.test", "--runtime", "runsc"], "needs the native backend"),
    ] {
        let mut a = vec!["run", "--json"];
        a.extend(args.iter().copied());
        a.extend(["--", "true"]);
        let o = husk(&a).output().unwrap();
        let v = verdict_of(&o);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {v:#}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{args:?}: {msg}");
    }
}

/// The proxy itself, fed the fuzz corpus (and garbage) on both ports as
/// raw clients: it answers or closes each, never hangs, and still serves a
/// good request afterwards.
#[test]
fn proxy_survives_garbage_clients() {
    let w = web(5);
    let (v, code) = run(
        Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus")),
        &[&format!("--network=allow=web.test:{}", w.port), "--add-host", "web.test:127.0.0.1"],
        &format!(
            "python3 -c '
import glob, os, socket
blobs = [open(f, \"rb\").read() for f in sorted(glob.glob(\"/t/net_*/*\"))] + [os.urandom(100000), b\"\\x05\" * 3, b\"CONNECT \"]
for b in blobs:
    for port in (3128, 1080):
        s = socket.create_connection((\"127.0.0.1\", port))
        s.settimeout(30)
        try:
            s.sendall(b)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
print(len(blobs), \"blobs\")
' && curl -sS http://web.test:{}/",
            w.port
        ),
    );
    assert_eq!(code, 0, "{v:#}");
    assert!(common::stdout_of(&v).ends_with("xxxxx"), "{}", out(&v));
    assert!(v["network"]["totals"]["denied"].as_u64().unwrap() > 5, "{:#}", v["network"]);
}

/// The same proxy as an unprivileged user: the listeners are made inside
/// the sandbox's namespace, so nothing needs privilege over it.
mod rootless {
    use super::*;

    #[test]
    fn allowlist_reaches_the_allowed_name_and_refuses_others() {
        let w = web(4);
        let (v, code) = run(
            None,
            &[&format!("--network=allow=web.test:{}", w.port), "--add-host", "web.test:127.0.0.1"],
            &format!("curl -sS http://web.test:{p}/; curl -sS -i http://other.test:{p}/", p = w.port),
        );
        assert_eq!(code, 0, "{v:#}");
        let o = out(&v);
        assert!(o.starts_with("xxxx") && o.contains("X-Husk-Denied: not_allowed"), "{o}");
        assert_eq!(destination(&v, "web.test").map(|d| d["connections"].clone()), Some(1.into()), "{:#}", v["network"]);
    }
}
