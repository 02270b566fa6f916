//! config.json -> a validated `OciPlan`. Everything the container's setup
//! needs is checked and pre-built here, in the caller, before any clone:
//! the child only executes. Unknown fields are ignored (as runc does);
//! fields husk understands but cannot honour, where that would weaken
//! isolation, are refused with the field's name.

use super::state::Hook;
use libc::sock_filter as SockFilter;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// config.json larger than this is refused (a Kubernetes pod's is ~20 KiB).
const MAX_CONFIG_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a valid runtime-spec config: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config.json {field}: {why}")]
    Invalid { field: String, why: String },
    #[error("config.json {field}: {why} (refused: husk does not run a container without it)")]
    Unsupported { field: String, why: String },
    #[error("config.json linux.seccomp: {0}")]
    Seccomp(String),
}

fn invalid(field: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { field: field.into(), why: why.into() }
}

fn unsupported(field: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError::Unsupported { field: field.into(), why: why.into() }
}

pub use super::spec::*;

// ---- The plan ----

/// One device rule of the devices cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRule {
    pub allow: bool,
    /// 'a', 'b' or 'c'.
    pub kind: char,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    pub access: String,
}

impl DeviceRule {
    /// The line devices.allow / devices.deny take ("c 1:3 rwm", "a").
    pub fn v1_line(&self) -> String {
        if self.is_all() {
            return "a".into();
        }
        let n = |v: Option<i64>| v.filter(|v| *v >= 0).map(|v| v.to_string()).unwrap_or_else(|| "*".into());
        format!("{} {}:{} {}", self.kind, n(self.major), n(self.minor), self.access)
    }

    pub fn is_all(&self) -> bool {
        self.kind == 'a' && self.major.is_none_or(|m| m < 0) && self.minor.is_none_or(|m| m < 0)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub limit: Option<i64>,
    pub reservation: Option<i64>,
    pub swap: Option<i64>,
    pub swappiness: Option<u64>,
    pub disable_oom_killer: Option<bool>,
}

/// linux.resources, validated.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub memory: Option<Memory>,
    pub pids_limit: Option<i64>,
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    pub blkio_weight: Option<u16>,
    pub hugepages: Vec<(String, u64)>,
    pub devices: Vec<DeviceRule>,
    pub unified: BTreeMap<String, String>,
}

/// The spec's five capability sets as bit masks (bit N = capability N).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapSets {
    pub bounding: u64,
    pub effective: u64,
    pub inheritable: u64,
    pub permitted: u64,
    pub ambient: u64,
}

/// The compiled seccomp program.
#[derive(Debug, Clone)]
pub struct Seccomp {
    pub filter: Vec<SockFilter>,
    pub flags: u32,
}

/// The container's process (init's, or an exec's), pre-built.
#[derive(Debug, Clone)]
pub struct OciProcess {
    pub args: Vec<CString>,
    pub env: Vec<CString>,
    /// The PATH the command is looked up in (from env).
    pub path_dirs: Vec<CString>,
    pub cwd: CString,
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    pub umask: Option<u32>,
    pub caps: CapSets,
    /// (resource, soft, hard)
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    pub no_new_privs: bool,
    pub oom_score_adj: Option<i32>,
    pub terminal: bool,
    pub seccomp: Option<Seccomp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    User,
    Pid,
    Net,
    Ipc,
    Uts,
    Mount,
    Cgroup,
    Time,
}

impl Ns {
    pub fn parse(s: &str) -> Option<Ns> {
        Some(match s {
            "user" => Ns::User,
            "pid" => Ns::Pid,
            "network" => Ns::Net,
            "ipc" => Ns::Ipc,
            "uts" => Ns::Uts,
            "mount" => Ns::Mount,
            "cgroup" => Ns::Cgroup,
            "time" => Ns::Time,
            _ => return None,
        })
    }

    pub fn flag(self) -> libc::c_int {
        match self {
            Ns::User => libc::CLONE_NEWUSER,
            Ns::Pid => libc::CLONE_NEWPID,
            Ns::Net => libc::CLONE_NEWNET,
            Ns::Ipc => libc::CLONE_NEWIPC,
            Ns::Uts => libc::CLONE_NEWUTS,
            Ns::Mount => libc::CLONE_NEWNS,
            Ns::Cgroup => libc::CLONE_NEWCGROUP,
            Ns::Time => 0x80, // CLONE_NEWTIME
        }
    }

