//! `try-syscall NAME`: one privileged or dangerous syscall with harmless
//! arguments. Where the kernel checks permission before the arguments, the
//! arguments are chosen so that a *permitted* call fails harmlessly (EINVAL,
//! ENOENT, EBADF) and a *denied* call fails with EPERM/EACCES; where success
//! is the only signal, the call is one whose success changes nothing outside
//! the (forked, short-lived) probe child.

use crate::util::{Attempt, Forked, Report, Usage, errno, errno_name, forked, usage, wait_pid};
use serde_json::json;

/// A syscall name, the attempt, and a one-line description of what it does.
type Entry = (&'static str, fn() -> Attempt, &'static str);

/// Every name `try-syscall` accepts.
pub const TABLE: &[Entry] = &[
    ("mount", mount, "mount a 4k tmpfs on a fresh dir under /tmp or cwd (unmounted at once)"),
    ("umount2", umount2, "umount2(/proc/self/fd): EPERM if denied, EINVAL (not a mount) if allowed"),
    ("pivot_root", pivot_root, "pivot_root of two absent paths: EPERM if denied, ENOENT if allowed"),
    ("chroot", chroot, "chroot(\"/\")"),
    ("unshare", unshare, "unshare(CLONE_NEWNS)"),
    ("setns", setns, "setns into the probe's own uts namespace"),
    ("keyctl", keyctl, "keyctl(KEYCTL_GET_KEYRING_ID, session keyring, create=0)"),
    ("add_key", add_key, "add_key a \"user\" key to the process keyring"),
    ("request_key", request_key, "request_key of an absent key: ENOKEY if allowed"),
    ("bpf", bpf, "bpf(BPF_MAP_CREATE) of a 1-entry array map"),
    ("perf_event_open", perf_event_open, "software cpu-clock counter on self, user space only"),
    ("userfaultfd", userfaultfd, "userfaultfd(O_CLOEXEC) (kernel faults included)"),
    ("io_uring_setup", io_uring_setup, "io_uring_setup with 1 entry"),
    ("kexec_load", kexec_load, "kexec_load with an unknown flag: EPERM if denied, EINVAL if allowed"),
    ("init_module", init_module, "init_module of an empty image: EPERM if denied, ENOEXEC if allowed"),
    ("finit_module", finit_module, "finit_module(-1): EPERM if denied, EBADF if allowed"),
    ("delete_module", delete_module, "delete_module of an absent module: EPERM if denied, ENOENT if allowed"),
    ("reboot", reboot, "reboot with a bad magic2: EPERM if denied, EINVAL if allowed"),
    ("swapon", swapon, "swapon of an absent file: EPERM if denied, ENOENT if allowed"),
    ("acct", acct, "acct of an absent file: EPERM if denied, ENOENT if allowed"),
    ("settimeofday", settimeofday, "settimeofday(NULL, NULL): a permission check that sets nothing"),
    ("clock_settime", clock_settime, "clock_settime(CLOCK_REALTIME) to the time just read"),
    ("adjtimex", adjtimex, "adjtimex(ADJ_MAXERROR) to the value just read"),
    ("iopl", iopl, "iopl(3), back to 0 on success"),
    ("ioperm", ioperm, "ioperm(0x80, 1, on), off again on success"),
    ("open_by_handle_at", open_by_handle_at, "reopen / from its file handle (the 'shocker' primitive)"),
    ("fsopen", fsopen, "fsopen(\"tmpfs\")"),
    ("open_tree", open_tree, "open_tree(\"/\", OPEN_TREE_CLONE): a detached copy, closed at once"),
    ("move_mount", move_mount, "move_mount of two absent paths: EPERM if denied, ENOENT if allowed"),
    ("mount_setattr", mount_setattr, "mount_setattr(\"/\") changing nothing: EPERM if denied, 0 if allowed"),
    ("clone-newuser", clone_newuser, "clone(CLONE_NEWUSER); the child exits at once"),
    ("clone3", clone3, "clone3 as a plain fork; the child exits at once"),
    ("ptrace-attach-1", ptrace_attach_1, "PTRACE_SEIZE pid 1 (no stop; detached when the probe exits)"),
    ("personality", personality, "personality(ADDR_NO_RANDOMIZE)"),
    ("socket-packet", socket_packet, "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)"),
    ("socket-raw", socket_raw, "socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)"),
    ("x32-getpid", x32_getpid, "getpid through the x32 ABI (__X32_SYSCALL_BIT)"),
    ("i386-int80", i386_int80, "getpid through the i386 ABI (int 0x80)"),
];

