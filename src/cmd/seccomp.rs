//! `husk seccomp check PATH` and `husk seccomp show NAME`.

use crate::cli::{SeccompCheckArgs, SeccompCommand};
use crate::outcome::EXIT_HUSK_FAILED;
use crate::seccomp::{explain, profile, shipped, shipped_names};
use sha2::Digest;

pub fn seccomp(cmd: SeccompCommand) -> i32 {
    match cmd {
        SeccompCommand::Show { name } => match shipped(&name) {
            Some(s) => {
                crate::print::text(s.json);
                0
            }
            None => {
                crate::errln!("husk: no shipped seccomp profile {name:?}; shipped: {}", shipped_names().join(", "));
                EXIT_HUSK_FAILED
            }
        },
        SeccompCommand::Check(args) => match check(&args) {
            Ok(out) => {
                crate::print::text(&out);
                0
            }
            Err(e) => {
                if args.json {
                    let errno = match &e {
                        CheckError::Read(crate::userfile::UserFileError::Io { source, .. }) => {
                            crate::step::io_errno(source)
                        }
                        _ => None,
                    };
                    let r =
                        crate::outcome::ErrorReport::new(crate::step::Phase::Seccomp, e.to_string()).with_errno(errno);
                    crate::cli::report::json_failure(r, Default::default(), false);
                }
                crate::errln!("husk: {e}");
                EXIT_HUSK_FAILED
            }
        },
    }
}

/// Why `husk seccomp check` refused a profile.
#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error(transparent)]
    Read(#[from] crate::userfile::UserFileError),
    #[error(transparent)]
    Cap(#[from] crate::plan::PlanError),
    #[error(transparent)]
    Profile(#[from] profile::ProfileError),
    #[error(transparent)]
    Compile(#[from] crate::seccomp::compile::CompileError),
}

/// Validates and compiles the profile; returns the report to print.
fn check(a: &SeccompCheckArgs) -> Result<String, CheckError> {
    let (origin, text) = match shipped(&a.path) {
        // As `run --seccomp NAME`: a shipped name is the shipped profile even
        // when a file of that name is here (`./default` checks the file).
        Some(s) => (format!("{} (shipped)", s.name), s.json.to_string()),
        _ => {
            let path = std::path::Path::new(&a.path);
            let text = crate::userfile::read_text("seccomp profile", path, crate::seccomp::MAX_PROFILE_BYTES)?;
            (a.path.clone(), text)
        }
    };
    let mut caps = 0u64;
    for c in &a.cap_add {
        caps |= 1u64 << crate::plan::parse_cap(c)?;
    }
    let raw = profile::parse(&origin, &text)?;
    let has_cap = |name: &str| crate::plan::parse_cap(name).ok().map(|c| caps & (1u64 << c) != 0);
    let kernel = crate::kernel::kernel_version();
    let policy = raw.lower(&origin, &profile::Context { has_cap: &has_cap, kernel })?;
    let program = crate::seccomp::compile::compile(&origin, &policy)?;
    // A typo ("readx") matches nothing and so silently allows or denies
    // less than the author meant: say it where a person looks.
    if !policy.ignored_names.is_empty() {
        crate::errln!(
            "husk: warning: {} name(s) in {origin} are not x86_64 syscalls and match nothing (a typo, or another architecture's call): {}",
            policy.ignored_names.len(),
            policy.ignored_names.join(" ")
        );
    }
    let missing = crate::seccomp::needs::missing(&program);
    if !missing.is_empty() {
        crate::errln!(
            "husk: warning: husk run refuses {origin}: it does not allow {}, which husk itself calls under the filter before the command starts ({})",
            missing.join(", "),
            crate::seccomp::needs::explain(&missing)
        );
    }
    let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    let header = explain::Header { profile: &origin, sha256: &sha, instructions: program.len() };
    Ok(if a.json { format!("{}\n", explain::json(&header, &policy)) } else { explain::text(&header, &policy) })
}
