//! The Dockerfile parser: parser directives (`# escape=`), comments, line
//! continuations, then one `Instruction` per logical line, with its flags
//! and arguments split but not yet expanded (variables depend on the stage
//! being built: `plan` expands them as it walks the stages).
//!
//! The input is a user file (read through `userfile::read`, bounded); every
//! error names the file, the line and what to do.

use super::words::{self, WordError};

/// Bound on one Dockerfile.
pub const MAX_DOCKERFILE: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {why}")]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub why: Syntax,
}

/// What is wrong with a line, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Syntax {
    #[error("escape={0:?}: the escape character must be \\ or `")]
    BadEscape(String),
    #[error("{kw} --{name}: unknown flag (husk knows: --{known}){hint}")]
    UnknownFlag { kw: String, name: String, known: String, hint: &'static str },
    #[error("{kw} --{name} needs a value: --{name}=VALUE")]
    FlagWithoutValue { kw: String, name: String },
    #[error("{kw} needs {what}")]
    Missing { kw: String, what: &'static str },
    #[error("{kw} {word}: expected KEY=VALUE")]
    NotKeyValue { kw: String, word: String },
    #[error("{kw} needs a source and a destination: {kw} SRC... DEST")]
    NoDestination { kw: String },
    #[error("ADD --from is not supported: use COPY --from")]
    AddFrom,
    #[error("FROM ... AS {0}: a stage name is letters, digits, _ . - (first a letter)")]
    StageName(String),
    #[error("FROM needs IMAGE [AS NAME]")]
    FromShape,
    #[error("SHELL needs the JSON form: SHELL [\"executable\", \"parameters\"]")]
    ShellForm,
    #[error("{0} is not supported by husk build; remove it (MAINTAINER: use LABEL maintainer=...)")]
    Unsupported(String),
    #[error(
        "unknown instruction {0:?}; husk build knows FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT, LABEL, EXPOSE, SHELL, STOPSIGNAL, VOLUME, HEALTHCHECK"
    )]
    Unknown(String),
    #[error("only ARG may come before the first FROM; start the build with FROM IMAGE")]
    BeforeFrom,
    #[error("no FROM instruction: a Dockerfile starts with FROM IMAGE (or FROM scratch)")]
    NoFrom,
    #[error(transparent)]
    Words(#[from] WordError),
}

