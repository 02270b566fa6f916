//! Running one probe: `husk run --json` of this same husk binary, with the
//! defaults (only `--timeout`, the probe's `--bind` and, for two probes,
//! `--user` added), and parsing what it reported.
//!
//! A separate `husk run` process per probe, rather than calling the backend
//! in-process: the selftest then tests exactly what users run, including
//! argument parsing and the environment (`HUSK_NO_CGROUP`, `HUSK_ID_RANGE`),
//! and a probe that wedges its sandbox cannot wedge the selftest.

use super::judge::ProbeRun;
use super::probes::Stdin;
use crate::sys::command::with_controlling_tty;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How every sandbox of the run is made (beyond the defaults).
#[derive(Clone, Debug, Default)]
pub struct RunConfig {
    /// The husk binary (this one).
    pub husk: PathBuf,
    /// `--runtime` to pass, if any.
    pub runtime: Option<String>,
    /// `--image` to pass, if any.
    pub image: Option<String>,
    /// Test-only: extra `husk run` arguments that weaken every sandbox.
    pub weaken: Vec<String>,
    /// `--root` given to the selftest, passed on as HUSK_ROOT.
    pub store_root: Option<PathBuf>,
}

/// One sandbox to run.
pub struct Invocation<'a> {
    pub argv: Vec<String>,
    pub binds: Vec<(PathBuf, &'a str)>,
    pub timeout_s: u32,
    pub user: Option<&'a str>,
    /// The probe's own `husk run` options (`Probe::husk_args`, filled in).
    pub husk_args: Vec<String>,
    pub stdin: Stdin,
    /// The slave side of the host terminal, for `Stdin::Tty`.
    pub tty: Option<std::os::fd::BorrowedFd<'a>>,
}

/// husk's own command line for an invocation (for reports and reruns).
pub fn husk_args(cfg: &RunConfig, inv: &Invocation<'_>) -> Vec<String> {
    let mut args: Vec<String> = vec!["run".into(), "--json".into(), "--timeout".into(), format!("{}s", inv.timeout_s)];
    if let Some(r) = &cfg.runtime {
        args.extend(["--runtime".into(), r.clone()]);
    }
    if let Some(i) = &cfg.image {
        args.extend(["--image".into(), i.clone()]);
    }
    for (host, inner) in &inv.binds {
        args.extend(["--bind".into(), format!("{}:{inner}:ro", host.display())]);
    }
    if let Some(u) = inv.user {
        args.extend(["--user".into(), u.to_string()]);
    }
    args.extend(inv.husk_args.iter().cloned());
    args.extend(cfg.weaken.iter().cloned());
    args.push("--".into());
    args.extend(inv.argv.iter().cloned());
    args
}

/// Why a probe's husk run gave no verdict to judge.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("dup of the host terminal: {0}")]
    Tty(std::io::Error),
    #[error("starting {}: {source}", husk.display())]
    Start { husk: PathBuf, source: std::io::Error },
    #[error("waiting for husk: {0}")]
    Wait(std::io::Error),
    #[error("waiting for husk: {0}")]
    Lost(std::sync::mpsc::RecvTimeoutError),
    #[error("husk printed no verdict ({source}; exit {code:?}): {stderr}")]
    NoVerdict { source: serde_json::Error, code: Option<i32>, stderr: String },
    #[error(
        "the probe {} does not exist (from --probe or HUSK_PROBE); leave both unset to use the probe built into husk",
        .0.display()
    )]
    NoProbe(PathBuf),
}

/// Runs husk and parses its verdict. `Err` only when husk could not be
/// started or printed no verdict at all.
pub fn run(cfg: &RunConfig, inv: &Invocation<'_>) -> Result<ProbeRun, RunnerError> {
    let args = husk_args(cfg, inv);
    let mut cmd = Command::new(&cfg.husk);
    cmd.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(root) = &cfg.store_root {
        cmd.env("HUSK_ROOT", root);
    }
    match (inv.stdin, inv.tty) {
        (Stdin::Tty, Some(fd)) => {
            let fd = fd.try_clone_to_owned().map_err(RunnerError::Tty)?;
            cmd.stdin(Stdio::from(fd));
            with_controlling_tty(&mut cmd);
        }
        _ => {
            cmd.stdin(Stdio::null());
        }
    }
    let child = cmd.spawn().map_err(|source| RunnerError::Start { husk: cfg.husk.clone(), source })?;
    let pid = child.id();
    // husk enforces --timeout itself; this outer bound only guards against
    // husk wedging (then it is killed, and its sandbox with it).
    let guard = Duration::from_secs(u64::from(inv.timeout_s) + 30);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let mut waited = Duration::ZERO;
    let out = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => break r.map_err(RunnerError::Wait)?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                waited += Duration::from_millis(100);
                let sig = if waited > guard {
                    Some(nix::sys::signal::Signal::SIGKILL)
                } else if super::was_interrupted() {
                    Some(nix::sys::signal::Signal::SIGTERM)
                } else {
                    None
                };
                if let Some(sig) = sig {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
                }
            }
            Err(e) => return Err(RunnerError::Lost(e)),
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let verdict: Value = serde_json::from_str(stdout.trim()).map_err(|source| RunnerError::NoVerdict {
        source,
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })?;
    Ok(parse(verdict, out.status.code().unwrap_or(-1)))
}

