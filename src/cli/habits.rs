//! Answers for what a person used to Docker (or runc) types: clap's own
//! errors say what was wrong, these say the husk command that does it.
//!
//! Two moments: `runtime_verb` before parsing (runc's verbs that husk's
//! own CLI does not have: `ps`, `kill`, `state`, ... — engines reach the
//! runtime mode through `oci::invoked_as_runtime` before this), and `hint`
//! after clap refused a command line (Docker's flags and its
//! `run IMAGE CMD` shape). Every hint is one line ending in a command that
//! runs as printed (modulo the user's own values).

use std::ffi::OsString;

/// husk's global flags that take a value (the word after them is not the verb).
const VALUED_GLOBALS: &[&str] = &["--root", "--state-dir"];

/// runc's verbs that husk's own CLI does not have (`create`, `run` and
/// `exec` both have; `spec` and `features` are always the runtime's, see
/// `oci::invoked_as_runtime`). When husk grows a verb of the same name, it
/// leaves this list and is husk's: `pause` and `resume` did (runc's need
/// `--log` or `husk oci`, which engines pass).
pub const RUNC_ONLY_VERBS: &[&str] =
    &["start", "state", "kill", "delete", "list", "ps", "update", "events", "checkpoint", "restore"];

fn words(args: &[OsString]) -> Vec<String> {
    args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// The index of the verb in `words` (after argv[0] and husk's global flags).
fn verb_index(words: &[String]) -> Option<usize> {
    let mut i = 1;
    while i < words.len() && words[i].starts_with('-') {
        if VALUED_GLOBALS.contains(&words[i].as_str()) {
            i += 1;
        }
        i += 1;
    }
    (i < words.len()).then_some(i)
}

/// Quotes a word for a POSIX shell when it needs it.
fn quote(w: &str) -> String {
    let plain = !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain { w.to_string() } else { format!("'{}'", w.replace('\'', r"'\''")) }
}

fn command(words: &[String]) -> String {
    std::iter::once("husk".to_string()).chain(words.iter().skip(1).map(|w| quote(w))).collect::<Vec<_>>().join(" ")
}

/// A runc verb given to husk's own CLI (no runc global flag, no `oci`):
/// the line saying husk's verb for it, with the sandbox the user named.
pub fn runtime_verb(args: &[OsString]) -> Option<String> {
    let words = words(args);
    let v = verb_index(&words)?;
    let verb = words[v].as_str();
    if !RUNC_ONLY_VERBS.contains(&verb) {
        return None;
    }
    let id = words[v + 1..].iter().find(|w| !w.starts_with('-')).map(String::as_str).unwrap_or("SANDBOX");
    let husks = match verb {
        "ps" | "list" => "sandboxes are listed by `husk ls`".to_string(),
        "state" => format!("a sandbox's record is shown by `husk inspect {id}`"),
        "kill" | "delete" => format!("`husk rm {id}` kills a sandbox's processes and removes it"),
        "start" => "a sandbox runs from `husk create` on; run commands in it with `husk exec SANDBOX -- CMD`".into(),
        _ => format!("husk's own command line has no `{verb}`"),
    };
    Some(format!(
        "husk: {husks} (`husk {verb}` is the OCI runtime's verb, for engines: `husk oci {verb} ...`, docs/oci-runtime.md)"
    ))
}

/// One habit found in a command line: what husk says about it, and the
/// command line with husk's spelling (None: no one-for-one spelling).
struct Fix {
    why: String,
    fixed: Option<Vec<String>>,
}

/// The hint for a command line clap refused, when it has a Docker habit
/// in it: the same line with husk's spelling. Habits are fixed one after
/// the other (`run --rm -v A:B IMAGE CMD` has three), each fixed line
/// parsed again, so the command printed is the whole answer.
pub fn hint(args: &[OsString], e: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    let words = words(args);
    if e.kind() == ErrorKind::InvalidSubcommand {
        return typo(&words[verb_index(&words)?]);
    }
    let first = fix(&words, e)?;
    let mut whys = vec![first.why];
    let mut line = first.fixed;
    // A few rounds at most: each one removes a refused word.
    for _ in 0..8 {
        let Some(fixed) = &line else { break };
        let Err(e) = super::Cli::parse_from_args(fixed.iter().map(OsString::from).collect()) else { break };
        match fix(fixed, &e) {
            Some(next) => {
                whys.push(next.why);
                line = next.fixed;
            }
            None => break,
        }
    }
    Some(match line {
        Some(fixed) => format!("husk: {}: {}", whys.join("; "), command(&fixed)),
        None => format!("husk: {}", whys.join("; ")),
    })
}

fn fix(words: &[String], e: &clap::Error) -> Option<Fix> {
    use clap::error::{ContextKind, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let v = verb_index(words)?;
    let verb = words[v].as_str();
    let bad = e.get(ContextKind::InvalidArg)?.to_string();
    let at = v + 1 + words[v + 1..].iter().position(|w| *w == bad || w.starts_with(&format!("{bad}=")))?;
    let sep = words.iter().position(|w| w == "--").unwrap_or(words.len());
    if !bad.starts_with('-') && at < sep && matches!(verb, "run" | "exec") {
        return Some(after_dashes(words, v, at));
    }
    let has_root = words[v..at].iter().any(|w| ["--image", "--rootfs"].contains(&w.split('=').next().unwrap_or("")));
    if !bad.starts_with('-') && verb == "create" && !has_root {
        // `docker create IMAGE`: husk's create takes no command either.
        let mut fixed = words[..at].to_vec();
        fixed.extend(["--image".to_string(), bad]);
        fixed.extend(words[at + 1..].iter().cloned());
        return Some(Fix { why: "the image is --image".into(), fixed: Some(fixed) });
    }
    docker_flag(words, verb, at)
}

/// `husk run --image python sh` / `husk exec ID true`: the command goes
/// after `--`. `husk run python sh` (Docker's `run IMAGE CMD`): the first
/// word is the image.
fn after_dashes(words: &[String], v: usize, at: usize) -> Fix {
    let mut fixed: Vec<String> = words[..at].to_vec();
    let has_root = words[v..at].iter().any(|w| ["--image", "--rootfs"].contains(&w.split('=').next().unwrap_or("")));
    let rest = if words[v] == "run" && !has_root {
        fixed.push("--image".into());
        fixed.push(words[at].clone());
        &words[at + 1..]
    } else {
        &words[at..]
    };
    let why = if fixed.len() > at {
        "the image is --image, the command goes after `--`"
    } else {
        "the command goes after `--`"
    };
    fixed.push("--".into());
    fixed.extend(rest.iter().filter(|w| *w != "--").cloned());
    Fix { why: why.to_string(), fixed: Some(fixed) }
}

/// Docker's flags husk spells otherwise (or does not need).
fn docker_flag(words: &[String], verb: &str, at: usize) -> Option<Fix> {
    let w = words[at].as_str();
    let (flag, inline) = match w.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
        _ => (w, None),
    };
    // The flag's value: `--flag=V`, `-vV`, or the next word.
    let short_rest = (flag.len() > 2 && !flag.starts_with("--")).then(|| flag[2..].to_string());
    let flag = if short_rest.is_some() { &flag[..2] } else { flag };
    let (value, used) = match (inline.or(short_rest), words.get(at + 1)) {
        (Some(v), _) => (Some(v), 1),
        (None, Some(n)) if !n.starts_with('-') => (Some(n.clone()), 2),
        (None, _) => (None, 1),
    };
    let replace = |with: &[&str]| {
        let mut fixed: Vec<String> = words[..at].to_vec();
        fixed.extend(with.iter().map(|s| s.to_string()));
        fixed.extend(words[at + used..].iter().cloned());
        Some(fixed)
    };
    let drop = || {
        let mut fixed: Vec<String> = words[..at].to_vec();
        fixed.extend(words[at + 1..].iter().cloned());
        Some(fixed)
    };
    let value = value.as_deref().unwrap_or("VALUE");
    let (why, fixed) = match (verb, flag) {
        ("run" | "create", "-v" | "--volume" | "--mount") => (
            "binds are --bind SRC:DST[:ro|rw], read-only unless :rw (docker's -v writes through)",
            replace(&["--bind", value]),
        ),
        ("run" | "create", "-p") => ("ports are --publish [HOSTIP:]HOSTPORT:PORT", replace(&["--publish", value])),
        ("run", "-d" | "--detach") => (
            "a sandbox that stays is `husk create` (then `husk exec SANDBOX -- CMD`); `husk run` waits for its command",
            None,
        ),
        ("run", "--rm") => ("`husk run` always removes its sandbox; drop --rm", drop()),
        ("run", "--name") => ("only a sandbox that stays has a name: `husk create --name NAME`", None),
        ("run" | "create", "-w") => ("the working directory is --workdir", replace(&["--workdir", value])),
        _ => return None,
    };
    Some(Fix { why: why.to_string(), fixed })
}

/// husk's subcommands a mistyped one is one edit away from (clap's own
/// suggestion goes by similarity and offers `renew` for `rn`).
fn typo(given: &str) -> Option<String> {
    use clap::CommandFactory;
    let cmd = super::Cli::command();
    let near: Vec<&str> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name())
        .filter(|name| edit_distance(given, name) <= 1 + usize::from(given.len() > 4))
        .collect();
    match near.as_slice() {
        [] => None,
        [one] => Some(format!("husk: did you mean `husk {one}`?")),
        many => {
            let list: Vec<String> = many.iter().map(|n| format!("`husk {n}`")).collect();
            Some(format!("husk: did you mean {}?", list.join(" or ")))
        }
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// clap's message with the habit's hint in place of clap's own tips (its
/// "use '-- -v'" for Docker's flags sends people the wrong way).
pub fn with_hint(rendered: &str, hint: &str) -> String {
    let mut out = String::new();
    let mut lines = rendered.lines().filter(|l| !l.trim_start().starts_with("tip:"));
    if let Some(first) = lines.next() {
        out.push_str(first);
        out.push_str("\n\n  hint: ");
        out.push_str(hint.trim_start_matches("husk: "));
        out.push_str("\n\n");
    }
    let mut blank = true;
    for l in lines {
        // clap's tips leave their blank lines behind; keep one.
        if l.trim().is_empty() && blank {
            continue;
        }
        blank = l.trim().is_empty();
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn hint_of(s: &str) -> String {
        let e = super::super::Cli::parse_from_args(os(s)).expect_err(s);
        hint(&os(s), &e).unwrap_or_else(|| panic!("no hint for {s}: {e}"))
    }

    #[test]
    fn docker_habits_get_the_husk_command() {
        for (line, want) in [
            ("husk run --image python sh", "husk run --image python -- sh"),
            ("husk run python sh -c x", "husk run --image python -- sh -c x"),
            ("husk exec t43 true", "husk exec t43 -- true"),
            ("husk --root /s run -v /h/x:/d -- ls", "husk --root /s run --bind /h/x:/d -- ls"),
            ("husk run --volume=/h:/d --image b -- ls", "husk run --bind /h:/d --image b -- ls"),
            ("husk run -p 8080:80 --image b -- ls", "husk run --publish 8080:80 --image b -- ls"),
            ("husk run --rm --image b -- ls", "husk run --image b -- ls"),
            (
                "husk run --rm -v /h:/d python sh -c x",
                "drop --rm; binds are --bind SRC:DST[:ro|rw], read-only unless :rw (docker's -v writes through); \
                 the image is --image, the command goes after `--`: husk run --bind /h:/d --image python -- sh -c x",
            ),
            ("husk rn", "`husk run` or `husk rm`"),
            ("husk create --name web python", "the image is --image: husk create --name web --image python"),
        ] {
            let h = hint_of(line);
            assert!(h.contains(want), "{line}: {h}");
        }
    }

    #[test]
    fn runc_verbs_name_husks_verb() {
        let h = runtime_verb(&os("husk kill t43 9")).unwrap();
        assert!(h.contains("`husk rm t43`"), "{h}");
        assert!(runtime_verb(&os("husk --state-dir /s ps")).unwrap().contains("husk ls"));
        assert!(runtime_verb(&os("husk ls")).is_none());
    }

    #[test]
    fn quoting_keeps_words_whole() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("/x:/d"), "/x:/d");
    }
}