pub fn try_syscall(args: &[String]) -> Result<Report, Usage> {
    let [name] = args else { return Err(usage("try-syscall NAME")) };
    let Some((_, f, what)) = TABLE.iter().find(|(n, _, _)| n == name) else {
        return Err(usage(format!("unknown syscall {name:?}; try `husk-probe list-syscalls`")));
    };
    let report = match forked(*f) {
        Ok(Forked::Done(a)) if a.ret >= 0 => Report::new(true, json!({"name": name, "ret": a.ret, "what": what})),
        Ok(Forked::Done(a)) => {
            Report::new(false, json!({"name": name, "errno": errno_name(a.errno), "errno_num": a.errno, "what": what}))
        }
        Ok(Forked::Killed(sig)) => Report::new(false, json!({"name": name, "killed_by_signal": sig, "what": what})),
        Ok(Forked::Vanished(code)) => Report::new(false, json!({"name": name, "child_exit": code, "what": what})),
        Err(e) => {
            let n = e.raw_os_error().unwrap_or(0);
            Report::new(false, json!({"name": name, "fork_errno": errno_name(n), "what": what}))
        }
    };
    Ok(report)
}

pub fn list() -> Report {
    let names: Vec<_> = TABLE.iter().map(|(n, _, what)| json!({"name": n, "what": what})).collect();
    Report::new(true, json!({"syscalls": names}))
}

fn sys(nr: libc::c_long, a: [usize; 5]) -> Attempt {
    // SAFETY: every caller passes pointers to live locals (or null/ints) that
    // match the kernel ABI of `nr`.
    Attempt::of(unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4]) })
}

fn p<T>(r: &T) -> usize {
    r as *const T as usize
}

/// For buffers the kernel writes into.
fn pm<T>(r: &mut T) -> usize {
    r as *mut T as usize
}

const ABSENT_A: &std::ffi::CStr = c"/husk-probe-absent-a";
const ABSENT_B: &std::ffi::CStr = c"/husk-probe-absent-b";

/// A fresh empty directory to mount on, under /tmp or the cwd.
fn scratch_dir() -> Option<std::ffi::CString> {
    for base in ["/tmp", "."] {
        let mut tmpl = format!("{base}/husk-probe-XXXXXX\0").into_bytes();
        // SAFETY: tmpl is a NUL-terminated, writable template.
        if !unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) }.is_null() {
            tmpl.pop();
            return std::ffi::CString::new(tmpl).ok();
        }
    }
    None
}

fn mount() -> Attempt {
    let Some(dir) = scratch_dir() else { return Attempt::fail(libc::EROFS) };
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: all strings are NUL-terminated and live for the call.
    let r =
        unsafe { libc::mount(c"none".as_ptr(), dir.as_ptr(), c"tmpfs".as_ptr(), flags, c"size=4k".as_ptr().cast()) };
    let a = Attempt::of(r.into());
    // SAFETY: undoing our own mount and removing our own empty dir.
    unsafe {
        if r == 0 {
            libc::umount2(dir.as_ptr(), libc::MNT_DETACH);
        }
        libc::rmdir(dir.as_ptr());
    }
    a
}

fn umount2() -> Attempt {
    // SAFETY: NUL-terminated path.
    Attempt::of(unsafe { libc::umount2(c"/proc/self/fd".as_ptr(), 0) }.into())
}

fn pivot_root() -> Attempt {
    sys(libc::SYS_pivot_root, [ABSENT_A.as_ptr() as usize, ABSENT_B.as_ptr() as usize, 0, 0, 0])
}

fn chroot() -> Attempt {
    // SAFETY: NUL-terminated path.
    Attempt::of(unsafe { libc::chroot(c"/".as_ptr()) }.into())
}

fn unshare() -> Attempt {
    // SAFETY: affects only this forked child.
    Attempt::of(unsafe { libc::unshare(libc::CLONE_NEWNS) }.into())
}

fn setns() -> Attempt {
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c"/proc/self/ns/uts".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Attempt::fail(errno());
    }
    // SAFETY: fd is a namespace fd we just opened.
    Attempt::of(unsafe { libc::setns(fd, libc::CLONE_NEWUTS) }.into())
}

const KEY_SPEC_PROCESS_KEYRING: i32 = -2;
const KEY_SPEC_SESSION_KEYRING: i32 = -3;

