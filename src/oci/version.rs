//! `husk --version` in the shape the engines read (dockerd's `docker info`,
//! go-runc's `Version`): a first line `NAME version X`, then `commit: C`
//! and `spec: S` lines.
//!
//! The first line says `husk version X`, not `runc version X`: dockerd
//! takes whatever precedes "version" as the runtime's name and what follows
//! as its version, so `docker info` shows husk as husk; go-runc's parser
//! wants a `runc version ` prefix and otherwise returns an empty version
//! without an error, and neither containerd's runc shim nor dockerd decides
//! anything from it. crun and youki print their own names the same way.

/// The runtime-spec version husk's OCI mode speaks: `spec:` in the version
/// text, `ociVersionMax` in `features`, `ociVersion` in `spec`'s template.
pub const SPEC_VERSION: &str = "1.2.0";

/// The oldest config.json version husk reads (`features`' ociVersionMin).
pub const SPEC_VERSION_MIN: &str = "1.0.0";

/// The commit husk was built from: `HUSK_COMMIT`, which build.rs sets from
/// the build's environment or `git rev-parse HEAD` (a build outside a git
/// checkout says so); "unknown" only when neither ran.
pub const COMMIT: &str = match option_env!("HUSK_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// What `husk --version` (and `husk oci --version`) prints; ends with a newline.
pub fn version_text() -> String {
    format!("husk version {}\ncommit: {COMMIT}\nspec: {SPEC_VERSION}\n", env!("CARGO_PKG_VERSION"))
}

/// `husk --version`, `-v` or `-V` (runc answers `-v`), alone or after
/// `oci`: the whole command line asks for the version and nothing else.
pub fn asked_for_version(args: &[std::ffi::OsString]) -> bool {
    let words: Vec<&std::ffi::OsStr> = args.iter().skip(1).map(|a| a.as_os_str()).collect();
    let words = match words.split_first() {
        Some((first, rest)) if *first == "oci" => rest,
        _ => &words[..],
    };
    matches!(words, [w] if *w == "--version" || *w == "-v" || *w == "-V")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dockerd's reading: the text before "version" is the name, after it
    /// the version; `commit:` is the commit.
    #[test]
    fn version_text_reads_as_dockerd_and_go_runc_read_it() {
        let text = version_text();
        let mut lines = text.lines();
        let first = lines.next().unwrap();
        let (name, version) = first.split_once(" version ").unwrap();
        assert_eq!(name, "husk");
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        let rest: Vec<&str> = lines.collect();
        assert!(rest.iter().any(|l| l.starts_with("commit: ") && l.len() > "commit: ".len()));
        assert!(rest.contains(&format!("spec: {SPEC_VERSION}").as_str()));
    }

    #[test]
    fn only_a_lone_version_flag_asks_for_the_version() {
        let argv = |s: &str| -> Vec<std::ffi::OsString> {
            std::iter::once("husk").chain(s.split_whitespace()).map(Into::into).collect()
        };
        for yes in ["--version", "-v", "-V", "oci --version"] {
            assert!(asked_for_version(&argv(yes)), "{yes}");
        }
        for no in ["", "run --version", "--version run", "oci", "--root x --version"] {
            assert!(!asked_for_version(&argv(no)), "{no}");
        }
    }
}
