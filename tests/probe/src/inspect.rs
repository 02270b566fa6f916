//! Subcommands that look around and report what the process can see:
//! credentials, capabilities, fds, environment, interfaces, processes, SysV
//! IPC objects, hostname, cwd and terminal.

use crate::util::{Report, Usage, cstr, errno, errno_name, io_outcome, read_lossy, readlink, usage};
use serde_json::{Map, Value, json};

/// `Name:\tvalue` from /proc/self/status.
fn status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(|v| v.trim().to_string()))
}

pub fn caps() -> Result<Report, Usage> {
    // capget v3: two 32-bit words per set.
    let mut hdr = [0x2008_0522u32, 0];
    let mut data = [0u32; 6];
    // SAFETY: header and data buffers match _LINUX_CAPABILITY_VERSION_3.
    let r = unsafe { libc::syscall(libc::SYS_capget, hdr.as_mut_ptr(), data.as_mut_ptr()) };
    let word = |i: usize| (data[i] as u64) | ((data[i + 3] as u64) << 32);
    let (eff, prm, inh) = if r == 0 { (word(0), word(1), word(2)) } else { (u64::MAX, u64::MAX, u64::MAX) };
    let mut bnd = 0u64;
    let mut amb = 0u64;
    for cap in 0..64u64 {
        // SAFETY: prctl reads with integer arguments only.
        let b = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) };
        if b < 0 {
            break;
        }
        if b == 1 {
            bnd |= 1 << cap;
        }
        // SAFETY: as above.
        let a = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET, cap, 0, 0) };
        if a == 1 {
            amb |= 1 << cap;
        }
    }
    // SAFETY: integer-only prctl.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    let status = read_lossy("/proc/self/status").unwrap_or_default();
    let hex = |v: u64| format!("{v:016x}");
    let fields = json!({
        "effective": hex(eff), "permitted": hex(prm), "inheritable": hex(inh),
        "bounding": hex(bnd), "ambient": hex(amb),
        "all_empty": eff == 0 && prm == 0 && inh == 0 && bnd == 0 && amb == 0,
        "no_new_privs": nnp == 1,
        "seccomp": status_field(&status, "Seccomp").and_then(|s| s.parse::<i64>().ok()),
        "seccomp_filters": status_field(&status, "Seccomp_filters").and_then(|s| s.parse::<i64>().ok()),
        "proc_status": {
            "CapInh": status_field(&status, "CapInh"), "CapPrm": status_field(&status, "CapPrm"),
            "CapEff": status_field(&status, "CapEff"), "CapBnd": status_field(&status, "CapBnd"),
            "CapAmb": status_field(&status, "CapAmb"), "NoNewPrivs": status_field(&status, "NoNewPrivs"),
        },
    });
    Ok(Report::new(r == 0, fields))
}

pub fn ids() -> Result<Report, Usage> {
    let (mut ru, mut eu, mut su, mut rg, mut eg, mut sg) = (0, 0, 0, 0, 0, 0);
    // SAFETY: valid out-pointers.
    unsafe {
        libc::getresuid(&mut ru, &mut eu, &mut su);
        libc::getresgid(&mut rg, &mut eg, &mut sg);
    }
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: groups has room for 256 entries.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    groups.truncate(n.max(0) as usize);
    Ok(Report::new(
        true,
        json!({
            "uid": ru, "euid": eu, "suid": su, "gid": rg, "egid": eg, "sgid": sg, "groups": groups,
            "uid_map": read_lossy("/proc/self/uid_map"), "gid_map": read_lossy("/proc/self/gid_map"),
            "setgroups": read_lossy("/proc/self/setgroups").map(|s| s.trim().to_string()),
        }),
    ))
}

