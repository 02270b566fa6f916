//! Pools of `husk serve` (docs/warm.md): members READY ahead, claimed whole
//! by one caller and never handed out again, refilled, replaced when
//! broken, bounded by the memory budget, adopted by a restarted serve, and
//! gone with serve's SIGTERM. Real serve, real sandboxes (busybox root),
//! each test in a state dir of its own; serve is stopped by pid.
mod common;
mod sandboxkit;

use common::*;
use sandboxkit::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running `husk serve` on the state dir's default socket.
struct Server {
    child: Option<Child>,
    socket: std::path::PathBuf,
}

impl Server {
    fn start(sbx: &Sbx, extra: &[&str]) -> Server {
        let mut args = vec!["serve"];
        args.extend_from_slice(extra);
        let mut child = sbx.husk(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("husk serve: listening on unix:") else {
            let out = child.wait_with_output().unwrap();
            panic!("husk serve {extra:?} did not start: {:?} {}", out.status, String::from_utf8_lossy(&out.stderr));
        };
        Server { socket: addr.into(), child: Some(child) }
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = UnixStream::connect(&self.socket).expect("connect to serve");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: husk\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        let text = String::from_utf8_lossy(&resp);
        let status: u16 = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{text:?}"));
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let v = serde_json::from_slice(&resp[end..]).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"));
        (status, v)
    }

    fn pool(&self, name: &str) -> Value {
        let (status, v) = self.request("GET", &format!("/v1/pools/{name}"), None);
        assert_eq!(status, 200, "{v}");
        v
    }

    /// Waits until the pool has `ready` members and no create in flight.
    fn settled(&self, name: &str, ready: u64) -> Value {
        let mut last = Value::Null;
        let ok = wait_until(Duration::from_secs(90), || {
            last = self.pool(name);
            last["ready"] == ready && last["creating"] == 0
        });
        assert!(ok, "pool {name} never settled at {ready} ready: {last}");
        last
    }

    fn claim(&self, body: Value) -> Value {
        let (status, v) = self.request("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(status, 201, "claim {body}: {v}");
        v
    }

    fn stop(&mut self, sig: nix::sys::signal::Signal) -> String {
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

fn bb_pool(name: &str, extra: &str, size: u32) -> String {
    format!("{name}=rootfs={}{extra}:{size}", busybox_rootfs().display())
}

/// The unclaimed members of `pool`, by record.
fn members(sbx: &Sbx, pool: &str) -> Vec<Value> {
    let out = sbx.out(&["ls", "--json", "--label", &format!("husk.pool={pool}")]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("ls --json");
    v.as_array().unwrap().iter().map(|r| sbx.inspect(r["id"].as_str().unwrap())).collect()
}

fn ids(recs: &[Value]) -> BTreeSet<String> {
    recs.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn pool_claims_are_single_use_and_never_shared() {
    require_root!();
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 2)]);
    server.settled("bb", 2);
    let a = server.claim(json!({"pool": "bb", "labels": {"who": "a"}, "ttl": "2m"}));
    let b = server.claim(json!({"pool": "bb", "labels": {"who": "b"}, "name": "claim-b"}));
    assert_eq!((a["pooled"].clone(), b["pooled"].clone()), (json!(true), json!(true)), "{a}\n{b}");
    let (ida, idb) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    assert_ne!(ida, idb);
    // Each is its caller's now: the caller's labels, name and lease; no pool label.
    assert_eq!(a["labels"]["who"], "a");
    assert!(a["labels"].get("husk.pool").is_none(), "{a}");
    assert_eq!(a["labels"]["husk.pool.from"], "bb");
    assert_eq!(a["ttl_ms"], 120_000);
    assert_eq!(b["name"], "claim-b");
    assert_eq!(sbx.inspect("claim-b")["id"], idb);
    // Files, /tmp, processes: what one does the other never sees.
    let (_, code) = sbx.sh(ida, "echo a > /tmp/secret-a && (sleep 300 >/dev/null 2>&1 &)");
    assert_eq!(code, 0);
    assert_eq!(sbx.sh(ida, "cat /tmp/secret-a").0.trim(), "a", "the write in a did not hold");
    let (seen, _) = sbx.sh(idb, "ls /tmp; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done");
    assert!(!seen.contains("secret-a") && !seen.contains("sleep 300"), "b sees a: {seen}");
    let (ra, rb) = (sbx.inspect(ida), sbx.inspect(idb));
    for ns in ["pid", "mnt", "ipc", "uts", "net", "user"] {
        assert_ne!(ra["namespaces"][ns], rb["namespaces"][ns], "{ns} namespace shared");
    }
    // Single use: released, it is destroyed, and no later claim returns it
    // (nor b, which is still b's).
    sbx.rm(ida);
    assert!(!sbx.dir(ida).exists());
    let mut later = BTreeSet::new();
    for _ in 0..3 {
        later.insert(server.claim(json!({"pool": "bb"}))["id"].as_str().unwrap().to_string());
    }
    assert!(!later.contains(ida) && !later.contains(idb), "a claimed sandbox was handed out again: {later:?}");
    // Claims at once: never one member to two callers.
    server.settled("bb", 2);
    let got: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| server.claim(json!({"pool": "bb"}))["id"].as_str().unwrap().to_string()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: BTreeSet<&String> = got.iter().collect();
    assert_eq!(distinct.len(), got.len(), "one sandbox went to two claims: {got:?}");
    let p = server.pool("bb");
    assert_eq!(p["claims"].as_u64().unwrap() + p["misses"].as_u64().unwrap(), 9, "{p}");
    // A claim brings only name, labels and ttl; a member that ran an exec
    // is never handed out.
    let (status, v) = server.request("POST", "/v1/sandboxes", Some(&json!({"pool": "bb", "memory": "1G"})));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("memory"), "{v}");
    let (status, v) = server.request("POST", "/v1/sandboxes", Some(&json!({"pool": "nope"})));
    assert_eq!((status, v["error"]["step"].as_str()), (404, Some("pool")), "{v}");
    let (status, v) =
        server.request("POST", "/v1/sandboxes", Some(&json!({"image": "x", "labels": {"husk.pool": "bb"}})));
    assert_eq!(status, 400, "pool labels are serve's own: {v}");
}

#[test]
fn used_member_is_never_handed_out() {
    require_root!();
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 1)]);
    server.settled("bb", 1);
    let m = members(&sbx, "bb");
    let used = m[0]["id"].as_str().unwrap().to_string();
    // Someone with access to the state dir runs something in a member.
    let (_, code) = sbx.sh(&used, "echo planted > /tmp/planted");
    assert_eq!(code, 0);
    let v = server.claim(json!({"pool": "bb"}));
    assert_ne!(v["id"], used.as_str(), "a used member was handed out");
    let (out, _) = sbx.sh(v["id"].as_str().unwrap(), "cat /tmp/planted 2>&1 || true");
    assert!(!out.contains("planted\n"), "{out}");
    assert!(wait_until(Duration::from_secs(30), || !sbx.dir(&used).exists()), "the used member was not removed");
    assert!(server.pool("bb")["replaced"].as_u64().unwrap() >= 1);
}

