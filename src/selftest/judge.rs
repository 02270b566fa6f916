//! Judging one probe run: pure functions from (probe report, husk verdict,
//! what the host saw afterwards) to a verdict and a detail line.
//!
//! The rule throughout: `contained` only when the attempt failed for a
//! reason that means isolation held (a denial errno, a seccomp kill, an
//! absent path, a limit hit). A result that proves nothing either way is
//! `error`, never `contained`; one that shows the attempt got through is
//! `ESCAPED`.

pub use super::finding::{After, Context, Finding, ProbeRun, SandboxKernel, Verdict, not_applicable};
use super::finding::{contained, error, escaped};
use serde_json::Value;

/// How a probe's run is judged (one rule per kind of attempt).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judge {
    /// `try-syscall`: EPERM/EACCES, ENOSYS or a SIGSYS kill = contained; the
    /// call succeeding or failing with one of `passed` (errnos the kernel
    /// returns only after its permission check) = ESCAPED; one of `absent`
    /// (the attempt could not even be set up) = not applicable.
    Syscall {
        passed: &'static [&'static str],
        absent: &'static [&'static str],
    },
    Caps,
    NoNewPrivs,
    SetuidHostRoot,
    /// `ids` run through a setuid binary as uid 1000: euid must stay 1000.
    SuidExec,
    /// `write`: refused (EROFS, EACCES, EPERM) or absent (ENOENT).
    WriteDenied,
    /// `read` of a /proc entry husk masks: absent, denied, or empty.
    MaskedRead,
    /// `read` of a device node: absent or denied.
    DeviceRead,
    /// Any report that contains the host marker's secret token = ESCAPED.
    Marker,
    Fds,
    Cwd,
    ExeWrite,
    Tiocsti,
    PageZero,
    CgroupEscape,
    DevNodes,
    Mknod,
    NoSuid,
    Ifaces,
    /// `connect` / `connect-unix` to a host listener.
    Connect,
    Processes,
    Kill,
    Ipc,
    Hostname,
    ForkBomb,
    MemoryBomb,
    Fill,
    CpuHog,
    Daemon,
    /// An egress probe (egress.rs): a way out past an allowlist.
    Egress(super::egress::Expect),
}

fn errno(r: &Value) -> Option<&str> {
    r["errno"].as_str()
}

fn ok(r: &Value) -> bool {
    r["ok"] == true
}

/// EPERM/EACCES: refused by seccomp or by the kernel's permission check.
fn is_denial(e: &str) -> bool {
    matches!(e, "EPERM" | "EACCES")
}

fn mib(bytes: u64) -> String {
    crate::units::format_size(bytes)
}

