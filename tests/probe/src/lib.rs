//! husk-probe: runs inside a sandbox and reports, as one JSON line on
//! stdout, what one attempted operation did. Exit 0 = the operation
//! succeeded, 1 = it was denied or failed, 2 = usage error.
//!
//! A library with one entry point, `run`, used twice: by this crate's own
//! `husk-probe` binary (the tests' probe) and by husk itself, which runs as
//! the probe when started under a probe name (so `husk selftest` needs no
//! second binary; see husk's src/selftest/embedded.rs).
//!
//! Static (`-C target-feature=+crt-static`) so it runs in a busybox root; it
//! avoids everything that needs NSS (no name lookups). See README.md for the
//! subcommands.

mod act;
mod egress;
mod escape;
mod inspect;
mod syscalls;
mod util;

use util::{Report, Usage};

const HELP: &str = "usage: husk-probe SUBCOMMAND [ARGS]
  try-syscall NAME | list-syscalls
  write PATH | read PATH | mknod PATH | statfs PATH | fill PATH SIZE
  caps | ids | fds | env | ifaces | ps | ipc | hostname | cwd | tty
  connect IP:PORT | tiocsti | exe-write | setuid-root
  zombies N | daemon MARKER SECONDS [HOLD] | sleep MARKER SECONDS
  memhog SIZE [HOLD_SECONDS] | forkbomb [MAX] | spin SECONDS | threads N
  chroot-escape PATH | fd-escape PATH | cgroup-escape | page-zero
  connect-unix PATH|@NAME | kill PID SIGNAL | ls PATH | mknod-read PATH MAJOR:MINOR
  udp-send IP:PORT TEXT | dns-query IP:PORT NAME | proxy-get PROXY_IP:PORT URL
  socks-connect PROXY_IP:PORT HOST PORT";

fn dispatch(cmd: &str, args: &[String]) -> Result<Report, Usage> {
    let none = |r: fn() -> Result<Report, Usage>| {
        if args.is_empty() { r() } else { Err(util::usage(format!("{cmd} takes no arguments"))) }
    };
    match cmd {
        "try-syscall" => syscalls::try_syscall(args),
        "list-syscalls" => Ok(syscalls::list()),
        "write" => act::write(args),
        "read" => act::read(args),
        "mknod" => act::mknod(args),
        "statfs" => inspect::statfs(args),
        "fill" => act::fill(args),
        "caps" => none(inspect::caps),
        "ids" => none(inspect::ids),
        "fds" => none(inspect::fds),
        "env" => none(inspect::env),
        "ifaces" => none(inspect::ifaces),
        "ps" => none(inspect::ps),
        "ipc" => none(inspect::ipc),
        "hostname" => none(inspect::hostname),
        "cwd" => none(inspect::cwd),
        "tty" => none(inspect::tty),
        "connect" => act::connect(args),
        "tiocsti" => none(act::tiocsti),
        "exe-write" => none(act::exe_write),
        "setuid-root" => none(act::setuid_root),
        "zombies" => act::zombies(args),
        "daemon" => act::daemon(args),
        "sleep" => act::sleep(args),
        "memhog" => act::memhog(args),
        "forkbomb" => act::forkbomb(args),
        "spin" => act::spin(args),
        "threads" => act::threads(args),
        "chroot-escape" => escape::chroot_escape(args),
        "fd-escape" => escape::fd_escape(args),
        "cgroup-escape" => none(escape::cgroup_escape),
        "page-zero" => escape::page_zero(args),
        "connect-unix" => escape::connect_unix(args),
        "kill" => escape::kill(args),
        "ls" => escape::ls(args),
        "mknod-read" => escape::mknod_read(args),
        "udp-send" => egress::udp_send(args),
        "dns-query" => egress::dns(args),
        "proxy-get" => egress::proxy_get(args),
        "socks-connect" => egress::socks_connect(args),
        _ => Err(util::usage(format!("unknown subcommand {cmd:?}"))),
    }
}

/// Runs one subcommand (`args` without the program name) and returns the
/// exit status: 0 ok, 1 denied or failed, 2 usage error.
pub fn run(args: &[String]) -> i32 {
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{HELP}");
        return 2;
    };
    if cmd == "-h" || cmd == "--help" || cmd == "help" {
        println!("{HELP}");
        return 0;
    }
    match dispatch(cmd, rest) {
        Ok(report) => report.print(cmd),
        Err(Usage(msg)) => {
            println!("{}", serde_json::json!({"cmd": cmd, "ok": false, "usage_error": msg}));
            eprintln!("husk-probe: {msg}\n{HELP}");
            2
        }
    }
}
