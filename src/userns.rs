//! User-namespace id mapping. Sandbox root is never host root: as root, the
//! sandbox's ids map onto an unprivileged host range; rootless, the chosen
//! inner id maps onto the invoking user.

use crate::host::{DEFAULT_ID_RANGE, HostFacts};
use crate::spec::IdRange;
use crate::sys::Errno;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::io::Write;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum IdMode {
    /// Host root: sandbox ids 0..count map to host base..base+count.
    Privileged { uid_range: IdRange, gid_range: IdRange },
    /// An ordinary user: only one inner uid/gid, mapped to the user.
    Rootless { host_uid: u32, host_gid: u32 },
}

/// The maps a run writes, and the ids its init takes before mounting
/// (kept with a long-lived sandbox, whose execs run within them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    pub mode: IdMode,
    pub uid_map: String,
    pub gid_map: String,
    /// Rootless writers must deny setgroups before writing gid_map.
    pub deny_setgroups: bool,
    /// Inner ids the sandbox init switches to (owner of what it creates).
    pub init_uid: u32,
    pub init_gid: u32,
}

/// The verdict's `isolation.user_mapping`: how the sandbox's ids map to
/// the host's. Fields in alphabetical order, as the verdict's keys have
/// always come out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMapping {
    pub gid_map: String,
    /// `privileged` (a range of husk's own) or `rootless`.
    pub mode: std::borrow::Cow<'static, str>,
    /// The host uid the sandbox's root is; null where none (runsc inside a
    /// user namespace).
    pub sandbox_root_host_uid: Option<u32>,
    pub uid_map: String,
}

#[derive(Debug, thiserror::Error)]
pub enum IdMapError {
    #[error(
        "--user {uid}:{gid} is outside the sandbox's id range 0..{count}; pick ids below {count} or widen the range with --id-range"
    )]
    OutOfRange { uid: u32, gid: u32, count: u32 },
    #[error("invalid --id-range {value:?}: expected BASE:COUNT, e.g. 1000000000:65536, with BASE > 0")]
    BadRange { value: String },
    #[error("writing {file} for pid {pid}: {source}")]
    Write { file: &'static str, pid: i32, source: std::io::Error },
}

pub fn parse_range(value: &str) -> Result<IdRange, IdMapError> {
    let bad = || IdMapError::BadRange { value: value.to_string() };
    let (b, c) = value.split_once(':').ok_or_else(bad)?;
    let range = IdRange { base: b.trim().parse().map_err(|_| bad())?, count: c.trim().parse().map_err(|_| bad())? };
    // base 0 would map sandbox root onto host root.
    if range.base == 0 || range.count == 0 || range.base.checked_add(range.count).is_none() {
        return Err(bad());
    }
    Ok(range)
}

impl IdMap {
    /// Chooses the mapping for a command that runs as inner `uid:gid`.
    pub fn plan(host: &HostFacts, requested: Option<IdRange>, uid: u32, gid: u32) -> Result<IdMap, IdMapError> {
        if host.privileged {
            let (ur, gr) = match requested {
                Some(r) => (r, r),
                None => host.subid.unwrap_or((DEFAULT_ID_RANGE, DEFAULT_ID_RANGE)),
            };
            if uid >= ur.count || gid >= gr.count {
                return Err(IdMapError::OutOfRange { uid, gid, count: ur.count.min(gr.count) });
            }
            Ok(IdMap {
                mode: IdMode::Privileged { uid_range: ur, gid_range: gr },
                uid_map: format!("0 {} {}\n", ur.base, ur.count),
                gid_map: format!("0 {} {}\n", gr.base, gr.count),
                deny_setgroups: false,
                init_uid: 0,
                init_gid: 0,
            })
        } else {
            Ok(IdMap {
                mode: IdMode::Rootless { host_uid: host.uid, host_gid: host.gid },
                uid_map: format!("{uid} {} 1\n", host.uid),
                gid_map: format!("{gid} {} 1\n", host.gid),
                deny_setgroups: true,
                init_uid: uid,
                init_gid: gid,
            })
        }
    }

    /// Host uid that sandbox root (or the rootless inner id) owns files as.
    pub fn host_uid_of(&self, inner: u32) -> Option<u32> {
        match &self.mode {
            IdMode::Privileged { uid_range, .. } => (inner < uid_range.count).then(|| uid_range.base + inner),
            IdMode::Rootless { host_uid, .. } => (inner == self.init_uid).then_some(*host_uid),
        }
    }

    /// The host ids inner `uid:gid` is, when an idmapped bind can fold a
    /// directory's owner onto them: privileged only (idmapping a host
    /// filesystem takes host root; rootless, the sandbox's user already is
    /// the invoking user, who owns what it binds).
    pub fn fold_target(&self, uid: u32, gid: u32) -> Option<(u32, u32)> {
        match &self.mode {
            IdMode::Privileged { uid_range, gid_range } if uid < uid_range.count && gid < gid_range.count => {
                Some((uid_range.base + uid, gid_range.base + gid))
            }
            _ => None,
        }
    }

    /// The verdict's `isolation.user_mapping` for these maps.
    pub fn report(&self) -> UserMapping {
        UserMapping {
            gid_map: self.gid_map.trim().to_string(),
            mode: match self.mode {
                IdMode::Privileged { .. } => "privileged",
                IdMode::Rootless { .. } => "rootless",
            }
            .into(),
            sandbox_root_host_uid: self.host_uid_of(0),
            uid_map: self.uid_map.trim().to_string(),
        }
    }