fn keyctl() -> Attempt {
    sys(libc::SYS_keyctl, [0, KEY_SPEC_SESSION_KEYRING as usize, 0, 0, 0])
}

fn add_key() -> Attempt {
    let (ty, desc, data) = (c"user", c"husk-probe", b"x");
    let a =
        [ty.as_ptr() as usize, desc.as_ptr() as usize, data.as_ptr() as usize, 1, KEY_SPEC_PROCESS_KEYRING as usize];
    sys(libc::SYS_add_key, a)
}

fn request_key() -> Attempt {
    let (ty, desc) = (c"user", c"husk-probe-absent");
    sys(libc::SYS_request_key, [ty.as_ptr() as usize, desc.as_ptr() as usize, 0, 0, 0])
}

fn bpf() -> Attempt {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries.
    let mut attr = [0u32; 32];
    attr[..4].copy_from_slice(&[2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1]);
    sys(libc::SYS_bpf, [0 /* BPF_MAP_CREATE */, p(&attr), std::mem::size_of_val(&attr), 0, 0])
}

fn perf_event_open() -> Attempt {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes) is enough.
    let mut attr = [0u64; 16];
    attr[0] = 1 /* PERF_TYPE_SOFTWARE */ | (64u64 << 32); // type, size
    attr[1] = 0; // PERF_COUNT_SW_CPU_CLOCK
    attr[5] = 1 | (1 << 5) | (1 << 6); // disabled, exclude_kernel, exclude_hv
    sys(libc::SYS_perf_event_open, [pm(&mut attr), 0, usize::MAX /* cpu -1 */, usize::MAX /* group -1 */, 8])
}

fn userfaultfd() -> Attempt {
    sys(libc::SYS_userfaultfd, [libc::O_CLOEXEC as usize, 0, 0, 0, 0])
}

fn io_uring_setup() -> Attempt {
    let mut params = [0u32; 30]; // struct io_uring_params, 120 bytes
    sys(libc::SYS_io_uring_setup, [1, pm(&mut params), 0, 0, 0])
}

fn kexec_load() -> Attempt {
    sys(libc::SYS_kexec_load, [0, 0, 0, 0x8000, 0])
}

fn init_module() -> Attempt {
    sys(libc::SYS_init_module, [0, 0, c"".as_ptr() as usize, 0, 0])
}

fn finit_module() -> Attempt {
    sys(libc::SYS_finit_module, [usize::MAX /* fd -1 */, c"".as_ptr() as usize, 0, 0, 0])
}

fn delete_module() -> Attempt {
    sys(libc::SYS_delete_module, [c"husk_probe_absent".as_ptr() as usize, libc::O_NONBLOCK as usize, 0, 0, 0])
}

fn reboot() -> Attempt {
    sys(libc::SYS_reboot, [0xfee1dead, 0, 0 /* CAD_OFF */, 0, 0])
}

fn swapon() -> Attempt {
    sys(libc::SYS_swapon, [ABSENT_A.as_ptr() as usize, 0, 0, 0, 0])
}

fn acct() -> Attempt {
    sys(libc::SYS_acct, [ABSENT_A.as_ptr() as usize, 0, 0, 0, 0])
}

fn settimeofday() -> Attempt {
    // Raw: glibc turns settimeofday(NULL, NULL) into clock_settime(NULL) -> EFAULT.
    sys(libc::SYS_settimeofday, [0, 0, 0, 0, 0])
}

fn clock_settime() -> Attempt {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    sys(libc::SYS_clock_settime, [libc::CLOCK_REALTIME as usize, p(&ts), 0, 0, 0])
}

fn adjtimex() -> Attempt {
    // SAFETY: timex is plain old data; all-zero is a valid value.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let r = sys(libc::SYS_adjtimex, [pm(&mut tx), 0, 0, 0, 0]);
    if r.ret < 0 {
        return r;
    }
    tx.modes = libc::ADJ_MAXERROR;
    sys(libc::SYS_adjtimex, [pm(&mut tx), 0, 0, 0, 0])
}

fn iopl() -> Attempt {
    let r = sys(libc::SYS_iopl, [3, 0, 0, 0, 0]);
    if r.ret >= 0 {
        sys(libc::SYS_iopl, [0, 0, 0, 0, 0]);
    }
    r
}

