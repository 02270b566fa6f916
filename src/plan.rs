//! `Plan::build`: the one place where a `Spec` is validated against the
//! host and turned into pre-built, absolute data (CStrings, id maps, mount
//! ops, limits) so nothing in the child can discover a missing option.

use crate::host::HostFacts;
use crate::isolation::{RlimitReport, RlimitValue};
use crate::rootfs::{self, MountPlan, RootSource, plan::RootInputs};
use crate::spec::{NetworkMode, RlimitSpec, Spec};
use crate::sys::fd::CStrArray;
use crate::userns::{IdMap, IdMapError};
use std::ffi::CString;
use std::os::fd::AsFd;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("no command given: put it after `--`, e.g. husk run -- sh -c 'echo hi'")]
    NoCommand,
    #[error("{what} contains a NUL byte: {value:?}")]
    Nul { what: &'static str, value: String },
    #[error("invalid --env {value:?}: the name must be non-empty and contain no '='")]
    BadEnv { value: String },
    #[error(
        "{what} {name} is {len} bytes: execve refuses any one argument or environment string over \
         {MAX_ARG_STRLEN} bytes (E2BIG); pass big data in a file (--bind) or on stdin"
    )]
    TooLong { what: &'static str, name: String, len: usize },
    #[error("invalid --user {value:?}: {why}")]
    BadUser { value: String, why: &'static str },
    #[error("invalid --user {value:?}: {source}")]
    UnknownUser { value: String, source: crate::users::UserError },
    #[error("unknown capability {value:?} in --cap-add (e.g. CAP_NET_BIND_SERVICE; see capabilities(7))")]
    BadCap { value: String },
    #[error("invalid --rlimit {value:?}: {why}")]
    BadRlimit { value: String, why: String },
    #[error("invalid --rlimit {value:?}: the hard limit is above husk's own ({caller}), which a sandbox cannot exceed")]
    RlimitAboveCaller { value: String, caller: String },
    #[error("invalid --hostname: {0}")]
    BadHostname(#[from] crate::rootfs::etc::BadHostname),
    #[error(transparent)]
    IdMap(#[from] IdMapError),
    #[error(transparent)]
    Mounts(#[from] rootfs::MountPlanError),
    #[error(transparent)]
    Seccomp(#[from] crate::seccomp::SeccompError),
    #[error(transparent)]
    Cgroup(#[from] crate::cgroup::CgroupError),
}

impl PlanError {
    /// The kernel's errno, when reading the host (a bind source, a profile
    /// file, the cgroup tree) failed.
    pub fn errno(&self) -> Option<nix::errno::Errno> {
        match self {
            PlanError::Cgroup(e) => e.errno(),
            PlanError::Mounts(rootfs::MountPlanError::BindSource { source, .. })
            | PlanError::Seccomp(crate::seccomp::SeccompError::Read { error: source, .. }) => {
                crate::step::io_errno(source)
            }
            _ => None,
        }
    }

    /// The failure as the verdict's `error` (step `plan`).
    pub fn report(&self) -> crate::outcome::ErrorReport {
        crate::outcome::ErrorReport::new(crate::step::Phase::Plan, self.to_string())
            .with_errno(self.errno())
            .with_hint(self.hint())
    }

    /// The remedy, for the verdict's `error.hint`.
    pub fn hint(&self) -> Option<String> {
        match self {
            PlanError::RlimitAboveCaller { caller, .. } => Some(format!(
                "raise husk's own hard limit first (`ulimit -H -n N` in a root shell, or `prlimit`), or ask for at most {caller}"
            )),
            _ => None,
        }
    }
}

/// Linux's bound on one argv or envp string, NUL included (MAX_ARG_STRLEN,
/// 32 pages).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// An execve that failed with E2BIG: a setup failure (125), not the
/// command's.
pub const E2BIG_MESSAGE: &str = "setup failed at exec: E2BIG: the command's arguments and environment \
     together are more than execve takes (a quarter of the stack limit); pass big data in a file or on stdin";

/// One resource limit, ready for setrlimit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: libc::__rlimit_resource_t,
    pub soft: u64,
    pub hard: u64,
    /// `--rlimit` gave it; else husk's default.
    pub from_flag: bool,
    /// The default's hard limit when husk's caller has a lower one: the
    /// default was lowered to the caller's (a user namespace cannot raise it).
    pub clamped_from: Option<u64>,
}

impl Rlimit {
    /// The verdict's `isolation.rlimits` entry.
    pub fn report(&self) -> RlimitReport {
        RlimitReport {
            clamped_from: self.clamped_from.map(RlimitValue::of),
            hard: RlimitValue::of(self.hard),
            name: rlimit_name(self.resource).into(),
            soft: RlimitValue::of(self.soft),
            source: if self.from_flag { "flag" } else { "default" }.into(),
            why: self.clamped_from.map(|_| CLAMPED_WHY.into()),
        }
    }
}

const CLAMPED_WHY: &str = "husk's caller has a lower hard limit, which a sandbox cannot exceed";

/// How the command itself is started (pid 2 in the sandbox).
#[derive(Debug)]
pub struct ProcessPlan {
    pub argv: CStrArray,
    pub envp: CStrArray,
    /// Absolute paths to try with execve, in order (PATH search done here,
    /// against the sandbox's PATH, so the child only loops over execve).
    pub candidates: Vec<CString>,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// Capabilities kept (bit N = capability N); 0 unless --cap-add.
    pub caps_keep: u64,
    pub rlimits: Vec<Rlimit>,
    /// `-t`: the command makes a pty in the sandbox, hands its master to
    /// husk and takes the slave as its controlling terminal (src/tty/).
    pub tty: bool,
    /// With `tty`: the caller's window size when the plan was made, set on
    /// the slave before the command runs. husk's relay sets the master's
    /// size too, but only once it has the master, which can be after the
    /// command asked (a `stty size` that saw 0 rows).
    pub winsize: Option<crate::sys::tty::Winsize>,
}

/// The namespaces a run creates, split by who creates them; their names
/// (the verdict's) are derived from both.
#[derive(Clone, Debug)]
pub struct Namespaces {
    /// The CLONE_NEW* bits clone3 gets.
    pub clone_flags: libc::c_int,
    /// The ones the init unshares itself, later: the cgroup namespace, once
    /// the init is in every cgroup of the run (so the sandbox sees its own
    /// cgroup as "/").
    pub by_init: libc::c_int,
}

impl Namespaces {
    /// The verdict's names, in its order.
    const NAMES: [(libc::c_int, &'static str); 7] = [
        (libc::CLONE_NEWUSER, "user"),
        (libc::CLONE_NEWPID, "pid"),
        (libc::CLONE_NEWNS, "mount"),
        (libc::CLONE_NEWIPC, "ipc"),
        (libc::CLONE_NEWUTS, "uts"),
        (libc::CLONE_NEWCGROUP, "cgroup"),
        (libc::CLONE_NEWNET, "net"),
    ];

    fn names_of(flags: libc::c_int) -> Vec<&'static str> {
        Self::NAMES.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| *n).collect()
    }

    /// Every namespace the sandbox gets.
    pub fn names(&self) -> Vec<&'static str> {
        Self::names_of(self.clone_flags | self.by_init)
    }

    /// Only those clone3 is asked for.
    pub fn clone_names(&self) -> Vec<&'static str> {
        Self::names_of(self.clone_flags)
    }

    /// Whether the init makes namespace `flag` itself.
    pub fn made_by_init(&self, flag: libc::c_int) -> bool {
        self.by_init & flag != 0
    }

    /// Whether clone3 makes namespace `flag`.
    pub fn made_by_clone(&self, flag: libc::c_int) -> bool {
        self.clone_flags & flag != 0
    }
}

#[derive(Debug)]
pub struct Plan {
    pub id: String,
    pub spec: Spec,
    pub ids: IdMap,
    pub namespaces: Namespaces,
    pub hostname: CString,
    pub network: NetworkMode,
    pub mounts: MountPlan,
    pub process: ProcessPlan,
    pub last_cap: u32,
    pub timeout: Option<Duration>,
    pub kill_grace: Option<Duration>,
    /// husk's own argv and environment areas, scrubbed by the init.
    pub arg_areas: crate::sys::process::ArgAreas,
    /// The compiled filter, loaded last before execve; `None` only with
    /// `--seccomp unconfined`.
    pub seccomp: Option<crate::seccomp::Program>,
    /// Resource limits and where the run's cgroup goes.
    pub cgroup: crate::cgroup::CgroupPlan,
    /// Whether the init starts the command (`run`) or waits for execs.
    pub role: InitRole,
}

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Default rlimits: no core dumps (they could land anywhere and leak
/// memory contents), a conventional fd limit.
const DEFAULT_RLIMITS: &[(&str, u64, u64)] = &[("core", 0, 0), ("nofile", 1024, 1024)];

pub fn cstr(what: &'static str, s: &str) -> Result<CString, PlanError> {
    CString::new(s).map_err(|_| PlanError::Nul { what, value: s.to_string() })
}

/// Parses `UID[:GID]` (numeric). Names are resolved by the caller against
/// the root's /etc/passwd before this.
pub fn parse_user(value: &str) -> Result<(u32, Option<u32>), PlanError> {
    let bad = |why: &'static str| PlanError::BadUser { value: value.to_string(), why };
    let (u, g) = match value.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (value, None),
    };
    let uid = u.parse::<u32>().map_err(|_| bad("expected UID[:GID] with numeric ids, or a user name"))?;
    let gid = g.map(|g| g.parse::<u32>().map_err(|_| bad("GID must be numeric"))).transpose()?;
    Ok((uid, gid))
}

/// Looks a user name up in passwd-format text: (uid, gid, home).
pub fn lookup_passwd(text: &str, name: &str) -> Option<(u32, u32, String)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?, f[5].to_string())))?
    })
}