pub fn judge(j: Judge, ctx: &Context, run: &ProbeRun, after: &After) -> Finding {
    if !after.created_on_host.is_empty() {
        return escaped(format!("created {} on the host", after.created_on_host.join(", ")));
    }
    if let (Judge::Egress(_), SandboxKernel::Gvisor) = (j, ctx.kernel) {
        return not_applicable(super::egress::GVISOR);
    }
    if run.termination == "setup_failed" {
        let msg = run.error.as_deref().unwrap_or("no message");
        return error(format!("the sandbox did not start: {msg}"));
    }
    match j {
        Judge::MemoryBomb => return memory_bomb(ctx, run),
        Judge::CpuHog => return cpu_hog(run),
        Judge::Daemon => return daemon(run, after),
        Judge::ForkBomb => return fork_bomb(ctx, run),
        _ => {}
    }
    let Some(r) = &run.report else {
        return error(format!(
            "the probe printed no report (termination {}, husk exit {})",
            run.termination, run.exit_code
        ));
    };
    if let Some(u) = r["usage_error"].as_str() {
        return error(format!("probe usage error: {u}"));
    }
    match j {
        Judge::Syscall { passed, absent } => syscall(ctx, r, passed, absent),
        Judge::Caps => caps(r),
        Judge::NoNewPrivs => match r["no_new_privs"].as_bool() {
            Some(true) => contained("no_new_privs is set: exec cannot gain privileges"),
            Some(false) => escaped("no_new_privs is not set"),
            None => error("the report has no no_new_privs field"),
        },
        Judge::SetuidHostRoot => setuid_host_root(ctx, r),
        Judge::SuidExec => suid_exec(r),
        Judge::WriteDenied => write_denied(r),
        Judge::MaskedRead => masked_read(r),
        Judge::DeviceRead => device_read(r),
        Judge::Marker => marker(ctx, r),
        Judge::Fds => fds(r),
        Judge::Cwd => cwd(r),
        Judge::ExeWrite => exe_write(r),
        Judge::Tiocsti => tiocsti(r, after),
        Judge::PageZero => page_zero(r),
        Judge::CgroupEscape => cgroup_escape(r),
        Judge::DevNodes => dev_nodes(r),
        Judge::Mknod => mknod(r),
        Judge::NoSuid => match r["nosuid"].as_bool() {
            Some(true) => contained(format!("{} is mounted nosuid", r["path"].as_str().unwrap_or("?"))),
            // gVisor's mount table carries no nosuid for gofer mounts even
            // though husk's bundle asks for it on every bind (runsc 2022
            // drops the option); the flag cannot be read here, so whether a
            // setuid binary gains anything is judged by the
            // setuid-binary-* probes, which exec one.
            Some(false) if ctx.kernel == SandboxKernel::Gvisor => not_applicable(format!(
                "gVisor's statfs shows no mount flags for {} (husk's bundle asks for nosuid); the setuid-binary-* probes test what a setuid binary gains",
                r["path"].as_str().unwrap_or("?")
            )),
            Some(false) => escaped(format!("{} is mounted without nosuid", r["path"].as_str().unwrap_or("?"))),
            None => error(format!("statfs failed: {}", errno(r).unwrap_or("?"))),
        },
        Judge::Ifaces => ifaces(r),
        Judge::Connect => connect(r),
        Judge::Processes => processes(ctx, r),
        Judge::Kill => kill(r, after),
        Judge::Ipc => ipc(ctx, r),
        Judge::Hostname => hostname(ctx, r, after),
        Judge::Fill => fill(r),
        Judge::Egress(e) => super::egress::judge(e, ctx, r, after),
        Judge::MemoryBomb | Judge::CpuHog | Judge::Daemon | Judge::ForkBomb => unreachable!("handled above"),
    }
}

fn syscall(ctx: &Context, r: &Value, passed: &[&str], absent: &[&str]) -> Finding {
    let name = r["name"].as_str().unwrap_or("?");
    if name == "i386-int80" && ctx.kernel == SandboxKernel::Gvisor && !ok(r) {
        // gVisor has no i386 table: `int 0x80` runs the 64-bit syscall of
        // the same number (20: writev, here with garbage arguments), which
        // the sandbox's filter sees as exactly that (checked by hand: with
        // writev's arguments set up it writes).
        if let Some(e @ ("EBADF" | "EFAULT" | "EINVAL")) = errno(r) {
            return contained(format!(
                "int 0x80 reaches no i386 table under gVisor: it ran the 64-bit syscall 20 (writev), which failed {e}"
            ));
        }
    }
    if ok(r) {
        return escaped(format!("{name} succeeded (returned {})", r["ret"]));
    }
    if let Some(sig) = r["killed_by_signal"].as_i64() {
        return match sig as i32 {
            libc::SIGSYS => contained(format!("{name}: killed by the seccomp filter (SIGSYS)")),
            libc::SIGSEGV if name == "i386-int80" => {
                not_applicable("the kernel has no i386 emulation (int 0x80 faults): nothing to contain")
            }
            s => error(format!("{name}: the attempt died of signal {s}: no verdict")),
        };
    }
    match errno(r) {
        Some(e) if is_denial(e) => contained(format!("{name} refused: {e}")),
        Some("ENOSYS") => contained(format!(
            "{name} unavailable in the sandbox: ENOSYS (the seccomp answer for unlisted syscalls, or not in this kernel)"
        )),
        Some(e) if passed.contains(&e) => {
            escaped(format!("{name} got past the permission check: {e} ({})", r["what"].as_str().unwrap_or("")))
        }
        Some(e) if absent.contains(&e) => {
            not_applicable(format!("{name} could not be attempted: {e} ({})", r["what"].as_str().unwrap_or("")))
        }
        Some(e) => error(format!("{name} failed with {e}, which proves neither denial nor success")),
        None => error(format!("{name}: the report has neither ok nor errno")),
    }
}

