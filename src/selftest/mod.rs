//! `husk selftest`: escape and containment probes run inside sandboxes made
//! with husk's defaults, each judged `contained` / `ESCAPED` /
//! `not_applicable` (or `error` when a result proves nothing).
//!
//! - `probes.rs`: the probe table (data): name, category, probe argv, judge.
//! - `fixtures.rs`: host-side things the sandbox must not reach (a marker
//!   file, listeners, an abstract socket, a SysV queue, a victim process,
//!   setuid binaries, a terminal), created per run and removed after it.
//! - `egress.rs`: the egress probes' marker server and their judge.
//! - `runner.rs`: one `husk run --json` per probe, parsed.
//! - `embedded.rs`: the probe built into husk, and its private copy.
//! - `finding.rs`: the verdict, a probe run, the host before and after.
//! - `judge.rs`: pure rules from a probe's report to a verdict.
//! - `report.rs`: the text table and the JSON document.
//!
//! See docs/selftest.md for the probes, the verdict rules and exit codes.

pub mod egress;
pub mod embedded;
pub mod finding;
pub mod fixtures;
pub mod judge;
pub mod probes;
pub mod report;
pub mod runner;

use fixtures::{Defaults, Fixtures, Value as Fx};
use judge::{After, Context, Finding, Verdict};
use probes::{PROBES, Probe, Stdin};
use runner::{Invocation, RunConfig};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const SELFTEST_VERSION: u32 = 1;
/// Exit codes of `husk selftest` (docs/selftest.md).
pub const EXIT_CONTAINED: i32 = 0;
pub const EXIT_ESCAPED: i32 = 1;
pub const EXIT_INCONCLUSIVE: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error("{0}")]
    Probe(String),
    #[error("unknown probe or category {0:?}; `husk selftest --list` shows them")]
    UnknownProbe(String),
    #[error(
        "the probe {path} needs a dynamic loader, so it cannot run in an image root; build it static (.cargo/config.toml's crt-static) or pass a static one with --probe"
    )]
    DynamicProbe { path: PathBuf },
    #[error(transparent)]
    Fixture(#[from] fixtures::FixtureError),
    #[error("cannot catch interrupt signals to clean up fixtures: {0}")]
    Signals(nix::errno::Errno),
    #[error("a default sandbox could not run the probe, so nothing was tested: {0}")]
    Preflight(String),
}

/// Which probe the sandboxes run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeChoice {
    /// The one built into husk (a private copy of this binary).
    Embedded,
    /// `--probe PATH` / `HUSK_PROBE`.
    File(PathBuf),
}

impl std::fmt::Display for ProbeChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeChoice::Embedded => f.write_str("built into husk"),
            ProbeChoice::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub run: RunConfig,
    pub probe: ProbeChoice,
    /// Probe names or categories to run (empty: all).
    pub only: Vec<String>,
    /// Host directory for the marker and setuid fixtures.
    pub fixture_base: PathBuf,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProbeResult {
    pub name: &'static str,
    pub category: probes::Category,
    pub about: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// The command run inside the sandbox (placeholders filled in).
    pub command: Vec<String>,
    /// husk's exit code and termination, when the sandbox ran.
    pub husk_exit_code: Option<i32>,
    pub termination: Option<String>,
    pub duration_ms: f64,
    /// The probe's own JSON report: the evidence behind the verdict.
    pub evidence: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub total: usize,
    pub contained: usize,
    pub escaped: usize,
    pub not_applicable: usize,
    pub error: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub selftest_version: u32,
    pub husk_version: &'static str,
    pub run_id: String,
    /// `native`, `runsc`, or husk's default when not given.
    pub runtime: String,
    /// `host`, or the image reference.
    pub root: String,
    /// Test-only weakening arguments; never empty in a real run's report
    /// unless someone weakened it on purpose.
    pub weakened: Vec<String>,
    /// `isolation` and `limits` of the preflight run's verdict: what the
    /// defaults applied.
    pub isolation: serde_json::Value,
    pub limits: serde_json::Value,
    /// Where the host fixtures were (all removed when the report is made).
    pub fixtures: serde_json::Value,
    pub probes: Vec<ProbeResult>,
    pub summary: Summary,
    pub interrupted: bool,
    pub exit_code: i32,
}

