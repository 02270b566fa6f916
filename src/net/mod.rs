//! Egress allowlist (`--network allow=RULE,...`): the sandbox keeps its
//! private network namespace with only `lo`; its init listens on
//! 127.0.0.1:3128 (HTTP proxy: CONNECT and plain-HTTP forwarding) and
//! 127.0.0.1:1080 (SOCKS5) there and hands the listeners to husk, whose
//! `egress-proxy` helper process serves them from the host's namespace
//! under the policy. See docs/network.md.
//!
//! - `rules`: the rule grammar and the address classes;
//! - `http`, `socks`, `tls`: the parsers of what clients send (fuzzed);
//! - `proxy`: the helper process; `relay`: a granted connection's bytes,
//!   moved by splice(2);
//! - `account`: the bounded accounting that becomes the verdict's `network`;
//! - this file: the spec, the helper's configuration, and its handle.

pub mod account;
pub mod http;
pub mod proxy;
pub mod publish;
pub mod relay;
pub mod rules;
pub mod socks;
pub mod tls;

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The proxy ports inside the sandbox (its network namespace is its own,
/// so fixed ports cannot collide with anything on the host).
pub const HTTP_PORT: u16 = 3128;
pub const SOCKS_PORT: u16 = 1080;
/// The hidden subcommand the helper runs as.
pub const SUBCOMMAND: &str = "egress-proxy";
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;

/// `--network allow=...`, `--allow-host`, `--add-host`, `--egress-bytes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressSpec {
    pub rules: Vec<String>,
    pub add_hosts: Vec<(String, IpAddr)>,
    pub egress_bytes: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(transparent)]
    Rule(#[from] rules::RuleError),
    #[error("invalid --add-host {0:?}: expected NAME:IP, e.g. pypi.internal:127.0.0.5")]
    AddHost(String),
    #[error("--add-host and --egress-bytes need --network allow=RULE (or --allow-host RULE)")]
    NeedsAllow,
    #[error("--network {0} cannot be combined with allow= rules or --allow-host")]
    Mixed(String),
    #[error("invalid --network {0:?}: expected none, host, or allow=RULE[,RULE...]")]
    Mode(String),
    #[error("starting the egress proxy: {0}")]
    Start(std::io::Error),
    #[error("the egress proxy exited at start ({0})")]
    Died(String),
}

/// Parses `--add-host NAME:IP` (IPv6 as `NAME:[v6]` or `NAME:v6`).
pub fn parse_add_host(s: &str) -> Result<(String, IpAddr), EgressError> {
    let bad = || EgressError::AddHost(s.to_string());
    let (name, ip) = s.split_once(':').ok_or_else(bad)?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    let name = rules::normalize_name(name);
    if !rules::valid_name(&name) {
        return Err(bad());
    }
    Ok((name, ip.parse().map_err(|_| bad())?))
}

impl EgressSpec {
    /// Checks the rules (the helper parses them again from the same text).
    pub fn validate(&self) -> Result<rules::Policy, rules::RuleError> {
        rules::Policy::parse(&self.rules)
    }

    /// The environment every process of the sandbox gets, so proxy-aware
    /// tools (curl, pip, npm, git, requests, Node) go through the proxy.
    pub fn env() -> Vec<(String, String)> {
        let http = format!("http://127.0.0.1:{HTTP_PORT}");
        let socks = format!("socks5h://127.0.0.1:{SOCKS_PORT}");
        let mut env = Vec::new();
        for (k, v) in [("HTTP_PROXY", &http), ("HTTPS_PROXY", &http), ("ALL_PROXY", &socks)] {
            env.push((k.to_string(), v.clone()));
            env.push((k.to_ascii_lowercase(), v.clone()));
        }
        for k in ["NO_PROXY", "no_proxy"] {
            env.push((k.to_string(), "localhost,127.0.0.1".to_string()));
        }
        env
    }
}

/// What the helper reads on stdin.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProxyConfig {
    pub rules: Vec<String>,
    pub add_hosts: Vec<(String, IpAddr)>,
    pub egress_bytes: Option<u64>,
    pub max_connections: usize,
    pub idle_timeout_ms: u64,
    pub http_fd: i32,
    pub socks_fd: i32,
}

/// The running helper, owned by whoever supervises the sandbox; it dies
/// with that process (PDEATHSIG) or at `finish`.
pub struct EgressProxy {
    child: std::process::Child,
    rules: Vec<String>,
    /// Kept open: a byte on it asks for the accounting so far
    /// (`snapshot`).
    ask: Option<std::process::ChildStdin>,
    /// The helper's stdout (its reports, one JSON line each) and what was
    /// read of it past the last whole line.
    out: std::cell::RefCell<Option<(std::fs::File, Vec<u8>)>>,
}

