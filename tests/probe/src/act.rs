//! Subcommands that try to do something: write, read, mknod, connect,
//! inject into a tty, open the runtime's binary, spawn zombies or daemons,
//! and consume resources.

use crate::util::{
    Attempt, Forked, Report, Usage, cstr, errno, errno_name, forked, io_outcome, outcome, parse_secs, parse_size,
    read_lossy, readlink, usage, wait_pid,
};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn one<'a>(args: &'a [String], what: &str) -> Result<&'a str, Usage> {
    match args {
        [a] => Ok(a),
        _ => Err(usage(what.to_string())),
    }
}

/// Creates PATH and writes a line; an existing PATH is only opened for
/// writing (no truncation, nothing written), so a test that expects a
/// denial can never damage a host file when isolation is broken.
pub fn write(args: &[String]) -> Result<Report, Usage> {
    let path = one(args, "write PATH")?;
    use std::os::unix::fs::OpenOptionsExt;
    let existing = std::fs::symlink_metadata(path).is_ok();
    let r = if existing {
        std::fs::OpenOptions::new().write(true).open(path).map(drop)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .and_then(|mut f| f.write_all(b"husk-probe\n"))
    };
    let mut v = io_outcome(&r);
    v["path"] = json!(path);
    v["existing"] = json!(existing);
    Ok(Report::new(r.is_ok(), v))
}

pub fn read(args: &[String]) -> Result<Report, Usage> {
    let path = one(args, "read PATH")?;
    let mut buf = vec![0u8; 4096];
    let r = std::fs::File::open(path).and_then(|mut f| f.read(&mut buf));
    let mut v = io_outcome(&r);
    v["path"] = json!(path);
    if let Ok(n) = r {
        v["bytes"] = json!(n);
        v["head"] = json!(String::from_utf8_lossy(&buf[..n.min(256)]));
    }
    Ok(Report::new(r.is_ok(), v))
}

pub fn mknod(args: &[String]) -> Result<Report, Usage> {
    let path = one(args, "mknod PATH")?;
    let c = cstr(path);
    // SAFETY: NUL-terminated path; a char device 1:3 (/dev/null's numbers).
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    let mut v = outcome(r.into(), errno());
    v["path"] = json!(path);
    Ok(Report::new(r == 0, v))
}

pub fn connect(args: &[String]) -> Result<Report, Usage> {
    let target = one(args, "connect IP:PORT")?;
    let addr: std::net::SocketAddr = target.parse().map_err(|_| usage(format!("not IP:PORT: {target:?}")))?;
    let r = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3));
    let mut v = io_outcome(&r);
    v["addr"] = json!(target);
    Ok(Report::new(r.is_ok(), v))
}

/// TIOCSTI on fds 0..2: pushing a byte into the terminal's input queue is
/// how a sandbox escapes through a shared tty (CVE-2017-5226). ok = any fd
/// accepted it. The byte pushed is a NUL.
pub fn tiocsti() -> Result<Report, Usage> {
    let mut results = Vec::new();
    let mut any = false;
    for fd in 0..3 {
        let c: libc::c_char = 0;
        // SAFETY: TIOCSTI reads one byte from the pointer.
        let r = unsafe { libc::ioctl(fd, libc::TIOCSTI, &c) };
        any |= r == 0;
        let mut v = outcome(r.into(), errno());
        v["fd"] = json!(fd);
        results.push(v);
    }
    Ok(Report::new(any, json!({"fds": results})))
}

/// Opens the running binaries for writing (CVE-2019-5736 overwrites the
/// runtime through /proc/<pid>/exe). Nothing is written. ok = any opened.
pub fn exe_write() -> Result<Report, Usage> {
    let mut any = false;
    let mut results = Vec::new();
    for path in ["/proc/self/exe", "/proc/1/exe"] {
        for (mode, flags) in [("O_WRONLY", libc::O_WRONLY), ("O_RDWR", libc::O_RDWR)] {
            let c = cstr(path);
            // SAFETY: NUL-terminated path; the fd is closed at once.
            let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
            let e = errno();
            if fd >= 0 {
                // SAFETY: closing our own fd.
                unsafe { libc::close(fd) };
            }
            any |= fd >= 0;
            let mut v = outcome(fd.into(), e);
            v["path"] = json!(path);
            v["mode"] = json!(mode);
            v["target"] = json!(readlink(path));
            results.push(v);
        }
    }
    Ok(Report::new(any, json!({"opens": results})))
}