fn caps(r: &Value) -> Finding {
    if r["all_empty"] == true {
        return contained("every capability set (effective, permitted, inheritable, bounding, ambient) is empty");
    }
    let sets: Vec<String> = ["effective", "permitted", "inheritable", "bounding", "ambient"]
        .iter()
        .filter_map(|s| r[*s].as_str().filter(|v| !v.trim_start_matches('0').is_empty()).map(|v| format!("{s}={v}")))
        .collect();
    if sets.is_empty() { error("capget failed: no verdict") } else { escaped(format!("holds {}", sets.join(" "))) }
}

fn setuid_host_root(ctx: &Context, r: &Value) -> Finding {
    if ctx.sandbox_root_host_uid == Some(0) {
        return escaped("husk maps sandbox root onto host root (its verdict's user_mapping)");
    }
    let outside = r["outside_uid"].as_u64();
    if ctx.kernel == SandboxKernel::Gvisor {
        // The probe reads gVisor's own user namespace (all ids, 0 -> 0):
        // the host side of the mapping is the verdict's.
        return match ctx.sandbox_root_host_uid {
            Some(uid) => contained(format!(
                "sandbox root is host uid {uid} (husk's mapping); the uid_map inside (0 -> {}) is gVisor's own \
                 namespace",
                outside.map(|o| o.to_string()).unwrap_or("?".into())
            )),
            None => error("husk's verdict does not say which host uid sandbox root is"),
        };
    }
    if outside == Some(0) {
        return escaped("sandbox root is host root (uid_map maps 0 to 0)");
    }
    let attempts = r["attempts"].as_array().cloned().unwrap_or_default();
    let outside_tries: Vec<&Value> =
        attempts.iter().filter(|a| a["call"].as_str().is_some_and(|c| c.contains("outside"))).collect();
    if outside_tries.is_empty() {
        return error("the report has no setuid(outside) attempt");
    }
    if let Some(a) = outside_tries.iter().find(|a| a["ok"] == true) {
        return escaped(format!("{} succeeded", a["call"].as_str().unwrap_or("?")));
    }
    let errs: Vec<&str> = outside_tries.iter().filter_map(|a| a["errno"].as_str()).collect();
    contained(format!(
        "sandbox root is host uid {}; set[ug]id to it fails ({}): host ids are not mapped",
        outside.map(|o| o.to_string()).unwrap_or("?".into()),
        errs.join(", ")
    ))
}

fn suid_exec(r: &Value) -> Finding {
    match (r["uid"].as_u64(), r["euid"].as_u64(), r["egid"].as_u64()) {
        (Some(1000), Some(1000), Some(1000)) => {
            contained("ran as uid 1000: the setuid bit was ignored (nosuid mount, no_new_privs)")
        }
        (Some(u), Some(e), g) => escaped(format!(
            "exec of the setuid binary changed ids: uid {u} euid {e} egid {}",
            g.map(|g| g.to_string()).unwrap_or("?".into())
        )),
        _ => error("the report has no ids"),
    }
}

fn write_denied(r: &Value) -> Finding {
    let path = r["path"].as_str().unwrap_or("?");
    if ok(r) {
        let how = if r["existing"] == true { "opened for writing" } else { "created" };
        return escaped(format!("{path} {how}"));
    }
    match errno(r) {
        Some(e @ ("EROFS" | "EACCES" | "EPERM")) => contained(format!("{path}: {e}")),
        Some("ENOENT") => contained(format!("{path}: absent in the sandbox (ENOENT)")),
        Some(e) => error(format!("{path}: {e}, which proves neither denial nor success")),
        None => error(format!("{path}: the report has neither ok nor errno")),
    }
}

fn masked_read(r: &Value) -> Finding {
    let path = r["path"].as_str().unwrap_or("?");
    match (ok(r), r["bytes"].as_u64(), errno(r)) {
        (true, Some(0), _) => contained(format!("{path} is masked: reads as empty")),
        (true, Some(n), _) => escaped(format!("{path} is readable: {n} bytes")),
        (false, _, Some("ENOENT")) => contained(format!("{path} is absent in the sandbox")),
        (false, _, Some(e)) if is_denial(e) || e == "EISDIR" => contained(format!("{path}: {e}")),
        (_, _, e) => error(format!("{path}: {}: no verdict", e.unwrap_or("?"))),
    }
}

fn device_read(r: &Value) -> Finding {
    let path = r["path"].as_str().unwrap_or("?");
    match (ok(r), errno(r)) {
        (true, _) => escaped(format!("{path} was opened and read ({} bytes)", r["bytes"])),
        (false, Some("ENOENT")) => contained(format!("no {path} in the sandbox")),
        (false, Some(e)) if is_denial(e) => contained(format!("{path}: {e}")),
        (false, e) => error(format!("{path} exists but failed with {}: no verdict", e.unwrap_or("?"))),
    }
}