    /// The name under /proc/PID/ns/.
    pub fn proc_name(self) -> &'static str {
        match self {
            Ns::User => "user",
            Ns::Pid => "pid",
            Ns::Net => "net",
            Ns::Ipc => "ipc",
            Ns::Uts => "uts",
            Ns::Mount => "mnt",
            Ns::Cgroup => "cgroup",
            Ns::Time => "time",
        }
    }

    /// The order namespaces are joined in: user first (it grants the
    /// rights to join the others), mount last (paths stop resolving).
    pub const JOIN_ORDER: [Ns; 8] = [Ns::User, Ns::Ipc, Ns::Uts, Ns::Net, Ns::Pid, Ns::Cgroup, Ns::Time, Ns::Mount];
}

/// One mount of the spec, classified.
#[derive(Debug, Clone)]
pub struct OciMount {
    /// Absolute inside the container.
    pub destination: String,
    pub kind: MountKind,
    pub source: PathBuf,
    /// MS_* flags for mount(2) (bind handled separately).
    pub flags: libc::c_ulong,
    /// Propagation flags to apply after mounting (MS_SHARED...).
    pub propagation: libc::c_ulong,
    /// Filesystem data ("mode=755,size=65536k").
    pub data: String,
    /// rro: read-only recursively (mount_setattr).
    pub recursive_ro: bool,
    /// The other recursive options (rnosuid, rnodev, rnoexec, rrelatime,
    /// rnosymfollow, rrw...): MOUNT_ATTR_* bits to set and to clear on the
    /// mount and every mount under it, through mount_setattr(AT_RECURSIVE).
    pub recursive_attrs: (u64, u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountKind {
    Bind {
        recursive: bool,
    },
    /// A filesystem type mounted fresh (tmpfs, proc, sysfs, mqueue, devpts...).
    Fs(String),
    /// `cgroup`/`cgroup2`: the container's own cgroup directories.
    Cgroup,
}

#[derive(Debug, Clone)]
pub struct OciDevice {
    pub path: String,
    pub kind: char,
    pub major: u64,
    pub minor: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, Default)]
pub struct Hooks {
    pub prestart: Vec<Hook>,
    pub create_runtime: Vec<Hook>,
    pub create_container: Vec<Hook>,
    pub start_container: Vec<Hook>,
    pub poststart: Vec<Hook>,
    pub poststop: Vec<Hook>,
}

/// Everything `create` needs, validated.
#[derive(Debug)]
pub struct OciPlan {
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub root_readonly: bool,
    pub process: OciProcess,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    /// Namespaces made new by clone.
    pub new_ns: Vec<Ns>,
    /// Namespaces joined by path, in JOIN_ORDER.
    pub join_ns: Vec<(Ns, PathBuf)>,
    /// "0 100000 65536\n" lines, when a new user namespace is made.
    pub uid_map: Option<String>,
    pub gid_map: Option<String>,
    pub mounts: Vec<OciMount>,
    pub devices: Vec<OciDevice>,
    pub cgroups_path: Option<String>,
    pub resources: Resources,
    pub sysctl: Vec<(String, String)>,
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
    /// MS_SLAVE | MS_REC by default (runc's).
    pub rootfs_propagation: libc::c_ulong,
    pub hooks: Hooks,
    pub annotations: BTreeMap<String, String>,
}

impl OciPlan {
    pub fn has_new(&self, ns: Ns) -> bool {
        self.new_ns.contains(&ns)
    }
    pub fn has(&self, ns: Ns) -> bool {
        self.has_new(ns) || self.join_ns.iter().any(|(n, _)| *n == ns)
    }
}

/// Reads and parses `<bundle>/config.json`.
pub fn load(bundle: &Path) -> Result<(RawSpec, serde_json::Value), ConfigError> {
    let path = bundle.join("config.json");
    let read_err = |source| ConfigError::Read { path: path.clone(), source };
    let meta = std::fs::metadata(&path).map_err(read_err)?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(invalid("(file)", format!("{} bytes is more than the {MAX_CONFIG_BYTES} husk reads", meta.len())));
    }
    let text = std::fs::read(&path).map_err(read_err)?;
    let value: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| ConfigError::Parse { path: path.clone(), message: e.to_string() })?;
    let de = serde_json::Deserializer::from_slice(&text);
    let mut de = de;
    let spec: RawSpec = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| ConfigError::Parse { path: path.clone(), message: format!("{}: {}", e.path(), e.inner()) })?;
    Ok((spec, value))
}

