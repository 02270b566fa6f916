//! The probe husk carries: husk itself. The probe's code (the husk-probe
//! crate, tests/probe) is linked into husk, and husk runs as the probe when
//! the file name it was started under says so (main.rs looks before
//! parsing anything, so `husk run` pays one comparison). `husk selftest`
//! thus needs nothing but the husk binary; `--probe PATH` still overrides.
//!
//! The sandboxes get a private copy of the running binary, not husk's own
//! file: a probe that got through its read-only bind (the `exe-write` probe
//! tries, CVE-2019-5736) must find nothing of the host's to overwrite. A
//! sealed memfd would be the stronger copy, but the kernel refuses to bind
//! mount one (EINVAL: its mount is not in any namespace of ours) and runsc
//! can only run files its gofer can open.

use super::fixtures::FixtureError;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// husk is the probe when its file name, less one leading dot, starts with
/// this: `husk-probe`, `/.husk-probe` (the selftest's bind), the setuid
/// copies `.husk-probe-suid-*`, and the probe re-executing itself.
pub const PROBE_NAME: &str = "husk-probe";

/// Was this process started as the probe?
pub fn invoked_as_probe() -> bool {
    std::env::args_os().next().is_some_and(|a| is_probe_name(&a))
}

pub fn is_probe_name(argv0: &OsStr) -> bool {
    let name = Path::new(argv0).file_name().map_or(&[][..], OsStrExt::as_bytes);
    name.strip_prefix(b".").unwrap_or(name).starts_with(PROBE_NAME.as_bytes())
}

/// A copy of the running husk, named as the probe, in a directory of its
/// own that is removed on drop.
#[derive(Debug)]
pub struct ProbeCopy {
    dir: PathBuf,
    pub path: PathBuf,
}

impl ProbeCopy {
    pub fn create(base: &Path) -> Result<ProbeCopy, FixtureError> {
        let err = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| FixtureError::Io { what, path, source }
        };
        let dir = base.join(format!("husk-selftest-probe-{}", crate::ids::random_hex(6)));
        std::fs::create_dir(&dir).map_err(err("probe directory", &dir))?;
        let copy = ProbeCopy { path: dir.join(PROBE_NAME), dir };
        std::fs::set_permissions(&copy.dir, std::fs::Permissions::from_mode(0o755))
            .map_err(err("probe directory", &copy.dir))?;
        // /proc/self/exe is the running binary even if its file was
        // replaced or removed since husk started.
        std::fs::copy("/proc/self/exe", &copy.path).map_err(err("copy of husk as the probe", &copy.path))?;
        std::fs::set_permissions(&copy.path, std::fs::Permissions::from_mode(0o555))
            .map_err(err("copy of husk as the probe", &copy.path))?;
        Ok(copy)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ProbeCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_probe_names_make_husk_the_probe() {
        for name in
            ["husk-probe", "/.husk-probe", "/usr/bin/husk-probe", "/x/.husk-probe-suid-host", "husk-probe-suid-sandbox"]
        {
            assert!(is_probe_name(OsStr::new(name)), "{name}");
        }
        for name in ["husk", "/usr/local/bin/husk", "probe", "/husk-probe/husk", "..husk-probe", ""] {
            assert!(!is_probe_name(OsStr::new(name)), "{name}");
        }
    }
}
