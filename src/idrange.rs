//! Whether an explicit `--id-range` leaves the host's users alone. As
//! root, sandbox ids 0..COUNT become host ids BASE..BASE+COUNT: a range
//! over the host's own users (`--id-range 1:65536`) makes sandbox root
//! host uid 1 (`daemon`) and lets files the sandbox writes belong to
//! real accounts. A range is refused when it starts below the system's
//! subordinate-id floor (`SUB_UID_MIN` / `SUB_GID_MIN` in
//! /etc/login.defs, default 100000: below it are system and regular
//! users, `UID_MIN`..`UID_MAX`), or overlaps a user in /etc/passwd, a
//! group in /etc/group, or another user's /etc/subuid or /etc/subgid
//! range — unless the caller forces it. husk's own default range (the
//! `husk` subordinate entry, else 1000000000:65536) is not checked: it is
//! the administrator's choice or far above anything allocated.

use crate::spec::IdRange;

/// The host files a range is checked against (read only when a range is
/// given; a missing file is empty).
#[derive(Clone, Debug, Default)]
pub struct HostIds {
    pub passwd: String,
    pub group: String,
    pub subuid: String,
    pub subgid: String,
    pub login_defs: String,
}

impl HostIds {
    pub fn read() -> HostIds {
        let read = |p: &str| crate::files::read_text(p).unwrap_or_default();
        HostIds {
            passwd: read("/etc/passwd"),
            group: read("/etc/group"),
            subuid: read("/etc/subuid"),
            subgid: read("/etc/subgid"),
            login_defs: read("/etc/login.defs"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "--id-range {}:{} {why}: sandbox ids would be host ids that are not husk's. Fix: use a range at or above {floor} that no user, group or /etc/subuid entry uses (or leave --id-range out: husk then uses the `husk` entry of /etc/subuid, else 1000000000:65536), or pass --id-range-force if sharing these host ids is intended",
    range.base,
    range.count
)]
pub struct RangeRefused {
    pub range: IdRange,
    pub why: String,
    pub floor: u64,
}

/// A `KEY VALUE` setting of login.defs.
fn login_def(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// `name:...:id:...` entries (passwd: uid in field 2; group: gid in 2).
fn ids_in<'a>(text: &'a str, range: &IdRange) -> Vec<(&'a str, u64)> {
    let (lo, hi) = (range.base as u64, range.base as u64 + range.count as u64);
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u64 = f.nth(1)?.trim().parse().ok()?;
            (lo <= id && id < hi).then_some((name, id))
        })
        .collect()
}

/// `name:start:count` entries of another user that overlap `range`.
fn subids_in<'a>(text: &'a str, range: &IdRange) -> Vec<(&'a str, u64, u64)> {
    let (lo, hi) = (range.base as u64, range.base as u64 + range.count as u64);
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (name, start, count) = (f.next()?, f.next()?.parse::<u64>().ok()?, f.next()?.parse::<u64>().ok()?);
            (name != "husk" && start < hi && lo < start + count).then_some((name, start, count))
        })
        .collect()
}

fn list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let mut s: Vec<String> = items.iter().take(3).map(show).collect();
    if items.len() > 3 {
        s.push(format!("and {} more", items.len() - 3));
    }
    s.join(", ")
}

/// Refuses `range` when it reaches into ids the host has given out (or
/// reserves for its users). The reasons are all named, each with the file
/// that says so.
pub fn check(range: IdRange, host: &HostIds) -> Result<(), RangeRefused> {
    let floor_u = login_def(&host.login_defs, "SUB_UID_MIN").unwrap_or(100_000);
    let floor_g = login_def(&host.login_defs, "SUB_GID_MIN").unwrap_or(100_000);
    let floor = floor_u.max(floor_g);
    let mut why = Vec::new();
    if (range.base as u64) < floor {
        let uid_min = login_def(&host.login_defs, "UID_MIN").unwrap_or(1000);
        why.push(format!(
            "starts below SUB_UID_MIN/SUB_GID_MIN {floor} (/etc/login.defs; system users are below UID_MIN {uid_min}, regular users above it)"
        ));
    }
    let users = ids_in(&host.passwd, &range);
    if !users.is_empty() {
        why.push(format!("overlaps host users in /etc/passwd ({})", list(&users, |(n, id)| format!("{n} = uid {id}"))));
    }
    let groups = ids_in(&host.group, &range);
    if !groups.is_empty() {
        why.push(format!(
            "overlaps host groups in /etc/group ({})",
            list(&groups, |(n, id)| format!("{n} = gid {id}"))
        ));
    }
    for (file, text) in [("/etc/subuid", &host.subuid), ("/etc/subgid", &host.subgid)] {
        let subs = subids_in(text, &range);
        if !subs.is_empty() {
            why.push(format!(
                "overlaps subordinate ids in {file} ({})",
                list(&subs, |(n, s, c)| format!("{n}'s {s}:{c}"))
            ));
        }
    }
    if why.is_empty() { Ok(()) } else { Err(RangeRefused { range, why: why.join("; "), floor }) }
}

/// The check as the CLI applies it: as root, unless `--id-range-force`
/// was given. Rootless the range is not used (only the invoking user is
/// mapped), so there is nothing to protect.
pub fn check_unless_forced(range: IdRange, forced: bool) -> Result<(), RangeRefused> {
    if forced || !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    check(range, &HostIds::read())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostIds {
        HostIds {
            passwd: "root:x:0:0::/root:/bin/sh\ndaemon:x:1:1::/:/bin/false\nalice:x:1000:1000::/home/alice:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n".into(),
            group: "root:x:0:\nstaff:x:50:\nbig:x:300000:\n".into(),
            subuid: "alice:100000:65536\nhusk:1000000000:65536\n".into(),
            subgid: "alice:100000:65536\n".into(),
            login_defs: "# comment\nUID_MIN\t\t 1000\nSUB_UID_MIN\t\t   100000\nSUB_GID_MIN 100000\n".into(),
        }
    }

    fn r(base: u32, count: u32) -> IdRange {
        IdRange { base, count }
    }

    #[test]
    fn range_over_system_users_is_refused_with_every_reason() {
        let e = check(r(1, 65536), &host()).unwrap_err().to_string();
        assert!(e.contains("starts below SUB_UID_MIN/SUB_GID_MIN 100000"), "{e}");
        assert!(e.contains("daemon = uid 1, alice = uid 1000, nobody = uid 65534"), "{e}");
        assert!(e.contains("staff = gid 50"), "{e}");
        assert!(e.contains("--id-range-force"), "{e}");
    }

    #[test]
    fn range_over_another_users_subordinate_ids_is_refused() {
        let e = check(r(150_000, 65536), &host()).unwrap_err().to_string();
        assert!(e.contains("alice's 100000:65536") && e.contains("/etc/subuid"), "{e}");
        assert!(check(r(290_000, 65536), &host()).unwrap_err().to_string().contains("big = gid 300000"));
    }

    #[test]
    fn free_ranges_and_husks_own_entry_pass() {
        assert!(check(r(165_536, 65536), &host()).is_ok());
        assert!(check(r(1_000_000_000, 65536), &host()).is_ok(), "the husk entry is husk's own");
        // Defaults when login.defs says nothing.
        let bare = HostIds { login_defs: String::new(), ..host() };
        assert!(check(r(99_999, 1), &bare).is_err());
        assert!(check(r(3_000_000, 65536), &bare).is_ok());
    }
}