pub fn fds() -> Result<Report, Usage> {
    // SAFETY: NUL-terminated path; the DIR is closed below.
    let dir = unsafe { libc::opendir(c"/proc/self/fd".as_ptr()) };
    if dir.is_null() {
        let e = errno();
        return Ok(Report::new(false, json!({"errno": errno_name(e)})));
    }
    // SAFETY: dir is a live DIR*.
    let own = unsafe { libc::dirfd(dir) };
    let mut list = Vec::new();
    loop {
        // SAFETY: dir is a live DIR*; the entry is read before the next call.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) }.to_string_lossy().into_owned();
        let Ok(fd) = name.parse::<i32>() else { continue };
        if fd != own {
            list.push(fd);
        }
    }
    // SAFETY: closing the DIR we opened.
    unsafe { libc::closedir(dir) };
    list.sort_unstable();
    let entries: Vec<Value> =
        list.iter().map(|fd| json!({"fd": fd, "target": readlink(&format!("/proc/self/fd/{fd}"))})).collect();
    Ok(Report::new(true, json!({"fds": list, "entries": entries})))
}

pub fn env() -> Result<Report, Usage> {
    let mut map = Map::new();
    for (k, v) in std::env::vars_os() {
        map.insert(k.to_string_lossy().into_owned(), json!(v.to_string_lossy()));
    }
    Ok(Report::new(true, json!({"env": map})))
}

pub fn ifaces() -> Result<Report, Usage> {
    let mut names: Vec<String> = Vec::new();
    if let Some(dev) = read_lossy("/proc/net/dev") {
        names.extend(dev.lines().skip(2).filter_map(|l| l.split(':').next()).map(|n| n.trim().to_string()));
    }
    // SAFETY: if_nameindex returns an array terminated by a zero entry,
    // freed below.
    unsafe {
        let idx = libc::if_nameindex();
        if !idx.is_null() {
            let mut p = idx;
            while (*p).if_index != 0 {
                let n = std::ffi::CStr::from_ptr((*p).if_name).to_string_lossy().into_owned();
                if !names.contains(&n) {
                    names.push(n);
                }
                p = p.add(1);
            }
            libc::if_freenameindex(idx);
        }
    }
    // SAFETY: a plain datagram socket for SIOCGIFFLAGS, closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let list: Vec<Value> = names
        .iter()
        .map(|name| {
            // SAFETY: ifreq is plain old data.
            let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
            for (d, s) in req.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
                *d = s as libc::c_char;
            }
            // SAFETY: req is a valid ifreq with a NUL-terminated name.
            let r = unsafe { libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) };
            // SAFETY: after SIOCGIFFLAGS the union holds the flags.
            let flags = if r == 0 { i64::from(unsafe { req.ifr_ifru.ifru_flags }) } else { -1 };
            json!({
                "name": name, "flags": flags,
                "up": flags >= 0 && flags & libc::IFF_UP as i64 != 0,
                "loopback": flags >= 0 && flags & libc::IFF_LOOPBACK as i64 != 0,
            })
        })
        .collect();
    if sock >= 0 {
        // SAFETY: closing our socket.
        unsafe { libc::close(sock) };
    }
    Ok(Report::new(true, json!({"interfaces": list, "names": names})))
}