/// Home directory of `uid` in passwd-format text.
pub fn home_of(text: &str, uid: u32) -> Option<String> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[5].to_string())
    })
}

pub fn parse_cap(name: &str) -> Result<u8, PlanError> {
    crate::capability::parse(name).ok_or_else(|| PlanError::BadCap { value: name.to_string() })
}

const RLIMIT_NAMES: &[(&str, libc::__rlimit_resource_t)] = &[
    ("as", libc::RLIMIT_AS),
    ("core", libc::RLIMIT_CORE),
    ("cpu", libc::RLIMIT_CPU),
    ("data", libc::RLIMIT_DATA),
    ("fsize", libc::RLIMIT_FSIZE),
    ("locks", libc::RLIMIT_LOCKS),
    ("memlock", libc::RLIMIT_MEMLOCK),
    ("msgqueue", libc::RLIMIT_MSGQUEUE),
    ("nice", libc::RLIMIT_NICE),
    ("nofile", libc::RLIMIT_NOFILE),
    ("nproc", libc::RLIMIT_NPROC),
    ("rss", libc::RLIMIT_RSS),
    ("rtprio", libc::RLIMIT_RTPRIO),
    ("rttime", libc::RLIMIT_RTTIME),
    ("sigpending", libc::RLIMIT_SIGPENDING),
    ("stack", libc::RLIMIT_STACK),
];