fn pid_state(pid: i32) -> Option<char> {
    let stat = read_lossy(&format!("/proc/{pid}/stat"))?;
    stat.rsplit_once(')')?.1.split_whitespace().next()?.chars().next()
}

/// N grandchildren exit while their parent exits without waiting: they are
/// re-parented to pid 1 as zombies. ok = all reaped within 5 s.
pub fn zombies(args: &[String]) -> Result<Report, Usage> {
    let n: usize = one(args, "zombies N")?.parse().map_err(|_| usage("zombies N (a count)"))?;
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Ok(Report::new(false, json!({"errno": errno_name(errno())})));
    }
    // SAFETY: single-threaded; the child only forks, writes and exits.
    let mid = unsafe { libc::fork() };
    if mid == 0 {
        for _ in 0..n {
            // SAFETY: as above; the grandchild exits at once.
            let g = unsafe { libc::fork() };
            if g == 0 {
                // SAFETY: leave without unwinding.
                unsafe { libc::_exit(0) };
            }
            if g > 0 {
                // SAFETY: writing a local to our pipe.
                unsafe { libc::write(fds[1], (&g as *const i32).cast(), 4) };
            }
        }
        // SAFETY: exit without reaping: the grandchildren become orphans.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closing our write end.
    unsafe { libc::close(fds[1]) };
    let mut pids = Vec::new();
    let mut b = [0u8; 4];
    // SAFETY: reading 4-byte pids into a local.
    while unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 4) } == 4 {
        pids.push(i32::from_ne_bytes(b));
    }
    // SAFETY: closing our read end.
    unsafe { libc::close(fds[0]) };
    if mid > 0 {
        wait_pid(mid);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left: Vec<i32> = pids.clone();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|p| pid_state(*p).is_some());
        std::thread::sleep(Duration::from_millis(10));
    }
    let states: Vec<Value> = left.iter().map(|p| json!({"pid": p, "state": pid_state(*p).map(String::from)})).collect();
    // SAFETY: integer-only call.
    let ppid_of_orphans = unsafe { libc::getpid() };
    Ok(Report::new(
        pids.len() == n && left.is_empty(),
        json!({"created": pids.len(), "unreaped": states, "probe_pid": ppid_of_orphans}),
    ))
}

/// Double fork + setsid; the grandchild re-execs the probe as
/// `husk-probe sleep MARKER SECONDS` (stdio inherited), so it can be found
/// by argv from the host. With HOLD, the probe itself then stays HOLD
/// seconds (to be killed by a timeout with its daemon running). ok = the
/// daemon was started.
pub fn daemon(args: &[String]) -> Result<Report, Usage> {
    let (marker, secs, hold) = match args {
        [m, s] => (m, s, 0.0),
        [m, s, h] => (m, s, parse_secs(h)?),
        _ => return Err(usage("daemon MARKER SECONDS [HOLD]")),
    };
    parse_secs(secs)?;
    let exe = cstr("/proc/self/exe");
    let argv_c = [cstr("husk-probe"), cstr("sleep"), cstr(marker), cstr(secs)];
    let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Ok(Report::new(false, json!({"errno": errno_name(errno())})));
    }
    // SAFETY: single-threaded; argv was built before forking.
    let mid = unsafe { libc::fork() };
    if mid == 0 {
        // SAFETY: setsid/fork/execve/write/_exit only, with pre-built data.
        unsafe {
            libc::setsid();
            let g = libc::fork();
            if g == 0 {
                libc::execve(exe.as_ptr(), argv.as_ptr(), environ_ptr());
                let e = -errno();
                libc::write(fds[1], (&e as *const i32).cast(), 4);
                libc::_exit(127);
            }
            libc::write(fds[1], (&g as *const i32).cast(), 4);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our write end.
    unsafe { libc::close(fds[1]) };
    let (mut pid, mut exec_errno) = (None, None);
    let mut b = [0u8; 4];
    // SAFETY: reading 4-byte values into a local.
    while unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 4) } == 4 {
        let v = i32::from_ne_bytes(b);
        if v > 0 { pid = Some(v) } else { exec_errno = Some(errno_name(-v)) }
    }
    // SAFETY: closing our read end.
    unsafe { libc::close(fds[0]) };
    if mid > 0 {
        wait_pid(mid);
    }
    let ok = pid.is_some() && exec_errno.is_none();
    let report = Report::new(ok, json!({"daemon_pid": pid, "marker": marker, "exec_errno": exec_errno}));
    if hold > 0.0 {
        // Print now: a timeout kills the probe before it could report.
        let code = report.print("daemon");
        std::thread::sleep(Duration::from_secs_f64(hold));
        std::process::exit(code);
    }
    Ok(report)
}

