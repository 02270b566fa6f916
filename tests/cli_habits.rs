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

/// Runs husk with `args` (stdin empty), in private store and state dirs.
fn husk_in(dir: &TempDir, args: &[&str]) -> (i32, String, String) {
    let o = husk(args).env("HUSK_ROOT", dir.join("store")).env("HUSK_STATE_DIR", dir.join("state")).output().unwrap();
    let (out, err) = text(&o);
    (o.status.code().unwrap_or(-1), out, err)
}

/// Docker's spelling of a husk command line is refused (nothing runs), and
/// the refusal carries the husk command for it, not clap's tip to put the
/// flag after `--` (which would run `-v` as the command).
#[test]
fn docker_habits_are_answered_with_the_husk_command() {
    let dir = TempDir::new("habits");
    for (args, want) in [
        (&["run", "--image", "python", "sh"][..], "hint: the command goes after `--`: husk run --image python -- sh"),
        (&["run", "python", "sh"][..], "husk run --image python -- sh"),
        (&["exec", "t43", "true"][..], "hint: the command goes after `--`: husk exec t43 -- true"),
        (
            &["run", "-v", "/srv/x:/d", "--", "ls"][..],
            "read-only unless :rw (docker's -v writes through): husk run --bind /srv/x:/d -- ls",
        ),
        (&["run", "-p", "8080:80", "--image", "b", "--", "ls"][..], "husk run --publish 8080:80 --image b -- ls"),
        (&["run", "-d", "--image", "b", "--", "sleep", "9"][..], "`husk create`"),
        (&["rn"][..], "did you mean `husk run` or `husk rm`?"),
        (&["create", "--name", "web", "python"][..], "the image is --image: husk create --name web --image python"),
        // Several habits in one line: one hint, the whole husk command.
        (&["run", "--rm", "-v", "/srv/x:/d", "python", "sh"][..], "husk run --bind /srv/x:/d --image python -- sh"),
    ] {
        let (code, out, err) = husk_in(&dir, args);
        assert_eq!(code, 125, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: the hint is missing:\n{err}");
        assert!(!err.contains("tip:"), "{args:?}: clap's tip is still shown:\n{err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    // --json: the refusal's JSON carries the same hint.
    let (code, out, err) = husk_in(&dir, &["run", "--json", "--image", "python", "sh"]);
    assert_eq!(code, 125);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert_eq!(v["error"]["hint"], "the command goes after `--`: husk run --json --image python -- sh", "{v}");
}

/// `docker run -it IMAGE` habits: `-i` (and so `-it`) is accepted by run as
/// by exec, and stdin reaches the command either way.
#[test]
fn run_accepts_dash_i_and_stdin_reaches_the_command() {
    let dir = TempDir::new("run-i");
    let mut c = husk(&["run", "-i", "--rootfs", busybox_rootfs().to_str().unwrap(), "--", "cat"]);
    c.env("HUSK_STATE_DIR", dir.join("state")).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"through stdin\n").unwrap();
    let o = child.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(out, "through stdin\n", "{err}");
}

/// A person's runc verbs (`husk ps`, `husk kill t43`, `husk state t43`)
/// get husk's verb for them, never the runtime mode's "container does not
/// exist" about a sandbox `husk ls` lists; engine-shaped command lines
/// (`--root` and `--log` before the verb, or `husk oci`) still reach the
/// runtime mode.
#[test]
fn runc_verbs_answer_people_with_husks_verb_and_engines_with_the_runtime() {
    let dir = TempDir::new("verbs");
    for (args, want) in [
        (&["ps"][..], "sandboxes are listed by `husk ls`"),
        (&["list"][..], "sandboxes are listed by `husk ls`"),
        (&["kill", "t43"][..], "`husk rm t43` kills a sandbox's processes and removes it"),
        (&["delete", "t43"][..], "`husk rm t43`"),
        (&["state", "t43"][..], "`husk inspect t43`"),
    ] {
        let (code, out, err) = husk_in(&dir, args);
        assert_eq!(code, 125, "{args:?}: {err}");
        assert!(err.contains(want) && err.contains("husk oci"), "{args:?}:\n{err}");
        assert!(!err.contains("does not exist") && out.is_empty(), "{args:?}: the runtime mode answered:\n{err}{out}");
    }
    let root = dir.join("oci");
    let log = dir.join("log.json");
    let (root, log) = (root.to_str().unwrap(), log.to_str().unwrap());
    for args in [
        &["--root", root, "--log", log, "--log-format", "json", "state", "t43"][..],
        &["--root", root, "state", "t43"][..],
        &["--root", root, "kill", "t43", "9"][..],
        &["oci", "--root", root, "delete", "t43"][..],
    ] {
        let (code, _, err) = husk_in(&dir, args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains("container t43 does not exist"), "{args:?} did not reach the runtime mode:\n{err}");
    }
    // husk's own `--root` (the store) with husk's verbs stays husk's.
    let (code, out, err) = husk_in(&dir, &["--root", root, "ls", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "[]", "{err}");
}

/// A `--timeout` kill is said on stderr, as an OOM kill is (without it
/// the command's output just stops); --json keeps stderr for the command's
/// own and carries it in the verdict.
#[test]
fn a_timeout_is_said_on_stderr() {
    let dir = TempDir::new("timeout");
    let root = busybox_rootfs().to_str().unwrap().to_string();
    let o = husk(&["run", "--rootfs", &root, "--timeout", "300ms", "--", "sleep", "30"])
        .env("HUSK_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(err.contains("husk: timed out after 300ms (exit 124)"), "nothing said about the timeout: {err:?}");
    let o = husk(&["run", "--json", "--rootfs", &root, "--timeout", "300ms", "--", "sleep", "30"])
        .env("HUSK_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(!err.contains("timed out"), "{err}");
}
