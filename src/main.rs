fn main() {
    let t_start = husk::spawn::now_ns();
    let cli = match husk::cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Usage errors are husk's own failure (125, like docker run);
            // --help and --version are not errors.
            std::process::exit(if e.use_stderr() { husk::outcome::EXIT_HUSK_FAILED } else { 0 });
        }
    };
    std::process::exit(husk::cmd::dispatch(cli, t_start));
}
