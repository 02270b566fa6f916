//! How the plan's mount ops map onto runsc: which filesystems gVisor's own
//! kernel provides (/proc, /dev, /sys), which host trees husk mounts in its
//! staging area for runsc to serve as OCI bind mounts, and which tmpfs
//! become OCI tmpfs mounts. Derived from the same `MountPlan` the native
//! backend executes, so both backends see the same mounts at the same
//! (canonical) targets.

use crate::rootfs::attrs::RDONLY;
use crate::rootfs::{Entry, MountKind, MountPlan, RootPlan};
use std::ffi::CString;

/// A filesystem of the sandbox's kernel: gVisor implements these itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelFs {
    Proc,
    Sysfs,
    /// The /dev tmpfs.
    Dev {
        size: u64,
    },
    Devpts {
        gid: Option<u32>,
    },
    /// /dev/shm.
    Shm {
        size: u64,
    },
    Mqueue,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A filesystem gVisor's kernel provides, rendered as an OCI mount.
    Kernel(KernelFs),
    /// A host tree (bind) or overlay, mounted by husk at `name` in its
    /// staging area and bound by runsc from `path` there.
    Staged { name: CString, path: String, read_only: bool },
    /// A tmpfs of the sandbox (gVisor's own, size-bounded).
    Tmpfs { size: u64, mode: u32 },
    /// Nothing to do under runsc: /proc masks and read-only remounts (its
    /// /proc is synthetic and has none of the host's files), /dev nodes
    /// (gVisor provides them), mount points inside a tmpfs (runsc creates
    /// them) and read-only remounts (OCI options carry `ro`).
    Skip,
}

impl Role {
    pub fn is_staged(&self) -> bool {
        matches!(self, Role::Staged { .. })
    }
}

/// One role per op of the plan, in the plan's order.
#[derive(Debug)]
pub struct Layout {
    pub roles: Vec<Role>,
    /// Absolute path of the root in the staging area (`root.path`).
    pub root_path: String,
}

/// Targets of the kernel filesystems, found from the ops that mount them
/// (the planner places /proc, /dev and /sys at their canonical paths).
fn kernel_roots(plan: &MountPlan) -> Vec<String> {
    let mut roots = Vec::new();
    for op in &plan.ops {
        let t = op.target.to_string_lossy();
        match &op.kind {
            MountKind::Proc | MountKind::Sysfs => roots.push(t.into_owned()),
            MountKind::Devpts { .. } => {
                if let Some((dev, _)) = t.rsplit_once('/') {
                    roots.push(dev.to_string());
                }
            }
            _ => {}
        }
    }
    roots
}

fn under(target: &str, roots: &[String]) -> Option<usize> {
    roots.iter().position(|r| target == r || target.starts_with(&format!("{r}/")))
}

pub fn layout(plan: &MountPlan) -> Layout {
    let staging = plan.staging.to_string_lossy().into_owned();
    let roots = kernel_roots(plan);
    let roles = plan
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let target = op.target.to_string_lossy();
            if let Some(r) = under(&target, &roots) {
                let top = target == roots[r];
                return Role::Kernel(match &op.kind {
                    MountKind::Proc => KernelFs::Proc,
                    MountKind::Sysfs => KernelFs::Sysfs,
                    MountKind::Tmpfs { size, .. } if top => KernelFs::Dev { size: *size },
                    MountKind::Tmpfs { size, .. } => KernelFs::Shm { size: *size },
                    MountKind::Devpts { gid } => KernelFs::Devpts { gid: *gid },
                    MountKind::Mqueue => KernelFs::Mqueue,
                    _ => return Role::Skip,
                });
            }
            match &op.kind {
                MountKind::Bind { attrs, .. } => staged(&staging, i, attrs & RDONLY != 0),
                MountKind::Overlay(ov) => staged(&staging, i, ov.upper.is_none()),
                MountKind::Tmpfs { size, mode, .. } => Role::Tmpfs { size: *size, mode: *mode },
                _ => Role::Skip,
            }
        })
        .collect();
    Layout { roles, root_path: plan.root_mountpoint.to_string_lossy().into_owned() }
}

/// Mount points the planner creates inside a tmpfs (a bind at /data/sub
/// under `--tmpfs /data`) also go into the root's scaffold under runsc:
/// its gofer mounts every bind inside its own view of the root directory,
/// where they must already exist (the root is read-only to it), while the
/// sandbox sees them under gVisor's tmpfs as natively.
pub fn scaffold_mount_points(plan: &mut MountPlan) {
    let mut entries: Vec<Entry> = plan
        .ops
        .iter()
        .filter_map(|op| if let MountKind::Create(e) = &op.kind { Some(e.clone()) } else { None })
        .collect();
    // The mount points of what covers gVisor's extra devices (`bundle`'s
    // /dev mounts): runsc's gofer mounts a bind at its target in the root.
    let dev = plan.ops.iter().find_map(|op| match op.kind {
        MountKind::Devpts { .. } => {
            op.target.to_str().ok().and_then(|t| t.rsplit_once('/')).map(|(d, _)| d.to_string())
        }
        _ => None,
    });
    if let Some(dev) = dev {
        let path = |name: &str| CString::new(format!("{dev}/{name}")).unwrap_or_default();
        entries.push(Entry::Dir { path: path("net"), mode: 0o755 });
        entries.push(Entry::File { path: path("fuse"), mode: 0o444, data: Vec::new() });
    }
    let scaffold = match &mut plan.root {
        RootPlan::Tmpfs { entries } => entries,
        RootPlan::Overlay(ov) => &mut ov.top,
    };
    for e in entries {
        if !scaffold.iter().any(|x| x.path() == e.path()) {
            scaffold.push(e);
        }
    }
}