/// Validates the spec into a plan.
pub fn plan(bundle: &Path, spec: RawSpec) -> Result<OciPlan, ConfigError> {
    let bundle = std::fs::canonicalize(bundle).map_err(|source| ConfigError::Read { path: bundle.into(), source })?;
    if !spec.oci_version.starts_with("1.") {
        return Err(invalid("ociVersion", format!("{:?}: husk runs runtime-spec 1.x configs", spec.oci_version)));
    }
    let root = spec.root.ok_or_else(|| invalid("root", "missing: the container needs a root filesystem"))?;
    let rootfs = if root.path.is_absolute() { root.path.clone() } else { bundle.join(&root.path) };
    let rootfs = std::fs::canonicalize(&rootfs).map_err(|source| ConfigError::Read { path: rootfs.clone(), source })?;
    if !rootfs.is_dir() {
        return Err(invalid("root.path", format!("{} is not a directory", rootfs.display())));
    }
    let raw_process = spec.process.ok_or_else(|| invalid("process", "missing: nothing to run"))?;
    let linux = spec.linux.unwrap_or_default();

    let mut new_ns = Vec::new();
    let mut join_ns = Vec::new();
    for n in &linux.namespaces {
        let ns = Ns::parse(&n.kind)
            .ok_or_else(|| invalid(format!("linux.namespaces type {:?}", n.kind), "unknown namespace type"))?;
        if new_ns.contains(&ns) || join_ns.iter().any(|(j, _)| *j == ns) {
            return Err(invalid(format!("linux.namespaces {:?}", n.kind), "listed twice"));
        }
        match &n.path {
            Some(p) if !p.as_os_str().is_empty() => {
                if !p.is_absolute() {
                    return Err(invalid(format!("linux.namespaces {:?} path", n.kind), "must be absolute"));
                }
                join_ns.push((ns, p.clone()));
            }
            _ => new_ns.push(ns),
        }
    }
    join_ns.sort_by_key(|(ns, _)| Ns::JOIN_ORDER.iter().position(|o| o == ns));
    if !new_ns.contains(&Ns::Mount) && !join_ns.iter().any(|(n, _)| *n == Ns::Mount) {
        return Err(unsupported("linux.namespaces", "no mount namespace: the container's mounts would be the host's"));
    }
    if join_ns.iter().any(|(n, _)| *n == Ns::Mount) {
        return Err(unsupported("linux.namespaces mount path", "joining an existing mount namespace"));
    }
    if let Some(offsets) = &linux.time_offsets
        && !offsets.is_empty()
    {
        return Err(unsupported("linux.timeOffsets", "time namespace offsets are not written by husk yet"));
    }

    let (uid_map, gid_map) = if new_ns.contains(&Ns::User) {
        if linux.uid_mappings.is_empty() || linux.gid_mappings.is_empty() {
            return Err(invalid("linux.uidMappings/gidMappings", "a new user namespace needs both mappings"));
        }
        let lines = |m: &[RawIdMap]| {
            m.iter().map(|m| format!("{} {} {}\n", m.container_id, m.host_id, m.size)).collect::<String>()
        };
        (Some(lines(&linux.uid_mappings)), Some(lines(&linux.gid_mappings)))
    } else {
        if !linux.uid_mappings.is_empty() && !join_ns.iter().any(|(n, _)| *n == Ns::User) {
            return Err(invalid("linux.uidMappings", "given without a user namespace"));
        }
        (None, None)
    };

    if (spec.hostname.as_deref().is_some_and(|h| !h.is_empty())
        || spec.domainname.as_deref().is_some_and(|d| !d.is_empty()))
        && !new_ns.contains(&Ns::Uts)
    {
        return Err(invalid("hostname", "set without a new uts namespace (it would rename the host)"));
    }

    let process = process_plan(&raw_process, "process")?;
    let mut mounts = Vec::new();
    for (i, m) in spec.mounts.iter().enumerate() {
        mounts.push(mount_plan(m, &bundle, i)?);
    }
    let mut devices = Vec::new();
    for (i, d) in linux.devices.iter().enumerate() {
        devices.push(device_plan(d, i)?);
    }
    let mut resources = resources(linux.resources.clone().unwrap_or_default())?;
    if !resources.devices.is_empty() {
        allow_container_devices(&mut resources, &devices);
    }

    if linux.intel_rdt.is_some() {
        return Err(unsupported("linux.intelRdt", "resctrl is not supported"));
    }
    if let Some(p) = &linux.personality
        && (p.domain != "LINUX" || !p.flags.is_empty())
    {
        return Err(unsupported(
            "linux.personality",
            format!("domain {:?} with flags {:?}: only LINUX", p.domain, p.flags),
        ));
    }
    let rootfs_propagation = match linux.rootfs_propagation.as_deref().unwrap_or("") {
        "" | "rslave" | "slave" => libc::MS_SLAVE | libc::MS_REC,
        "rprivate" | "private" => libc::MS_PRIVATE | libc::MS_REC,
        "rshared" | "shared" => libc::MS_SHARED | libc::MS_REC,
        "runbindable" | "unbindable" => libc::MS_UNBINDABLE | libc::MS_REC,
        other => return Err(invalid("linux.rootfsPropagation", format!("{other:?} is not a propagation mode"))),
    };
    let sysctl = linux.sysctl.into_iter().collect::<Vec<_>>();
    for (k, _) in &sysctl {
        check_sysctl(k, &new_ns)?;
    }
    // A relative path is taken from the container's root, where runc's
    // init resolves it (its cwd is / after pivot_root); '..' stays refused.
    let rooted = |v: Vec<String>| -> Vec<String> {
        v.into_iter().map(|p| if p.starts_with('/') { p } else { format!("/{p}") }).collect()
    };
    let (masked_paths, readonly_paths) = (rooted(linux.masked_paths), rooted(linux.readonly_paths));
    for p in masked_paths.iter().chain(&readonly_paths) {
        if p.split('/').any(|c| c == "..") {
            return Err(invalid("linux.maskedPaths/readonlyPaths", format!("{p:?} must not contain '..'")));
        }
    }
    let hooks = spec.hooks.map(|h| Hooks {
        prestart: h.prestart,
        create_runtime: h.create_runtime,
        create_container: h.create_container,
        start_container: h.start_container,
        poststart: h.poststart,
        poststop: h.poststop,
    });
    let hooks = hooks.unwrap_or_default();
    for h in hooks
        .prestart
        .iter()
        .chain(&hooks.create_runtime)
        .chain(&hooks.create_container)
        .chain(&hooks.start_container)
        .chain(&hooks.poststart)
        .chain(&hooks.poststop)
    {
        if !h.path.is_absolute() {
            return Err(invalid("hooks path", format!("{} must be absolute", h.path.display())));
        }
    }
    let mut process = process;
    if let Some(sc) = &linux.seccomp {
        process.seccomp = Some(seccomp(sc, process.caps.bounding)?);
    }
    Ok(OciPlan {
        bundle,
        rootfs,
        root_readonly: root.readonly,
        process,
        hostname: spec.hostname.filter(|h| !h.is_empty()),
        domainname: spec.domainname.filter(|d| !d.is_empty()),
        new_ns,
        join_ns,
        uid_map,
        gid_map,
        mounts,
        devices,
        cgroups_path: linux.cgroups_path,
        resources,
        sysctl,
        masked_paths,
        readonly_paths,
        rootfs_propagation,
        hooks,
        annotations: spec.annotations,
    })
}