fn environ_ptr() -> *const *const libc::c_char {
    unsafe extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: reading the libc global environment pointer.
    unsafe { environ }
}

pub fn sleep(args: &[String]) -> Result<Report, Usage> {
    let [marker, secs] = args else { return Err(usage("sleep MARKER SECONDS")) };
    std::thread::sleep(Duration::from_secs_f64(parse_secs(secs)?));
    Ok(Report::new(true, json!({"marker": marker})))
}

/// Maps and touches SIZE bytes (optionally holding them HOLD seconds).
pub fn memhog(args: &[String]) -> Result<Report, Usage> {
    let (size, hold) = match args {
        [s] => (parse_size(s)?, 0.0),
        [s, h] => (parse_size(s)?, parse_secs(h)?),
        _ => return Err(usage("memhog SIZE [HOLD_SECONDS]")),
    };
    let len = size.max(1) as usize;
    // SAFETY: a fresh private anonymous mapping; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = errno();
        return Ok(Report::new(false, json!({"size": size, "errno": errno_name(e)})));
    }
    let base = p.cast::<u8>();
    let mut off = 0;
    while off < len {
        // SAFETY: off < len, inside the mapping.
        unsafe { base.add(off).write_volatile(1) };
        off += 4096;
    }
    std::thread::sleep(Duration::from_secs_f64(hold));
    Ok(Report::new(true, json!({"size": size, "touched": len})))
}

/// Forks sleeping children until fork fails or MAX (default 4096) is reached,
/// then kills them all. ok = MAX reached (nothing bounded the fork rate).
pub fn forkbomb(args: &[String]) -> Result<Report, Usage> {
    let max: usize = match args {
        [] => 4096,
        [m] => m.parse().map_err(|_| usage("forkbomb [MAX]"))?,
        _ => return Err(usage("forkbomb [MAX]")),
    };
    // SAFETY: integer-only call.
    let me = unsafe { libc::getpid() };
    let mut kids = Vec::new();
    let mut fail = None;
    while kids.len() < max {
        // SAFETY: single-threaded; the child only waits to die.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the children die with the probe, never outliving it.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != me {
                    libc::_exit(0);
                }
                loop {
                    libc::pause();
                }
            }
        }
        if pid < 0 {
            fail = Some(errno());
            break;
        }
        kids.push(pid);
    }
    for k in &kids {
        // SAFETY: killing our own children.
        unsafe { libc::kill(*k, libc::SIGKILL) };
    }
    for k in &kids {
        wait_pid(*k);
    }
    Ok(Report::new(fail.is_none(), json!({"forked": kids.len(), "max": max, "errno": fail.map(errno_name)})))
}

/// Starts N threads (glibc's pthread_create: clone3 first, clone when
/// clone3 answers ENOSYS) and joins them. ok = all N started.
pub fn threads(args: &[String]) -> Result<Report, Usage> {
    let n: usize = one(args, "threads N")?.parse().map_err(|_| usage("threads N"))?;
    let mut started = Vec::new();
    let mut fail = None;
    for i in 0..n {
        match std::thread::Builder::new().spawn(move || i) {
            Ok(h) => started.push(h),
            Err(e) => {
                fail = Some(e.raw_os_error().unwrap_or(0));
                break;
            }
        }
    }
    let count = started.len();
    let joined = started.into_iter().filter_map(|h| h.join().ok()).count();
    Ok(Report::new(
        fail.is_none() && joined == n,
        json!({"started": count, "joined": joined, "errno": fail.map(errno_name)}),
    ))
}