#[test]
fn pool_refills_after_claims() {
    require_root!();
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 2)]);
    let first = ids(&members(&sbx, "bb"));
    server.settled("bb", 2);
    let claimed: BTreeSet<String> =
        (0..2).map(|_| server.claim(json!({"pool": "bb"}))["id"].as_str().unwrap().to_string()).collect();
    let p = server.settled("bb", 2);
    assert!(p["claims"].as_u64().unwrap() >= 1, "{p}");
    assert_eq!(p["claims"].as_u64().unwrap() + p["misses"].as_u64().unwrap(), 2, "{p}");
    let now = ids(&members(&sbx, "bb"));
    assert_eq!(now.len(), 2);
    assert!(now.is_disjoint(&claimed), "claimed sandboxes are back in the pool: {now:?} {claimed:?}");
    let _ = first;
}

#[test]
fn broken_member_replaced() {
    require_root!();
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 1)]);
    server.settled("bb", 1);
    let old = members(&sbx, "bb").remove(0);
    signal_supervisor(&old, nix::sys::signal::Signal::SIGKILL);
    let old_id = old["id"].as_str().unwrap();
    let mut last = Value::Null;
    let ok = wait_until(Duration::from_secs(90), || {
        last = server.pool("bb");
        last["replaced"].as_u64().unwrap_or(0) >= 1 && last["ready"] == 1
    });
    assert!(ok, "the broken member was not replaced: {last}");
    let v = server.claim(json!({"pool": "bb"}));
    assert_eq!(v["pooled"], true, "{v}");
    assert_ne!(v["id"], old_id, "the broken member was handed out");
    let (out, code) = sbx.sh(v["id"].as_str().unwrap(), "echo alive");
    assert_eq!((out.trim(), code), ("alive", 0));
    assert_gone(&sbx, &old, None);
}