pub fn rlimit_resource(name: &str) -> Option<libc::__rlimit_resource_t> {
    let name = name.to_ascii_lowercase();
    let name = name.trim_start_matches("rlimit_");
    RLIMIT_NAMES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

fn rlimit_name(resource: libc::__rlimit_resource_t) -> &'static str {
    RLIMIT_NAMES.iter().find(|(_, r)| *r == resource).map_or("?", |(n, _)| n)
}

/// Parses `NAME=SOFT[:HARD]` ("unlimited" allowed; HARD defaults to SOFT).
pub fn parse_rlimit(value: &str) -> Result<RlimitSpec, PlanError> {
    let bad = |why: &str| PlanError::BadRlimit { value: value.to_string(), why: why.to_string() };
    let (name, rest) = value.split_once('=').ok_or_else(|| bad("expected NAME=SOFT[:HARD], e.g. nofile=4096"))?;
    rlimit_resource(name).ok_or_else(|| bad("unknown name (use nofile, nproc, core, fsize, stack, cpu, as, ...)"))?;
    let num = |s: &str| -> Result<Option<u64>, PlanError> {
        match s.trim() {
            "unlimited" | "-1" => Ok(None),
            n => crate::units::parse_size(n).map(Some).map_err(|_| bad("limits are numbers or 'unlimited'")),
        }
    };
    let (soft, hard) = match rest.split_once(':') {
        Some((s, h)) => (num(s)?, num(h)?),
        None => (num(rest)?, num(rest)?),
    };
    if let (Some(s), Some(h)) = (soft, hard)
        && s > h
    {
        return Err(bad("soft limit is above the hard limit"));
    }
    Ok(RlimitSpec { name: name.to_string(), soft, hard })
}

/// Checks a requested limit against what the sandbox can possibly set: the
/// sandbox runs in a user namespace, so it cannot raise a hard limit above
/// husk's own (that needs CAP_SYS_RESOURCE in the host's namespace).
fn check_rlimit(r: &Rlimit, name: &str) -> Result<(), PlanError> {
    let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    if crate::sys::process::get_rlimit(r.resource, &mut cur).is_ok() && r.hard > cur.rlim_max {
        let show = |v: u64| if v == libc::RLIM_INFINITY { "unlimited".to_string() } else { v.to_string() };
        return Err(PlanError::RlimitAboveCaller {
            value: format!("{name}={}:{}", show(r.soft), show(r.hard)),
            caller: show(cur.rlim_max),
        });
    }
    Ok(())
}

