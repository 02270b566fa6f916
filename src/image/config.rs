//! The image config's run defaults (Env, Entrypoint, Cmd, WorkingDir,
//! User), sanitized: the config is as hostile as the layers. Nothing in it
//! may name a host path (husk ignores Volumes entirely, the
//! CVE-2022-23648 shape); WorkingDir is normalized lexically with `..`
//! clamped at the root and then placed inside the root by the mount
//! planner, like every other target.

use super::ImageError;
use super::oci::ImageConfig;
use crate::plan::ImageDefaults;

const MAX_ENTRIES: usize = 4096;
const MAX_TOTAL: usize = 1 << 20;

pub fn defaults(config: &ImageConfig) -> Result<ImageDefaults, ImageError> {
    let Some(c) = &config.config else {
        return Ok(ImageDefaults::default());
    };
    let bad = |what: &str, why: String| ImageError::Config(format!("{what}: {why}"));
    let mut total = 0usize;
    let mut check = |what: &str, items: &[String]| -> Result<(), ImageError> {
        if items.len() > MAX_ENTRIES {
            return Err(bad(what, format!("{} entries (bound {MAX_ENTRIES})", items.len())));
        }
        for s in items {
            if s.contains('\0') {
                return Err(bad(what, format!("{:?} contains a NUL byte", super::digest::truncate(s, 60))));
            }
            total += s.len();
        }
        if total > MAX_TOTAL {
            return Err(bad(what, format!("more than {MAX_TOTAL} bytes in total")));
        }
        Ok(())
    };
    let env_raw = c.env.clone().unwrap_or_default();
    check("Env", &env_raw)?;
    let mut env = Vec::new();
    for e in &env_raw {
        // "KEY" without '=' means nothing in a config; skip it.
        if let Some((k, v)) = e.split_once('=')
            && !k.is_empty()
        {
            env.push((k.to_string(), v.to_string()));
        }
    }
    let entrypoint = c.entrypoint.clone().unwrap_or_default();
    check("Entrypoint", &entrypoint)?;
    let cmd = c.cmd.clone().unwrap_or_default();
    check("Cmd", &cmd)?;
    let workdir = match c.working_dir.as_deref() {
        None | Some("") => None,
        Some(w) => {
            check("WorkingDir", &[w.to_string()])?;
            normalize_workdir(w)
        }
    };
    let user = match c.user.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(u) => {
            check("User", &[u.to_string()])?;
            if u.len() > 256 {
                return Err(bad("User", "longer than 256 bytes".into()));
            }
            Some(u.to_string())
        }
    };
    Ok(ImageDefaults { env, entrypoint, cmd, workdir, user })
}

/// Absolute, `.`/`..` resolved lexically and clamped at `/` (as the path
/// would resolve inside the sandbox). `/` itself yields None: husk's
/// workdir is a fresh tmpfs, which cannot cover the root, so the default
/// workdir is used instead.
pub fn normalize_workdir(w: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for c in w.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    (!out.is_empty()).then(|| format!("/{}", out.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::oci::{ContainerConfig, RootFs};

    fn cfg(c: ContainerConfig) -> ImageConfig {
        ImageConfig {
            architecture: "amd64".into(),
            os: "linux".into(),
            variant: None,
            config: Some(c),
            rootfs: RootFs { kind: "layers".into(), diff_ids: vec![] },
        }
    }

    #[test]
    fn config_paths_are_clamped_inside_the_root() {
        assert_eq!(normalize_workdir("/../../../etc"), Some("/etc".into()));
        assert_eq!(normalize_workdir("app/./src/"), Some("/app/src".into()));
        assert_eq!(normalize_workdir("/"), None);
        assert_eq!(normalize_workdir("/a/../.."), None);
    }

    #[test]
    fn env_entrypoint_cmd_user_are_carried() {
        let d = defaults(&cfg(ContainerConfig {
            env: Some(vec!["PATH=/x:/y".into(), "A=b=c".into(), "NOEQ".into(), "=v".into()]),
            entrypoint: Some(vec!["/bin/sh".into()]),
            cmd: Some(vec!["-c".into(), "echo".into()]),
            working_dir: Some("/srv/app".into()),
            user: Some(" app ".into()),
        }))
        .unwrap();
        assert_eq!(d.env, vec![("PATH".into(), "/x:/y".into()), ("A".into(), "b=c".into())]);
        assert_eq!(d.entrypoint, vec!["/bin/sh"]);
        assert_eq!(d.workdir.as_deref(), Some("/srv/app"));
        assert_eq!(d.user.as_deref(), Some("app"));
    }

    #[test]
    fn nul_bytes_and_floods_are_refused() {
        let nul = cfg(ContainerConfig { cmd: Some(vec!["a\0b".into()]), ..Default::default() });
        assert!(defaults(&nul).unwrap_err().to_string().contains("Cmd"));
        let flood = cfg(ContainerConfig { env: Some(vec!["A=1".into(); 5000]), ..Default::default() });
        assert!(defaults(&flood).is_err());
    }
}