/// The probes `only` selects (names or categories), in table order.
pub fn select(only: &[String]) -> Result<Vec<(usize, &'static Probe)>, SelftestError> {
    for o in only {
        if !PROBES.iter().any(|p| p.name == o || p.category.label() == o) {
            return Err(SelftestError::UnknownProbe(o.clone()));
        }
    }
    Ok(PROBES
        .iter()
        .enumerate()
        .filter(|(_, p)| only.is_empty() || only.iter().any(|o| p.name == o || p.category.label() == o))
        .collect())
}

pub fn summarize(results: &[ProbeResult]) -> Summary {
    let count = |v: Verdict| results.iter().filter(|r| r.verdict == v).count();
    Summary {
        total: results.len(),
        contained: count(Verdict::Contained),
        escaped: count(Verdict::Escaped),
        not_applicable: count(Verdict::NotApplicable),
        error: count(Verdict::Error),
    }
}

/// ESCAPED wins over error, error over success.
pub fn exit_code(s: &Summary, interrupted: bool) -> i32 {
    if s.escaped > 0 {
        EXIT_ESCAPED
    } else if interrupted {
        EXIT_INTERRUPTED
    } else if s.error > 0 {
        EXIT_INCONCLUSIVE
    } else {
        EXIT_CONTAINED
    }
}

/// Runs the selected probes; `progress` sees each result as it is judged.
pub fn run(opts: &Options, mut progress: impl FnMut(&ProbeResult)) -> Result<Report, SelftestError> {
    let selected = select(&opts.only)?;
    catch_interrupts().map_err(SelftestError::Signals)?;
    // Removed (on every return path) once the last sandbox has run.
    let (probe, copy) = match &opts.probe {
        ProbeChoice::File(p) => (p.clone(), None),
        ProbeChoice::Embedded => {
            let c = embedded::ProbeCopy::create(&opts.fixture_base)?;
            (c.path.clone(), Some(c))
        }
    };
    if opts.run.image.is_some() && runner::is_dynamic_elf(&probe) == Some(true) {
        return Err(SelftestError::DynamicProbe { path: probe });
    }
    let preflight = preflight(opts, &probe)?;
    let defaults = defaults_from(&preflight.verdict);
    let mut fx = Fixtures::create(&opts.fixture_base, &probe, &defaults)?;
    let gvisor = preflight.verdict["isolation"]["kernel"] == "gvisor" || preflight.verdict["backend"] == "runsc";
    let ctx = Context {
        kernel: if gvisor { judge::SandboxKernel::Gvisor } else { judge::SandboxKernel::Host },
        sandbox_root_host_uid: preflight.verdict["isolation"]["user_mapping"]["sandbox_root_host_uid"].as_u64(),
        marker_token: fx.marker_token.clone(),
        host_hostname: fx.host_hostname.clone(),
        sysv_id: fx.sysv.as_ref().map(|q| q.id),
        victim_marker: fx.victim_marker.clone(),
        memory_limit: defaults.memory_limit,
        pids_limit: defaults.pids_limit,
    };
    let mut results = Vec::new();
    let mut interrupted = false;
    for (index, probe) in selected {
        if was_interrupted() {
            interrupted = true;
            break;
        }
        let r = run_probe(opts, &mut fx, &ctx, index, probe);
        progress(&r);
        results.push(r);
    }
    interrupted |= was_interrupted();
    let run_id = fx.run_id.clone();
    let mut fixtures = fx.describe();
    drop(fx);
    if let (Some(c), Some(obj)) = (&copy, fixtures.as_object_mut()) {
        obj.insert("probe_dir".into(), serde_json::json!(c.dir()));
    }
    drop(copy);
    let summary = summarize(&results);
    Ok(Report {
        selftest_version: SELFTEST_VERSION,
        husk_version: env!("CARGO_PKG_VERSION"),
        run_id,
        // What ran, not what was asked for (`auto`, or nothing).
        runtime: preflight.verdict["backend"].as_str().unwrap_or("?").into(),
        root: opts.run.image.clone().unwrap_or_else(|| "host".into()),
        weakened: opts.run.weaken.clone(),
        isolation: preflight.verdict["isolation"].clone(),
        limits: preflight.verdict["limits"].clone(),
        fixtures,
        exit_code: exit_code(&summary, interrupted),
        probes: results,
        summary,
        interrupted,
    })
}