/// runc's rule: the nodes every container gets (and the spec's own
/// devices) stay usable whatever the spec's device rules deny, or a
/// "deny all" first rule would make init's own mknod and every open of
/// /dev/null fail.
fn allow_container_devices(r: &mut Resources, devices: &[OciDevice]) {
    let c = |major, minor: Option<i64>| DeviceRule {
        allow: true,
        kind: 'c',
        major: Some(major),
        minor,
        access: "rwm".into(),
    };
    for (major, minor) in [(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2)] {
        r.devices.push(c(major, Some(minor)));
    }
    r.devices.push(c(136, None));
    for d in devices.iter().filter(|d| d.kind != 'p') {
        r.devices.push(DeviceRule {
            allow: true,
            kind: d.kind,
            major: Some(d.major as i64),
            minor: Some(d.minor as i64),
            access: "rwm".into(),
        });
    }
}

/// Sysctls runc allows: the namespaced ones, and only when that namespace
/// is the container's own.
fn check_sysctl(key: &str, ns: &[Ns]) -> Result<(), ConfigError> {
    let ipc = [
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
    ];
    let needs = if ipc.contains(&key) || key.starts_with("fs.mqueue.") {
        Ns::Ipc
    } else if key.starts_with("net.") {
        Ns::Net
    } else if key == "kernel.hostname" || key == "kernel.domainname" {
        Ns::Uts
    } else {
        return Err(unsupported(format!("linux.sysctl {key:?}"), "not a namespaced sysctl: it would change the host"));
    };
    if !ns.contains(&needs) {
        return Err(invalid(format!("linux.sysctl {key:?}"), "needs the container's own namespace for it"));
    }
    if key.contains("..") || key.contains('/') {
        return Err(invalid(format!("linux.sysctl {key:?}"), "not a sysctl name"));
    }
    Ok(())
}