/// husk's own hard limit for `resource` (the most a sandbox can have).
fn caller_hard(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    crate::sys::process::get_rlimit(resource, &mut cur).ok().map(|_| cur.rlim_max)
}

/// A default fitted under the caller's hard limit: `prlimit --nofile=512
/// husk run` must run (with 512), not fail at set_rlimits with EPERM.
fn default_rlimit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64, caller: Option<u64>) -> Rlimit {
    match caller {
        Some(max) if hard > max => {
            Rlimit { resource, soft: soft.min(max), hard: max, from_flag: false, clamped_from: Some(hard) }
        }
        _ => Rlimit { resource, soft, hard, from_flag: false, clamped_from: None },
    }
}

fn rlimits(specs: &[RlimitSpec]) -> Result<Vec<Rlimit>, PlanError> {
    let mut out: Vec<Rlimit> = DEFAULT_RLIMITS
        .iter()
        .filter_map(|(n, s, h)| {
            let resource = rlimit_resource(n)?;
            Some(default_rlimit(resource, *s, *h, caller_hard(resource)))
        })
        .collect();
    for s in specs {
        let Some(resource) = rlimit_resource(&s.name) else {
            continue;
        };
        let r = Rlimit {
            resource,
            soft: s.soft.unwrap_or(libc::RLIM_INFINITY),
            hard: s.hard.unwrap_or(libc::RLIM_INFINITY),
            from_flag: true,
            clamped_from: None,
        };
        check_rlimit(&r, &s.name)?;
        match out.iter_mut().find(|x| x.resource == resource) {
            Some(x) => *x = r,
            None => out.push(r),
        }
    }
    Ok(out)
}

/// Image-derived defaults for a run (filled by the image store; empty in
/// host and rootfs modes). Kept with a long-lived sandbox for its execs.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ImageDefaults {
    pub env: Vec<(String, String)>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub workdir: Option<String>,
    pub user: Option<String>,
}

/// The root as the plan builder sees it (resolved by the caller: host,
/// rootfs dir, or the image store's layers).
pub struct RootInput<'a> {
    pub source: RootSource<'a>,
    pub image: ImageDefaults,
    /// The root's /etc/passwd text, for user names and HOME.
    pub passwd: Option<String>,
    /// The root's /etc/group text, for group names and memberships.
    pub group: Option<String>,
}

/// What the sandbox's init does once the sandbox is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitRole {
    /// `husk run`: fork the command, reap, report its status, exit.
    Run,
    /// `husk create`: no command; confine itself and wait, reaping orphans,
    /// while `husk exec` starts commands in the sandbox.
    Hold,
}

/// The user a process runs as: `--user`, else the image's, else root,
/// resolved against the root's own passwd/group.
pub fn identity(
    spec: &Spec,
    image: &ImageDefaults,
    passwd: Option<&str>,
    group: Option<&str>,
) -> Result<crate::users::Identity, PlanError> {
    match spec.user.as_ref().or(image.user.as_ref()) {
        None => Ok(crate::users::Identity { uid: 0, gid: 0, home: None, groups: Vec::new() }),
        Some(u) => crate::users::resolve(u, passwd, group)
            .map_err(|source| PlanError::UnknownUser { value: u.clone(), source }),
    }
}

/// The workdir (absolute): `--workdir`, else the image's, else /workspace.
pub fn workdir(spec: &Spec, image: &ImageDefaults) -> String {
    let w = spec.workdir.clone().or(image.workdir.clone()).unwrap_or_else(|| crate::spec::DEFAULT_WORKDIR.into());
    if w.starts_with('/') { w } else { format!("/{w}") }
}

