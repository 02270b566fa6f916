//! Users and groups from a root's own /etc/passwd and /etc/group (text read
//! safely by the caller: inside an image or rootfs, never the host's for a
//! foreign root). Resolves `--user` / the image's User to uid, gid, home
//! and supplementary groups the way Docker does.

/// A passwd entry: (name, uid, gid, home).
fn passwd_entries(text: &str) -> impl Iterator<Item = (&str, u32, u32, &str)> {
    text.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6).then(|| Some((f[0], f[2].parse().ok()?, f[3].parse().ok()?, f[5])))?
    })
}

/// A group entry: (name, gid, members).
fn group_entries(text: &str) -> impl Iterator<Item = (&str, u32, Vec<&str>)> {
    text.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4).then(|| Some((f[0], f[2].parse().ok()?, f[3].split(',').filter(|m| !m.is_empty()).collect())))?
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub home: Option<String>,
    /// Supplementary groups (the user's memberships in /etc/group).
    pub groups: Vec<u32>,
}

/// Bound on supplementary groups (NGROUPS_MAX is larger; images with more
/// memberships than this are pathological).
const MAX_GROUPS: usize = 64;

/// Why a `--user` value does not resolve against the root's files.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserError {
    #[error("expected USER[:GROUP], e.g. 1000:1000 or app")]
    Shape,
    #[error("user {0:?} is not in the root's /etc/passwd; use a numeric UID[:GID]")]
    NoSuchUser(String),
    #[error("group {0:?} is not in the root's /etc/group; use a numeric GID")]
    NoSuchGroup(String),
}

/// Resolves `USER[:GROUP]`, each a name or a number. A numeric uid absent
/// from passwd keeps gid = uid unless a group is given.
pub fn resolve(spec: &str, passwd: Option<&str>, group: Option<&str>) -> Result<Identity, UserError> {
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if u.is_empty() || g == Some("") {
        return Err(UserError::Shape);
    }
    let entry = passwd.and_then(|p| match u.parse::<u32>() {
        Ok(uid) => passwd_entries(p).find(|e| e.1 == uid),
        Err(_) => passwd_entries(p).find(|e| e.0 == u),
    });
    let (uid, mut gid, home, name) = match (u.parse::<u32>(), entry) {
        (_, Some((name, uid, gid, home))) => (uid, gid, Some(home.to_string()), Some(name)),
        (Ok(uid), None) => (uid, uid, None, None),
        (Err(_), None) => {
            return Err(UserError::NoSuchUser(u.into()));
        }
    };
    if let Some(g) = g {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => group
                .and_then(|t| group_entries(t).find(|e| e.0 == g).map(|e| e.1))
                .ok_or_else(|| UserError::NoSuchGroup(g.into()))?,
        };
    }
    let mut groups: Vec<u32> = match (name, group) {
        (Some(n), Some(t)) => group_entries(t).filter(|e| e.2.contains(&n)).map(|e| e.1).collect(),
        _ => Vec::new(),
    };
    groups.retain(|&x| x != gid);
    groups.sort_unstable();
    groups.dedup();
    groups.truncate(MAX_GROUPS);
    Ok(Identity { uid, gid, home, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PW: &str = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\nbroken\n";
    const GR: &str = "root:x:0:\nstaff:x:50:app,other\napp:x:1000:\naudio:x:29:app\nbad:x:zz:app\n";

    #[test]
    fn names_resolve_with_groups() {
        let id = resolve("app", Some(PW), Some(GR)).unwrap();
        assert_eq!((id.uid, id.gid, id.home.as_deref()), (1000, 1000, Some("/home/app")));
        assert_eq!(id.groups, vec![29, 50]);
        let id = resolve("app:staff", Some(PW), Some(GR)).unwrap();
        assert_eq!((id.gid, id.groups.clone()), (50, vec![29]));
    }

    #[test]
    fn numbers_resolve_through_passwd_when_present() {
        assert_eq!(resolve("1000", Some(PW), Some(GR)).unwrap().groups, vec![29, 50]);
        let id = resolve("4242", Some(PW), None).unwrap();
        assert_eq!((id.uid, id.gid, id.home), (4242, 4242, None));
        assert_eq!(resolve("4242:7", None, None).unwrap().gid, 7);
    }

    #[test]
    fn unknown_names_are_errors() {
        assert!(resolve("nobody-here", Some(PW), Some(GR)).unwrap_err().to_string().contains("/etc/passwd"));
        assert!(resolve("app:nogroup", Some(PW), Some(GR)).unwrap_err().to_string().contains("/etc/group"));
        assert!(resolve("app:", Some(PW), Some(GR)).is_err());
    }
}