/// A capability name husk does not know (a newer kernel's, from a newer
/// engine's default list) is left out with a warning in the log, as runc
/// 1.1 does ("ignoring unknown or unavailable capabilities"): it grants
/// nothing this kernel has, and refusing failed the whole container.
fn caps_mask(field: &str, names: &[String]) -> Result<u64, ConfigError> {
    let mut mask = 0u64;
    for n in names {
        match crate::capability::parse(n) {
            Some(c) => mask |= 1u64 << c,
            None => super::log::warn(&format!("{field}: ignoring unknown capability {n:?}")),
        }
    }
    Ok(mask)
}

fn rlimit_resource(kind: &str) -> Option<libc::__rlimit_resource_t> {
    Some(match kind {
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        _ => return None,
    })
}

fn cstring(field: &str, s: &str) -> Result<CString, ConfigError> {
    CString::new(s).map_err(|_| invalid(field.to_string(), format!("{s:?} contains a NUL byte")))
}

/// A `process` object (config.json's, or `exec --process`'s) into its plan.
pub fn process_plan(p: &RawProcess, at: &str) -> Result<OciProcess, ConfigError> {
    if p.args.is_empty() {
        return Err(invalid(format!("{at}.args"), "empty: nothing to run"));
    }
    if !p.cwd.starts_with('/') {
        return Err(invalid(format!("{at}.cwd"), format!("{:?} must be an absolute path", p.cwd)));
    }
    if p.apparmor_profile.as_deref().is_some_and(|a| !a.is_empty() && a != "unconfined") {
        // AppArmor is not enabled on this kind of host; Docker sends
        // docker-default only when it is, so a profile here is a demand.
        if std::path::Path::new("/sys/kernel/security/apparmor").exists() {
            return Err(unsupported(format!("{at}.apparmorProfile"), "husk does not load AppArmor profiles"));
        }
    }
    if p.selinux_label.as_deref().is_some_and(|l| !l.is_empty()) {
        return Err(unsupported(format!("{at}.selinuxLabel"), "husk does not set SELinux labels"));
    }
    if p.scheduler.is_some() || p.io_priority.is_some() {
        return Err(unsupported(format!("{at}.scheduler/ioPriority"), "not applied by husk"));
    }
    let caps = match &p.capabilities {
        Some(c) => CapSets {
            bounding: caps_mask(&format!("{at}.capabilities.bounding"), &c.bounding)?,
            effective: caps_mask(&format!("{at}.capabilities.effective"), &c.effective)?,
            inheritable: caps_mask(&format!("{at}.capabilities.inheritable"), &c.inheritable)?,
            permitted: caps_mask(&format!("{at}.capabilities.permitted"), &c.permitted)?,
            ambient: caps_mask(&format!("{at}.capabilities.ambient"), &c.ambient)?,
        },
        None => CapSets::default(),
    };
    let mut rlimits = Vec::new();
    for r in &p.rlimits {
        let res = rlimit_resource(&r.kind)
            .ok_or_else(|| invalid(format!("{at}.rlimits"), format!("unknown rlimit type {:?}", r.kind)))?;
        if r.soft > r.hard {
            return Err(invalid(format!("{at}.rlimits {}", r.kind), "soft is above hard"));
        }
        rlimits.push((res, r.soft, r.hard));
    }
    let args = p.args.iter().map(|a| cstring(&format!("{at}.args"), a)).collect::<Result<Vec<_>, _>>()?;
    let env = p.env.iter().map(|e| cstring(&format!("{at}.env"), e)).collect::<Result<Vec<_>, _>>()?;
    let path = p
        .env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    let path_dirs =
        path.split(':').filter(|d| d.starts_with('/')).map(|d| cstring("PATH", d)).collect::<Result<_, _>>()?;
    Ok(OciProcess {
        args,
        env,
        path_dirs,
        cwd: cstring(&format!("{at}.cwd"), &p.cwd)?,
        uid: p.user.uid,
        gid: p.user.gid,
        additional_gids: p.user.additional_gids.clone(),
        umask: p.user.umask,
        caps,
        rlimits,
        no_new_privs: p.no_new_privileges,
        oom_score_adj: p.oom_score_adj,
        terminal: p.terminal,
        seccomp: None,
    })
}

