//! `husk doctor`: what this host supports, and the exact fix for what it
//! does not. The decisive check runs a real sandbox with husk's defaults.

use crate::backend::{Backend, RunIo, native::Native};
use crate::cli::DoctorArgs;
use crate::host::{HostFacts, no_cgroup_opt_out, sysctl_int};
use crate::outcome::Termination;
use crate::plan::{Plan, RootInput};
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

/// Runs `/bin/true`-like work in a real sandbox to prove the whole chain.
/// `no_cgroup`: the host cannot give limits (or the user opted out), so the
/// check proves the isolation that `--no-cgroup` runs get.
fn sandbox_check(host: &HostFacts, no_cgroup: bool) -> Check {
    let mut spec = Spec::new(vec!["sh".into(), "-c".into(), "exit 0".into()]);
    spec.output = OutputSpec::Capture { limit: 4096 };
    spec.limits.no_cgroup = no_cgroup;
    let root = match crate::image::root::root_input(&spec, host, &crate::paths::Paths::from_cli(None, None)) {
        Ok((r, _)) => r,
        Err(e) => return check("sandbox", true, false, e, None),
    };
    let plan = match Plan::build(spec, host, RootInput { ..root }) {
        Ok(p) => p,
        Err(e) => {
            return check("sandbox", true, false, format!("planning a sandbox: {e}"), None);
        }
    };
    let o = Native.run(plan, RunIo { capture: Some(4096), t_start: crate::spawn::now_ns() });
    match o.termination {
        Termination::Exited if o.status == Some(0) => {
            check("sandbox", true, true, format!("a default sandbox ran in {:.1} ms", o.duration_ms), None)
        }
        _ => {
            let e = o.error.as_ref();
            let detail = e.map(|e| e.message.clone()).unwrap_or_else(|| format!("{:?}", o.termination));
            let fix = e.and_then(|e| e.hint.clone());
            Check { name: "sandbox", ok: false, required: true, detail, fix }
        }
    }
}

pub fn collect() -> Report {
    let host = HostFacts::probe();
    let mut checks = Vec::new();
    checks.push(check("kernel", false, true, kernel_release(), None));

    let max_userns = sysctl_int("user/max_user_namespaces");
    checks.push(check(
        "user_namespaces",
        true,
        max_userns != Some(0),
        format!("user.max_user_namespaces = {}", max_userns.map(|v| v.to_string()).unwrap_or("unknown".into())),
        Some("sysctl -w user.max_user_namespaces=15000"),
    ));
    if let Some(v) = sysctl_int("kernel/apparmor_restrict_unprivileged_userns") {
        checks.push(check(
            "apparmor_userns",
            !host.privileged,
            v == 0 || host.privileged,
            format!("kernel.apparmor_restrict_unprivileged_userns = {v}"),
            Some("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or run husk as root)"),
        ));
    }
    if let Some(v) = sysctl_int("kernel/unprivileged_userns_clone") {
        checks.push(check(
            "unprivileged_userns_clone",
            !host.privileged,
            v == 1 || host.privileged,
            format!("kernel.unprivileged_userns_clone = {v}"),
            Some("sysctl -w kernel.unprivileged_userns_clone=1"),
        ));
    }
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    checks.push(check(
        "overlayfs",
        true,
        fs.contains("\toverlay\n"),
        "overlay in /proc/filesystems".into(),
        Some("modprobe overlay"),
    ));
    let seccomp = std::fs::read_to_string("/proc/self/status").unwrap_or_default().contains("Seccomp:");
    checks.push(check(
        "seccomp",
        true,
        seccomp,
        "Seccomp field in /proc/self/status".into(),
        Some("a kernel built with CONFIG_SECCOMP_FILTER"),
    ));
    let pidfd = crate::sys::process::pidfd_open(nix::unistd::getpid()).is_ok();
    checks.push(check("pidfd", true, pidfd, "pidfd_open(2)".into(), Some("Linux 5.3 or newer")));
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
    checks.push(match crate::backend::runsc::check(&host, None, !limits_ok || opt_out) {
        Ok(detail) => check("runsc", false, true, detail, None),
        Err((detail, fix)) => Check { name: "runsc", ok: false, required: false, detail, fix },
    });
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