fn ioperm() -> Attempt {
    let r = sys(libc::SYS_ioperm, [0x80, 1, 1, 0, 0]);
    if r.ret >= 0 {
        sys(libc::SYS_ioperm, [0x80, 1, 0, 0, 0]);
    }
    r
}

fn open_by_handle_at() -> Attempt {
    // struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[128]; }
    let mut fh = [0u32; 2 + 32];
    fh[0] = 128;
    let mut mount_id = 0i32;
    let named = sys(
        libc::SYS_name_to_handle_at,
        [libc::AT_FDCWD as usize, c"/".as_ptr() as usize, pm(&mut fh), pm(&mut mount_id), 0],
    );
    if named.ret < 0 {
        // A bogus handle still meets the capability check first.
        fh[0] = 8;
        fh[1] = 1;
    }
    // SAFETY: NUL-terminated path.
    let root = unsafe { libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    sys(libc::SYS_open_by_handle_at, [root as usize, p(&fh), libc::O_RDONLY as usize, 0, 0])
}

fn fsopen() -> Attempt {
    sys(libc::SYS_fsopen, [c"tmpfs".as_ptr() as usize, 1 /* FSOPEN_CLOEXEC */, 0, 0, 0])
}

fn open_tree() -> Attempt {
    let flags = 1 /* OPEN_TREE_CLONE */ | libc::O_CLOEXEC as usize;
    sys(libc::SYS_open_tree, [libc::AT_FDCWD as usize, c"/".as_ptr() as usize, flags, 0, 0])
}

fn move_mount() -> Attempt {
    let at = libc::AT_FDCWD as usize;
    sys(libc::SYS_move_mount, [at, ABSENT_A.as_ptr() as usize, at, ABSENT_B.as_ptr() as usize, 0])
}

fn mount_setattr() -> Attempt {
    // struct mount_attr { attr_set, attr_clr, propagation, userns_fd }: all
    // zero, so a permitted call is a no-op.
    let attr = [0u64; 4];
    sys(libc::SYS_mount_setattr, [libc::AT_FDCWD as usize, c"/".as_ptr() as usize, 0, p(&attr), 32])
}

/// Waits for a fork-like child that `_exit(0)`s at once.
fn reap_child(r: Attempt) -> Attempt {
    if r.ret == 0 {
        // SAFETY: we are the new child; leave without unwinding.
        unsafe { libc::_exit(0) };
    }
    if r.ret > 0 {
        wait_pid(r.ret as libc::pid_t);
    }
    r
}

fn clone_newuser() -> Attempt {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as usize;
    reap_child(sys(libc::SYS_clone, [flags, 0, 0, 0, 0]))
}

fn clone3() -> Attempt {
    // struct clone_args (CLONE_ARGS_SIZE_VER0 = 64): only exit_signal set.
    let mut args = [0u64; 8];
    args[4] = libc::SIGCHLD as u64;
    reap_child(sys(libc::SYS_clone3, [p(&args), 64, 0, 0, 0]))
}

fn ptrace_attach_1() -> Attempt {
    sys(libc::SYS_ptrace, [libc::PTRACE_SEIZE as usize, 1, 0, 0, 0])
}

fn personality() -> Attempt {
    sys(libc::SYS_personality, [0x0040000 /* ADDR_NO_RANDOMIZE */, 0, 0, 0, 0])
}

fn socket_packet() -> Attempt {
    let proto = (libc::ETH_P_ALL as u16).to_be() as usize;
    sys(libc::SYS_socket, [libc::AF_PACKET as usize, libc::SOCK_RAW as usize, proto, 0, 0])
}

fn socket_raw() -> Attempt {
    sys(libc::SYS_socket, [libc::AF_INET as usize, libc::SOCK_RAW as usize, libc::IPPROTO_ICMP as usize, 0, 0])
}

fn x32_getpid() -> Attempt {
    sys(0x4000_0000 | libc::SYS_getpid, [0; 5])
}

fn i386_int80() -> Attempt {
    let ret: i64;
    // SAFETY: i386 getpid (nr 20) through the compat gate takes no arguments
    // and returns in eax; the registers the compat entry may touch are
    // declared clobbered. If ia32 emulation is off the child dies (SIGSEGV),
    // which `forked` reports.
    unsafe {
        std::arch::asm!("int 0x80", inlateout("rax") 20i64 => ret,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _, options(nostack));
    }
    let ret = ret as i32 as i64;
    if ret < 0 { Attempt { ret: -1, errno: (-ret) as i32 } } else { Attempt { ret, errno: 0 } }
}