/// linux.seccomp, in the spec's own format, compiled to BPF now.
pub fn seccomp(value: &serde_json::Value, caps: u64) -> Result<Seccomp, ConfigError> {
    // listenerPath alone is accepted, as runc does: runc only connects to
    // it when a rule's action is SCMP_ACT_NOTIFY, which the compiler below
    // refuses (husk has no notify support). A refusal of the path itself
    // failed configs that never notify. The compiler, shared with husk's
    // own profiles, refuses the key, so it is taken out here.
    let mut value = value.clone();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("listenerPath");
        obj.remove("listenerMetadata");
    }
    let text = value.to_string();
    let compiled =
        crate::seccomp::compile_text("config.json linux.seccomp", &text, caps, crate::kernel::kernel_version())
            .map_err(|e| ConfigError::Seccomp(e.to_string()))?;
    Ok(Seccomp { filter: compiled.filter, flags: compiled.flags })
}

const MS_OPTS: &[(&str, libc::c_ulong, bool)] = &[
    ("ro", libc::MS_RDONLY, true),
    ("rw", libc::MS_RDONLY, false),
    ("nosuid", libc::MS_NOSUID, true),
    ("suid", libc::MS_NOSUID, false),
    ("nodev", libc::MS_NODEV, true),
    ("dev", libc::MS_NODEV, false),
    ("noexec", libc::MS_NOEXEC, true),
    ("exec", libc::MS_NOEXEC, false),
    ("sync", libc::MS_SYNCHRONOUS, true),
    ("async", libc::MS_SYNCHRONOUS, false),
    ("dirsync", libc::MS_DIRSYNC, true),
    ("mand", libc::MS_MANDLOCK, true),
    ("nomand", libc::MS_MANDLOCK, false),
    ("noatime", libc::MS_NOATIME, true),
    ("atime", libc::MS_NOATIME, false),
    ("nodiratime", libc::MS_NODIRATIME, true),
    ("diratime", libc::MS_NODIRATIME, false),
    ("relatime", libc::MS_RELATIME, true),
    ("norelatime", libc::MS_RELATIME, false),
    ("strictatime", libc::MS_STRICTATIME, true),
    ("nostrictatime", libc::MS_STRICTATIME, false),
];

const PROPAGATION: &[(&str, libc::c_ulong)] = &[
    ("private", libc::MS_PRIVATE),
    ("rprivate", libc::MS_PRIVATE | libc::MS_REC),
    ("shared", libc::MS_SHARED),
    ("rshared", libc::MS_SHARED | libc::MS_REC),
    ("slave", libc::MS_SLAVE),
    ("rslave", libc::MS_SLAVE | libc::MS_REC),
    ("unbindable", libc::MS_UNBINDABLE),
    ("runbindable", libc::MS_UNBINDABLE | libc::MS_REC),
];

/// The MOUNT_ATTR_* bits (see mount_setattr(2)) of the recursive options.
use crate::sys::mount::{
    MOUNT_ATTR_ATIME_MASK as ATTR_ATIME_MASK, MOUNT_ATTR_NOATIME as ATTR_NOATIME, MOUNT_ATTR_NODEV as ATTR_NODEV,
    MOUNT_ATTR_NODIRATIME as ATTR_NODIRATIME, MOUNT_ATTR_NOEXEC as ATTR_NOEXEC, MOUNT_ATTR_NOSUID as ATTR_NOSUID,
    MOUNT_ATTR_NOSYMFOLLOW as ATTR_NOSYMFOLLOW, MOUNT_ATTR_RDONLY as ATTR_RDONLY, MOUNT_ATTR_RELATIME as ATTR_RELATIME,
    MOUNT_ATTR_STRICTATIME as ATTR_STRICTATIME,
};