/// RUN/CMD/ENTRYPOINT/SHELL arguments: JSON (exec) or shell form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdForm {
    Exec(Vec<String>),
    Shell(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyArgs {
    /// Unexpanded source words, then the destination.
    pub srcs: Vec<String>,
    pub dest: String,
    pub chown: Option<String>,
    pub chmod: Option<String>,
    pub from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inst {
    From {
        image: String,
        platform: Option<String>,
        alias: Option<String>,
    },
    Run(CmdForm),
    Copy(CopyArgs),
    Add(CopyArgs),
    /// Raw `key=value` words (or the legacy `ENV key value`, as one pair).
    Env(Vec<(String, String)>),
    Arg(Vec<(String, Option<String>)>),
    Workdir(String),
    User(String),
    Cmd(CmdForm),
    Entrypoint(CmdForm),
    Label(Vec<(String, String)>),
    Expose(Vec<String>),
    Shell(Vec<String>),
    StopSignal(String),
    /// Mount points, recorded in the config's `Volumes` (a `husk run`
    /// mounts nothing there by itself: `--bind` or `--tmpfs` does).
    Volume(Vec<String>),
    /// Parsed and skipped with a warning, as buildah does for OCI images:
    /// the OCI config has no health check (the text is kept for the
    /// message).
    Healthcheck(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// First line of the instruction (1-based).
    pub line: usize,
    /// The instruction as written, continuations joined (for history and
    /// messages).
    pub text: String,
    pub inst: Inst,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    pub escape: char,
    /// Everything in file order (ARGs before the first FROM included).
    pub instructions: Vec<Instruction>,
}

/// Parses `src`; `file` names it in errors.
pub fn parse(file: &str, src: &str) -> Result<Dockerfile, ParseError> {
    let err = |line: usize, why: Syntax| ParseError { file: file.to_string(), line, why };
    let lines: Vec<&str> = src.lines().collect();
    let (escape, first) = directives(&lines).map_err(|(l, why)| err(l, why))?;
    let mut out = Vec::new();
    for (line, logical) in logical_lines(&lines[first..], escape) {
        let line = line + first;
        out.push(instruction(&logical, line, escape).map_err(|why| err(line, why))?);
    }
    check_order(&out).map_err(|(l, why)| err(l, why))?;
    Ok(Dockerfile { escape, instructions: out })
}

/// Joins continuations into logical lines, each with its first line
/// number (1-based). Comment and blank lines are skipped, inside a
/// continuation too (as Docker does); a continuation at the end of the
/// file ends the instruction there.
fn logical_lines(lines: &[&str], escape: char) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, raw) in lines.iter().enumerate() {
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let (start, mut text) = cur.take().unwrap_or((i + 1, String::new()));
        let body = raw.trim_start().trim_end();
        match body.strip_suffix(escape) {
            Some(b) => {
                text.push_str(b);
                cur = Some((start, text));
            }
            None => {
                text.push_str(body);
                out.push((start, text));
            }
        }
    }
    if let Some((start, text)) = cur.filter(|(_, t)| !t.trim().is_empty()) {
        out.push((start, text));
    }
    out
}

/// Parser directives: `# key=value` lines at the very top. Returns the
/// escape character and the index of the first line after them.
fn directives(lines: &[&str]) -> Result<(char, usize), (usize, Syntax)> {
    let mut escape = '\\';
    let mut i = 0;
    while i < lines.len() {
        let Some(rest) = lines[i].trim().strip_prefix('#') else { break };
        let Some((k, v)) = rest.split_once('=') else { break };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k.contains(char::is_whitespace) {
            break;
        }
        match k.as_str() {
            "escape" => {
                escape = match v {
                    "\\" => '\\',
                    "`" => '`',
                    _ => return Err((i + 1, Syntax::BadEscape(v.to_string()))),
                }
            }
            // The frontend image BuildKit would fetch: husk has one frontend.
            "syntax" | "check" => {}
            _ => break,
        }
        i += 1;
    }
    Ok((escape, i))
}

/// Splits leading `--name=value` flags off `rest`; only `allowed` names.
type Flags = Vec<(String, String)>;

fn flags<'a>(kw: &str, rest: &'a str, allowed: &[&str]) -> Result<(Flags, &'a str), Syntax> {
    let mut out = Vec::new();
    let mut rest = rest.trim_start();
    while let Some(f) = rest.strip_prefix("--") {
        let end = f.find(char::is_whitespace).unwrap_or(f.len());
        let (flag, after) = f.split_at(end);
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n, v),
            None => (flag, ""),
        };
        if !allowed.contains(&name) {
            let hint = match (kw, name) {
                ("RUN", "mount") => {
                    "; RUN --mount (caches, secrets, binds) is not supported: copy what the step needs with COPY"
                }
                ("RUN", "network") => {
                    "; RUN --network is not supported: give every RUN the hosts it may reach with husk build --network allow=HOST,..."
                }
                ("COPY" | "ADD", "link") => "; --link is not supported: drop it (the layers are the same)",
                _ => "",
            };
            let known = if allowed.is_empty() { "none".to_string() } else { allowed.join(", --") };
            return Err(Syntax::UnknownFlag { kw: kw.into(), name: name.into(), known, hint });
        }
        if value.is_empty() {
            return Err(Syntax::FlagWithoutValue { kw: kw.into(), name: name.into() });
        }
        out.push((name.to_string(), value.to_string()));
        rest = after.trim_start();
    }
    Ok((out, rest))
}

/// A JSON array of strings, when `rest` is one.
fn json_array(rest: &str) -> Option<Vec<String>> {
    let t = rest.trim();
    if !t.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(t).ok()
}

fn cmd_form(rest: &str) -> CmdForm {
    match json_array(rest) {
        Some(v) => CmdForm::Exec(v),
        None => CmdForm::Shell(rest.trim().to_string()),
    }
}

fn pairs(kw: &str, rest: &str, escape: char, legacy: bool) -> Result<Vec<(String, String)>, Syntax> {
    let words = words::split(rest, escape)?;
    if words.is_empty() {
        return Err(Syntax::Missing { kw: kw.into(), what: "at least one KEY=VALUE" });
    }
    if !words[0].contains('=') {
        if legacy && words.len() >= 2 {
            // `ENV KEY VALUE...`: the rest of the line is the value.
            let key = words[0].clone();
            let value = rest.trim_start()[key.len()..].trim().to_string();
            return Ok(vec![(key, value)]);
        }
        return Err(Syntax::NotKeyValue { kw: kw.into(), word: words[0].clone() });
    }
    words
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(Syntax::NotKeyValue { kw: kw.into(), word: w }),
        })
        .collect()
}

fn copy_args(kw: &str, rest: &str, escape: char) -> Result<CopyArgs, Syntax> {
    let (fl, rest) = flags(kw, rest, &["chown", "chmod", "from"])?;
    let mut words = match json_array(rest) {
        Some(v) => v,
        None => words::split(rest, escape)?,
    };
    if words.len() < 2 {
        return Err(Syntax::NoDestination { kw: kw.into() });
    }
    let dest = words.pop().unwrap_or_default();
    let get = |n: &str| fl.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    if kw == "ADD" && get("from").is_some() {
        return Err(Syntax::AddFrom);
    }
    Ok(CopyArgs { srcs: words, dest, chown: get("chown"), chmod: get("chmod"), from: get("from") })
}