impl ProcessPlan {
    /// One process in a sandbox (`run`'s command, each `exec`): argv, the
    /// environment (defaults < image < --env), the PATH candidates, the
    /// identity within `ids`, capabilities and rlimits. An empty `argv`
    /// (the init of `husk create`) has no candidates.
    pub fn build(
        spec: &Spec,
        image: &ImageDefaults,
        ident: crate::users::Identity,
        ids: &IdMap,
        argv: &[String],
    ) -> Result<ProcessPlan, PlanError> {
        let (uid, gid, home) = (ident.uid, ident.gid, ident.home);
        // Groups the id map cannot represent are dropped (setgroups would
        // fail); rootless runs cannot call setgroups at all.
        let groups: Vec<u32> = match &ids.mode {
            crate::userns::IdMode::Privileged { gid_range, .. } => {
                ident.groups.into_iter().filter(|g| *g < gid_range.count).collect()
            }
            crate::userns::IdMode::Rootless { .. } => Vec::new(),
        };
        let home = home.unwrap_or_else(|| if uid == 0 { "/root".into() } else { "/".into() });

        // Environment: defaults < image < --env.
        let mut env: Vec<(String, String)> =
            vec![("PATH".into(), DEFAULT_PATH.into()), ("HOME".into(), home), ("LANG".into(), "C.UTF-8".into())];
        if spec.tty
            || nix::unistd::isatty(std::io::stdout()).unwrap_or(false)
            || nix::unistd::isatty(std::io::stdin()).unwrap_or(false)
        {
            env.push(("TERM".into(), std::env::var("TERM").unwrap_or_else(|_| "xterm".into())));
        }
        let mut set = |k: &str, v: &str| match env.iter_mut().find(|(ek, _)| ek == k) {
            Some(e) => e.1 = v.to_string(),
            None => env.push((k.to_string(), v.to_string())),
        };
        // The egress proxy's variables come before the image's and --env,
        // which may override them (an override only loses the proxy: the
        // namespace has no other way out).
        let proxy_env = if spec.egress.is_some() { crate::net::EgressSpec::env() } else { Vec::new() };
        for (k, v) in proxy_env.iter().chain(&image.env).chain(&spec.env) {
            if k.is_empty() || k.contains('=') {
                return Err(PlanError::BadEnv { value: format!("{k}={v}") });
            }
            set(k, v);
        }
        // The kernel's per-string bound, checked here so the failure is
        // husk's (125, naming the variable) and not the command's "not
        // executable" (126) at execve.
        if let Some((k, v)) = env.iter().find(|(k, v)| k.len() + v.len() + 2 > MAX_ARG_STRLEN) {
            return Err(PlanError::TooLong {
                what: "environment variable",
                name: k.clone(),
                len: k.len() + v.len() + 1,
            });
        }
        if let Some((i, a)) = argv.iter().enumerate().find(|(_, a)| a.len() + 1 > MAX_ARG_STRLEN) {
            return Err(PlanError::TooLong { what: "argument", name: format!("#{i}"), len: a.len() });
        }
        let path_var = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap_or_default();
        let envp = env.iter().map(|(k, v)| cstr("--env", &format!("{k}={v}"))).collect::<Result<Vec<_>, _>>()?;

        let candidates: Vec<CString> = match argv.first() {
            None => Vec::new(),
            Some(cmd) if cmd.contains('/') => vec![cstr("command", cmd)?],
            Some(cmd) => path_var
                .split(':')
                .filter(|d| d.starts_with('/'))
                .map(|d| cstr("PATH", &format!("{}/{}", d.trim_end_matches('/'), cmd)))
                .collect::<Result<_, _>>()?,
        };
        let argv_c = argv.iter().map(|a| cstr("command", a)).collect::<Result<Vec<_>, _>>()?;

        let mut caps_keep = 0u64;
        for c in &spec.cap_add {
            caps_keep |= 1u64 << parse_cap(c)?;
        }
        Ok(ProcessPlan {
            argv: CStrArray::new(argv_c),
            envp: CStrArray::new(envp),
            candidates,
            uid,
            gid,
            groups,
            caps_keep,
            rlimits: rlimits(&spec.rlimits)?,
            tty: spec.tty,
            winsize: if spec.tty {
                crate::tty::terminal::size_of_any([std::io::stdin().as_fd(), std::io::stdout().as_fd()])
            } else {
                None
            },
        })
    }
}

/// What a live sandbox's execs build on: kept from its `Plan` in its
/// record (`sandbox::state::Record`).
pub struct HeldSandbox<'a> {
    pub id: &'a str,
    pub spec: &'a Spec,
    pub image: &'a ImageDefaults,
    pub passwd: Option<&'a str>,
    pub group: Option<&'a str>,
    pub ids: &'a IdMap,
    pub last_cap: u32,
    /// The sandbox's workdir, the exec's default.
    pub workdir: &'a str,
}

