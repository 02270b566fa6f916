//! Renders a `Plan` into the OCI runtime config (`config.json`) runsc runs:
//! the same process (argv, env, cwd, user, rlimits), hostname, read-only
//! root, tmpfs workdir and /tmp with their sizes, binds, no capabilities,
//! noNewPrivileges, namespaces, resources and (when given) seccomp.

use super::layout::{KernelFs, Layout, Role};
use crate::plan::{Plan, ProcessPlan};
use crate::spec::{LimitSpec, NetworkMode};
use oci_spec::runtime::{
    Capabilities, Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxMemoryBuilder,
    LinuxNamespaceBuilder, LinuxNamespaceType, LinuxPidsBuilder, LinuxResources, LinuxResourcesBuilder, LinuxSeccomp,
    Mount, MountBuilder, PosixRlimit, PosixRlimitBuilder, PosixRlimitType, Process, ProcessBuilder, RootBuilder, Spec,
    SpecBuilder, UserBuilder,
};

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("building the OCI config ({what}): {source}")]
    Oci { what: &'static str, source: oci_spec::OciSpecError },
    #[error("capability {0} has no OCI name")]
    Capability(String),
    #[error("rlimit resource {0} has no OCI name")]
    Rlimit(u32),
    #[error("the seccomp profile is not in OCI format: {0}")]
    Seccomp(String),
}

fn oci(what: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> BundleError {
    move |source| BundleError::Oci { what, source }
}

/// What `render` needs besides the plan.
pub struct Inputs<'a> {
    pub plan: &'a Plan,
    pub layout: &'a Layout,
    /// The run's seccomp profile in OCI format (`linux.seccomp`), once the
    /// seccomp facility provides one; runsc then applies it to the command
    /// inside the sandbox (`--oci-seccomp`).
    pub seccomp: Option<&'a serde_json::Value>,
    /// An empty, read-only host file (in the run dir) bound over a device
    /// node gVisor adds to every /dev (see `mounts`).
    pub masked_file: &'a str,
}

pub fn render(inp: &Inputs<'_>) -> Result<Spec, BundleError> {
    let plan = inp.plan;
    let lossy = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    let args = plan.process.argv.iter().map(lossy).collect();
    let nproc = super::limits::workload_nproc(plan);
    let process = process(&plan.process, args, lossy(&plan.mounts.workdir), plan.last_cap, nproc)?;

    let mut namespaces = vec![LinuxNamespaceType::Pid, LinuxNamespaceType::Ipc, LinuxNamespaceType::Uts];
    namespaces.push(LinuxNamespaceType::Mount);
    if plan.network == NetworkMode::None {
        namespaces.push(LinuxNamespaceType::Network);
    }
    let namespaces = namespaces
        .into_iter()
        .map(|t| LinuxNamespaceBuilder::default().typ(t).build().map_err(oci("linux.namespaces")))
        .collect::<Result<Vec<_>, _>>()?;
    // The builders fill unset fields from oci-spec's runc-style defaults
    // (masked paths, a device cgroup, annotations): everything is set
    // explicitly here, so config.json says exactly what husk planned.
    let mut linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .masked_paths(Vec::<String>::new())
        .readonly_paths(Vec::<String>::new())
        .devices(Vec::new());
    // Cgroup limits: rendered for the record and for runtimes that apply
    // them. husk runs runsc with --ignore-cgroups (it never lets runsc
    // create cgroups of its own); enforcement on the host comes from the
    // run's cgroup, which runsc and its sandbox are born into (see
    // `launch::spawn`'s `cgroup` slot) once the cgroup facility provides it.
    if let Some(r) = resources(&plan.spec.limits)? {
        linux = linux.resources(r);
    }
    if let Some(s) = seccomp(inp.seccomp)? {
        linux = linux.seccomp(s);
    }
    let mut linux = linux.build().map_err(oci("linux"))?;
    if linux.resources().as_ref().is_some_and(|r| r.memory().is_none() && r.cpu().is_none() && r.pids().is_none()) {
        linux.set_resources(None);
    }

    let mut spec = SpecBuilder::default()
        .version("1.0.2")
        .root(
            RootBuilder::default()
                .path(inp.layout.root_path.clone())
                .readonly(plan.mounts.report.read_only)
                .build()
                .map_err(oci("root"))?,
        )
        .hostname(plan.spec.hostname.clone())
        .mounts(mounts(plan, inp.layout, inp.masked_file)?)
        .process(process)
        .linux(linux)
        .build()
        .map_err(oci("spec"))?;
    spec.set_annotations(None);
    Ok(spec)
}