/// Recursive mount options as runc 1.1 names them: (option, set, clear).
/// The atime ones replace the whole atime field (the kernel refuses an
/// atime bit set without its mask cleared); the "not" forms of an atime
/// mode go back to the kernel's default, relatime.
const RECURSIVE_ATTRS: &[(&str, u64, u64)] = &[
    ("rrw", 0, ATTR_RDONLY),
    ("rnosuid", ATTR_NOSUID, 0),
    ("rsuid", 0, ATTR_NOSUID),
    ("rnodev", ATTR_NODEV, 0),
    ("rdev", 0, ATTR_NODEV),
    ("rnoexec", ATTR_NOEXEC, 0),
    ("rexec", 0, ATTR_NOEXEC),
    ("rnodiratime", ATTR_NODIRATIME, 0),
    ("rdiratime", 0, ATTR_NODIRATIME),
    ("rrelatime", ATTR_RELATIME, ATTR_ATIME_MASK),
    ("rnorelatime", ATTR_RELATIME, ATTR_ATIME_MASK),
    ("rnoatime", ATTR_NOATIME, ATTR_ATIME_MASK),
    ("ratime", ATTR_RELATIME, ATTR_ATIME_MASK),
    ("rstrictatime", ATTR_STRICTATIME, ATTR_ATIME_MASK),
    ("rnostrictatime", ATTR_RELATIME, ATTR_ATIME_MASK),
    ("rnosymfollow", ATTR_NOSYMFOLLOW, 0),
    ("rsymfollow", 0, ATTR_NOSYMFOLLOW),
];

/// Folds one recursive option into (set, clear): a later option wins over
/// an earlier one on the same bits, as flags do.
fn add_recursive(acc: (u64, u64), set: u64, clear: u64) -> (u64, u64) {
    let touched = set | clear;
    ((acc.0 & !touched) | set, (acc.1 & !set) | clear)
}

fn mount_plan(m: &RawMount, bundle: &Path, i: usize) -> Result<OciMount, ConfigError> {
    let field = format!("mounts[{i}] ({})", m.destination);
    if !m.destination.starts_with('/') || m.destination.split('/').any(|c| c == "..") {
        return Err(invalid(field, "destination must be absolute without '..'"));
    }
    if m.uid_mappings.is_some() || m.gid_mappings.is_some() {
        return Err(unsupported(field, "idmapped mounts (uidMappings/gidMappings)"));
    }
    let mut flags: libc::c_ulong = 0;
    let mut propagation: libc::c_ulong = 0;
    let mut data = Vec::new();
    let mut bind = None;
    let mut recursive_ro = false;
    let mut recursive_attrs = (0, 0);
    for o in &m.options {
        if let Some((_, f, set)) = MS_OPTS.iter().find(|(n, _, _)| n == o) {
            if *set { flags |= f } else { flags &= !f }
        } else if let Some((_, p)) = PROPAGATION.iter().find(|(n, _)| n == o) {
            propagation = *p;
        } else if o == "bind" {
            bind = Some(false);
        } else if o == "rbind" {
            bind = Some(true);
        } else if o == "rro" {
            recursive_ro = true;
            flags |= libc::MS_RDONLY;
        } else if let Some((_, set, clear)) = RECURSIVE_ATTRS.iter().find(|(n, _, _)| n == o) {
            recursive_attrs = add_recursive(recursive_attrs, *set, *clear);
        } else if o == "remount"
            || o == "idmap"
            || o == "ridmap"
            || o.starts_with("r") && o.len() > 3 && MS_OPTS.iter().any(|(n, _, _)| *n == &o[1..])
        {
            return Err(unsupported(field, format!("mount option {o:?}")));
        } else if o == "defaults" {
        } else {
            data.push(o.clone());
        }
    }
    let kind_s = m.kind.clone().unwrap_or_default();
    let kind = match (bind, kind_s.as_str()) {
        (Some(recursive), _) => MountKind::Bind { recursive },
        (None, "bind") => MountKind::Bind { recursive: false },
        (None, "cgroup") | (None, "cgroup2") => MountKind::Cgroup,
        (None, "") => return Err(invalid(field, "no type and no bind option")),
        (None, t) => MountKind::Fs(t.to_string()),
    };
    let source = match &kind {
        MountKind::Bind { .. } => {
            let s = m.source.as_deref().ok_or_else(|| invalid(field.clone(), "bind mount without source"))?;
            let p = PathBuf::from(s);
            if p.is_absolute() { p } else { bundle.join(p) }
        }
        _ => PathBuf::from(m.source.clone().unwrap_or_else(|| kind_s.clone())),
    };
    Ok(OciMount {
        destination: m.destination.clone(),
        kind,
        source,
        flags,
        propagation,
        data: data.join(","),
        recursive_ro,
        recursive_attrs,
    })
}