/// One exec in a live sandbox, validated once, before the supervisor is
/// asked for anything: whichever backend runs it takes it as it is.
pub struct ExecPlan {
    /// The command as given (runsc's reaper takes it as its own argv).
    pub argv: Vec<String>,
    pub process: ProcessPlan,
    pub workdir: String,
    pub workdir_c: CString,
    pub timeout: Option<Duration>,
    pub kill_grace: Option<Duration>,
    pub capture: Option<u64>,
    pub deny_setgroups: bool,
    pub last_cap: u32,
    /// The sandbox's compiled filter (its `seccomp.bpf`), which every exec
    /// loads; set by the caller, which keeps the sandbox's files.
    pub seccomp: Option<crate::seccomp::Program>,
    /// Monotonic ns when husk started (for `duration_ms` and `phases_ms`).
    pub t_start: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecPlanError {
    /// The request itself is wrong: no command, a user the sandbox does not
    /// map, a workdir that is not absolute.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
}

impl ExecPlan {
    /// The exec's process under the same rules as `run` (env defaults <
    /// image < create's --env < exec's --env; PATH search inside the
    /// sandbox), its identity checked against the sandbox's id map, and its
    /// workdir.
    pub fn build(sb: &HeldSandbox<'_>, x: &crate::spec::ExecSpec, t_start: u64) -> Result<ExecPlan, ExecPlanError> {
        let usage = ExecPlanError::Usage;
        if x.argv.is_empty() || x.argv[0].is_empty() {
            return Err(usage("no command given: put it after `--`, e.g. husk exec ID -- sh -c 'echo hi'".into()));
        }
        let mut spec = sb.spec.clone();
        spec.env.extend(x.env.iter().cloned());
        spec.tty = x.tty;
        if x.user.is_some() {
            spec.user = x.user.clone();
        }
        let ident = identity(&spec, sb.image, sb.passwd, sb.group)?;
        let ids = sb.ids;
        let mapped = match &ids.mode {
            crate::userns::IdMode::Privileged { uid_range, gid_range } => {
                ident.uid < uid_range.count && ident.gid < gid_range.count
            }
            crate::userns::IdMode::Rootless { .. } => ident.uid == ids.init_uid && ident.gid == ids.init_gid,
        };
        if !mapped {
            return Err(usage(format!(
                "--user {}:{} is not mapped in sandbox {} (uid_map {:?}); a rootless sandbox maps only the user it was created with (husk create --user)",
                ident.uid,
                ident.gid,
                sb.id,
                ids.uid_map.trim()
            )));
        }
        let process = ProcessPlan::build(&spec, sb.image, ident, ids, &x.argv)?;
        let workdir = x.workdir.clone().unwrap_or_else(|| sb.workdir.to_string());
        if !workdir.starts_with('/') {
            return Err(usage(format!("--workdir {workdir:?}: give an absolute path inside the sandbox")));
        }
        let workdir_c = cstr("--workdir", &workdir).map_err(|e| usage(e.to_string()))?;
        Ok(ExecPlan {
            argv: x.argv.clone(),
            process,
            workdir,
            workdir_c,
            timeout: x.timeout,
            kill_grace: x.kill_grace,
            capture: x.capture,
            deny_setgroups: ids.deny_setgroups,
            last_cap: sb.last_cap,
            seccomp: None,
            t_start,
        })
    }
}

impl Plan {
    pub fn build(spec: Spec, host: &HostFacts, root: RootInput<'_>) -> Result<Plan, PlanError> {
        Plan::build_as(spec, host, root, InitRole::Run)
    }