/// The OCI process for `p` running `args` in `cwd`: its user, env and
/// rlimits, only its `--cap-add` capabilities, noNewPrivileges. Also what
/// `husk exec` hands `runsc exec --process` for a sandbox that lives.
/// `nproc`: the workload's task limit inside gVisor (`limits`), applied
/// as RLIMIT_NPROC unless `--rlimit nproc` is lower.
pub fn process(
    p: &ProcessPlan,
    args: Vec<String>,
    cwd: String,
    last_cap: u32,
    nproc: Option<u64>,
) -> Result<Process, BundleError> {
    process_with_caps(p, args, cwd, p.caps_keep, last_cap, nproc)
}

/// `process` with the capability set `caps` instead of the plan's.
pub fn process_with_caps(
    p: &ProcessPlan,
    args: Vec<String>,
    cwd: String,
    caps: u64,
    last_cap: u32,
    nproc: Option<u64>,
) -> Result<Process, BundleError> {
    let lossy = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    let caps = capabilities(caps, last_cap)?;
    let all = |c: &Capabilities| c.clone();
    ProcessBuilder::default()
        .terminal(false)
        .user(
            UserBuilder::default()
                .uid(p.uid)
                .gid(p.gid)
                .additional_gids(p.groups.clone())
                .umask(0o022u32)
                .build()
                .map_err(oci("process.user"))?,
        )
        .args(args)
        .env(p.envp.iter().map(lossy).collect::<Vec<_>>())
        .cwd(cwd)
        .capabilities(
            LinuxCapabilitiesBuilder::default()
                .bounding(all(&caps))
                .effective(all(&caps))
                .permitted(all(&caps))
                .inheritable(all(&caps))
                .ambient(all(&caps))
                .build()
                .map_err(oci("process.capabilities"))?,
        )
        .rlimits(rlimits(p, nproc)?)
        .no_new_privileges(true)
        .build()
        .map_err(oci("process"))
}

fn capabilities(keep: u64, last_cap: u32) -> Result<Capabilities, BundleError> {
    let mut set = Capabilities::new();
    for cap in caps::all() {
        let i = cap.index() as u32;
        if i <= last_cap && keep & (1u64 << i) != 0 {
            let name = cap.to_string();
            let c: Capability = serde_json::from_value(serde_json::Value::String(name.clone()))
                .map_err(|_| BundleError::Capability(name))?;
            set.insert(c);
        }
    }
    Ok(set)
}

