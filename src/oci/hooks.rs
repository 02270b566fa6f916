//! Runtime-spec hooks: `path` executed with `args` verbatim (args[0] is
//! argv[0]), exactly `env`, the container's state JSON on stdin, and an
//! optional `timeout` in seconds. A hook's own output never reaches the
//! caller's fds (they may be the container's): it is captured and, when the
//! hook fails, part of the error.

use super::state::Hook;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{kind} hook {path}: cannot start it: {source}")]
    Spawn { kind: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{kind} hook {path} failed ({status}): {output}")]
    Failed { kind: &'static str, path: PathBuf, status: String, output: String },
    #[error("{kind} hook {path} ran past its timeout of {secs} s and was killed")]
    Timeout { kind: &'static str, path: PathBuf, secs: i64 },
}

/// Runs `hooks` in order; the first failure stops the rest.
pub fn run_all(kind: &'static str, hooks: &[Hook], state: &serde_json::Value) -> Result<(), HookError> {
    let input = serde_json::to_vec(state).expect("state serializes");
    for h in hooks {
        run_one(kind, h, &input)?;
    }
    Ok(())
}

fn run_one(kind: &'static str, h: &Hook, input: &[u8]) -> Result<(), HookError> {
    let mut cmd = Command::new(&h.path);
    if let Some((first, rest)) = h.args.split_first() {
        cmd.arg0(first).args(rest);
    }
    cmd.env_clear().envs(h.env.iter().filter_map(|kv| kv.split_once('=')));
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let spawn_err = |source| HookError::Spawn { kind, path: h.path.clone(), source };
    let mut child = cmd.spawn().map_err(spawn_err)?;
    // A hook that does not read its stdin must not fail the write (EPIPE).
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(64 << 10).read_to_end(&mut text);
        }
        if let Some(e) = err.as_mut() {
            let _ = e.take(64 << 10).read_to_end(&mut text);
        }
        text
    });
    let status = match h.timeout.filter(|t| *t > 0) {
        None => child.wait().map_err(spawn_err)?,
        Some(secs) => {
            let deadline = Instant::now() + Duration::from_secs(secs as u64);
            loop {
                if let Some(s) = child.try_wait().map_err(spawn_err)? {
                    break s;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(HookError::Timeout { kind, path: h.path.clone(), secs });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    let output = reader.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    let status = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (_, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown status".into(),
    };
    Err(HookError::Failed {
        kind,
        path: h.path.clone(),
        status,
        output: String::from_utf8_lossy(&output).trim().into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_gets_args_verbatim_env_exactly_and_state_on_stdin() {
        let out = std::env::temp_dir().join(format!("husk-hook-{}", std::process::id()));
        let h = Hook {
            path: "/bin/sh".into(),
            args: vec!["sh".into(), "-c".into(), format!("echo \"$0 $FOO $HOME\" > {0}; cat >> {0}", out.display())],
            env: vec!["FOO=bar".into()],
            timeout: None,
        };
        run_all("prestart", &[h], &serde_json::json!({"id": "c"})).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(text, "sh bar \n{\"id\":\"c\"}");
        std::fs::remove_file(out).unwrap();
        let bad = Hook {
            path: "/bin/sh".into(),
            args: vec!["sh".into(), "-c".into(), "echo no >&2; exit 3".into()],
            env: vec![],
            timeout: None,
        };
        let e = run_all("poststop", &[bad], &serde_json::json!({})).unwrap_err().to_string();
        assert!(e.contains("exit status 3") && e.contains("no"), "{e}");
    }
}