fn instruction(logical: &str, line: usize, escape: char) -> Result<Instruction, Syntax> {
    let t = logical.trim();
    let (kw, rest) = match t.find(char::is_whitespace) {
        Some(n) => (&t[..n], t[n..].trim()),
        None => (t, ""),
    };
    let kw = kw.to_ascii_uppercase();
    let needs = |what: &'static str| -> Result<(), Syntax> {
        if rest.is_empty() { Err(Syntax::Missing { kw: kw.clone(), what }) } else { Ok(()) }
    };
    let inst = match kw.as_str() {
        "FROM" => {
            let (fl, rest) = flags("FROM", rest, &["platform"])?;
            let w = words::split(rest, escape)?;
            let platform = fl.into_iter().find(|(k, _)| k == "platform").map(|(_, v)| v);
            match w.as_slice() {
                [image] => Inst::From { image: image.clone(), platform, alias: None },
                [image, as_kw, alias] if as_kw.eq_ignore_ascii_case("as") => {
                    let ok = !alias.is_empty()
                        && alias.starts_with(|c: char| c.is_ascii_alphabetic())
                        && alias.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
                    if !ok {
                        return Err(Syntax::StageName(alias.clone()));
                    }
                    Inst::From { image: image.clone(), platform, alias: Some(alias.to_ascii_lowercase()) }
                }
                _ => return Err(Syntax::FromShape),
            }
        }
        "RUN" => {
            let (_, rest) = flags("RUN", rest, &[])?;
            if rest.is_empty() {
                return Err(Syntax::Missing { kw, what: "a command" });
            }
            Inst::Run(cmd_form(rest))
        }
        "CMD" | "ENTRYPOINT" => {
            needs("a command")?;
            if kw == "CMD" { Inst::Cmd(cmd_form(rest)) } else { Inst::Entrypoint(cmd_form(rest)) }
        }
        "COPY" => Inst::Copy(copy_args("COPY", rest, escape)?),
        "ADD" => Inst::Add(copy_args("ADD", rest, escape)?),
        "ENV" => Inst::Env(pairs("ENV", rest, escape, true)?),
        "LABEL" => Inst::Label(pairs("LABEL", rest, escape, false)?),
        "ARG" => {
            let w = words::split(rest, escape)?;
            if w.is_empty() {
                return Err(Syntax::Missing { kw, what: "NAME[=DEFAULT]" });
            }
            Inst::Arg(
                w.into_iter()
                    .map(|w| match w.split_once('=') {
                        Some((k, v)) => (k.to_string(), Some(v.to_string())),
                        None => (w, None),
                    })
                    .collect(),
            )
        }
        "WORKDIR" => {
            needs("a directory")?;
            Inst::Workdir(rest.to_string())
        }
        "USER" => {
            needs("USER[:GROUP]")?;
            Inst::User(rest.to_string())
        }
        "EXPOSE" => {
            needs("a port")?;
            Inst::Expose(words::split(rest, escape)?)
        }
        "SHELL" => match json_array(rest) {
            Some(v) if !v.is_empty() => Inst::Shell(v),
            _ => return Err(Syntax::ShellForm),
        },
        "STOPSIGNAL" => {
            needs("a signal")?;
            Inst::StopSignal(rest.to_string())
        }
        "VOLUME" => {
            needs("a path")?;
            let paths = match json_array(rest) {
                Some(v) => v,
                None => words::split(rest, escape)?,
            };
            if paths.is_empty() || paths.iter().any(|p| p.is_empty()) {
                return Err(Syntax::Missing { kw, what: "a path" });
            }
            Inst::Volume(paths)
        }
        "HEALTHCHECK" => {
            needs("CMD ... or NONE")?;
            Inst::Healthcheck(rest.to_string())
        }
        "ONBUILD" | "MAINTAINER" => {
            return Err(Syntax::Unsupported(kw));
        }
        _ => {
            return Err(Syntax::Unknown(crate::image::digest::truncate(&kw, 40).to_string()));
        }
    };
    Ok(Instruction { line, text: t.to_string(), inst })
}

