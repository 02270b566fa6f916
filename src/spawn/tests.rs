//! Each setup step reports its own name when it fails: a failure blamed on
//! the wrong step sends whoever debugs a host to the wrong syscall.

use super::{ChildStdio, child, command};
use crate::step::{Step, StepError};
use crate::sys::Errno;

/// Runs `f` on a thread of its own whose `rt_sigprocmask` fails with EPERM
/// (a seccomp filter binds only the thread that installs it, and dies with it).
fn with_sigprocmask_refused(f: fn() -> Result<(), StepError>) -> Result<(), StepError> {
    std::thread::spawn(move || {
        let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
        let program = [
            stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: libc::SYS_rt_sigprocmask as u32,
            },
            stmt((libc::BPF_RET | libc::BPF_K) as u16, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
            stmt((libc::BPF_RET | libc::BPF_K) as u16, libc::SECCOMP_RET_ALLOW),
        ];
        nix::sys::prctl::set_no_new_privs().expect("no_new_privs");
        crate::sys::seccomp::install_filter(&program, 0).expect("installing the test filter");
        f()
    })
    .join()
    .expect("the step thread panicked")
}

#[test]
fn failed_stdio_redirection_names_redirect_stdio() {
    // An fd that is not open: dup2 fails with EBADF and leaves fd 1 alone.
    let err = child::redirect_stdio(ChildStdio { stdin: None, stdout: Some(-1), stderr: None }).unwrap_err();
    assert_eq!((err.step, err.errno), (Step::RedirectStdio, Errno::EBADF));
    assert_eq!(err.step.name(), "redirect_stdio");
}

#[test]
fn failed_signal_block_in_the_init_names_block_signals() {
    let err = with_sigprocmask_refused(child::block_signals).unwrap_err();
    assert_eq!((err.step, err.errno), (Step::BlockSignals, Errno::EPERM));
    assert_eq!(err.step.name(), "block_signals");
}

#[test]
fn failed_signal_reset_in_the_command_names_reset_signals() {
    let err = with_sigprocmask_refused(command::reset_signals).unwrap_err();
    assert_eq!((err.step, err.errno), (Step::ResetSignals, Errno::EPERM));
    assert_eq!(err.step.name(), "reset_signals");
}
