//! The syscalls husk itself makes after loading the filter and before the
//! command's first instruction (spawn/command.rs `finish`): the filter
//! covers them too, since it is loaded before execve so that execve is
//! covered. A profile that denies one of them would make husk's own code
//! fail inside the sandbox, and the verdict would blame the command (a
//! profile denying everything with errno made the pre-exec child die of
//! SIGSEGV: `_exit` returned). So a profile is checked against this list
//! when the run is planned and refused, naming what is missing.
//!
//! `clock_gettime` (the seccomp phase's timestamp) is not listed: on x86_64
//! it is served by the vDSO without entering the kernel, and when it does
//! enter, a denial costs only the timestamp.

use super::compile::{RET_ACTION_FULL, RET_ALLOW, RET_LOG, SockFilter};
use super::eval;

/// (syscall, number, what husk needs it for).
pub const HUSK_NEEDS: &[(&str, libc::c_long, &str)] = &[
    ("execve", libc::SYS_execve, "starts the command"),
    ("sendto", libc::SYS_sendto, "reports the start timings, or why execve failed, to husk"),
    ("exit_group", libc::SYS_exit_group, "ends the process with 126/127 when execve failed"),
];

/// The needs `filter` does not allow (allowed = ALLOW or LOG), in
/// `HUSK_NEEDS` order. Judged for all-zero arguments: these are husk's own
/// calls, whose pointers no profile can name, and a profile conditioning
/// them on arguments is not one husk can start a command under.
pub fn missing(filter: &[SockFilter]) -> Vec<&'static str> {
    HUSK_NEEDS
        .iter()
        .filter(|(_, nr, _)| {
            let ret = eval::run(filter, &eval::Data::syscall(*nr as i32, &[])) & RET_ACTION_FULL;
            ret != RET_ALLOW && ret != RET_LOG
        })
        .map(|(name, _, _)| *name)
        .collect()
}

/// Why each missing syscall is needed, for the error message.
pub fn explain(missing: &[&str]) -> String {
    HUSK_NEEDS
        .iter()
        .filter(|(name, _, _)| missing.contains(name))
        .map(|(name, _, why)| format!("{name} {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(profile: &str) -> Vec<SockFilter> {
        crate::seccomp::compile_text("test", profile, 0, None).unwrap().filter
    }

    #[test]
    fn shipped_profiles_allow_what_husk_needs() {
        for s in crate::seccomp::SHIPPED {
            assert_eq!(missing(s.filter), Vec::<&str>::new(), "{}", s.name);
        }
    }

    #[test]
    fn a_profile_allowing_nothing_misses_every_need() {
        let f = compiled(r#"{"defaultAction":"SCMP_ACT_ERRNO"}"#);
        assert_eq!(missing(&f), vec!["execve", "sendto", "exit_group"]);
        let f = compiled(
            r#"{"defaultAction":"SCMP_ACT_KILL_PROCESS","syscalls":[{"names":["execve"],"action":"SCMP_ACT_ALLOW"}]}"#,
        );
        assert_eq!(missing(&f), vec!["sendto", "exit_group"]);
    }

    #[test]
    fn allowed_or_logged_needs_are_met() {
        let f = compiled(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["execve","exit_group"],"action":"SCMP_ACT_ALLOW"},
                {"names":["sendto"],"action":"SCMP_ACT_LOG"}]}"#,
        );
        assert_eq!(missing(&f), Vec::<&str>::new());
    }

    #[test]
    fn the_explanation_names_each_missing_call_and_why() {
        let e = explain(&["execve", "exit_group"]);
        assert!(e.starts_with("execve starts the command; exit_group "), "{e}");
        assert!(!e.contains("sendto"));
    }
}