fn rlimit_type(resource: u32) -> Option<PosixRlimitType> {
    Some(match resource {
        libc::RLIMIT_AS => PosixRlimitType::RlimitAs,
        libc::RLIMIT_CORE => PosixRlimitType::RlimitCore,
        libc::RLIMIT_CPU => PosixRlimitType::RlimitCpu,
        libc::RLIMIT_DATA => PosixRlimitType::RlimitData,
        libc::RLIMIT_FSIZE => PosixRlimitType::RlimitFsize,
        libc::RLIMIT_LOCKS => PosixRlimitType::RlimitLocks,
        libc::RLIMIT_MEMLOCK => PosixRlimitType::RlimitMemlock,
        libc::RLIMIT_MSGQUEUE => PosixRlimitType::RlimitMsgqueue,
        libc::RLIMIT_NICE => PosixRlimitType::RlimitNice,
        libc::RLIMIT_NOFILE => PosixRlimitType::RlimitNofile,
        libc::RLIMIT_NPROC => PosixRlimitType::RlimitNproc,
        libc::RLIMIT_RSS => PosixRlimitType::RlimitRss,
        libc::RLIMIT_RTPRIO => PosixRlimitType::RlimitRtprio,
        libc::RLIMIT_RTTIME => PosixRlimitType::RlimitRttime,
        libc::RLIMIT_SIGPENDING => PosixRlimitType::RlimitSigpending,
        libc::RLIMIT_STACK => PosixRlimitType::RlimitStack,
        _ => return None,
    })
}

fn rlimits(p: &ProcessPlan, nproc: Option<u64>) -> Result<Vec<PosixRlimit>, BundleError> {
    let mut all: Vec<(u32, u64, u64)> = p.rlimits.iter().map(|r| (r.resource, r.soft, r.hard)).collect();
    if let Some(n) = nproc {
        match all.iter_mut().find(|(res, ..)| *res == libc::RLIMIT_NPROC) {
            Some((_, soft, hard)) => (*soft, *hard) = ((*soft).min(n), (*hard).min(n)),
            None => all.push((libc::RLIMIT_NPROC, n, n)),
        }
    }
    all.into_iter()
        .map(|(resource, soft, hard)| {
            PosixRlimitBuilder::default()
                .typ(rlimit_type(resource).ok_or(BundleError::Rlimit(resource))?)
                .soft(soft)
                .hard(hard)
                .build()
                .map_err(oci("process.rlimits"))
        })
        .collect()
}

/// linux.resources from the run's limits; `None` when none was asked for.
pub fn resources(l: &LimitSpec) -> Result<Option<LinuxResources>, BundleError> {
    if l.no_cgroup || (l.memory.is_none() && l.cpus_milli.is_none() && l.pids.is_none()) {
        return Ok(None);
    }
    let mut r = LinuxResourcesBuilder::default();
    if let Some(m) = l.memory {
        let mut mem = LinuxMemoryBuilder::default().limit(m as i64);
        if let Some(s) = l.memory_swap {
            mem = mem.swap(s as i64);
        }
        r = r.memory(mem.build().map_err(oci("linux.resources.memory"))?);
    }
    if let Some(milli) = l.cpus_milli {
        // quota/period in microseconds: 1000 millicores = one full period.
        const PERIOD: u64 = 100_000;
        let cpu = LinuxCpuBuilder::default().period(PERIOD).quota((milli * PERIOD / 1000) as i64);
        r = r.cpu(cpu.build().map_err(oci("linux.resources.cpu"))?);
    }
    if let Some(p) = l.pids {
        r = r.pids(LinuxPidsBuilder::default().limit(p as i64).build().map_err(oci("linux.resources.pids"))?);
    }
    // `devices` defaults to a deny-all rule in oci-spec; runsc with
    // --ignore-cgroups has no device cgroup to put it in.
    Ok(Some(r.devices(Vec::new()).build().map_err(oci("linux.resources"))?))
}

/// linux.seccomp from a profile already in OCI format (the seccomp facility
/// resolves Docker-format `includes`/`excludes` for the run's capabilities
/// before handing it over).
pub fn seccomp(profile: Option<&serde_json::Value>) -> Result<Option<LinuxSeccomp>, BundleError> {
    profile.map(|p| serde_json::from_value(p.clone()).map_err(|e| BundleError::Seccomp(e.to_string()))).transpose()
}