#[test]
fn pool_respects_memory_budget() {
    require_root!();
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--pool-memory-budget", "100M", "--pool", &bb_pool("bb", ",memory=40M", 5)]);
    let p = server.settled("bb", 2);
    assert_eq!(p["budget_limited"], true, "{p}");
    assert_eq!(p["size"], 5);
    let (_, all) = server.request("GET", "/v1/pools", None);
    assert_eq!(all["memory_budget"]["bytes"], 100 << 20, "{all}");
    assert_eq!(all["memory_budget"]["reserved"], 80 << 20, "{all}");
    assert_eq!(all["memory_budget"]["source"], "flag");
    assert_eq!(members(&sbx, "bb").len(), 2, "the pool grew past its budget");
    // A claimed sandbox is its caller's, not the pool's reserve: the pool
    // refills to the budget again.
    let c = server.claim(json!({"pool": "bb"}));
    assert_eq!(c["pooled"], true);
    server.settled("bb", 2);
    assert_eq!(members(&sbx, "bb").len(), 2);
}

#[test]
fn pool_survives_serve_restart_or_is_cleaned() {
    require_root!();
    let sbx = Sbx::new();
    let pool = bb_pool("bb", ",memory=64M", 2);
    let mut server = Server::start(&sbx, &["--pool", &pool]);
    server.settled("bb", 2);
    let before = ids(&members(&sbx, "bb"));
    // Killed outright: the members stay, and the next serve with the same
    // pool adopts them instead of making new ones.
    server.stop(nix::sys::signal::Signal::SIGKILL);
    let mut server = Server::start(&sbx, &["--pool", &pool]);
    let p = server.settled("bb", 2);
    assert_eq!(p["adopted"], 2, "{p}");
    assert_eq!(ids(&members(&sbx, "bb")), before, "restarted serve did not adopt the members");
    let v = server.claim(json!({"pool": "bb"}));
    assert!(before.contains(v["id"].as_str().unwrap()), "{v}");
    // A serve whose pool has another spec removes them.
    server.settled("bb", 2);
    server.stop(nix::sys::signal::Signal::SIGKILL);
    let old = members(&sbx, "bb");
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=48M", 1)]);
    let p = server.settled("bb", 1);
    assert_eq!((p["adopted"].clone(), p["cleaned"].clone()), (json!(0), json!(old.len())), "{p}");
    for r in &old {
        assert_gone(&sbx, r, None);
    }
}

#[test]
fn nothing_left_after_pool_shutdown() {
    require_root!();
    let sbx = Sbx::new();
    let mut server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 2)]);
    server.settled("bb", 2);
    let kept = server.claim(json!({"pool": "bb"}));
    // Claims start refills: stop while they may be in flight.
    let err = server.stop(nix::sys::signal::Signal::SIGTERM);
    assert!(err.contains("unclaimed pool member"), "{err}");
    let left = members(&sbx, "bb");
    assert!(left.is_empty(), "unclaimed members outlived serve: {left:?}");
    for d in std::fs::read_dir(sbx.state.join("sandboxes")).unwrap().flatten() {
        let name = d.file_name().to_string_lossy().to_string();
        assert!(
            ["names", "tombstones"].contains(&name.as_str()) || name == kept["id"],
            "left in the state dir: {name}"
        );
    }
    let pools_dir: Vec<_> = std::fs::read_dir(sbx.state.join("pools")).unwrap().flatten().collect();
    assert!(pools_dir.is_empty(), "refill files left: {pools_dir:?}");
    // The claimed one follows the sandbox rules: it lives until removed.
    let (out, code) = sbx.sh(kept["id"].as_str().unwrap(), "echo still-mine");
    assert_eq!((out.trim(), code), ("still-mine", 0));
}

