//! What the running kernel says about itself.

/// The running kernel's (major, minor): seccomp's `minKernel`, cgroup.kill (5.14).
pub fn kernel_version() -> Option<(u32, u32)> {
    let u = nix::sys::utsname::uname().ok()?;
    let r = u.release().to_str()?;
    let mut it = r.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}
