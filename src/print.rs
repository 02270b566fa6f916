//! husk's own output: verdicts, listings and reports on stdout, messages on
//! stderr. Every write is checked and none panics (`println!` panics when
//! stdout is a full disk or a closed pipe, which killed husk with 101).
//!
//! A stdout write that fails is remembered and later writes are skipped;
//! `finish` turns the failure into the exit: a closed pipe (`husk image ls |
//! head -n1`) ends husk as it ends `ls` (quietly, killed by SIGPIPE: 141 in
//! a shell), any other error (`> /dev/full`) is husk's failure (125, with
//! the reason on stderr), because output that was not delivered is lost
//! whatever the command did. A failed stderr write is ignored: there is no
//! one left to tell, and the exit code still says what happened.
//!
//! This module sits at the bottom: it imports nothing from the crate.

use std::io::Write;
use std::sync::Mutex;

/// The first failed stdout write, kind and text (later writes are skipped).
static STDOUT_FAILED: Mutex<Option<(std::io::ErrorKind, String)>> = Mutex::new(None);

fn failed() -> Option<(std::io::ErrorKind, String)> {
    STDOUT_FAILED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn remember(e: &std::io::Error) {
    let mut slot = STDOUT_FAILED.lock().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(|| (e.kind(), e.to_string()));
}

/// Runs one write against locked stdout, unless an earlier one failed.
fn with_stdout(f: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) {
    if failed().is_some() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = f(&mut out).and_then(|_| out.flush()) {
        remember(&e);
    }
}

/// Writes a formatted line to stdout (the `outln!` macro).
pub fn line_fmt(args: std::fmt::Arguments<'_>) {
    with_stdout(|o| {
        o.write_fmt(args)?;
        o.write_all(b"\n")
    });
}

/// Writes text to stdout as it is (no newline added).
pub fn text(s: &str) {
    with_stdout(|o| o.write_all(s.as_bytes()));
}

/// One JSON document and a newline on stdout, streamed (a verdict with
/// captured output is never copied into a second buffer).
pub fn json_line(value: &impl serde::Serialize) {
    with_stdout(|o| {
        serde_json::to_writer(&mut *o, value).map_err(std::io::Error::from)?;
        o.write_all(b"\n")
    });
}

/// A write to stdout that went around this module failed (`--json-stream`
/// events are written to fd 1 directly): later writes are skipped and
/// `finish` reports it like any other.
pub fn stdout_failed(e: &std::io::Error) {
    remember(e);
}

/// Writes formatted text to stderr, ignoring failure (the `errln!` macro).
pub fn err_fmt(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|_| err.write_all(b"\n"));
}

/// False once a stdout write failed (its output is lost).
pub fn stdout_ok() -> bool {
    failed().is_none()
}

/// True when stdout's reader went away (EPIPE); `main` then ends husk by
/// SIGPIPE.
pub fn stdout_closed() -> bool {
    failed().is_some_and(|(kind, _)| kind == std::io::ErrorKind::BrokenPipe)
}

/// The exit code once the command is done: `code`, unless stdout could not
/// be written (then 125 and the reason on stderr; a closed pipe keeps
/// `code`, and `main` checks `stdout_closed`).
pub fn finish(code: i32, husk_failed: i32) -> i32 {
    with_stdout(|o| o.flush());
    match failed() {
        None => code,
        Some((std::io::ErrorKind::BrokenPipe, _)) => code,
        Some((_, why)) => {
            err_fmt(format_args!("husk: writing to stdout failed: {why}; the output is lost"));
            husk_failed
        }
    }
}

/// `println!` that never panics; see the module text.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::print::line_fmt(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::print::err_fmt(format_args!($($arg)*)) };
}