/// The probe run as seen through husk's verdict.
pub fn parse(verdict: Value, exit_code: i32) -> ProbeRun {
    let report = verdict["stdout"]["text"]
        .as_str()
        .unwrap_or("")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(Value::is_object);
    let error = verdict["error"]["message"].as_str().map(|m| match verdict["error"]["hint"].as_str() {
        Some(h) => format!("{m} (hint: {h})"),
        None => m.to_string(),
    });
    ProbeRun {
        termination: verdict["termination"].as_str().unwrap_or("?").to_string(),
        exit_code,
        error,
        report,
        verdict,
    }
}

/// The probe to run: `explicit` (from --probe or $HUSK_PROBE), which must
/// exist, else the one built into husk.
pub fn find_probe(explicit: Option<&Path>) -> Result<super::ProbeChoice, RunnerError> {
    match explicit {
        None => Ok(super::ProbeChoice::Embedded),
        Some(p) if p.is_file() => Ok(super::ProbeChoice::File(p.to_path_buf())),
        Some(p) => Err(RunnerError::NoProbe(p.to_path_buf())),
    }
}

/// Does the ELF file at `path` need a dynamic loader (has a PT_INTERP)?
/// A probe that does cannot run in an image root. None: not a 64-bit ELF.
pub fn is_dynamic_elf(path: &Path) -> Option<bool> {
    let data = std::fs::read(path).ok()?;
    elf_has_interp(&data)
}

fn elf_has_interp(data: &[u8]) -> Option<bool> {
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(data.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(data.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let (phentsize, phnum) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    for i in 0..phnum {
        let off = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let p_type = u32::from_le_bytes(data.get(off..off + 4)?.try_into().ok()?);
        if p_type == 3 {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_the_first_json_object_line_of_stdout() {
        let v = serde_json::json!({"termination": "exited", "stdout": {"text": "noise\n{\"cmd\":\"x\",\"ok\":true}\n{}\n"},
                                   "error": null});
        let r = parse(v, 0);
        assert_eq!(r.report.unwrap()["cmd"], "x");
        assert_eq!(r.termination, "exited");
        assert!(r.error.is_none());
    }

    #[test]
    fn setup_errors_carry_the_hint() {
        let v = serde_json::json!({"termination": "setup_failed", "stdout": null,
                                   "error": {"message": "no cgroup", "hint": "delegate one"}});
        let r = parse(v, 125);
        assert_eq!(r.error.as_deref(), Some("no cgroup (hint: delegate one)"));
        assert!(r.report.is_none());
    }

    #[test]
    fn husk_args_add_only_timeout_binds_user_and_the_weakening() {
        let cfg = RunConfig { husk: "/h".into(), weaken: vec!["--network=host".into()], ..Default::default() };
        let inv = Invocation {
            argv: vec!["/.husk-probe".into(), "caps".into()],
            binds: vec![("/p".into(), "/.husk-probe")],
            timeout_s: 3,
            user: Some("1000:1000"),
            husk_args: vec![],
            stdin: Stdin::Null,
            tty: None,
        };
        assert_eq!(
            husk_args(&cfg, &inv).join(" "),
            "run --json --timeout 3s --bind /p:/.husk-probe:ro --user 1000:1000 --network=host -- /.husk-probe caps"
        );
    }

    #[test]
    fn elf_interp_detection() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        assert!(elf_has_interp(&exe).is_some());
        assert_eq!(elf_has_interp(b"#!/bin/sh\n"), None);
        // A minimal ELF64 header with one PT_INTERP program header.
        let mut h = vec![0u8; 64 + 56];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        h[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        h[64..68].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(elf_has_interp(&h), Some(true));
        h[64..68].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(elf_has_interp(&h), Some(false));
        h[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(elf_has_interp(&h), None, "a header past the end is not an answer");
    }
}
