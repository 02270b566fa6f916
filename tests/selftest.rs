//! `husk selftest` on the real kernel: nothing escapes the defaults, the
//! selftest is no rubber stamp (a deliberately weakened sandbox is reported
//! ESCAPED, probe by probe), and its host fixtures are gone afterwards, also
//! when it is interrupted.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// `husk selftest --json --probe <probe> ARGS` -> (report, exit code).
fn selftest(args: &[&str], env: &[(&str, &str)]) -> (Value, i32) {
    let probe = probe_path().display().to_string();
    let mut all = vec!["selftest", "--json", "--probe", &probe];
    all.extend_from_slice(args);
    let mut cmd = husk(&all);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn husk selftest");
    let code = out.status.code().unwrap_or(-1);
    let text = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "selftest printed no JSON report ({e}), exit {code}:\n{text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (report, code)
}

/// name -> (verdict, detail)
fn verdicts(report: &Value) -> BTreeMap<String, (String, String)> {
    report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
            (s("name"), (s("verdict"), s("detail")))
        })
        .collect()
}

fn show(report: &Value) -> String {
    verdicts(report).iter().map(|(n, (v, d))| format!("  {n:<28} {v:<15} {d}\n")).collect()
}

/// Every host fixture the report names is gone.
fn assert_fixtures_gone(report: &Value) {
    let fx = &report["fixtures"];
    for key in ["dir", "marker", "setuid_dir", "probe_dir"] {
        if let Some(p) = fx[key].as_str() {
            assert!(!Path::new(p).exists(), "fixture {key} {p} is still on the host");
        }
    }
    if let Some(id) = fx["sysv_msg_id"].as_i64() {
        let queues = std::fs::read_to_string("/proc/sysvipc/msg").unwrap_or_default();
        let ids: Vec<i64> = queues.lines().skip(1).filter_map(|l| l.split_whitespace().nth(1)?.parse().ok()).collect();
        assert!(!ids.contains(&id), "SysV queue {id} is still on the host");
    }
    if let Some(m) = fx["victim_marker"].as_str() {
        assert!(
            wait_until(Duration::from_secs(5), || host_pids_with(m).is_empty()),
            "victim {m} is still running: {:?}",
            host_pids_with(m)
        );
    }
    if let Some(name) = fx["abstract_socket"].as_str() {
        let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        assert!(!unix.lines().any(|l| l.ends_with(name)), "abstract socket {name} is still bound");
    }
    for key in ["tcp4", "tcp6", "egress_tcp"] {
        if let Some(addr) = fx[key].as_str() {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            assert!(
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
                "listener {addr} still accepts"
            );
        }
    }
}

#[test]
fn selftest_finds_nothing_escaping_the_defaults() {
    require_root!();
    let (r, code) = selftest(&[], &[]);
    println!("{}", show(&r));
    let s = &r["summary"];
    assert_eq!(s["escaped"], 0, "something escaped the defaults:\n{}", show(&r));
    assert_eq!(s["error"], 0, "probes that proved nothing:\n{}", show(&r));
    assert!(s["total"].as_u64().unwrap() >= 40, "only {} probes", s["total"]);
    assert_eq!(code, 0);
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["weakened"], serde_json::json!([]));
    for cat in ["privileges", "filesystem", "network", "pid_ipc_uts", "resources", "timeout"] {
        let n = r["probes"].as_array().unwrap().iter().filter(|p| p["category"] == cat && p["verdict"] == "contained");
        assert!(n.count() > 0, "no contained probe in {cat}");
    }
    for p in r["probes"].as_array().unwrap() {
        assert!(!p["detail"].as_str().unwrap_or("").is_empty(), "{} has no detail", p["name"]);
        if p["verdict"] == "contained" {
            assert!(p["evidence"].is_object() || p["termination"] != "exited", "{} has no evidence", p["name"]);
        }
    }
    // As root on this host every fixture can be made: nothing is skipped.
    assert_eq!(s["not_applicable"], 0, "not applicable here:\n{}", show(&r));
    assert_fixtures_gone(&r);
}

/// The README's install step copies one file, husk: `husk selftest` works
/// from it alone (no husk-probe beside it, no HUSK_PROBE), with the probe
/// built into husk, also as the setuid copies, and a sandbox writing to its
/// own exe finds only the selftest's private copy, which is removed after.
#[test]
fn selftest_runs_with_nothing_but_the_husk_binary() {
    require_root!();
    let dir = TempDir::new("selftest-husk-alone");
    let alone = dir.join("husk");
    std::fs::copy(husk_bin(), &alone).unwrap();
    let only = "capabilities,setuid-binary-host-root,setuid-binary-sandbox-root,exe-write";
    let run = |json: bool| {
        let mut args = vec!["selftest", "--only", only];
        if json {
            args.push("--json");
        }
        std::process::Command::new(&alone)
            .args(&args)
            .env_remove("HUSK_PROBE")
            .stdin(Stdio::null())
            .output()
            .expect("spawn the lone husk")
    };
    let out = run(true);
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no report ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    println!("{}", show(&r));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(r["summary"]["contained"], 4, "every probe ran and was contained:\n{}", show(&r));
    let copy = r["fixtures"]["probe_dir"].as_str().expect("the report names the probe copy's directory");
    assert!(!copy.starts_with(dir.path().to_str().unwrap()), "the probe is a copy, not the installed husk");
    assert_fixtures_gone(&r);
    assert_eq!(std::fs::read(&alone).unwrap(), std::fs::read(husk_bin()).unwrap(), "the installed husk is untouched");
    let out = run(false);
    assert!(String::from_utf8_lossy(&out.stdout).contains("probe built into husk"), "the header says which probe");
}

