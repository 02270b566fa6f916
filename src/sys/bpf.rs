//! bpf(2) for cgroup device programs: load a `BPF_PROG_TYPE_CGROUP_DEVICE`
//! program and attach it to a cgroup directory (cgroup v2's device
//! controller is such a program; src/cgroup/devices.rs builds it).

use super::{SysResult, check};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
/// Programs attached to a cgroup and its ancestors all run (each must
/// allow); the container's own program does not replace another's.
const BPF_F_ALLOW_MULTI: u32 = 2;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst_reg in the low nibble, src_reg in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// The head of `union bpf_attr` for BPF_PROG_LOAD (the kernel zero-fills
/// what a shorter attr leaves out).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// Loads a cgroup device program; on a verifier refusal, the errno and the
/// verifier's log (`log` is filled, up to its length).
pub fn load_cgroup_device(insns: &[Insn], name: &[u8], log: &mut [u8]) -> SysResult<OwnedFd> {
    let license = c"Apache-2.0";
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: if log.is_empty() { 0 } else { 1 },
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    let n = name.len().min(15);
    attr.prog_name[..n].copy_from_slice(&name[..n]);
    // SAFETY: `attr` is a valid BPF_PROG_LOAD attr of the size given; the
    // pointers in it (instructions, license, log) outlive the call, and the
    // kernel writes at most `log_size` bytes into `log`.
    let fd = check(unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &mut attr as *mut ProgLoad, size_of::<ProgLoad>())
    })?;
    // SAFETY: a successful BPF_PROG_LOAD returns a new fd that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches a loaded device program to the cgroup directory `cgroup`
/// (BPF_F_ALLOW_MULTI: programs above it keep running too). It stays
/// attached until the cgroup is removed; the program's fd may be closed.
pub fn attach_cgroup_device(cgroup: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> SysResult<()> {
    let mut attr = ProgAttach {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        replace_bpf_fd: 0,
    };
    // SAFETY: `attr` is a valid BPF_PROG_ATTACH attr of the size given;
    // both fds are open for the duration of the call.
    check(unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_ATTACH, &mut attr as *mut ProgAttach, size_of::<ProgAttach>())
    })?;
    Ok(())
}