pub fn spin(args: &[String]) -> Result<Report, Usage> {
    let secs = parse_secs(one(args, "spin SECONDS")?)?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut n: u64 = 0;
    while Instant::now() < end {
        n = std::hint::black_box(n.wrapping_add(1));
    }
    // SAFETY: rusage is plain old data filled by the call.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
    Ok(Report::new(true, json!({"seconds": secs, "cpu_ms": cpu_ms, "iterations": n})))
}

/// Writes SIZE zero bytes to a new file PATH. ok = all written.
pub fn fill(args: &[String]) -> Result<Report, Usage> {
    let [path, size] = args else { return Err(usage("fill PATH SIZE")) };
    let size = parse_size(size)?;
    let chunk = vec![0u8; 1 << 20];
    let mut written: u64 = 0;
    // create_new: never truncates an existing (possibly host) file.
    let r = std::fs::OpenOptions::new().write(true).create_new(true).open(path).and_then(|mut f| {
        while written < size {
            let n = (size - written).min(chunk.len() as u64) as usize;
            let w = f.write(&chunk[..n])?;
            if w == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            written += w as u64;
        }
        f.sync_all().or(Ok(()))
    });
    let mut v = io_outcome(&r);
    v["path"] = json!(path);
    v["size"] = json!(size);
    v["written"] = json!(written);
    Ok(Report::new(r.is_ok() && written == size, v))
}

/// First outside id of a /proc/self/{uid,gid}_map (the host id of inner 0).
fn outside_id(map: &str) -> Option<u32> {
    read_lossy(map)?.lines().next()?.split_whitespace().nth(1)?.parse().ok()
}

/// Tries to become root (inner 0) and the host id behind inner 0, each in a
/// forked child. ok = some attempt ended with euid 0.
pub fn setuid_root() -> Result<Report, Usage> {
    let outside = outside_id("/proc/self/uid_map").unwrap_or(0);
    let outside_g = outside_id("/proc/self/gid_map").unwrap_or(0);
    type Try = (&'static str, Box<dyn Fn() -> libc::c_int>);
    let tries: Vec<Try> = vec![
        // SAFETY (all closures): integer-only id syscalls in a forked child.
        ("setuid(0)", Box::new(|| unsafe { libc::setuid(0) })),
        ("seteuid(0)", Box::new(|| unsafe { libc::seteuid(0) })),
        ("setresuid(0,0,0)", Box::new(|| unsafe { libc::setresuid(0, 0, 0) })),
        ("setgid(0)", Box::new(|| unsafe { libc::setgid(0) })),
        ("setuid(outside)", Box::new(move || unsafe { libc::setuid(outside) })),
        ("setgid(outside)", Box::new(move || unsafe { libc::setgid(outside_g) })),
    ];
    let mut became_root = false;
    let mut results = Vec::new();
    for (name, f) in &tries {
        let r = forked(|| {
            let r = f();
            if r < 0 {
                Attempt::fail(errno())
            } else {
                // SAFETY: integer-only call.
                Attempt { ret: i64::from(unsafe { libc::geteuid() }), errno: 0 }
            }
        });
        let v = match r {
            Ok(Forked::Done(a)) if a.ret >= 0 => {
                became_root |= a.ret == 0 && name.contains("uid");
                json!({"call": name, "ok": true, "euid_after": a.ret})
            }
            Ok(Forked::Done(a)) => json!({"call": name, "ok": false, "errno": errno_name(a.errno)}),
            _ => json!({"call": name, "ok": false}),
        };
        results.push(v);
    }
    let (mut ru, mut eu, mut su) = (0, 0, 0);
    // SAFETY: valid out-pointers.
    unsafe { libc::getresuid(&mut ru, &mut eu, &mut su) };
    Ok(Report::new(
        became_root,
        json!({"before": {"uid": ru, "euid": eu, "suid": su}, "outside_uid": outside, "attempts": results}),
    ))
}
