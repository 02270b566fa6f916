//! `husk doctor`: what this host supports, and the exact fix for what it
//! does not. The decisive check runs a real sandbox with husk's defaults.

use crate::backend::runsc::{Runsc, config::RunscConfig};
use crate::backend::{Backend, RunIo, native::Native};
use crate::cli::DoctorArgs;
use crate::host::{HostFacts, blockers, no_cgroup_opt_out};
use crate::outcome::Termination;

use crate::spec::{OutputSpec, Spec};
use serde::Serialize;

#[derive(Serialize, Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// Required for native isolation with husk's defaults.
    pub required: bool,
    pub detail: String,
    pub fix: Option<String>,
}

#[derive(Serialize, Debug)]
pub struct Report {
    /// `husk run` works here with its defaults (resource limits included).
    pub native_ok: bool,
    /// A native sandbox runs here, with `--no-cgroup` if cgroups are missing.
    pub isolation_ok: bool,
    /// Resource limits (cgroups) can be applied, or were opted out of.
    pub limits_ok: bool,
    pub checks: Vec<Check>,
}

fn check(name: &'static str, required: bool, ok: bool, detail: String, fix: Option<&str>) -> Check {
    Check { name, ok, required, detail, fix: if ok { None } else { fix.map(str::to_string) } }
}

fn kernel_release() -> String {
    nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default()
}

/// Husk's messages carry their remedy as "...; fix: ...". Doctor prints the
/// problem as the detail and the remedy once on its own `fix:` line.
fn split_fix(c: &mut Check) {
    if let Some((problem, fix)) = c.detail.split_once("; fix: ") {
        c.fix = c.fix.take().or_else(|| Some(fix.to_string()));
        c.detail = problem.to_string();
    }
    if let Some((problem, fix)) = c.fix.as_deref().and_then(|f| f.split_once("; fix: ")) {
        if !c.detail.contains(problem) {
            c.detail = format!("{}: {problem}", c.detail);
        }
        c.fix = Some(fix.to_string());
    }
}

/// Runs `sh -c 'exit 0'` in a real sandbox with husk's defaults (without
/// a cgroup when `no_cgroup`) to prove the whole chain. Ok: how long it
/// took; Err: (what failed, how to fix).
fn trial(host: &HostFacts, no_cgroup: bool, backend: &dyn Backend) -> Result<f64, (String, Option<String>)> {
    let mut spec = Spec::new(vec!["sh".into(), "-c".into(), "exit 0".into()]);
    spec.output = OutputSpec::Capture { limit: 4096 };
    spec.limits.no_cgroup = no_cgroup;
    // The pipeline of `husk run` for this backend (sandbox/prepare.rs): the
    // root, then the plan with the backend's hooks (runsc binds husk's own
    // binary in, its seccomp loader, and splits the limits with gVisor).
    let paths = crate::paths::Paths::from_cli(None, None);
    let (plan, _lease, _) = crate::sandbox::prepare::plan_with(backend, spec, host, &paths, crate::plan::InitRole::Run)
        .map_err(|e| {
            if e.report.step == crate::step::Phase::Root {
                return (e.report.message, None);
            }
            let what = if e.runtime == "none" {
                format!("planning a sandbox: {}", e.report.message)
            } else {
                e.report.message
            };
            (what, e.report.hint)
        })?;
    let redact = crate::redact::Redaction::none();
    let o =
        backend.run(plan, RunIo { capture: Some(4096), tap: None, redact: &redact, t_start: crate::spawn::now_ns() });
    match o.termination {
        Termination::Exited if o.status == Some(0) => Ok(o.duration_ms),
        _ => {
            let e = o.error.as_ref();
            let detail = e.map(|e| e.message.clone()).unwrap_or_else(|| format!("{:?}", o.termination));
            Err((detail, e.and_then(|e| e.hint.clone())))
        }
    }
}

/// The native backend's trial run.
fn sandbox_check(host: &HostFacts, no_cgroup: bool) -> Check {
    match trial(host, no_cgroup, &Native) {
        Ok(ms) => check("sandbox", true, true, format!("a default sandbox ran in {ms:.1} ms"), None),
        Err((detail, fix)) => Check { name: "sandbox", ok: false, required: true, detail, fix },
    }
}