fn marker(ctx: &Context, r: &Value) -> Finding {
    if ctx.marker_token.is_empty() {
        return error("no marker token");
    }
    if r.to_string().contains(&ctx.marker_token) {
        return escaped("read the host marker file's secret content");
    }
    if ok(r) {
        return contained("read a file at that path, but not the host marker (a different file)");
    }
    let errs = collect_errnos(r);
    if errs.is_empty() {
        // A failure without a single errno is no attempt (say, an fd
        // escape with no fd to try): it proves nothing.
        return error("no attempt to reach the marker was reported: no verdict");
    }
    contained(format!("the host marker was not reachable ({})", errs.join(", ")))
}

/// Distinct errno strings anywhere in a report, in order of appearance.
fn collect_errnos(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(e) = m.get("errno").and_then(Value::as_str)
                    && !out.iter().any(|x| x == e)
                {
                    out.push(e.to_string());
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

fn fds(r: &Value) -> Finding {
    let Some(entries) = r["entries"].as_array() else { return error("the report lists no fds") };
    let extra: Vec<String> = entries
        .iter()
        .filter(|e| e["fd"].as_i64().is_some_and(|fd| fd > 2))
        .map(|e| format!("fd {} -> {}", e["fd"], e["target"].as_str().unwrap_or("?")))
        .collect();
    if extra.is_empty() {
        let targets: Vec<String> = entries.iter().map(|e| e["target"].as_str().unwrap_or("?").to_string()).collect();
        contained(format!("only stdin/stdout/stderr are open ({})", targets.join(", ")))
    } else {
        escaped(format!("leaked into the sandbox: {}", extra.join(", ")))
    }
}

fn cwd(r: &Value) -> Finding {
    let getcwd = r["getcwd"].as_str();
    let proc_cwd = r["proc_cwd"].as_str();
    match (ok(r), getcwd, proc_cwd) {
        (true, Some(g), Some(p)) if g == p && g.starts_with('/') => contained(format!("cwd {g} is inside the root")),
        (true, Some(g), p) => escaped(format!("getcwd {g} disagrees with /proc/self/cwd {}", p.unwrap_or("?"))),
        _ => escaped(format!(
            "the cwd is not reachable from the root (getcwd failed, /proc/self/cwd = {})",
            proc_cwd.unwrap_or("?")
        )),
    }
}

fn exe_write(r: &Value) -> Finding {
    let Some(opens) = r["opens"].as_array() else { return error("the report has no opens") };
    if let Some(o) = opens.iter().find(|o| o["ok"] == true) {
        return escaped(format!("{} opened {}", o["path"].as_str().unwrap_or("?"), o["mode"].as_str().unwrap_or("")));
    }
    let bad: Vec<&str> = opens
        .iter()
        .filter_map(|o| o["errno"].as_str())
        .filter(|e| !matches!(*e, "EACCES" | "EPERM" | "EROFS" | "ETXTBSY" | "ENOENT"))
        .collect();
    if !bad.is_empty() {
        return error(format!("unexpected errors {bad:?}: no verdict"));
    }
    contained(format!("no write open succeeded ({})", collect_errnos(r).join(", ")))
}

fn tiocsti(r: &Value, after: &After) -> Finding {
    let Some(queued) = after.tty_queued else {
        return not_applicable("no host terminal could be set up for the run");
    };
    if queued > 0 {
        return escaped(format!("{queued} byte(s) were pushed into the host terminal's input"));
    }
    if ok(r) {
        return escaped("TIOCSTI was accepted");
    }
    let fd0 = &r["fds"][0];
    match fd0["errno"].as_str() {
        Some(e @ ("EPERM" | "EACCES" | "EIO")) => {
            contained(format!("TIOCSTI on the inherited host terminal (fd 0) refused: {e}"))
        }
        Some(e) => error(format!("fd 0 was not the host terminal ({e}): no verdict")),
        None => error("the report has no fd 0 result"),
    }
}

fn page_zero(r: &Value) -> Finding {
    if ok(r) {
        return escaped("page 0 got mapped (NULL-pointer dereferences become exploitable)");
    }
    let Some(direct) = r["direct_map"]["errno"].as_str() else {
        return error("no MAP_FIXED attempt at 0 was reported: no verdict");
    };
    let pers = if r["personality"]["ok"] == true { "allowed" } else { "refused" };
    // With the personality allowed, only the exec'd check says whether page 0
    // is mapped in the new image; without its report there is no verdict.
    if r["personality"]["ok"] == true && r["exec_check"]["mapped"] != false {
        return error("personality(MMAP_PAGE_ZERO) was allowed but the exec'd check did not report: no verdict");
    }
    contained(format!(
        "page 0 stays unmapped: MAP_FIXED at 0 fails ({direct}); personality(MMAP_PAGE_ZERO) {pers}, \
         and the exec'd program has no page 0 (vm.mmap_min_addr={}, no CAP_SYS_RAWIO)",
        r["mmap_min_addr"].as_str().unwrap_or("?")
    ))
}

fn cgroup_escape(r: &Value) -> Finding {
    if ok(r) {
        let mut how = Vec::new();
        for a in r["release_agents"].as_array().into_iter().flatten().filter(|a| a["ok"] == true) {
            how.push(format!("{} writable", a["path"].as_str().unwrap_or("?")));
        }
        for m in r["mkdir"].as_array().into_iter().flatten().filter(|a| a["ok"] == true) {
            how.push(format!("created cgroup {}", m["path"].as_str().unwrap_or("?")));
        }
        for m in r["mounts"].as_array().into_iter().flatten().filter(|a| a["ok"] == true) {
            how.push(format!(
                "mounted {} {}",
                m["fstype"].as_str().unwrap_or("?"),
                m["options"].as_str().unwrap_or("")
            ));
        }
        return escaped(how.join("; "));
    }
    let mounts: Vec<&str> = r["mounts"].as_array().into_iter().flatten().filter_map(|m| m["errno"].as_str()).collect();
    if mounts.iter().any(|e| !is_denial(e)) {
        return error(format!("cgroup mounts failed with {mounts:?}: no verdict"));
    }
    let agents = r["release_agents"].as_array().map(Vec::len).unwrap_or(0);
    contained(format!(
        "{agents} release_agent visible, none writable; no cgroup created; unshare {}; cgroup v1/v2 mounts refused ({})",
        r["unshare"]["errno"].as_str().unwrap_or("allowed"),
        mounts.first().unwrap_or(&"?")
    ))
}

/// Character devices a sandbox's /dev may hold (major, minor).
const ALLOWED_CHAR_DEVS: &[(u64, u64, &str)] = &[
    (1, 3, "null"),
    (1, 5, "zero"),
    (1, 7, "full"),
    (1, 8, "random"),
    (1, 9, "urandom"),
    (5, 0, "tty"),
    (5, 2, "ptmx"),
];

fn mknod(r: &Value) -> Finding {
    let m = &r["mknod"];
    if m["ok"] != true {
        return match m["errno"].as_str() {
            Some(e) if is_denial(e) => contained(format!("mknod refused: {e}")),
            e => error(format!("mknod failed with {}: no verdict", e.unwrap_or("?"))),
        };
    }
    if ok(r) {
        return escaped(format!("made a node for the host's disk ({}) and read {} bytes", r["device"], r["bytes"]));
    }
    let failed = if r["open"]["ok"] == true { &r["read"] } else { &r["open"] };
    match failed["errno"].as_str() {
        Some(e @ ("ENXIO" | "ENODEV" | "EACCES" | "EPERM" | "EINVAL")) => contained(format!(
            "mknod is allowed, but the node for the host's disk ({}) leads to no device: {e}",
            r["device"].as_str().unwrap_or("?")
        )),
        e => error(format!("the node was made but failed with {}: no verdict", e.unwrap_or("?"))),
    }
}

fn dev_nodes(r: &Value) -> Finding {
    let Some(entries) = r["entries"].as_array() else { return error("the report lists no entries") };
    let mut bad = Vec::new();
    let mut seen = Vec::new();
    for e in entries {
        let name = e["name"].as_str().unwrap_or("?");
        match e["type"].as_str() {
            Some("block") => bad.push(format!("block device {name} ({}:{})", e["major"], e["minor"])),
            Some("char") => {
                let (ma, mi) = (e["major"].as_u64().unwrap_or(0), e["minor"].as_u64().unwrap_or(0));
                if ALLOWED_CHAR_DEVS.iter().any(|(a, b, _)| (*a, *b) == (ma, mi)) {
                    seen.push(name.to_string());
                } else {
                    bad.push(format!("char device {name} ({ma}:{mi})"));
                }
            }
            _ => {}
        }
    }
    if bad.is_empty() {
        contained(format!("only {} in /dev", seen.join(", ")))
    } else {
        escaped(format!("devices beyond the minimal set in /dev: {}", bad.join(", ")))
    }
}

fn ifaces(r: &Value) -> Finding {
    let names: Vec<&str> = r["names"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let other: Vec<&str> = names.iter().copied().filter(|n| *n != "lo").collect();
    if !other.is_empty() {
        return escaped(format!("interfaces other than lo: {}", other.join(", ")));
    }
    if names.is_empty() {
        return error("no interface listed, not even lo: no verdict");
    }
    contained("only lo")
}

fn connect(r: &Value) -> Finding {
    let target = r["addr"].as_str().or(r["name"].as_str()).unwrap_or("?");
    if ok(r) {
        return escaped(format!("connected to the host's {target}"));
    }
    match errno(r) {
        Some(
            e @ ("ECONNREFUSED" | "ENETUNREACH" | "EHOSTUNREACH" | "ETIMEDOUT" | "EADDRNOTAVAIL" | "ENOENT"
            | "EAFNOSUPPORT" | "EPERM" | "EACCES"),
        ) => contained(format!("{target}: {e} (the host's listener is in another network namespace)")),
        Some(e) => error(format!("{target}: {e}: no verdict")),
        None => error("the report has neither ok nor errno"),
    }
}

fn processes(ctx: &Context, r: &Value) -> Finding {
    let Some(procs) = r["processes"].as_array() else { return error("the report lists no processes") };
    if let Some(m) = &ctx.victim_marker
        && r.to_string().contains(m.as_str())
    {
        return escaped("the host victim process is visible");
    }
    let own = r["self"].as_i64();
    let foreign: Vec<String> = procs
        .iter()
        .filter(|p| {
            let pid = p["pid"].as_i64();
            let comm = p["comm"].as_str().unwrap_or("");
            // The sandbox's own: husk's init (pid 1) and the probe itself.
            !(pid == own || (pid == Some(1) && comm.starts_with("husk")))
        })
        .map(|p| format!("{} {}", p["pid"], p["comm"].as_str().unwrap_or("?")))
        .collect();
    if foreign.is_empty() {
        contained(format!("{} processes visible, all the sandbox's own (husk's init and the probe)", procs.len()))
    } else {
        escaped(format!("processes that are not the sandbox's: {}", foreign.join(", ")))
    }
}

fn kill(r: &Value, after: &After) -> Finding {
    if after.victim_alive == Some(false) {
        return escaped("the host victim process died");
    }
    if after.victim_alive.is_none() {
        return not_applicable("no victim process");
    }
    if ok(r) {
        return escaped(format!("kill({}) was accepted", r["pid"]));
    }
    match errno(r) {
        Some("ESRCH") => contained("no such pid in the sandbox (ESRCH); the host victim is alive"),
        Some(e) if is_denial(e) => contained(format!("kill refused: {e}; the host victim is alive")),
        e => error(format!("kill failed with {}: no verdict", e.unwrap_or("?"))),
    }
}

fn ipc(ctx: &Context, r: &Value) -> Finding {
    let mut seen = Vec::new();
    for kind in ["msg", "shm", "sem"] {
        for key in ["ids", "proc_ids"] {
            for id in r[kind][key].as_array().into_iter().flatten().filter_map(Value::as_i64) {
                seen.push((kind, id));
            }
        }
    }
    if let Some(host) = ctx.sysv_id
        && seen.iter().any(|(k, id)| *k == "msg" && *id == i64::from(host))
    {
        return escaped(format!("the host's SysV message queue {host} is visible"));
    }
    if !seen.is_empty() {
        return escaped(format!("SysV objects visible in a fresh IPC namespace: {seen:?}"));
    }
    if ctx.sysv_id.is_none() {
        return not_applicable("no host SysV queue could be created to look for");
    }
    contained("no SysV object visible (the host's message queue is in another IPC namespace)")
}

fn hostname(ctx: &Context, r: &Value, after: &After) -> Finding {
    if let Some(now) = &after.host_hostname
        && *now != ctx.host_hostname
    {
        return escaped(format!("the host's hostname changed to {now}"));
    }
    let inner = r["hostname"].as_str().unwrap_or("");
    if inner.is_empty() {
        return error("the report has no hostname");
    }
    if inner == ctx.host_hostname {
        return if inner == crate::spec::DEFAULT_HOSTNAME {
            not_applicable(format!("the host is itself called {inner}, husk's default: cannot tell apart"))
        } else {
            escaped(format!("sees the host's hostname {inner}"))
        };
    }
    contained(format!("hostname {inner:?}, not the host's {:?}", ctx.host_hostname))
}

fn fill(r: &Value) -> Finding {
    let (path, written, size) = (r["path"].as_str().unwrap_or("?"), r["written"].as_u64(), r["size"].as_u64());
    if ok(r) {
        return escaped(format!("wrote all {} to {path}", mib(size.unwrap_or(0))));
    }
    match errno(r) {
        Some(e @ ("ENOSPC" | "EFBIG" | "EDQUOT")) => {
            contained(format!("{path}: {e} after {} of {}", mib(written.unwrap_or(0)), mib(size.unwrap_or(0))))
        }
        e => error(format!("{path}: {}: no verdict", e.unwrap_or("?"))),
    }
}

fn fork_bomb(ctx: &Context, run: &ProbeRun) -> Finding {
    let Some(r) = &run.report else {
        // The limit can take the sandbox down with the bomb (gVisor's
        // sentry dies when it cannot make threads): still bounded.
        if run.verdict["resources"]["pids_limit_hit"] == true {
            return contained(format!(
                "the pids limit ({}) stopped it; the sandbox itself ended ({}, exit {}) before the probe could report",
                ctx.pids_limit.map(|l| l.to_string()).unwrap_or("?".into()),
                run.termination,
                run.exit_code
            ));
        }
        return error(format!("the fork bomb printed no report (termination {})", run.termination));
    };
    let forked = r["forked"].as_u64().unwrap_or(0);
    if ok(r) {
        return escaped(format!("forked all {forked} processes: nothing bounded it"));
    }
    let limit = ctx.pids_limit.map(|l| format!(" (pids limit {l})")).unwrap_or_default();
    match errno(r) {
        Some(e @ ("EAGAIN" | "ENOMEM")) => contained(format!("fork failed with {e} after {forked} processes{limit}")),
        e => error(format!("fork failed with {}: no verdict", e.unwrap_or("?"))),
    }
}

fn memory_bomb(ctx: &Context, run: &ProbeRun) -> Finding {
    let limit = ctx.memory_limit.map(mib).unwrap_or_else(|| "?".into());
    let oom_kills = run.verdict["resources"]["oom_kills"].as_u64().unwrap_or(0);
    if run.termination == "oom_killed" || (run.termination == "signaled" && oom_kills > 0) {
        return contained(format!("OOM-killed at the {limit} memory limit"));
    }
    match &run.report {
        Some(r) if ok(r) => escaped(format!("touched all {} (limit {limit})", mib(r["size"].as_u64().unwrap_or(0)))),
        Some(r) if errno(r) == Some("ENOMEM") => contained("the allocation was refused (ENOMEM)"),
        _ => error(format!("ended as {} without an OOM kill: no verdict", run.termination)),
    }
}

fn cpu_hog(run: &ProbeRun) -> Finding {
    let cpu = run.verdict["resources"]["cpu_user_usec"].as_u64().map(|u| format!(" after {} ms of CPU", u / 1000));
    let quota = match run.verdict["limits"]["cpus"].is_null() {
        true => "no CPU quota by default; bounded by --timeout".to_string(),
        false => "CPU quota applied".to_string(),
    };
    match run.termination.as_str() {
        "wall_timeout" => contained(format!("killed at the timeout{} ({quota})", cpu.unwrap_or_default())),
        t => error(format!("a 60 s spin under a 2 s timeout ended as {t}: no verdict")),
    }
}

fn daemon(run: &ProbeRun, after: &After) -> Finding {
    if !after.leftover_pids.is_empty() {
        return escaped(format!("the daemon outlived the sandbox on the host: pids {:?}", after.leftover_pids));
    }
    let started = run.report.as_ref().is_some_and(ok);
    if !started {
        return error(format!("the daemon did not start (termination {}): no verdict", run.termination));
    }
    contained(format!(
        "the sandbox ended ({}) and took the daemon with it: gone from the host's /proc",
        run.termination
    ))
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
