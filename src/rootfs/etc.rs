//! The /etc files husk lays over every sandbox, from the skeleton in
//! `rootfs/etc/` (embedded at build time).

use crate::spec::NetworkMode;

const HOSTS: &str = include_str!("../../rootfs/etc/hosts");
const RESOLV_NONE: &str = include_str!("../../rootfs/etc/resolv.conf.none");
pub const PASSWD: &str = include_str!("../../rootfs/etc/passwd");
pub const GROUP: &str = include_str!("../../rootfs/etc/group");
pub const NSSWITCH: &str = include_str!("../../rootfs/etc/nsswitch.conf");

pub fn hosts(hostname: &str) -> String {
    HOSTS.replace("{hostname}", hostname)
}

pub fn hostname(hostname: &str) -> String {
    format!("{hostname}\n")
}

/// resolv.conf for the sandbox: none without network; the host's with
/// `--network host` (read now, so the sandbox never sees the host path).
pub fn resolv_conf(network: NetworkMode) -> String {
    match network {
        NetworkMode::None => RESOLV_NONE.to_string(),
        NetworkMode::Host => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    }
}

/// Valid hostname: 1..=64 bytes of [A-Za-z0-9.-], not starting with '-'.
pub fn validate_hostname(name: &str) -> Result<(), BadHostname> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if ok { Ok(()) } else { Err(BadHostname(name.into())) }
}

/// A hostname the kernel (or resolvers in the sandbox) would not take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid hostname {0:?}: use 1-64 letters, digits, '-' and '.'")]
pub struct BadHostname(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_names_the_sandbox() {
        assert!(hosts("box").contains("127.0.1.1\tbox"));
        assert!(validate_hostname("a-b.c").is_ok());
        assert!(validate_hostname("-x").is_err());
        assert!(validate_hostname("a b").is_err());
        assert!(validate_hostname(&"x".repeat(65)).is_err());
    }
}
