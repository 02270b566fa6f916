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
    // runc's verbs typed by a person (`husk ps`, `husk kill ID`): husk's
    // verb for it, not the runtime mode's "container does not exist".
    if let Some(hint) = husk::cli::habits::runtime_verb(&args) {
        husk::errln!("{hint}");
        std::process::exit(husk::print::finish(husk::outcome::EXIT_HUSK_FAILED, husk::outcome::EXIT_HUSK_FAILED));
    }
    let t_start = husk::spawn::now_ns();
    let cli = match husk::cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            // A Docker habit (or a typo) gets the husk command for it.
            let hint = husk::cli::habits::hint(&args, &e);
            if e.use_stderr() {
                // Asked for JSON: the refusal is JSON too (and still on stderr).
                let _ = husk::cli::report::usage_failure(
                    &args,
                    &e,
                    hint.as_deref().map(|h| h.trim_start_matches("husk: ")),
                );
            }
            let printed = match &hint {
                Some(h) => {
                    husk::errln!("{}", husk::cli::habits::with_hint(&e.render().to_string(), h).trim_end());
                    Ok(())
                }
                None => e.print(),
            };
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
