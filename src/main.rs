fn main() {
    // Before anything else, one look at argv[0]: started under a probe
    // name, husk is `husk selftest`'s in-sandbox probe.
    if husk::selftest::embedded::invoked_as_probe() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        std::process::exit(husk_probe::run(&args));
    }
    // Called the way dockerd and containerd's shim call runc: the OCI
    // runtime mode, with its own command line (src/oci/).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `--version` in the shape dockerd and go-runc read (src/oci/version.rs),
    // for husk's own command line and the runtime mode alike.
    if husk::oci::version::asked_for_version(&args) {
        husk::outln!("{}", husk::oci::version::version_text().trim_end());
        std::process::exit(husk::print::finish(0, husk::outcome::EXIT_HUSK_FAILED));
    }
    if husk::oci::invoked_as_runtime(&args) {
        std::process::exit(husk::oci::main(args));
    }
    let t_start = husk::spawn::now_ns();
    let cli = match husk::cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            if e.use_stderr() {
                // Asked for JSON: the refusal is JSON too (and still on stderr).
                let _ = husk::cli::report::usage_failure(&std::env::args_os().collect::<Vec<_>>(), &e);
            }
            let printed = e.print();
            // Usage errors are husk's own failure (125, like docker run);
            // --help and --version are not errors, unless they were lost.
            std::process::exit(match printed {
                _ if e.use_stderr() => husk::outcome::EXIT_HUSK_FAILED,
                Ok(()) => 0,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => husk::sys::signal::die_of_sigpipe(),
                Err(e) => {
                    husk::errln!("husk: writing to stdout failed: {e}");
                    husk::outcome::EXIT_HUSK_FAILED
                }
            });
        }
    };
    let code = husk::print::finish(husk::cmd::dispatch(cli, t_start), husk::outcome::EXIT_HUSK_FAILED);
    if husk::print::stdout_closed() {
        husk::sys::signal::die_of_sigpipe();
    }
    std::process::exit(code);
}