/// One POST /v1/sandboxes to the socket; `None` if serve was gone
/// before it answered (stopped while the request was on its way).
fn try_claim(socket: &std::path::Path, body: &Value) -> Option<Value> {
    let body = body.to_string();
    let mut s = UnixStream::connect(socket).ok()?;
    let req = format!("POST /v1/sandboxes HTTP/1.1\r\nHost: husk\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    assert_eq!(resp.get(9..12), Some(&b"201"[..]), "claim: {}", String::from_utf8_lossy(&resp));
    serde_json::from_slice(&resp[end..]).ok()
}

#[test]
fn claimed_member_survives_pool_shutdown() {
    require_root!();
    let sbx = Sbx::new();
    let mut server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 4)]);
    server.settled("bb", 4);
    let members_before = ids(&members(&sbx, "bb"));
    // Claims in flight while SIGTERM arrives: serve's loop hears of a
    // claim only after the member's supervisor granted it, so its member
    // list lags; whatever a caller was handed must survive the shutdown.
    let socket = server.socket.clone();
    let first = server.claim(json!({"pool": "bb"}));
    let racing: Vec<_> = (0..3)
        .map(|_| {
            let socket = socket.clone();
            std::thread::spawn(move || try_claim(&socket, &json!({"pool": "bb"})))
        })
        .collect();
    let err = server.stop(nix::sys::signal::Signal::SIGTERM);
    let mut kept = vec![first];
    kept.extend(racing.into_iter().filter_map(|t| t.join().unwrap()));
    for k in &kept {
        let id = k["id"].as_str().unwrap();
        let (out, code) = sbx.sh(id, "echo still-mine");
        assert_eq!((out.trim(), code), ("still-mine", 0), "claimed sandbox {k} did not survive: {err}");
        let rec = sbx.inspect(id);
        assert!(rec["labels"].get("husk.pool").is_none(), "claimed sandbox still a member: {rec}");
    }
    // Every member not handed out is gone, and nothing else is left.
    let left = members(&sbx, "bb");
    assert!(left.is_empty(), "unclaimed members outlived serve: {left:?} ({err})");
    let kept_ids: BTreeSet<String> = kept.iter().map(|k| k["id"].as_str().unwrap().to_string()).collect();
    for d in std::fs::read_dir(sbx.state.join("sandboxes")).unwrap().flatten() {
        let name = d.file_name().to_string_lossy().to_string();
        assert!(
            ["names", "tombstones"].contains(&name.as_str()) || kept_ids.contains(&name),
            "left in the state dir: {name} (members were {members_before:?}, kept {kept_ids:?}; {err})"
        );
    }
    for id in &kept_ids {
        sbx.rm(id);
    }
}

#[test]
fn pool_shutdown_leaves_no_process_cgroup_or_state() {
    require_root!();
    let sbx = Sbx::new();
    let mut server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 2)]);
    server.settled("bb", 2);
    let recs = members(&sbx, "bb");
    assert_eq!(recs.len(), 2);
    server.stop(nix::sys::signal::Signal::SIGTERM);
    for r in &recs {
        assert_gone(&sbx, r, None);
    }
}

