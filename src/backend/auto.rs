//! `--runtime auto`: native where this host supports full native isolation,
//! else runsc where it is installed and can work here, else a refusal that
//! names both reasons. Decided from cheap host facts (`host::HostView`
//! judged by `host::blockers`, the runsc binary and its cached version) and never by
//! running a sandbox per run. Whatever is picked, the verdict says which
//! backend ran and why.

use super::runsc::config::{RunscConfig, RunscError};
use crate::host::{HostView, blockers};
use crate::isolation::RuntimeChoiceNote;

/// The decision and why.
#[derive(Debug)]
pub enum Pick {
    Native,
    Runsc(RunscConfig),
}

/// What auto saw: native's blockers, and runsc's config or why it cannot
/// be used (probed only when native is blocked).
#[derive(Debug)]
pub struct Facts {
    pub native: Vec<String>,
    pub runsc: Option<Result<RunscConfig, Vec<String>>>,
}

impl Facts {
    /// `runsc` is called only when native is blocked (it may start runsc
    /// once to learn its version, cached per binary afterwards).
    pub fn probe(v: &HostView, runsc: impl FnOnce() -> Result<RunscConfig, RunscError>) -> Facts {
        let native = blockers::native(v);
        let runsc = (!native.is_empty()).then(|| match runsc() {
            Ok(cfg) => {
                let b = blockers::runsc(v, &cfg.platform);
                if b.is_empty() { Ok(cfg) } else { Err(b) }
            }
            Err(e) => Err(vec![e.to_string()]),
        });
        Facts { native, runsc }
    }
}

/// Native when nothing blocks it; else runsc; else an error naming both.
/// The note goes into the verdict (`isolation.runtime_choice`).
pub fn choose(f: Facts) -> Result<(Pick, RuntimeChoiceNote), AutoError> {
    if f.native.is_empty() {
        let note = RuntimeChoiceNote::auto("native", "the host supports native isolation".into());
        return Ok((Pick::Native, note));
    }
    match f.runsc {
        Some(Ok(cfg)) => {
            let note =
                RuntimeChoiceNote::auto("runsc", format!("native isolation is unavailable: {}", f.native.join("; ")));
            Ok((Pick::Runsc(cfg), note))
        }
        Some(Err(runsc)) => Err(AutoError::NoBackend { native: f.native, runsc }),
        None => Err(AutoError::NativeUnavailable { native: f.native }),
    }
}

/// `--runtime auto` found no backend; each list holds the reasons (the
/// host's blockers, or why runsc could not be resolved).
#[derive(Debug, thiserror::Error)]
pub enum AutoError {
    #[error(
        "--runtime auto: no backend can isolate this command here. native: {}. runsc: {}",
        native.join("; "),
        runsc.join("; ")
    )]
    NoBackend { native: Vec<String>, runsc: Vec<String> },
    #[error("--runtime auto: native isolation is unavailable: {}", native.join("; "))]
    NativeUnavailable { native: Vec<String> },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::runsc::config::{Info, Mode};
    use crate::host::{DEFAULT_ID_RANGE, covers};

    fn healthy() -> HostView {
        HostView {
            root: true,
            initial_userns: true,
            max_user_namespaces: Some(15000),
            apparmor_restrict_unprivileged_userns: None,
            unprivileged_userns_clone: None,
            id_range_mapped: true,
            overlayfs: true,
            seccomp: true,
            pidfd: true,
            ptrace_scope: Some(1),
        }
    }

    fn cfg() -> RunscConfig {
        RunscConfig {
            bin: "/usr/bin/runsc".into(),
            info: Info { version: "test".into(), platforms: vec!["ptrace".into()] },
            platform: "ptrace".into(),
            mode: Mode::Root,
            state: "/run/husk".into(),
        }
    }

    #[test]
    fn auto_picks_native_where_the_host_supports_it_without_looking_at_runsc() {
        let f = Facts::probe(&healthy(), || panic!("runsc must not be probed when native works"));
        let (pick, note) = choose(f).unwrap();
        assert!(matches!(pick, Pick::Native));
        assert_eq!(note.chosen, "native");
    }

    #[test]
    fn auto_picks_runsc_when_native_is_unavailable_and_says_why() {
        // Rootless where AppArmor blocks unprivileged user namespaces for
        // native... and for runsc as well: both refused.
        let mut v = healthy();
        v.root = false;
        v.apparmor_restrict_unprivileged_userns = Some(1);
        let err = choose(Facts::probe(&v, || Ok(cfg()))).unwrap_err().to_string();
        assert!(err.contains("native:") && err.contains("runsc:"), "{err}");
        // Native blocked (no pidfd) but runsc fine: runsc, with the reason.
        let mut v = healthy();
        v.pidfd = false;
        let (pick, note) = choose(Facts::probe(&v, || Ok(cfg()))).unwrap();
        assert!(matches!(pick, Pick::Runsc(_)));
        assert_eq!(note.chosen, "runsc");
        assert!(note.why.contains("pidfd"), "{note:?}");
    }

    #[test]
    fn auto_refuses_naming_both_reasons() {
        let mut v = healthy();
        v.max_user_namespaces = Some(0);
        let err = choose(Facts::probe(&v, || Ok(cfg()))).unwrap_err().to_string();
        assert!(err.contains("native: the native backend needs a new user namespace"), "{err}");
        assert!(err.contains("runsc: runsc needs a new user namespace"), "{err}");
        let err = choose(Facts::probe(&v, || Err(RunscError::NotInstalled))).unwrap_err().to_string();
        assert!(err.contains("runsc: runsc is not installed"), "{err}");
        let mut v = healthy();
        v.overlayfs = false;
        v.ptrace_scope = Some(3);
        let err = choose(Facts::probe(&v, || Ok(cfg()))).unwrap_err().to_string();
        assert!(err.contains("ptrace_scope = 3"), "{err}");
    }

    #[test]
    fn root_in_a_user_namespace_needs_the_id_range_mapped() {
        let mut v = healthy();
        v.initial_userns = false;
        v.id_range_mapped = false;
        assert_eq!(blockers::native(&v).len(), 1);
        assert!(blockers::runsc(&v, "ptrace").is_empty());
        assert!(covers("0 0 4294967295\n", DEFAULT_ID_RANGE));
        assert!(!covers("0 1000 1\n", DEFAULT_ID_RANGE));
        assert!(covers("0 100000 65536\n1000000000 2000000000 65536\n", DEFAULT_ID_RANGE));
    }
}
