//! Runs husk's own subcommands (`create`, `exec`, `run`, `rm`) as child
//! processes. The MCP server forks no sandbox itself: every sandbox is made
//! and watched by a husk process of its own, exactly as from a shell, and
//! this process stays a plain single-threaded client.

use serde_json::Value;
use std::ffi::OsString;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("starting {exe}: {source}")]
    Spawn { exe: PathBuf, source: std::io::Error },
    #[error("passing stdin to husk: {0}")]
    Stdin(std::io::Error),
    #[error("husk {what} printed no JSON (exit {code:?}): {stderr}")]
    NoJson { what: String, code: Option<i32>, stderr: String },
}

/// What a husk child printed.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Ran {
    /// stdout as one JSON object.
    pub fn json(self, what: &str) -> Result<Value, RunError> {
        match serde_json::from_slice::<Value>(&self.stdout) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(RunError::NoJson { what: what.to_string(), code: self.code, stderr: self.stderr }),
        }
    }
}

pub struct Runner {
    /// This very binary (a husk upgraded on disk mid-session is not mixed in).
    pub exe: PathBuf,
    /// `--root` / `--state-dir` as `husk mcp` was given them.
    pub globals: Vec<OsString>,
}

impl Runner {
    pub fn run(&self, args: &[OsString], stdin: Option<&[u8]>) -> Result<Ran, RunError> {
        let input = match stdin {
            // A memfd holds stdin: the child reads it at its pace while we
            // wait for its output, with no writer thread and no pipe to
            // deadlock on when both are large.
            Some(data) => Stdio::from(memfd_with(data).map_err(RunError::Stdin)?),
            None => Stdio::null(),
        };
        let out = Command::new(&self.exe)
            .args(&self.globals)
            .args(args)
            .stdin(input)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| RunError::Spawn { exe: self.exe.clone(), source })?;
        Ok(Ran {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn memfd_with(data: &[u8]) -> std::io::Result<std::fs::File> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(c"husk-mcp-stdin", MFdFlags::MFD_CLOEXEC).map_err(std::io::Error::from)?;
    let mut f = std::fs::File::from(fd);
    f.write_all(data)?;
    f.seek(SeekFrom::Start(0))?;
    Ok(f)
}