/// One default sandbox running `husk-probe ids`: proves the setup works at
/// all (else every probe would "fail" for the wrong reason) and tells what
/// the defaults are on this host.
fn preflight(opts: &Options, probe: &Path) -> Result<judge::ProbeRun, SelftestError> {
    let inv = Invocation {
        argv: vec![fixtures::PROBE_IN_SANDBOX.into(), "ids".into()],
        binds: vec![(probe.to_path_buf(), fixtures::PROBE_IN_SANDBOX)],
        timeout_s: probes::DEFAULT_TIMEOUT_S,
        user: None,
        husk_args: vec![],
        stdin: Stdin::Null,
        tty: None,
    };
    let run = runner::run(&opts.run, &inv).map_err(|e| SelftestError::Preflight(e.to_string()))?;
    if run.termination != "exited" || run.report.is_none() {
        let why = run.error.clone().unwrap_or_else(|| {
            format!(
                "ended as {} (husk exit {}) without a probe report; stderr: {}",
                run.termination,
                run.exit_code,
                run.verdict["stderr"]["text"].as_str().unwrap_or("").trim()
            )
        });
        return Err(SelftestError::Preflight(why));
    }
    Ok(run)
}

fn defaults_from(v: &serde_json::Value) -> Defaults {
    let map = &v["isolation"]["user_mapping"];
    let uid = map["sandbox_root_host_uid"].as_u64().map(|u| u as u32);
    let gid = map["gid_map"].as_str().and_then(|m| m.split_whitespace().nth(1)?.parse::<u32>().ok());
    let count = map["uid_map"].as_str().and_then(|m| m.split_whitespace().nth(2)?.parse::<u64>().ok());
    Defaults {
        sandbox_root: uid.zip(gid),
        memory_limit: v["limits"]["memory"]["applied"].as_u64(),
        pids_limit: v["limits"]["pids"]["applied"].as_u64(),
        rootless: map["mode"] == "rootless" || count.is_some_and(|c| c < 1001),
    }
}

/// Fills the placeholders of `argv`: the command, or the finding that
/// stops the probe from running.
fn expand(fx: &Fixtures, index: usize, argv: &[&str]) -> Result<Vec<String>, Finding> {
    let mut out = Vec::with_capacity(argv.len());
    for a in argv {
        let mut s = a.to_string();
        for key in fixtures::KEYS {
            let pat = format!("{{{key}}}");
            if s.contains(&pat) {
                match fx.value(key, index) {
                    Fx::Text(t) => s = s.replace(&pat, &t),
                    Fx::Missing(why) => return Err(judge::not_applicable(why)),
                    Fx::Unbounded(why) => return Err(Finding { verdict: Verdict::Escaped, detail: why }),
                }
            }
        }
        out.push(s);
    }
    Ok(out)
}

fn run_probe(opts: &Options, fx: &mut Fixtures, ctx: &Context, index: usize, p: &'static Probe) -> ProbeResult {
    let start = Instant::now();
    let mut result = ProbeResult {
        name: p.name,
        category: p.category,
        about: p.about,
        verdict: Verdict::Error,
        detail: String::new(),
        command: p.argv.iter().map(|s| s.to_string()).collect(),
        husk_exit_code: None,
        termination: None,
        duration_ms: 0.0,
        evidence: None,
    };
    let finish = |mut r: ProbeResult, f: Finding| {
        r.verdict = f.verdict;
        r.detail = f.detail;
        r.duration_ms = crate::outcome::round3(start.elapsed().as_secs_f64() * 1000.0);
        r
    };
    let (argv, husk_args) = match expand(fx, index, p.argv).and_then(|a| Ok((a, expand(fx, index, p.husk_args)?))) {
        Ok(a) => a,
        Err(f) => return finish(result, f),
    };
    result.command = argv.clone();
    if p.stdin == Stdin::Tty && fx.tty.is_none() {
        return finish(result, judge::not_applicable("no host pseudo-terminal could be opened"));
    }
    let tty = fx.tty.as_ref().map(|t| std::os::fd::AsFd::as_fd(&t.slave));
    let inv = Invocation {
        argv,
        binds: fx.binds(p.argv),
        timeout_s: p.timeout_s,
        user: p.user,
        husk_args,
        stdin: p.stdin,
        tty,
    };
    let run = match runner::run(&opts.run, &inv) {
        Ok(r) => r,
        Err(e) => return finish(result, Finding { verdict: Verdict::Error, detail: e.to_string() }),
    };
    let after = observe(fx, index, p, &inv.argv);
    result.husk_exit_code = Some(run.exit_code);
    result.termination = Some(run.termination.clone());
    result.evidence = run.report.clone();
    let finding = judge::judge(p.judge, ctx, &run, &after);
    // An interrupted run proves nothing, except an escape already seen
    // (whose evidence `observe` has just removed from the host).
    let finding = if was_interrupted() && finding.verdict != Verdict::Escaped {
        Finding { verdict: Verdict::Error, detail: "interrupted while running".into() }
    } else {
        finding
    };
    finish(result, finding)
}