pub fn ps() -> Result<Report, Usage> {
    let mut procs = Vec::new();
    let dir = match std::fs::read_dir("/proc") {
        Ok(d) => d,
        Err(e) => return Ok(Report::new(false, io_outcome(&Err::<(), _>(e)))),
    };
    let mut pids: Vec<i32> = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    pids.sort_unstable();
    for pid in pids {
        let comm = read_lossy(&format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok().map(|b| {
            let parts: Vec<String> =
                b.split(|c| *c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into()).collect();
            parts.join(" ")
        });
        let stat = read_lossy(&format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the last ')' of "pid (comm) S ppid ...".
        let rest: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
        procs.push(json!({
            "pid": pid, "comm": comm, "cmdline": cmdline,
            "state": rest.first(), "ppid": rest.get(1).and_then(|s| s.parse::<i64>().ok()),
        }));
    }
    Ok(Report::new(true, json!({"self": std::process::id(), "processes": procs})))
}

/// SysV ids visible through `*ctl(*_INFO)` + `*_STAT` over every index,
/// and through /proc/sysvipc.
pub fn ipc() -> Result<Report, Usage> {
    const IPC_INFO_CMDS: [(&str, libc::c_long, i32, i32); 3] = [
        ("msg", libc::SYS_msgctl, 12 /* MSG_INFO */, 11 /* MSG_STAT */),
        ("shm", libc::SYS_shmctl, 14 /* SHM_INFO */, 13 /* SHM_STAT */),
        ("sem", libc::SYS_semctl, 19 /* SEM_INFO */, 18 /* SEM_STAT */),
    ];
    let mut out = Map::new();
    for (kind, nr, info, stat) in IPC_INFO_CMDS {
        let mut buf = [0u64; 64];
        // SAFETY: buf is larger than any *_info / *id_ds struct; semctl
        // takes (id, semnum, cmd, arg), the others (id, cmd, buf).
        let max = unsafe {
            if kind == "sem" {
                libc::syscall(nr, 0, 0, info, buf.as_mut_ptr())
            } else {
                libc::syscall(nr, 0, info, buf.as_mut_ptr())
            }
        };
        let mut ids = Vec::new();
        for idx in 0..=max.max(-1) {
            // SAFETY: as above.
            let id = unsafe {
                if kind == "sem" {
                    libc::syscall(nr, idx, 0, stat, buf.as_mut_ptr())
                } else {
                    libc::syscall(nr, idx, stat, buf.as_mut_ptr())
                }
            };
            if id >= 0 {
                ids.push(id);
            }
        }
        let proc_ids: Vec<i64> = read_lossy(&format!("/proc/sysvipc/{kind}"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .collect();
        out.insert(kind.into(), json!({"max_index": max, "ids": ids, "proc_ids": proc_ids}));
    }
    Ok(Report::new(true, Value::Object(out)))
}

pub fn hostname() -> Result<Report, Usage> {
    // SAFETY: utsname is plain old data filled by uname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out-pointer.
    let r = unsafe { libc::uname(&mut u) };
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok(Report::new(
        r == 0,
        json!({"hostname": field(&u.nodename), "domainname": field(&u.domainname),
               "proc": read_lossy("/proc/sys/kernel/hostname").map(|s| s.trim().to_string())}),
    ))
}

pub fn cwd() -> Result<Report, Usage> {
    let cwd = std::env::current_dir();
    let fields = json!({
        "getcwd": cwd.as_ref().ok().map(|p| p.to_string_lossy().into_owned()),
        "getcwd_result": io_outcome(&cwd),
        "proc_cwd": readlink("/proc/self/cwd"),
    });
    Ok(Report::new(cwd.is_ok(), fields))
}

/// Is there a controlling terminal? ok = yes.
pub fn tty() -> Result<Report, Usage> {
    // SAFETY: NUL-terminated path; fd closed below.
    let fd = unsafe { libc::open(c"/dev/tty".as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    let e = errno();
    if fd >= 0 {
        // SAFETY: closing our fd.
        unsafe { libc::close(fd) };
    }
    // SAFETY: isatty/getsid/getpgrp take integers only.
    let (atty, sid, pgrp) = unsafe {
        ([libc::isatty(0) == 1, libc::isatty(1) == 1, libc::isatty(2) == 1], libc::getsid(0), libc::getpgrp())
    };
    let fields = json!({
        "controlling_tty": fd >= 0,
        "dev_tty_errno": if fd >= 0 { None } else { Some(errno_name(e)) },
        "isatty": atty, "sid": sid, "pgrp": pgrp, "pid": std::process::id(),
        "fd0": readlink("/proc/self/fd/0"),
    });
    Ok(Report::new(fd >= 0, fields))
}

/// Mount flags of the filesystem holding PATH (nosuid, nodev, ro...).
pub fn statfs(args: &[String]) -> Result<Report, Usage> {
    let [path] = args else { return Err(usage("statfs PATH")) };
    // SAFETY: statvfs is plain old data filled by the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let c = cstr(path);
    // SAFETY: NUL-terminated path and valid out-pointer.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if r != 0 {
        let e = errno();
        return Ok(Report::new(false, json!({"path": path, "errno": errno_name(e)})));
    }
    let f = st.f_flag;
    Ok(Report::new(
        true,
        json!({
            "path": path, "flags": f,
            "read_only": f & libc::ST_RDONLY != 0, "nosuid": f & libc::ST_NOSUID != 0,
            "nodev": f & libc::ST_NODEV != 0, "noexec": f & libc::ST_NOEXEC != 0,
            "bytes_total": st.f_blocks * st.f_frsize, "bytes_free": st.f_bfree * st.f_frsize,
        }),
    ))
}
