//! Building the `MountPlan` on the host side: validate every target, place
//! every mount point, pre-build every string the child will need.

use super::resolve::{DirView, Kind, ResolveError, RootView, normalize_target, resolve};
use super::{
    Entry, MountKind, MountOp, MountPlan, OverlayPlan, RootPlan, RootReport, Source, UpperPlan, attrs, cstring, etc,
};
use crate::spec::{Access, BindSpec, NetworkMode, TmpfsSpec};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Host directories bound read-only in host mode (those that exist; a
/// usr-merge symlink is recreated as the same symlink).
const HOST_SYSTEM_DIRS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Paths under the host's /etc hidden in host mode (whited out in the /etc
/// overlay). SSH host keys are added by listing /etc/ssh.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssl/private",
    "security/opasswd",
    "krb5.keytab",
    "ipsec.secrets",
    "wireguard",
    "NetworkManager/system-connections",
    "credstore",
    "credstore.encrypted",
    "husk",
];

/// /proc entries that leak host information or offer host-wide controls.
const PROC_MASKED: &[&str] = &[
    "proc/kcore",
    "proc/keys",
    "proc/key-users",
    "proc/timer_list",
    "proc/timer_stats",
    "proc/sched_debug",
    "proc/latency_stats",
    "proc/sysrq-trigger",
    "proc/kmsg",
    "proc/kpagecount",
    "proc/kpageflags",
    "proc/kpagecgroup",
    "proc/config.gz",
    "proc/acpi",
    "proc/scsi",
    "proc/asound",
    "proc/driver",
    "proc/fs/nfsd",
];
const PROC_READONLY: &[&str] = &["proc/sys", "proc/bus", "proc/fs", "proc/irq"];
/// A fresh sysfs has no debugfs/securityfs mounted, so only these leak:
/// firmware tables (ACPI, DMI, EFI variables) and energy counters (a power
/// side channel, "Platypus").
const SYS_MASKED: &[&str] = &["sys/firmware", "sys/devices/virtual/powercap"];
const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
const DEV_LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];
/// Paths the user may not mount over: husk's own masks live there.
const RESERVED: &[&str] = &["proc", "dev", "sys"];

const SHM_SIZE: u64 = 64 << 20;
const STAGING_CANDIDATES: &[&str] = &["/tmp", "/mnt", "/var/tmp", "/run"];
/// mount(2) data is one page.
const MAX_MOUNT_DATA: usize = 4095;

#[derive(Debug, thiserror::Error)]
pub enum MountPlanError {
    #[error("{what} {path}: {why}")]
    BadTarget { what: &'static str, path: String, why: String },
    #[error("{what} {}: {source}", source.path)]
    Target { what: &'static str, source: super::resolve::TargetError },
    #[error("{what} {target} is given twice; each mount point may appear once")]
    Duplicate { what: &'static str, target: String },
    #[error("bind source {path:?}: {source}; give an existing host path")]
    BindSource { path: PathBuf, source: std::io::Error },
    #[error(
        "cannot create mount point /{target} inside {container} (a read-only host directory); create it on the host first or mount elsewhere"
    )]
    NoMountPoint { target: String, container: String },
    #[error("mount point /{target} is a {found:?} in the root but the source is a {wanted:?}")]
    WrongKind { target: String, found: Kind, wanted: Kind },
    #[error("resolving a mount point inside the root: {0}")]
    Resolve(#[from] ResolveError),
    #[error("rootfs {path:?}: {why}")]
    Rootfs { path: PathBuf, why: String },
    #[error("too many layers ({count}): the overlay option string exceeds one page")]
    TooManyLayers { count: usize },
    #[error("no directory to stage mounts on: none of {STAGING_CANDIDATES:?} exists on this host")]
    NoStaging,
}

/// Where `/` comes from, already resolved to host paths.
pub enum RootSource<'a> {
    Host,
    /// `--rootfs DIR`.
    Dir(PathBuf),
    /// Image layers, top first, and a view of their merged content.
    Layers {
        dirs: Vec<PathBuf>,
        view: Box<dyn RootView + 'a>,
        userxattr: bool,
        label: String,
    },
}

/// Everything `build` needs besides the root source.
pub struct RootInputs<'a> {
    pub hostname: &'a str,
    pub network: NetworkMode,
    /// Absolute path of the workdir inside the sandbox.
    pub workdir: &'a str,
    pub workdir_size: u64,
    pub tmp_size: u64,
    pub binds: &'a [BindSpec],
    pub tmpfs: &'a [TmpfsSpec],
    /// Inner owner of the workdir and /tmp-like mounts, when it is not the
    /// sandbox init's own ids (tmpfs roots default to the mounter's ids).
    pub owner: Option<(u32, u32)>,
    /// `tty` group for /dev/pts, when the id mapping covers gid 5.
    pub devpts_gid: Option<u32>,
    /// The root's writable upper layer, if any.
    pub upper: Upper,
    /// Host uid:gid of the sandbox's user, when `:rw` binds are idmapped
    /// onto it (privileged runs; see `Source::fold`).
    pub fold_to: Option<(u32, u32)>,
}