/// What the host looks like after a probe ran; removes anything the probe
/// managed to leave on the host (that is an escape, and then it is evidence
/// the report names, not a leftover).
fn observe(fx: &mut Fixtures, index: usize, p: &Probe, argv: &[String]) -> After {
    let mut after = After {
        victim_alive: fx.victim_alive(),
        host_hostname: nix::unistd::gethostname().ok().map(|h| h.to_string_lossy().into_owned()),
        ..After::default()
    };
    if p.argv.iter().any(|a| a.contains("{token}"))
        && let Fx::Text(token) = fx.value("token", index)
    {
        // The sandbox's processes die with it, but reaping a killed pid
        // namespace is asynchronous: give them a moment.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            after.leftover_pids = host_pids_with(&token);
            if after.leftover_pids.is_empty() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in &after.leftover_pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    for (template, actual) in p.argv.iter().zip(argv) {
        if template.contains("{scratch}") && actual.starts_with('/') {
            let path = Path::new(actual);
            if std::fs::symlink_metadata(path).is_ok() {
                after.created_on_host.push(actual.clone());
                let _ = std::fs::remove_file(path);
            }
        }
    }
    if let judge::Judge::Egress(_) = p.judge {
        after.egress_hits = fx.egress_hits();
    }
    if p.stdin == Stdin::Tty {
        after.tty_queued = fx.tty.as_ref().and_then(|t| t.queued());
    }
    after
}

/// Host pids whose command line contains `needle`.
pub fn host_pids_with(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| *pid != me)
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// SIGINT, SIGTERM and SIGHUP set a flag instead of killing husk, so the
/// selftest can remove its fixtures instead of dying with them in place.
fn catch_interrupts() -> crate::sys::SysResult<()> {
    crate::sys::signal::raise_flag_on(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
}

/// Has one of the signals `catch_interrupts` handles arrived?
pub(crate) fn was_interrupted() -> bool {
    crate::sys::signal::flag_raised()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_by_name_or_category_and_rejects_unknowns() {
        assert_eq!(select(&[]).unwrap().len(), PROBES.len());
        let net = select(&["network".into()]).unwrap();
        assert!(!net.is_empty() && net.iter().all(|(_, p)| p.category == probes::Category::Network));
        let two = select(&["mount".into(), "tiocsti".into()]).unwrap();
        assert_eq!(two.iter().map(|(_, p)| p.name).collect::<Vec<_>>(), ["mount", "tiocsti"]);
        assert!(matches!(select(&["nope".into()]), Err(SelftestError::UnknownProbe(_))));
    }

    #[test]
    fn exit_codes_put_escapes_first() {
        let s = |escaped, error| Summary { total: 3, contained: 1, escaped, not_applicable: 0, error };
        assert_eq!(exit_code(&s(0, 0), false), EXIT_CONTAINED);
        assert_eq!(exit_code(&s(1, 1), false), EXIT_ESCAPED);
        assert_eq!(exit_code(&s(1, 0), true), EXIT_ESCAPED);
        assert_eq!(exit_code(&s(0, 1), false), EXIT_INCONCLUSIVE);
        assert_eq!(exit_code(&s(0, 0), true), EXIT_INTERRUPTED);
    }

    #[test]
    fn defaults_come_from_the_preflight_verdict() {
        let v = serde_json::json!({
            "isolation": {"user_mapping": {"mode": "privileged", "sandbox_root_host_uid": 100000,
                                            "uid_map": "0 100000 65536", "gid_map": "0 200000 65536"}},
            "limits": {"memory": {"applied": 1024}, "pids": {"applied": 64}},
        });
        let d = defaults_from(&v);
        assert_eq!(d.sandbox_root, Some((100000, 200000)));
        assert_eq!((d.memory_limit, d.pids_limit, d.rootless), (Some(1024), Some(64), false));
        let v = serde_json::json!({
            "isolation": {"user_mapping": {"mode": "rootless", "sandbox_root_host_uid": 1001,
                                            "uid_map": "0 1001 1", "gid_map": "0 1001 1"}},
            "limits": null,
        });
        let d = defaults_from(&v);
        assert!(d.rootless);
        assert_eq!((d.memory_limit, d.pids_limit), (None, None));
    }
}