/// Only ARG may come before the first FROM; a file needs a FROM.
fn check_order(insts: &[Instruction]) -> Result<(), (usize, Syntax)> {
    let mut seen_from = false;
    for i in insts {
        match &i.inst {
            Inst::From { .. } => seen_from = true,
            Inst::Arg(_) => {}
            _ if !seen_from => {
                return Err((i.line, Syntax::BeforeFrom));
            }
            _ => {}
        }
    }
    if !seen_from {
        return Err((1, Syntax::NoFrom));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(src: &str) -> Vec<Inst> {
        parse("Dockerfile", src).unwrap().instructions.into_iter().map(|i| i.inst).collect()
    }

    #[test]
    fn continuations_comments_and_forms_parse() {
        let src = "# syntax=docker/dockerfile:1\nFROM busybox AS base\n# a comment\nRUN echo a \\\n  # inside\n  && echo b\nCMD [\"sh\", \"-c\", \"x\"]\nENTRYPOINT echo hi\n";
        let v = p(src);
        assert_eq!(v[0], Inst::From { image: "busybox".into(), platform: None, alias: Some("base".into()) });
        assert_eq!(v[1], Inst::Run(CmdForm::Shell("echo a && echo b".into())));
        assert_eq!(v[2], Inst::Cmd(CmdForm::Exec(vec!["sh".into(), "-c".into(), "x".into()])));
        assert_eq!(v[3], Inst::Entrypoint(CmdForm::Shell("echo hi".into())));
    }

    #[test]
    fn escape_directive_changes_the_continuation_character() {
        let v = p("# escape=`\nFROM x\nRUN a `\n b\nCOPY C:\\a /d\n");
        assert_eq!(v[1], Inst::Run(CmdForm::Shell("a b".into())));
        let Inst::Copy(c) = &v[2] else { panic!() };
        assert_eq!(c.srcs, vec!["C:\\a"]);
    }

    #[test]
    fn env_label_arg_and_copy_flags() {
        let v = p(
            "ARG V=1\nFROM x\nENV A=1 B=\"two words\"\nENV OLD some value\nLABEL a=b\nARG N\nCOPY --chown=1:2 --chmod=644 --from=base a b /d/\nADD [\"x y\", \"/z\"]\n",
        );
        assert_eq!(v[0], Inst::Arg(vec![("V".into(), Some("1".into()))]));
        assert_eq!(v[2], Inst::Env(vec![("A".into(), "1".into()), ("B".into(), "\"two words\"".into())]));
        assert_eq!(v[3], Inst::Env(vec![("OLD".into(), "some value".into())]));
        assert_eq!(v[5], Inst::Arg(vec![("N".into(), None)]));
        let Inst::Copy(c) = &v[6] else { panic!() };
        assert_eq!(
            (c.chown.as_deref(), c.chmod.as_deref(), c.from.as_deref()),
            (Some("1:2"), Some("644"), Some("base"))
        );
        assert_eq!((c.srcs.clone(), c.dest.as_str()), (vec!["a".to_string(), "b".into()], "/d/"));
        let Inst::Add(a) = &v[7] else { panic!() };
        assert_eq!(a.srcs, vec!["x y"]);
    }

    #[test]
    fn unknown_and_unsupported_instructions_name_the_line_and_the_fix() {
        let e = parse("Df", "FROM x\n\nFROBNICATE y\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().starts_with("Df:3: unknown instruction"), "{e}");
        let e = parse("Df", "FROM x\nONBUILD RUN true\n").unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
        // Words keep their quotes here; the build's expansion removes them.
        assert_eq!(p("FROM x\nVOLUME /a \"/b c\"\n")[1], Inst::Volume(vec!["/a".into(), "\"/b c\"".into()]));
        assert_eq!(p("FROM x\nVOLUME [\"/d\"]\n")[1], Inst::Volume(vec!["/d".into()]));
        assert!(matches!(&p("FROM x\nHEALTHCHECK CMD true\n")[1], Inst::Healthcheck(_)));
        let e = parse("Df", "FROM x\nRUN --mount=type=cache,target=/c true\n").unwrap_err();
        assert!(e.to_string().contains("--mount"), "{e}");
        let e = parse("Df", "RUN true\n").unwrap_err();
        assert_eq!(e.why, Syntax::BeforeFrom);
        assert!(e.to_string().contains("before the first FROM"), "{e}");
        assert_eq!(parse("Df", "FROM x\nCOPY a\n").unwrap_err().why, Syntax::NoDestination { kw: "COPY".into() });
        assert_eq!(parse("Df", "# escape=x\nFROM x\n").unwrap_err().why, Syntax::BadEscape("x".into()));
        assert!(parse("Df", "# only a comment\n").is_err());
        assert!(parse("Df", "FROM x\nSHELL /bin/bash\n").is_err());
        assert!(parse("Df", "FROM x\nCOPY onlyone\n").is_err());
    }

    #[test]
    fn trailing_continuation_at_end_of_file_ends_the_instruction() {
        let v = p("FROM x\nRUN a \\");
        assert_eq!(v[1], Inst::Run(CmdForm::Shell("a".into())));
    }
}