fn device_plan(d: &RawDevice, i: usize) -> Result<OciDevice, ConfigError> {
    let field = format!("linux.devices[{i}] ({})", d.path);
    if !d.path.starts_with("/dev/") || d.path.split('/').any(|c| c == "..") {
        return Err(invalid(field, "path must be under /dev without '..'"));
    }
    let kind = match d.kind.as_str() {
        "c" | "u" => 'c',
        "b" => 'b',
        "p" => 'p',
        other => return Err(invalid(field, format!("type {other:?} is not c, u, b or p"))),
    };
    if d.major < 0 || d.minor < 0 {
        return Err(invalid(field, "major and minor must be given"));
    }
    Ok(OciDevice {
        path: d.path.clone(),
        kind,
        major: d.major as u64,
        minor: d.minor as u64,
        mode: d.file_mode.unwrap_or(0o666) & 0o7777,
        uid: d.uid.unwrap_or(0),
        gid: d.gid.unwrap_or(0),
    })
}

/// linux.resources validated (also `update`'s document).
pub fn resources(r: RawResources) -> Result<Resources, ConfigError> {
    let mut out = Resources::default();
    if let Some(m) = r.memory {
        if m.kernel.is_some_and(|k| k > 0) || m.kernel_tcp.is_some_and(|k| k > 0) {
            return Err(unsupported(
                "linux.resources.memory.kernel/kernelTCP",
                "kernel memory limits (gone from Linux 6.x)",
            ));
        }
        if let (Some(l), Some(s)) = (m.limit, m.swap)
            && l > 0
            && s > 0
            && s < l
        {
            return Err(invalid("linux.resources.memory.swap", "memory+swap is below the memory limit"));
        }
        out.memory = Some(Memory {
            limit: m.limit,
            reservation: m.reservation,
            swap: m.swap,
            swappiness: m.swappiness,
            disable_oom_killer: m.disable_oom_killer,
        });
    }
    out.pids_limit = r.pids.map(|p| p.limit);
    if let Some(c) = r.cpu {
        if c.realtime_runtime.is_some_and(|v| v != 0) || c.realtime_period.is_some_and(|v| v != 0) {
            return Err(unsupported("linux.resources.cpu.realtimeRuntime/realtimePeriod", "realtime cpu budgets"));
        }
        out.cpu_shares = c.shares;
        out.cpu_quota = c.quota;
        out.cpu_period = c.period;
        out.cpuset_cpus = c.cpus;
        out.cpuset_mems = c.mems;
    }
    if let Some(b) = r.block_io {
        if b.leaf_weight.is_some()
            || !b.weight_device.is_empty()
            || !b.throttle_read_bps_device.is_empty()
            || !b.throttle_write_bps_device.is_empty()
            || !b.throttle_read_iops_device.is_empty()
            || !b.throttle_write_iops_device.is_empty()
        {
            return Err(unsupported("linux.resources.blockIO", "per-device weights and throttles"));
        }
        out.blkio_weight = b.weight.filter(|w| *w > 0);
    }
    out.hugepages = r.hugepage_limits.into_iter().map(|h| (h.page_size, h.limit)).collect();
    if r.network.as_ref().is_some_and(|n| n.as_object().is_some_and(|o| !o.is_empty())) {
        return Err(unsupported("linux.resources.network", "net_cls/net_prio"));
    }
    if r.rdma.as_ref().is_some_and(|n| n.as_object().is_some_and(|o| !o.is_empty())) {
        return Err(unsupported("linux.resources.rdma", "rdma limits"));
    }
    for (i, d) in r.devices.into_iter().enumerate() {
        let kind = match d.kind.as_deref().unwrap_or("a") {
            "a" => 'a',
            "b" => 'b',
            "c" => 'c',
            other => return Err(invalid(format!("linux.resources.devices[{i}]"), format!("type {other:?}"))),
        };
        let access = d.access.unwrap_or_else(|| "rwm".into());
        if access.is_empty() || !access.chars().all(|c| "rwm".contains(c)) {
            return Err(invalid(
                format!("linux.resources.devices[{i}]"),
                format!("access {access:?} is not of r, w, m"),
            ));
        }
        out.devices.push(DeviceRule { allow: d.allow, kind, major: d.major, minor: d.minor, access });
    }
    out.unified = r.unified;
    Ok(out)
}

#[cfg(test)]
mod tests;