/// Not required for native isolation; proves `--runtime runsc` works: the
/// host offers what runsc needs, and runsc's trial run succeeds.
fn runsc_check(host: &HostFacts, no_cgroup: bool) -> Check {
    let fail = |detail, fix| Check { name: "runsc", ok: false, required: false, detail, fix };
    let fix = Some("apt-get install runsc (for --runtime runsc), or pass --runsc-path".to_string());
    let dir = match crate::backend::runsc::config::state_dir(None) {
        Ok(dir) => dir,
        Err(e) => return fail(e.to_string(), None),
    };
    let cfg = match RunscConfig::resolve(&crate::spec::RunscSpec::default(), &dir) {
        Ok(cfg) => cfg,
        Err(e) => return fail(e.to_string(), fix),
    };
    let blocked = blockers::runsc(host.view(), &cfg.platform);
    if !blocked.is_empty() {
        return fail(blocked.join("; "), None);
    }
    let (version, platform, bin) = (cfg.info.version.clone(), cfg.platform.clone(), cfg.bin.clone());
    let rootless = if cfg.mode.rootless() { ", rootless" } else { "" };
    match trial(host, no_cgroup, &Runsc::new(cfg)) {
        Ok(ms) => check(
            "runsc",
            false,
            true,
            format!("runsc {version} ({}) ran a sandbox on platform {platform}{rootless} in {ms:.0} ms", bin.display()),
            None,
        ),
        Err((detail, fix)) => {
            fail(format!("runsc {version} on platform {platform} could not run a sandbox: {detail}"), fix)
        }
    }
}

/// The host facts of `blockers::ROWS` that native isolation needs, as
/// checks (a row this host has nothing to say about is left out).
fn host_checks(host: &HostFacts) -> impl Iterator<Item = Check> + '_ {
    let v = host.view();
    let root = v.root && v.initial_userns;
    blockers::ROWS.iter().filter(|r| r.needs != blockers::Needs::RunscPtrace).filter_map(move |r| {
        let seen = (r.seen)(v)?;
        Some(check(r.check, r.binds_root || !root, !(r.blocks)(v, root), seen, r.fix))
    })
}

pub fn collect() -> Report {
    let host = HostFacts::probe();
    let mut checks = Vec::new();
    checks.push(check("kernel", false, true, kernel_release(), None));

    checks.extend(host_checks(&host));
    let who = crate::cgroup::Caller { uid: host.uid, privileged: host.privileged };
    let (ok, detail, fix) = crate::cgroup::doctor(host.cgroup(), who);
    // With the explicit opt-out (HUSK_NO_CGROUP=1, what --no-cgroup reads),
    // runs need no cgroup, so its absence does not block native isolation.
    let opt_out = no_cgroup_opt_out();
    let detail = if opt_out { format!("{detail} (not required: HUSK_NO_CGROUP is set)") } else { detail };
    // Without cgroups the limits are missing, not the isolation: the sandbox
    // checks below then prove what a `--no-cgroup` run gets.
    let limits_ok = ok || opt_out;
    checks.push(Check { name: "cgroups", ok, required: !opt_out, detail, fix });
    // Not required for native isolation; proves `--runtime runsc` works.
    checks.push(runsc_check(&host, !limits_ok || opt_out));
    let mut sandbox = sandbox_check(&host, !limits_ok || opt_out);
    if sandbox.ok && !limits_ok {
        sandbox.detail.push_str(" with --no-cgroup (no cgroup for limits here)");
    }
    checks.push(sandbox);
    checks.iter_mut().for_each(split_fix);
    let isolation_ok = checks.iter().filter(|c| c.name != "cgroups").all(|c| c.ok || !c.required);
    let native_ok = isolation_ok && limits_ok;
    Report { native_ok, isolation_ok, limits_ok, checks }
}

pub fn doctor(args: DoctorArgs) -> i32 {
    let report = collect();
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        for c in &report.checks {
            let tag = if c.ok {
                "OK  "
            } else if c.required {
                "FAIL"
            } else {
                "WARN"
            };
            crate::outln!("{tag} {:<26} {}", c.name, c.detail);
            if let Some(f) = &c.fix {
                crate::outln!("     fix: {f}");
            }
        }
        crate::outln!(
            "{}",
            match (report.isolation_ok, report.limits_ok) {
                (true, true) => "native isolation: available",
                (true, false) => {
                    "native isolation: available with --no-cgroup; resource limits: NOT available \
                     (see the cgroups line; until it is fixed, husk run needs --no-cgroup)"
                }
                (false, _) => "native isolation: NOT available (see FAIL lines)",
            }
        );
    }
    if report.native_ok { 0 } else { 1 }
}