    pub fn build_as(spec: Spec, host: &HostFacts, root: RootInput<'_>, role: InitRole) -> Result<Plan, PlanError> {
        crate::rootfs::etc::validate_hostname(&spec.hostname)?;

        // Command: explicit, else the image's Entrypoint + Cmd (husk runs
        // exactly what the caller typed: agents pass full command lines).
        // A held sandbox has none: `husk exec` brings each command.
        let mut argv = spec.command.clone();
        if role == InitRole::Hold {
            argv.clear();
        } else {
            if argv.is_empty() {
                argv = root.image.entrypoint.iter().chain(&root.image.cmd).cloned().collect();
            }
            if argv.is_empty() || argv[0].is_empty() {
                return Err(PlanError::NoCommand);
            }
        }

        // Identity: names and groups from the root's own passwd/group.
        let ident = identity(&spec, &root.image, root.passwd.as_deref(), root.group.as_deref())?;
        let (uid, gid) = (ident.uid, ident.gid);
        let ids = IdMap::plan(host, spec.id_range, uid, gid)?;
        let process = ProcessPlan::build(&spec, &root.image, ident, &ids, &argv)?;
        let seccomp = crate::seccomp::plan(&spec.seccomp, spec.seccomp_report, process.caps_keep, &host.store_root)?;

        // Mounts.
        let workdir = workdir(&spec, &root.image);
        let owner = (uid != ids.init_uid || gid != ids.init_gid).then_some((uid, gid));
        let devpts_gid = match &ids.mode {
            crate::userns::IdMode::Privileged { gid_range, .. } if gid_range.count > 5 => Some(5),
            _ => None,
        };
        let inputs = RootInputs {
            hostname: &spec.hostname,
            network: spec.network,
            workdir: &workdir,
            workdir_size: spec.workdir_size,
            tmp_size: spec.tmp_size,
            binds: &spec.binds,
            tmpfs: &spec.tmpfs,
            owner,
            devpts_gid,
            upper: match (&spec.upper_dir, spec.writable) {
                (Some(dir), _) => rootfs::plan::Upper::Keep(dir.clone()),
                (None, true) => rootfs::plan::Upper::Tmpfs(spec.tmp_size.max(256 << 20)),
                (None, false) => rootfs::plan::Upper::None,
            },
            fold_to: ids.fold_target(uid, gid),
        };
        let mounts = rootfs::build(root.source, &inputs)?;

        let net = if spec.network == NetworkMode::None { libc::CLONE_NEWNET } else { 0 };
        let clone_flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | net;
        let namespaces = Namespaces { clone_flags, by_init: libc::CLONE_NEWCGROUP };

        let who = crate::cgroup::Caller { uid: host.uid, privileged: host.privileged };
        let cgroup = if spec.limits.no_cgroup {
            crate::cgroup::CgroupPlan::Disabled
        } else {
            crate::cgroup::CgroupPlan::build(&spec.limits, host.cgroup(), who)?
        };

        Ok(Plan {
            id: crate::ids::new_id(),
            hostname: cstr("--hostname", &spec.hostname)?,
            network: spec.network,
            ids,
            namespaces,
            mounts,
            process,
            last_cap: host.last_cap,
            timeout: spec.timeout,
            kill_grace: spec.kill_grace,
            arg_areas: crate::sys::process::ArgAreas::of_self(),
            seccomp,
            cgroup,
            role,
            spec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_parse_numeric_and_by_name() {
        assert_eq!(parse_user("1000").unwrap(), (1000, None));
        assert_eq!(parse_user("1000:50").unwrap(), (1000, Some(50)));
        assert!(parse_user("bob").is_err());
        let pw = "root:x:0:0:root:/root:/bin/sh\nbob:x:1001:1002::/home/bob:/bin/sh\n";
        assert_eq!(lookup_passwd(pw, "bob"), Some((1001, 1002, "/home/bob".into())));
        assert_eq!(home_of(pw, 0), Some("/root".into()));
    }

    #[test]
    fn caps_parse_with_or_without_prefix() {
        assert_eq!(parse_cap("CAP_NET_BIND_SERVICE").unwrap(), 10);
        assert_eq!(parse_cap("net_bind_service").unwrap(), 10);
        assert!(parse_cap("CAP_MAKE_COFFEE").is_err());
    }

    #[test]
    fn rlimits_parse_and_override_defaults() {
        let r = parse_rlimit("nofile=512:1024").unwrap();
        assert_eq!((r.soft, r.hard), (Some(512), Some(1024)));
        assert_eq!(parse_rlimit("core=unlimited").unwrap().soft, None);
        assert!(parse_rlimit("nofile=10:5").is_err());
        assert!(parse_rlimit("bogus=1").is_err());
        let all = rlimits(&[r]).unwrap();
        let nofile = all.iter().find(|x| x.resource == libc::RLIMIT_NOFILE).unwrap();
        assert_eq!((nofile.soft, nofile.hard), (512, 1024));
        let huge = parse_rlimit("nofile=unlimited").unwrap();
        assert!(rlimits(&[huge]).is_err(), "an unlimited nofile hard limit cannot be granted");
        assert!(all.iter().any(|x| x.resource == libc::RLIMIT_CORE && x.hard == 0));
    }

    #[test]
    fn default_rlimit_above_the_callers_hard_limit_is_clamped_and_says_so() {
        let r = default_rlimit(libc::RLIMIT_NOFILE, 1024, 1024, Some(512));
        assert_eq!((r.soft, r.hard, r.clamped_from), (512, 512, Some(1024)));
        let v = serde_json::to_value(r.report()).unwrap();
        assert_eq!(
            (v["name"].as_str(), v["source"].as_str(), v["clamped_from"].as_u64()),
            (Some("nofile"), Some("default"), Some(1024))
        );
        let r = default_rlimit(libc::RLIMIT_NOFILE, 1024, 1024, Some(4096));
        assert_eq!((r.soft, r.hard, r.clamped_from), (1024, 1024, None));
        assert!(serde_json::to_value(r.report()).unwrap().get("clamped_from").is_none());
    }

    fn rootless_ids() -> IdMap {
        IdMap {
            mode: crate::userns::IdMode::Rootless { host_uid: 1000, host_gid: 1000 },
            uid_map: "0 1000 1\n".into(),
            gid_map: "0 1000 1\n".into(),
            deny_setgroups: true,
            init_uid: 0,
            init_gid: 0,
        }
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n";

    fn held<'a>(spec: &'a Spec, image: &'a ImageDefaults, ids: &'a IdMap) -> HeldSandbox<'a> {
        HeldSandbox {
            id: "0123456789ab",
            spec,
            image,
            passwd: Some(PASSWD),
            group: None,
            ids,
            last_cap: 40,
            workdir: "/workspace",
        }
    }

    fn exec_of(argv: &[&str]) -> crate::spec::ExecSpec {
        crate::spec::ExecSpec { argv: argv.iter().map(|a| a.to_string()).collect(), ..Default::default() }
    }

    fn usage_of(r: Result<ExecPlan, ExecPlanError>) -> String {
        match r {
            Err(ExecPlanError::Usage(m)) => m,
            Err(e) => panic!("expected a usage error, got {e}"),
            Ok(_) => panic!("expected a usage error, got a plan"),
        }
    }

    #[test]
    fn exec_without_a_command_is_refused_before_the_sandbox_is_asked() {
        let (spec, image, ids) = (Spec::new(Vec::new()), ImageDefaults::default(), rootless_ids());
        for argv in [&[][..], &[""][..]] {
            let m = usage_of(ExecPlan::build(&held(&spec, &image, &ids), &exec_of(argv), 0));
            assert!(m.contains("no command given"), "{m}");
        }
    }

    /// A rootless sandbox maps only the user it was created with: any other
    /// would run as the overflow id, so it is refused, by number or by name.
    #[test]
    fn exec_as_a_user_the_sandbox_does_not_map_is_refused() {
        let (spec, image, ids) = (Spec::new(Vec::new()), ImageDefaults::default(), rootless_ids());
        for user in ["1001", "bob", "0:1001"] {
            let x = crate::spec::ExecSpec { user: Some(user.into()), ..exec_of(&["id"]) };
            let m = usage_of(ExecPlan::build(&held(&spec, &image, &ids), &x, 0));
            assert!(m.contains("is not mapped in sandbox 0123456789ab"), "{user}: {m}");
        }
        let x = crate::spec::ExecSpec { user: Some("root".into()), ..exec_of(&["id"]) };
        let p = ExecPlan::build(&held(&spec, &image, &ids), &x, 0).unwrap();
        assert_eq!((p.process.uid, p.process.gid, p.deny_setgroups), (0, 0, true));
    }

    #[test]
    fn exec_workdir_is_absolute_and_defaults_to_the_sandboxes() {
        let (spec, image, ids) = (Spec::new(Vec::new()), ImageDefaults::default(), rootless_ids());
        let sb = held(&spec, &image, &ids);
        for bad in ["relative/dir", "/a\0b"] {
            let x = crate::spec::ExecSpec { workdir: Some(bad.into()), ..exec_of(&["pwd"]) };
            let m = usage_of(ExecPlan::build(&sb, &x, 0));
            assert!(m.contains("--workdir"), "{bad:?}: {m}");
        }
        let p = ExecPlan::build(&sb, &exec_of(&["pwd"]), 0).unwrap();
        assert_eq!((p.workdir.as_str(), p.workdir_c.to_str().unwrap()), ("/workspace", "/workspace"));
    }

    #[test]
    fn exec_env_comes_after_the_sandboxes_and_wins() {
        let mut spec = Spec::new(Vec::new());
        spec.env = vec![("A".into(), "1".into()), ("B".into(), "1".into())];
        let (image, ids) = (ImageDefaults::default(), rootless_ids());
        let x = crate::spec::ExecSpec { env: vec![("B".into(), "2".into())], ..exec_of(&["env"]) };
        let p = ExecPlan::build(&held(&spec, &image, &ids), &x, 0).unwrap();
        let env: Vec<String> = p.process.envp.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        assert!(env.contains(&"A=1".to_string()) && env.contains(&"B=2".to_string()), "{env:?}");
        assert!(!env.contains(&"B=1".to_string()), "{env:?}");
    }
}
