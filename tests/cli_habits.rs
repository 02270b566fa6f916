//! What a person used to Docker and to other CLIs types first: shell
//! completions, man pages, `--version`, Docker's flags and verbs. Each
//! answer must be husk's, with the exact husk command when husk spells it
//! differently, and never the OCI runtime mode's (which is for engines).
mod common;
use common::*;
use std::process::Output;

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `husk completions bash` must be a script bash can source, which then
/// completes husk's own subcommands.
#[test]
fn bash_completion_script_sources_and_completes_husks_verbs() {
    let dir = TempDir::new("completions");
    let o = husk(&["completions", "bash"]).output().unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    let script = dir.join("husk.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    // Complete `husk ru<TAB>` the way bash's programmable completion does.
    let probe = format!(
        "set -e; source {}; COMP_WORDS=(husk ru); COMP_CWORD=1; COMP_LINE='husk ru'; COMP_POINT=7; \
         _husk husk ru husk; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let b = std::process::Command::new("bash").args(["--norc", "-c", &probe]).output().unwrap();
    let (out, err) = text(&b);
    assert!(b.status.success(), "sourcing the completion failed: {err}");
    assert!(out.lines().any(|l| l == "run"), "`husk ru<TAB>` did not offer run: {out:?} {err}");
    for shell in ["zsh", "fish"] {
        let o = husk(&["completions", shell]).output().unwrap();
        assert!(o.status.success() && o.stdout.len() > 1000, "{shell}: {:?}", text(&o));
    }
}

/// `husk man DIR` writes a page for husk and each visible subcommand,
/// which man(1) can render; husk's internal roles get none.
#[test]
fn man_pages_are_written_for_every_visible_command() {
    let dir = TempDir::new("man");
    let o = husk(&["man", dir.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    for page in ["husk.1", "husk-run.1", "husk-exec.1", "husk-image-ls.1", "husk-completions.1"] {
        let p = dir.join(page);
        let roff = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.contains(".TH"), "{page} is not a man page");
    }
    assert!(!dir.join("husk-gvisor-helper.1").exists(), "a hidden role got a man page");
    let run = std::fs::read_to_string(dir.join("husk-run.1")).unwrap();
    assert!(run.contains("timeout"), "husk-run.1 lacks --timeout");
}

/// `husk --version` names the commit the binary was built from (this
/// checkout's HEAD), not "unknown".
#[test]
fn version_names_the_commit_it_was_built_from() {
    let o = husk(&["--version"]).output().unwrap();
    let (out, _) = text(&o);
    let commit = out.lines().find_map(|l| l.strip_prefix("commit: ")).unwrap_or_else(|| panic!("{out}"));
    assert_ne!(commit, "unknown", "{out}");
    let head = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    match head {
        // The commit the test binary's crate was built at: a later commit
        // in the work tree rebuilds both.
        Some(h) => assert_eq!(commit, String::from_utf8_lossy(&h.stdout).trim(), "{out}"),
        None => assert!(commit.contains("not built from a git checkout"), "{out}"),
    }
}