fn mount(dest: String, typ: &str, source: &str, options: Vec<String>) -> Result<Mount, BundleError> {
    MountBuilder::default().destination(dest).typ(typ).source(source).options(options).build().map_err(oci("mounts"))
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The OCI mounts, in the plan's order (parents before children).
fn mounts(plan: &Plan, layout: &Layout, masked_file: &str) -> Result<Vec<Mount>, BundleError> {
    let (uid, gid) = (plan.process.uid, plan.process.gid);
    let mut out = Vec::new();
    for (op, role) in plan.mounts.ops.iter().zip(&layout.roles) {
        let dest = format!("/{}", op.target.to_string_lossy());
        let m = match role {
            Role::Skip => continue,
            Role::Kernel(k) => match k {
                KernelFs::Proc => mount(dest, "proc", "proc", strs(&["nosuid", "noexec", "nodev"]))?,
                KernelFs::Sysfs => mount(dest, "sysfs", "sysfs", strs(&["nosuid", "noexec", "nodev", "ro"]))?,
                KernelFs::Dev { size } => {
                    let o = vec!["nosuid".into(), "noexec".into(), "mode=755".into(), format!("size={size}")];
                    out.push(mount(dest.clone(), "tmpfs", "tmpfs", o)?);
                    // gVisor fills /dev with every device its kernel
                    // emulates, whatever the OCI config says: /dev/fuse
                    // (10:229) and /dev/net/tun (10:200) besides the minimal
                    // set the native backend gives. Each is kernel surface
                    // the workload could poke that nobody asked for, and
                    // runsc has no switch to leave them out, so they are
                    // covered: /dev/net by an empty read-only tmpfs,
                    // /dev/fuse by an empty read-only file. The names stay;
                    // no device is reachable behind them.
                    let ro = strs(&["ro", "nosuid", "noexec", "nodev"]);
                    let mut tmpfs = ro.clone();
                    tmpfs.extend(["mode=755".into(), "size=4k".into()]);
                    out.push(mount(format!("{dest}/net"), "tmpfs", "tmpfs", tmpfs)?);
                    let mut bind = strs(&["bind"]);
                    bind.extend(ro);
                    mount(format!("{dest}/fuse"), "bind", masked_file, bind)?
                }
                KernelFs::Devpts { gid } => {
                    let mut o = strs(&["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]);
                    if let Some(g) = gid {
                        o.push(format!("gid={g}"));
                    }
                    mount(dest, "devpts", "devpts", o)?
                }
                KernelFs::Shm { size } => {
                    let o = vec![
                        "nosuid".into(),
                        "noexec".into(),
                        "nodev".into(),
                        "mode=1777".into(),
                        format!("size={size}"),
                    ];
                    mount(dest, "tmpfs", "shm", o)?
                }
                KernelFs::Mqueue => mount(dest, "mqueue", "mqueue", strs(&["nosuid", "noexec", "nodev"]))?,
            },
            // Owned by the command's user, as the native backend's tmpfs
            // are (there through the mounter's ids or `uid=`).
            Role::Tmpfs { size, mode } => {
                let o = vec![
                    "nosuid".into(),
                    "nodev".into(),
                    format!("size={size}"),
                    format!("mode={mode:o}"),
                    format!("uid={uid}"),
                    format!("gid={gid}"),
                ];
                mount(dest, "tmpfs", "tmpfs", o)?
            }
            Role::Staged { path, read_only, .. } => {
                let access = if *read_only { "ro" } else { "rw" };
                mount(dest, "bind", path, strs(&["rbind", access, "nosuid", "nodev"]))?
            }
        };
        out.push(m);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostFacts;
    use crate::plan::{ImageDefaults, RootInput};
    use crate::rootfs::RootSource;
    use crate::spec::{Access, BindSpec, Spec};

    fn plan(spec: Spec) -> Plan {
        let root = RootInput { source: RootSource::Host, image: ImageDefaults::default(), passwd: None, group: None };
        Plan::build(spec, &HostFacts::probe(), root).expect("plan")
    }

    fn config(spec: Spec) -> serde_json::Value {
        let plan = plan(spec);
        let layout = super::super::layout::layout(&plan.mounts);
        let spec = render(&Inputs { plan: &plan, layout: &layout, seccomp: None, masked_file: "/run/husk/x/masked" })
            .expect("render");
        serde_json::to_value(&spec).unwrap()
    }

    fn mount_at<'a>(c: &'a serde_json::Value, dest: &str) -> &'a serde_json::Value {
        c["mounts"].as_array().unwrap().iter().find(|m| m["destination"] == dest).unwrap_or_else(|| {
            panic!("no mount at {dest}: {:#}", c["mounts"]);
        })
    }

    #[test]
    fn process_is_the_plans_process_with_no_privilege() {
        let mut s = Spec::new(vec!["sh".into(), "-c".into(), "echo hi".into()]);
        s.env.push(("FOO".into(), "bar".into()));
        s.user = Some("1000:1001".into());
        s.rlimits.push(crate::plan::parse_rlimit("nproc=50").unwrap());
        let c = config(s);
        let p = &c["process"];
        assert_eq!(p["args"], serde_json::json!(["sh", "-c", "echo hi"]));
        assert!(p["env"].as_array().unwrap().iter().any(|e| e == "FOO=bar"));
        assert!(p["env"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().starts_with("PATH=")));
        assert_eq!(p["cwd"], "/workspace");
        assert_eq!((p["user"]["uid"].as_u64(), p["user"]["gid"].as_u64()), (Some(1000), Some(1001)));
        assert_eq!(p["noNewPrivileges"], true);
        for set in ["bounding", "effective", "permitted", "inheritable", "ambient"] {
            assert_eq!(p["capabilities"][set], serde_json::json!([]), "{set}");
        }
        let rl = p["rlimits"].as_array().unwrap();
        let find = |t: &str| rl.iter().find(|r| r["type"] == t).cloned();
        assert_eq!(find("RLIMIT_CORE").unwrap()["hard"], 0);
        assert_eq!(find("RLIMIT_NOFILE").unwrap()["soft"], 1024);
        assert_eq!(find("RLIMIT_NPROC").unwrap()["soft"], 50);
        assert_eq!(c["hostname"], "husk");
        assert_eq!(c["root"]["readonly"], true);
        assert!(c["root"]["path"].as_str().unwrap().ends_with("/r"));
        let ns: Vec<&str> =
            c["linux"]["namespaces"].as_array().unwrap().iter().map(|n| n["type"].as_str().unwrap()).collect();
        assert_eq!(ns, ["pid", "ipc", "uts", "mount", "network"]);
        assert!(c["linux"].get("resources").is_none() && c["linux"].get("seccomp").is_none(), "{:#}", c["linux"]);
        assert_eq!(c["linux"]["maskedPaths"], serde_json::json!([]));
        assert!(c.get("annotations").is_none());
    }

    #[test]
    fn cap_add_is_the_only_capability() {
        let mut s = Spec::new(vec!["true".into()]);
        s.cap_add.push("NET_BIND_SERVICE".into());
        let c = config(s);
        assert_eq!(c["process"]["capabilities"]["bounding"], serde_json::json!(["CAP_NET_BIND_SERVICE"]));
        assert_eq!(c["process"]["capabilities"]["ambient"], serde_json::json!(["CAP_NET_BIND_SERVICE"]));
    }

    #[test]
    fn workdir_tmp_and_binds_keep_their_sizes_owners_and_access() {
        let mut s = Spec::new(vec!["true".into()]);
        s.workdir = Some("/work".into());
        s.workdir_size = 5 << 20;
        s.tmp_size = 7 << 20;
        s.user = Some("1000".into());
        s.binds.push(BindSpec { source: "/etc".into(), target: "/data".into(), access: Access::ReadWrite });
        s.binds.push(BindSpec { source: "/usr".into(), target: "/ro".into(), access: Access::ReadOnly });
        s.network = NetworkMode::Host;
        let c = config(s);
        assert_eq!(c["process"]["cwd"], "/work");
        let w = mount_at(&c, "/work");
        assert_eq!(w["type"], "tmpfs");
        let opts: Vec<&str> = w["options"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
        assert!(opts.contains(&"size=5242880") && opts.contains(&"uid=1000") && opts.contains(&"mode=755"), "{opts:?}");
        let t = mount_at(&c, "/tmp");
        assert!(t["options"].as_array().unwrap().iter().any(|o| o == "size=7340032"));
        assert!(t["options"].as_array().unwrap().iter().any(|o| o == "mode=1777"));
        let d = mount_at(&c, "/data");
        assert_eq!(d["type"], "bind");
        assert!(d["options"].as_array().unwrap().iter().any(|o| o == "rw"));
        assert!(mount_at(&c, "/ro")["options"].as_array().unwrap().iter().any(|o| o == "ro"));
        // Host mode: /usr and /etc come from husk's staging area, read-only.
        let usr = mount_at(&c, "/usr");
        assert!(usr["source"].as_str().unwrap().contains("/b"), "{usr}");
        assert!(usr["options"].as_array().unwrap().iter().any(|o| o == "ro"));
        assert_eq!(mount_at(&c, "/etc")["type"], "bind");
        assert_eq!(mount_at(&c, "/proc")["type"], "proc");
        // Host network: no network namespace, and no sysfs (as natively).
        let ns = c["linux"]["namespaces"].as_array().unwrap();
        assert!(!ns.iter().any(|n| n["type"] == "network"));
        assert!(!c["mounts"].as_array().unwrap().iter().any(|m| m["type"] == "sysfs"));
        // Mounts appear parents first: /usr before anything below it.
        let dests: Vec<&str> =
            c["mounts"].as_array().unwrap().iter().map(|m| m["destination"].as_str().unwrap()).collect();
        assert!(
            dests.iter().position(|d| *d == "/dev").unwrap() < dests.iter().position(|d| *d == "/dev/pts").unwrap()
        );
        // gVisor's extra devices are covered, read-only, right after /dev.
        let net = mount_at(&c, "/dev/net");
        assert_eq!(net["type"], "tmpfs");
        let fuse = mount_at(&c, "/dev/fuse");
        assert_eq!((fuse["type"].as_str(), fuse["source"].as_str()), (Some("bind"), Some("/run/husk/x/masked")));
        for m in [net, fuse] {
            assert!(m["options"].as_array().unwrap().iter().any(|o| o == "ro"), "{m}");
        }
    }

    #[test]
    fn limits_render_as_linux_resources() {
        let l = LimitSpec { memory: Some(64 << 20), cpus_milli: Some(1500), pids: Some(100), ..Default::default() };
        let r = serde_json::to_value(resources(&l).unwrap().unwrap()).unwrap();
        assert_eq!(r["memory"]["limit"], 64 << 20);
        assert_eq!((r["cpu"]["quota"].as_i64(), r["cpu"]["period"].as_u64()), (Some(150_000), Some(100_000)));
        assert_eq!(r["pids"]["limit"], 100);
        assert!(resources(&LimitSpec::default()).unwrap().is_none());
        let off = LimitSpec { memory: Some(1), no_cgroup: true, ..Default::default() };
        assert!(resources(&off).unwrap().is_none());
    }

    #[test]
    fn seccomp_slot_takes_an_oci_profile() {
        let p = serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}]
        });
        let s = serde_json::to_value(seccomp(Some(&p)).unwrap().unwrap()).unwrap();
        assert_eq!(s["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(s["syscalls"][0]["names"], serde_json::json!(["read", "write"]));
        assert!(seccomp(None).unwrap().is_none());
        assert!(seccomp(Some(&serde_json::json!({"defaultAction": 5}))).is_err());
    }
}