/// The root's writable layer, as the run asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upper {
    /// Read-only root.
    None,
    /// `--writable`: a tmpfs upper of this size, discarded at exit.
    Tmpfs(u64),
    /// A host directory kept after the run (`husk build`). /tmp and the
    /// workdir are then left on the root too (no tmpfs over them), so
    /// what a build step writes there lands in its layer, as in Docker.
    Keep(PathBuf),
}

impl Upper {
    fn is_none(&self) -> bool {
        *self == Upper::None
    }
}

/// What contains a mount point, deciding how it gets created.
#[derive(Clone, Debug)]
enum Container {
    /// The scaffold (tmpfs root, or overlay top layer): created before mounting.
    Scaffold,
    /// A fresh tmpfs mounted earlier: created by a `Create` op after it.
    Tmpfs,
    /// A read-only tree from the host or a bind: must already exist there.
    HostTree(PathBuf),
    /// The host-mode /etc overlay: created in its top layer.
    EtcOverlay,
}

struct Placer {
    /// (target, container) of every mount planned so far.
    mounts: Vec<(String, Container)>,
    scaffold: Vec<Entry>,
    scaffold_paths: BTreeSet<String>,
    etc_top: Vec<Entry>,
    etc_paths: BTreeSet<String>,
}

impl Placer {
    fn container_of(&self, target: &str) -> (String, Container) {
        self.mounts
            .iter()
            .filter(|(t, _)| t.is_empty() || target == t || target.starts_with(&format!("{t}/")))
            .max_by_key(|(t, _)| t.len())
            .map(|(t, c)| (t.clone(), c.clone()))
            .unwrap_or_else(|| (String::new(), Container::Scaffold))
    }

    fn add_entry(entries: &mut Vec<Entry>, seen: &mut BTreeSet<String>, path: &str, kind: Kind) {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        for i in 1..=comps.len() {
            let p = comps[..i].join("/");
            if !seen.insert(p.clone()) {
                continue;
            }
            let entry = if i < comps.len() || kind == Kind::Dir {
                Entry::Dir { path: cstring(&p), mode: 0o755 }
            } else {
                Entry::File { path: cstring(&p), mode: 0o644, data: Vec::new() }
            };
            entries.push(entry);
        }
    }

    /// Makes sure `target` exists with `kind` when its mount runs; returns
    /// ops that create it inside a tmpfs (to run just before the mount).
    fn place(&mut self, target: &str, kind: Kind) -> Result<Vec<MountOp>, MountPlanError> {
        let (ctarget, container) = self.container_of(target);
        let rel = target.strip_prefix(&ctarget).unwrap_or(target).trim_start_matches('/');
        match container {
            Container::Scaffold => {
                Self::add_entry(&mut self.scaffold, &mut self.scaffold_paths, target, kind);
                Ok(Vec::new())
            }
            Container::EtcOverlay => {
                let sub = target.strip_prefix("etc/").unwrap_or("");
                Self::add_entry(&mut self.etc_top, &mut self.etc_paths, sub, kind);
                Ok(Vec::new())
            }
            Container::Tmpfs => {
                let mut ops = Vec::new();
                let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
                for i in 1..=comps.len() {
                    let p = format!("{ctarget}/{}", comps[..i].join("/"));
                    let entry = if i < comps.len() || kind == Kind::Dir {
                        Entry::Dir { path: cstring(&p), mode: 0o755 }
                    } else {
                        Entry::File { path: cstring(&p), mode: 0o644, data: Vec::new() }
                    };
                    ops.push(MountOp { target: cstring(&p), kind: MountKind::Create(entry), optional: true });
                }
                Ok(ops)
            }
            Container::HostTree(host) => {
                let found = DirView(host.clone()).kind(&format!("/{rel}"));
                match found {
                    None => {
                        Err(MountPlanError::NoMountPoint { target: target.into(), container: format!("/{ctarget}") })
                    }
                    Some(k) if (k == Kind::Dir) != (kind == Kind::Dir) => {
                        Err(MountPlanError::WrongKind { target: target.into(), found: k, wanted: kind })
                    }
                    Some(_) => Ok(Vec::new()),
                }
            }
        }
    }
}