fn staged(staging: &str, i: usize, read_only: bool) -> Role {
    let name = format!("b{i}");
    Role::Staged { path: format!("{staging}/{name}"), name: CString::new(name).unwrap_or_default(), read_only }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::plan::RootInputs;
    use crate::rootfs::{RootSource, build};
    use crate::spec::{Access, BindSpec, NetworkMode, TmpfsSpec};

    fn plan_for(source: RootSource<'_>, network: NetworkMode, binds: &[BindSpec], tmpfs: &[TmpfsSpec]) -> MountPlan {
        let inputs = RootInputs {
            hostname: "husk",
            network,
            workdir: "/workspace",
            workdir_size: 1 << 20,
            tmp_size: 2 << 20,
            binds,
            tmpfs,
            owner: None,
            devpts_gid: None,
            upper: crate::rootfs::plan::Upper::None,
            fold_to: None,
        };
        build(source, &inputs).expect("plan")
    }

    fn role_at<'a>(plan: &MountPlan, l: &'a Layout, target: &str) -> Vec<&'a Role> {
        plan.ops.iter().zip(&l.roles).filter(|(op, _)| op.target.to_str() == Ok(target)).map(|(_, r)| r).collect()
    }

    #[test]
    fn host_mode_stages_system_dirs_and_etc_and_leaves_kernel_fs_to_gvisor() {
        let binds = [BindSpec { source: "/etc/hostname".into(), target: "/data/h".into(), access: Access::ReadWrite }];
        let tmpfs = [TmpfsSpec { target: "/data".into(), size: 3 << 20 }];
        let plan = plan_for(RootSource::Host, NetworkMode::None, &binds, &tmpfs);
        let l = layout(&plan);
        assert_eq!(l.roles.len(), plan.ops.len());
        assert_eq!(role_at(&plan, &l, "proc"), vec![&Role::Kernel(KernelFs::Proc)]);
        assert_eq!(role_at(&plan, &l, "sys"), vec![&Role::Kernel(KernelFs::Sysfs)]);
        assert!(role_at(&plan, &l, "dev").contains(&&Role::Kernel(KernelFs::Dev { size: 64 << 10 })));
        assert_eq!(role_at(&plan, &l, "dev/null"), vec![&Role::Skip]);
        assert_eq!(role_at(&plan, &l, "proc/kcore"), vec![&Role::Skip]);
        assert!(matches!(role_at(&plan, &l, "dev/shm")[0], Role::Kernel(KernelFs::Shm { .. })));
        assert!(matches!(role_at(&plan, &l, "usr")[0], Role::Staged { read_only: true, .. }));
        assert!(matches!(role_at(&plan, &l, "etc")[0], Role::Staged { read_only: true, .. }));
        assert_eq!(role_at(&plan, &l, "tmp"), vec![&Role::Tmpfs { size: 2 << 20, mode: 0o1777 }]);
        assert_eq!(role_at(&plan, &l, "workspace"), vec![&Role::Tmpfs { size: 1 << 20, mode: 0o755 }]);
        assert_eq!(role_at(&plan, &l, "data"), vec![&Role::Tmpfs { size: 3 << 20, mode: 0o1777 }]);
        // The user's rw bind: staged writable; its mount point inside the
        // /data tmpfs is left to runsc.
        let h = role_at(&plan, &l, "data/h");
        assert!(h.contains(&&Role::Skip), "{h:?}");
        assert!(h.iter().any(|r| matches!(r, Role::Staged { read_only: false, .. })), "{h:?}");
        let names: Vec<&CString> =
            l.roles.iter().filter_map(|r| if let Role::Staged { name, .. } = r { Some(name) } else { None }).collect();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(names.len(), unique.len(), "staging names must be distinct");
        assert!(l.root_path.ends_with("/r"));
    }

    #[test]
    fn mount_points_inside_a_tmpfs_also_exist_in_the_scaffold() {
        let binds = [BindSpec { source: "/etc/hostname".into(), target: "/data/d/h".into(), access: Access::ReadOnly }];
        let tmpfs = [TmpfsSpec { target: "/data".into(), size: 1 << 20 }];
        let mut plan = plan_for(RootSource::Host, NetworkMode::None, &binds, &tmpfs);
        scaffold_mount_points(&mut plan);
        let RootPlan::Tmpfs { entries } = &plan.root else { panic!("host mode has a tmpfs root") };
        let has = |p: &str, dir: bool| {
            entries.iter().any(|e| e.path().to_str() == Ok(p) && matches!(e, Entry::Dir { .. }) == dir)
        };
        assert!(has("data", true) && has("data/d", true) && has("data/d/h", false), "{entries:?}");
    }

    #[test]
    fn host_network_has_no_sysfs_and_rootfs_mode_stages_nothing_but_binds() {
        let dir = std::env::temp_dir().join(format!("husk-layout-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        let plan = plan_for(RootSource::Dir(dir.clone()), NetworkMode::Host, &[], &[]);
        let l = layout(&plan);
        assert!(!l.roles.contains(&Role::Kernel(KernelFs::Sysfs)));
        assert!(!l.roles.iter().any(Role::is_staged), "{:?}", l.roles);
        assert!(l.roles.contains(&Role::Kernel(KernelFs::Proc)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