    /// Writes the maps of a child that waits in its fresh user namespace.
    pub fn write(&self, pid: Pid) -> Result<(), IdMapError> {
        let write = |file: &'static str, data: &str| {
            let path = format!("/proc/{}/{file}", pid.as_raw());
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|mut f| f.write_all(data.as_bytes()))
                .map_err(|source| IdMapError::Write { file, pid: pid.as_raw(), source })
        };
        write("uid_map", &self.uid_map)?;
        if self.deny_setgroups {
            write("setgroups", "deny")?;
        }
        write("gid_map", &self.gid_map)
    }
}

/// One id of the host's folded onto another, for an idmapped bind: files
/// the host's `from_*` owns show as the host id `to_*` (the sandbox's user),
/// and what that user creates lands as `from_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdFold {
    pub from_uid: u32,
    pub from_gid: u32,
    pub to_uid: u32,
    pub to_gid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum FoldError {
    #[error("{what}: {errno}")]
    Sys { what: &'static str, errno: Errno },
    #[error("writing {file} of the idmap namespace: {source}")]
    Write { file: &'static str, source: std::io::Error },
    #[error("opening the idmap namespace: {0}")]
    Open(std::io::Error),
}

impl FoldError {
    pub fn errno(&self) -> Option<Errno> {
        match self {
            FoldError::Sys { errno, .. } => Some(*errno),
            FoldError::Write { source: e, .. } | FoldError::Open(e) => e.raw_os_error().map(Errno::from_raw),
        }
    }
}

/// A user namespace whose maps are `fold` and nothing else, as an fd for
/// `mount_setattr(MOUNT_ATTR_IDMAP)`: an idmapped mount reads each on-disk
/// id as an id inside this namespace, so the single line
/// `from_uid to_uid 1` shows the owner's files as `to_uid`; every other id
/// (host root among them) is unmapped there, shows as the overflow id and
/// cannot be written as. The namespace is made by a short-lived child that
/// waits on a pipe (it exits when we close our end, or die) and is reaped
/// here; the fd keeps the namespace alive after it.
pub fn fold_namespace(fold: &IdFold) -> Result<std::os::fd::OwnedFd, FoldError> {
    use crate::sys::process::{Forked, SingleThreaded, clone3, exit_now, wait_pidfd};
    let sys = |what| move |errno| FoldError::Sys { what, errno };
    let one = SingleThreaded::check().map_err(|e| FoldError::Sys {
        what: "counting threads before fork",
        errno: e.errno().unwrap_or(Errno::EBUSY),
    })?;
    let (gate_r, gate_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe2"))?;
    match clone3(&one, libc::CLONE_NEWUSER, None).map_err(sys("clone3(CLONE_NEWUSER)"))? {
        Forked::Child(_) => {
            // Only our own end keeps the pipe open: EOF is the parent done
            // (or dead), and the child's only job is to be there until then.
            drop(gate_w);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(&gate_r, &mut b);
            exit_now(0)
        }
        Forked::Parent { pid, pidfd } => {
            drop(gate_r);
            let made = (|| {
                let write = |file: &'static str, data: String| {
                    std::fs::write(format!("/proc/{}/{file}", pid.as_raw()), data)
                        .map_err(|source| FoldError::Write { file, source })
                };
                write("uid_map", format!("{} {} 1\n", fold.from_uid, fold.to_uid))?;
                write("gid_map", format!("{} {} 1\n", fold.from_gid, fold.to_gid))?;
                std::fs::File::open(format!("/proc/{}/ns/user", pid.as_raw()))
                    .map(std::os::fd::OwnedFd::from)
                    .map_err(FoldError::Open)
            })();
            drop(gate_w);
            if let Some(pidfd) = pidfd {
                let _ = wait_pidfd(std::os::fd::AsFd::as_fd(&pidfd));
            }
            made
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(uid: u32) -> HostFacts {
        HostFacts {
            uid,
            gid: uid,
            privileged: uid == 0,
            last_cap: 40,
            subid: None,
            store_root: "/nonexistent".into(),
            cgroup: Default::default(),
            view: Default::default(),
        }
    }

    #[test]
    fn container_root_maps_to_unprivileged_range_when_privileged() {
        let m = IdMap::plan(&host(0), None, 0, 0).unwrap();
        assert_eq!(m.uid_map, "0 1000000000 65536\n");
        assert_eq!(m.host_uid_of(0), Some(1_000_000_000));
        assert!(!m.deny_setgroups);
    }

    #[test]
    fn rootless_maps_only_the_invoking_user() {
        let m = IdMap::plan(&host(1000), None, 0, 0).unwrap();
        assert_eq!(m.uid_map, "0 1000 1\n");
        assert!(m.deny_setgroups);
        assert_eq!(m.host_uid_of(0), Some(1000));
        assert_eq!(m.host_uid_of(5), None);
    }

    #[test]
    fn user_outside_range_is_refused() {
        let r = IdRange { base: 200000, count: 100 };
        assert!(IdMap::plan(&host(0), Some(r), 100, 0).is_err());
        assert!(IdMap::plan(&host(0), Some(r), 99, 99).is_ok());
    }

    #[test]
    fn id_range_zero_base_is_refused() {
        assert!(parse_range("0:65536").is_err());
        assert!(parse_range("100000:0").is_err());
        assert!(parse_range("4294967295:2").is_err());
        assert_eq!(parse_range("100000:65536").unwrap(), IdRange { base: 100000, count: 65536 });
    }
}