/// Builds the mount plan. `source` decides the root; `inputs` the rest.
pub fn build(source: RootSource<'_>, inputs: &RootInputs<'_>) -> Result<MountPlan, MountPlanError> {
    let staging = STAGING_CANDIDATES.iter().find(|p| Path::new(p).is_dir()).ok_or(MountPlanError::NoStaging)?;
    let workdir =
        normalize_target(inputs.workdir).map_err(|source| MountPlanError::Target { what: "workdir", source })?;
    if workdir.is_empty() || is_reserved(&workdir) {
        return Err(MountPlanError::BadTarget {
            what: "workdir",
            path: inputs.workdir.into(),
            why: "must not be /, /proc, /dev or /sys".into(),
        });
    }

    let mut placer = Placer {
        mounts: vec![(String::new(), Container::Scaffold)],
        scaffold: Vec::new(),
        scaffold_paths: BTreeSet::new(),
        etc_top: Vec::new(),
        etc_paths: BTreeSet::new(),
    };
    let mut ops: Vec<MountOp> = Vec::new();
    let empty_view = super::resolve::EmptyView;
    let dir_view;
    let (view, report): (&dyn RootView, RootReport) = match &source {
        RootSource::Host => {
            plan_host_dirs(&mut placer, &mut ops)?;
            (
                &empty_view,
                RootReport { mode: "host".into(), source: None, read_only: true, writable_layer: false, layers: 0 },
            )
        }
        RootSource::Dir(dir) => {
            let md = std::fs::metadata(dir).map_err(|e| MountPlanError::Rootfs {
                path: dir.clone(),
                why: format!("{e}; give an existing directory"),
            })?;
            if !md.is_dir() {
                return Err(MountPlanError::Rootfs { path: dir.clone(), why: "not a directory".into() });
            }
            dir_view = DirView(dir.clone());
            let report = RootReport {
                mode: "rootfs".into(),
                source: Some(dir.display().to_string()),
                read_only: inputs.upper.is_none(),
                writable_layer: !inputs.upper.is_none(),
                layers: 1,
            };
            (&dir_view, report)
        }
        RootSource::Layers { view, dirs, label, .. } => (
            view.as_ref(),
            RootReport {
                mode: "image".into(),
                source: Some(label.clone()),
                read_only: inputs.upper.is_none(),
                writable_layer: !inputs.upper.is_none(),
                layers: dirs.len(),
            },
        ),
    };
    let host_mode = matches!(source, RootSource::Host);

    // Places a target: in host mode paths are literal (the root is ours);
    // otherwise they are canonicalized inside the image/rootfs first.
    let canonical = |t: &str| -> Result<(String, Option<Kind>), MountPlanError> {
        if host_mode {
            return Ok((t.to_string(), None));
        }
        let r = resolve(view, &format!("/{t}"))?;
        Ok((r.path.trim_start_matches('/').to_string(), r.kind))
    };

    // System mounts.
    let sys_flags = attrs::NOSUID | attrs::NODEV | attrs::NOEXEC;
    let system = |placer: &mut Placer, ops: &mut Vec<MountOp>, target: &str, kind: MountKind, c: Container| {
        let (t, _) = canonical(target)?;
        ops.extend(placer.place(&t, Kind::Dir)?);
        placer.mounts.push((t.clone(), c));
        ops.push(MountOp { target: cstring(&t), kind, optional: false });
        Ok::<String, MountPlanError>(t)
    };
    let proc_t = system(&mut placer, &mut ops, "proc", MountKind::Proc, Container::HostTree("/proc".into()))?;
    // Read-only rebinds first: each clones its subtree recursively, so a
    // mask made before one (proc/fs/nfsd under proc/fs) would be copied
    // into it and leave a second, hidden mount behind the visible one.
    for m in PROC_READONLY {
        ops.push(MountOp { target: cstring(&rebase(m, "proc", &proc_t)), kind: MountKind::ReadOnly, optional: true });
    }
    for m in PROC_MASKED {
        ops.push(MountOp { target: cstring(&rebase(m, "proc", &proc_t)), kind: MountKind::Mask, optional: true });
    }

    let dev_t = system(
        &mut placer,
        &mut ops,
        "dev",
        MountKind::Tmpfs { size: 64 << 10, mode: 0o755, owner: None, attrs: sys_flags },
        Container::Tmpfs,
    )?;
    plan_dev(&mut ops, &dev_t, inputs.devpts_gid);

    let mut etc_op = None;
    if host_mode {
        plan_host_etc(&mut placer, &mut ops, inputs)?;
        etc_op = Some(ops.len());
        ops.push(MountOp { target: cstring("etc"), kind: MountKind::SetReadOnly, optional: false });
    } else {
        plan_root_etc(&mut placer, view, inputs)?;
    }

    // /tmp, the workdir and user mounts, parents before children.
    let mut user: Vec<(String, Kind, MountKind, &'static str)> = Vec::new();
    let tmpfs_kind = |size: u64, mode: u32| MountKind::Tmpfs {
        size,
        mode,
        owner: inputs.owner,
        attrs: attrs::NOSUID | attrs::NODEV,
    };
    if matches!(inputs.upper, Upper::Keep(_)) {
        // The workdir must still exist for the command's cwd; it is made
        // in the scaffold when the image lacks it.
        let (t, _) = canonical(&workdir)?;
        ops.extend(placer.place(&t, Kind::Dir)?);
    } else {
        user.push(("tmp".into(), Kind::Dir, tmpfs_kind(inputs.tmp_size, 0o1777), "/tmp"));
        user.push((
            workdir.clone(),
            Kind::Dir,
            workdir_mount(&source, view, staging, &canonical(&workdir)?.0, inputs)?,
            "workdir",
        ));
    }
    for t in inputs.tmpfs {
        let target = checked_target("--tmpfs", &t.target)?;
        user.push((target, Kind::Dir, tmpfs_kind(t.size, 0o1777), "--tmpfs"));
    }
    for b in inputs.binds {
        let target = checked_target("--bind", &b.target)?;
        let md = std::fs::metadata(&b.source)
            .map_err(|source| MountPlanError::BindSource { path: b.source.clone(), source })?;
        let kind = if md.is_dir() { Kind::Dir } else { Kind::File };
        let mut a = attrs::NOSUID | attrs::NODEV;
        if b.access == Access::ReadOnly {
            a |= attrs::RDONLY;
        }
        let src = b.source.to_str().ok_or_else(|| MountPlanError::BadTarget {
            what: "--bind source",
            path: b.source.display().to_string(),
            why: "is not valid UTF-8".into(),
        })?;
        let mut source = Source::new(src, true);
        if b.access == Access::ReadWrite {
            source.fold = fold_for(&md, inputs.fold_to);
            if source.fold.is_none() {
                warn_unwritable_root_bind(&b.source, &md, inputs.fold_to);
            }
        }
        user.push((target, kind, MountKind::Bind { source, attrs: a }, "--bind"));
    }
    let mut seen = BTreeSet::new();
    let mut resolved = Vec::new();
    for (target, kind, mk, what) in user {
        let (canon, _) = canonical(&target)?;
        // A symlink in the image (or rootfs) must not carry a mount into
        // husk's /proc, /dev or /sys (the image-config-path shape of
        // CVE-2022-23648, e.g. WorkingDir /w with /w -> /proc/sys).
        if !host_mode && is_reserved(&canon) {
            return Err(MountPlanError::BadTarget {
                what,
                path: format!("/{target}"),
                why: format!("resolves to /{canon} inside the root, under /proc, /dev or /sys (husk manages those)"),
            });
        }
        if !seen.insert(canon.clone()) {
            return Err(MountPlanError::Duplicate { what, target: format!("/{target}") });
        }
        resolved.push((canon, kind, mk));
    }
    resolved.sort_by_key(|(t, _, _)| t.matches('/').count() + usize::from(!t.is_empty()));
    for (target, kind, mk) in resolved {
        ops.extend(placer.place(&target, kind)?);
        let container = match &mk {
            MountKind::Bind { source, .. } => Container::HostTree(PathBuf::from(source.path.to_str().unwrap_or("/"))),
            _ => Container::Tmpfs,
        };
        placer.mounts.push((target.clone(), container));
        ops.push(MountOp { target: cstring(&target), kind: mk, optional: false });
    }
    if inputs.network == NetworkMode::None {
        // A fresh sysfs needs a network namespace of our own (sysfs shows
        // the mounter's network devices); with the host's network, /sys
        // stays an empty directory. No user mount can lie under /sys
        // (RESERVED), so nothing mounted earlier is covered.
        let sys_t = system(&mut placer, &mut ops, "sys", MountKind::Sysfs, Container::HostTree("/sys".into()))?;
        for m in SYS_MASKED {
            ops.push(MountOp { target: cstring(&rebase(m, "sys", &sys_t)), kind: MountKind::Mask, optional: true });
        }
    } else {
        let (t, _) = canonical("sys")?;
        ops.extend(placer.place(&t, Kind::Dir)?);
    }
    ops.push(MountOp { target: cstring(&dev_t), kind: MountKind::SetReadOnly, optional: false });

    if let Some(i) = etc_op {
        let etc = overlay(staging, std::mem::take(&mut placer.etc_top), vec!["/etc".into()], false, &Upper::None, 1)?;
        ops[i].kind = MountKind::Overlay(etc);
    }
    let (workdir_canon, _) = canonical(&workdir)?;
    let root = match source {
        RootSource::Host => RootPlan::Tmpfs { entries: placer.scaffold },
        RootSource::Dir(dir) => {
            RootPlan::Overlay(overlay(staging, placer.scaffold, vec![dir], false, &inputs.upper, 0)?)
        }
        RootSource::Layers { dirs, userxattr, .. } => {
            RootPlan::Overlay(overlay(staging, placer.scaffold, dirs, userxattr, &inputs.upper, 0)?)
        }
    };
    Ok(MountPlan {
        staging: cstring(staging),
        root_mountpoint: cstring(&format!("{staging}/r")),
        root,
        ops,
        workdir: cstring(&format!("/{workdir_canon}")),
        report,
    })
}

/// The workdir's mount: a tmpfs, unless the image has files there (a
/// `COPY` into its `WORKDIR`, a committed or forked sandbox's workdir):
/// then an overlay of the layers' copies of that directory under a tmpfs
/// upper of the same size, so those files show and writes stay in memory.
fn workdir_mount(
    source: &RootSource<'_>,
    view: &dyn RootView,
    staging: &str,
    canon: &str,
    inputs: &RootInputs<'_>,
) -> Result<MountKind, MountPlanError> {
    let tmpfs = MountKind::Tmpfs {
        size: inputs.workdir_size,
        mode: 0o755,
        owner: inputs.owner,
        attrs: attrs::NOSUID | attrs::NODEV,
    };
    let RootSource::Layers { dirs, userxattr, .. } = source else {
        return Ok(tmpfs);
    };
    let layers = view.populated_dir_layers(&format!("/{canon}"));
    if layers.is_empty() {
        return Ok(tmpfs);
    }
    let lowers = layers.iter().map(|&i| dirs[i].join(canon)).collect();
    let mut ov = overlay(staging, Vec::new(), lowers, *userxattr, &Upper::Tmpfs(inputs.workdir_size), 2)?;
    ov.upper = Some(UpperPlan::Tmpfs { size: inputs.workdir_size, owner: inputs.owner });
    Ok(MountKind::Overlay(ov))
}

/// The idmap of a `:rw` bind: its owner folded onto the sandbox's user, so
/// sandbox root (or `--user`) writes there as the owner, as Docker users
/// expect. Not for a source host root owns (uid or gid 0): folding host
/// root in would let the sandbox create files as host root (a setuid-root
/// binary for the host to run); such a bind stays plain, the sandbox
/// writing as its own unprivileged host uid where the mode lets it.
fn fold_for(md: &std::fs::Metadata, to: Option<(u32, u32)>) -> Option<crate::userns::IdFold> {
    use std::os::unix::fs::MetadataExt;
    let (to_uid, to_gid) = to?;
    (md.uid() != 0 && md.gid() != 0).then_some(crate::userns::IdFold {
        from_uid: md.uid(),
        from_gid: md.gid(),
        to_uid,
        to_gid,
    })
}

/// A `:rw` bind of a directory host root owns is not idmapped (`fold_for`),
/// so unless its mode lets everyone write, the sandbox's root cannot write
/// there: Docker users expect it to, and would otherwise meet a bare EACCES
/// inside. Said once, before the run, with the two ways to fix it.
fn warn_unwritable_root_bind(source: &std::path::Path, md: &std::fs::Metadata, to: Option<(u32, u32)>) {
    use std::os::unix::fs::MetadataExt;
    let Some((uid, _)) = to else { return };
    if !md.is_dir() || (md.uid() != 0 && md.gid() != 0) || md.mode() & 0o002 != 0 {
        return;
    }
    crate::errln!(
        "husk: warning: --bind {src}:rw: the directory belongs to host root ({}:{}, mode {:o}), which husk never maps into a sandbox, so the sandbox's root (host uid {uid}) cannot write there; to let it, give the directory an unprivileged owner (`chown 1000:1000 {src}`: the sandbox's user then writes as 1000) or make it writable for all (`chmod o+w {src}`)",
        md.uid(),
        md.gid(),
        md.mode() & 0o7777,
        src = source.display(),
    );
}

fn is_reserved(target: &str) -> bool {
    RESERVED.iter().any(|r| target == *r || target.starts_with(&format!("{r}/")))
}

fn checked_target(what: &'static str, raw: &str) -> Result<String, MountPlanError> {
    let t = normalize_target(raw).map_err(|source| MountPlanError::Target { what, source })?;
    if t.is_empty() || is_reserved(&t) {
        return Err(MountPlanError::BadTarget {
            what,
            path: raw.into(),
            why: "must not be /, or under /proc, /dev or /sys (husk manages those)".into(),
        });
    }
    Ok(t)
}

/// "proc/kcore" with the proc mount at canonical `proc_t`.
fn rebase(path: &str, from: &str, to: &str) -> String {
    format!("{to}{}", &path[from.len()..])
}

/// An overlay over `lowers` (top first) with `top` as the fresh top layer.
/// `n` disambiguates staging names when several overlays are planned.
fn overlay(
    staging: &str,
    top: Vec<Entry>,
    lowers: Vec<PathBuf>,
    userxattr: bool,
    upper: &Upper,
    n: usize,
) -> Result<OverlayPlan, MountPlanError> {
    let top_dir = format!("s{n}");
    let mut names = Vec::new();
    let mut sources = Vec::new();
    for (i, dir) in lowers.iter().enumerate() {
        let name = format!("l{n}/{i}");
        names.push(format!("{staging}/{name}"));
        sources.push((cstring(&name), Source::new(dir.to_str().unwrap_or_default(), false)));
    }
    let mut options = format!("lowerdir={staging}/{top_dir}:{}", names.join(":"));
    let upper = match upper {
        Upper::None => None,
        Upper::Tmpfs(size) => Some(UpperPlan::Tmpfs { size: *size, owner: None }),
        Upper::Keep(dir) => Some(UpperPlan::Keep(Source::new(
            dir.to_str()
                .ok_or_else(|| MountPlanError::Rootfs { path: dir.clone(), why: "is not valid UTF-8".into() })?,
            false,
        ))),
    };
    let upper_dirs = upper.as_ref().map(|_| {
        let m = format!("w{n}");
        options.push_str(&format!(",upperdir={staging}/{m}/u,workdir={staging}/{m}/w"));
        (cstring(&m), cstring(&format!("{m}/u")), cstring(&format!("{m}/w")))
    });
    if userxattr {
        options.push_str(",userxattr");
    }
    if options.len() > MAX_MOUNT_DATA {
        return Err(MountPlanError::TooManyLayers { count: lowers.len() });
    }
    Ok(OverlayPlan { top, top_dir: cstring(&top_dir), lowers: sources, upper, upper_dirs, options: cstring(&options) })
}

fn plan_host_dirs(placer: &mut Placer, ops: &mut Vec<MountOp>) -> Result<(), MountPlanError> {
    for name in HOST_SYSTEM_DIRS {
        let host = Path::new("/").join(name);
        let Ok(md) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        if md.file_type().is_symlink() {
            let Ok(target) = std::fs::read_link(&host) else {
                continue;
            };
            placer.scaffold_paths.insert(name.to_string());
            placer.scaffold.push(Entry::Symlink { path: cstring(name), target: cstring(&target.to_string_lossy()) });
        } else if md.is_dir() {
            ops.extend(placer.place(name, Kind::Dir)?);
            placer.mounts.push((name.to_string(), Container::HostTree(host.clone())));
            ops.push(MountOp {
                target: cstring(name),
                kind: MountKind::Bind {
                    source: Source::new(host.to_str().unwrap_or_default(), true),
                    attrs: attrs::RDONLY | attrs::NOSUID | attrs::NODEV,
                },
                optional: false,
            });
        }
    }
    // Conventional empty directories a host-mode root should have.
    for d in ["root", "run", "var", "var/tmp", "home", "mnt", "opt", "srv"] {
        placer.place(d, Kind::Dir)?;
    }
    Ok(())
}

/// Host mode: /etc is an overlay of husk's files and whiteouts over the
/// host's /etc.
fn plan_host_etc(placer: &mut Placer, ops: &mut Vec<MountOp>, inputs: &RootInputs<'_>) -> Result<(), MountPlanError> {
    ops.extend(placer.place("etc", Kind::Dir)?);
    let mut top = vec![
        file("hosts", etc::hosts(inputs.hostname)),
        file("hostname", etc::hostname(inputs.hostname)),
        file("resolv.conf", etc::resolv_conf(inputs.network)),
    ];
    let mut secrets: Vec<String> = ETC_SECRETS.iter().map(|s| s.to_string()).collect();
    if let Ok(rd) = std::fs::read_dir("/etc/ssh") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with("ssh_host_") && n.ends_with("_key") {
                secrets.push(format!("ssh/{n}"));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for s in secrets {
        if std::fs::symlink_metadata(Path::new("/etc").join(&s)).is_err() {
            continue;
        }
        if let Some((parent, _)) = s.rsplit_once('/') {
            Placer::add_entry(&mut top, &mut seen, parent, Kind::Dir);
        }
        top.push(Entry::Whiteout { path: cstring(&s) });
    }
    placer.etc_top = top;
    placer.etc_paths = seen;
    placer.mounts.push(("etc".into(), Container::EtcOverlay));
    Ok(())
}

/// Image / rootfs mode: husk's /etc files go into the scaffold layer at
/// their canonical locations; passwd/group/nsswitch only where missing.
fn plan_root_etc(placer: &mut Placer, view: &dyn RootView, inputs: &RootInputs<'_>) -> Result<(), MountPlanError> {
    let mut files = vec![
        ("etc/hosts", etc::hosts(inputs.hostname), true),
        ("etc/hostname", etc::hostname(inputs.hostname), true),
        ("etc/resolv.conf", etc::resolv_conf(inputs.network), true),
        ("etc/passwd", etc::PASSWD.to_string(), false),
        ("etc/group", etc::GROUP.to_string(), false),
        ("etc/nsswitch.conf", etc::NSSWITCH.to_string(), false),
    ];
    for (path, data, always) in files.drain(..) {
        let r = resolve(view, &format!("/{path}"))?;
        if !always && r.kind.is_some() {
            continue;
        }
        let canon = r.path.trim_start_matches('/').to_string();
        if let Some((parent, _)) = canon.rsplit_once('/') {
            Placer::add_entry(&mut placer.scaffold, &mut placer.scaffold_paths, parent, Kind::Dir);
        }
        if placer.scaffold_paths.insert(canon.clone()) {
            placer.scaffold.push(Entry::File { path: cstring(&canon), mode: 0o644, data: data.into_bytes() });
        }
    }
    Ok(())
}

fn file(path: &str, data: String) -> Entry {
    Entry::File { path: cstring(path), mode: 0o644, data: data.into_bytes() }
}

fn plan_dev(ops: &mut Vec<MountOp>, dev: &str, devpts_gid: Option<u32>) {
    // All of /dev's own entries in one op: one directory fd, no per-entry
    // path resolution.
    let mut entries: Vec<Entry> =
        ["pts", "shm", "mqueue"].iter().map(|d| Entry::Dir { path: cstring(d), mode: 0o755 }).collect();
    entries.extend(DEV_NODES.iter().map(|n| Entry::File { path: cstring(n), mode: 0o666, data: Vec::new() }));
    entries.extend(DEV_LINKS.iter().map(|(n, t)| Entry::Symlink { path: cstring(n), target: cstring(t) }));
    ops.push(MountOp { target: cstring(dev), kind: MountKind::Populate(entries), optional: false });
    for n in DEV_NODES {
        let path = format!("{dev}/{n}");
        ops.push(MountOp {
            target: cstring(&path),
            kind: MountKind::Bind {
                source: Source::new(&format!("/dev/{n}"), false),
                attrs: attrs::NOSUID | attrs::NOEXEC,
            },
            optional: false,
        });
    }
    let flags = attrs::NOSUID | attrs::NOEXEC;
    ops.push(MountOp {
        target: cstring(&format!("{dev}/pts")),
        kind: MountKind::Devpts { gid: devpts_gid },
        optional: false,
    });
    ops.push(MountOp {
        target: cstring(&format!("{dev}/shm")),
        kind: MountKind::Tmpfs { size: SHM_SIZE, mode: 0o1777, owner: None, attrs: flags | attrs::NODEV },
        optional: false,
    });
    ops.push(MountOp { target: cstring(&format!("{dev}/mqueue")), kind: MountKind::Mqueue, optional: false });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mount plan of a host-mode run with these extra mounts.
    fn host_plan(binds: &[BindSpec], tmpfs: &[TmpfsSpec]) -> MountPlan {
        let inputs = RootInputs {
            hostname: "husk",
            network: NetworkMode::None,
            workdir: "/workspace",
            workdir_size: 1 << 20,
            tmp_size: 1 << 20,
            binds,
            tmpfs,
            owner: None,
            devpts_gid: None,
            upper: Upper::None,
            fold_to: None,
        };
        build(RootSource::Host, &inputs).expect("host plan")
    }

    /// The init waits for its network namespace right before sysfs; every
    /// other mount must come first so that wait overlaps with real work.
    #[test]
    fn sysfs_is_mounted_after_everything_but_the_dev_seal() {
        let binds = [BindSpec { source: "/usr".into(), target: "/data".into(), access: Access::ReadOnly }];
        let tmpfs = [TmpfsSpec { target: "/scratch".into(), size: 1 << 20 }];
        let plan = host_plan(&binds, &tmpfs);
        let kinds: Vec<&MountKind> = plan.ops.iter().map(|o| &o.kind).collect();
        let sysfs = kinds.iter().position(|k| matches!(k, MountKind::Sysfs)).expect("a sysfs op");
        let rest = &kinds[sysfs + 1..];
        assert!(
            rest.iter().all(|k| matches!(k, MountKind::Mask | MountKind::SetReadOnly | MountKind::Create(_))),
            "only sysfs's masks and the /dev seal may follow it: {rest:?}"
        );
        assert!(matches!(kinds.last(), Some(MountKind::SetReadOnly)));
    }

    /// A read-only rebind clones its subtree: a mask planned before it
    /// under its target is mounted twice (one copy hidden), so every
    /// rebind must precede the masks below it.
    #[test]
    fn no_mask_is_copied_by_a_later_read_only_rebind() {
        let plan = host_plan(&[], &[]);
        let path = |o: &MountOp| o.target.to_string_lossy().into_owned();
        let mut nested = 0;
        for (i, mask) in plan.ops.iter().enumerate().filter(|(_, o)| matches!(o.kind, MountKind::Mask)) {
            for rebind in plan.ops[i + 1..].iter().filter(|o| matches!(o.kind, MountKind::ReadOnly)) {
                assert!(
                    !path(mask).starts_with(&format!("{}/", path(rebind))),
                    "mask {} is planned before the read-only rebind of {}",
                    path(mask),
                    path(rebind)
                );
            }
            nested += plan.ops[..i]
                .iter()
                .filter(|o| matches!(o.kind, MountKind::ReadOnly) && path(mask).starts_with(&format!("{}/", path(o))))
                .count();
        }
        assert!(nested > 0, "proc/fs/nfsd lies under proc/fs: the test must see one nested mask");
    }
}