impl EgressProxy {
    /// Starts the helper with the sandbox's listeners (`http`, `socks`).
    /// The listeners are given away: only the helper holds them after
    /// this, so if it dies the sandbox's proxy ports refuse (closed, not
    /// open).
    pub fn start(spec: &EgressSpec, http: OwnedFd, socks: OwnedFd) -> Result<EgressProxy, EgressError> {
        use std::io::Write;
        crate::sys::net::keep_across_exec(http.as_fd()).map_err(|e| EgressError::Start(e.into()))?;
        crate::sys::net::keep_across_exec(socks.as_fd()).map_err(|e| EgressError::Start(e.into()))?;
        let cfg = ProxyConfig {
            rules: spec.rules.clone(),
            add_hosts: spec.add_hosts.clone(),
            egress_bytes: spec.egress_bytes,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            http_fd: http.as_raw_fd(),
            socks_fd: socks.as_raw_fd(),
        };
        let mut cmd = std::process::Command::new("/proc/self/exe");
        cmd.arg(SUBCOMMAND)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        crate::sys::command::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(EgressError::Start)?;
        drop((http, socks));
        let mut json = serde_json::to_vec(&cfg).unwrap_or_default();
        json.push(b'\n');
        let mut ask = child.stdin.take();
        let sent = ask.as_mut().map(|i| i.write_all(&json));
        if !matches!(sent, Some(Ok(()))) {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(EgressError::Died(status));
        }
        let out = child.stdout.take().map(|o| (std::fs::File::from(OwnedFd::from(o)), Vec::new()));
        Ok(EgressProxy { child, rules: spec.rules.clone(), ask, out: std::cell::RefCell::new(out) })
    }

    /// The accounting so far, for a sandbox that lives on (`husk inspect`,
    /// an exec's verdict): the helper answers a byte on its stdin with one
    /// report line. `None` if it does not answer within `REPORT_WAIT`.
    pub fn snapshot(&self) -> Option<account::NetworkReport> {
        use std::io::Write;
        let mut ask = self.ask.as_ref()?;
        ask.write_all(b"?").ok()?;
        let mut out = self.out.borrow_mut();
        let (file, pending) = out.as_mut()?;
        let line = read_line(file, pending, REPORT_WAIT)?;
        serde_json::from_slice(&line).ok()
    }

    /// Stops the helper and returns its accounting (or, if it crashed or
    /// said nothing, a report that says so).
    pub fn finish(mut self) -> account::NetworkReport {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let text = match self.out.get_mut().take() {
            Some((file, pending)) => read_report(file, pending),
            None => String::new(),
        };
        if let Ok(None) = self.child.try_wait() {
            // It said what it had to (or ran out of time): it must not
            // keep the run's end waiting.
            let _ = self.child.kill();
        }
        let status = self.child.wait();
        // The last line is the final report (snapshots asked for and not
        // read in time may come before it).
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        match serde_json::from_str::<account::NetworkReport>(last) {
            Ok(r) => r,
            Err(_) => self.without_report(format!(
                "the egress proxy gave no report ({}); the sandbox had no network once it was gone",
                status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())
            )),
        }
    }

    /// What a live sandbox's accounting says when the proxy did not
    /// answer `snapshot` (wedged or gone: either way nothing passes it).
    pub fn unanswered(&self) -> account::NetworkReport {
        self.without_report("the egress proxy did not answer for its accounting".into())
    }

    fn without_report(&self, error: String) -> account::NetworkReport {
        account::NetworkReport {
            mode: "allowlist".into(),
            rules: self.rules.clone(),
            http_proxy: format!("127.0.0.1:{HTTP_PORT}"),
            socks_proxy: format!("127.0.0.1:{SOCKS_PORT}"),
            error: Some(error),
            ..Default::default()
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// How long the proxy has to write its report after SIGTERM: it only
/// serializes a bounded ledger, so more means it is wedged.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until `f` can be read (false at `deadline` or an error).
fn readable(f: &std::fs::File, deadline: std::time::Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(f.as_fd(), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// One report line (without its newline), read within `wait`; a partial
/// line stays in `pending` for the next call.
fn read_line(f: &mut std::fs::File, pending: &mut Vec<u8>, wait: std::time::Duration) -> Option<Vec<u8>> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + wait;
    let mut buf = [0u8; 8192];
    loop {
        if let Some(nl) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            return Some(line[..nl].to_vec());
        }
        if pending.len() >= 1 << 20 || !readable(f, deadline) {
            return None;
        }
        match f.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// The proxy's last words: up to 1 MiB, read until EOF or `REPORT_WAIT`.
fn read_report(mut out: std::fs::File, mut text: Vec<u8>) -> String {
    use std::io::Read;
    let deadline = std::time::Instant::now() + REPORT_WAIT;
    let mut buf = [0u8; 8192];
    while text.len() < 1 << 20 && readable(&out, deadline) {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        // `finish` waited already; on an early return the helper must not
        // outlive the run.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_host_takes_names_and_addresses() {
        assert_eq!(
            parse_add_host("PyPI.internal:127.0.0.5").unwrap(),
            ("pypi.internal".into(), "127.0.0.5".parse().unwrap())
        );
        assert_eq!(parse_add_host("v6.test:[::1]").unwrap().1, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(parse_add_host("v6.test:::1").unwrap().1, "::1".parse::<IpAddr>().unwrap());
        for bad in ["x", "x:", ":1.2.3.4", "a b:1.2.3.4", "x:300.1.1.1"] {
            assert!(parse_add_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn proxy_env_names_both_cases() {
        let env = EgressSpec::env();
        for k in
            ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"]
        {
            assert!(env.iter().any(|(n, _)| n == k), "{k}");
        }
    }
}
