//! Capability names as users write them (`CAP_NET_ADMIN`, `net_admin`), for
//! the plan's `--cap-add` and a seccomp profile's `includes.caps` alike.

use std::str::FromStr;

/// The capability number of `name`, with or without the `CAP_` prefix, in
/// any case; None for a name this build does not know.
pub fn parse(name: &str) -> Option<u8> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") { upper } else { format!("CAP_{upper}") };
    caps::Capability::from_str(&full).ok().map(|c| c.index())
}
