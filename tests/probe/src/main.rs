//! The tests' probe binary: the library's `run` (see lib.rs, README.md).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(husk_probe::run(&args));
}
