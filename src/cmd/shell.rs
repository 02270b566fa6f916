//! `husk completions` and `husk man` (src/cli/shell.rs): both walk the
//! clap tree of husk's own command line, so they list exactly the flags
//! the parser takes. Hidden subcommands (husk's internal roles) are left
//! out of both.

use crate::cli::shell::{CompletionsArgs, ManArgs, Shell};
use crate::outcome::EXIT_HUSK_FAILED;
use clap::CommandFactory;
use std::path::{Path, PathBuf};

pub fn completions(a: CompletionsArgs) -> i32 {
    let mut cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    match a.shell {
        Shell::Bash => clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "husk", &mut out),
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "husk", &mut out),
        Shell::Fish => clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, "husk", &mut out),
    }
    crate::outln!("{}", String::from_utf8_lossy(&out).trim_end());
    0
}

/// Why `husk man` wrote no (or not every) page.
#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("creating {}: {source}", dir.display())]
    Dir { dir: PathBuf, source: std::io::Error },
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

pub fn man(a: ManArgs) -> i32 {
    match write_pages(&a.dir) {
        Ok(paths) => {
            crate::outln!("wrote {} man pages to {}", paths.len(), a.dir.display());
            0
        }
        Err(e) => {
            crate::errln!("husk: man: {e}");
            EXIT_HUSK_FAILED
        }
    }
}

/// One page per command: `husk.1`, and `husk-SUB[-SUBSUB].1` for every
/// visible subcommand, as git and cargo name theirs.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, ManError> {
    std::fs::create_dir_all(dir).map_err(|source| ManError::Dir { dir: dir.to_path_buf(), source })?;
    let mut cmd = crate::cli::Cli::command();
    cmd.build();
    let mut written = Vec::new();
    page(&cmd, "husk", dir, &mut written)?;
    Ok(written)
}

fn page(cmd: &clap::Command, name: &str, dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), ManError> {
    let mut buf = Vec::new();
    // After build(), a subcommand's display name is `husk-run`, its bin
    // name `husk run`: the page's title and synopsis.
    let render = clap_mangen::Man::new(cmd.clone()).title(name.to_ascii_uppercase()).render(&mut buf);
    let path = dir.join(format!("{name}.1"));
    render
        .and_then(|()| std::fs::write(&path, &buf))
        .map_err(|source| ManError::Write { path: path.clone(), source })?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        page(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