#[test]
fn create_pool_claims_through_serve() {
    require_root!();
    let sbx = Sbx::new();
    let rootfs = busybox_rootfs().to_str().unwrap().to_string();
    // No serve: a clear error, or a cold create with --pool-fallback.
    let out = sbx.out(&["create", "--pool", "bb"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no husk serve answers") && err.contains("--pool-fallback"), "{err}");
    let out = sbx.out(&["create", "--pool", "bb", "--pool-fallback", "--rootfs", &rootfs, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("creating the sandbox cold"));
    // With serve on the state dir's socket, the CLI claims from it.
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 1)]);
    server.settled("bb", 1);
    let out = sbx.out(&["create", "--pool", "bb", "--json", "--label", "k=v", "--ttl", "90s", "--name", "cli-claim"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["pooled"].clone(), v["state"].clone()), (json!(true), json!("ready")), "{v}");
    assert_eq!((v["labels"]["k"].clone(), v["ttl_ms"].clone()), (json!("v"), json!(90_000)));
    assert_eq!(sbx.inspect("cli-claim")["id"], v["id"]);
    // The pool's spec is the sandbox's: other sandbox flags are refused.
    let out = sbx.out(&["create", "--pool", "bb", "--memory", "1G"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only --name, --label, --ttl"));
    // An unknown pool is an error naming it.
    let out = sbx.out(&["create", "--pool", "nope"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no pool \"nope\""));
    let out = sbx.out(&["create", "--pool", "bb", "--server", "tcp:1.2.3.4:5"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("give unix:PATH"));
}

#[test]
fn pools_api_adds_lists_and_deletes() {
    require_root!();
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &[]);
    let (_, v) = server.request("GET", "/v1/pools", None);
    assert_eq!(v["pools"], json!([]));
    let spec = json!({"name": "api", "rootfs": busybox_rootfs(), "size": 1, "memory": "64M"});
    let (status, v) = server.request("POST", "/v1/pools", Some(&spec));
    assert_eq!(status, 201, "{v}");
    let (status, _) = server.request("POST", "/v1/pools", Some(&spec));
    assert_eq!(status, 409);
    server.settled("api", 1);
    let m = members(&sbx, "api");
    let (status, v) = server.request("DELETE", "/v1/pools/api", None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(server.request("GET", "/v1/pools/api", None).0, 404);
    for r in &m {
        assert_gone(&sbx, r, None);
    }
    for (bad, says) in [
        (json!({"name": "x", "size": 1}), "exactly one of image and rootfs"),
        (json!({"name": "x", "image": "i", "size": 1, "colour": 1}), "unknown field"),
        (json!({"name": "-x", "image": "i", "size": 1}), "name"),
        (json!({"name": "x", "image": "i", "size": 1, "memory": "lots"}), "memory"),
    ] {
        let (status, v) = server.request("POST", "/v1/pools", Some(&bad));
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{bad}: {v}");
    }
}

#[test]
fn bad_pool_flags_stop_serve_with_a_clear_error() {
    require_root!();
    let sbx = Sbx::new();
    for (args, says) in [
        (vec!["--pool", "bb"], "no '='"),
        (vec!["--pool", "bb=busybox"], "no ':SIZE'"),
        (vec!["--pool", "bb=busybox,colour=red:1"], "unknown key"),
        (vec!["--pool", "a=x:1", "--pool", "a=y:1"], "given twice"),
    ] {
        let mut full = vec!["serve"];
        full.extend(args.iter().copied());
        let out = sbx.out(&full);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let dir = TempDir::new("pool-file");
    let f = dir.path().join("pools.json");
    std::fs::write(&f, r#"{"pools": [{"name": "x", "image": "i", "size": "two"}]}"#).unwrap();
    let out = sbx.out(&["serve", "--pool-file", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--pool-file") && err.contains("size"), "{err}");
}

#[test]
fn pool_with_a_missing_source_says_why_on_stderr_and_in_create() {
    require_root!();
    let sbx = Sbx::new();
    let missing = sbx.state.join("no-such-rootfs");
    let spec = format!("py=rootfs={},memory=64M:2", missing.display());
    let mut server = Server::start(&sbx, &["--pool", &spec]);
    assert!(
        wait_until(Duration::from_secs(60), || server.pool("py")["failures"].as_u64() > Some(0)),
        "the refills never failed: {}",
        server.pool("py")
    );
    // The claim misses, its cold create fails, and the answer says why the
    // pool is empty.
    let out = sbx.out(&["create", "--pool", "py"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pool \"py\" has no ready member") && err.contains("refill(s) failed"), "{err}");
    assert!(err.contains("GET /v1/pools/py"), "{err}");
    // serve's stderr said it, without being asked.
    let said = server.stop(nix::sys::signal::Signal::SIGTERM);
    assert!(said.contains("pool py: a refill failed") && said.contains("no-such-rootfs"), "{said}");
}

#[test]
fn serve_sigkilled_mid_refill_leaves_no_refill_files_after_restart() {
    require_root!();
    let sbx = Sbx::new();
    // What a SIGKILLed serve leaves: the output files of its refills, named
    // by its pid (a pid that is gone), and a live serve's (ours, alive).
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let pools = sbx.state.join("pools");
    std::fs::create_dir_all(&pools).unwrap();
    let stale = [pools.join(format!(".refill-{dead_pid}-3.out")), pools.join(format!(".refill-{dead_pid}-3.err"))];
    let live = pools.join(format!(".refill-{}-1.out", std::process::id()));
    for f in stale.iter().chain([&live]) {
        std::fs::write(f, b"").unwrap();
    }
    // A real one too: serve SIGKILLed while its refills run.
    let mut killed = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 2)]);
    killed.stop(nix::sys::signal::Signal::SIGKILL);
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M", 1)]);
    for f in &stale {
        assert!(!f.exists(), "{} was left", f.display());
    }
    assert!(live.exists(), "a live serve's refill file was removed");
    server.settled("bb", 1);
    let left: Vec<_> = std::fs::read_dir(&pools)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".refill-") && !n.starts_with(&format!(".refill-{}-", std::process::id())))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn pool_never_hands_out_a_member_near_its_max_lifetime() {
    require_root!();
    let sbx = Sbx::new();
    // Members live at most 48 s: each is replaced once 2 s old (1/24 of it).
    let server = Server::start(&sbx, &["--pool", &bb_pool("bb", ",memory=64M,max_lifetime=48s", 1)]);
    let first = server.settled("bb", 1);
    let old = members(&sbx, "bb")[0]["id"].clone();
    let mut last = first;
    assert!(
        wait_until(Duration::from_secs(60), || {
            last = server.pool("bb");
            last["replaced"].as_u64() > Some(0)
                && last["ready"] == 1
                && members(&sbx, "bb").first().is_some_and(|m| m["id"] != old)
        }),
        "the aging member was never replaced: {last}"
    );
    // Retired by the pool, not ended by its lifetime.
    let out = sbx.out(&["inspect", old.as_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("max-lifetime"), "{said}");
    let v = server.claim(json!({"pool": "bb"}));
    let rec = sbx.inspect(v["id"].as_str().unwrap());
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let left = rec["lifetime_ends_ms"].as_u64().unwrap().saturating_sub(now_ms);
    assert!(left > 30_000, "a claimed member had {left} ms of its 48 s left: {rec}");
}

/// `husk exec --json ID --code -` with `code` on stdin: the verdict.
fn code_call(sbx: &Sbx, id: &str, code: &str) -> Value {
    let mut child = sbx
        .husk(&["exec", "--json", id, "--code", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let v = verdict_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", String::from_utf8_lossy(&out.stderr));
    v
}

/// A pool whose members hold a python session (`session=`): the claimed
/// sandbox's `--code` calls run in it (state kept between calls), and the
/// claimed member is replaced by a fresh one, never handed out again.
#[test]
fn pool_of_sessions() {
    require_root!();
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "SKIP: /usr/bin/python3 missing (scripts/test.sh installs python3)"
    );
    let sbx = Sbx::new();
    let server = Server::start(&sbx, &["--pool", "ses=rootfs=/,memory=256M,session=python:json:2"]);
    server.settled("ses", 2);
    let before = ids(&members(&sbx, "ses"));
    let c = server.claim(json!({"pool": "ses"}));
    assert_eq!(c["pooled"], true, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    assert!(before.contains(&id), "{id} is not one of the members {before:?}");

    let v = code_call(&sbx, &id, "import json\nx = 41\nprint(json.dumps([1]))");
    assert_eq!((v["warm"]["mode"].clone(), v["stdout"]["text"].clone()), (json!("session"), json!("[1]\n")), "{v}");
    let v = code_call(&sbx, &id, "print(x + 1)");
    assert_eq!((v["warm"]["mode"].clone(), v["stdout"]["text"].clone()), (json!("session"), json!("42\n")), "{v}");

    server.settled("ses", 2);
    let now = ids(&members(&sbx, "ses"));
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(!now.contains(&id), "the claimed sandbox is back in the pool: {now:?}");
    assert!(now.difference(&before).count() == 1, "a refill replaced the claimed member: {before:?} -> {now:?}");
    let _ = sbx.out(&["rm", &id]);
}