/// The second wall: the same probes with the gVisor backend.
#[test]
fn selftest_finds_nothing_escaping_the_gvisor_backend() {
    require_root!();
    require_runsc!();
    let (r, code) = selftest(&["--runtime", "runsc"], &[]);
    println!("{}", show(&r));
    let s = &r["summary"];
    assert_eq!(s["escaped"], 0, "something escaped under gVisor:\n{}", show(&r));
    assert_eq!(s["error"], 0, "probes that proved nothing under gVisor:\n{}", show(&r));
    assert!(s["contained"].as_u64().unwrap() >= 80, "only {} contained under gVisor", s["contained"]);
    assert_eq!(code, 0);
    assert_fixtures_gone(&r);
}

/// The same probes against sandboxes weakened on purpose must say ESCAPED:
/// proof that `contained` above is a measurement, not a default answer.
#[test]
fn selftest_reports_what_a_weakened_sandbox_lets_through() {
    require_root!();
    let expect = |args: &[&str], env: &[(&str, &str)], escaped: &[&str]| {
        let (r, code) = selftest(args, env);
        let v = verdicts(&r);
        for name in escaped {
            assert_eq!(v[*name].0, "ESCAPED", "{name} with {args:?}:\n{}", show(&r));
        }
        assert_eq!(code, 1, "exit code with escapes, {args:?}");
        assert_eq!(r["summary"]["escaped"].as_u64().unwrap() as usize, escaped.len(), "{args:?}:\n{}", show(&r));
        assert!(!r["weakened"].as_array().unwrap().is_empty());
        assert_fixtures_gone(&r);
    };
    expect(
        &["--only", "interfaces,host-loopback-tcp,host-abstract-unix", "--unsafe-weaken=--network=host"],
        &[],
        &["interfaces", "host-loopback-tcp", "host-abstract-unix"],
    );
    expect(
        &["--only", "keyctl,io-uring,nested-userns,i386-abi", "--unsafe-weaken=--seccomp=unconfined"],
        &[],
        &["keyctl", "io-uring", "nested-userns", "i386-abi"],
    );
    expect(&["--only", "fork-bomb,memory-bomb", "--unsafe-weaken=--no-cgroup"], &[], &["fork-bomb", "memory-bomb"]);
    // Rules that allow every test name and the host's loopback open the
    // proxy's way to the marker server; UDP, DNS and raw TCP still have no
    // route.
    expect(
        &[
            "--only",
            "egress-raw-ip,egress-udp,egress-dns,egress-proxy-not-allowed,egress-private-address,egress-socks-not-allowed",
            "--unsafe-weaken=--allow-host=*.test:*",
            "--unsafe-weaken=--allow-host=127.0.0.1:*",
        ],
        &[],
        &["egress-proxy-not-allowed", "egress-private-address", "egress-socks-not-allowed"],
    );
    // The marker, planted in a directory that is then bound into the sandbox
    // at the same path, is found by the probes that look there (and still
    // not through /proc/1/root, which the non-dumpable init guards).
    let dir = std::path::PathBuf::from("/var/tmp").join(unique("selftest-marker"));
    std::fs::create_dir(&dir).unwrap();
    let bind = format!("--unsafe-weaken=--bind={}:{}", dir.display(), dir.display());
    let dir_env = dir.display().to_string();
    expect(
        &["--only", "marker-path,marker-dotdot,marker-proc-1-root", &bind],
        &[("TMPDIR", &dir_env)],
        &["marker-path", "marker-dotdot"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn selftest_removes_its_host_fixtures_even_when_interrupted() {
    require_root!();
    let probe = probe_path().display().to_string();
    let child = husk(&["selftest", "--json", "--probe", &probe])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn husk selftest");
    let pid = child.id() as i32;
    // Fixtures exist once the victim (a child of the selftest) runs.
    let started = wait_until(Duration::from_secs(30), || {
        host_pids_with("husk-selftest-victim-").iter().any(|v| {
            std::fs::read_to_string(format!("/proc/{v}/stat")).is_ok_and(|s| {
                s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)) == Some(&pid.to_string())
            })
        })
    });
    assert!(started, "the selftest never started its victim process");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no report after SIGTERM ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(r["interrupted"], true);
    assert_eq!(out.status.code(), Some(130));
    assert_fixtures_gone(&r);
}

/// `--probe` overrides the probe built into husk: a path that is not there
/// is refused, named, before any sandbox is made. (Without `--probe` husk
/// needs nothing beside itself: selftest_runs_with_nothing_but_the_husk_binary.)
#[test]
fn selftest_with_a_missing_probe_override_names_it() {
    let out = husk(&["selftest", "--probe", "/nonexistent/husk-probe"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/husk-probe"));
}

mod rootless {
    use super::*;

    /// Everything but the resource probes (which need a cgroup this host
    /// may not delegate to an ordinary user) holds rootless too.
    #[test]
    fn selftest_finds_nothing_escaping_rootless_defaults() {
        let (r, code) = selftest(&["--only", "privileges,filesystem,network,pid_ipc_uts,timeout"], &[]);
        println!("{}", show(&r));
        assert_eq!(r["summary"]["escaped"], 0, "{}", show(&r));
        assert_eq!(r["summary"]["error"], 0, "{}", show(&r));
        assert_eq!(code, 0);
        // Only the setuid-binary probes may be inapplicable (rootless maps one id).
        for (name, (verdict, detail)) in verdicts(&r) {
            if verdict == "not_applicable" {
                assert!(name.starts_with("setuid-binary") && !is_root(), "{name}: {detail}");
            }
        }
        assert_fixtures_gone(&r);
    }
}
